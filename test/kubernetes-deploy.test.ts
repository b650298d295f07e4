/**
 * deploy/: the manifests as Kubernetes would read them, and the guard run the
 * way the DaemonSet runs it.
 *
 * - Every manifest field is one Kubernetes knows (a round trip through
 *   client-node's model serializer drops unknown fields: a typo shows);
 *   the DaemonSet runs on the host network with NET_ADMIN only, NODE_NAME
 *   from the downward API, kube-flannel's tolerations, probes on the port the
 *   guard serves; the ServiceAccount's permissions are exactly get/list/watch/patch
 *   nodes (list for the mesh view) and create/patch events in `default`; the image's
 *   ENTRYPOINT gives node the bin's interpreter flags.
 * - The guard is started with the DaemonSet's arguments and the ENTRYPOINT's node flags, inside a network
 *   namespace as a hostNetwork pod runs (no --netns), as root with only
 *   CAP_NET_ADMIN left (setpriv), NODE_NAME and KUBECONFIG in its environment
 *   (the stand-in for the in-cluster service account); the API server stand-in
 *   runs in the same namespace. The probes answer, a rewrite is corrected
 *   (revert) and adopted (adopt), and every request it made is allowed by
 *   deploy/rbac.yaml, evaluated as the API server's authorizer sees requests.
 *
 * Not covered here: the image (test/image.test.ts builds it with buildah and runs it with
 * podman), admission (Pod Security), real kubelet probes.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { loadClientNode } from '../lib/kubernetes/client-node';
import type { JsonObject, RequestRecord } from './support/fake-apiserver';
import { Netns, tempDirPrefix } from './support/netns';
import {
  CLI_NODE_FLAGS,
  CLI_PATH,
  inNetns,
  startCommand,
  type RunningChild,
} from './support/node-child';
import { parseExposition, valueOf } from './support/prometheus';

const ROOT = join(__dirname, '..', '..');
const DEPLOY = join(ROOT, 'deploy');
const FAKE_CHILD = join(__dirname, 'support', 'fake-apiserver-child.js');
const V4 = 'flannel.alpha.coreos.com/backend-data';
const MAC = '02:00:00:00:d5:01';

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

interface Manifest extends JsonObject {
  kind: string;
}

interface Attributes {
  verb: string;
  /** '' for core/v1. */
  apiGroup: string;
  resource: string;
  namespace: string;
  name: string;
}

/**
 * The authorizer's view of a request to /api/v1 or /apis/GROUP/VERSION, as kube-apiserver's
 * RequestInfoFactory derives it: a collection GET is list or (watch=true) watch, a
 * metadata.name field selector names the one object, a subresource is `resource/sub`.
 */
function attributesOf(request: RequestRecord): Attributes {
  const match =
    /^\/(?:api\/v1|apis\/([^/]+)\/[^/]+)(?:\/namespaces\/([^/]+))?\/([^/]+)(?:\/([^/]+))?(?:\/([^/]+))?$/.exec(
      request.path,
    );
  assert.ok(match?.[3], `not a resource path: ${request.path}`);
  let name = match[4] ?? '';
  const resource = match[5] === undefined ? match[3] : `${match[3]}/${match[5]}`;
  const collection = name === '';
  const verbs: Record<string, string> = {
    GET: collection ? 'list' : 'get',
    POST: 'create',
    PUT: 'update',
    PATCH: 'patch',
    DELETE: collection ? 'deletecollection' : 'delete',
  };
  let verb = verbs[request.method] ?? 'unknown';
  if (verb === 'list') {
    if (['true', '1'].includes(request.query.watch ?? '')) verb = 'watch';
    name = /^metadata\.name=([^,]+)$/.exec(request.query.fieldSelector ?? '')?.[1] ?? '';
  }
  return { verb, apiGroup: match[1] ?? '', resource, namespace: match[2] ?? '', name };
}

