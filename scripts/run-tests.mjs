#!/usr/bin/env node
// The test command (`npm test`): compiles the TypeScript, builds the native
// unit tests under ASan+UBSan, runs the whole mocha suite (which needs root
// for its network namespaces) and counts the results from mocha's JSON
// reporter. Ends with the line `N passed, N failed`. A skipped (pending) test
// or an empty run is a failure: nothing here is optional.
//
// Extra arguments go to mocha, e.g. `npm test -- --grep LinkMonitor`.
//
// `--unit` (`npm run test:unit`): only the suites that need neither root nor
// network namespaces (the parser, validation, errors, fight control, the flag
// layer, the guard's policy over the real native core on scripted input, the state file, the
// doctor on configuration files, the Kubernetes layer against the fake API
// server), for contributors: seconds, without privileges. `npm test` runs them
// too, and once more with every capability dropped (test/unit-suite.test.ts)
// to keep this list honest. `--no-build` skips compiling.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const UNIT_SUITES = [
  'parser',
  'validate',
  'errors',
  'fight',
  'fight-control',
  'cli-flags',
  'guard-policy',
  'guard-native-path',
  'guard-adopt',
  'offload-auto',
  'state-file',
  'doctor-config',
  'udev-writer',
  'kubernetes',
  'kubernetes-credentials',
  'other-guards',
];
const args = process.argv.slice(2);
const unit = args.includes('--unit');
const build = !args.includes('--no-build');
const mochaArgs = args.filter((arg) => arg !== '--unit' && arg !== '--no-build');
// A unit run may be anyone's: its results go to a folder of its own.
const scratch = unit ? mkdtempSync(join(tmpdir(), 'fg-unit-')) : undefined;
if (scratch) process.on('exit', () => rmSync(scratch, { recursive: true, force: true }));
const resultsFile = scratch
  ? join(scratch, 'test-results.json')
  : join(root, 'build', 'test-results.json');

function run(command, args, what) {
  const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) {
    console.error(`${what} failed (${command} ${args.join(' ')})`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
}

const bin = (name) => join(root, 'node_modules', '.bin', name);

if (build && !existsSync(join(root, 'build', 'Release', 'flannel_guard.node'))) {
  run(bin('node-gyp'), ['rebuild', '-j', '2'], 'building the addon');
}
if (build) {
  run(
    process.execPath,
    [join(root, 'scripts', 'build-ts.mjs'), '--incremental'],
    'compiling TypeScript',
  );
}
if (build && !unit) {
  run(
    'cmake',
    ['-S', 'native', '-B', 'build/native-tests', '-DFG_SANITIZE=ON', '-DCMAKE_BUILD_TYPE=Debug'],
    'configuring the native unit tests',
  );
  run('cmake', ['--build', 'build/native-tests', '-j', '2'], 'building the native unit tests');
}

mkdirSync(dirname(resultsFile), { recursive: true });
rmSync(resultsFile, { force: true });
const selection = unit
  ? [
      '--no-config',
      '--timeout',
      '60000',
      '--forbid-only',
      ...UNIT_SUITES.map((suite) => join('dist', 'test', `${suite}.test.js`)),
    ]
  : [];
const mocha = spawnSync(
  bin('mocha'),
  [
    '--reporter',
    join(root, 'scripts', 'mocha-reporter.cjs'),
    '--reporter-option',
    `output=${resultsFile}`,
    ...selection,
    ...mochaArgs,
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
