/**
 * The doctor's .link reading against the real udev 252 on many random trees
 * (the test runs 200 in `npm test`): prints how many agreed, how many the
 * doctor warned on, and every disagreement with its seed and tree.
 *
 *   node dist/scripts/doctor-udev-diff.js [TREES=2000] [FIRST_SEED=200000]
 */
import { compareTree } from '../test/support/link-oracle';
import { Netns } from '../test/support/netns';

async function main(): Promise<void> {
  const trees = Number(process.argv[2] ?? 2000);
  const first = Number(process.argv[3] ?? 200_000);
  if (!Number.isInteger(trees) || trees < 1 || trees > 100_000 || !Number.isInteger(first)) {
    console.error('usage: doctor-udev-diff [TREES 1..100000] [FIRST_SEED]');
    process.exit(2);
  }
  const ns = await Netns.create('fgt-ldiff');
  const started = Date.now();
  let agreed = 0;
  let warned = 0;
  try {
    for (let seed = first; seed < first + trees; seed += 1) {
      const result = await compareTree(ns, seed);
      if (result.warned) warned += 1;
      if (result.agreed) agreed += 1;
      else console.log(`DISAGREE ${result.detail}`);
    }
  } finally {
    await ns.destroy();
  }
  console.log(
    `${agreed} of ${trees} trees agreed (seeds ${first}..${first + trees - 1}); the doctor warned on ${warned}; ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  process.exitCode = agreed === trees ? 0 : 1;
}

void main();
