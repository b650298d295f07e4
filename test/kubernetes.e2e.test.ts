/**
 * `flannel-guard watch` with the Kubernetes source, end to end: the flannel-
 * like test bed (every node with a real systemd-udevd, MACAddressPolicy=
 * persistent), the guard run as users run it (the bin, --kubeconfig, --node),
 * and a local stand-in for kube-apiserver holding each node's Node object
 * with flannel's annotations (test/support/fake-apiserver.ts; what it does not
 * cover is listed at the top of test/kubernetes.test.ts).
 *
 * - revert: the guard reads the published VtepMAC from the annotation and
 *   corrects a rewrite that happened before it started (the case first-seen
 *   cannot cover), follows a flannel restart that republishes the VtepMAC,
 *   keeps guarding with the last known value while the API server is away;
 * - adopt: the annotation follows the device (a merge patch, retried on 409),
 *   the test bed reprograms the other nodes from the updated annotation as
 *   flanneld does on a node update, and traffic is back;
 * - Events on the Node, /metrics, /healthz and /readyz scraped over loopback.
 *
 * The /metrics text and the Events of the first test are written to
 * build/kubernetes-e2e/ (samples for the documentation).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { backendDataKey, readBackendData } from '../lib/kubernetes/annotation';
import { FakeApiServer, type JsonObject } from './support/fake-apiserver';
import { startNodeGuard, type GuardProcess, type GuardLine } from './support/guard-process';
import { httpGet } from './support/loopback-http';
import { tempDirPrefix, waitFor } from './support/netns';
import { parseExposition, valueOf, type Exposition } from './support/prometheus';
import { FlannelTestbed, type TestbedNode } from './support/testbed';

const V4 = backendDataKey('ipv4');
const BROKEN_PROBE = { timeoutMs: 1500 };
const SAMPLES = join(__dirname, '..', '..', 'build', 'kubernetes-e2e');

function backendData(mac: string): string {
  return JSON.stringify({ VNI: 1, VtepMAC: mac });
}

function metaOf(object: JsonObject): JsonObject {
  return object.metadata as JsonObject;
}

describe('flannel-guard watch with the Kubernetes source, in the test bed (real systemd-udevd)', function () {
  this.timeout(180_000);
  let bed: FlannelTestbed;
  let fake: FakeApiServer;
  let dir: string;
  let kubeconfig: string;
  let guards: GuardProcess[] = [];

  before(async function () {
    fake = await FakeApiServer.start();
    dir = mkdtempSync(tempDirPrefix('kube'));
    kubeconfig = fake.writeKubeconfig(dir);
    bed = await FlannelTestbed.create({ nodes: 2, udev: true });
    for (const node of bed.nodes) {
      fake.addNode({
        name: node.name,
        podCIDR: node.podCidr,
        internalIP: node.underlayIp,
        annotations: {
          [V4]: backendData(node.publishedMac),
          'flannel.alpha.coreos.com/backend-type': 'vxlan',
          'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
          'flannel.alpha.coreos.com/public-ip': node.underlayIp,
        },
      });
    }
  });

  after(async function () {
    await Promise.all(guards.map((guard) => guard.stop()));
    await bed.destroy();
    await fake.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const nodes = (): [TestbedNode, TestbedNode] => [bed.node(1), bed.node(2)];

  function startGuard(node: TestbedNode, extra: string[] = []): Promise<GuardProcess> {
    return startNodeGuard(node, kubeconfig, extra);
  }

  async function allTrafficWorks(): Promise<void> {
    const [n1, n2] = nodes();
    assert.equal(await bed.ping(n1, n2), true, 'ping 1 -> 2');
    assert.equal(await bed.ping(n2, n1), true, 'ping 2 -> 1');
    assert.equal(await bed.tcp(n1, n2, { bytes: 20_000 }), true, 'TCP 1 -> 2');
    assert.equal(await bed.tcp(n2, n1, { bytes: 20_000 }), true, 'TCP 2 -> 1');
  }

  function endpointOf(guard: GuardProcess): string {
    const ready = guard.events('ready')[0];
    assert.ok(typeof ready?.metrics === 'string', JSON.stringify(ready));
    return `http://${ready.metrics}`;
  }

  async function scrape(guard: GuardProcess): Promise<{ text: string; exposition: Exposition }> {
    const answer = await httpGet(`${endpointOf(guard)}/metrics`);
    assert.equal(answer.status, 200);
    assert.match(answer.type, /^text\/plain; version=0\.0\.4/);
    return { text: answer.body, exposition: parseExposition(answer.body) };
  }

  async function probe(guard: GuardProcess, path: '/healthz' | '/readyz'): Promise<JsonObject> {
    const answer = await httpGet(`${endpointOf(guard)}${path}`);
    return { httpStatus: answer.status, ...(JSON.parse(answer.body) as JsonObject) };
  }

  function eventsOf(node: string): JsonObject[] {
    // events.k8s.io/v1, as the guard writes them to an API server that has the group.
    return fake.eventsV1().filter((e) => (e.regarding as JsonObject).name === node);
  }

  it('with the annotation as the source, corrects a rewrite that happened before it started', async function () {
    const [n1, n2] = nodes();
    const udevMacs = new Map<string, string>();
    for (const node of [n1, n2]) {
      const mac = await node.currentMac();
      assert.notEqual(mac, node.publishedMac, `${node.name} rewritten by udev before the guard`);
      udevMacs.set(node.name, mac);
    }
    assert.equal(await bed.ping(n1, n2, BROKEN_PROBE), false);

    guards = await Promise.all([n1, n2].map((node) => startGuard(node)));
    const rewrites = new Map<string, GuardLine>();
    for (const [index, node] of [n1, n2].entries()) {
      const guard = guards[index] as GuardProcess;
      const ready = guard.events('ready')[0] as GuardLine;
      const source = ready.source as { state: string; node: string; macs: object };
      assert.equal(source.state, 'synced');
      assert.equal(source.node, node.name);
      assert.deepEqual(source.macs, { 'flannel.1': node.publishedMac });
      const device = (
        ready.devices as { macSource: string; desiredMac: string; sourceName: string }[]
      )[0];
      assert.equal(device?.macSource, 'source');
      assert.equal(device.sourceName, 'kubernetes');
      assert.equal(device.desiredMac, node.publishedMac);
      const rewrite = await guard.waitFor((l) => l.event === 'rewrite');
      assert.equal(rewrite.found, 'start');
      assert.equal(rewrite.writer, 'udev-persistent-policy');
      assert.equal(rewrite.expected, node.publishedMac);
      assert.equal(rewrite.mac, udevMacs.get(node.name));
      rewrites.set(node.name, rewrite);
      const restored = await guard.waitFor((l) => l.event === 'restored');
      assert.equal(restored.mac, node.publishedMac);
      assert.equal(restored.neighbours, 1);
      assert.equal(await node.currentMac(), node.publishedMac);
    }
    await allTrafficWorks();

    // Events on each Node: the rewrite (both MACs, the likely cause) and the correction.
    const uid = metaOf(fake.node('node1')).uid;
    await waitFor(() => eventsOf('node1').length === 2, { timeoutMs: 10_000, what: 'two Events' });
    const events = eventsOf('node1');
    const [rewritten, restoredEvent] = events;
    assert.equal(rewritten?.reason, 'VtepMacRewritten');
    assert.equal(rewritten.type, 'Warning');
    assert.equal(
      rewritten.note,
      `flannel.1 has MAC ${udevMacs.get('node1')}; the other nodes use ${n1.publishedMac}. Written by udev-persistent-policy: ${String(rewrites.get('node1')?.detail)}`,
    );
    assert.equal(restoredEvent?.reason, 'VtepMacRestored');
    assert.equal(restoredEvent.type, 'Normal');
    assert.equal(
      restoredEvent.note,
      `flannel.1 MAC set back to ${n1.publishedMac} from ${udevMacs.get('node1')}; 1 permanent neighbour entries restored`,
    );
    for (const event of events) {
      assert.deepEqual(event.regarding, {
        kind: 'Node',
        apiVersion: 'v1',
        name: 'node1',
        uid,
      });
      assert.deepEqual(
        [event.reportingController, event.reportingInstance],
        ['flannel-guard', 'node1'],
      );
      assert.equal(metaOf(event).namespace, 'default');
      assert.equal(event.series, undefined, 'each happened once');
    }

    // Metrics, health and readiness over loopback.
    const guard = guards[0] as GuardProcess;
    await waitFor(
      async () =>
        valueOf((await scrape(guard)).exposition, 'flannel_guard_kubernetes_events_total', {
          result: 'created',
        }) === 2,
      { timeoutMs: 5000, what: 'the Events in the metrics' },
    );
    const { text, exposition } = await scrape(guard);
    const v = (name: string, labels: Record<string, string> = {}): number | undefined =>
      valueOf(exposition, name, labels);
    assert.equal(
      v('flannel_guard_rewrites_total', { device: 'flannel.1', cause: 'udev-persistent-policy' }),
      1,
    );
    assert.equal(v('flannel_guard_corrections_total', { device: 'flannel.1' }), 1);
    assert.equal(v('flannel_guard_drift', { device: 'flannel.1' }), 0);
    assert.equal(v('flannel_guard_neighbour_restores_total', { device: 'flannel.1' }), 1);
    assert.equal(v('flannel_guard_restore_latency_seconds_count', { device: 'flannel.1' }), 1);
    const latency = v('flannel_guard_restore_latency_seconds_sum', { device: 'flannel.1' });
    assert.ok(latency !== undefined && latency > 0 && latency < 1, `latency ${latency}`);
    assert.equal(v('flannel_guard_offload_applications_total', { device: 'flannel.1' }), 1);
    assert.equal(v('flannel_guard_kubernetes_source_state', { state: 'synced' }), 1);
    assert.equal(v('flannel_guard_kubernetes_source_state', { state: 'degraded' }), 0);
    assert.equal(v('flannel_guard_ready'), 1);
    assert.equal(v('flannel_guard_managed_devices'), 1);
    assert.equal(v('flannel_guard_contested', { device: 'flannel.1', what: 'mac' }), undefined);
    // promtool's lint of the live exposition (names, types, help, units): nothing to say.
    const linted = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(linted.status, 0, `${linted.stdout}${linted.stderr}`);
    assert.equal(`${linted.stdout}${linted.stderr}`.trim(), '');
    const health = await probe(guard, '/healthz');
    assert.equal(health.httpStatus, 200);
    assert.equal(health.status, 'ok');
    const ready = await probe(guard, '/readyz');
    assert.equal(ready.httpStatus, 200);
    assert.equal((ready.source as JsonObject).state, 'synced');
    mkdirSync(SAMPLES, { recursive: true });
    writeFileSync(join(SAMPLES, 'metrics-node1.txt'), text);
    writeFileSync(join(SAMPLES, 'events-node1.json'), `${JSON.stringify(events, null, 2)}\n`);
  });

  it('follows a flannel restart that republishes the VtepMAC, within one watch event', async function () {
    const [n1] = nodes();
    const guard = guards[0] as GuardProcess;
    const reads = fake.requests.filter(
      (r) => r.method === 'GET' && r.path === '/api/v1/nodes/node1',
    );
    const mac = await bed.restartFlannel(n1);
    // flanneld publishes the new device's MAC on its Node.
    fake.setAnnotation('node1', V4, backendData(mac));
    await waitFor(async () => (await n1.currentMac()) === mac, {
      timeoutMs: 10_000,
      what: `${n1.name} at the republished ${mac}`,
    });
    await allTrafficWorks();
    assert.equal(
      fake.requests.filter((r) => r.method === 'GET' && r.path === '/api/v1/nodes/node1').length,
      reads.length,
      'followed through the watch, not by reading the Node again',
    );
    const ready = await probe(guard, '/readyz');
    assert.deepEqual((ready.source as JsonObject).state, 'synced');
  });

  it('keeps guarding with the last known value while the API server is away, then recovers by itself', async function () {
    const [, n2] = nodes();
    const guard = guards[1] as GuardProcess;
    const from = guard.lines.length;
    await fake.stop();
    const degraded = await guard.waitFor(
      (l) => l.event === 'source' && l.state === 'degraded',
      10_000,
      from,
    );
    assert.equal(degraded.problem, 'api-unreachable');
    assert.equal(degraded.level, 'warn');
    const ready = await probe(guard, '/readyz');
    assert.equal(ready.httpStatus, 200, 'still ready: guarding with the last known value');
    assert.equal((ready.source as JsonObject).state, 'degraded');
    assert.equal(
      valueOf((await scrape(guard)).exposition, 'flannel_guard_kubernetes_source_state', {
        state: 'degraded',
      }),
      1,
    );

    await n2.ns.ip(['link', 'set', 'flannel.1', 'address', '0e:12:34:56:78:9c']);
    const restored = await guard.waitFor((l) => l.event === 'restored', 5000, from);
    assert.equal(restored.mac, n2.publishedMac);
    assert.equal(await n2.currentMac(), n2.publishedMac);
    await allTrafficWorks();

    await fake.restart();
    await guard.waitFor((l) => l.event === 'source' && l.state === 'synced', 20_000, from);
    // The Events of the outage reach the API server once it is back.
    await waitFor(
      () =>
        eventsOf('node2').some(
          (e) => e.reason === 'VtepMacRewritten' && String(e.note).includes('0e:12:34:56:78:9c'),
        ),
      { timeoutMs: 30_000, what: 'the rewrite Event recorded after the outage' },
    );
  });

  it('--strategy adopt: the annotation follows the device; the other nodes reprogrammed from it get traffic back', async function () {
    const [n1, n2] = nodes();
    assert.deepEqual(await Promise.all(guards.map((guard) => guard.stop())), [0, 0]);
    // flanneld on every node: a Node update with a new VtepMAC reprograms that node's entries.
    let flanneld: Promise<void> = Promise.resolve();
    const onNode = ({ type, node }: { type: string; node: JsonObject }): void => {
      const peer = bed.nodes.find((n) => n.name === metaOf(node).name);
      const reading = readBackendData(metaOf(node).annotations as Record<string, string>, 'ipv4');
      if (type !== 'MODIFIED' || !peer || reading.state !== 'valid') return;
      if (reading.mac === peer.publishedMac) return;
      flanneld = flanneld.then(() => bed.reprogramPeers(peer, reading.mac));
    };
    fake.on('node', onNode);
    try {
      // Rewritten while no guard runs: the peers' entries now point at a MAC that is gone.
      const published = n2.publishedMac;
      const first = '0e:12:34:56:78:a1';
      await n2.ns.ip(['link', 'set', 'flannel.1', 'address', first]);
      // The change flushed node2's own entries; put back as flanneld programs them at start
      // (the guard restores only entries it has seen).
      await bed.programLocal(n2);
      assert.equal(await bed.ping(n1, n2, BROKEN_PROBE), false);

      guards = await Promise.all([n1, n2].map((node) => startGuard(node, ['--strategy', 'adopt'])));
      const guard = guards[1] as GuardProcess;
      const rewrite = await guard.waitFor((l) => l.event === 'rewrite');
      assert.equal(rewrite.found, 'start');
      assert.equal(rewrite.writer, 'another-writer');
      const adopted = await guard.waitFor((l) => l.event === 'adopted', 10_000);
      assert.equal(adopted.mac, first);
      assert.equal(adopted.previous, published);
      const annotation = await guard.waitFor((l) => l.event === 'annotation');
      assert.equal(annotation.result, 'stored');
      assert.equal(await n2.currentMac(), first, 'the device keeps its MAC');
      await waitFor(() => n2.publishedMac === first, {
        timeoutMs: 10_000,
        what: 'flanneld on node1',
      });
      await flanneld;
      assert.equal(fake.annotations('node2')[V4], backendData(first));
      const neighbours = await n1.neighbours();
      assert.deepEqual(
        neighbours.map((n) => [n.dst, n.lladdr]),
        [[n2.vtepIp, first]],
      );
      await allTrafficWorks();

      // A rewrite while the guard runs, racing a concurrent update of the Node: 409, retried.
      const second = '0e:12:34:56:78:a2';
      const from = guard.lines.length;
      fake.beforeNextPatch(() => {
        fake.setAnnotation('node2', 'flannel.alpha.coreos.com/public-ip', n2.underlayIp);
        fake.setAnnotation('node2', 'example.com/concurrent', 'kept');
      });
      await n2.ns.ip(['link', 'set', 'flannel.1', 'address', second]);
      const adoptedAgain = await guard.waitFor((l) => l.event === 'adopted', 10_000, from);
      assert.equal(adoptedAgain.mac, second);
      assert.equal(adoptedAgain.previous, first);
      assert.equal(adoptedAgain.neighbours, 1, "node2's own entry, flushed by the change, is back");
      const stored = await guard.waitFor((l) => l.event === 'annotation', 10_000, from);
      assert.equal(stored.conflicts, 1);
      const patches = fake.requests
        .filter((r) => r.method === 'PATCH' && r.path === '/api/v1/nodes/node2')
        .map((r) => r.status);
      assert.deepEqual(patches, [200, 409, 200]);
      const annotations = fake.annotations('node2');
      assert.equal(annotations[V4], backendData(second));
      assert.equal(annotations['example.com/concurrent'], 'kept');
      assert.equal(annotations['flannel.alpha.coreos.com/kube-subnet-manager'], 'true');
      await waitFor(() => n2.publishedMac === second, { timeoutMs: 10_000, what: 'flanneld' });
      await flanneld;
      assert.equal(await n2.currentMac(), second);
      assert.equal((await n2.neighbours()).length, 1);
      await allTrafficWorks();

      await waitFor(
        () => eventsOf('node2').filter((e) => e.reason === 'VtepMacAdopted').length === 2,
        { timeoutMs: 10_000, what: 'the adoption Events' },
      );
      const adoptedEvent = eventsOf('node2').find(
        (e) => e.reason === 'VtepMacAdopted' && String(e.note).includes(second),
      );
      assert.match(
        String(adoptedEvent?.note),
        new RegExp(
          `^flannel\\.1 keeps MAC ${second} instead of ${first}: ${V4.replace(/\./g, '\\.')} now publishes`,
        ),
      );
      const { exposition } = await scrape(guard);
      assert.equal(
        valueOf(exposition, 'flannel_guard_adoptions_total', { device: 'flannel.1' }),
        2,
      );
      assert.equal(
        valueOf(exposition, 'flannel_guard_kubernetes_annotation_patches_total', {
          result: 'conflict',
        }),
        1,
      );
      assert.equal(
        valueOf(exposition, 'flannel_guard_kubernetes_annotation_patches_total', {
          result: 'stored',
        }),
        2,
      );
      assert.equal(
        valueOf(exposition, 'flannel_guard_adopt_latency_seconds_count', { device: 'flannel.1' }),
        2,
      );
    } finally {
      fake.off('node', onNode);
    }
    assert.deepEqual(await Promise.all(guards.map((guard) => guard.stop('SIGINT'))), [0, 0]);
    // Every line, the Kubernetes ones included: one JSON object, event, time and level first.
    for (const guard of guards) {
      assert.equal(guard.lines[0]?.event, 'ready');
      for (const line of guard.lines) {
        assert.deepEqual(
          Object.keys(line).slice(0, 3),
          ['event', 'time', 'level'],
          JSON.stringify(line),
        );
      }
    }
    assert.ok((guards[1] as GuardProcess).lines.some((line) => line.event === 'annotation'));
  });
});
