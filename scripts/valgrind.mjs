#!/usr/bin/env node
// Runs mocha test files under valgrind memcheck (node itself; the tests'
// child processes run natively) and fails on memory errors or definite
// leaks. Default: the addon's integration suites (the monitor, one-shot calls, the claim
// watch). Needs root for the netns.
//
// Left out under valgrind: the N9 churn test, which races a native `ip -batch`
// against dumps and cannot win at valgrind's speed (its dump path is the one
// every other test exercises). V8's conservative stack scan reads
// uninitialised stack slots on purpose; valgrind.supp silences exactly that.
//
// usage: node scripts/valgrind.mjs [dist/test/FILE.test.js ...]
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const files = process.argv.slice(2);
const suites =
  files.length > 0
    ? files
    : ['dist/test/monitor.test.js', 'dist/test/oneshot.test.js', 'dist/test/claim-watch.test.js'];
const result = spawnSync(
  'valgrind',
  [
    '--tool=memcheck',
    '--leak-check=full',
    '--show-leak-kinds=definite',
    '--errors-for-leak-kinds=definite',
    '--error-exitcode=97',
    `--suppressions=${join(root, 'scripts', 'valgrind.supp')}`,
    process.execPath,
    join(root, 'node_modules', 'mocha', 'bin', 'mocha.js'),
    '--no-config',
    '--require',
    'dist/test/support/netns.js',
    '--timeout',
    '600000',
    '--grep',
    'N9:',
    '--invert',
    ...suites,
  ],
  {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    // Memcheck runs node ~20x slower; interval tests scale by this.
    env: { ...process.env, FLANNEL_GUARD_TEST_SLOWDOWN: '20' },
  },
);
process.stdout.write(result.stdout);
const summary = result.stderr
  .split('\n')
  .filter((line) => /ERROR SUMMARY|definitely lost|indirectly lost|possibly lost/.test(line))
  .join('\n');
console.log(summary);
if (result.status !== 0) {
  console.error(
    result.status === 97 ? result.stderr : `valgrind or mocha failed (${result.status})`,
  );
}
process.exit(result.status ?? 1);
