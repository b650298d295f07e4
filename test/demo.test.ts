/**
 * `npm run demo`, run as a user runs it (the machine's own state folder in its environment, not
 * the test run's): udev's rewrites named as udev's from each node's own machine-id, the traffic
 * broken then restored, a foreign write named as another writer's, and nothing left behind: no
 * namespace, no process, no file in the machine's /run/flannel-guard.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

import { DEFAULT_STATE_DIR } from '../lib/core/defaults';
import { snapshotTree } from './support/netns';
import { startCommand } from './support/node-child';

const CHECKOUT = join(__dirname, '..', '..');

describe('npm run demo', function () {
  this.timeout(240_000);

  it('names udev as the writer of both rewrites, restores the traffic, and leaves nothing behind', async function () {
    const env = { ...process.env };
    delete env.FLANNEL_GUARD_STATE_DIR;
    const stateBefore = snapshotTree(DEFAULT_STATE_DIR);
    const demo = startCommand([process.execPath, join(CHECKOUT, 'dist', 'scripts', 'demo.js')], {
      cwd: CHECKOUT,
      env,
      timeoutMs: 200_000,
    });
    const run = await demo.exited;
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const section = (title: string): string => {
      const start = run.stdout.indexOf(`== ${title}`);
      assert.ok(start >= 0, `no section ${title}: ${run.stdout}`);
      const end = run.stdout.indexOf('\n== ', start + 1);
      return run.stdout.slice(start, end < 0 ? undefined : end);
    };
    const without = section('Without flannel-guard');
    assert.equal(without.match(/ping FAILS, TCP FAILS/g)?.length, 2, without);
    const started = section('Starting `flannel-guard watch`');
    assert.equal(started.match(/writer=udev-persistent-policy/g)?.length, 2, started);
    assert.doesNotMatch(started, /writer=another-writer/);
    assert.equal(started.match(/ping ok, TCP ok/g)?.length, 2, started);
    const foreign = section('Another process sets');
    assert.match(foreign, /writer=another-writer/);
    assert.equal(foreign.match(/ping ok, TCP ok/g)?.length, 2, foreign);
    assert.match(run.stdout, /all namespaces, processes and files removed/);
    // The demo's namespaces are named after its PID (fgt-PID-N); other suites' may come and go.
    const left = readdirSync('/run/netns').filter((name) =>
      name.includes(`-${String(demo.child.pid)}-`),
    );
    assert.deepEqual(left, [], 'every namespace removed');
    assert.equal(
      snapshotTree(DEFAULT_STATE_DIR),
      stateBefore,
      "the machine's state folder untouched",
    );
  });
});
