/**
 * deploy/monitoring/: the PodMonitor, alerts and dashboard for kube-prometheus-stack, checked
 * by the real tools: `kubectl kustomize` renders the overlay (and deploy/ itself), promtool
 * checks the rules and runs their unit tests (test/fixtures/alerts.test.yaml: each alert fires
 * and clears), and every metric the rules and the dashboard name is one the guard exports.
 * `promtool check metrics` on a live /metrics after a rewrite is in kubernetes.e2e.test.ts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { loadClientNode } from '../lib/kubernetes/client-node';
import { GuardMetrics } from '../lib/kubernetes/metrics';
import { tempDirPrefix } from './support/netns';

const ROOT = join(__dirname, '..', '..');
const MONITORING = join(ROOT, 'deploy', 'monitoring');
const ALERT_TESTS = join(ROOT, 'test', 'fixtures', 'alerts.test.yaml');

interface Manifest {
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}
interface AlertRule {
  alert?: string;
  record?: string;
  expr: string;
}
interface RuleFile {
  groups: { name: string; rules: AlertRule[] }[];
}
interface AlertTests {
  tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
}

function tool(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', timeout: 60_000 });
  if (result.error) throw result.error;
  assert.equal(result.status, 0, `${command} ${args.join(' ')}:\n${result.stdout}${result.stderr}`);
  return result.stdout + result.stderr;
}

async function rendered(dir: string): Promise<Manifest[]> {
  const k8s = await loadClientNode();
  return k8s.loadAllYaml(tool('kubectl', ['kustomize', dir], ROOT)) as Manifest[];
}

/** The metric names an expression uses, as the registry spells them (histogram series folded). */
const metricsIn = (expr: string): string[] =>
  [...expr.matchAll(/\bflannel_guard_[a-z_]+/g)].map((m) =>
    m[0].replace(/_(bucket|sum|count)$/, ''),
  );

