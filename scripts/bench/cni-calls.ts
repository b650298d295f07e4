/**
 * What a pod's ADD costs on the CNI path, per call, as a runtime starting pods pays it: the shim
 * asking the guard on its socket (the node-native path), the standalone Node.js plugin (ensureVtep
 * in a process of its own) and, as the reference in the same run, Debian's `bridge` plugin (a veth
 * into a pod's namespace and an address from host-local), and /bin/true for what starting a
 * process costs here at all. Each is started 1, 16 and 64 at once,
 * on every CPU and pinned to one (the guard too), by scripts/bench/cni-burst.c, which times each
 * copy from fork to reaping and reads its peak resident set from the kernel (wait4). The three
 * take turns, round by round. Prints p50 / p99 per call, peak RSS, and the ratios to `bridge`;
 * asserts nothing.
 *
 * Usage (root): npm run bench:cni [-- --rounds N]
 */
import { spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';

import { CNI_SHIM, DEBIAN_CNI_DIR } from '../../test/support/cni-runtime';
import { buildBenchTool } from '../../test/support/flooder';
import { GuardProcess } from '../../test/support/guard-process';
import { destroyAll, Netns, tempDirPrefix } from '../../test/support/netns';
import { percentile } from './stats';

const PLUGIN = join(__dirname, '..', '..', 'lib', 'cni', 'main.js');
const AT_ONCE = [1, 16, 64] as const;
/** USER_HZ, which /proc's times count in (getconf CLK_TCK). */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;
const PREV = { cniVersion: '1.1.0', interfaces: [{ name: 'eth0', sandbox: '/x' }], ips: [] };

function rounds(): number {
  const index = process.argv.indexOf('--rounds');
  const value = index >= 0 ? Number(process.argv[index + 1]) : 30;
  if (!Number.isInteger(value) || value <= 0) throw new Error('--rounds: expected a count');
  return value;
}

interface Call {
  wallMs: number;
  rssKiB: number;
  status: number;
}

interface Plugin {
  name: string;
  path: string;
  config: string;
  /** The CNI command the copies run (ADD unless said). */
  command?: string;
  /** Its calls ask the guard: the guard's CPU during its bursts is counted per call. */
  asksGuard?: boolean;
  /** After each burst: what it made taken back (not timed). */
  cleanup?: (copies: number, cpusArg: string) => void;
}

/** The guard's CPU time so far (all its threads: utime + stime), in ms. */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
  return (ticks * 1000) / CLOCK_TICKS;
}

/** The pods' namespaces, as pod0, pod1, ... (cni-burst gives each copy its own). */
let podsDir = '';

function burst(
  tool: string,
  node: Netns,
  plugin: Plugin,
  copies: number,
  cpusArg: string,
  command = 'ADD',
): Call[] {
  const run = spawnSync(
    'ip',
    [
      ...['netns', 'exec', node.name, tool, String(copies), plugin.config, cpusArg],
      ...['-e', `CNI_COMMAND=${command}`, '-e', 'CNI_CONTAINERID=bench%d'],
      ...['-e', `CNI_NETNS=${join(podsDir, 'pod%d')}`],
      ...['-e', 'CNI_IFNAME=eth0', '-e', `CNI_PATH=${DEBIAN_CNI_DIR}`, '--', plugin.path],
    ],
    { encoding: 'utf8', timeout: 120_000 },
  );
  if (run.status !== 0) throw new Error(`cni-burst: ${run.stderr}`);
  return run.stdout
    .trim()
    .split('\n')
    .map((line) => {
      const [wall, rss, status] = line.split(' ').map(Number);
      return { wallMs: wall ?? NaN, rssKiB: rss ?? NaN, status: status ?? -1 };
    });
}

/** What the rows run and this script does not build (without them every call fails): what is missing. */
function missingPrerequisite(): string | undefined {
  const needed: [string, string][] = [
    [CNI_SHIM, 'the CNI shim (npm test builds it: node scripts/cni-shim.mjs --cc)'],
    [
      join(DEBIAN_CNI_DIR, 'bridge'),
      "Debian's CNI plugins (apt-get install containernetworking-plugins)",
    ],
  ];
  const missing = needed.find(([path]) => !existsSync(path));
  return missing && `bench:cni: ${missing[0]} is missing: it needs ${missing[1]}`;
}

