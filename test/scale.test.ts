/**
 * A VTEP with a fleet's worth of entries: flannel.1 with N permanent ARP and N FDB entries
 * (one each per other node; Kubernetes supports 5000 nodes), guarded by `flannel-guard watch`
 * as users run it, rewritten with `ip link set address` on the real kernel.
 *
 * - Two rewrites 1.5 s apart (inside fight control's burst): each is corrected at once with
 *   every ARP entry back, one `rewrite` and one `restored` event counting N each, no error, no
 *   overrun, no resync (the native layer writes the N entries in batches sized to its socket,
 *   and the monitor's socket holds the flush of N entries and their re-adds).
 * - The flush racing a second writer, who changes, deletes and adds entries while the guard
 *   restores them: what the guard then keeps is what the kernel has, checked by a third
 *   rewrite, whose restore must give back exactly the table as it was before it.
 * - An overrun during a chunked restore (a monitor buffer far too small, set explicitly): the
 *   correction stands, counted once, and the resync that follows is not taken for a rewrite.
 */
import assert from 'node:assert/strict';

import { GuardProcess, type GuardLine } from './support/guard-process';
import { Netns, execFile } from './support/netns';

const VTEP = 'flannel.1';
const PINNED = '0e:f1:a2:00:00:01';
const N = 5000;

interface NeighbourRow {
  dst: string;
  lladdr?: string;
  state?: string[];
}

function hex(byte: number): string {
  return byte.toString(16).padStart(2, '0');
}

/** Peer k (1-based): its pod subnet's first address in 198.18.0.0/15, its VTEP MAC and underlay address. */
function peer(k: number): { ip: string; mac: string; underlay: string } {
  return {
    ip: `198.${18 + (k >> 16)}.${(k >> 8) & 0xff}.${k & 0xff}`,
    mac: `0e:00:00:${hex((k >> 16) & 0xff)}:${hex((k >> 8) & 0xff)}:${hex(k & 0xff)}`,
    underlay: `192.0.2.${20 + (k % 200)}`,
  };
}

async function vtepWithPeers(count: number): Promise<Netns> {
  const ns = await Netns.create('fgt-scale');
  await ns.ipBatch([
    'link set lo up',
    'link add eth0 type veth peer name eth0p',
    'addr add 192.0.2.10/24 dev eth0',
    'link set eth0 up',
    'link set eth0p up',
    `link add ${VTEP} type vxlan id 1 dstport 8472 nolearning local 192.0.2.10 dev eth0`,
    `link set ${VTEP} address ${PINNED} up`,
    ...Array.from({ length: count }, (_, i) => {
      const p = peer(i + 1);
      return `neigh replace ${p.ip} lladdr ${p.mac} dev ${VTEP} nud permanent`;
    }),
  ]);
  const fdb = Array.from({ length: count }, (_, i) => {
    const p = peer(i + 1);
    return `fdb append ${p.mac} dev ${VTEP} dst ${p.underlay} self permanent`;
  });
  await execFile('bridge', ['-n', ns.name, '-batch', '-'], { input: fdb.join('\n') + '\n' });
  return ns;
}

/** The device's permanent ARP entries, destination -> lladdr. */
async function permanentArp(ns: Netns): Promise<Map<string, string>> {
  const rows = await ns.ipJson<NeighbourRow[]>(`-4 neigh show dev ${VTEP} nud permanent`);
  return new Map(rows.map((row) => [row.dst, row.lladdr ?? '']));
}

async function mac(ns: Netns): Promise<string | undefined> {
  const [link] = await ns.ipJson<{ address?: string }[]>(['link', 'show', VTEP]);
  return link?.address;
}

async function startGuard(ns: Netns, extra: string[] = []): Promise<GuardProcess> {
  return GuardProcess.start(
    [
      '--netns',
      ns.name,
      '--mac',
      `${VTEP}=${PINNED}`,
      '--offload',
      'none',
      '--state-dir',
      'off',
      ...extra,
    ],
    30_000,
  );
}

/** Rewrites the MAC and waits for the guard's `restored` line after it. */
async function rewriteAndWait(ns: Netns, guard: GuardProcess, foreign: string): Promise<GuardLine> {
  const from = guard.lines.length;
  await ns.ip(['link', 'set', VTEP, 'address', foreign]);
  return guard.waitFor((line) => line.event === 'restored', 10_000, from);
}

function count(guard: GuardProcess, event: string): number {
  return guard.events(event).length;
}