describe('deploy/monitoring: alerts, dashboard and scraping, by promtool and kubectl', function () {
  this.timeout(120_000);
  let dir: string;
  let manifests: Manifest[];
  const byKind = (kind: string): Manifest => {
    const found = manifests.filter((m) => m.kind === kind);
    assert.equal(found.length, 1, `one ${kind}`);
    return found[0] as Manifest;
  };
  const ruleFile = (): RuleFile => byKind('PrometheusRule').spec as unknown as RuleFile;
  const alertNames = (): string[] =>
    ruleFile().groups.flatMap((g) => g.rules.flatMap((r) => (r.alert ? [r.alert] : [])));

  /** Runs promtool's unit tests on RULES; returns its status and output. */
  const testRules = (rules: RuleFile): { status: number | null; output: string } => {
    writeFileSync(join(dir, 'rules.yaml'), JSON.stringify(rules));
    copyFileSync(ALERT_TESTS, join(dir, 'alerts.test.yaml'));
    const run = spawnSync('promtool', ['test', 'rules', 'alerts.test.yaml'], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
    });
    return { status: run.status, output: run.stdout + run.stderr };
  };

  before(async function () {
    dir = mkdtempSync(tempDirPrefix('fgt-monitoring-'));
    manifests = await rendered(MONITORING);
  });

  after(function () {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('kubectl kustomize renders the overlay: a PodMonitor, a PrometheusRule, a dashboard ConfigMap, with the labels the stack selects by', function () {
    assert.deepEqual(manifests.map((m) => m.kind).sort(), [
      'ConfigMap',
      'PodMonitor',
      'PrometheusRule',
    ]);
    for (const m of manifests) assert.equal(m.metadata.namespace, 'kube-flannel', m.kind);
    assert.equal(byKind('PrometheusRule').metadata.labels?.release, 'kube-prometheus-stack');
    assert.equal(byKind('PodMonitor').metadata.labels?.release, 'kube-prometheus-stack');
    const dashboard = byKind('ConfigMap');
    assert.equal(dashboard.metadata.labels?.grafana_dashboard, '1');
    assert.equal(dashboard.metadata.name, 'flannel-guard-dashboard', 'no name suffix');
    assert.equal(
      dashboard.data?.['flannel-guard.json'],
      readFileSync(join(MONITORING, 'dashboard.json'), 'utf8'),
    );
  });

  it("the PodMonitor selects the DaemonSet's pods and scrapes the port the guard serves", async function () {
    const base = await rendered(join(ROOT, 'deploy'));
    const daemonSet = base.find((m) => m.kind === 'DaemonSet');
    assert.ok(daemonSet, 'kubectl kustomize deploy/ renders the DaemonSet');
    const template = (daemonSet.spec as { template: Record<string, unknown> }).template as {
      metadata: { labels: Record<string, string> };
      spec: { containers: { ports?: { name: string; containerPort: number }[] }[] };
    };
    const spec = byKind('PodMonitor').spec as {
      selector: { matchLabels: Record<string, string> };
      podMetricsEndpoints: { port: string; path: string; relabelings: unknown[] }[];
    };
    for (const [key, value] of Object.entries(spec.selector.matchLabels)) {
      assert.equal(template.metadata.labels[key], value, `pods labelled ${key}=${value}`);
    }
    const ports = template.spec.containers.flatMap((c) => c.ports ?? []).map((p) => p.name);
    for (const endpoint of spec.podMetricsEndpoints) {
      assert.ok(ports.includes(endpoint.port), `the container has a port named ${endpoint.port}`);
      assert.equal(endpoint.path, '/metrics');
      assert.deepEqual(endpoint.relabelings, [
        { sourceLabels: ['__meta_kubernetes_pod_node_name'], targetLabel: 'node' },
      ]);
    }
  });

  it('promtool checks the rules, and its unit tests fire and clear every alert', async function () {
    writeFileSync(join(dir, 'rules.yaml'), JSON.stringify(ruleFile()));
    assert.match(
      tool('promtool', ['check', 'rules', 'rules.yaml'], dir),
      /SUCCESS: 10 rules found/,
    );
    const run = testRules(ruleFile());
    assert.equal(run.status, 0, run.output);
    assert.match(run.output, /SUCCESS/);
    // Every alert has a case where it fires and a later one where it is cleared.
    const k8s = await loadClientNode();
    const [tests] = k8s.loadAllYaml(readFileSync(ALERT_TESTS, 'utf8')) as AlertTests[];
    assert.ok(tests);
    const cases = tests.tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const alert of alertNames()) {
      const mine = cases.filter((c) => c.alertname === alert);
      assert.ok(
        mine.some((c) => c.exp_alerts.length > 0),
        `${alert} is tested firing`,
      );
      assert.ok(
        mine.some((c) => c.exp_alerts.length === 0),
        `${alert} is tested cleared`,
      );
    }
  });

  it('the unit tests fail when an alert never fires (they are not vacuous)', function () {
    for (const alert of alertNames()) {
      const silenced = structuredClone(ruleFile());
      for (const rule of silenced.groups.flatMap((g) => g.rules)) {
        if (rule.alert === alert) rule.expr = 'vector(1) == 0';
      }
      const run = testRules(silenced);
      assert.notEqual(run.status, 0, `${alert} silenced, and the tests still passed`);
      assert.match(run.output, new RegExp(`alertname: ${alert}`));
    }
  });

  it("the dashboard's queries are PromQL promtool accepts, over metrics the guard exports", function () {
    const dashboard = JSON.parse(readFileSync(join(MONITORING, 'dashboard.json'), 'utf8')) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
    assert.ok(exprs.length >= 8, 'the panels are read');
    // As recording rules, so that promtool parses each query ($node as a regex of Grafana's).
    const asRules: RuleFile = {
      groups: [
        {
          name: 'dashboard',
          rules: exprs.map((expr, i) => ({
            record: `dashboard:panel_${i}`,
            expr: expr.replaceAll('$node', '.*'),
          })),
        },
      ],
    };
    writeFileSync(join(dir, 'dashboard-rules.yaml'), JSON.stringify(asRules));
    tool('promtool', ['check', 'rules', 'dashboard-rules.yaml'], dir);
    const exported = new Set(
      [...new GuardMetrics().registry.getMetricsAsArray()].map((metric) => metric.name),
    );
    const named = new Set(
      [...exprs, ...ruleFile().groups.flatMap((g) => g.rules.map((r) => r.expr))].flatMap(
        metricsIn,
      ),
    );
    assert.ok(named.size >= 10, `the queries name the guard's metrics: ${[...named].join(', ')}`);
    for (const name of named) assert.ok(exported.has(name), `${name} is exported by the guard`);
  });
});
