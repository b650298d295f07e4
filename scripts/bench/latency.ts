/**
 * Correction latency and cost: `flannel-guard watch` (the real CLI) side by
 * side with a minimal C reference guard (scripts/bench/reference-guard.c, the
 * floor), in one run, on the same throw-away namespace: a veth `eth0`
 * (192.0.2.10/24), a vxlan `flannel.1` at a pinned MAC and K permanent
 * neighbour entries on it (198.18.x.0).
 *
 * A separate C process (scripts/bench/rewriter.c) rewrites flannel.1's MAC N
 * times, paced (one every --interval-ms) and back to back (the next as soon
 * as the previous correction is complete and the guard asleep again, but at
 * least --b2b-gap-us, default 1000, after the previous rewrite: fight control
 * corrects two rewrites per --rewrite-window at once and defers a third by
 * ~1 s, so only rewrites a window apart keep its backoff out for certain),
 * and times, from its own netlink socket, rewrite -> pinned MAC back, and
 * rewrite -> MAC and all K neighbour entries back. Both guards run with the same work per correction: set the
 * MAC back, re-add the K entries (flannel-guard: `--mac`, `--offload none`,
 * `--rewrite-window 1` so that fight control's backoff stays out of a run
 * that rewrites on purpose).
 *
 * Per guard: latency p50/p90/p99/max per mode, the first (cold) correction,
 * CPU time per correction (utime+stime from /proc/PID/stat, and the threads'
 * run time from /proc/PID/task/TID/schedstat), peak RSS (VmHWM), start-up
 * (process start to its `ready` line), idle CPU and wakeups (context
 * switches of every thread) over --idle-seconds with no events; then the
 * same again with --links unrelated links (ifb) in the namespace.
 * --breakdown adds a run of flannel-guard with scripts/bench/probe.ts
 * preloaded, which splits its correction into stages.
 *
 * Prints the figures; asserts nothing. Cleans up (namespace, processes) on
 * exit, error and Ctrl-C. Needs root.
 *
 * --realtime runs the guards (SCHED_FIFO 50) and the rewriter (49) under
 * chrt: on a machine shared with other work, their latency is their own.
 * The rewriter busy-polls while it waits for a correction (no sleeper for the
 * guard's notifications to wake, so the guard's CPU time is its own);
 * --rewriter-sleeps makes it sleep in poll() instead. On two or more CPUs
 * the guards run pinned to CPU 0 and the rewriter to CPU 1 (see scheduled());
 * --no-pin leaves placement to the kernel.
 *
 * Usage: node dist/scripts/bench/latency.js [--rewrites N] [--warmup N]
 *   [--interval-ms MS] [--neighbours K] [--links L] [--idle-seconds S]
 *   [--startups N] [--timeout-ms MS] [--b2b-gap-us US] [--breakdown] [--realtime]
 *   [--rewriter-sleeps] [--no-pin]
 */
import { spawn, spawnSync } from 'node:child_process';
import {
  closeSync,
  existsSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  rmSync,
  watch,
} from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { performance } from 'node:perf_hooks';

import {
  Netns,
  delay,
  destroyAll,
  registerSyncCleanup,
  trackChild,
  waitForExit,
  claimStateRoot,
  releaseStateRoot,
} from '../../test/support/netns';
import { BENCH_BIN, buildBenchTool } from '../../test/support/flooder';
import { CLI_NODE_FLAGS } from '../../test/support/node-child';
import { PROBE_MARKS } from './probe-marks';
import { percentile } from './stats';

const ROOT = join(__dirname, '..', '..', '..');
const CLI = join(ROOT, 'dist', 'lib', 'cli', 'main.js');
const PROBE = join(__dirname, 'probe.js');
const REFERENCE = join(BENCH_BIN, 'reference-guard');
const REWRITER = join(BENCH_BIN, 'rewriter');
const VTEP = 'flannel.1';
const PINNED = '0e:f1:a2:00:00:01';

// --- options ------------------------------------------------------------------

export interface Options {
  rewrites: number;
  warmup: number;
  intervalMs: number;
  neighbours: number;
  links: number;
  idleSeconds: number;
  startups: number;
  timeoutMs: number;
  gapUs: number;
  breakdown: boolean;
  realtime: boolean;
  rewriterSleeps: boolean;
  pinCpus: boolean;
  /** Another checkout whose guard runs side by side with this one (its dist/ built). */
  compare: string | undefined;
  /** Turns each guard takes per mode (the rewrites split among them). */
  blocks: number;
}

const USAGE =
  'usage: latency.js [--rewrites N] [--warmup N] [--interval-ms MS] [--neighbours K] [--links L]\n' +
  '                  [--idle-seconds S] [--startups N] [--timeout-ms MS] [--b2b-gap-us US]\n' +
  '                  [--breakdown] [--realtime] [--rewriter-sleeps] [--no-pin]\n' +
  '                  [--compare CHECKOUT] [--blocks N]';

export function parseOptions(argv: string[]): Options {
  const options: Options = {
    rewrites: 2000,
    warmup: 200,
    intervalMs: 5,
    neighbours: 10,
    links: 2000,
    idleSeconds: 60,
    startups: 5,
    timeoutMs: 2000,
    gapUs: 1000,
    breakdown: false,
    realtime: false,
    rewriterSleeps: false,
    pinCpus: availableParallelism() >= 2,
    compare: undefined,
    blocks: 1,
  };
  const numeric: Record<string, [keyof Options, number, number]> = {
    '--rewrites': ['rewrites', 1, 100_000],
    '--warmup': ['warmup', 0, 100_000],
    '--interval-ms': ['intervalMs', 1, 1000],
    '--neighbours': ['neighbours', 0, 10_000],
    '--links': ['links', 0, 10_000],
    '--idle-seconds': ['idleSeconds', 0, 3600],
    '--startups': ['startups', 0, 100],
    '--timeout-ms': ['timeoutMs', 10, 60_000],
    '--b2b-gap-us': ['gapUs', 0, 1_000_000],
    '--blocks': ['blocks', 1, 100],
  };
  for (let i = 0; i < argv.length; i += 1) {
    const flag = argv[i] ?? '';
    const booleans: Record<string, 'breakdown' | 'realtime' | 'rewriterSleeps'> = {
      '--breakdown': 'breakdown',
      '--realtime': 'realtime',
      '--rewriter-sleeps': 'rewriterSleeps',
    };
    const booleanOption = booleans[flag];
    if (booleanOption) {
      options[booleanOption] = true;
      continue;
    }
    if (flag === '--no-pin') {
      options.pinCpus = false;
      continue;
    }
    if (flag === '--compare') {
      const dir = argv[i + 1];
      if (dir === undefined || !existsSync(join(dir, 'dist', 'lib', 'cli', 'main.js'))) {
        throw new Error(`--compare: expected a checkout with dist/lib/cli/main.js built`);
      }
      options.compare = dir;
      i += 1;
      continue;
    }
    if (flag === '--help' || flag === '-h') {
      console.log(USAGE);
      process.exit(0);
    }
    const spec = numeric[flag];
    const value = Number(argv[i + 1]);
    if (!spec || !Number.isInteger(value) || value < spec[1] || value > spec[2]) {
      throw new Error(
        spec ? `${flag}: expected a whole number in ${spec[1]}..${spec[2]}` : `${flag}?\n${USAGE}`,
      );
    }
    (options[spec[0]] as number) = value;
    i += 1;
  }
  return options;
}

// --- statistics ---------------------------------------------------------------

export interface Distribution {
  n: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export function distribution(values: readonly number[]): Distribution {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? NaN,
  };
}

export function fmt(value: number, digits = 1): string {
  if (!Number.isFinite(value)) return '-';
  return value.toFixed(digits);
}

export function ratio(a: number, b: number): string {
  return Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : '-';
}

