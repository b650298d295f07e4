/**
 * The guard's use of the native fast path, on scripted events through the real native core
 * (the addon's ScriptedMonitor): it arms the monitor to answer the next drift in the read
 * that sees it only while policy allows a correction now (fight control, dry run, strategy),
 * the core keeps the restore set equal to the device's table, and the guard accounts for a
 * correction the native layer made exactly as for its own.
 */
import assert from 'node:assert/strict';

import { DEFAULT_FIGHT_POLICY } from '../lib/guard/fight-tracker';
import type { FlannelGuardOptions, RestoredEvent } from '../lib/guard';
import type { DesiredMacSource } from '../lib/guard/sources';
import { permanentArp } from './support/scripted-monitor';
import { addFlannelDevice, scriptedGuard, type ScriptedGuard } from './support/scripted-guard';

const PINNED = '5e:89:db:49:c6:a4';
const REMOTE_A = '7a:11:22:33:44:01';
const REMOTE_B = '7a:11:22:33:44:02';

/** Two peers, the second without its FDB entry (an ARP entry alone is what a flush takes). */
const PEERS = [
  { vtep: '10.244.1.0', mac: REMOTE_A, underlay: '192.0.2.11' },
  { vtep: '10.244.2.0', mac: REMOTE_B },
];

function rig(
  options: FlannelGuardOptions = {},
): ScriptedGuard & { ifindex: number; restored: RestoredEvent[] } {
  let ifindex = 0;
  // The corrections' timers are what these tests count: the counters' poll would be among them
  // (it has its own tests in offload-auto.test.ts).
  const scripted = scriptedGuard(
    { checksumErrorsPollMs: 0, ...options },
    {
      corrections: true,
      prepare: (kernel) => {
        ifindex = addFlannelDevice(kernel, PINNED, PEERS, {
          feature: 'tx-checksum-ip-generic',
          active: false,
        });
      },
    },
  );
  const restored: RestoredEvent[] = [];
  scripted.guard.on('restored', (event) => restored.push(event));
  scripted.guard.on('error', () => undefined);
  scripted.monitor.start();
  scripted.monitor.pump();
  scripted.ports.clear();
  return { ...scripted, ifindex, restored };
}

function permanentIps(r: ReturnType<typeof rig>): number {
  return r.kernel.neighboursOf(r.ifindex).filter((entry) => entry.family !== 'bridge').length;
}

function rewrite(r: ReturnType<typeof rig>, mac: string): void {
  r.clock.advance(10);
  r.kernel.setMac(r.ifindex, mac);
  r.monitor.pump();
}

