/**
 * Which network namespaces the state dir's pruning counts as live, on the real
 * system (root): a file is removed only when its namespace is held nowhere this
 * process can see, and then only once old (test/state-file.test.ts).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { liveNetnsInodes } from '../lib/guard/state-file';
import { Netns, tempDirPrefix, waitFor, waitForExit } from './support/netns';

describe('the state dir: live network namespaces', function () {
  it("live namespaces: a process's own, /run/netns, and one bound to a file elsewhere; a gone one is not", async function () {
    this.timeout(30_000);
    const held = spawn('unshare', ['--net', 'sleep', '30'], { stdio: 'ignore' });
    try {
      const inode = await waitFor(
        () => {
          const ino = statSync(`/proc/${held.pid ?? 0}/ns/net`).ino;
          return ino !== statSync('/proc/self/ns/net').ino ? ino : undefined;
        },
        { timeoutMs: 10_000, what: 'the unshared namespace' },
      );
      assert.ok(liveNetnsInodes().has(inode), 'held by a process');
      held.kill('SIGKILL');
      assert.ok(await waitForExit(held, 10_000));
      assert.equal(liveNetnsInodes().has(inode), false, 'gone with it');
    } finally {
      held.kill('SIGKILL');
    }
    const ns = await Netns.create('fgt-live');
    const dir = mkdtempSync(tempDirPrefix('live-netns'));
    try {
      const inode = statSync(ns.path).ino;
      assert.ok(liveNetnsInodes().has(inode), 'in /run/netns');
      // In a mount namespace of its own: the namespace bound to a file outside /run/netns only.
      const bound = join(dir, 'bound');
      writeFileSync(bound, '');
      const child = spawnSync(
        'unshare',
        [
          '--mount',
          '--propagation',
          'private',
          'sh',
          '-c',
          `mount --bind ${ns.path} ${bound} && umount ${ns.path} && exec "$0" -e "$1"`,
          process.execPath,
          `const { liveNetnsInodes } = require(${JSON.stringify(require.resolve('../lib/guard/state-file'))});
           process.stdout.write(String(liveNetnsInodes().has(${inode})));`,
        ],
        { encoding: 'utf8', timeout: 20_000 },
      );
      assert.equal(child.stdout, 'true', child.stderr);
    } finally {
      await ns.destroy();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
