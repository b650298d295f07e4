/**
 * The mesh view at cluster scale: N Nodes (default 5 000) served by the fake API server in a
 * process of its own, 1 % of them changing per minute (a label: what most Node updates are; every
 * tenth a VtepMAC republished), and a real FlannelGuard on a flannel.1 holding the N-1 peers'
 * ARP and FDB entries in a throw-away namespace. Side by side in one run:
 *
 * - the mesh view as `watch` runs it: one list in pages of 500, one watch from its
 *   resourceVersion (MeshNodeWatch), each event compared at once;
 * - a naive controller: the same comparison after a full re-list every `--relist-seconds`.
 *
 * Figures: initial list and first full comparison; comparison per event (p50/p99, the view's
 * own work); RSS added to the guard's process (after a GC, with --expose-gc); API requests and
 * bytes in the run (by kind, as the server counted them). Prints; asserts nothing. Needs root.
 *
 * Usage: node --expose-gc dist/scripts/bench/mesh-scale.js [--nodes N] [--minutes M]
 *        [--relist-seconds S]
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';

import { FlannelGuard } from '../../lib/guard';
import { listAllNodes, type KubernetesApi } from '../../lib/kubernetes/api';
import { DEFAULT_ANNOTATION_PREFIX } from '../../lib/kubernetes/annotation';
import { createKubernetesClient } from '../../lib/kubernetes/client';
import {
  MESH_MAX_PAGES,
  MESH_PAGE_SIZE,
  MeshNodeWatch,
  readPeer,
} from '../../lib/kubernetes/mesh-peers';
import { MeshView, type NodeLeases } from '../../lib/mesh/view';
import { FakeApiServer, type JsonObject } from '../../test/support/fake-apiserver';
import {
  claimStateRoot,
  destroyAll,
  Netns,
  releaseStateRoot,
  tempDirPrefix,
} from '../../test/support/netns';
import { percentile } from './stats';

const P = DEFAULT_ANNOTATION_PREFIX;
const VTEP = 'flannel.1';

interface Options {
  nodes: number;
  minutes: number;
  relistSeconds: number;
}

function parseOptions(argv: readonly string[]): Options {
  const options: Options = { nodes: 5000, minutes: 10, relistSeconds: 30 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, text] = [argv[i], argv[i + 1] ?? ''];
    const value = Number(text);
    const bounded = (min: number, max: number): number => {
      if (!Number.isInteger(value) || value < min || value > max) {
        throw new Error(`${flag ?? ''}: a whole number from ${min} to ${max}`);
      }
      return value;
    };
    if (flag === '--nodes') options.nodes = bounded(2, 8000);
    else if (flag === '--minutes') options.minutes = bounded(1, 60);
    else if (flag === '--relist-seconds') options.relistSeconds = bounded(1, 600);
    else throw new Error(`unknown flag ${flag ?? ''}`);
  }
  return options;
}

/** Node i's lease: a /28 of 198.18.0.0/15 (8 192 of them), an underlay address, a MAC. */
function lease(
  i: number,
  generation = 0,
): { cidr: string; vtepIp: string; mac: string; ip: string } {
  const base = i * 16;
  const vtepIp = `198.${18 + (base >> 16)}.${(base >> 8) & 255}.${base & 255}`;
  const mac = `0a:${generation.toString(16).padStart(2, '0')}:00:${((i >> 8) & 255).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}:01`;
  return { cidr: `${vtepIp}/28`, vtepIp, mac, ip: `192.0.2.${1 + (i % 250)}` };
}

// --- the API server's process ------------------------------------------------------------

interface ServerReport {
  requests: Record<string, number>;
  bytes: number;
}

