/**
 * Fleet scale: a VTEP with the entries of an N-node cluster (N permanent ARP and N FDB entries
 * on flannel.1), N = 10 / 1000 / 5000 by default, in one run, side by side:
 *
 * - `flannel-guard watch` (the real CLI, as scripts/bench/latency.ts runs it);
 * - the C reference guard (scripts/bench/reference-guard.c): the MAC, then every ARP entry
 *   back, one ACKed request each;
 * - `ip -batch` restoring the same entries (the MAC and N `neigh replace` lines) after the same
 *   rewrite, timed from its start to its exit.
 *
 * Per N and guard: rewrite -> MAC and all N ARP entries back (p50/p99, seen by the C rewriter of
 * scripts/bench/latency.ts), CPU per correction (all threads' run time), peak RSS (VmHWM), and the
 * guard's own account (restored events, errors, overruns). The two guards run at once, each in
 * its own namespace set up alike, and take turns in blocks of rewrites, so that the machine's
 * drift in speed is in both figures alike. Before those (on a quiet machine):
 * start-up to `ready` with N = 5000 and 2000 unrelated links, against an empty namespace. Prints the figures, as ratios to the C
 * reference and to `ip -batch`; asserts nothing. Needs root.
 *
 * Usage: node dist/scripts/bench/scale.js [--sizes 10,1000,5000] [--rewrites R] [--startups S]
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { destroyAll, execFile, claimStateRoot, releaseStateRoot } from '../../test/support/netns';
import { buildBenchTool } from '../../test/support/flooder';
import {
  addLinks,
  distribution,
  flannelGuardSpec,
  fmt,
  measureGuards,
  measureStartups,
  parseOptions,
  ratio,
  referenceSpec,
  setUp,
  table,
  type Bench,
  type GuardFigures,
} from './latency';

interface ScaleOptions {
  sizes: number[];
  rewrites: number;
  startups: number;
}

function parseScaleOptions(argv: string[]): ScaleOptions {
  const options: ScaleOptions = { sizes: [10, 1000, 5000], rewrites: 30, startups: 5 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1] ?? ''];
    if (flag === '--sizes') {
      options.sizes = value.split(',').map(Number);
      if (options.sizes.some((n) => !Number.isInteger(n) || n < 1 || n > 10_000))
        throw new Error('--sizes: whole numbers in 1..10000, comma-separated');
    } else if (flag === '--rewrites' || flag === '--startups') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1 || n > 1000) throw new Error(`${flag}: 1..1000`);
      options[flag === '--rewrites' ? 'rewrites' : 'startups'] = n;
    } else {
      throw new Error(
        `${flag}? usage: scale.js [--sizes 10,1000,5000] [--rewrites R] [--startups S]`,
      );
    }
  }
  return options;
}

/** The bench of latency.ts for N entries, plus the N FDB entries a flannel node has. */
async function scaleBench(n: number, rewrites: number): Promise<Bench> {
  // Paced well apart: a correction of 5000 entries takes tens of ms; back to back follows it.
  // Small tables get many more rounds (and a warm-up): their CPU per correction is a few
  // hundred µs, and a JIT not yet warm would dominate a few dozen rounds.
  const small = n <= 100;
  const intervalMs = small ? 5 : Math.max(20, Math.ceil(n / 25));
  const bench = await setUp(
    parseOptions([
      ...[
        '--neighbours',
        String(n),
        '--rewrites',
        String(small ? Math.max(rewrites, 500) : rewrites),
      ],
      ...['--warmup', small ? '100' : '3'],
      ...['--interval-ms', String(Math.min(1000, intervalMs)), '--timeout-ms', '5000'],
    ]),
  );
  const fdb = bench.neighbours.map(
    (entry, i) =>
      `fdb append ${entry.mac} dev flannel.1 dst 192.0.2.${20 + (i % 200)} self permanent`,
  );
  await execFile('bridge', ['-n', bench.ns.name, '-batch', '-'], {
    input: fdb.join('\n') + '\n',
    timeoutMs: 60_000,
  });
  return bench;
}

/** `ip -batch` putting back the MAC and the N entries after a rewrite: ms from spawn to exit. */
async function ipBatchRestores(bench: Bench, rounds: number): Promise<number[]> {
  const restore =
    [
      'link set flannel.1 address 0e:f1:a2:00:00:01',
      ...bench.neighbours.map(
        (entry) => `neigh replace ${entry.ip} lladdr ${entry.mac} dev flannel.1 nud permanent`,
      ),
    ].join('\n') + '\n';
  const times: number[] = [];
  for (let round = 0; round < rounds; round += 1) {
    await bench.ns.ip(['link', 'set', 'flannel.1', 'address', '0e:fb:ff:00:00:01']);
    const started = performance.now();
    await new Promise<void>((resolve, reject) => {
      const child = spawn('ip', ['-n', bench.ns.name, '-batch', '-'], {
        stdio: ['pipe', 'ignore', 'inherit'],
      });
      child.once('error', reject);
      child.once('close', (code) =>
        code === 0 ? resolve() : reject(new Error(`ip -batch exited ${code}`)),
      );
      child.stdin.end(restore);
    });
    times.push(performance.now() - started);
  }
  return times;
}

interface SizeFigures {
  n: number;
  reference: GuardFigures;
  guard: GuardFigures;
  ipBatch: ReturnType<typeof distribution>;
}

function paced(figures: GuardFigures): GuardFigures['modes'][number] {
  const mode = figures.modes.find((m) => m.mode === 'paced');
  if (!mode) throw new Error('no paced run');
  return mode;
}

