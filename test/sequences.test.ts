/**
 * The guard in every order of events: seeded random sequences (test/support/sequences.ts)
 * against the real kernel, each step checked against the model once it settles. A failure
 * names its seed and shrinks to a minimal sequence; `npm run fuzz:sequences -- --minutes N`
 * runs the same for longer, from fresh seeds. FG_SEQUENCES, FG_SEQUENCE_SEED and FG_SEQUENCE_JOBS
 * choose the budget, the first seed and how many run at once; FG_SEQUENCE_TRACE=1 prints the guard's events of a failing run.
 */
import assert from 'node:assert/strict';

import { formatFailure, runSeeds, shrink } from './support/sequences';

/** The budget `npm test` runs: enough for every operation to meet every other many times. */
const SEQUENCES = Number(process.env.FG_SEQUENCES ?? 2000);
const FIRST_SEED = Number(process.env.FG_SEQUENCE_SEED ?? 1);
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
