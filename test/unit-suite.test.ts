/**
 * `npm run test:unit` needs no privilege: its suites are run again here with
 * every capability dropped for good (root's uid kept, so that a checkout in
 * root's home stays readable; with an empty bounding set no exec gets a
 * capability back). A suite added to that list that needs a namespace or a
 * write to the kernel fails here.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';

import { runCommand } from './support/node-child';

const root = join(__dirname, '..', '..');

describe('npm run test:unit (the suites that need no privilege)', function () {
  this.timeout(180_000);

  it('passes with every capability dropped, and ends with its count line', async function () {
    const result = await runCommand(
      [
        'setpriv',
        '--inh-caps=-all',
        '--bounding-set=-all',
        '--',
        process.execPath,
        join(root, 'scripts', 'run-tests.mjs'),
        '--unit',
        '--no-build',
      ],
      { timeoutMs: 170_000 },
    );
    const output = `${result.stdout}\n${result.stderr}`;
    assert.equal(result.code, 0, output.slice(-4000));
    const count = /^(\d+) passed, 0 failed$/m.exec(result.stdout);
    assert.ok(count, output.slice(-2000));
    assert.ok(Number(count[1]) >= 150, `only ${count[1]} tests ran`);
    // Without the capability the kernel refuses what a namespace test needs.
    const dropped = ['setpriv', '--inh-caps=-all', '--bounding-set=-all', '--'];
    const probe = await runCommand([...dropped, 'ip', 'netns', 'add', 'fgt-unit-probe']);
    if (probe.code === 0) await runCommand(['ip', 'netns', 'del', 'fgt-unit-probe']);
    assert.notEqual(probe.code, 0, 'a namespace was created without privileges');
  });
});
