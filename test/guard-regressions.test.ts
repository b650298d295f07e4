/**
 * Plain regression tests for orders of events that once broke the guard, each the minimal
 * sequence that found it, run through the real CLI against the real kernel in a throw-away
 * namespace. (The random sequence test, test/sequences.test.ts, searches for more.)
 */
import assert from 'node:assert/strict';

import { flannelDeviceLines, UNDERLAY_LINES } from './support/flannel-device';
import { GuardProcess } from './support/guard-process';
import { Netns } from './support/netns';

const MAC_A = '02:00:00:00:00:0a';
const PEERS = [
  { ip: '198.18.2.0', mac: '02:00:00:00:01:02', underlay: '192.0.2.2' },
  { ip: '198.18.3.0', mac: '02:00:00:00:01:03', underlay: '192.0.2.3' },
];

/** flannel.1 as flanneld leaves it: MAC A, one permanent ARP and FDB entry per peer. */
async function flannelDevice(ns: Netns): Promise<void> {
  await ns.ipBatch([
    ...UNDERLAY_LINES,
    ...flannelDeviceLines(MAC_A),
    ...PEERS.map((p) => `neigh replace ${p.ip} lladdr ${p.mac} dev flannel.1 nud permanent`),
  ]);
  for (const p of PEERS) {
    await ns.bridge(`fdb append ${p.mac} dev flannel.1 dst ${p.underlay} self permanent`);
  }
}

async function deviceMac(ns: Netns): Promise<string> {
  const [link] = await ns.ipJson<{ address: string }[]>('link show dev flannel.1');
  return link?.address ?? '';
}

async function permanentArp(ns: Netns): Promise<string[]> {
  const entries = await ns.ipJson<{ dst: string; lladdr?: string; state?: string[] }[]>(
    'neigh show dev flannel.1 nud permanent',
  );
  return entries.map((e) => `${e.dst} ${e.lladdr ?? ''}`).sort();
}

const EXPECTED_ARP = PEERS.map((p) => `${p.ip} ${p.mac}`).sort();

describe('guard regressions (real kernel, real CLI)', function () {
  this.timeout(60_000);
  let ns: Netns;
  let guard: GuardProcess | undefined;

  beforeEach(async function () {
    ns = await Netns.create('fgreg');
    await flannelDevice(ns);
  });

  afterEach(async function () {
    await guard?.stop();
    guard = undefined;
    await ns.destroy();
  });

  // Issue 24: a guard started on a device udev had rewritten (and whose entries flanneld had
  // re-added since) corrected it, then lost the whole table on every later rewrite while
  // reporting success, with latencies from the start-time drift. The native reader answered
  // a notification queued before the guard's own write (a second, same-MAC write, which
  // flushes too), and that flush, with no MAC change before it, was taken for deletions.
  it('started on a rewritten device, keeps MAC and entries through every later rewrite', async function () {
    await ns.ip('link set flannel.1 address 02:00:00:00:00:0b');
    await ns.ipBatch(
      PEERS.map((p) => `neigh replace ${p.ip} lladdr ${p.mac} dev flannel.1 nud permanent`),
    );
    guard = await GuardProcess.start([
      '--netns',
      ns.name,
      '--mac',
      `flannel.1=${MAC_A}`,
      '--state-dir',
      'off',
    ]);
    const atStart = await guard.waitFor((l) => l.event === 'restored');
    assert.equal(atStart.neighbours, 2);
    for (const mac of ['02:00:00:00:00:0c', '02:00:00:00:00:0d', '02:00:00:00:00:0e']) {
      const from = guard.lines.length;
      const before = performance.now();
      await ns.ip(`link set flannel.1 address ${mac}`);
      const restored = await guard.waitFor((l) => l.event === 'restored', 10_000, from);
      const elapsed = performance.now() - before;
      assert.equal(restored.neighbours, 2, `after the rewrite to ${mac}`);
      assert.equal(await deviceMac(ns), MAC_A);
      assert.deepEqual(await permanentArp(ns), EXPECTED_ARP, `entries after the rewrite to ${mac}`);
      // Honest: never longer than the drift lasted as seen from here.
      assert.ok(
        (restored.latencyMs as number) <= elapsed,
        `latencyMs ${String(restored.latencyMs)} > ${elapsed} ms since the rewrite`,
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });
});
