/**
 * FlannelGuard's 'adopt' strategy on scripted events (no kernel, no
 * privileges; see test/support/scripted-monitor.ts): on a rewrite of a device
 * whose desired MAC comes from a source, the guard keeps the device's MAC,
 * puts back the neighbour entries the change flushed, and has the source
 * store the new MAC; explicit MACs and pins are still reverted; a failed
 * store is reported, and the source's notification then brings the device
 * back to what the source holds.
 */
import assert from 'node:assert/strict';

import type { SystemError } from '../lib/core/errors';
import {
  FlannelGuard,
  type AdoptedEvent,
  type FlannelGuardOptions,
  type RestoredEvent,
  type RewriteEvent,
} from '../lib/guard';
import type { DesiredMacSource } from '../lib/guard/sources';
import { addFlannelDevice, scriptedGuard, type ScriptedGuard } from './support/scripted-guard';

const PUBLISHED = '5e:89:db:49:c6:a4';
const UDEV_MAC = 'd6:02:e3:df:ea:7a';
const FOREIGN_MAC = '02:00:00:00:0f:01';
const EXPLICIT_MAC = '02:00:00:00:e0:01';
const REMOTE_A = '7a:11:22:33:44:01';
const REMOTE_B = '7a:11:22:33:44:02';
const CSUM = 'tx-checksum-ip-generic';
const PEERS = [
  { vtep: '10.244.1.0', mac: REMOTE_A, underlay: '192.0.2.11' },
  { vtep: '10.244.2.0', mac: REMOTE_B, underlay: '192.0.2.12' },
];

/** A source that stores adoptions when the test settles them (the node annotation, scripted). */
class AdoptingSource implements DesiredMacSource {
  readonly name = 'kubernetes';
  readonly table = new Map<string, string>();
  readonly listeners = new Set<() => void>();
  readonly calls: { device: string; mac: string }[] = [];
  readonly #pending: { resolve: () => void; reject: (error: Error) => void }[] = [];

  desiredMac(device: string): string | undefined {
    return this.table.get(device);
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  adopt(device: string, mac: string): Promise<void> {
    this.calls.push({ device, mac });
    return new Promise((resolve, reject) => {
      this.#pending.push({
        resolve: () => {
          this.table.set(device, mac);
          resolve();
        },
        reject,
      });
    });
  }

  /** Settles the oldest pending adoption and lets its continuation run. */
  async settle(error?: Error): Promise<void> {
    const pending = this.#pending.shift();
    assert.ok(pending, 'an adoption is pending');
    if (error) pending.reject(error);
    else pending.resolve();
    await new Promise((resolve) => setImmediate(resolve));
  }

  get pending(): number {
    return this.#pending.length;
  }

  notify(): void {
    for (const listener of this.listeners) listener();
  }
}

interface Rig extends ScriptedGuard {
  ifindex: number;
  rewrites: RewriteEvent[];
  restored: RestoredEvent[];
  adopted: AdoptedEvent[];
  errors: SystemError[];
}

const open: FlannelGuard[] = [];

/** flannel.1 at `mac` with two permanent ARP entries (and their FDB entries), offload already off. */
function rig(options: FlannelGuardOptions, mac = PUBLISHED): Rig {
  let ifindex = 0;
  // The corrections' timers are what these tests count: the counters' poll would be among them
  // (it has its own tests in offload-auto.test.ts).
  const scripted = scriptedGuard(
    { checksumErrorsPollMs: 0, ...options },
    {
      prepare: (kernel) => {
        ifindex = addFlannelDevice(kernel, mac, PEERS, { feature: CSUM, active: false });
      },
    },
  );
  open.push(scripted.guard);
  const r: Rig = { ...scripted, ifindex, rewrites: [], restored: [], adopted: [], errors: [] };
  const { guard, monitor } = scripted;
  guard.on('rewrite', (e) => r.rewrites.push(e));
  guard.on('restored', (e) => r.restored.push(e));
  guard.on('adopted', (e) => r.adopted.push(e));
  guard.on('error', (e) => r.errors.push(e));
  monitor.start();
  monitor.pump();
  return r;
}

function rewrite(r: Rig, mac: string): void {
  r.kernel.setMac(r.ifindex, mac);
  r.monitor.pump();
}

function restoredDestinations(r: Rig): (string | null)[] {
  return r.ports
    .neighbourWrites()
    .map((call) => call.entry.destination)
    .sort();
}

function arpEntries(r: Rig): string[] {
  return [...r.kernel.neighbours.values()]
    .filter((n) => n.family === 'inet' && n.ifindex === r.ifindex)
    .map((n) => `${n.destination ?? ''} ${n.lladdr ?? ''}`)
    .sort();
}

