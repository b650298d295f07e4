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
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
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
  'claim-watch',
  'journal',
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
  // By the system's compiler: the source is freestanding C, and zig is the zig step's (CI fetches
  // and runs it beside the tests); the package test checks the shims zig builds.
  run(process.execPath, [join(root, 'scripts', 'cni-shim.mjs'), '--cc'], 'building the CNI shim');
  run(
    'cmake',
    ['-S', 'native', '-B', 'build/native-tests', '-DFG_SANITIZE=ON', '-DCMAKE_BUILD_TYPE=Debug'],
    'configuring the native unit tests',
  );
  run('cmake', ['--build', 'build/native-tests', '-j', '2'], 'building the native unit tests');
}

/**
 * A full run goes in two lanes, two mocha processes at once: most suites wait (on the kernel,
 * udevd, child processes and timers) far more than they compute, so one CPU is idle most of
 * the time a single mocha runs. The suites that load a CPU by themselves (the linters and tsc,
 * the first-run builds, libFuzzer, valgrind, the image build, other Node versions) share one
 * lane, so none of them runs beside another; the package test ends that lane, since it waits
 * for the zig step CI runs beside the tests. A run with mocha arguments (`--grep`, files) is
 * one lane.
 */
const HEAVY_SUITES = ['lint', 'first-run', 'fuzz', 'valgrind', 'node-versions', 'image', 'package'];

function testFiles() {
  const dir = join(root, 'dist', 'test');
  return readdirSync(dir)
    .filter((name) => name.endsWith('.test.js'))
    .sort()
    .map((name) => join('dist', 'test', name));
}

function lanes() {
  if (unit || mochaArgs.length > 0) return [{ name: '', files: [], results: resultsFile }];
  const files = testFiles();
  const heavy = HEAVY_SUITES.map((suite) => join('dist', 'test', `${suite}.test.js`)).filter(
    (file) => files.includes(file),
  );
  const rest = files.filter((file) => !heavy.includes(file));
  return [
    { name: 'a', files: rest, results: resultsFile.replace(/\.json$/, '-a.json') },
    { name: 'b', files: heavy, results: resultsFile.replace(/\.json$/, '-b.json') },
  ];
}

/** Runs one lane's mocha; its lines go out whole, prefixed with the lane's name. */
function runLane(lane) {
  rmSync(lane.results, { force: true });
  const child = spawn(
    bin('mocha'),
    [
      '--reporter',
      join(root, 'scripts', 'mocha-reporter.cjs'),
      '--reporter-option',
      `output=${lane.results}`,
      ...selection,
      ...(lane.files.length > 0 ? ['--no-config', ...configArgs(), ...lane.files] : []),
      ...mochaArgs,
    ],
    { cwd: root, stdio: lane.name === '' ? 'inherit' : ['ignore', 'pipe', 'pipe'] },
  );
  if (lane.name !== '') {
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on('line', (line) => {
        process.stdout.write(`[${lane.name}] ${line}\n`);
      });
    }
  }
  return new Promise((resolve) => {
    child.on('close', (status, signal) => resolve({ lane, status, signal }));
  });
}

/** .mocharc.json's settings but its spec, for a lane that names its own files. */
function configArgs() {
  const config = JSON.parse(readFileSync(join(root, '.mocharc.json'), 'utf8'));
  return [
    ...(config.require ?? []).flatMap((module) => ['--require', module]),
    '--timeout',
    String(config.timeout),
    '--slow',
    String(config.slow),
    ...(config.forbidOnly ? ['--forbid-only'] : []),
  ];
}

// What killed runs left (namespaces, work folders named after a PID that is gone) goes before
// the lanes start: once they run, objects of that shape are theirs.
if (!unit && process.getuid?.() === 0) {
  const { reapStale } = await import(join(root, 'dist', 'test', 'support', 'netns.js'));
  const reaped = await reapStale();
  const left = [...reaped.namespaces, ...reaped.tempDirs];
  if (left.length > 0) console.log(`removed what killed runs left: ${left.join(', ')}`);
}

mkdirSync(dirname(resultsFile), { recursive: true });
const selection = unit
  ? [
      '--no-config',
      '--timeout',
      '60000',
      '--forbid-only',
      ...UNIT_SUITES.map((suite) => join('dist', 'test', `${suite}.test.js`)),
    ]
  : [];
const ended = await Promise.all(lanes().map(runLane));

const problems = [];
const totals = { passes: 0, failures: 0, pending: 0, tests: 0 };
for (const { lane, status, signal } of ended) {
  const label = lane.name === '' ? 'mocha' : `lane ${lane.name}`;
  if (!existsSync(lane.results)) {
    problems.push(`${label} wrote no results (exit status ${status}, signal ${signal})`);
    continue;
  }
  const { stats } = JSON.parse(readFileSync(lane.results, 'utf8'));
  for (const key of Object.keys(totals)) totals[key] += stats[key];
  if (status !== 0 && stats.failures === 0) problems.push(`${label} exited with status ${status}`);
}
if (totals.pending > 0) problems.push(`${totals.pending} test(s) skipped: skipping is not allowed`);
if (totals.tests === 0) problems.push('no tests ran');
for (const problem of problems) console.error(problem);
const failed = totals.failures + (problems.length > 0 ? 1 : 0);
console.log(`${totals.passes} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