export function table(rows: string[][], rightAlignFrom = 1): string {
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  return rows
    .map((row) =>
      row
        .map((cell, i) =>
          i >= rightAlignFrom ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0),
        )
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

// --- /proc ----------------------------------------------------------------------

const CLOCK_TICKS = ((): number => {
  const result = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
  const ticks = Number(result.stdout.trim());
  return Number.isInteger(ticks) && ticks > 0 ? ticks : 100;
})();

interface ThreadSample {
  comm: string;
  switches: number;
  runNs: number;
}

interface ProcSample {
  pid: number;
  /** utime + stime of the whole process, in clock ticks. */
  ticks: number;
  userTicks: number;
  systemTicks: number;
  /** Sum of the threads' run time (schedstat), in ns. */
  runNs: number;
  /** Sum of the threads' voluntary and involuntary context switches. */
  switches: number;
  threads: Map<number, ThreadSample>;
}

function readText(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function statusField(status: string, field: string): number {
  const match = new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status);
  return match ? Number(match[1]) : NaN;
}

function sampleProc(pid: number): ProcSample {
  const stat = readText(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After "pid (comm) ": state is field 3, utime 14, stime 15.
  const userTicks = Number(fields[11]);
  const systemTicks = Number(fields[12]);
  const threads = new Map<number, ThreadSample>();
  let runNs = 0;
  let switches = 0;
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    /* exited */
  }
  for (const tid of tids) {
    const base = `/proc/${pid}/task/${tid}`;
    const status = readText(`${base}/status`);
    const thread: ThreadSample = {
      comm: readText(`${base}/comm`).trim(),
      switches:
        statusField(status, 'voluntary_ctxt_switches') +
        statusField(status, 'nonvoluntary_ctxt_switches'),
      runNs: Number(readText(`${base}/schedstat`).split(' ')[0]),
    };
    if (!Number.isFinite(thread.switches) || !Number.isFinite(thread.runNs)) continue;
    threads.set(Number(tid), thread);
    runNs += thread.runNs;
    switches += thread.switches;
  }
  return { pid, ticks: userTicks + systemTicks, userTicks, systemTicks, runNs, switches, threads };
}

/** Busy and total jiffies of the whole machine (every CPU), from /proc/stat. */
function hostCpu(): { busy: number; total: number } {
  const line = readText('/proc/stat').split('\n')[0] ?? '';
  const values = line.trim().split(/\s+/).slice(1).map(Number);
  const total = values.reduce((sum, v) => sum + v, 0);
  const idle = (values[3] ?? 0) + (values[4] ?? 0);
  return { busy: total - idle, total };
}

function loadAverage(): string {
  return readText('/proc/loadavg').split(' ').slice(0, 3).join(' ');
}

export function memory(pid: number): { hwmKiB: number; rssKiB: number } {
  const status = readText(`/proc/${pid}/status`);
  return { hwmKiB: statusField(status, 'VmHWM'), rssKiB: statusField(status, 'VmRSS') };
}

export interface CpuDelta {
  ticks: number;
  /** From utime + stime (clock-tick resolution). */
  cpuMs: number;
  userMs: number;
  systemMs: number;
  /** From the threads' schedstat (ns resolution): all threads, and the main one. */
  runMs: number;
  mainMs: number;
  switches: number;
  threads: { tid: number; comm: string; switches: number; runMs: number }[];
}

function cpuDelta(before: ProcSample, after: ProcSample): CpuDelta {
  const threads = [...after.threads].map(([tid, thread]) => {
    const earlier = before.threads.get(tid);
    return {
      tid,
      comm: thread.comm,
      switches: thread.switches - (earlier?.switches ?? 0),
      runMs: (thread.runNs - (earlier?.runNs ?? 0)) / 1e6,
    };
  });
  const ms = (ticks: number): number => (ticks * 1000) / CLOCK_TICKS;
  return {
    ticks: after.ticks - before.ticks,
    cpuMs: ms(after.ticks - before.ticks),
    userMs: ms(after.userTicks - before.userTicks),
    systemMs: ms(after.systemTicks - before.systemTicks),
    runMs: (after.runNs - before.runNs) / 1e6,
    mainMs: threads.find((t) => t.tid === after.pid)?.runMs ?? NaN,
    switches: after.switches - before.switches,
    threads,
  };
}

// --- processes ------------------------------------------------------------------

export interface GuardSpec {
  label: string;
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
}

let outputFiles = 0;

/**
 * A guard process. Its stdout goes to a file, not a pipe: a reader in this
 * process would wake on every line the guard prints and compete, on a small
 * machine, with the rewriter for the other CPU. The `ready` line is awaited
 * with inotify (fs.watch) and timed from spawn; the other lines are counted
 * when `refresh()` reads the file, between runs.
 */
export class GuardRun {
  readonly spawnedAt: number;
  readyMs = NaN;
  restored = 0;
  deferred = 0;
  contested = 0;
  readonly errors: string[] = [];
  /** How many lines of each event the guard printed. */
  readonly events = new Map<string, number>();
  /** Lines kept verbatim: the C reference's `exit` and `trace` lines. */
  readonly kept: string[] = [];
  stderr = '';
  readonly #child;
  readonly #outPath: string;
  readonly #unregister: () => void;
  #offset = 0;
  #pending = '';

  private constructor(readonly spec: GuardSpec) {
    outputFiles += 1;
    const outPath = join(tmpdir(), `fgb-out-${process.pid}-${outputFiles}.jsonl`);
    this.#outPath = outPath;
    this.#unregister = registerSyncCleanup(() => rmSync(outPath, { force: true }));
    const fd = openSync(outPath, 'w');
    try {
      this.spawnedAt = performance.now();
      this.#child = trackChild(
        spawn(spec.command, spec.args, {
          stdio: ['ignore', fd, 'pipe'],
          env: spec.env ?? process.env,
        }),
      );
    } finally {
      closeSync(fd);
    }
    this.#child.on('error', (error) => {
      this.stderr += String(error);
    });
    this.#child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (this.stderr.length < 65536) this.stderr += chunk;
    });
  }

  static async start(spec: GuardSpec, timeoutMs = 30_000): Promise<GuardRun> {
    const guard = new GuardRun(spec);
    const deadline = performance.now() + timeoutMs;
    try {
      await new Promise<void>((resolve, reject) => {
        const check = (): void => {
          guard.refresh();
          if (Number.isFinite(guard.readyMs)) {
            finish();
            resolve();
          } else if (!guard.alive || performance.now() > deadline) {
            finish();
            reject(
              new Error(
                `${spec.label} ${guard.alive ? 'not ready' : 'exited'} before its ready line: ${guard.stderr.trim()}`,
              ),
            );
          }
        };
        const watcher = watch(guard.#outPath, check);
        const interval = setInterval(check, 10);
        const finish = (): void => {
          watcher.close();
          clearInterval(interval);
        };
        check();
      });
    } catch (error) {
      await guard.stop();
      throw error;
    }
    return guard;
  }

  get pid(): number {
    const pid = this.#child.pid;
    if (pid === undefined) throw new Error(`${this.spec.label} has no pid`);
    return pid;
  }

  get alive(): boolean {
    return this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /** SIGTERM (SIGKILL after 5 s); then reads the rest of its output and removes the file. */
  async stop(): Promise<void> {
    if (this.alive) {
      this.#child.kill('SIGTERM');
      if (!(await waitForExit(this.#child, 5000))) {
        this.#child.kill('SIGKILL');
        await waitForExit(this.#child, 5000);
      }
    }
    this.refresh();
    rmSync(this.#outPath, { force: true });
    this.#unregister();
  }

  /** Reads what the guard printed since the last call. */
  refresh(): void {
    let fd: number;
    try {
      fd = openSync(this.#outPath, 'r');
    } catch {
      return;
    }
    try {
      const chunk = Buffer.alloc(1 << 20);
      for (;;) {
        const length = readSync(fd, chunk, 0, chunk.length, this.#offset);
        if (length <= 0) break;
        this.#offset += length;
        this.#onData(chunk.toString('utf8', 0, length));
      }
    } finally {
      closeSync(fd);
    }
  }

  #onData(chunk: string): void {
    this.#pending += chunk;
    const lines = this.#pending.split('\n');
    this.#pending = lines.pop() ?? '';
    for (const line of lines) {
      const event = /^\{"event":"([a-z]+)"/.exec(line)?.[1];
      if (event !== undefined) this.events.set(event, (this.events.get(event) ?? 0) + 1);
      if (line.startsWith('{"event":"restored"')) {
        this.restored += 1;
        if (line.includes('"deferred":true')) this.deferred += 1;
      } else if (line.startsWith('{"event":"ready"')) {
        this.readyMs = performance.now() - this.spawnedAt;
      } else if (line.startsWith('{"event":"error"')) {
        if (this.errors.length < 20) this.errors.push(line);
      } else if (line.startsWith('{"event":"contested"')) {
        this.contested += 1;
      } else if (line.startsWith('trace ') || line.startsWith('{"event":"exit"')) {
        this.kept.push(line);
      }
    }
  }
}

// --- the namespace ----------------------------------------------------------------

export interface Neighbour {
  ip: string;
  mac: string;
}

export interface Bench {
  options: Options;
  ns: Netns;
  ifindex: number;
  neighbours: Neighbour[];
  /** Rewriter runs so far: each gets its own tag in its foreign MACs. */
  runs: number;
}

function hex(byte: number): string {
  return byte.toString(16).padStart(2, '0');
}

function neighbourTable(count: number): Neighbour[] {
  return Array.from({ length: count }, (_, index) => {
    const i = index + 1;
    // Inside the test bed's pod network, 198.18.0.0/15, for up to 131 071 entries.
    return {
      ip: `198.${18 + (i >> 16)}.${(i >> 8) & 0xff}.${i & 0xff}`,
      mac: `0e:00:00:${hex(i >> 16)}:${hex((i >> 8) & 0xff)}:${hex(i & 0xff)}`,
    };
  });
}

export async function setUp(options: Options): Promise<Bench> {
  const ns = await Netns.create('fgb');
  const neighbours = neighbourTable(options.neighbours);
  await ns.ipBatch([
    'link add eth0 type veth peer name eth0p',
    'link set eth0 up',
    'link set eth0p up',
    'addr add 192.0.2.10/24 dev eth0',
    `link add ${VTEP} type vxlan id 1 dstport 8472 nolearning local 192.0.2.10 dev eth0`,
    `link set ${VTEP} address ${PINNED}`,
    `addr add 198.18.0.0/32 dev ${VTEP}`,
    `link set ${VTEP} up`,
    ...neighbours.map((n) => `neigh replace ${n.ip} lladdr ${n.mac} dev ${VTEP} nud permanent`),
  ]);
  const [link] = await ns.ipJson<{ ifindex: number }[]>(['link', 'show', VTEP]);
  if (!link) throw new Error(`${VTEP} not found`);
  return { options, ns, ifindex: link.ifindex, neighbours, runs: 0 };
}

/** Puts flannel.1 back at the pinned MAC with every entry, if a guard left it otherwise. */
async function ensureState(bench: Bench): Promise<string | null> {
  const [link] = await bench.ns.ipJson<{ address?: string }[]>(['link', 'show', VTEP]);
  const entries = await bench.ns.ipJson<{ dst: string; state?: string[] }[]>([
    'neigh',
    'show',
    'dev',
    VTEP,
    'nud',
    'permanent',
  ]);
  if (link?.address === PINNED && entries.length >= bench.neighbours.length) return null;
  await bench.ns.ipBatch([
    `link set ${VTEP} address ${PINNED}`,
    ...bench.neighbours.map(
      (n) => `neigh replace ${n.ip} lladdr ${n.mac} dev ${VTEP} nud permanent`,
    ),
  ]);
  return `state repaired (mac ${link?.address ?? '?'}, ${entries.length} entries)`;
}

export async function addLinks(bench: Bench, count: number): Promise<number> {
  const started = performance.now();
  for (let first = 0; first < count; first += 500) {
    const lines: string[] = [];
    for (let i = first; i < Math.min(count, first + 500); i += 1) {
      lines.push(`link add fgbl${i} type ifb`);
    }
    await bench.ns.ipBatch(lines);
  }
  return performance.now() - started;
}

async function linkCount(bench: Bench): Promise<number> {
  return (await bench.ns.ipJson<unknown[]>(['link', 'show'])).length;
}

// --- guards -------------------------------------------------------------------------

/**
 * The command line, under SCHED_FIFO with --realtime: the guards at 50, the
 * rewriter at 49, so that a guard (and its helper threads) always preempts the
 * busy-polling rewriter rather than waiting behind it. Pinned (the default on
 * two or more CPUs): the guards on CPU 0, the rewriter on CPU 1. Unpinned, the
 * kernel wakes the rewriter on the CPU of the guard whose write woke it, and
 * the rewriter sees the MAC back only once the guard has finished all the
 * rest of its work (reporting, bookkeeping) and left that CPU: the figure
 * then measures the guard's whole event handling, not the correction.
 */
function scheduled(
  bench: Bench,
  command: string,
  args: string[],
  role: 'guard' | 'rewriter' = 'guard',
): [string, string[]] {
  const realtime: [string, string[]] = bench.options.realtime
    ? ['chrt', ['-f', role === 'guard' ? '50' : '49', command, ...args]]
    : [command, args];
  if (!bench.options.pinCpus) return realtime;
  const [program, programArgs] = realtime;
  return ['taskset', ['-c', role === 'guard' ? '0' : '1', program, ...programArgs]];
}

export function referenceSpec(bench: Bench, trace = false): GuardSpec {
  const [command, args] = scheduled(bench, REFERENCE, [
    ...(trace ? ['-t'] : []),
    '-n',
    bench.ns.path,
    String(bench.ifindex),
    PINNED,
    ...bench.neighbours.map((n) => `${n.ip}=${n.mac}`),
  ]);
  return { label: 'C reference', command, args };
}

export function flannelGuardSpec(bench: Bench, probeOut?: string, checkout?: string): GuardSpec {
  // Given as a flag, not left to the environment: a build from before FLANNEL_GUARD_STATE_DIR
  // (a --compare checkout) would write the machine's /run/flannel-guard.
  const stateDir = process.env.FLANNEL_GUARD_STATE_DIR;
  const [command, args] = scheduled(bench, process.execPath, [
    ...CLI_NODE_FLAGS,
    ...(probeOut === undefined ? [] : ['-r', PROBE]),
    checkout === undefined ? CLI : join(checkout, 'dist', 'lib', 'cli', 'main.js'),
    'watch',
    '--netns',
    bench.ns.name,
    '--mac',
    `${VTEP}=${PINNED}`,
    '--rewrite-window',
    '1',
    '--offload',
    'none',
    ...(stateDir === undefined ? [] : ['--state-dir', stateDir]),
    '--json',
  ]);
  return {
    label: checkout === undefined ? 'flannel-guard' : `flannel-guard @ ${basename(checkout)}`,
    command,
    args,
    ...(probeOut === undefined ? {} : { env: { ...process.env, FG_PROBE_OUT: probeOut } }),
  };
}

// --- the rewriter ---------------------------------------------------------------------

interface Sample {
  /** Absolute CLOCK_MONOTONIC of the rewrite, ns. */
  t0: number;
  /** Rewrite -> pinned MAC seen, ns (-1: not seen). */
  mac: number;
  /** Rewrite -> MAC and every neighbour entry seen, ns (-1: not seen). */
  full: number;
}

interface RewriteRun {
  samples: Sample[];
  summary: Record<string, number>;
}

/**
 * Runs the rewriter: paced when intervalMs > 0, else back to back (each round
 * once the previous one is complete and, given its pid, the guard asleep).
 */
async function rewrite(
  bench: Bench,
  count: number,
  intervalMs: number,
  guardPid?: number,
): Promise<RewriteRun> {
  bench.runs += 1;
  const { options } = bench;
  // Room for fight-control backoffs (~1 s each) in a back-to-back run; bounded all the same.
  const maxSeconds = Math.min(600, Math.ceil((count * intervalMs) / 1000 + 180));
  const [command, args] = scheduled(
    bench,
    REWRITER,
    [
      '-n',
      bench.ns.path,
      '-i',
      String(bench.ifindex),
      '-m',
      PINNED,
      '-c',
      String(count),
      '-k',
      String(bench.neighbours.length),
      '-p',
      String(intervalMs * 1000),
      ...(guardPid === undefined ? [] : ['-g', String(guardPid)]),
      ...(intervalMs > 0 ? [] : ['-G', String(options.gapUs)]),
      ...(options.rewriterSleeps ? [] : ['-b']),
      '-t',
      String(options.timeoutMs),
      '-T',
      String(maxSeconds),
      '-r',
      String(bench.runs & 0xff),
    ],
    'rewriter',
  );
  const child = trackChild(spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] }));
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const closed = new Promise<number | null>((resolve) => child.once('close', resolve));
  const timer = setTimeout(() => child.kill('SIGKILL'), (maxSeconds + 10) * 1000);
  const code = await closed;
  clearTimeout(timer);
  if (code !== 0) throw new Error(`rewriter exited with ${code}: ${stderr.trim()}`);
  const samples: Sample[] = [];
  const summary: Record<string, number> = {};
  for (const line of stdout.split('\n')) {
    const parts = line.split(' ');
    if (parts[0] === 'sample') {
      samples.push({ t0: Number(parts[2]), mac: Number(parts[3]), full: Number(parts[4]) });
    } else if (parts[0] === 'summary') {
      for (const pair of parts.slice(1)) {
        const [key, value] = pair.split('=');
        if (key !== undefined) summary[key] = Number(value);
      }
    }
  }
  if (stderr.trim() !== '') process.stderr.write(stderr);
  return { samples, summary };
}

/** Fight control's first backoff is 1 s +-20 %: nothing else takes this long here. */
const BACKOFF_MS = 500;

/**
 * The samples without the `deferred` slowest ones, when those took longer
 * than BACKOFF_MS: corrections the guard reported as deferred by fight
 * control (a policy delay, not latency), counted apart.
 */
function withoutBackoff(samples: readonly Sample[], deferred: number): Sample[] {
  if (deferred <= 0) return [...samples];
  const slowest = [...samples]
    .sort((a, b) => b.mac - a.mac)
    .slice(0, deferred)
    .filter((s) => s.mac >= BACKOFF_MS * 1e6);
  const drop = new Set(slowest);
  return samples.filter((s) => !drop.has(s));
}

function microseconds(samples: readonly Sample[], field: 'mac' | 'full'): number[] {
  return samples.filter((s) => s[field] >= 0).map((s) => s[field] / 1000);
}

// --- measurements -----------------------------------------------------------------------

type ModeName = 'paced' | 'back-to-back';

export interface ModeFigures {
  mode: ModeName;
  mac: Distribution;
  full: Distribution;
  rounds: number;
  corrections: number;
  missed: number;
  cpu: CpuDelta;
  deferred: number;
  /** Rounds left out of the distributions as fight-control backoff. */
  excluded: number;
  /** Back to back: rounds started while the guard was still busy after 1 s. */
  busy: number;
  /** Share of the machine's CPU time that was busy during the run (all processes). */
  hostBusy: number;
  samples: Sample[];
  /** Each block (turn) on its own: set side by side with another guard's same turn. */
  turns: TurnFigures[];
}

/** One turn's figures: p50 of the MAC back, and CPU per correction (schedstat) with two of its parts, us. */
export interface TurnFigures {
  p50: number;
  cpu: number;
  main: number;
  reader: number;
}

export interface GuardFigures {
  label: string;
  startupMs: number;
  cold: Sample | undefined;
  modes: ModeFigures[];
  hwmKiB: number;
  rssKiB: number;
  errors: string[];
  contested: number;
  /** Lines per event the guard printed while measured (start-up included). */
  events: Map<string, number>;
  repaired: string | null;
}

/** One block of rounds of a mode, as measured. */
interface ModeBlock {
  samples: Sample[];
  cpu: CpuDelta;
  deferred: number;
  busy: number;
  hostBusy: number;
}

async function runBlock(
  bench: Bench,
  guard: GuardRun,
  mode: ModeName,
  rounds: number,
): Promise<ModeBlock> {
  guard.refresh();
  const deferredBefore = guard.deferred;
  const hostBefore = hostCpu();
  const before = sampleProc(guard.pid);
  const run =
    mode === 'paced'
      ? await rewrite(bench, rounds, bench.options.intervalMs)
      : await rewrite(bench, rounds, 0, guard.pid);
  const after = sampleProc(guard.pid);
  const hostAfter = hostCpu();
  guard.refresh();
  return {
    samples: run.samples,
    cpu: cpuDelta(before, after),
    deferred: guard.deferred - deferredBefore,
    busy: run.summary.busy ?? 0,
    hostBusy: (hostAfter.busy - hostBefore.busy) / Math.max(1, hostAfter.total - hostBefore.total),
  };
}

function sumCpu(a: CpuDelta, b: CpuDelta): CpuDelta {
  const threads = new Map(a.threads.map((t) => [t.tid, { ...t }]));
  for (const t of b.threads) {
    const known = threads.get(t.tid);
    if (known) {
      known.switches += t.switches;
      known.runMs += t.runMs;
    } else {
      threads.set(t.tid, { ...t });
    }
  }
  return {
    ticks: a.ticks + b.ticks,
    cpuMs: a.cpuMs + b.cpuMs,
    userMs: a.userMs + b.userMs,
    systemMs: a.systemMs + b.systemMs,
    runMs: a.runMs + b.runMs,
    mainMs: a.mainMs + b.mainMs,
    switches: a.switches + b.switches,
    threads: [...threads.values()],
  };
}

/** Rounds whose MAC came back (the rest were missed). */
function correctionsIn(samples: readonly Sample[]): number {
  return samples.filter((s) => s.mac >= 0).length;
}

function modeFigures(mode: ModeName, blocks: readonly ModeBlock[]): ModeFigures {
  const [first, ...rest] = blocks;
  if (!first) throw new Error('no block measured');
  const samples = blocks.flatMap((b) => b.samples);
  const deferred = blocks.reduce((sum, b) => sum + b.deferred, 0);
  const corrections = correctionsIn(samples);
  const kept = withoutBackoff(samples, deferred);
  return {
    mode,
    mac: distribution(microseconds(kept, 'mac')),
    full: distribution(microseconds(kept, 'full')),
    rounds: samples.length,
    corrections,
    missed: samples.length - corrections,
    cpu: rest.reduce((sum, b) => sumCpu(sum, b.cpu), first.cpu),
    deferred,
    excluded: samples.length - kept.length,
    busy: blocks.reduce((sum, b) => sum + b.busy, 0),
    hostBusy: blocks.reduce((sum, b) => sum + b.hostBusy, 0) / blocks.length,
    samples,
    turns: blocks.map((b) => {
      const turnKept = withoutBackoff(b.samples, b.deferred);
      const turnCorrections = correctionsIn(b.samples);
      const per = (ms: number): number =>
        turnCorrections > 0 ? (ms * 1000) / turnCorrections : NaN;
      return {
        p50: distribution(microseconds(turnKept, 'mac')).p50,
        cpu: per(b.cpu.runMs),
        main: per(b.cpu.mainMs),
        reader: per(readerMs(b.cpu)),
      };
    }),
  };
}

/** A guard to measure, in its own namespace. */
export interface Measured {
  bench: Bench;
  spec: GuardSpec;
}

/**
 * Starts the guards, times each one's first (cold) correction, warms them up, then runs
 * both modes in `blocks` blocks, taking turns: guard A's block, guard B's, C's, then
 * B's, C's, A's. The machine's speed drifts by tens of percent over a minute here;
 * taking turns puts the same drift into every guard's figures, and rotating the order
 * gives each guard each place in a turn alike (with blocks a multiple of the guards).
 * The speed also changes within seconds, so pooled figures of two copies of one build
 * still differ by up to a third paced; turnRows sets them side by side turn by turn
 * (docs/design.md).
 * `keep`: the guards are left running (the caller stops them).
 */
export async function measureGuards(
  measured: readonly Measured[],
  blocks = 1,
  keep = false,
): Promise<{ figures: GuardFigures; guard: GuardRun }[]> {
  const started: { bench: Bench; spec: GuardSpec; guard: GuardRun; repaired: string | null }[] = [];
  try {
    for (const { bench, spec } of measured) {
      const repaired = await ensureState(bench);
      started.push({ bench, spec, guard: await GuardRun.start(spec), repaired });
    }
    const colds: (Sample | undefined)[] = [];
    for (const { bench, guard } of started) {
      colds.push((await rewrite(bench, 1, 0)).samples[0]);
      if (bench.options.warmup > 0) await rewrite(bench, bench.options.warmup, 0, guard.pid);
    }
    const modes = started.map((): ModeFigures[] => []);
    for (const mode of ['paced', 'back-to-back'] as const) {
      const runs = started.map((): ModeBlock[] => []);
      for (let block = 0; block < blocks; block += 1) {
        const entries = [...started.entries()];
        const turn = block % entries.length;
        const order = [...entries.slice(turn), ...entries.slice(0, turn)];
        for (const [i, { bench, guard }] of order) {
          const total = bench.options.rewrites;
          const rounds =
            Math.floor((total * (block + 1)) / blocks) - Math.floor((total * block) / blocks);
          if (rounds > 0) runs[i]?.push(await runBlock(bench, guard, mode, rounds));
        }
      }
      runs.forEach((blocksRun, i) => modes[i]?.push(modeFigures(mode, blocksRun)));
    }
    return await Promise.all(
      started.map(async ({ spec, guard, repaired }, i) => {
        const { hwmKiB, rssKiB } = memory(guard.pid);
        const figures: GuardFigures = {
          label: spec.label,
          startupMs: guard.readyMs,
          cold: colds[i],
          modes: modes[i] ?? [],
          hwmKiB,
          rssKiB,
          errors: guard.errors,
          contested: guard.contested,
          events: guard.events,
          repaired,
        };
        if (!keep) await guard.stop();
        return { figures, guard };
      }),
    );
  } catch (error) {
    for (const { guard } of started) await guard.stop();
    throw error;
  }
}

/** Starts a guard, times its first (cold) correction, warms it up, runs both modes. */
export async function measureGuard(
  bench: Bench,
  spec: GuardSpec,
  keep = false,
): Promise<{ figures: GuardFigures; guard: GuardRun }> {
  const [measured] = await measureGuards([{ bench, spec }], 1, keep);
  if (!measured) throw new Error('no guard measured');
  return measured;
}

export async function measureStartups(
  bench: Bench,
  spec: GuardSpec,
  count: number,
): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const guard = await GuardRun.start(spec);
    times.push(guard.readyMs);
    await guard.stop();
  }
  return times;
}

interface IdleFigures {
  label: string;
  pid: number;
  cpu: CpuDelta;
  /** The same, per slice of IDLE_SLICE_S seconds: when the wakeups happened. */
  slices: CpuDelta[];
}

const IDLE_SLICE_S = 10;

/**
 * Both guards at once in the namespace (flannel-guard right after its runs,
 * a fresh C reference), nothing happening, for `seconds`.
 */
async function measureIdle(
  bench: Bench,
  flannelGuard: GuardRun,
  seconds: number,
): Promise<IdleFigures[]> {
  const reference = await GuardRun.start(referenceSpec(bench));
  try {
    await delay(1000);
    const guards = [reference, flannelGuard];
    const first = guards.map((guard) => sampleProc(guard.pid));
    let previous = first;
    const slices: CpuDelta[][] = guards.map(() => []);
    for (let done = 0; done < seconds; done += IDLE_SLICE_S) {
      await delay(Math.min(IDLE_SLICE_S, seconds - done) * 1000);
      const now = guards.map((guard) => sampleProc(guard.pid));
      now.forEach((sample, i) => {
        const before = previous[i];
        if (before) slices[i]?.push(cpuDelta(before, sample));
      });
      previous = now;
    }
    return guards.map((guard, i) => ({
      label: guard.spec.label,
      pid: guard.pid,
      cpu: cpuDelta(first[i] ?? sampleProc(guard.pid), previous[i] ?? sampleProc(guard.pid)),
      slices: slices[i] ?? [],
    }));
  } finally {
    await reference.stop();
  }
}

// --- breakdown ------------------------------------------------------------------------------

interface Mark {
  code: number;
  t: number;
  extra: number;
}

interface StageRow {
  stage: string;
  values: number[];
}

function stage(rows: Map<string, number[]>, name: string, value: number | undefined): void {
  if (value === undefined || !Number.isFinite(value)) return;
  let list = rows.get(name);
  if (!list) rows.set(name, (list = []));
  list.push(value / 1000);
}

/** Index of the first mark at or after `t` (marks are in time order). */
function firstAtOrAfter(marks: readonly Mark[], t: number): number {
  let low = 0;
  let high = marks.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if ((marks[middle]?.t ?? Infinity) < t) low = middle + 1;
    else high = middle;
  }
  return low;
}

function flannelGuardStages(marks: readonly Mark[], samples: readonly Sample[]): StageRow[] {
  const rows = new Map<string, number[]>();
  const M = PROBE_MARKS;
  samples.forEach((sample, index) => {
    // Missed, or a correction fight control deferred: not a latency.
    if (sample.mac < 0 || sample.mac >= BACKOFF_MS * 1e6) return;
    const next = samples[index + 1]?.t0 ?? Infinity;
    let i = firstAtOrAfter(marks, sample.t0);
    while (i < marks.length && marks[i]?.code !== M.batchIn) i += 1;
    const batchIn = marks[i];
    if (!batchIn || batchIn.t >= next) return;
    const pairs: Record<number, { in: number; out: number }[]> = {};
    let open: number | undefined;
    let batchOut: Mark | undefined;
    for (i += 1; i < marks.length; i += 1) {
      const mark = marks[i];
      if (!mark) break;
      if (mark.code === M.batchOut) {
        batchOut = mark;
        break;
      }
      if (mark.code % 2 === 0) open = mark.t;
      else if (open !== undefined) (pairs[mark.code - 1] ??= []).push({ in: open, out: mark.t });
    }
    if (!batchOut) return;
    const getLinks = pairs[M.getLinkIn] ?? [];
    const writes = pairs[M.writeIn] ?? [];
    const setMac = pairs[M.setMacIn]?.[0];
    const target = getLinks[0];
    const verify = getLinks[1];
    const rewriteLine = writes[0];
    const neighbours = pairs[M.neighIn] ?? [];
    const restoredLine = writes[1];
    const pinnedSeen = sample.t0 + sample.mac;
    stage(rows, 'event into JS: rewrite -> monitor batch callback', batchIn.t - sample.t0);
    if (target && rewriteLine) {
      stage(
        rows,
        'LinkMonitor + guard logic before the first request',
        target.in - batchIn.t - (rewriteLine.out - rewriteLine.in),
      );
      stage(rows, "'rewrite' JSON line to stdout", rewriteLine.out - rewriteLine.in);
    }
    if (target) stage(rows, 'write-target re-read (getLink)', target.out - target.in);
    if (target && setMac) stage(rows, 'between re-read and setlink', setMac.in - target.out);
    if (setMac) {
      stage(rows, 'setlink request + ACK', setMac.out - setMac.in);
      stage(rows, 'setlink start -> rewriter sees pinned MAC', pinnedSeen - setMac.in);
    }
    stage(rows, '= MAC back (rewriter)', sample.mac);
    if (neighbours.length > 0) {
      stage(
        rows,
        `neighbour replaces (${neighbours.length}, summed)`,
        neighbours.reduce((sum, p) => sum + p.out - p.in, 0),
      );
    }
    if (verify) stage(rows, 'verification re-read (getLink)', verify.out - verify.in);
    if (restoredLine)
      stage(rows, "'restored' JSON line to stdout", restoredLine.out - restoredLine.in);
    const lastRequest = verify ?? neighbours[neighbours.length - 1] ?? setMac;
    if (lastRequest) {
      stage(rows, 'after the last request to batch end', batchOut.t - lastRequest.out);
    }
    stage(rows, 'JS time in the correcting batch', batchOut.t - batchIn.t);
    // The echoes: the guard's own writes and the flush, delivered as later batches.
    let echoes = 0;
    let echoTime = 0;
    let echoIn: number | undefined;
    for (i += 1; i < marks.length; i += 1) {
      const mark = marks[i];
      if (!mark || mark.t >= next) break;
      if (mark.code === M.batchIn) echoIn = mark.t;
      if (mark.code === M.batchOut && echoIn !== undefined) {
        echoes += 1;
        echoTime += mark.t - echoIn;
        echoIn = undefined;
      }
    }
    stage(rows, `later batches (echoes, flush) JS time`, echoTime);
    stage(rows, `later batches (count x1000)`, echoes * 1000);
    if (sample.full >= 0) stage(rows, '= MAC + neighbours back (rewriter)', sample.full);
  });
  return [...rows].map(([name, values]) => ({ stage: name, values }));
}

function referenceStages(traces: readonly number[][], samples: readonly Sample[]): StageRow[] {
  const rows = new Map<string, number[]>();
  const wakes = traces.map((t) => ({ code: 0, t: t[0] ?? NaN, extra: 0 }));
  for (const sample of samples) {
    if (sample.mac < 0 || sample.mac >= BACKOFF_MS * 1e6) continue;
    const index = firstAtOrAfter(wakes, sample.t0);
    const trace = traces[index];
    if (!trace) continue;
    const [wake = NaN, setlink = NaN, done = NaN] = trace;
    stage(rows, 'event to guard: rewrite -> poll() returns', wake - sample.t0);
    stage(rows, 'recv + parse before the setlink', setlink - wake);
    stage(rows, 'setlink start -> rewriter sees pinned MAC', sample.t0 + sample.mac - setlink);
    stage(rows, '= MAC back (rewriter)', sample.mac);
    stage(rows, 'setlink + neighbour replaces', done - setlink);
    if (sample.full >= 0) stage(rows, '= MAC + neighbours back (rewriter)', sample.full);
  }
  return [...rows].map(([name, values]) => ({ stage: name, values }));
}

interface Breakdown {
  mode: ModeName;
  flannelGuard: StageRow[];
  reference: StageRow[];
  /** System calls per correction (perf's raw_syscalls:sys_enter, all threads); NaN without perf. */
  syscalls: { flannelGuard: number; reference: number };
}

const PERF_AVAILABLE = ((): boolean => {
  const result = spawnSync('perf', ['stat', '-x,', '-e', 'raw_syscalls:sys_enter', 'true'], {
    encoding: 'utf8',
    timeout: 10_000,
  });
  return result.status === 0 && /raw_syscalls:sys_enter/.test(result.stderr);
})();

/** Runs `during` with `perf stat` counting the system calls of `pid`; NaN without perf. */
async function countSyscalls<T>(
  pid: number,
  during: () => Promise<T>,
): Promise<{ result: T; syscalls: number }> {
  if (!PERF_AVAILABLE) return { result: await during(), syscalls: NaN };
  const perf = trackChild(
    spawn('perf', ['stat', '-x,', '-e', 'raw_syscalls:sys_enter', '-p', String(pid)], {
      stdio: ['ignore', 'ignore', 'pipe'],
    }),
  );
  let stderr = '';
  perf.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  await delay(300); // attached
  let result: T;
  try {
    result = await during();
  } finally {
    perf.kill('SIGINT');
    if (!(await waitForExit(perf, 5000))) perf.kill('SIGKILL');
  }
  const line = stderr.split('\n').find((l) => l.includes('raw_syscalls:sys_enter'));
  return { result, syscalls: Number(line?.split(',')[0]) };
}

async function measureBreakdown(bench: Bench): Promise<Breakdown[]> {
  const { options } = bench;
  const probeOut = join(tmpdir(), `fgb-probe-${process.pid}.txt`);
  const unregister = registerSyncCleanup(() => rmSync(probeOut, { force: true }));
  try {
    const runs = async (
      spec: GuardSpec,
    ): Promise<{ guard: GuardRun; modes: Sample[][]; syscalls: number[] }> => {
      await ensureState(bench);
      const guard = await GuardRun.start(spec);
      try {
        await rewrite(bench, 1 + options.warmup, 0, guard.pid);
        const modes: Sample[][] = [];
        const syscalls: number[] = [];
        for (const interval of [options.intervalMs, 0]) {
          const counted = await countSyscalls(guard.pid, () =>
            rewrite(bench, options.rewrites, interval, interval > 0 ? undefined : guard.pid),
          );
          const samples = counted.result.samples;
          modes.push(samples);
          syscalls.push(counted.syscalls / Math.max(1, samples.filter((x) => x.mac >= 0).length));
        }
        return { guard, modes, syscalls };
      } finally {
        await guard.stop();
      }
    };
    const fg = await runs(flannelGuardSpec(bench, probeOut));
    const marks: Mark[] = readText(probeOut)
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => {
        const [code, t, extra] = line.split(' ').map(Number);
        return { code: code ?? -1, t: t ?? NaN, extra: extra ?? 0 };
      });
    const ref = await runs(referenceSpec(bench, true));
    const traces = ref.guard.kept
      .filter((line) => line.startsWith('trace '))
      .map((line) => line.split(' ').slice(1).map(Number));
    return (['paced', 'back-to-back'] as const).map((mode, i) => ({
      mode,
      flannelGuard: flannelGuardStages(marks, fg.modes[i] ?? []),
      reference: referenceStages(traces, ref.modes[i] ?? []),
      syscalls: { flannelGuard: fg.syscalls[i] ?? NaN, reference: ref.syscalls[i] ?? NaN },
    }));
  } finally {
    rmSync(probeOut, { force: true });
    unregister();
  }
}

