/**
 * Soak: `flannel-guard watch` corrects N rewrites (default 100 000) of one
 * device in one process, back to back, each with its permanent neighbour
 * entries restored. Prints the guard's resident memory, file descriptors and
 * threads after a warm-up and at the end, and the growth between them.
 *
 * usage: node dist/scripts/bench/soak.js [--rewrites N] [--json]
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { BENCH_BIN, buildBenchTool } from '../../test/support/flooder';
import { GuardProcess } from '../../test/support/guard-process';
import { destroyAll, Netns, claimStateRoot, releaseStateRoot } from '../../test/support/netns';

const rewriterBinary = join(BENCH_BIN, 'rewriter');
const WARM_UP = Number(process.env.FG_SOAK_WARM_UP ?? 2000);
const execFileAsync = promisify(execFile);

interface Sample {
  rssKiB: number;
  peakRssKiB: number;
  fds: number;
  threads: number;
}

function sample(pid: number): Sample {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number =>
    Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1]);
  return {
    rssKiB: field('VmRSS'),
    peakRssKiB: field('VmHWM'),
    fds: readdirSync(`/proc/${pid}/fd`).length,
    threads: field('Threads'),
  };
}

function argument(name: string, fallback: number): number {
  const index = process.argv.indexOf(name);
  return index >= 0 ? Number(process.argv[index + 1]) : fallback;
}

/**
 * Runs the rewriter for `count` rounds; returns its summary line's fields.
 * Asynchronous: the guard's output has to keep being read meanwhile.
 */
async function rewrite(
  ns: Netns,
  ifindex: number,
  pinned: string,
  count: number,
  guardPid: number,
): Promise<Record<string, number>> {
  const { stdout: output } = await execFileAsync(
    rewriterBinary,
    [
      '-n',
      ns.path,
      '-i',
      String(ifindex),
      '-m',
      pinned,
      '-c',
      String(count),
      '-k',
      '2',
      '-p',
      '0',
      // At least 2 ms apart: never two rewrites in one 1 ms fight-control window.
      '-G',
      '2000',
      '-g',
      String(guardPid),
      '-t',
      '2000',
      '-T',
      '3600',
    ],
    { encoding: 'utf8', maxBuffer: 1024 * 1024 * 1024 },
  );
  const summary = output.split('\n').find((line) => line.startsWith('summary ')) ?? '';
  return Object.fromEntries(
    summary
      .slice('summary '.length)
      .split(' ')
      .map((pair) => pair.split('='))
      .map(([key, value]) => [key ?? '', Number(value)]),
  );
}

async function main(): Promise<void> {
  const rewrites = argument('--rewrites', 100_000);
  buildBenchTool('rewriter');
  const ns = await Netns.create('fgt-soak');
  let guard: GuardProcess | undefined;
  claimStateRoot();
  try {
    await ns.ipBatch([
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning',
      'link set flannel.1 up',
      'neigh add 198.18.2.0 lladdr 0e:00:00:00:00:02 dev flannel.1 nud permanent',
      'neigh add 198.18.3.0 lladdr 0e:00:00:00:00:03 dev flannel.1 nud permanent',
    ]);
    const [link] = await ns.ipJson<{ ifindex: number; address: string }[]>('link show flannel.1');
    if (!link) throw new Error('no flannel.1');
    guard = await GuardProcess.start([
      '--netns',
      ns.name,
      '--mac',
      `flannel.1=${link.address}`,
      '--offload',
      'none',
      '--rewrite-window',
      '1',
    ]);
    const pid = guard.pid ?? 0;
    const warm = await rewrite(ns, link.ifindex, link.address, WARM_UP, pid);
    const before = sample(pid);
    const run = await rewrite(ns, link.ifindex, link.address, rewrites, pid);
    const after = sample(pid);
    const restored = guard.events('restored').length;
    const report = {
      rewrites: run.rounds,
      corrected: run.complete,
      timeouts: run.timeouts,
      restoredEvents: restored,
      warmUp: warm.complete,
      before,
      after,
      rssGrowthKiB: after.rssKiB - before.rssKiB,
      fdGrowth: after.fds - before.fds,
      threadGrowth: after.threads - before.threads,
    };
    if (process.argv.includes('--json')) {
      console.log(JSON.stringify(report));
    } else {
      console.log(
        `flannel-guard soak: ${report.corrected} of ${report.rewrites} rewrites corrected back to back (${report.timeouts} timeouts), after ${WARM_UP} warm-up rounds`,
      );
      console.log(
        `  RSS      ${before.rssKiB} KiB -> ${after.rssKiB} KiB (growth ${report.rssGrowthKiB} KiB; peak ${after.peakRssKiB} KiB)`,
      );
      console.log(`  fds      ${before.fds} -> ${after.fds}`);
      console.log(`  threads  ${before.threads} -> ${after.threads}`);
    }
  } finally {
    await guard?.stop();
    await ns.destroy();
    await destroyAll();
    releaseStateRoot();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
