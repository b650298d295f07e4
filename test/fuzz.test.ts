/**
 * The libFuzzer targets (netlink parser; ethtool string and feature decoding; the state mirror;
 * the path probes' echo-reply parser; the /proc/net/snmp counters; the checksum judge)
 * under ASan+UBSan for a bounded time each, from their seed corpora and a new random seed each run. A crash,
 * a sanitizer report or a round-trip mismatch fails the test; the inputs are
 * left in build/fuzz/artifacts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';

const root = join(__dirname, '..', '..');
/**
 * What `npm test` spends on each of the larger targets: long enough to reach every branch its
 * seed corpus leads to, short enough for CI's half hour; `npm run fuzz -- --seconds N` searches
 * longer, before a change to the native core lands.
 */
const SECONDS = 15;

describe('fuzzing (libFuzzer, ASan+UBSan)', function () {
  // The echo-reply and snmp parsers and the checksum judge are a few dozen lines: a third of
  // the time covers them (whole seconds: scripts/fuzz.mjs takes nothing else).
  const third = Math.max(1, Math.round(SECONDS / 3));
  const targets: [string, number][] = [
    ['fuzz_netlink', SECONDS],
    ['fuzz_ethtool', SECONDS],
    ['fuzz_mirror', SECONDS],
    ['fuzz_path_probe', third],
    ['fuzz_snmp', third],
    ['fuzz_checksum_sample', third],
  ];
  for (const [target, seconds] of targets) {
    it(`${target} runs ${seconds} s without a finding`, function () {
      this.timeout((seconds + 240) * 1000);
      const result = spawnSync(
        process.execPath,
        [join(root, 'scripts', 'fuzz.mjs'), '--seconds', String(seconds), '--target', target],
        { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
      );
      assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
      assert.match(result.stdout, new RegExp(`${target}: \\d+ execs .* 0 crashes`));
    });
  }
});
