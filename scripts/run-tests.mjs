#!/usr/bin/env node
// The test command (`npm test`): compiles the TypeScript, builds the native
// unit tests under ASan+UBSan, runs the whole mocha suite (which needs root
// for its network namespaces) and counts the results from mocha's JSON
// reporter. Ends with the line `N passed, N failed`. A skipped (pending) test
// or an empty run is a failure: nothing here is optional.
//
// Extra arguments go to mocha, e.g. `npm test -- --grep LinkMonitor`.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const resultsFile = join(root, 'build', 'test-results.json');

function run(command, args, what) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) {
    console.error(`${what} failed (${command} ${args.join(' ')})`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
}

const bin = (name) => join(root, 'node_modules', '.bin', name);

if (!existsSync(join(root, 'build', 'Release', 'flannel_guard.node'))) {
  run(bin('node-gyp'), ['rebuild', '-j', '2'], 'building the addon');
}
run(
  process.execPath,
  [join(root, 'scripts', 'build-ts.mjs'), '--incremental'],
  'compiling TypeScript',
);
run(
  'cmake',
  ['-S', 'native', '-B', 'build/native-tests', '-DFG_SANITIZE=ON', '-DCMAKE_BUILD_TYPE=Debug'],
  'configuring the native unit tests',
);
run('cmake', ['--build', 'build/native-tests', '-j', '2'], 'building the native unit tests');

mkdirSync(dirname(resultsFile), { recursive: true });
rmSync(resultsFile, { force: true });
const mocha = spawnSync(
  bin('mocha'),
  [
    '--reporter',
    join(root, 'scripts', 'mocha-reporter.cjs'),
    '--reporter-option',
    `output=${resultsFile}`,
    ...process.argv.slice(2),
  ],
  { cwd: root, stdio: 'inherit' },
);

if (!existsSync(resultsFile)) {
  console.error(`mocha wrote no results (exit status ${mocha.status}, signal ${mocha.signal})`);
  console.log('0 passed, 1 failed');
  process.exit(1);
}
const { stats } = JSON.parse(readFileSync(resultsFile, 'utf8'));
const problems = [];
if (stats.pending > 0) problems.push(`${stats.pending} test(s) skipped: skipping is not allowed`);
if (stats.tests === 0) problems.push('no tests ran');
if (mocha.status !== 0 && stats.failures === 0)
  problems.push(`mocha exited with status ${mocha.status}`);
for (const problem of problems) console.error(problem);
const failed = stats.failures + (problems.length > 0 ? 1 : 0);
console.log(`${stats.passes} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
