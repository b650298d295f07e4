/**
 * The libFuzzer targets (netlink parser; ethtool string and feature decoding; the state mirror)
 * under ASan+UBSan for a bounded time each, from their seed corpora. A crash,
 * a sanitizer report or a round-trip mismatch fails the test; the inputs are
 * left in build/fuzz/artifacts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');
const SECONDS = 60;

describe('fuzzing (libFuzzer, ASan+UBSan)', function () {
  for (const target of ['fuzz_netlink', 'fuzz_ethtool', 'fuzz_mirror']) {
    it(`${target} runs ${SECONDS} s without a finding`, function () {
      this.timeout((SECONDS + 240) * 1000);
      const result = spawnSync(
        process.execPath,
        [join(root, 'scripts', 'fuzz.mjs'), '--seconds', String(SECONDS), '--target', target],
        { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
      );
      assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
      assert.match(result.stdout, new RegExp(`${target}: \\d+ execs .* 0 crashes`));
    });
  }
});