// --- report ---------------------------------------------------------------------------------

interface Phase {
  name: string;
  links: number;
  startups: Record<string, number[]>;
  guards: GuardFigures[];
}

function latencyRows(phases: readonly Phase[]): string[][] {
  const rows: string[][] = [
    [
      'phase',
      'mode',
      'measure',
      'guard',
      'n',
      'p50',
      'p90',
      'p99',
      'max',
      'missed',
      'backoff',
      'host busy',
    ],
  ];
  for (const phase of phases) {
    const [reference] = phase.guards;
    if (!reference) continue;
    for (const mode of ['paced', 'back-to-back'] as const) {
      for (const measure of ['mac', 'full'] as const) {
        const label = measure === 'mac' ? 'MAC back' : 'MAC + neigh back';
        const figures = phase.guards.map((g) => ({
          label: g.label,
          m: g.modes.find((x) => x.mode === mode),
        }));
        for (const { label: guard, m } of figures) {
          if (!m) continue;
          const d = m[measure];
          rows.push([
            phase.name,
            mode,
            label,
            guard,
            String(d.n),
            fmt(d.p50),
            fmt(d.p90),
            fmt(d.p99),
            fmt(d.max),
            String(m.missed),
            m.deferred === m.excluded ? String(m.deferred) : `${m.deferred} (${m.excluded} excl.)`,
            `${fmt(m.hostBusy * 100, 0)} %`,
          ]);
        }
        const r = figures[0]?.m;
        for (const { label: guard, m: g } of figures.slice(1)) {
          if (!r || !g) continue;
          rows.push([
            phase.name,
            mode,
            label,
            `ratio ${guard}/C`,
            '',
            ratio(g[measure].p50, r[measure].p50),
            ratio(g[measure].p90, r[measure].p90),
            ratio(g[measure].p99, r[measure].p99),
            ratio(g[measure].max, r[measure].max),
            '',
            '',
            '',
          ]);
        }
      }
    }
  }
  return rows;
}