describe(`fleet scale: flannel.1 with ${N} permanent ARP and ${N} FDB entries`, function () {
  this.timeout(120_000);
  let ns: Netns;
  let guard: GuardProcess | undefined;

  beforeEach(async function () {
    ns = await vtepWithPeers(N);
  });

  afterEach(async function () {
    await guard?.stop();
    guard = undefined;
    await ns.destroy();
  });

  it('two rewrites 1.5 s apart: both corrected at once, N entries each, no error, overrun or resync', async function () {
    const before = await permanentArp(ns);
    assert.equal(before.size, N);
    guard = await startGuard(ns);
    const [ready] = guard.events('ready');
    assert.equal((ready?.devices as { neighbours: number }[])[0]?.neighbours, N);

    for (const foreign of ['02:00:00:00:00:a1', '02:00:00:00:00:a2']) {
      const restored = await rewriteAndWait(ns, guard, foreign);
      assert.equal(restored.neighbours, N);
      assert.equal(restored.deferred, false);
      assert.equal(await mac(ns), PINNED);
      assert.deepEqual(await permanentArp(ns), before);
      await new Promise((resolve) => setTimeout(resolve, 1500));
    }
    assert.equal(count(guard, 'rewrite'), 2);
    assert.equal(count(guard, 'restored'), 2);
    for (const event of ['error', 'overrun', 'resync', 'contested']) {
      assert.equal(count(guard, event), 0, `${event}: ${JSON.stringify(guard.events(event))}`);
    }
    assert.equal(guard.stderr, '');
  });

  it('the flush racing a second writer: what the guard keeps is what the kernel has', async function () {
    guard = await startGuard(ns);
    const from = guard.lines.length;
    await ns.ip(['link', 'set', VTEP, 'address', '02:00:00:00:00:b1']);
    // Another writer changes, deletes and adds entries at staggered moments while the guard
    // restores (~20 ms for 5000 entries): some land before its writes, some among them,
    // some after; a delete of an entry not yet back fails, as it would for that writer.
    const writes = [0, 3, 6, 9, 12, 16, 20, 25, 30, 40].map(async (delayMs, round) => {
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      const base = 1 + round * 400;
      const lines = [
        `neigh replace ${peer(base).ip} lladdr 0e:99:99:99:99:${hex(round)} dev ${VTEP} nud permanent`,
        `neigh del ${peer(base + 1).ip} dev ${VTEP}`,
        `neigh replace ${peer(N + 1 + round).ip} lladdr ${peer(N + 1 + round).mac} dev ${VTEP} nud permanent`,
      ];
      await ns.run(['ip', '-force', '-batch', '-'], {
        input: lines.join('\n') + '\n',
        allowFailure: true,
      });
    });
    const first = await guard.waitFor((line) => line.event === 'restored', 10_000, from);
    await Promise.all(writes);
    assert.equal(first.neighbours, N);
    // Every write is done (the guard writes neighbours only on a MAC change), so this is the
    // table; the guard reads the notifications of all of it before the next rewrite's.
    const settled = await permanentArp(ns);
    assert.equal(await mac(ns), PINNED);

    // A third rewrite flushes everything: the guard puts back exactly what it keeps.
    const third = await rewriteAndWait(ns, guard, '02:00:00:00:00:b2');
    assert.equal(await mac(ns), PINNED);
    const after = await permanentArp(ns);
    assert.deepEqual(after, settled, 'the guard kept a table other than the kernel had');
    assert.equal(third.neighbours, settled.size);
    assert.equal(count(guard, 'error'), 0, JSON.stringify(guard.events('error')));
  });

  it('an overrun during a chunked restore: the correction stands, counted once; the resync is no rewrite', async function () {
    const before = await permanentArp(ns);
    // 64 KiB holds ~80 notifications: the flush of 5000 entries and their re-adds overrun it.
    guard = await startGuard(ns, ['--receive-buffer', '65536']);
    const restored = await rewriteAndWait(ns, guard, '02:00:00:00:00:c1');
    assert.equal(restored.neighbours, N);
    await guard.waitFor((line) => line.event === 'resync' && line.phase === 'end', 10_000);
    assert.ok(count(guard, 'overrun') >= 1, 'the small buffer overran');
    assert.equal(count(guard, 'rewrite'), 1, JSON.stringify(guard.events('rewrite')));
    assert.equal(count(guard, 'restored'), 1);
    assert.equal(count(guard, 'error'), 0, JSON.stringify(guard.events('error')));
    assert.equal(await mac(ns), PINNED);
    assert.deepEqual(await permanentArp(ns), before);

    // And the next rewrite, after the resync, is corrected the same way.
    const again = await rewriteAndWait(ns, guard, '02:00:00:00:00:c2');
    assert.equal(again.neighbours, N);
    assert.deepEqual(await permanentArp(ns), before);
  });
});