async function serve(nodes: number, dir: string): Promise<void> {
  const fake = await FakeApiServer.start();
  for (let i = 0; i < nodes; i += 1) {
    const { cidr, mac, ip } = lease(i);
    fake.addNode({
      name: `node${i}`,
      podCIDR: cidr,
      internalIP: ip,
      annotations: {
        [`${P}/backend-data`]: JSON.stringify({ VNI: 1, VtepMAC: mac }),
        [`${P}/backend-type`]: 'vxlan',
        [`${P}/kube-subnet-manager`]: 'true',
        [`${P}/public-ip`]: ip,
      },
    });
  }
  let generation = 0;
  let ticks = 0;
  process.on('message', (message: { churn?: number; stop?: boolean }) => {
    for (let k = 0; k < (message.churn ?? 0); k += 1) {
      ticks += 1;
      const i = 1 + Math.floor(Math.random() * (nodes - 1));
      fake.updateNode(`node${i}`, (node) => {
        const metadata = node.metadata as JsonObject;
        (metadata.labels as JsonObject)['bench/tick'] = String(ticks);
        // Every tenth change republishes the VtepMAC (a flannel restart there).
        if (ticks % 10 === 0) {
          generation += 1;
          (metadata.annotations as JsonObject)[`${P}/backend-data`] = JSON.stringify({
            VNI: 1,
            VtepMAC: lease(i, generation % 256).mac,
          });
        }
      });
    }
    if (message.stop === true) {
      const requests: Record<string, number> = {};
      for (const request of fake.requests) {
        const kind =
          request.query.watch === 'true'
            ? 'watch'
            : request.path === '/api/v1/nodes'
              ? 'list page'
              : `${request.method} ${request.path.split('/').slice(0, 4).join('/')}`;
        requests[kind] = (requests[kind] ?? 0) + 1;
      }
      const report: ServerReport = { requests, bytes: fake.bytesSent };
      process.send?.(report, () => {
        void fake.close().then(() => process.exit(0));
      });
    }
  });
  process.send?.({ kubeconfig: fake.writeKubeconfig(dir) });
}

// --- the guard's process ------------------------------------------------------------------

function startServer(
  nodes: number,
  dir: string,
): Promise<{ child: ChildProcess; kubeconfig: string }> {
  const child = fork(__filename, ['--serve', String(nodes), dir], { stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    child.once('message', (message: { kubeconfig: string }) => {
      resolve({ child, kubeconfig: message.kubeconfig });
    });
    child.once('exit', (code) => reject(new Error(`the API server's process exited (${code})`)));
  });
}

function stopServer(child: ChildProcess): Promise<ServerReport> {
  return new Promise((resolve) => {
    child.once('message', (report: ServerReport) => resolve(report));
    child.send({ stop: true });
  });
}

async function setUpVtep(nodes: number): Promise<Netns> {
  const ns = await Netns.create('fgm');
  const lines = [
    'link add eth0 type veth peer name eth0p',
    'link set eth0 up',
    'addr add 192.0.2.254/24 dev eth0',
    `link add ${VTEP} type vxlan id 1 dstport 8472 nolearning local 192.0.2.254 dev eth0`,
    `link set ${VTEP} address ${lease(0).mac}`,
    `addr add ${lease(0).vtepIp}/32 dev ${VTEP}`,
    `link set ${VTEP} up`,
  ];
  await ns.ipBatch(lines);
  const entries: string[] = [];
  for (let i = 1; i < nodes; i += 1) {
    const { vtepIp, mac } = lease(i);
    entries.push(`neigh replace ${vtepIp} lladdr ${mac} dev ${VTEP} nud permanent`);
  }
  await ns.ipBatch(entries);
  const fdb: string[] = [];
  for (let i = 1; i < nodes; i += 1) {
    const { mac, ip } = lease(i);
    fdb.push(`fdb replace ${mac} dev ${VTEP} dst ${ip} self permanent`);
  }
  await ns.run(['bridge', '-batch', '-'], { input: `${fdb.join('\n')}\n`, timeoutMs: 120_000 });
  return ns;
}

function rssMiB(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().rss / 2 ** 20;
}

interface ModeFigures {
  firstMs: number;
  perEvent: number[];
  rssAddedMiB: number;
  report: ServerReport;
}

/** Times each comparison the view makes (its own work, on the event loop). */
function timed(view: MeshView, perEvent: number[]): void {
  const update = view.updateNode.bind(view);
  const set = view.setNodes.bind(view);
  view.updateNode = (name: string, leases: NodeLeases | null): void => {
    const started = performance.now();
    update(name, leases);
    perEvent.push(performance.now() - started);
  };
  view.setNodes = (nodes: readonly NodeLeases[]): void => {
    const started = performance.now();
    set(nodes);
    perEvent.push(performance.now() - started);
  };
}

async function churn(child: ChildProcess, options: Options): Promise<void> {
  // 1 % of the Nodes per minute, one change at a time, evenly spread.
  const perMinute = Math.max(1, Math.round(options.nodes / 100));
  const gapMs = 60_000 / perMinute;
  const until = Date.now() + options.minutes * 60_000;
  while (Date.now() < until) {
    child.send({ churn: 1 });
    await new Promise((resolve) => setTimeout(resolve, gapMs));
  }
}

