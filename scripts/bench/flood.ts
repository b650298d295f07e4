/**
 * Rewrites of the guarded device during a flood of unrelated link changes:
 * flooder.c flips the MTU of 300 ifb devices as fast as it can while
 * rewriter.c rewrites flannel.1's MAC every 20 ms and times, from its own
 * socket, how long `flannel-guard watch` takes to put the MAC and the 10
 * neighbour entries back. Run with the kernel socket filter (the default)
 * and without it. Prints the flood rate, the latency percentiles, the
 * corrections missed and the overruns the guard reported; asserts nothing.
 *
 * usage: node dist/scripts/bench/flood.js [--seconds S] [--rewrites N]
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

import { buildBenchTool, startFlood } from '../../test/support/flooder';
import { GuardProcess } from '../../test/support/guard-process';
import { Netns, destroyAll, claimStateRoot, releaseStateRoot } from '../../test/support/netns';
import { percentile } from './stats';

const execFileAsync = promisify(execFile);
const DEVICES = 300;
const NEIGHBOURS = 10;

function argument(name: string, fallback: number): number {
  const index = process.argv.indexOf(name);
  return index >= 0 ? Number(process.argv[index + 1]) : fallback;
}

interface Run {
  filter: boolean;
  floodRate: string;
  samples: number[];
  missed: number;
  overruns: number;
  resyncs: number;
}

async function measure(
  rewriter: string,
  ns: Netns,
  filter: boolean,
  seconds: number,
  rewrites: number,
): Promise<Run> {
  const [link] = await ns.ipJson<{ ifindex: number; address: string }[]>('link show flannel.1');
  if (!link) throw new Error('no flannel.1');

  const ifbs = (await ns.ipJson<{ ifindex: number }[]>('link show type ifb')).map((l) => l.ifindex);
  const guard = await GuardProcess.start([
    '--netns',
    ns.name,
    '--mac',
    `flannel.1=${link.address}`,
    '--offload',
    'none',
    '--rewrite-window',
    '1',
    ...(filter ? [] : ['--no-kernel-filter']),
  ]);
  const flood = startFlood(ns, ifbs, seconds);
  try {
    await new Promise((resolve) => setTimeout(resolve, 500)); // the flood is on
    const { stdout } = await execFileAsync(
      rewriter,
      [
        '-n',
        ns.path,
        '-i',
        String(link.ifindex),
        '-m',
        link.address,
        '-c',
        String(rewrites),
        '-k',
        String(NEIGHBOURS),
        '-p',
        '20000',
        '-t',
        '2000',
        '-T',
        String(seconds),
      ],
      { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
    );
    await flood.finished((seconds + 10) * 1000);
    const samples = stdout
      .split('\n')
      .filter((line) => line.startsWith('sample '))
      .map((line) => Number(line.split(' ')[4]))
      .filter((ns_) => ns_ > 0)
      .map((ns_) => ns_ / 1000);
    return {
      filter,
      floodRate: flood.output().trim(),
      samples: samples.sort((a, b) => a - b),
      missed: rewrites - samples.length,
      overruns: guard.events('overrun').length,
      resyncs: guard.events('resync').filter((l) => l.phase === 'begin').length,
    };
  } finally {
    await flood.stop();
    await guard.stop();
  }
}

async function main(): Promise<void> {
  const seconds = argument('--seconds', 15);
  const rewrites = argument('--rewrites', 500);
  const rewriter = buildBenchTool('rewriter');
  const ns = await Netns.create('fgt-floodb');
  claimStateRoot();
  try {
    await ns.ipBatch([
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning',
      'link set flannel.1 up',
      ...Array.from(
        { length: NEIGHBOURS },
        (_, i) =>
          `neigh add 198.18.${i + 2}.0 lladdr 0e:00:00:00:00:${(i + 2).toString(16).padStart(2, '0')} dev flannel.1 nud permanent`,
      ),
      ...Array.from({ length: DEVICES }, (_, i) => `link add ifb${i} type ifb`),
    ]);
    console.log(
      `flannel-guard under a flood: MTU flips on ${DEVICES} ifb links, a rewrite of flannel.1 every 20 ms (${rewrites}), ${NEIGHBOURS} neighbour entries`,
    );
    for (const filter of [true, false]) {
      const run = await measure(rewriter, ns, filter, seconds, rewrites);
      const s = run.samples;
      const fmt = (v: number): string => `${v.toFixed(0)} us`;
      console.log(
        `${filter ? 'with kernel filter   ' : 'without kernel filter'}  flood ${run.floodRate}; corrected ${s.length}/${rewrites}` +
          ` (MAC + neighbours back) p50 ${fmt(percentile(s, 0.5))} p90 ${fmt(percentile(s, 0.9))} p99 ${fmt(percentile(s, 0.99))} max ${fmt(s[s.length - 1] ?? NaN)};` +
          ` overruns ${run.overruns}, resyncs ${run.resyncs}`,
      );
    }
  } finally {
    await ns.destroy();
    await destroyAll();
    releaseStateRoot();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