describe('FlannelGuard and the native fast path (scripted)', function () {
  it('arms each managed device with its desired MAC and its permanent IP entries (no FDB)', function () {
    const r = rig();
    const armed = r.monitor.armed(r.ifindex);
    assert.equal(armed?.name, 'flannel.1');
    assert.equal(armed.mac, PINNED);
    assert.deepEqual([...armed.neighbours].sort(), ['10.244.1.0', '10.244.2.0']);
    r.guard.close();
  });

  it('arms the MAC it writes itself before it writes it (the native reader sees the write at once, and would answer it as a rewrite)', function () {
    const NEXT = '5e:89:db:49:c6:b5';
    const table = new Map([['flannel.1', PINNED]]);
    const listeners = new Set<() => void>();
    const source: DesiredMacSource = {
      name: 'kubernetes',
      desiredMac: (device) => table.get(device),
      subscribe: (listener) => {
        listeners.add(listener);
        return () => listeners.delete(listener);
      },
    };
    const r = rig({ source });
    assert.equal(r.monitor.armed(r.ifindex)?.mac, PINNED);
    const armedAtWrite: (string | undefined)[] = [];
    r.ports.before('setLinkMac', () => armedAtWrite.push(r.monitor.armed(r.ifindex)?.mac));
    // The source publishes another MAC: the guard brings the device to it.
    table.set('flannel.1', NEXT);
    for (const listener of listeners) listener();
    r.monitor.pump();
    assert.deepEqual(
      r.ports.macWrites().map((w) => w.mac),
      [NEXT],
    );
    assert.deepEqual(armedAtWrite, [NEXT]);
    assert.equal(r.kernel.links.get(r.ifindex)?.mac, NEXT);
    r.guard.close();
  });

  it('never arms in a dry run, nor for the adopt strategy with a source answer', function () {
    const dry = rig({ dryRun: true });
    assert.equal(dry.monitor.armed(dry.ifindex), undefined);
    dry.guard.close();
  });

  it('accounts for a native correction as its own: rewrite and restored events, no write of its own', function () {
    const r = rig();
    rewrite(r, '02:00:00:00:0f:01');
    assert.equal(r.monitor.corrections, 1);
    assert.deepEqual(r.ports.macWrites(), [], 'the guard wrote nothing itself');
    assert.equal(r.restored.length, 1);
    // Timed by the core: from the notification's arrival to the last ACK.
    assert.ok((r.restored[0]?.latencyMs ?? -1) >= 0 && (r.restored[0]?.latencyMs ?? 1e9) < 1000);
    assert.equal(r.restored[0]?.neighbours, 2);
    assert.equal(r.guard.counters.corrections, 1);
    assert.equal(r.guard.counters.rewrites, 1);
    assert.equal(r.kernel.link(r.ifindex).mac, PINNED);
    assert.ok(r.monitor.armed(r.ifindex), 're-armed: a second correction is still allowed');
    r.guard.close();
  });

  for (const macs of [
    ['02:00:00:00:0f:01', '02:00:00:00:0f:02'],
    ['02:00:00:00:0f:01', '02:00:00:00:0f:02', '02:00:00:00:0f:01'],
  ]) {
    it(`rewrites read in one batch (${macs.join(', ')}): one native write, reported after the last of them`, function () {
      const r = rig();
      const order: string[] = [];
      r.guard.on('rewrite', (event) => order.push(`rewrite ${event.mac}`));
      r.guard.on('restored', (event) => order.push(`restored ${event.neighbours}`));
      r.clock.advance(10);
      for (const mac of macs) r.kernel.setMac(r.ifindex, mac);
      r.monitor.pumpTogether();
      r.monitor.pump();
      assert.deepEqual(order, [...macs.map((mac) => `rewrite ${mac}`), 'restored 2']);
      assert.equal(r.monitor.corrections, 1);
      assert.deepEqual(r.ports.macWrites(), [], 'the guard wrote nothing itself');
      assert.equal(r.monitor.stats().carriedCorrections, macs.length - 1);
      assert.equal(r.kernel.link(r.ifindex).mac, PINNED);
      assert.equal(permanentIps(r), 2);
      r.guard.close();
    });
  }

  it('keeps the armed neighbour list equal to its table', function () {
    const r = rig();
    r.kernel.replaceNeighbour(permanentArp(r.ifindex, '10.244.3.0', REMOTE_A));
    r.monitor.pump();
    assert.equal(r.monitor.armed(r.ifindex)?.neighbours.length, 3);
    r.kernel.deleteNeighbour(permanentArp(r.ifindex, '10.244.1.0', REMOTE_A));
    r.monitor.pump();
    assert.deepEqual([...(r.monitor.armed(r.ifindex)?.neighbours ?? [])].sort(), [
      '10.244.2.0',
      '10.244.3.0',
    ]);
    r.guard.close();
  });

  it('disarms once the burst is spent, then the slow path applies backoff; re-arms after the window', function () {
    const r = rig();
    for (let i = 1; i <= DEFAULT_FIGHT_POLICY.burst; i += 1) rewrite(r, `02:00:00:00:0f:0${i}`);
    assert.equal(r.monitor.corrections, DEFAULT_FIGHT_POLICY.burst);
    assert.equal(r.monitor.armed(r.ifindex), undefined, 'no immediate correction is allowed now');
    rewrite(r, '02:00:00:00:0f:09');
    assert.equal(r.monitor.corrections, DEFAULT_FIGHT_POLICY.burst, 'not corrected natively');
    assert.equal(r.clock.pending().length, 1, 'a deferred correction');
    r.clock.advance(DEFAULT_FIGHT_POLICY.windowMs * 2);
    assert.equal(r.kernel.link(r.ifindex).mac, PINNED, 'corrected after the backoff');
    r.monitor.pump();
    assert.ok(r.monitor.armed(r.ifindex), 're-armed once the window has passed');
    r.guard.close();
  });

  it('disarms while contested, and on release', function () {
    const r = rig({ fight: { burst: 5, maxRewrites: 3 } });
    for (let i = 1; i <= 3; i += 1) rewrite(r, `02:00:00:00:0f:0${i}`);
    assert.equal(r.monitor.armed(r.ifindex), undefined);
    assert.equal(r.guard.status()[0]?.contested, true);
    r.kernel.rename(r.ifindex, 'eth9');
    r.monitor.pump();
    assert.equal(r.monitor.armed(r.ifindex), undefined);
    assert.deepEqual(r.guard.status(), []);
    r.guard.close();
  });

  it('a contest first seen on a native correction resumes, after the quiet time, with a correction', function () {
    const r = rig({ fight: { burst: 5, maxRewrites: 3, quietMs: 60_000 } });
    const events: string[] = [];
    r.guard.on('contested', () => events.push('contested'));
    r.guard.on('resumed', () => events.push('resumed'));
    // Armed before each rewrite whatever policy says now: a native layer left with an allowance
    // the contest has used up (the contest is then only known from its correction).
    for (let i = 1; i <= 3; i += 1) {
      r.monitor.arm(r.ifindex, { name: 'flannel.1', mac: PINNED });
      rewrite(r, `02:00:00:00:0f:0${i}`);
    }
    assert.equal(r.monitor.corrections, 3);
    assert.deepEqual(events, ['contested']);
    rewrite(r, '02:00:00:00:0f:09'); // the other writer again, while contested: observed only
    assert.equal(r.kernel.link(r.ifindex).mac, '02:00:00:00:0f:09');
    r.clock.advance(60_000);
    assert.deepEqual(events, ['contested', 'resumed']);
    assert.equal(r.kernel.link(r.ifindex).mac, PINNED, 'corrected once the contest ended');
    r.guard.close();
  });

  it('once a contest ends, entries flushed while it lasted are put back, also when the MAC is right by then', function () {
    // Found by the sequences: a burst contested, a same-MAC write flushed the table while the
    // guard held back, the MAC was right when it resumed, and the entries stayed gone.
    const r = rig({ fight: { burst: 5, maxRewrites: 3, quietMs: 60_000 } });
    for (let i = 1; i <= 3; i += 1) rewrite(r, `02:00:00:00:0f:0${i}`);
    assert.equal(r.guard.status()[0]?.contested, true);
    const observed = r.kernel.link(r.ifindex).mac ?? '';
    rewrite(r, observed); // the other writer writes its MAC again: a flush, nothing more
    assert.equal(permanentIps(r), 0);
    r.kernel.setMac(r.ifindex, PINNED); // and puts the desired one back, read after the resume
    r.clock.advance(60_000);
    r.monitor.pump();
    assert.equal(r.kernel.link(r.ifindex).mac, PINNED);
    assert.equal(permanentIps(r), 2);
    r.guard.close();
  });

  it('a native correction that lost the device (ENODEV) is no error; one whose re-read lost the name is', function () {
    const errors: string[] = [];
    const r = rig();
    r.guard.on('error', (error) => errors.push(error.code));
    const link = r.kernel.link(r.ifindex);
    const previous = { ...link };
    r.monitor.emit('linkChanged', {
      link: { ...link, mac: '02:00:00:00:0f:01' },
      previous,
      source: 'event',
      kernelEvent: null,
      correction: {
        mac: PINNED,
        neighbours: 0,
        queuedMs: 0,
        macMs: 0.1,
        doneMs: 0.1,
        after: null,
        echoed: false,
        error: Object.assign(new Error('ENODEV'), { code: 'ENODEV', errno: -19 }),
      },
    });
    assert.deepEqual(errors, []);
    assert.equal(r.monitor.armed(r.ifindex), undefined, 'a vanishing device is not re-armed');
    r.guard.close();

    const s = rig();
    const seen: string[] = [];
    s.guard.on('error', (error) => seen.push(error.code));
    const current = s.kernel.link(s.ifindex);
    s.monitor.emit('linkChanged', {
      link: { ...current, mac: '02:00:00:00:0f:01' },
      previous: { ...current },
      source: 'event',
      kernelEvent: null,
      correction: {
        mac: PINNED,
        neighbours: 2,
        queuedMs: 0,
        macMs: 0.1,
        doneMs: 0.1,
        after: null,
        echoed: false,
      },
    });
    assert.deepEqual(seen, ['EIO']);
    s.guard.close();
  });
});