function costRows(phases: readonly Phase[]): string[][] {
  const rows: string[][] = [
    [
      'phase',
      'guard',
      'start-up p50',
      'start-up max',
      'cold MAC',
      'cold full',
      'peak RSS',
      'RSS now',
    ],
  ];
  for (const phase of phases) {
    for (const g of phase.guards) {
      const starts = distribution([g.startupMs, ...(phase.startups[g.label] ?? [])]);
      rows.push([
        phase.name,
        g.label,
        `${fmt(starts.p50)} ms`,
        `${fmt(starts.max)} ms`,
        g.cold && g.cold.mac >= 0 ? `${fmt(g.cold.mac / 1000)} us` : '-',
        g.cold && g.cold.full >= 0 ? `${fmt(g.cold.full / 1000)} us` : '-',
        `${fmt(g.hwmKiB / 1024)} MiB`,
        `${fmt(g.rssKiB / 1024)} MiB`,
      ]);
    }
  }
  return rows;
}

/** The addon's reader names itself (native/read_thread.cc); the rest are V8's and libuv's. */
function readerMs(cpu: CpuDelta): number {
  return cpu.threads.filter((t) => t.comm === 'fg-reader').reduce((sum, t) => sum + t.runMs, 0);
}

function cpuRows(phases: readonly Phase[]): string[][] {
  const rows: string[][] = [
    [
      'phase',
      'mode',
      'guard',
      'corrections',
      'ticks',
      'CPU/corr',
      'user/corr',
      'sys/corr',
      'run/corr',
      'main thread',
      'reader thread',
      'other threads',
      'switches/corr',
    ],
  ];
  for (const phase of phases) {
    for (const mode of ['paced', 'back-to-back'] as const) {
      for (const g of phase.guards) {
        const m = g.modes.find((x) => x.mode === mode);
        if (!m || m.corrections === 0) continue;
        const per = (ms: number): string => fmt((ms * 1000) / m.corrections);
        const reader = readerMs(m.cpu);
        rows.push([
          phase.name,
          mode,
          g.label,
          String(m.corrections),
          String(m.cpu.ticks),
          per(m.cpu.cpuMs),
          per(m.cpu.userMs),
          per(m.cpu.systemMs),
          per(m.cpu.runMs),
          per(m.cpu.mainMs),
          per(reader),
          per(m.cpu.runMs - m.cpu.mainMs - reader),
          fmt(m.cpu.switches / m.corrections, 2),
        ]);
      }
    }
  }
  return rows;
}

