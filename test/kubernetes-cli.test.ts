/**
 * `flannel-guard watch` and its Kubernetes flags, as users run it (the bin,
 * in a throw-away network namespace, the API server stand-in on loopback):
 * usage errors, an API server that is away when the guard starts (readiness,
 * first-seen meanwhile, recovery by itself), readable output.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

import { backendDataKey } from '../lib/kubernetes/annotation';
import { FakeApiServer, type JsonObject } from './support/fake-apiserver';
import { FAKE_APISERVER_CERT } from './support/fake-apiserver-tls';
import { httpGet } from './support/loopback-http';
import { Netns, tempDirPrefix, waitFor } from './support/netns';
import {
  CLI_PATH,
  jsonLines,
  runCommand,
  startCommand,
  type RunningChild,
} from './support/node-child';

const V4 = backendDataKey('ipv4');
const DEVICE_MAC = '02:00:00:00:c1:01';
const PUBLISHED = '02:00:00:00:c1:02';

interface Line {
  event: string;
  [field: string]: unknown;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        resolve(typeof address === 'object' && address !== null ? address.port : 0);
      });
    });
  });
}

describe('flannel-guard watch: Kubernetes flags (the bin, netns, API server stand-in)', function () {
  this.timeout(90_000);
  let ns: Netns;
  let fake: FakeApiServer;
  let dir: string;
  let kubeconfig: string;
  const children: RunningChild[] = [];

  before(async function () {
    ns = await Netns.create('fgt-kcli');
    await ns.ipBatch([
      'link add va type veth peer name vb',
      'addr add 192.0.2.1/24 dev va',
      'link set va up',
      'link set vb up',
      `link add flannel.1 address ${DEVICE_MAC} type vxlan id 1 dstport 8472 local 192.0.2.1 dev va nolearning`,
      'link set flannel.1 up',
      'neigh add 198.18.1.0 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
    ]);
    fake = await FakeApiServer.start();
    fake.addNode({
      name: 'node1',
      annotations: {
        [V4]: JSON.stringify({ VNI: 1, VtepMAC: PUBLISHED }),
        'flannel.alpha.coreos.com/backend-type': 'vxlan',
      },
    });
    dir = mkdtempSync(tempDirPrefix('kube'));
    kubeconfig = fake.writeKubeconfig(dir);
  });

  afterEach(async function () {
    await Promise.all(children.splice(0).map((child) => child.kill('SIGKILL')));
    if (!fake.listening) await fake.restart(); // a test that failed while it was away
  });

  after(async function () {
    await fake.close();
    await ns.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  function watch(args: readonly string[], env: NodeJS.ProcessEnv = process.env): RunningChild {
    const child = startCommand([process.execPath, CLI_PATH, 'watch', '--netns', ns.name, ...args], {
      timeoutMs: 60_000,
      env,
    });
    children.push(child);
    return child;
  }

  /** `watch --json` run to its exit (one that refuses to start), without a cluster in the env. */
  function watchOnce(args: readonly string[]): ReturnType<typeof runCommand> {
    const env = { ...process.env, NODE_NAME: '', KUBECONFIG: '', KUBERNETES_SERVICE_HOST: '' };
    return runCommand(
      [process.execPath, CLI_PATH, 'watch', '--json', '--netns', ns.name, ...args],
      { env, timeoutMs: 15_000 },
    );
  }

  it('bad Kubernetes flags exit 2 with one line, before touching anything', async function () {
    const cases: [string[], RegExp][] = [
      [['--node', 'node1'], /--node needs a cluster to read it from/],
      [['--kubeconfig', kubeconfig], /--kubeconfig needs the node name/],
      [['--strategy', 'adopt'], /--strategy adopt needs the node annotation/],
      [['--strategy', 'sideways'], /--strategy sideways: expected revert or adopt/],
      [
        ['--metrics-address', 'localhost'],
        /--metrics-address localhost: expected HOST:PORT or off/,
      ],
      [
        ['--kubeconfig', '/nonexistent/kubeconfig', '--node', 'node1', '--metrics-address', 'off'],
        /--kubeconfig \/nonexistent\/kubeconfig: no such file/,
      ],
      [['--node', 'Node_1', '--kubeconfig', kubeconfig], /not a valid Kubernetes name/],
      [['--node-condition'], /--node-condition needs the Node/],
      [
        ['--kubeconfig', kubeconfig, '--node', 'node1', '--source-timeout', '0'],
        /--source-timeout 0: expected a whole number from 1 to 2147483647 \(ms\)/,
      ],
    ];
    for (const [args, message] of cases) {
      const result = await watchOnce(args);
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stdout}${result.stderr}`);
      assert.equal(result.stdout, '', args.join(' '));
      const lines = result.stderr.trim().split('\n');
      assert.equal(lines.length, 1, `${args.join(' ')}: ${result.stderr}`);
      assert.match(lines[0] ?? '', message, args.join(' '));
    }
    const [link] = await ns.ipJson<{ address: string }[]>(['link', 'show', 'flannel.1']);
    assert.equal(link?.address, DEVICE_MAC, 'nothing written');
  });

  it('a metrics address in use: exit 1, one line naming the flag and the errno', async function () {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = taken.address() as { port: number };
      const result = await watchOnce(['--metrics-address', `127.0.0.1:${port}`]);
      assert.equal(result.code, 1, result.stdout + result.stderr);
      const lines = result.stderr.trim().split('\n');
      assert.equal(lines.length, 1, result.stderr);
      assert.match(
        lines[0] ?? '',
        new RegExp(`^flannel-guard: EADDRINUSE: --metrics-address 127\\.0\\.0\\.1:${port}: `),
      );
      assert.doesNotMatch(result.stderr, /option metricsAddress/);
    } finally {
      taken.close();
    }
  });

  it('API server away at start: not ready while waiting, then guards with first-seen, and recovers by itself', async function () {
    await fake.stop();
    const port = await freePort();
    const started = Date.now();
    const child = watch(
      [
        '--json',
        '--kubeconfig',
        kubeconfig,
        '--node',
        'node1',
        '--metrics-address',
        `127.0.0.1:${port}`,
        '--source-timeout',
        '1500',
      ],
      { ...process.env, NODE_NAME: '', KUBECONFIG: '' },
    );
    const base = `http://127.0.0.1:${port}`;
    // Listening before the Node is read; the source reports its first failure meanwhile.
    const waiting = await waitFor(
      async () => {
        try {
          const answer = await httpGet(`${base}/readyz`);
          return answer.body.includes('"state":"degraded"') ? answer : undefined;
        } catch {
          return undefined; // not listening yet
        }
      },
      { timeoutMs: 10_000, what: 'the endpoint' },
    );
    assert.equal(waiting.status, 503, waiting.body);
    const body = JSON.parse(waiting.body) as {
      guard: string;
      source: { state: string; problem: string };
    };
    assert.equal(body.guard, 'starting');
    assert.equal(body.source.state, 'degraded');
    assert.equal(body.source.problem, 'api-unreachable');
    assert.equal((await httpGet(`${base}/healthz`)).status, 200, 'alive meanwhile');

    const ready = await child.waitForJson<Line>((l) => l.event === 'ready');
    assert.ok(Date.now() - started >= 1400, 'waited for the first read of the Node');
    assert.equal(jsonLines<Line>(child.stdout)[0]?.event, 'ready', 'ready is the first line');
    const device = (ready.devices as { macSource: string; desiredMac: string }[])[0];
    assert.equal(device?.macSource, 'pinned-at-start');
    assert.equal(device.desiredMac, DEVICE_MAC);
    assert.equal((ready.source as { state: string }).state, 'degraded');
    const degraded = await child.waitForJson<Line>(
      (l) => l.event === 'source' && l.state === 'degraded',
    );
    assert.equal(degraded.problem, 'api-unreachable');
    assert.equal((await httpGet(`${base}/readyz`)).status, 200, 'ready: explicitly degraded');

    // The API server comes back: the annotation is read and the device brought to it.
    await fake.restart();
    await child.waitForJson<Line>((l) => l.event === 'source' && l.state === 'synced', 30_000);
    const restored = await child.waitForJson<Line>(
      (l) => l.event === 'restored' && l.mac === PUBLISHED,
    );
    assert.equal(restored.neighbours, 1);
    const [link] = await ns.ipJson<{ address: string }[]>(['link', 'show', 'flannel.1']);
    assert.equal(link?.address, PUBLISHED);
    const readyz = JSON.parse((await httpGet(`${base}/readyz`)).body) as {
      source: { state: string };
    };
    assert.equal(readyz.source.state, 'synced');
    child.child.kill('SIGTERM');
    assert.equal((await child.exited).code, 0);
  });

  it('in a pod: a service account token rotated by kubelet is followed at the first 401, not on a timer', async function () {
    const sa = join(dir, 'serviceaccount');
    mkdirSync(sa);
    const original = fake.token;
    writeFileSync(join(sa, 'token'), original);
    writeFileSync(join(sa, 'ca.crt'), FAKE_APISERVER_CERT);
    writeFileSync(join(sa, 'namespace'), 'kube-flannel');
    // The service account's fixed path, in a mount namespace of the guard's own: a tmpfs on
    // /run (/var/run) with the test's folder bound there and /run/netns bound back; nothing
    // of the machine's is written.
    const script = [
      'mount --rbind /run /mnt',
      'mount -t tmpfs flannel-guard-test /run',
      'mkdir -p /run/netns /run/secrets/kubernetes.io/serviceaccount',
      'mount --rbind /mnt/netns /run/netns',
      'mount --bind "$1" /run/secrets/kubernetes.io/serviceaccount',
      'shift',
      'exec "$@"',
    ].join(' && ');
    const child = startCommand(
      [
        ...['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script, 'sh', sa],
        ...[process.execPath, CLI_PATH, 'watch', '--json', '--netns', ns.name],
        // One watch (its own Node's): the mesh's watch of every Node is counted elsewhere.
        ...['--udev-root', 'off', '--metrics-address', 'off', '--mesh', 'off'],
      ],
      {
        timeoutMs: 60_000,
        env: {
          ...process.env,
          KUBECONFIG: '',
          NODE_NAME: 'node1',
          KUBERNETES_SERVICE_HOST: '127.0.0.1',
          KUBERNETES_SERVICE_PORT: String(fake.port),
        },
      },
    );
    children.push(child);
    try {
      await child.waitForJson<Line>((l) => l.event === 'source' && l.state === 'synced', 30_000);
      await waitFor(() => fake.openWatches === 1, { timeoutMs: 10_000, what: 'the watch' });
      const rotatedAt = Date.now();
      writeFileSync(join(sa, 'token'), 'rotated-service-account-token');
      fake.rotateToken('rotated-service-account-token');
      await waitFor(
        () =>
          fake.openWatches === 1 &&
          fake.requests.some((r) => r.at >= rotatedAt && r.status === 200),
        { timeoutMs: 10_000, what: 'the watch open again with the rotated token' },
      );
      const after = fake.requests.filter((r) => r.at >= rotatedAt);
      assert.equal(after.filter((r) => r.status === 401).length, 1, 'one refused request');
      assert.ok(
        !jsonLines<Line>(child.stdout).some((l) => l.event === 'source' && l.state === 'degraded'),
        'never degraded',
      );
      child.child.kill('SIGTERM');
      assert.equal((await child.exited).code, 0);
    } finally {
      fake.rotateToken(original);
    }
  });

  it('readable lines without --json, the Kubernetes ones included; NODE_NAME and KUBECONFIG from the environment', async function () {
    await ns.ip(['link', 'set', 'flannel.1', 'address', DEVICE_MAC]);
    const child = watch(['--metrics-address', 'off'], {
      ...process.env,
      NODE_NAME: 'node1',
      KUBECONFIG: kubeconfig,
    });
    await child.waitForLine((line) => / restored: flannel\.1 mac /.test(line));
    const lines = child.stdout.trim().split('\n');
    assert.match(
      lines[0] ?? '',
      /^\d{4}-\d\d-\d\dT[\d:.]+Z ready: flannel\.1 .* desired 02:00:00:00:c1:02 \[source\]/,
    );
    assert.ok(
      lines.some((line) => / source: node node1 synced: flannel\.1=02:00:00:00:c1:02$/.test(line)),
      child.stdout,
    );
    child.child.kill('SIGINT');
    assert.equal((await child.exited).code, 0);
  });

  it('--node-condition: flannel-guard.io/VtepHealthy (and FlannelVtepHealthy) True once the device is back, with a line for the transition', async function () {
    await ns.ip(['link', 'set', 'flannel.1', 'address', DEVICE_MAC]);
    const child = watch(['--metrics-address', 'off', '--node-condition'], {
      ...process.env,
      NODE_NAME: 'node1',
      KUBECONFIG: kubeconfig,
    });
    await child.waitForLine((line) =>
      / condition: flannel-guard\.io\/VtepHealthy=True VtepHealthy: /.test(line),
    );
    const conditions = (fake.node('node1').status as JsonObject).conditions as JsonObject[];
    for (const type of ['flannel-guard.io/VtepHealthy', 'FlannelVtepHealthy']) {
      const healthy = conditions.find((c) => c.type === type);
      assert.equal(healthy?.status, 'True', `${type}: ${JSON.stringify(conditions)}`);
    }
    assert.ok(conditions.some((c) => c.type === 'Ready'));
    assert.ok(
      fake.requests.some((q) => q.method === 'PATCH' && q.path === '/api/v1/nodes/node1/status'),
    );
    child.child.kill('SIGINT');
    assert.equal((await child.exited).code, 0);
  });
});
