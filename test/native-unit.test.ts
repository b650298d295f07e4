/**
 * The C++ unit tests of the pure native code (parser, request builder, ethtool
 * decoding), built by scripts/run-tests.mjs under ASan+UBSan into
 * build/native-tests, reported here one mocha test per C++ case.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const binary = join(__dirname, '..', '..', 'build', 'native-tests', 'native_tests');

function listCases(): string[] {
  if (!existsSync(binary)) return [];
  const listed = spawnSync(binary, ['--list'], { encoding: 'utf8' });
  return listed.status === 0 ? listed.stdout.split('\n').filter((line) => line !== '') : [];
}

describe('native unit tests (C++, ASan+UBSan)', function () {
  const cases = listCases();
  const outcomes = new Map<string, string>();

  before(function () {
    this.timeout(120_000);
    const run = spawnSync(binary, [], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    if (run.error) {
      outcomes.set('(stderr)', `${binary}: ${run.error.message}`);
      return;
    }
    for (const line of run.stdout.split('\n')) {
      if (line.startsWith('ok ')) {
        outcomes.set(line.slice('ok '.length), 'ok');
      } else if (line.startsWith('not ok ')) {
        // "not ok NAME: reason", where NAME itself may contain ': '.
        const rest = line.slice('not ok '.length);
        const name = cases
          .filter((c) => rest === c || rest.startsWith(`${c}: `))
          .sort((a, b) => b.length - a.length)[0];
        outcomes.set(name ?? rest, rest);
      }
    }
    if (run.stderr.trim() !== '') outcomes.set('(stderr)', run.stderr);
  });

  it('the test binary is built and lists its cases', function () {
    assert.ok(existsSync(binary), `${binary} is missing: run npm test (it builds it)`);
    assert.ok(cases.length > 0, 'no C++ test cases listed');
  });

  it('ran without sanitizer reports', function () {
    assert.equal(outcomes.get('(stderr)'), undefined);
  });

  for (const name of cases) {
    it(name, function () {
      assert.equal(outcomes.get(name), 'ok');
    });
  }
});