/**
 * Compared with another checkout: this checkout's guard over the other's, turn by turn. The
 * machine's speed changes within seconds (one guard's paced CPU per correction ranged 2.5x
 * from one 2.5 s turn to the next here), so the pooled figures above can differ by tens of
 * percent between two copies of one build; a ratio taken within each turn, and its median
 * over many turns, is the figure that holds.
 */
function turnRows(phases: readonly Phase[]): string[][] {
  const rows: string[][] = [
    ['phase', 'mode', 'measure', 'turns', 'median', 'quartiles', 'range', 'this one lower'],
  ];
  const spread = (values: number[]): string[] => {
    const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
    const at = (fraction: number): string => fmt(percentile(sorted, fraction), 2);
    return [
      String(sorted.length),
      at(0.5),
      `${at(0.25)}-${at(0.75)}`,
      `${fmt(sorted[0] ?? NaN, 2)}-${fmt(sorted[sorted.length - 1] ?? NaN, 2)}`,
      `${sorted.filter((r) => r < 1).length} of ${sorted.length}`,
    ];
  };
  for (const phase of phases) {
    const [, own, compared] = phase.guards;
    if (!own || !compared) continue;
    for (const mode of ['paced', 'back-to-back'] as const) {
      const a = own.modes.find((m) => m.mode === mode)?.turns ?? [];
      const b = compared.modes.find((m) => m.mode === mode)?.turns ?? [];
      const ratios = (field: keyof TurnFigures): number[] =>
        a.map((turn, i) => turn[field] / (b[i]?.[field] ?? NaN));
      rows.push([phase.name, mode, 'p50 MAC back', ...spread(ratios('p50'))]);
      rows.push([phase.name, mode, 'CPU per correction', ...spread(ratios('cpu'))]);
      rows.push([phase.name, mode, '  main thread', ...spread(ratios('main'))]);
      rows.push([phase.name, mode, '  reader thread', ...spread(ratios('reader'))]);
    }
  }
  return rows.length > 1 ? rows : [];
}