describe("FlannelGuard strategy 'adopt' (scripted monitor, fake ports and clock)", function () {
  afterEach(function () {
    for (const guard of open.splice(0)) guard.close();
  });

  it('keeps the new MAC, restores the flushed neighbours at once, and has the source store the MAC', async function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt' });
    r.ports.clear();

    r.clock.advance(10);
    rewrite(r, UDEV_MAC);
    const event = r.rewrites[0];
    assert.equal(event?.expected, PUBLISHED);
    assert.equal(event.mac, UDEV_MAC);
    // No MAC write: the device keeps it. The flushed ARP entries are back already.
    assert.deepEqual(r.ports.macWrites(), []);
    assert.deepEqual(restoredDestinations(r), ['10.244.1.0', '10.244.2.0']);
    assert.deepEqual(arpEntries(r), [`10.244.1.0 ${REMOTE_A}`, `10.244.2.0 ${REMOTE_B}`]);
    assert.deepEqual(source.calls, [{ device: 'flannel.1', mac: UDEV_MAC }]);
    assert.deepEqual(r.adopted, [], 'reported once stored');

    r.clock.advance(7);
    await source.settle();
    assert.equal(r.adopted.length, 1);
    assert.deepEqual(r.adopted[0], {
      device: 'flannel.1',
      ifindex: r.ifindex,
      mac: UDEV_MAC,
      previous: PUBLISHED,
      neighbours: 2,
      latencyMs: 7,
    });
    assert.deepEqual(r.restored, []);
    assert.deepEqual(r.errors, []);
    assert.equal(r.guard.counters.rewrites, 1);
    assert.equal(r.guard.counters.corrections, 0);
    assert.equal(r.guard.counters.neighboursRestored, 2);
    // From now on the stored MAC is the desired one: the restore's echoes change nothing.
    r.ports.clear();
    r.monitor.pump();
    assert.deepEqual(r.ports.writes(), []);
    const status = r.guard.status()[0];
    assert.equal(status?.desiredMac, UDEV_MAC);
    assert.equal(status.macSource, 'source');
  });

  it('adopts a device found rewritten at start', async function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt' }, UDEV_MAC);
    assert.equal(r.rewrites[0]?.found, 'start');
    assert.deepEqual(source.calls, [{ device: 'flannel.1', mac: UDEV_MAC }]);
    assert.deepEqual(r.ports.macWrites(), []);
    await source.settle();
    assert.equal(r.adopted[0]?.previous, PUBLISHED);
    assert.equal(r.adopted[0].mac, UDEV_MAC);
  });

  it('still reverts MACs that do not come from the source: explicit --mac and the first-seen pin', function () {
    const explicit = new AdoptingSource();
    explicit.table.set('flannel.1', PUBLISHED);
    const withMac = rig({
      source: explicit,
      strategy: 'adopt',
      mac: { 'flannel.1': EXPLICIT_MAC },
    });
    assert.deepEqual(
      withMac.ports.macWrites().map((call) => call.mac),
      [EXPLICIT_MAC],
      'explicit wins over the source, and is reverted to',
    );
    assert.deepEqual(explicit.calls, []);

    const silent = new AdoptingSource(); // no answer for flannel.1: the pin is used
    const pinned = rig({ source: silent, strategy: 'adopt' });
    pinned.ports.clear();
    rewrite(pinned, FOREIGN_MAC);
    assert.deepEqual(
      pinned.ports.macWrites().map((call) => call.mac),
      [PUBLISHED],
    );
    assert.equal(pinned.restored.length, 1);
    assert.deepEqual(silent.calls, []);
  });

  it('reports a failed store as an error; the source then says so and the device is put back', async function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt' });
    r.ports.clear();
    rewrite(r, FOREIGN_MAC);
    await source.settle(
      Object.assign(new Error('patch node node1: 403 Forbidden'), { code: 'EACCES' }),
    );
    assert.equal(r.errors.length, 1);
    assert.match(r.errors[0]?.message ?? '', /403 Forbidden/);
    assert.deepEqual(r.adopted, []);
    assert.deepEqual(r.ports.macWrites(), [], 'nothing reverted by the guard on its own');

    // The source tells its subscribers (it answers the stored value again): back to it.
    source.notify();
    assert.deepEqual(
      r.ports.macWrites().map((call) => call.mac),
      [PUBLISHED],
    );
    assert.equal(r.restored.length, 1);
    assert.equal(r.guard.counters.rewrites, 1, 'the reconciliation is not another rewrite');
  });

  it('adopts under fight control: at once, then after backoff, then not at all once contested', async function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt', fight: { maxRewrites: 4, burst: 2 } });
    const contested: unknown[] = [];
    r.guard.on('contested', (e) => contested.push(e));
    const macs = [
      '02:00:00:00:0f:01',
      '02:00:00:00:0f:02',
      '02:00:00:00:0f:03',
      '02:00:00:00:0f:04',
    ];
    for (const mac of macs.slice(0, 2)) {
      r.clock.advance(10);
      rewrite(r, mac);
      await source.settle();
    }
    assert.equal(source.calls.length, 2, 'the first two at once');
    r.clock.advance(10);
    rewrite(r, macs[2] ?? '');
    assert.equal(source.calls.length, 2, 'the third waits');
    assert.deepEqual(r.clock.pending(), [1000]);
    r.clock.advance(1000);
    assert.deepEqual(source.calls.at(-1), { device: 'flannel.1', mac: macs[2] });
    await source.settle();
    r.clock.advance(10);
    rewrite(r, macs[3] ?? '');
    assert.equal(contested.length, 1);
    assert.equal(source.calls.length, 3, 'contested: nothing stored');
    assert.equal(source.pending, 0);
    assert.equal(r.adopted.length, 3);
    assert.deepEqual(r.ports.macWrites(), []);
  });

  // Found by the sequences: "adopt; start; 8 rewrites back to back; the annotation's VtepMAC
  // changes" left the device at the last rewrite's MAC and stored it over flanneld's new one.
  it('a source change while contested is newer than the device: on resume the device follows it', async function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt', fight: { maxRewrites: 2, burst: 2, quietMs: 300 } });
    const contested: unknown[] = [];
    r.guard.on('contested', (e) => contested.push(e));
    r.clock.advance(10);
    rewrite(r, '02:00:00:00:0f:01');
    await source.settle();
    r.clock.advance(10);
    rewrite(r, '02:00:00:00:0f:02');
    assert.equal(contested.length, 1);
    const republished = '02:00:00:00:0f:99';
    source.table.set('flannel.1', republished); // flanneld publishes a new MAC meanwhile
    for (const listener of source.listeners) listener();
    r.monitor.pump();
    assert.deepEqual(r.ports.macWrites(), [], 'held back while contested');
    r.clock.advance(300);
    r.monitor.pump();
    assert.equal(source.calls.length, 1, 'the contest-time MAC is not stored over the new one');
    assert.equal(r.kernel.link(r.ifindex).mac, republished);
    assert.deepEqual(arpEntries(r), [`10.244.1.0 ${REMOTE_A}`, `10.244.2.0 ${REMOTE_B}`]);
  });

  it("the echo of the guard's own adoption while contested is not newer: on resume the device keeps its MAC", async function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt', fight: { maxRewrites: 3, burst: 2, quietMs: 300 } });
    const contested: unknown[] = [];
    r.guard.on('contested', (e) => contested.push(e));
    r.clock.advance(10);
    rewrite(r, '02:00:00:00:0f:01');
    r.clock.advance(10);
    rewrite(r, '02:00:00:00:0f:02');
    r.clock.advance(10);
    rewrite(r, '02:00:00:00:0f:03');
    assert.equal(contested.length, 1);
    // The annotation patches land while the contest holds the drift back; each one's watch
    // event tells the guard the source changed (to the guard's own adoptions).
    while (source.pending > 0) {
      await source.settle();
      for (const listener of source.listeners) listener();
      r.monitor.pump();
    }
    r.clock.advance(300);
    r.monitor.pump();
    await source.settle();
    assert.deepEqual(
      source.calls.map((c) => c.mac),
      ['02:00:00:00:0f:01', '02:00:00:00:0f:02', '02:00:00:00:0f:03'],
      'the MAC the device was left at is the one stored on resume',
    );
    assert.deepEqual(r.ports.macWrites(), [], 'the device is never written back to an older MAC');
    assert.equal(r.kernel.link(r.ifindex).mac, '02:00:00:00:0f:03');
    assert.deepEqual(arpEntries(r), [`10.244.1.0 ${REMOTE_A}`, `10.244.2.0 ${REMOTE_B}`]);
  });

  it('never stores in a dry run', function () {
    const source = new AdoptingSource();
    source.table.set('flannel.1', PUBLISHED);
    const r = rig({ source, strategy: 'adopt', dryRun: true });
    rewrite(r, FOREIGN_MAC);
    assert.equal(r.rewrites.length, 1);
    assert.equal(r.rewrites[0]?.dryRun, true);
    assert.deepEqual(source.calls, []);
    assert.deepEqual(r.ports.writes(), []);
  });

  it("refuses 'adopt' without a source that can store a MAC", function () {
    const readOnly: DesiredMacSource = { name: 'explicit', desiredMac: () => undefined };
    assert.throws(
      () => rig({ strategy: 'adopt' }),
      (error: SystemError) => error.code === 'EINVAL' && /needs a source/.test(error.message),
    );
    assert.throws(() => rig({ strategy: 'adopt', source: readOnly }), /needs a source/);
  });
});