function allows(rules: PolicyRule[], attributes: Attributes): boolean {
  return rules.some(
    (rule) =>
      rule.apiGroups.includes(attributes.apiGroup) &&
      (rule.resources.includes(attributes.resource) || rule.resources.includes('*')) &&
      (rule.verbs.includes(attributes.verb) || rule.verbs.includes('*')) &&
      (rule.resourceNames === undefined || rule.resourceNames.includes(attributes.name)),
  );
}

/** Paths of `raw` that a round trip through client-node's model drops: fields Kubernetes does not know. */
function unknownFields(raw: unknown, round: unknown, path = ''): string[] {
  if (typeof raw !== 'object' || raw === null) return [];
  const other = (round ?? {}) as Record<string, unknown>;
  return Object.entries(raw as Record<string, unknown>).flatMap(([key, value]) =>
    other[key] === undefined
      ? [`${path}.${key}`]
      : unknownFields(value, other[key], `${path}.${key}`),
  );
}

/** A GET from inside the namespace (its loopback), as kubelet's probe would on the node. */
async function getInside(ns: Netns, url: string): Promise<{ status: number; body: string }> {
  const script = `require('http').get(process.argv[1], (r) => { let b = ''; r.on('data', (d) => (b += d)); r.on('end', () => console.log(JSON.stringify({ status: r.statusCode, body: b }))); }).on('error', (e) => { console.error(e.message); process.exit(1); });`;
  const result = await ns.run([process.execPath, '-e', script, url]);
  return JSON.parse(result.stdout) as { status: number; body: string };
}

interface Line {
  event: string;
  [field: string]: unknown;
}

/** The node flags of deploy/Dockerfile's ENTRYPOINT (`["node", FLAGS…, "/app/dist/lib/cli/main.js"]`). */
function imageNodeFlags(): string[] {
  const dockerfile = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8');
  const line = /^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)?.[1];
  assert.ok(line, 'deploy/Dockerfile has an ENTRYPOINT in exec form');
  const entrypoint = JSON.parse(line) as string[];
  assert.equal(entrypoint[0], 'node');
  assert.equal(entrypoint.at(-1), '/app/dist/lib/cli/main.js');
  return entrypoint.slice(1, -1);
}

