/**
 * The guard in every order of events: seeded random sequences (test/support/sequences.ts)
 * against the real kernel, each step checked against the model once it settles. A failure
 * names its seed and shrinks to a minimal sequence; `npm run fuzz:sequences -- --minutes N`
 * runs the same for longer, from fresh seeds. FG_SEQUENCES, FG_SEQUENCE_SEED and FG_SEQUENCE_JOBS
 * choose the budget, the first seed and how many run at once; FG_SEQUENCE_TRACE=1 prints the guard's events of a failing run.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';

import { formatFailure, runSeeds, shrink } from './support/sequences';

/**
 * The budget `npm test` runs, sized for CI's half hour: 150 took 413 s of a fresh CI run here
 * beside the other lane (1.6 s of CPU each), and CI's time is the CPU the tests leave the zig
 * step. 60 are 600 steps a run, from new seeds at each commit. The long search is
 * `npm run fuzz:sequences`, run before every change to the guard or the native core lands.
 */
const SEQUENCES = Number(process.env.FG_SEQUENCES ?? 60);

/**
 * Each commit explores new seeds: the first is taken from the commit's hash (1 outside a git
 * checkout), and the test's title names it, so a failure is replayed with FG_SEQUENCE_SEED.
 */
function commitSeed(): number {
  const head = spawnSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8', timeout: 10_000 });
  const hex = head.status === 0 ? /^[0-9a-f]{7}/.exec(head.stdout)?.[0] : undefined;
  return hex === undefined ? 1 : (parseInt(hex, 16) % 1_000_000) + 1;
}
const FIRST_SEED = Number(process.env.FG_SEQUENCE_SEED ?? commitSeed());
const LENGTH = 10;
/** Two at once: a busy machine is one a node has, and it found what one at a time did not. */
const JOBS = Number(process.env.FG_SEQUENCE_JOBS ?? 2);

describe('random sequences against the real kernel', function () {
  this.timeout(0);

  it(`${SEQUENCES} sequences of ${LENGTH} steps hold the model (seeds ${FIRST_SEED}…, ${JOBS} at once)`, async function () {
    const started = performance.now();
    const { failed } = await runSeeds({
      first: FIRST_SEED,
      count: SEQUENCES,
      length: LENGTH,
      jobs: JOBS,
    });
    if (failed) {
      const { seed, ops, failure } = failed;
      console.log(
        `      ${formatFailure(seed, ops, failure, 'sequence').replaceAll('\n', '\n      ')}`,
      );
      const minimal = await shrink(ops, failure, { runs: 80, ms: 120_000 });
      assert.fail(formatFailure(seed, minimal.ops, minimal.failure));
    }
    const seconds = (performance.now() - started) / 1000;
    console.log(`      ${SEQUENCES} sequences in ${seconds.toFixed(0)} s`);
  });
});
