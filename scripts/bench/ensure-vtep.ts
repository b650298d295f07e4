/**
 * How long the CNI path takes on a healthy node (nothing to fix): a flannel-like node in the test
 * bed (VTEP at its published MAC, entries for the other node, TX checksum offload off).
 *   - ensureVtep: the library call, in this process, N runs;
 *   - flannel-guard-cni ADD: the plugin as a runtime runs it (a new process per pod: env,
 *     config with prevResult on stdin, in the node's namespace), N runs;
 *   - `node -e 0` the same way, N runs: the part of ADD that is Node's start-up;
 *   - bursts, as a node starting many pods at once: 16 and 64 ADDs started together, on every
 *     CPU and pinned to one (`taskset`), each ADD timed from spawn to answer, beside the same
 *     burst of `node -e 0` (the reference: ratios are ADD / node -e 0); every ADD must answer
 *     prevResult with exit 0.
 * Prints median / p90 / p99 / max; asserts nothing.
 *
 * Usage (root): npm run bench:ensure [-- --runs N]
 */
import { spawn } from 'node:child_process';
import { chmodSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { ensureVtep } from '../../lib/ensure/ensure';
import { destroyAll, Netns } from '../../test/support/netns';
import { FlannelTestbed, VTEP } from '../../test/support/testbed';
import { percentile } from './stats';

const PLUGIN = join(__dirname, '..', '..', 'lib', 'cni', 'main.js');

function argument(name: string, fallback: number): number {
  const index = process.argv.indexOf(name);
  const value = index >= 0 ? Number(process.argv[index + 1]) : fallback;
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name}: expected a count`);
  return value;
}

function summary(label: string, values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const fmt = (v: number): string => v.toFixed(2).padStart(8);
  return `${label.padEnd(48)} n=${sorted.length}  median ${fmt(percentile(sorted, 0.5))}  p90 ${fmt(percentile(sorted, 0.9))}  p99 ${fmt(percentile(sorted, 0.99))}  max ${fmt(sorted[sorted.length - 1] ?? NaN)}  (ms)`;
}

/** Runs argv with `input` on stdin; resolves with the wall time from spawn to exit. */
function timed(
  argv: string[],
  input: string,
  env: NodeJS.ProcessEnv,
): Promise<{ ms: number; code: number | null; stdout: string; stderr: string }> {
  const [command, ...args] = argv;
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command ?? '', args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.once('error', reject);
    child.once('close', (code) => {
      resolve({ ms: performance.now() - started, code, stdout, stderr });
    });
    child.stdin.end(input);
  });
}

async function main(): Promise<void> {
  const runs = argument('--runs', 100);
  const bed = await FlannelTestbed.create({ nodes: 2, udev: false });
  const [node, peer] = [bed.node(1), bed.node(2)];
  await node.setTxChecksum(false);
  const options = {
    netns: node.ns.name,
    device: VTEP,
    mac: node.publishedMac,
    peers: [{ vtepIp: peer.vtepIp, mac: peer.publishedMac, underlayIp: peer.underlayIp }],
  };
  const first = await ensureVtep(options);
  if (!first.ok || first.actions.length > 0) {
    throw new Error(`the node is not healthy: ${JSON.stringify(first.drift)}`);
  }

  const library: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    const started = performance.now();
    const result = await ensureVtep(options);
    library.push(performance.now() - started);
    if (result.actions.length > 0) throw new Error('ensureVtep wrote something on a healthy node');
  }

  chmodSync(PLUGIN, 0o755); // as npm does for a package's bin
  const pod = await Netns.create('fgt-bench');
  const prevResult = {
    cniVersion: '1.0.0',
    interfaces: [{ name: 'eth0', mac: '0e:00:00:00:aa:01', sandbox: pod.path }],
    ips: [{ address: '198.18.1.10/24', gateway: '198.18.1.1', interface: 0 }],
    dns: {},
  };
  const config = JSON.stringify({
    cniVersion: '1.0.0',
    name: 'cbr0',
    type: 'flannel-guard-cni',
    device: VTEP,
    mac: node.publishedMac,
    peers: options.peers,
    budgetMs: 5000,
    prevResult,
  });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: 'bench0',
    CNI_NETNS: pod.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH: join(__dirname, '..', '..', 'lib'),
  };
  const enter = ['nsenter', `--net=${node.ns.path}`, '--'];
  const plugin: number[] = [];
  const baseline: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    const add = await timed([...enter, PLUGIN], config, env);
    if (add.code !== 0 || JSON.stringify(JSON.parse(add.stdout)) !== JSON.stringify(prevResult)) {
      throw new Error(`ADD failed (${add.code}): ${add.stdout}${add.stderr}`);
    }
    if (add.stderr !== '')
      throw new Error(`ADD repaired something on a healthy node: ${add.stderr}`);
    plugin.push(add.ms);
    baseline.push((await timed([...enter, process.execPath, '-e', '0'], '', env)).ms);
  }

  const bursts: string[] = [];
  for (const size of [16, 64]) {
    for (const cpus of [undefined, '0']) {
      const pin = cpus === undefined ? [] : ['taskset', '-c', cpus];
      const burst = (argv: string[], input: string): Promise<Awaited<ReturnType<typeof timed>>[]> =>
        Promise.all(
          Array.from({ length: size }, (_, i) =>
            timed([...pin, ...argv], input, { ...env, CNI_CONTAINERID: `burst${i}` }),
          ),
        );
      const adds = await burst([...enter, PLUGIN], config);
      const failed = adds.filter((add) => add.code !== 0).length;
      const nodes = await burst([...enter, process.execPath, '-e', '0'], '');
      const ratio = (q: number): string => {
        const p = (values: number[]): number =>
          percentile(
            [...values].sort((a, b) => a - b),
            q,
          );
        return `${(p(adds.map((a) => a.ms)) / p(nodes.map((n) => n.ms))).toFixed(2)}x`;
      };
      const where = cpus === undefined ? 'all CPUs' : 'one CPU';
      bursts.push(
        summary(
          `${size} ADDs at once, ${where} (${failed} failed)`,
          adds.map((a) => a.ms),
        ),
        summary(
          `  ${size} x node -e 0 at once, ${where}`,
          nodes.map((n) => n.ms),
        ),
        `  ratio ADD / node -e 0: p50 ${ratio(0.5)}, p99 ${ratio(0.99)}`,
      );
    }
  }
  // What loading the plugin's code costs beyond Node's start-up (the addon is loaded by ADD only).
  const requireOnly = async (module: string): Promise<number[]> => {
    const times: number[] = [];
    for (let i = 0; i < 20; i += 1) {
      times.push(
        (await timed([process.execPath, '-e', `require(${JSON.stringify(module)})`], '', env)).ms,
      );
    }
    return times;
  };
  const loadMain = await requireOnly(PLUGIN);
  const loadEnsure = await requireOnly(join(__dirname, '..', '..', 'lib', 'ensure', 'ensure.js'));
  await pod.destroy();
  await bed.destroy();

  console.log(`healthy flannel-like node (VTEP, 1 peer), ${runs} runs each`);
  console.log(summary('ensureVtep (library call, in process)', library));
  console.log(summary('flannel-guard-cni ADD (new process, as a runtime)', plugin));
  console.log(summary("  of which Node's start-up: node -e 0", baseline));
  console.log(summary('node -e require(cni/main) (its modules, no addon)', loadMain));
  console.log(summary('node -e require(ensure) (loads the addon)', loadEnsure));
  for (const line of bursts) console.log(line);
}

main()
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => destroyAll());