function report(
  options: Options,
  phases: readonly Phase[],
  idle: readonly IdleFigures[],
  breakdown: readonly Breakdown[] | undefined,
  notes: readonly string[],
): void {
  const out: string[] = [];
  out.push(
    `flannel-guard vs C reference guard: ${VTEP} (vxlan) with ${options.neighbours} permanent neighbour entries; ` +
      `${options.rewrites} rewrites per mode after ${options.warmup} warm-up (paced: one every ${options.intervalMs} ms; ` +
      `back-to-back: next rewrite once MAC and entries are back and the guard's main thread sleeps again, ` +
      `at least ${options.gapUs} us after the previous one); ` +
      `${options.realtime ? 'SCHED_FIFO: guards 50, rewriter 49' : 'default scheduling'}; ` +
      `${options.pinCpus ? 'guards pinned to CPU 0, rewriter to CPU 1' : 'not pinned'}; ` +
      `rewriter ${options.rewriterSleeps ? 'sleeps in poll' : 'busy-polls'} while it waits; ${CLOCK_TICKS} clock ticks/s`,
  );
  out.push('');
  out.push(
    'Latency, microseconds, from the rewrite (rewriter, right before its write) to what its netlink socket sees:',
  );
  out.push(table(latencyRows(phases), 4));
  out.push(
    `missed: no correction within ${options.timeoutMs} ms; backoff: corrections fight control deferred (~1 s each; left out of the figures).`,
  );
  out.push('');
  out.push(
    'Start-up = process start to the ready line (5 ms-class noise: inotify on its output file); cold = the',
  );
  out.push('first correction after ready; peak RSS = VmHWM at the end of the runs.');
  out.push(table(costRows(phases), 2));
  out.push('');
  out.push(
    'CPU per correction, us: CPU/user/sys from utime/stime (clock ticks, so +-1 tick over the run);',
  );
  out.push(
    "run/main/other from the threads' schedstat (ns); everything the process did during the run counts.",
  );
  out.push(table(cpuRows(phases), 3));
  out.push('');
  const turns = turnRows(phases);
  if (turns.length > 0) {
    const [, own, compared] = phases[0]?.guards ?? [];
    out.push(
      `Side by side, turn by turn: ${own?.label ?? ''} over ${compared?.label ?? ''} in each turn ` +
        '(their blocks seconds apart), then over the turns:',
    );
    out.push(table(turns, 3));
    out.push('');
  }
  if (idle.length > 0) {
    out.push(
      `Idle: both guards in the namespace, no events, ${options.idleSeconds} s (flannel-guard right after its runs, C reference fresh);`,
    );
    out.push(
      `wakeups = context switches of every thread; per ${IDLE_SLICE_S} s: wakeups/run ms in each slice; by thread: wakeups/run ms.`,
    );
    const rows: string[][] = [
      ['guard', 'ticks', 'CPU', 'run time', 'wakeups', `per ${IDLE_SLICE_S} s`, 'by thread'],
    ];
    for (const entry of idle) {
      const busy = entry.cpu.threads
        .filter((t) => t.switches !== 0 || t.runMs > 0.05)
        .map((t) => `${t.tid === entry.pid ? 'main' : t.tid}:${t.switches}/${fmt(t.runMs, 2)}`)
        .join(' ');
      rows.push([
        entry.label,
        String(entry.cpu.ticks),
        `${fmt(entry.cpu.cpuMs)} ms`,
        `${fmt(entry.cpu.runMs, 2)} ms`,
        String(entry.cpu.switches),
        entry.slices.map((slice) => `${slice.switches}/${fmt(slice.runMs, 1)}`).join(' '),
        busy === '' ? '-' : busy,
      ]);
    }
    out.push(table(rows, 1));
    out.push('');
  }
  const base = phases[0];
  const [c, fg] = base?.guards ?? [];
  if (c && fg) {
    out.push('Against the bar (no extra links):');
    for (const mode of ['paced', 'back-to-back'] as const) {
      const rc = c.modes.find((m) => m.mode === mode);
      const rg = fg.modes.find((m) => m.mode === mode);
      if (!rc || !rg) continue;
      out.push(
        `  ${mode.padEnd(12)} p50 ${fmt(rg.mac.p50)} vs ${fmt(rc.mac.p50)} us = ${ratio(rg.mac.p50, rc.mac.p50)} (bar 1.3x); ` +
          `p99 ${fmt(rg.mac.p99)} vs ${fmt(rc.mac.p99)} us = ${ratio(rg.mac.p99, rc.mac.p99)} (bar 2x); ` +
          `CPU/correction ${fmt((rg.cpu.cpuMs * 1000) / Math.max(1, rg.corrections))} us (bar 100 us)`,
      );
    }
    out.push(`  peak RSS ${fmt(fg.hwmKiB / 1024)} MiB (bar 64 MiB)`);
    const idleFg = idle.find((i) => i.label === 'flannel-guard');
    if (idleFg) {
      out.push(
        `  idle ${options.idleSeconds} s: ${idleFg.cpu.ticks} ticks, ${fmt(idleFg.cpu.runMs, 2)} ms run time, ${idleFg.cpu.switches} context switches (bar ~0)`,
      );
    }
    out.push('');
  }
  if (breakdown) {
    for (const entry of breakdown) {
      out.push(
        `Where the time goes, ${entry.mode} (probe preloaded into flannel-guard; -t on the C reference), us:`,
      );
      const rows: string[][] = [['guard', 'stage', 'n', 'p50', 'p90', 'p99']];
      for (const [label, stages] of [
        ['flannel-guard', entry.flannelGuard],
        ['C reference', entry.reference],
      ] as const) {
        for (const row of stages) {
          const d = distribution(row.values);
          rows.push([label, row.stage, String(d.n), fmt(d.p50), fmt(d.p90), fmt(d.p99)]);
        }
      }
      out.push(table(rows, 2));
      out.push(
        `System calls per correction (perf, every thread, the echoes included): flannel-guard ${fmt(entry.syscalls.flannelGuard)}, C reference ${fmt(entry.syscalls.reference)}`,
      );
      out.push('');
    }
  }
  for (const phase of phases) {
    for (const g of phase.guards) {
      if (g.events.size > 0) {
        const counts = [...g.events].map(([event, count]) => `${event} ${count}`).join(', ');
        out.push(`${phase.name} ${g.label} printed: ${counts}`);
      }
      if (g.errors.length > 0) {
        const shown = g.errors.slice(0, 3).map((line) => line.slice(0, 240));
        out.push(`${phase.name} ${g.label} errors (first ${shown.length}): ${shown.join(' | ')}`);
      }
      if (g.contested > 0) out.push(`${phase.name} ${g.label}: contested ${g.contested} times`);
      if (g.repaired) out.push(`${phase.name} ${g.label}: before start, ${g.repaired}`);
    }
  }
  out.push(...notes);
  console.log(out.join('\n'));
}

