/**
 * Two guards on one device (a rolling update with maxSurge, a second installation, a
 * force-deleted pod whose container still runs), through the real CLI against the real kernel:
 * they converge on the same table after every rewrite, also while another writer (flanneld)
 * re-adds the entries, and each says once that the device is shared, and again when it is not.
 * Neither loads Node's networking or stream modules to learn of the other (their RSS).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';

import { flannelDeviceLines, UNDERLAY_LINES } from './support/flannel-device';
import { GuardProcess } from './support/guard-process';
import { delay, Netns, registerSyncCleanup, tempDirPrefix, waitFor } from './support/netns';

const LOADED_BUILTINS = join(__dirname, 'support', 'loaded-builtins.js');
/** Builtins a guard without Kubernetes or the CNI socket has no use for: 2.4 MiB of its RSS. */
const UNUSED_BUILTINS = /^(net|tls|https?|http2|child_process|cluster|dgram|stream)$/;

const MAC_A = '02:00:00:00:00:0a';
const ENTRIES = 100;
const PEERS = Array.from({ length: ENTRIES }, (_, i) => ({
  ip: `198.18.${2 + Math.floor(i / 250)}.${(i % 250) + 1}`,
  mac: `02:00:00:01:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`,
  underlay: `192.0.2.${(i % 250) + 2}`,
}));
const NEIGHBOURS = PEERS.map(
  (p) => `neigh replace ${p.ip} lladdr ${p.mac} dev flannel.1 nud permanent`,
);

async function state(ns: Netns): Promise<{ mac: string; permanent: number }> {
  const [link] = await ns.ipJson<{ address: string }[]>('link show dev flannel.1');
  const entries = await ns.ipJson<unknown[]>('neigh show dev flannel.1 nud permanent');
  return { mac: link?.address ?? '', permanent: entries.length };
}

describe('two guards on one device (real kernel, real CLI)', function () {
  this.timeout(120_000);
  let ns: Netns;
  const guards: GuardProcess[] = [];
  /** Where each guard writes the builtins it loaded, at its exit. */
  let loaded: string[] = [];
  let scratch: string;

  beforeEach(async function () {
    scratch = mkdtempSync(tempDirPrefix('two-guards'));
    registerSyncCleanup(() => rmSync(scratch, { recursive: true, force: true }));
    ns = await Netns.create('fgtwo');
    await ns.ipBatch([...UNDERLAY_LINES, ...flannelDeviceLines(MAC_A), ...NEIGHBOURS]);
    // Rewrites 400 ms apart are corrected at once: a window shorter than the pace.
    const flags = [
      '--netns',
      ns.name,
      '--mac',
      `flannel.1=${MAC_A}`,
      '--state-dir',
      'off',
      '--offload',
      'none',
      '--max-rewrites',
      '100',
      '--rewrite-window',
      '300',
    ];
    loaded = ['first', 'second'].map((which) => join(scratch, `${which}-builtins.json`));
    for (const out of loaded) {
      const env = {
        ...process.env,
        NODE_OPTIONS: `--require=${LOADED_BUILTINS}`,
        FG_TEST_LOADED_BUILTINS: out,
      };
      guards.push(await GuardProcess.start(flags, 10_000, env));
    }
  });

  afterEach(async function () {
    for (const guard of guards.splice(0)) await guard.stop();
    await ns.destroy();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('ten rewrites 400 ms apart, another writer re-adding entries: both guards converge on the full table after each; each says once that the device is shared', async function () {
    for (const guard of guards) {
      await guard.waitFor((line) => line.event === 'shared' && line.others === 1);
    }
    const after: string[] = [];
    for (let rewrite = 1; rewrite <= 10; rewrite += 1) {
      await ns.ip(
        `link set flannel.1 address 02:00:00:00:02:${rewrite.toString(16).padStart(2, '0')}`,
      );
      // flanneld re-adding its entries while the guards restore them (every other rewrite).
      if (rewrite % 2 === 0) await ns.ipBatch(NEIGHBOURS);
      await delay(400);
      const settled = await waitFor(
        async () => {
          const now = await state(ns);
          return now.mac === MAC_A && now.permanent === ENTRIES ? now : undefined;
        },
        { timeoutMs: 5000, what: `MAC and ${ENTRIES} entries back after rewrite ${rewrite}` },
      );
      after.push(`${settled.mac} ${settled.permanent}`);
    }
    assert.deepEqual(after, Array(10).fill(`${MAC_A} ${ENTRIES}`));
    for (const guard of guards) {
      assert.equal(guard.events('shared').length, 1, 'said once');
      assert.deepEqual(guard.events('error'), []);
    }
    // One goes; the other says so, then keeps the table alone.
    const [first, second] = guards;
    assert.ok(first && second);
    await first.stop();
    guards.shift();
    await second.waitFor((line) => line.event === 'shared' && line.others === 0);
    await ns.ip('link set flannel.1 address 02:00:00:00:03:01');
    await waitFor(
      async () => {
        const now = await state(ns);
        return now.mac === MAC_A && now.permanent === ENTRIES;
      },
      { timeoutMs: 5000, what: 'the second guard alone restoring the full table' },
    );
    await second.stop();
    guards.shift();
    // The one that held the name and the one that joined, then held it.
    for (const out of loaded) {
      const builtins = JSON.parse(readFileSync(out, 'utf8')) as string[];
      assert.ok(builtins.includes('fs'), `${out}: the list is read`);
      assert.deepEqual(
        builtins.filter((name) => UNUSED_BUILTINS.test(name)),
        [],
      );
    }
  });
});