/** CPU per correction, µs (every thread's run time). */
function cpuPerCorrection(figures: GuardFigures): number {
  const mode = paced(figures);
  return mode.corrections > 0 ? (mode.cpu.runMs * 1000) / mode.corrections : NaN;
}

/** Blocks each guard's rounds are split into, the guards taking turns (see measureGuards). */
const BLOCKS = 10;

async function measureSize(n: number, options: ScaleOptions): Promise<SizeFigures> {
  // One namespace per guard, set up alike: both guards run throughout, each its own rewrites.
  const referenceBench = await scaleBench(n, options.rewrites);
  const guardBench = await scaleBench(n, options.rewrites);
  try {
    process.stderr.write(`N = ${n}: C reference and flannel-guard, taking turns\n`);
    const [reference, guard] = await measureGuards(
      [
        { bench: referenceBench, spec: referenceSpec(referenceBench) },
        { bench: guardBench, spec: flannelGuardSpec(guardBench) },
      ],
      BLOCKS,
    );
    if (!reference || !guard) throw new Error('a guard was not measured');
    process.stderr.write(`N = ${n}: ip -batch\n`);
    const ipBatch = distribution(
      (await ipBatchRestores(guardBench, Math.min(options.rewrites, 20))).map((ms) => ms * 1000),
    );
    return { n, reference: reference.figures, guard: guard.figures, ipBatch };
  } finally {
    await referenceBench.ns.destroy();
    await guardBench.ns.destroy();
  }
}

async function startups(options: ScaleOptions): Promise<{ empty: number[]; loaded: number[] }> {
  const empty = await scaleBench(1, 1);
  const loaded = await scaleBench(5000, 1);
  try {
    await addLinks(loaded, 2000);
    return {
      empty: await measureStartups(empty, flannelGuardSpec(empty), options.startups),
      loaded: await measureStartups(loaded, flannelGuardSpec(loaded), options.startups),
    };
  } finally {
    await empty.ns.destroy();
    await loaded.ns.destroy();
  }
}

function median(values: readonly number[]): number {
  return distribution(values).p50;
}

function report(sizes: readonly SizeFigures[], start: { empty: number[]; loaded: number[] }): void {
  const ms = (us: number): string => fmt(us / 1000, 2);
  const rows = [
    [
      'N',
      'restore p50 ms',
      'p99',
      'C p50',
      'C p99',
      'vs C',
      'ip -batch p50',
      'vs ip -batch',
      'CPU/corr µs',
      'C µs',
      'vs C',
      'RSS MiB',
      'C MiB',
    ],
  ];
  for (const size of sizes) {
    const g = paced(size.guard).full;
    const c = paced(size.reference).full;
    const gCpu = cpuPerCorrection(size.guard);
    const cCpu = cpuPerCorrection(size.reference);
    rows.push([
      String(size.n),
      ms(g.p50),
      ms(g.p99),
      ms(c.p50),
      ms(c.p99),
      ratio(g.p50, c.p50),
      ms(size.ipBatch.p50),
      ratio(g.p50, size.ipBatch.p50),
      fmt(gCpu, 0),
      fmt(cCpu, 0),
      ratio(gCpu, cCpu),
      fmt(size.guard.hwmKiB / 1024, 1),
      fmt(size.reference.hwmKiB / 1024, 1),
    ]);
  }
  console.log(
    '\nrewrite -> MAC and all N ARP entries back (paced), CPU per correction, peak RSS\n',
  );
  console.log(table(rows));

  const accounts = [
    ['N', 'guard', 'rounds', 'restored', 'missed', 'errors', 'overruns', 'resyncs'],
  ];
  for (const size of sizes) {
    for (const g of [size.reference, size.guard]) {
      const mode = paced(g);
      accounts.push([
        String(size.n),
        g.label,
        String(mode.rounds),
        String(g.events.get('restored') ?? (g.label === 'C reference' ? '-' : 0)),
        String(mode.missed),
        String(g.errors.length + (g.events.get('error') ?? 0)),
        String(g.events.get('overrun') ?? 0),
        String(g.events.get('resync') ?? 0),
      ]);
    }
  }
  console.log('\nwhat each guard reported (whole run: cold, warm-up, paced, back to back)\n');
  console.log(table(accounts));

  const empty = median(start.empty);
  const loaded = median(start.loaded);
  console.log(
    `\nstart-up to ready (median of ${start.empty.length}): empty namespace ${fmt(empty, 0)} ms, ` +
      `5000 entries + 2000 links ${fmt(loaded, 0)} ms (${ratio(loaded, empty)})`,
  );
}

async function main(): Promise<void> {
  const options = parseScaleOptions(process.argv.slice(2));
  if (process.getuid?.() !== 0) throw new Error('needs root (network namespaces, CAP_NET_ADMIN)');
  const cli = join(__dirname, '..', '..', 'lib', 'cli', 'main.js');
  if (!existsSync(cli)) throw new Error(`${cli} missing: run tsc -p tsconfig.json first`);
  for (const tool of ['reference-guard', 'rewriter']) buildBenchTool(tool);
  claimStateRoot();
  try {
    // Start-ups first, on a quiet machine: a namespace deleted with thousands of entries is
    // torn down by the kernel in the background for seconds afterwards, under rtnl_lock, and
    // the dumps of a start-up right after it wait for that lock.
    process.stderr.write('start-ups\n');
    const start = await startups(options);
    const sizes: SizeFigures[] = [];
    for (const n of options.sizes) sizes.push(await measureSize(n, options));
    report(sizes, start);
  } finally {
    await destroyAll();
    releaseStateRoot();
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exitCode = 1;
});