async function main(): Promise<void> {
  const missing = missingPrerequisite();
  if (missing !== undefined) {
    console.error(missing);
    process.exitCode = 2;
    return;
  }
  const count = rounds();
  const tool = buildBenchTool('cni-burst');
  const work = mkdtempSync(tempDirPrefix('bench-cni'));
  const node = await Netns.create('fgt-benchnode');
  const pods: Netns[] = [];
  let guard: GuardProcess | undefined;
  try {
    await node.ipBatch([
      'link add eth0 type veth peer name eth0p',
      'addr add 192.0.2.41/24 dev eth0',
      'link set eth0 up',
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning local 192.0.2.41 dev eth0',
      'link set flannel.1 up',
    ]);
    podsDir = join(work, 'pods');
    mkdirSync(podsDir);
    for (let i = 0; i < Math.max(...AT_ONCE); i += 1) {
      const pod = await Netns.create('fgt-benchpod');
      pods.push(pod);
      symlinkSync(pod.path, join(podsDir, `pod${i}`));
    }
    const socket = join(work, 'state', 'cni.sock');
    const running = await GuardProcess.start([
      ...['--netns', node.name, '--state-dir', join(work, 'state'), '--cni-socket', 'on'],
      ...['--offload', 'tx-checksum-ip-generic=off'],
    ]);
    guard = running;
    const guardPid = running.pid;
    if (guardPid === undefined) throw new Error('the guard did not start');
    await running.waitFor((line) => line.event === 'cniSocket', 10_000);
    const config = (name: string, fields: Record<string, unknown>): string => {
      const file = join(work, `${name}.json`);
      writeFileSync(file, JSON.stringify({ cniVersion: '1.1.0', name: 'cbr0', ...fields }));
      return file;
    };
    const bridgeConfig = config('bridge', {
      cniVersion: '1.0.0',
      type: 'bridge',
      bridge: 'cni0',
      isGateway: true,
      ipam: {
        type: 'host-local',
        ranges: [[{ subnet: '198.18.1.0/24' }]],
        dataDir: join(work, 'ipam'),
      },
    });
    const rows = {
      shim: {
        name: 'shim, guard up',
        path: CNI_SHIM,
        asksGuard: true,
        config: config('shim', {
          type: 'flannel-guard-cni',
          socket,
          budgetMs: 10_000,
          prevResult: PREV,
        }),
      },
      shimAlone: {
        // The same binary answering VERSION itself: the shim's own start and exit, no guard asked.
        name: 'shim, VERSION (no guard)',
        path: CNI_SHIM,
        command: 'VERSION',
        config: config('shim-version', { type: 'flannel-guard-cni', socket }),
      },
      nodePlugin: {
        name: 'Node.js plugin',
        path: PLUGIN,
        config: config('node', {
          type: 'flannel-guard-cni',
          offload: { 'tx-checksum-ip-generic': false },
          budgetMs: 10_000,
          prevResult: PREV,
        }),
      },
      floor: {
        // The floor: what starting any process costs on this machine, the same way.
        name: 'exec floor (/bin/true)',
        path: '/bin/true',
        config: config('true', {}),
      },
      bridge: {
        name: 'bridge (Debian)',
        path: join(DEBIAN_CNI_DIR, 'bridge'),
        config: bridgeConfig,
        cleanup: (copies, cpusArg) => {
          burst(tool, node, rows.bridge, copies, cpusArg, 'DEL');
        },
      },
    } satisfies Record<string, Plugin>;
    const plugins: Plugin[] = Object.values(rows);
    const allCpus = cpus().length;
    const pinGuard = (list: string): void => {
      spawnSync('taskset', ['-a', '-p', '-c', list, String(guardPid)], { stdio: 'ignore' });
    };
    console.log(
      `CNI ADD per call: ${count} rounds of 1, ${Math.ceil(count / 4)} of 16, ${Math.ceil(count / 10)} of 64; ${allCpus} CPUs`,
    );
    const header = [
      'plugin',
      'at once',
      'CPUs',
      'calls',
      'failed',
      'p50 ms',
      'p99 ms',
      'peak RSS MiB (median / max)',
    ];
    console.log(header.join(' | '));
    for (const cpusArg of ['-', '0']) {
      pinGuard(cpusArg === '-' ? `0-${allCpus - 1}` : cpusArg);
      for (const copies of AT_ONCE) {
        const times =
          copies === 1 ? count : copies === 16 ? Math.ceil(count / 4) : Math.ceil(count / 10);
        const calls = new Map<string, Call[]>(plugins.map((p) => [p.name, []]));
        let guardCpuMs = 0;
        for (let round = 0; round < times; round += 1) {
          for (const plugin of plugins) {
            const before = plugin.asksGuard === true ? cpuMs(guardPid) : 0;
            const made = burst(tool, node, plugin, copies, cpusArg, plugin.command);
            if (plugin.asksGuard === true) guardCpuMs += cpuMs(guardPid) - before;
            calls.get(plugin.name)?.push(...made);
            plugin.cleanup?.(copies, cpusArg);
          }
        }
        const p50 = new Map<string, number>();
        const p99 = new Map<string, number>();
        for (const plugin of plugins) {
          const made = calls.get(plugin.name) ?? [];
          const walls = made.map((c) => c.wallMs).sort((a, b) => a - b);
          const rss = made.map((c) => c.rssKiB / 1024).sort((a, b) => a - b);
          p50.set(plugin.name, percentile(walls, 0.5));
          p99.set(plugin.name, percentile(walls, 0.99));
          console.log(
            [
              plugin.name,
              copies,
              cpusArg === '-' ? `all ${allCpus}` : '1',
              made.length,
              made.filter((c) => c.status !== 0).length,
              percentile(walls, 0.5).toFixed(2),
              percentile(walls, 0.99).toFixed(2),
              `${percentile(rss, 0.5).toFixed(1)} / ${(rss[rss.length - 1] ?? NaN).toFixed(1)}`,
            ].join(' | '),
          );
        }
        const { shim, shimAlone, nodePlugin, bridge } = rows;
        const ratio = (a: Plugin, of: Map<string, number>): string =>
          ((of.get(a.name) ?? NaN) / (of.get(bridge.name) ?? NaN)).toFixed(2);
        console.log(
          `  ratios to bridge, p50 / p99: shim ${ratio(shim, p50)} / ${ratio(shim, p99)}, Node.js plugin ${ratio(nodePlugin, p50)} / ${ratio(nodePlugin, p99)}`,
        );
        const asked = (calls.get(shim.name) ?? []).length;
        const guardShare = (of: Map<string, number>): string =>
          ((of.get(shim.name) ?? NaN) - (of.get(shimAlone.name) ?? NaN)).toFixed(2);
        console.log(
          `  the guard's part: ${(guardCpuMs / asked).toFixed(3)} ms of its CPU per call; shim ADD less shim VERSION, p50 / p99: ${guardShare(p50)} / ${guardShare(p99)} ms`,
        );
      }
    }
  } finally {
    await guard?.stop();
    await destroyAll();
    rmSync(work, { recursive: true, force: true });
  }
}

void main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
