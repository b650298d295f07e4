/**
 * The addon's integration suites (LinkMonitor, one-shot calls, ClaimWatch) once more,
 * with node under valgrind memcheck: no memory error, no definite leak.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');

describe('valgrind memcheck of the addon integration suites', function () {
  it('monitor, one-shot and claim-watch suites: 0 errors, 0 bytes definitely lost', function () {
    this.timeout(1_200_000);
    const result = spawnSync(process.execPath, [join(root, 'scripts', 'valgrind.mjs')], {
      cwd: root,
      encoding: 'utf8',
      maxBuffer: 256 * 1024 * 1024,
    });
    assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
    assert.match(result.stdout, /ERROR SUMMARY: 0 errors/);
    assert.match(result.stdout, /definitely lost: 0 bytes/);
    assert.match(result.stdout, /\d+ passing/);
    assert.doesNotMatch(result.stdout, /\d+ failing/);
  });
});