async function measure(
  options: Options,
  guard: FlannelGuard,
  naive: boolean,
  dir: string,
): Promise<ModeFigures> {
  const { child, kubeconfig } = await startServer(options.nodes, dir);
  const api: KubernetesApi = await createKubernetesClient({ kubeconfig });
  // Settled first: what the set-up left is collected before the mesh's share is counted.
  rssMiB();
  await new Promise((resolve) => setTimeout(resolve, 500));
  const before = rssMiB();
  const view = new MeshView({ self: 'node0', devices: guard.meshDevices() });
  const perEvent: number[] = [];
  timed(view, perEvent);
  const started = performance.now();
  let stop: () => Promise<void>;
  const leasesOf = (items: Awaited<ReturnType<typeof listAllNodes>>['items']): NodeLeases[] =>
    items.map(
      (node) => readPeer(node, P) ?? { node: node.metadata.name, leases: [], incomplete: [] },
    );
  if (naive) {
    let inFlight: Promise<void> = Promise.resolve();
    const relist = async (): Promise<void> => {
      const { items } = await listAllNodes(api, {
        pageSize: MESH_PAGE_SIZE,
        maxPages: MESH_MAX_PAGES,
      });
      view.setNodes(leasesOf(items));
    };
    await relist();
    const timer = setInterval(() => {
      inFlight = inFlight.then(relist);
    }, options.relistSeconds * 1000);
    stop = async () => {
      clearInterval(timer);
      await inFlight;
    };
  } else {
    const watch = new MeshNodeWatch({ api, annotationPrefix: P, view });
    watch.start();
    while (!view.synced) await new Promise((resolve) => setTimeout(resolve, 5));
    stop = () => {
      watch.close();
      return Promise.resolve();
    };
  }
  const firstMs = performance.now() - started;
  const peers = Object.keys(view.snapshot().reported).length;
  if (peers !== options.nodes - 1)
    throw new Error(`${peers} peers judged, not ${options.nodes - 1}`);
  await churn(child, options);
  const rssAddedMiB = rssMiB() - before;
  await stop();
  view.close();
  api.close();
  const report = await stopServer(child);
  return { firstMs, perEvent: perEvent.slice(1), rssAddedMiB, report };
}

async function main(): Promise<void> {
  if (process.argv[2] === '--serve') {
    await serve(Number(process.argv[3]), process.argv[4] ?? '');
    return;
  }
  const options = parseOptions(process.argv.slice(2));
  claimStateRoot();
  const dir = mkdtempSync(tempDirPrefix('mesh-scale'));
  try {
    const ns = await setUpVtep(options.nodes);
    const guard = await FlannelGuard.start({ netns: ns.name, interfaces: [VTEP], udevRoot: false });
    const figures = {
      watch: await measure(options, guard, false, dir),
      naive: await measure(options, guard, true, dir),
    };
    guard.close();
    const row = (name: string, f: ModeFigures): string[] => {
      const sorted = [...f.perEvent].sort((a, b) => a - b);
      const requests = Object.entries(f.report.requests)
        .map(([kind, count]) => `${kind} ${count}`)
        .join(', ');
      return [
        name,
        f.firstMs.toFixed(0),
        percentile(sorted, 0.5).toFixed(2),
        percentile(sorted, 0.99).toFixed(2),
        String(sorted.length),
        f.rssAddedMiB.toFixed(1),
        requests,
        (f.report.bytes / 2 ** 20).toFixed(1),
      ];
    };
    const header = [
      'mode',
      'list+compare ms',
      'per event p50 ms',
      'p99 ms',
      'events',
      'RSS added MiB',
      'API requests',
      'MiB sent',
    ];
    const rows = [
      header,
      row('watch', figures.watch),
      row(`re-list every ${options.relistSeconds} s`, figures.naive),
    ];
    process.stdout.write(
      `mesh view, ${options.nodes} Nodes, 1 % changing per minute, ${options.minutes} min each\n` +
        rows.map((r) => r.join(' | ')).join('\n') +
        `\nrequests: watch/re-list ${(Object.values(figures.watch.report.requests).reduce((a, b) => a + b, 0) / Object.values(figures.naive.report.requests).reduce((a, b) => a + b, 0)).toFixed(3)}; bytes ${(figures.watch.report.bytes / figures.naive.report.bytes).toFixed(3)}\n`,
    );
  } finally {
    await destroyAll();
    releaseStateRoot();
    rmSync(dir, { recursive: true, force: true });
  }
}

void main().catch((error: unknown) => {
  process.stderr.write(
    `${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
