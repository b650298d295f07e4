#!/usr/bin/env node
// `npm run fuzz:sequences -- --minutes N [--seed S] [--jobs J]`: the random sequence
// test (test/support/sequences.ts) for N minutes (default 10) from fresh seeds, J at
// once (default 2), against the real kernel (root, throw-away namespaces). Prints a count each
// minute; a failure prints its seed and minimal sequence and exits 1.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const usage = 'usage: npm run fuzz:sequences -- [--minutes N] [--seed S] [--length L] [--jobs J]';
let values;
try {
  ({ values } = parseArgs({
    options: {
      minutes: { type: 'string', default: '10' },
      seed: { type: 'string' },
      length: { type: 'string', default: '12' },
      jobs: { type: 'string', default: '2' },
    },
  }));
} catch (error) {
  console.error(`${error.message}\n${usage}`);
  process.exit(2);
}
const minutes = Number(values.minutes);
const length = Number(values.length);
const jobs = Number(values.jobs);
const firstSeed =
  values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
for (const [name, value, min] of [
  ['minutes', minutes, 0],
  ['length', length, 1],
  ['jobs', jobs, 1],
  ['seed', firstSeed, 0],
]) {
  if (!Number.isInteger(value) || value < min) {
    console.error(`--${name} ${value}: expected an integer >= ${min}\n${usage}`);
    process.exit(2);
  }
}

const built = spawnSync(
  process.execPath,
  [join(root, 'scripts', 'build-ts.mjs'), '--incremental'],
  {
    stdio: 'inherit',
  },
);
if (built.status !== 0) process.exit(1);

const require = createRequire(import.meta.url);
const { runSeeds, shrink, formatFailure } = require(
  join(root, 'dist', 'test', 'support', 'sequences.js'),
);
const { destroyAll } = require(join(root, 'dist', 'test', 'support', 'netns.js'));

const started = performance.now();
let runs = 0;
let steps = 0;
let lastReport = started;
console.log(
  `fuzzing sequences of ${length} steps for ${minutes} min from seed ${firstSeed}, ${jobs} at once`,
);
try {
  const { failed } = await runSeeds({
    first: firstSeed,
    length,
    jobs,
    deadline: started + minutes * 60_000,
    progress: (count) => {
      runs += 1;
      steps += count;
      if (performance.now() - lastReport < 60_000) return;
      lastReport = performance.now();
      console.log(
        `${runs} sequences (${steps} steps) in ${((lastReport - started) / 60_000).toFixed(1)} min`,
      );
    },
  });
  if (failed) {
    const { seed, ops, failure } = failed;
    console.log(formatFailure(seed, ops, failure, 'sequence'));
    const minimal = await shrink(ops, failure, { runs: 120, ms: 300_000 });
    console.log(formatFailure(seed, minimal.ops, minimal.failure));
    console.log(`${runs} sequences run, 1 failed`);
    process.exitCode = 1;
  } else {
    console.log(`${runs} sequences (${steps} steps), 0 failed`);
  }
} finally {
  await destroyAll();
}
