/**
 * The code style the project holds itself to: eslint (typescript-eslint's
 * strict rules, type-checked for lib/), prettier, and clang-format for C++.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');
const bin = (name: string): string => join(root, 'node_modules', '.bin', name);

function check(command: string, args: readonly string[]): void {
  const result = spawnSync(command, args, {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  assert.equal(
    result.status,
    0,
    `${command} ${args.join(' ')}\n${result.stdout}\n${result.stderr}`,
  );
}

describe('lint and format', function () {
  this.timeout(300_000);

  it('eslint reports nothing', function () {
    check(bin('eslint'), ['.']);
  });

  it('prettier finds every file formatted', function () {
    check(bin('prettier'), ['--check', '.']);
  });

  it('clang-format finds every C++ file formatted', function () {
    check(process.execPath, [join(root, 'scripts', 'clang-format.mjs'), '--check']);
  });
});