describe('deploy/: manifests, and the guard run as the DaemonSet runs it', function () {
  this.timeout(90_000);
  let manifests: Manifest[];
  const byKind = (kind: string): Manifest => {
    const found = manifests.filter((m) => m.kind === kind);
    assert.equal(found.length, 1, `one ${kind}`);
    return found[0] as Manifest;
  };
  const daemonSet = (): JsonObject => byKind('DaemonSet');
  const podSpec = (): JsonObject =>
    ((daemonSet().spec as JsonObject).template as JsonObject).spec as JsonObject;
  const container = (): JsonObject => (podSpec().containers as JsonObject[])[0] as JsonObject;

  before(async function () {
    // What `kubectl apply -k deploy/` applies: the kustomization rendered by kubectl itself.
    const k8s = await loadClientNode();
    const kustomized = spawnSync('kubectl', ['kustomize', DEPLOY], { encoding: 'utf8' });
    assert.equal(kustomized.status, 0, kustomized.stderr);
    manifests = k8s.loadAllYaml(kustomized.stdout) as Manifest[];
  });

  // The optional grants: each file grants exactly the request that needs it, and the base
  // RBAC does not (test/kubernetes.test.ts drives the requests).
  const optionalGrants = [
    {
      file: 'node-condition-rbac.yaml',
      what: '--node-condition: patch nodes/status',
      rule: { apiGroups: [''], resources: ['nodes/status'], verbs: ['patch'] },
      request: { method: 'PATCH', path: '/api/v1/nodes/node1/status', query: {} },
      attributes: {
        verb: 'patch',
        apiGroup: '',
        resource: 'nodes/status',
        namespace: '',
        name: 'node1',
      },
    },
  ];
  for (const grant of optionalGrants) {
    it(`RBAC for ${grant.what}: exactly that, granted only by ${grant.file}`, async function () {
      const k8s = await loadClientNode();
      const extra = k8s.loadAllYaml(readFileSync(join(DEPLOY, grant.file), 'utf8')) as Manifest[];
      const role = extra.find((m) => m.kind === 'ClusterRole');
      assert.deepEqual(role?.rules, [grant.rule]);
      const binding = extra.find((m) => m.kind === 'ClusterRoleBinding');
      assert.deepEqual(binding?.subjects, byKind('ClusterRoleBinding').subjects);
      const write = attributesOf(grant.request as unknown as RequestRecord);
      assert.deepEqual(write, grant.attributes);
      assert.equal(allows(byKind('ClusterRole').rules as unknown as PolicyRule[], write), false);
      assert.equal(allows(role?.rules as unknown as PolicyRule[], write), true);
    });
  }

  it("every hostPath the DaemonSet mounts has its row in the README's permission table", function () {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const start = readme.indexOf('\n| permission | what for |');
    assert.ok(start >= 0, 'the README has the permission table');
    const rows = readme
      .slice(start, readme.indexOf('\n\n', start))
      .split('\n')
      .map((line) => line.split('|')[1] ?? '')
      .filter((permission) => permission.includes('`hostPath`'));
    const paths = (podSpec().volumes as JsonObject[]).flatMap((volume) => {
      const hostPath = volume.hostPath as JsonObject | undefined;
      return hostPath ? [String(hostPath.path)] : [];
    });
    assert.ok(paths.includes('/etc/machine-id') && paths.length >= 6, paths.join(' '));
    for (const path of paths) {
      assert.ok(
        rows.some((row) => row.includes(`\`${path}\``)),
        `${path}: no row of its own in ${rows.join('\n')}`,
      );
    }
  });

  it("the CNI shim: an init container copies it into /opt/cni/bin; the guard answers on its socket; the cni-conflist component, two lines away, keeps its entry in flannel's list", async function () {
    const spec = podSpec();
    const [init] = spec.initContainers as JsonObject[];
    assert.deepEqual(init?.args, ['cni', 'install', '--bin-dir=/host/opt/cni/bin']);
    assert.deepEqual((init?.securityContext as JsonObject).capabilities, { drop: ['ALL'] });
    const mounts = (c: JsonObject): [string, string][] =>
      (c.volumeMounts as JsonObject[]).map((m) => {
        const volume = (spec.volumes as JsonObject[]).find((v) => v.name === m.name);
        return [String((volume?.hostPath as JsonObject).path), String(m.mountPath)];
      });
    assert.deepEqual(mounts(init as JsonObject), [['/opt/cni/bin', '/host/opt/cni/bin']]);
    assert.ok((container().args as string[]).includes('--cni-socket=on'));
    // The README's two lines, in a kustomization of its own beside a copy of deploy/.
    const overlay = mkdtempSync(tempDirPrefix('overlay'));
    try {
      cpSync(DEPLOY, join(overlay, 'deploy'), { recursive: true });
      const kustomization = join(overlay, 'deploy', 'kustomization.yaml');
      writeFileSync(
        kustomization,
        `${readFileSync(kustomization, 'utf8')}components:\n  - cni-conflist\n`,
      );
      const rendered = spawnSync('kubectl', ['kustomize', join(overlay, 'deploy')], {
        encoding: 'utf8',
      });
      assert.equal(rendered.status, 0, rendered.stderr);
      const k8s = await loadClientNode();
      const withComponent = (k8s.loadAllYaml(rendered.stdout) as Manifest[]).find(
        (m) => m.kind === 'DaemonSet',
      ) as JsonObject;
      const podWith = ((withComponent.spec as JsonObject).template as JsonObject)
        .spec as JsonObject;
      const sidecar = (podWith.containers as JsonObject[]).find(
        (c) => c.name === 'cni-conflist',
      ) as JsonObject;
      assert.deepEqual(sidecar.args, [
        'cni',
        'install',
        '--bin-dir=/host/opt/cni/bin',
        '--conf-dir=/host/etc/cni/net.d',
        '--watch',
      ]);
      assert.equal(
        sidecar.image,
        container().image as string,
        'the same image, tag set by the kustomization',
      );
      const volume = (podWith.volumes as JsonObject[]).find((v) => v.name === 'cni-conf');
      assert.deepEqual(volume?.hostPath, { path: '/etc/cni/net.d', type: 'DirectoryOrCreate' });
      const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
      assert.ok(
        readme.includes('```yaml\ncomponents:\n  - cni-conflist\n```'),
        'the README shows the two lines',
      );
      assert.ok(readme.includes('`hostPath` `/etc/cni/net.d`'), 'and the permission it adds');
    } finally {
      rmSync(overlay, { recursive: true, force: true });
    }
  });

  it("the image's ENTRYPOINT runs node with the bin's interpreter flags", function () {
    assert.deepEqual(imageNodeFlags(), CLI_NODE_FLAGS);
    assert.ok(CLI_NODE_FLAGS.includes('--max-opt=1'), CLI_NODE_FLAGS.join(' '));
  });

  it('uses only fields Kubernetes knows', async function () {
    // The model serializer of client-node (not part of its index, hence the path).
    const { ObjectSerializer } =
      (await import('@kubernetes/client-node/dist/gen/models/ObjectSerializer.js')) as {
        ObjectSerializer: {
          serialize(data: unknown, type: string, format: string): unknown;
          deserialize(data: unknown, type: string, format: string): unknown;
        };
      };
    assert.deepEqual(manifests.map((m) => m.kind).sort(), [
      'ClusterRole',
      'ClusterRoleBinding',
      'DaemonSet',
      'Role',
      'RoleBinding',
      'ServiceAccount',
    ]);
    for (const manifest of manifests) {
      const type = `V1${manifest.kind}`;
      const round = JSON.parse(
        JSON.stringify(
          ObjectSerializer.serialize(ObjectSerializer.deserialize(manifest, type, ''), type, ''),
        ),
      ) as unknown;
      assert.deepEqual(unknownFields(manifest, round), [], manifest.kind);
    }
  });

  it('DaemonSet: host network, NET_ADMIN only, NODE_NAME from the downward API, kube-flannel tolerations, probes on the served port', function () {
    const account = byKind('ServiceAccount').metadata as JsonObject;
    assert.equal((daemonSet().metadata as JsonObject).namespace, 'kube-flannel');
    assert.equal(account.namespace, 'kube-flannel');
    const spec = podSpec();
    assert.equal(spec.serviceAccountName, account.name);
    assert.equal(spec.hostNetwork, true);
    assert.equal(spec.priorityClassName, 'system-node-critical');
    assert.deepEqual(spec.tolerations, [{ operator: 'Exists', effect: 'NoSchedule' }]);
    const c = container();
    const security = c.securityContext as JsonObject;
    assert.deepEqual(security.capabilities, { drop: ['ALL'], add: ['NET_ADMIN'] });
    assert.notEqual(security.privileged, true);
    assert.equal(security.allowPrivilegeEscalation, false);
    assert.equal(security.readOnlyRootFilesystem, true);
    assert.equal(security.runAsUser, 0, 'root: the capability must be effective');
    const env = c.env as JsonObject[];
    assert.deepEqual(
      env.find((e) => e.name === 'NODE_NAME'),
      { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
    );
    const args = c.args as string[];
    assert.deepEqual(args.slice(0, 2), ['watch', '--json']);
    const address = args.find((a) => a.startsWith('--metrics-address='));
    assert.equal(address, '--metrics-address=$(POD_IP):9464');
    const ports = c.ports as JsonObject[];
    assert.deepEqual(ports, [{ name: 'metrics', containerPort: 9464, protocol: 'TCP' }]);
    assert.deepEqual((c.livenessProbe as JsonObject).httpGet, {
      path: '/healthz',
      port: 'metrics',
    });
    assert.deepEqual((c.readinessProbe as JsonObject).httpGet, {
      path: '/readyz',
      port: 'metrics',
    });
  });

  it('RBAC: get/list/watch/patch nodes, create/patch events in default, bound to the ServiceAccount', function () {
    assert.deepEqual(byKind('ClusterRole').rules, [
      { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] },
    ]);
    const role = byKind('Role');
    assert.equal((role.metadata as JsonObject).namespace, 'default');
    assert.deepEqual(role.rules, [
      { apiGroups: ['events.k8s.io', ''], resources: ['events'], verbs: ['create', 'patch'] },
    ]);
    const account = byKind('ServiceAccount').metadata as JsonObject;
    for (const [binding, kind, role] of [
      ['ClusterRoleBinding', 'ClusterRole', byKind('ClusterRole')],
      ['RoleBinding', 'Role', byKind('Role')],
    ] as const) {
      const b = byKind(binding);
      assert.deepEqual(b.roleRef, {
        apiGroup: 'rbac.authorization.k8s.io',
        kind,
        name: (role.metadata as JsonObject).name,
      });
      assert.deepEqual(b.subjects, [
        { kind: 'ServiceAccount', name: account.name, namespace: account.namespace },
      ]);
    }
  });

  describe('the guard with the DaemonSet arguments, NET_ADMIN only, in its network namespace', function () {
    let ns: Netns;
    let dir: string;
    let fake: RunningChild;
    let kubeconfig: string;
    let guard: RunningChild | undefined;

    before(async function () {
      ns = await Netns.create('fgt-dep');
      await ns.ipBatch([
        'link add va type veth peer name vb',
        'addr add 192.0.2.1/24 dev va',
        'link set va up',
        'link set vb up',
        `link add flannel.1 address ${MAC} type vxlan id 1 dstport 8472 local 192.0.2.1 dev va nolearning`,
        'link set flannel.1 up',
        'neigh add 198.18.1.0 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
      ]);
      dir = mkdtempSync(tempDirPrefix('kube'));
      const node = {
        name: 'node1',
        annotations: {
          [V4]: JSON.stringify({ VNI: 1, VtepMAC: MAC }),
          'flannel.alpha.coreos.com/backend-type': 'vxlan',
        },
      };
      fake = startCommand(
        [...inNetns(ns.name), process.execPath, FAKE_CHILD, dir, JSON.stringify(node)],
        { timeoutMs: 120_000 },
      );
      const first = await fake.waitForLine((line) => line.startsWith('{"port"'));
      kubeconfig = (JSON.parse(first) as { kubeconfig: string }).kubeconfig;
    });

    afterEach(async function () {
      await guard?.kill('SIGKILL');
      guard = undefined;
    });

    after(async function () {
      await fake.kill('SIGKILL');
      await ns.destroy();
      rmSync(dir, { recursive: true, force: true });
    });

    /** The container's command line, $(POD_IP) expanded (here: the namespace's loopback). */
    function start(extra: string[] = []): RunningChild {
      const args = (container().args as string[]).map((a) => a.replace('$(POD_IP)', '127.0.0.1'));
      return startCommand(
        [
          ...inNetns(ns.name),
          // Root with every capability but NET_ADMIN dropped for good, as the securityContext says.
          'setpriv',
          '--inh-caps=-all,+net_admin',
          '--bounding-set=-all,+net_admin',
          '--',
          process.execPath,
          ...imageNodeFlags(),
          CLI_PATH,
          ...args,
          ...extra,
        ],
        {
          timeoutMs: 60_000,
          env: { ...process.env, NODE_NAME: 'node1', KUBECONFIG: kubeconfig },
        },
      );
    }

    it('revert (the default): probes answer, a rewrite is corrected with NET_ADMIN alone', async function () {
      guard = start();
      const ready = await guard.waitForJson<Line>((l) => l.event === 'ready');
      assert.equal(ready.metrics, '127.0.0.1:9464');
      assert.equal((ready.source as JsonObject).state, 'synced');
      assert.equal((ready.devices as JsonObject[])[0]?.macSource, 'source');
      const capabilities = await ns.readFile(`/proc/${String(guard.child.pid)}/status`);
      assert.match(capabilities, /^CapEff:\s+0000000000001000$/m, 'CAP_NET_ADMIN (bit 12) only');
      for (const path of ['/healthz', '/readyz']) {
        const answer = await getInside(ns, `http://127.0.0.1:9464${path}`);
        assert.equal(answer.status, 200, `${path}: ${answer.body}`);
      }
      await ns.ip(['link', 'set', 'flannel.1', 'address', '02:00:00:00:d5:02']);
      const restored = await guard.waitForJson<Line>((l) => l.event === 'restored');
      assert.equal(restored.mac, MAC);
      assert.equal(restored.neighbours, 1);
      const [link] = await ns.ipJson<{ address: string }[]>(['link', 'show', 'flannel.1']);
      assert.equal(link?.address, MAC);
      guard.child.kill('SIGTERM');
      const result = await guard.exited;
      assert.equal(result.code, 0, result.stderr);
    });

    it('adopt: the annotation is patched; every request of both runs is allowed by deploy/rbac.yaml', async function () {
      guard = start(['--strategy=adopt']);
      await guard.waitForJson<Line>((l) => l.event === 'ready');
      const mac = '02:00:00:00:d5:03';
      await ns.ip(['link', 'set', 'flannel.1', 'address', mac]);
      const adopted = await guard.waitForJson<Line>((l) => l.event === 'adopted');
      assert.equal(adopted.mac, mac);
      assert.equal(adopted.previous, MAC);
      await guard.waitForJson<Line>((l) => l.event === 'annotation' && l.result === 'stored');
      const metrics = parseExposition((await getInside(ns, 'http://127.0.0.1:9464/metrics')).body);
      assert.equal(valueOf(metrics, 'flannel_guard_adoptions_total', { device: 'flannel.1' }), 1);
      guard.child.kill('SIGTERM');
      assert.equal((await guard.exited).code, 0);

      fake.child.kill('SIGTERM');
      const lines = (await fake.exited).stdout.trim().split('\n');
      const dump = JSON.parse(lines.at(-1) ?? '{}') as {
        requests: RequestRecord[];
        events: JsonObject[];
        nodes: JsonObject[];
      };
      const annotations = (dump.nodes[0]?.metadata as JsonObject).annotations as JsonObject;
      assert.equal(annotations[V4], JSON.stringify({ VNI: 1, VtepMAC: mac }));
      assert.deepEqual([...new Set(dump.events.map((e) => e.reason))].sort(), [
        'VtepMacAdopted',
        'VtepMacRestored',
        'VtepMacRewritten',
      ]);
      // As the API server's authorizer: the ClusterRole everywhere, the Role in its namespace.
      const clusterRules = byKind('ClusterRole').rules as unknown as PolicyRule[];
      const roleRules = byKind('Role').rules as unknown as PolicyRule[];
      const roleNamespace = (byKind('Role').metadata as JsonObject).namespace;
      const seen = new Set<string>();
      for (const request of dump.requests) {
        const attributes = attributesOf(request);
        seen.add(`${attributes.verb} ${attributes.resource}`);
        const allowed =
          allows(clusterRules, attributes) ||
          (attributes.namespace === roleNamespace && allows(roleRules, attributes));
        assert.ok(allowed, `${JSON.stringify(attributes)} is not allowed by deploy/rbac.yaml`);
      }
      assert.deepEqual([...seen].sort(), [
        'create events',
        'get nodes',
        'list nodes',
        'patch nodes',
        'watch nodes',
      ]);
      const watch = dump.requests.find((r) => r.query.watch === 'true');
      assert.deepEqual(attributesOf(watch as RequestRecord), {
        verb: 'watch',
        apiGroup: '',
        resource: 'nodes',
        namespace: '',
        name: 'node1',
      });
    });
  });
});