// --- main -----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  if (process.getuid?.() !== 0) throw new Error('needs root (network namespaces, CAP_NET_ADMIN)');
  if (!existsSync(CLI)) throw new Error(`${CLI} missing: run tsc -p tsconfig.json first`);
  for (const tool of ['reference-guard', 'rewriter']) buildBenchTool(tool);
  const started = performance.now();
  const notes: string[] = [];
  const loadAtStart = loadAverage();
  const bench = await setUp(options);
  const benches = [bench];
  let keptGuard: GuardRun | undefined;
  claimStateRoot();
  try {
    if (options.compare !== undefined) benches.push(await setUp(options), await setUp(options));
    const phases: Phase[] = [];
    const log = (message: string): void => {
      process.stderr.write(`[${fmt((performance.now() - started) / 1000)} s] ${message}\n`);
    };
    const runPhase = async (name: string, keepFlannelGuard: boolean): Promise<Phase> => {
      const links = await linkCount(bench);
      log(`${name}: ${links} links in ${bench.ns.name}; start-ups`);
      // Alone, the guards run one after the other on one bench. Compared with another
      // checkout, each has a bench of its own, all run at once and they take turns block by
      // block (measureGuards), so the machine's drift reaches every guard alike.
      const [referenceBench = bench, guardBench = bench, comparedBench] = benches;
      const specs = [referenceSpec(referenceBench), flannelGuardSpec(guardBench)];
      if (comparedBench && options.compare !== undefined) {
        specs.push(flannelGuardSpec(comparedBench, undefined, options.compare));
      }
      const startups: Record<string, number[]> = {};
      for (const [i, spec] of specs.entries()) {
        startups[spec.label] = await measureStartups(benches[i] ?? bench, spec, options.startups);
      }
      let measured: { figures: GuardFigures; guard: GuardRun }[];
      if (benches.length === 1) {
        measured = [];
        for (const [i, spec] of specs.entries()) {
          log(`${name}: ${spec.label}`);
          measured.push(await measureGuard(bench, spec, keepFlannelGuard && i === 1));
        }
      } else {
        log(`${name}: ${specs.map((spec) => spec.label).join(', ')}, ${options.blocks} turn(s)`);
        measured = await measureGuards(
          specs.map((spec, i) => ({ bench: benches[i] ?? bench, spec })),
          options.blocks,
          keepFlannelGuard,
        );
        for (const [i, run] of measured.entries()) if (i !== 1) await run.guard.stop();
      }
      if (keepFlannelGuard) keptGuard = measured[1]?.guard;
      return { name, links, startups, guards: measured.map((m) => m.figures) };
    };

    phases.push(await runPhase('base', options.idleSeconds > 0));
    let idle: IdleFigures[] = [];
    if (keptGuard) {
      log(`idle: ${options.idleSeconds} s`);
      idle = await measureIdle(bench, keptGuard, options.idleSeconds);
      await keptGuard.stop();
      keptGuard = undefined;
    }
    if (options.links > 0) {
      log(`adding ${options.links} ifb links`);
      let ms = 0;
      for (const each of benches) ms += await addLinks(each, options.links);
      notes.push(`${options.links} ifb links created in ${fmt(ms / 1000, 2)} s (ip -batch).`);
      phases.push(await runPhase(`+${options.links} links`, false));
    }
    let breakdown: Breakdown[] | undefined;
    if (options.breakdown) {
      log('breakdown: flannel-guard with the probe, C reference with -t');
      breakdown = await measureBreakdown(bench);
    }
    log('done');
    notes.push(
      `Total run time ${fmt((performance.now() - started) / 1000)} s; load average ${loadAtStart} at start, ${loadAverage()} at the end ` +
        '(host busy: share of all CPUs busy during a run, this run included: other load on the machine shows there).',
    );
    for (const phase of phases) {
      for (const g of phase.guards) {
        const busy = g.modes.reduce((sum, m) => sum + m.busy, 0);
        if (busy > 0)
          notes.push(
            `${phase.name} ${g.label}: ${busy} back-to-back rounds started with the guard still busy after 1 s.`,
          );
      }
    }
    report(options, phases, idle, breakdown, notes);
  } finally {
    await keptGuard?.stop();
    for (const each of benches) await each.ns.destroy();
    await destroyAll();
    releaseStateRoot();
  }
}

// Run as a script; imported (scripts/bench/scale.ts), it only lends its parts.
if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exitCode = 1;
  });
}
