/**
 * FlannelGuard's policy on scripted event sequences: no kernel, no
 * privileges. A FakeKernel produces the notifications a real one would (in
 * kernel order), a ScriptedMonitor delivers them with LinkMonitor's event
 * logic, FakePorts records every system call and applies the guard's writes to
 * the FakeKernel (their echoes arrive only when the test pumps them), and a
 * FakeClock runs the backoff timers only when advanced.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { SystemError } from '../lib/core/errors';
import { DEFAULT_FIGHT_POLICY } from '../lib/guard/fight-tracker';
import {
  FlannelGuard,
  type ContestedEvent,
  type DeferredEvent,
  type FlannelGuardOptions,
  type GuardReadyEvent,
  type OffloadEvent,
  type ReleasedEvent,
  type RestoredEvent,
  type ResumedEvent,
  type RewriteEvent,
} from '../lib/guard';
import { DEFAULT_INTERFACES, DEFAULT_OFFLOAD } from '../lib/core/defaults';
import { guardConfig } from '../lib/guard/config';
import type { OverrunEvent, ResyncEvent } from '../lib/core/monitor-events';
import type { DesiredMacSource } from '../lib/guard/sources';
import { udevPersistentMac } from '../lib/udev/persistent-mac';
import { UdevView } from '../lib/udev/view';
import {
  FakeClock,
  FakeKernel,
  FakePorts,
  GUARD_PORTID,
  IP_PORTID,
  ScriptedMonitor,
  enodev,
  eopnotsupp,
  permanentArp,
  permanentNdp,
  reachableArp,
  type EmittedEvent,
} from './support/scripted-monitor';
import {
  addFlannelDevice,
  addPeerEntries,
  scriptedGuard,
  type ScriptedGuard,
} from './support/scripted-guard';

// The fake host's machine-id, under a root with no .link files (udev's persistent value is
// computed all the same: the proof does not need the file).
const MACHINE_ID = '4f1b7c3a9e2d45c08b6a1f0e3d2c5b7a';
const udevRoot = mkdtempSync(join(tmpdir(), 'fg-udev-root-'));
mkdirSync(join(udevRoot, 'etc'));
writeFileSync(join(udevRoot, 'etc', 'machine-id'), `${MACHINE_ID}\n`);
const udev = UdevView.open(udevRoot);
after(() => rmSync(udevRoot, { recursive: true, force: true }));

// flannel publishes FLANNEL_MAC; systemd-udevd (MACAddressPolicy=persistent) rewrites it to UDEV_MAC.
const FLANNEL_MAC = '5e:89:db:49:c6:a4';
const UDEV_MAC = udevPersistentMac(MACHINE_ID, 'flannel.1');
const FLANNEL6_MAC = '5e:89:db:49:c6:a6';
const FOREIGN_MAC = '02:00:00:00:0f:01';
const EXPLICIT_MAC = '02:00:00:00:e0:01';
const SOURCE_MAC = '02:00:00:00:5c:01';
const ETH_MAC = '52:54:00:12:34:56';
const REMOTE_A = '7a:11:22:33:44:01';
const REMOTE_B = '7a:11:22:33:44:02';
const CSUM = 'tx-checksum-ip-generic';

const DAY = 86_400_000;

// --- helpers ------------------------------------------------------------------------

function nth<T>(items: readonly T[], index: number): T {
  const item = items[index];
  assert.ok(item !== undefined, `expected an item at ${index}, have ${items.length}`);
  return item;
}

function only<T>(items: readonly T[]): T {
  assert.equal(items.length, 1, `expected exactly one item, have ${items.length}`);
  return nth(items, 0);
}

function last<T>(items: readonly T[]): T {
  return nth(items, items.length - 1);
}

/** Every event the guard emitted, by name, plus their order. */
class GuardLog {
  readonly order: string[] = [];
  readonly ready: GuardReadyEvent[] = [];
  readonly rewrite: RewriteEvent[] = [];
  readonly restored: RestoredEvent[] = [];
  readonly offload: OffloadEvent[] = [];
  readonly contested: ContestedEvent[] = [];
  readonly resumed: ResumedEvent[] = [];
  readonly deferred: DeferredEvent[] = [];
  readonly released: ReleasedEvent[] = [];
  readonly overrun: OverrunEvent[] = [];
  readonly resync: ResyncEvent[] = [];
  readonly error: SystemError[] = [];
  closes = 0;

  constructor(guard: FlannelGuard) {
    guard.on('ready', (e) => this.#push('ready', this.ready, e));
    guard.on('rewrite', (e) => this.#push('rewrite', this.rewrite, e));
    guard.on('restored', (e) => this.#push('restored', this.restored, e));
    guard.on('offload', (e) => this.#push('offload', this.offload, e));
    guard.on('contested', (e) => this.#push('contested', this.contested, e));
    guard.on('resumed', (e) => this.#push('resumed', this.resumed, e));
    guard.on('deferred', (e) => this.#push('deferred', this.deferred, e));
    guard.on('released', (e) => this.#push('released', this.released, e));
    guard.on('overrun', (e) => this.#push('overrun', this.overrun, e));
    guard.on('resync', (e) => this.#push('resync', this.resync, e));
    guard.on('error', (e) => this.#push('error', this.error, e));
    guard.on('close', () => {
      this.order.push('close');
      this.closes += 1;
    });
  }

  #push<T>(name: string, list: T[], event: T): void {
    this.order.push(name);
    list.push(event);
  }
}

interface Rig extends ScriptedGuard {
  log: GuardLog;
}

/** The two peers flanneld programs on flannel.1 in these tests (ARP and FDB entries). */
const FLANNEL_PEERS = [
  { vtep: '10.244.1.0', mac: REMOTE_A, underlay: '192.0.2.11' },
  { vtep: '10.244.2.0', mac: REMOTE_B, underlay: '192.0.2.12' },
];

const open: FlannelGuard[] = [];

/**
 * A guard over a fake namespace that holds `lo` plus whatever `prepare` adds;
 * the monitor's initial dump is loaded and `ready` emitted before this returns.
 */
function rig(
  options: FlannelGuardOptions = {},
  prepare: (kernel: FakeKernel) => void = () => {},
  random: () => number = () => 0.5,
): Rig {
  // The corrections' timers are what these tests count: the counters' poll would be among them
  // (it has its own tests in offload-auto.test.ts).
  const scripted = scriptedGuard(
    { checksumErrorsPollMs: 0, ...options },
    { prepare, random, udev },
  );
  open.push(scripted.guard);
  const log = new GuardLog(scripted.guard);
  scripted.monitor.start();
  return { ...scripted, log };
}

/**
 * flannel.1 present at start, pinned at FLANNEL_MAC, with two permanent ARP
 * entries and their two FDB entries, checksum offload already off, and the
 * start-up settled (no calls recorded yet).
 */
function rigWithDevice(
  options: FlannelGuardOptions = {},
  random: () => number = () => 0.5,
): Rig & { ifindex: number } {
  let ifindex = 0;
  const r = rig(
    options,
    (kernel) => {
      ifindex = addFlannelDevice(kernel, FLANNEL_MAC, FLANNEL_PEERS, {
        feature: CSUM,
        active: false,
      });
    },
    random,
  );
  r.monitor.pump();
  r.ports.clear();
  return { ...r, ifindex };
}

/** Another writer sets the MAC, and the notifications (NEWLINK + flush) reach the guard. */
function rewrite(r: Rig, ifindex: number, mac: string): void {
  r.kernel.setMac(ifindex, mac);
  r.monitor.pump();
}

/** Rewrites the MAC maxRewrites times, `stepMs` apart: the default policy's contest. */
function contestMac(r: Rig & { ifindex: number }, stepMs: number): void {
  for (let n = 1; n <= DEFAULT_FIGHT_POLICY.maxRewrites; n += 1) {
    r.clock.advance(stepMs);
    rewrite(r, r.ifindex, `02:00:00:00:0f:0${n}`);
  }
}

/**
 * Rewrites (alternating two foreign MACs, 10 ms apart) until the guard defers
 * its correction instead of making it at once; returns how many rewrites that took.
 */
function rewriteUntilDeferred(r: Rig, ifindex: number): number {
  for (let i = 1; i <= 10; i += 1) {
    r.clock.advance(10);
    rewrite(r, ifindex, i % 2 === 0 ? UDEV_MAC : FOREIGN_MAC);
    if (r.clock.pending().length > 0) return i;
  }
  return assert.fail('the guard never deferred a correction');
}

/** The backoff delay of the n-th rewrite within the window (0: corrected at once), jitter at 0. */
function backoffOf(n: number): number {
  const { burst, backoffInitialMs, backoffMaxMs } = DEFAULT_FIGHT_POLICY;
  if (n <= burst) return 0;
  return Math.min(backoffInitialMs * 2 ** (n - burst - 1), backoffMaxMs);
}

function destinations(r: Rig): (string | null)[] {
  return r.ports
    .neighbourWrites()
    .map((call) => call.entry.destination)
    .sort();
}

function lastEmitted<Name extends EmittedEvent['type']>(
  monitor: ScriptedMonitor,
  type: Name,
): Extract<EmittedEvent, { type: Name }> {
  const found = [...monitor.emitted]
    .reverse()
    .find((event): event is Extract<EmittedEvent, { type: Name }> => event.type === type);
  assert.ok(found, `the monitor emitted no ${type}`);
  return found;
}

function removalCauses(monitor: ScriptedMonitor): string[] {
  return monitor.emitted.flatMap((event) =>
    event.type === 'neighbourRemoved'
      ? [`${event.args[0].neighbour.destination ?? ''}:${event.args[0].cause}`]
      : [],
  );
}

class TestSource implements DesiredMacSource {
  readonly name = 'kubernetes';
  readonly table = new Map<string, string>();
  readonly listeners = new Set<() => void>();

  desiredMac(device: string): string | undefined {
    return this.table.get(device);
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  set(device: string, mac: string): void {
    this.table.set(device, mac);
    for (const listener of this.listeners) listener();
  }
}

// --- tests ----------------------------------------------------------------------------

describe('FlannelGuard policy (scripted monitor, fake ports and clock)', function () {
  afterEach(function () {
    for (const guard of open.splice(0)) guard.close();
  });

  describe('adoption', function () {
    it('adopts devices present at start, pinned at their current MAC; default globs flannel.* and flannel-v6.*', async function () {
      const r = rig({}, (kernel) => {
        kernel.addLink({ name: 'eth0', mac: ETH_MAC, kind: '' });
        kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
        kernel.addLink({ name: 'flannel-v6.1', mac: FLANNEL6_MAC });
        kernel.addLink({ name: 'flannelx', mac: '02:00:00:00:00:0a' });
        kernel.addLink({ name: 'cni0', mac: '02:00:00:00:00:0b', kind: 'bridge' });
        // Matches flannel.* but is a loopback device: never managed (S7).
        kernel.addLink({ name: 'flannel.lo', mac: '02:00:00:00:00:0c', loopback: true });
      });
      await r.guard.ready();
      r.monitor.pump(); // the echoes of the start-up offload writes

      const ready = only(r.log.ready);
      assert.equal(ready.dryRun, false);
      assert.equal(ready.netns, null);
      const devices = [...ready.devices].sort((a, b) => a.name.localeCompare(b.name));
      assert.deepEqual(
        devices.map((d) => [d.name, d.mac, d.desiredMac, d.macSource, d.contested]),
        [
          ['flannel-v6.1', FLANNEL6_MAC, FLANNEL6_MAC, 'pinned-at-start', false],
          ['flannel.1', FLANNEL_MAC, FLANNEL_MAC, 'pinned-at-start', false],
        ],
      );
      // `ready` first, then the devices are brought to policy: the only writes are the offloads.
      assert.deepEqual(r.log.order, ['ready', 'offload', 'offload']);
      assert.deepEqual(
        r.ports.writes().map((call) => (call.method === 'setFeatures' ? call.name : call.method)),
        ['flannel.1', 'flannel-v6.1'],
      );
      assert.equal(r.ports.macWrites().length, 0);

      // Rewrites of unmanaged devices are none of the guard's business.
      r.ports.clear();
      assert.deepEqual(r.kernel.queue, []);
      for (const link of [...r.kernel.links.values()]) {
        if (!['flannel.1', 'flannel-v6.1'].includes(link.name)) {
          rewrite(r, link.ifindex, FOREIGN_MAC);
        }
      }
      assert.deepEqual(r.ports.calls, []);
      assert.deepEqual(r.log.rewrite, []);
      assert.deepEqual(r.log.error, []);
    });

    it('manages only the configured globs when `interfaces` is given', async function () {
      const r = rig({ interfaces: ['vxlan-*'] }, (kernel) => {
        kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
        kernel.addLink({ name: 'vxlan-a', mac: FLANNEL6_MAC });
      });
      await r.guard.ready();
      assert.deepEqual(
        r.guard.status().map((d) => d.name),
        ['vxlan-a'],
      );
      assert.deepEqual(
        r.ports.featureWrites().map((call) => call.name),
        ['vxlan-a'],
      );
    });

    it('pins a created device at its first MAC and applies the offload policy when it is on', function () {
      const r = rig();
      const { ifindex } = r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      assert.equal(r.kernel.feature(ifindex, CSUM), true);
      r.monitor.pumpOne(); // the RTM_NEWLINK announcing the new device

      // Read, check the write target, write exactly the policy.
      assert.deepEqual(r.ports.methods(), ['getFeatures', 'getLink', 'setFeatures']);
      const status = only(r.guard.status());
      assert.equal(status.macSource, 'first-seen');
      assert.equal(status.desiredMac, FLANNEL_MAC);
      assert.deepEqual(r.ports.featureWrites(), [
        { method: 'setFeatures', name: 'flannel.1', wanted: { [CSUM]: false } },
      ]);
      assert.equal(r.kernel.feature(ifindex, CSUM), false);
      const offload = only(r.log.offload);
      assert.equal(offload.reason, 'created');
      assert.equal(offload.written, true);
      assert.equal(offload.dryRun, false);
      assert.deepEqual(offload.active, { [CSUM]: false });
      assert.deepEqual(
        offload.sideEffects.map((s) => s.name),
        ['tx-tcp-segmentation', 'tx-tcp6-segmentation'],
      );
      assert.deepEqual(status.offloads, { [CSUM]: false });
      assert.equal(r.guard.counters.offloadApplications, 1);
      assert.equal(r.guard.counters.writes, 1);

      // Its own SFEATURES echo (IFLA_EVENT_FEATURES) is only re-read, never re-applied (E9).
      r.ports.clear();
      r.monitor.pump();
      assert.deepEqual(r.ports.methods(), ['getFeatures']);
      assert.equal(r.log.offload.length, 1);
    });

    it('writes no feature when the created device already has the offload off (F4, E10)', function () {
      const r = rig();
      const { ifindex } = r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      r.kernel.setFeature(ifindex, CSUM, false); // e.g. flannel's own `ethtool -K`
      r.monitor.pump();

      assert.equal(only(r.guard.status()).macSource, 'first-seen');
      assert.deepEqual(r.ports.writes(), []);
      assert.deepEqual(r.log.offload, []);
      assert.equal(r.guard.counters.writes, 0);
      assert.equal(r.guard.counters.offloadChecks, 2); // creation + the features event
      assert.deepEqual(only(r.guard.status()).offloads, { [CSUM]: false });
    });

    it('leaves offloads alone with offload: none', function () {
      const r = rig({ offload: 'none' });
      r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      r.monitor.pump();
      assert.equal(r.guard.status().length, 1);
      assert.deepEqual(r.ports.writes(), []);
      assert.ok(!r.ports.methods().includes('getFeatures'));
    });
  });

  describe('MAC rewrites', function () {
    it('corrects a udev rewrite 3 ms after creation: MAC, then the neighbours it had before the flush, then verify', function () {
      const r = rig();
      const { ifindex } = r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      addPeerEntries(r.kernel, ifindex, FLANNEL_PEERS);
      r.monitor.pump();
      assert.equal(only(r.guard.status()).neighbours, 2); // ARP entries only, no FDB
      const before = r.guard.counters;

      r.clock.advance(3);
      r.kernel.setMac(ifindex, UDEV_MAC); // NEWLINK, then DELNEIGH x2 (flush)
      assert.deepEqual(
        r.kernel.queue.map((m) => m.kind),
        ['link', 'delneigh', 'delneigh'],
      );
      r.ports.clear();
      r.monitor.pumpOne(); // only the NEWLINK: the correction runs in its turn

      const event = only(r.log.rewrite);
      assert.deepEqual(
        { ...event, detail: '' },
        {
          device: 'flannel.1',
          ifindex,
          expected: FLANNEL_MAC,
          mac: UDEV_MAC,
          previous: FLANNEL_MAC,
          writer: 'udev-persistent-policy',
          evidence: {
            persistentMac: UDEV_MAC,
            machineId: join(udevRoot, 'etc', 'machine-id'),
            linkFile: null,
            linkFileFrom: null,
            policy: null,
            macAddress: null,
            mac: UDEV_MAC,
            msSinceCreation: 3,
            addrAssignType: null,
          },
          found: 'event',
          detail: '',
          msSinceCreation: 3,
          dryRun: false,
        },
      );
      assert.match(event.detail, /MACAddressPolicy/);
      assert.deepEqual(r.ports.methods(), [
        'getLink', // write target check (S6/S8)
        'setLinkMac',
        'replaceNeighbour',
        'replaceNeighbour',
        'getLink', // verify
      ]);
      assert.deepEqual(nth(r.ports.calls, 1), {
        method: 'setLinkMac',
        ifindex,
        mac: FLANNEL_MAC,
        name: 'flannel.1',
      });
      assert.deepEqual(
        r.ports
          .neighbourWrites()
          .map((c) => [
            c.entry.family,
            c.entry.destination,
            c.entry.lladdr,
            c.entry.permanent,
            c.name,
          ]),
        [
          ['inet', '10.244.1.0', REMOTE_A, true, 'flannel.1'],
          ['inet', '10.244.2.0', REMOTE_B, true, 'flannel.1'],
        ],
      );
      const restored = only(r.log.restored);
      assert.deepEqual(
        { ...restored, latencyMs: 0 },
        {
          device: 'flannel.1',
          ifindex,
          mac: FLANNEL_MAC,
          neighbours: 2,
          latencyMs: 0,
          deferred: false,
        },
      );
      assert.deepEqual(r.log.order.slice(-2), ['rewrite', 'restored']);
      const after = r.guard.counters;
      assert.equal(after.rewrites - before.rewrites, 1);
      assert.equal(after.corrections - before.corrections, 1);
      assert.equal(after.deferredCorrections - before.deferredCorrections, 0);
      assert.equal(after.neighboursRestored - before.neighboursRestored, 2);
      assert.equal(after.writes - before.writes, 3);

      // The flush DELNEIGHs of udev's change arrive after the correction: they must not shrink the table.
      r.ports.clear();
      r.monitor.pump();
      assert.deepEqual(removalCauses(r.monitor), ['10.244.1.0:flush', '10.244.2.0:flush']);
      assert.equal(only(r.guard.status()).neighbours, 2);
      assert.deepEqual(r.ports.writes(), []);
      assert.equal(r.kernel.link(ifindex).mac, FLANNEL_MAC);
      assert.deepEqual(
        r.kernel
          .neighboursOf(ifindex)
          .filter((n) => n.family === 'inet')
          .map((n) => n.destination)
          .sort(),
        ['10.244.1.0', '10.244.2.0'],
      );
    });

    it("names writers by udev's own value, never by timing: udev's persistent MAC is udev's however late, any other is another writer's", function () {
      const r = rig({}, (kernel) => {
        kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      });
      const found = r.guard.status()[0];
      assert.ok(found);
      const created = r.kernel.addLink({ name: 'flannel.2', mac: FLANNEL6_MAC });
      const late = r.kernel.addLink({ name: 'flannel.3', mac: '5e:89:db:49:c6:a8' });
      r.monitor.pump();

      const udev2 = udevPersistentMac(MACHINE_ID, 'flannel.2');
      r.clock.advance(2);
      rewrite(r, created.ifindex, udev2); // udev, 2 ms after the add
      rewrite(r, created.ifindex, FOREIGN_MAC); // quick, but not udev's value
      rewrite(r, found.ifindex, FOREIGN_MAC); // no creation seen
      r.clock.advance(5_000);
      rewrite(r, late.ifindex, udevPersistentMac(MACHINE_ID, 'flannel.3')); // udev's, however late
      rewrite(r, late.ifindex, udev2); // another device's udev value is not udev's for this one
      assert.deepEqual(
        r.log.rewrite.map((e) => [e.device, e.writer, e.found, e.msSinceCreation]),
        [
          ['flannel.2', 'udev-persistent-policy', 'event', 2],
          ['flannel.2', 'another-writer', 'event', 2],
          ['flannel.1', 'another-writer', 'event', null],
          ['flannel.3', 'udev-persistent-policy', 'event', 5_002],
          ['flannel.3', 'another-writer', 'event', 5_002],
        ],
      );
      const [proven] = r.log.rewrite;
      assert.equal(proven?.evidence.persistentMac, udev2);
      assert.equal(proven?.evidence.machineId, join(udevRoot, 'etc', 'machine-id'));
      assert.match(proven?.detail ?? '', /MACAddressPolicy=persistent.*siphash24/);
      assert.match(last(r.log.rewrite).detail, /another writer.*not udev's persistent value/);
      assert.deepEqual(
        r.ports.macWrites().map((c) => [c.name, c.mac]),
        [
          ['flannel.2', FLANNEL6_MAC],
          ['flannel.2', FLANNEL6_MAC],
          ['flannel.1', FLANNEL_MAC],
          ['flannel.3', '5e:89:db:49:c6:a8'],
          ['flannel.3', '5e:89:db:49:c6:a8'],
        ],
      );
    });

    it('recognises the echo of its own write by value: not a rewrite, no second write, no loop (F3)', function () {
      const r = rigWithDevice();
      rewrite(r, r.ifindex, FOREIGN_MAC); // delivers the rewrite, its flush, then the guard's echo
      assert.equal(r.ports.macWrites().length, 1);
      const echo = lastEmitted(r.monitor, 'linkChanged');
      assert.equal(echo.args[0].previous.mac, FOREIGN_MAC);
      assert.equal(echo.args[0].link.mac, FLANNEL_MAC);
      const counters = r.guard.counters;
      assert.equal(counters.rewrites, 1);
      assert.equal(counters.echoes, 1);
      assert.equal(r.log.rewrite.length, 1);
      assert.equal(r.kernel.queue.length, 0);

      // The same event again changes nothing.
      r.ports.clear();
      r.monitor.emit('linkChanged', ...echo.args);
      // And the same state re-announced is no event at all.
      r.monitor.deliver({
        kind: 'link',
        link: r.kernel.link(r.ifindex),
        created: false,
        kernelEvent: null,
      });
      r.clock.advance(DAY);
      assert.deepEqual(r.ports.writes(), []);
      assert.equal(r.guard.counters.rewrites, 1);
      assert.equal(r.log.rewrite.length, 1);
      assert.equal(r.log.restored.length, 1);
      assert.equal(r.kernel.queue.length, 0);
    });

    it('ignores MTU, operstate and feature re-announcements with the MAC unchanged (N13)', function () {
      const r = rigWithDevice();
      r.kernel.setMtu(r.ifindex, 1400);
      r.kernel.setOperstate(r.ifindex, 'lowerlayerdown');
      r.kernel.setFeature(r.ifindex, 'rx-checksum', false); // IFLA_EVENT_FEATURES, policy feature unchanged
      const delivered = r.monitor.pump();
      assert.equal(delivered, 3);
      assert.equal(
        r.monitor.emitted.filter((e) => e.type === 'linkChanged').length,
        3,
        'each change reached the guard as linkChanged',
      );
      assert.deepEqual(r.ports.writes(), []);
      assert.deepEqual(r.ports.methods(), ['getFeatures']); // the features event is re-read, nothing else
      assert.equal(r.guard.counters.rewrites, 0);
      assert.deepEqual(r.log.rewrite, []);
      assert.deepEqual(r.log.offload, []);
    });

    it('forgets entries deleted on purpose, never restores FDB or non-permanent entries, tracks new permanent ones', function () {
      const r = rigWithDevice();
      r.kernel.replaceNeighbour(reachableArp(r.ifindex, '10.244.9.9', REMOTE_B)); // learnt, not permanent
      r.kernel.replaceNeighbour(permanentArp(r.ifindex, '10.244.3.0', REMOTE_A)); // a node joined
      r.kernel.deleteNeighbour(permanentArp(r.ifindex, '10.244.2.0', REMOTE_B), IP_PORTID); // `ip neigh del`
      r.monitor.pump();
      assert.deepEqual(removalCauses(r.monitor), ['10.244.2.0:deleted']);
      assert.equal(only(r.guard.status()).neighbours, 2);

      rewrite(r, r.ifindex, FOREIGN_MAC);
      assert.deepEqual(destinations(r), ['10.244.1.0', '10.244.3.0']);
      assert.ok(
        r.ports.neighbourWrites().every((c) => c.entry.family === 'inet' && c.entry.permanent),
      );
      assert.equal(nth(r.log.restored, 0).neighbours, 2);
    });

    it('keeps and restores permanent NDP entries on flannel-v6 devices', function () {
      const r = rig({}, (kernel) => {
        const { ifindex } = kernel.addLink({ name: 'flannel-v6.1', mac: FLANNEL6_MAC });
        kernel.replaceNeighbour(permanentNdp(ifindex, 'fd00:10:244:1::', REMOTE_A));
      });
      const device = only(r.guard.status());
      assert.equal(device.neighbours, 1);
      r.monitor.pump();
      r.ports.clear();
      rewrite(r, device.ifindex, FOREIGN_MAC);
      assert.deepEqual(
        r.ports.neighbourWrites().map((c) => [c.entry.family, c.entry.destination]),
        [['inet6', 'fd00:10:244:1::']],
      );
    });

    it('re-installs the permanent entries a down flushed when the device comes back up', function () {
      const r = rigWithDevice();
      r.kernel.setUp(r.ifindex, false);
      r.monitor.pump();
      assert.deepEqual(removalCauses(r.monitor), ['10.244.1.0:flush', '10.244.2.0:flush']);
      assert.equal(only(r.guard.status()).neighbours, 2);
      assert.deepEqual(r.ports.writes(), []);

      r.kernel.setUp(r.ifindex, true);
      r.monitor.pump();
      assert.deepEqual(destinations(r), ['10.244.1.0', '10.244.2.0']);
      assert.equal(r.ports.macWrites().length, 0);
      assert.deepEqual(
        r.kernel
          .neighboursOf(r.ifindex)
          .filter((n) => n.family === 'inet')
          .map((n) => n.destination)
          .sort(),
        ['10.244.1.0', '10.244.2.0'],
      );
    });
  });

  describe('device identity (N14, N15, S6, S8)', function () {
    it('releases a device renamed out of the glob and never touches it again, pending corrections included', function () {
      const r = rigWithDevice();
      const rewrites = rewriteUntilDeferred(r, r.ifindex);
      assert.equal(r.clock.pending().length, 1);

      r.kernel.rename(r.ifindex, 'vxlan0');
      r.monitor.pump();
      assert.deepEqual(only(r.log.released), {
        device: 'flannel.1',
        ifindex: r.ifindex,
        reason: 'renamed',
      });
      assert.deepEqual(r.guard.status(), []);
      assert.deepEqual(r.clock.pending(), []);

      r.ports.clear();
      r.clock.advance(DAY);
      rewrite(r, r.ifindex, FLANNEL6_MAC);
      r.kernel.setFeature(r.ifindex, CSUM, true);
      r.kernel.setUp(r.ifindex, false);
      r.kernel.setUp(r.ifindex, true);
      r.monitor.pump();
      assert.deepEqual(r.ports.calls, []);
      assert.equal(r.log.rewrite.length, rewrites);
      assert.equal(r.log.released.length, 1);
    });

    it('adopts a device renamed into the glob, pinned at its current MAC, and checks its offloads', function () {
      let ifindex = 0;
      const r = rig({}, (kernel) => {
        ifindex = kernel.addLink({ name: 'vxlan0', mac: FOREIGN_MAC }).ifindex;
      });
      assert.deepEqual(r.guard.status(), []);
      r.kernel.rename(ifindex, 'flannel.1');
      r.monitor.pumpOne();

      const status = only(r.guard.status());
      assert.equal(status.macSource, 'pinned-at-start');
      assert.equal(status.desiredMac, FOREIGN_MAC);
      assert.equal(only(r.log.offload).reason, 'managed');
      assert.deepEqual(r.ports.featureWrites(), [
        { method: 'setFeatures', name: 'flannel.1', wanted: { [CSUM]: false } },
      ]);
      assert.equal(r.ports.macWrites().length, 0);

      r.monitor.pump();
      rewrite(r, ifindex, UDEV_MAC);
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        [FOREIGN_MAC],
      );
    });

    it('treats a new device reusing a removed ifindex as new: fresh first-seen pin, empty table, fresh fight state (N15)', function () {
      const r = rig();
      const { ifindex } = r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      addPeerEntries(r.kernel, ifindex, FLANNEL_PEERS);
      r.monitor.pump();
      r.clock.advance(3);
      rewrite(r, ifindex, UDEV_MAC); // one rewrite in the old device's window

      r.kernel.removeLink(ifindex);
      r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL6_MAC, ifindex });
      r.monitor.pump();
      assert.deepEqual(only(r.log.released), { device: 'flannel.1', ifindex, reason: 'removed' });
      const status = only(r.guard.status());
      assert.equal(status.macSource, 'first-seen');
      assert.equal(status.desiredMac, FLANNEL6_MAC);
      assert.equal(status.neighbours, 0);

      r.ports.clear();
      r.clock.advance(5);
      r.kernel.setMac(ifindex, UDEV_MAC);
      r.monitor.pumpOne();
      const event = last(r.log.rewrite);
      assert.equal(event.expected, FLANNEL6_MAC);
      assert.equal(event.writer, 'udev-persistent-policy');
      assert.equal(event.msSinceCreation, 5);
      // Corrected at once (no backoff inherited from the old device), with nothing of its table.
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        [FLANNEL6_MAC],
      );
      assert.deepEqual(r.ports.neighbourWrites(), []);
      assert.equal(last(r.log.restored).neighbours, 0);
    });

    it('writes nothing and reports EACCES when the device was renamed between the event and the write (S6/S8)', function () {
      const r = rigWithDevice();
      r.kernel.setMac(r.ifindex, FOREIGN_MAC);
      r.kernel.rename(r.ifindex, 'eth9'); // its NEWLINK is still queued behind the rewrite
      r.monitor.pumpOne();

      assert.equal(r.log.rewrite.length, 1);
      assert.deepEqual(r.ports.methods(), ['getLink']);
      assert.deepEqual(r.ports.writes(), []);
      const error = only(r.log.error);
      assert.equal(error.code, 'EACCES');
      assert.equal(error.errno, -13);
      assert.equal(error.ifindex, r.ifindex);
      assert.equal(error.interface, 'eth9');
      assert.match(error.message, /not managed/);
      assert.equal(r.guard.counters.errors, 1);

      r.monitor.pump();
      assert.deepEqual(only(r.log.released).reason, 'renamed');
      assert.deepEqual(r.ports.writes(), []);
      assert.equal(r.kernel.link(r.ifindex).mac, FOREIGN_MAC);
    });

    it('releases quietly on ENODEV when the device vanishes mid-correction', function () {
      for (const failing of ['setLinkMac', 'replaceNeighbour'] as const) {
        const r = rigWithDevice();
        // The device is deleted right when the guard writes to it.
        r.ports.before(failing, () => r.kernel.removeLink(r.ifindex));
        if (failing === 'replaceNeighbour') r.ports.fail('replaceNeighbour', enodev('flannel.1'));
        r.kernel.setMac(r.ifindex, FOREIGN_MAC);
        r.monitor.pumpOne(); // the rewrite; its correction meets ENODEV

        assert.deepEqual(r.log.error, [], failing);
        assert.equal(r.guard.counters.errors, 0, failing);
        assert.deepEqual(r.log.restored, [], failing);
        assert.equal(r.ports.macWrites().length, 1, failing);
        assert.equal(r.guard.counters.corrections, 0, failing);
        assert.deepEqual(r.clock.pending(), [], failing);
        // Released once, by the DELLINK that follows, not re-adopted by the events before it (B6).
        r.monitor.pump();
        assert.deepEqual(
          only(r.log.released),
          { device: 'flannel.1', ifindex: r.ifindex, reason: 'removed' },
          failing,
        );
        assert.deepEqual(r.guard.status(), [], failing);
      }
    });

    it('has nothing left of a device whose DELLINK follows the ENODEV', function () {
      const r = rigWithDevice();
      r.ports.before('setLinkMac', () => r.kernel.removeLink(r.ifindex));
      rewrite(r, r.ifindex, FOREIGN_MAC); // the rewrite, then the removal's down, flush and DELLINK
      assert.deepEqual(r.log.error, []);
      assert.deepEqual(r.guard.status(), []);
      assert.equal(last(r.log.released).reason, 'removed');
      assert.equal(r.ports.macWrites().length, 1);
      assert.deepEqual(r.ports.neighbourWrites(), []);
      assert.deepEqual(r.clock.pending(), []);
    });
  });

  describe('desired MAC sources', function () {
    it('corrects a device found at start with another MAC than the explicit one (found-at-start)', function () {
      const r = rig({ mac: { 'flannel.1': EXPLICIT_MAC.toUpperCase() } }, (kernel) => {
        kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      });
      const event = only(r.log.rewrite);
      assert.equal(event.found, 'start');
      assert.equal(event.writer, 'another-writer');
      assert.equal(event.expected, EXPLICIT_MAC);
      assert.equal(event.mac, FLANNEL_MAC);
      assert.match(event.detail, /began managing/);
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        [EXPLICIT_MAC],
      );
      const status = only(r.guard.status());
      assert.equal(status.macSource, 'explicit');
      assert.equal(status.desiredMac, EXPLICIT_MAC);
      assert.equal(status.mac, FLANNEL_MAC); // the monitor's view until the echo arrives
      r.monitor.pump();
      assert.equal(only(r.guard.status()).mac, EXPLICIT_MAC);
      assert.equal(r.ports.macWrites().length, 1);
    });

    it('lets the explicit MAC win over first-seen on a created device', function () {
      const r = rig({ mac: { 'flannel.1': EXPLICIT_MAC } });
      const { ifindex } = r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      r.monitor.pump();
      assert.equal(only(r.guard.status()).macSource, 'explicit');
      assert.equal(r.kernel.link(ifindex).mac, EXPLICIT_MAC);

      r.clock.advance(3);
      rewrite(r, ifindex, UDEV_MAC);
      r.clock.advance(DAY);
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        [EXPLICIT_MAC, EXPLICIT_MAC],
      );
      assert.equal(r.kernel.link(ifindex).mac, EXPLICIT_MAC);
    });

    it('follows a subscribed source: a changed answer is corrected without counting a rewrite', function () {
      const source = new TestSource();
      source.table.set('flannel.1', FLANNEL_MAC);
      const r = rigWithDevice({ source });
      const status = only(r.guard.status());
      assert.equal(status.macSource, 'source');
      assert.equal(status.sourceName, 'kubernetes');
      assert.deepEqual(r.log.rewrite, []);
      assert.equal(source.listeners.size, 1);

      source.set('flannel.1', SOURCE_MAC);
      assert.deepEqual(r.ports.methods().slice(0, 5), [
        'getLink',
        'setLinkMac',
        'replaceNeighbour',
        'replaceNeighbour',
        'getLink',
      ]);
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        [SOURCE_MAC],
      );
      assert.equal(only(r.log.restored).neighbours, 2);
      assert.deepEqual(r.log.rewrite, []);
      assert.equal(r.guard.counters.rewrites, 0);
      assert.equal(r.guard.counters.corrections, 1);

      // Its echo (and the flush of the entries that were in place) changes nothing more.
      r.monitor.pump();
      assert.deepEqual(removalCauses(r.monitor), ['10.244.1.0:flush', '10.244.2.0:flush']);
      assert.equal(r.ports.macWrites().length, 1);
      assert.equal(r.guard.counters.echoes, 1);
      assert.equal(only(r.guard.status()).neighbours, 2);

      // An unchanged answer writes nothing.
      r.ports.clear();
      source.set('flannel.1', SOURCE_MAC);
      assert.deepEqual(r.ports.writes(), []);

      r.guard.close();
      assert.equal(source.listeners.size, 0);
    });

    it('does not correct rewrites with pin: none and no source', function () {
      const r = rigWithDevice({ pin: 'none' });
      const status = only(r.guard.status());
      assert.equal(status.macSource, 'none');
      assert.equal(status.desiredMac, null);
      rewrite(r, r.ifindex, FOREIGN_MAC);
      r.clock.advance(DAY);
      assert.deepEqual(r.ports.macWrites(), []);
      assert.deepEqual(r.ports.neighbourWrites(), []);
      assert.deepEqual(r.log.restored, []);
      assert.equal(r.kernel.link(r.ifindex).mac, FOREIGN_MAC);
    });
  });

  describe('dry run', function () {
    it('reports rewrites and offload drift but writes nothing of any kind', function () {
      const source = new TestSource();
      const r = rig({ dryRun: true, source }, (kernel) => {
        const { ifindex } = kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
        addPeerEntries(kernel, ifindex, FLANNEL_PEERS);
      });
      const ifindex = only(r.guard.status()).ifindex;
      assert.equal(only(r.log.ready).dryRun, true);
      const offload = only(r.log.offload);
      assert.equal(offload.reason, 'start');
      assert.equal(offload.dryRun, true);
      assert.equal(offload.written, false);
      assert.deepEqual(offload.requested, { [CSUM]: false });
      assert.deepEqual(offload.active, { [CSUM]: true });
      assert.deepEqual(offload.notApplied, [CSUM]);

      r.clock.advance(3);
      rewrite(r, ifindex, UDEV_MAC);
      const event = only(r.log.rewrite);
      assert.equal(event.dryRun, true);
      assert.equal(event.expected, FLANNEL_MAC);
      rewrite(r, ifindex, FOREIGN_MAC);
      r.kernel.setUp(ifindex, false);
      r.kernel.setUp(ifindex, true);
      r.kernel.setFeature(ifindex, 'rx-checksum', false);
      r.kernel.setFeature(ifindex, CSUM, false); // by hand ...
      r.monitor.pump();
      r.kernel.setFeature(ifindex, CSUM, true); // ... and back on: drift, reported only
      r.monitor.pump();
      const drift = last(r.log.offload);
      assert.equal(drift.reason, 'drift');
      assert.equal(drift.written, false);
      assert.deepEqual(drift.notApplied, [CSUM]);
      source.set('flannel.1', SOURCE_MAC);
      r.monitor.overrunAndResync();
      r.clock.advance(DAY);

      assert.deepEqual(r.ports.writes(), []);
      assert.equal(r.guard.counters.writes, 0);
      assert.deepEqual(r.log.restored, []);
      assert.deepEqual(r.log.contested, []);
      assert.ok(r.log.offload.every((e) => !e.written && e.dryRun));
      assert.equal(r.kernel.link(ifindex).mac, FOREIGN_MAC);
      assert.equal(r.kernel.feature(ifindex, CSUM), true);
    });
  });

  describe('fights (F1, F2, F5, F7)', function () {
    it('backs off exponentially, goes contested once after maxRewrites within windowMs, resumes after quietMs', function () {
      const { maxRewrites, windowMs, quietMs } = DEFAULT_FIGHT_POLICY;
      const r = rigWithDevice();
      const foreign = (n: number): string => `02:00:00:00:0f:${n.toString(16).padStart(2, '0')}`;
      const flip = (n: number): void => rewrite(r, r.ifindex, foreign(n));

      // Rewrites 1 .. maxRewrites-1: at once within the burst, then after the
      // doubling, jittered (random 0.5: +-0) delay.
      const start = r.clock.now();
      let writes = 0;
      const delays: number[] = [];
      for (let n = 1; n < maxRewrites; n += 1) {
        r.clock.advance(100);
        flip(n);
        const delay = backoffOf(n);
        if (delay === 0) {
          writes += 1;
          assert.equal(r.ports.macWrites().length, writes, `rewrite ${n} corrected at once`);
          assert.deepEqual(r.clock.pending(), []);
          assert.equal(last(r.log.restored).deferred, false);
          continue;
        }
        delays.push(delay);
        assert.equal(r.ports.macWrites().length, writes, `rewrite ${n} is not corrected at once`);
        assert.deepEqual(last(r.log.deferred), {
          device: 'flannel.1',
          ifindex: r.ifindex,
          what: 'mac',
          delayMs: delay,
        });
        assert.equal(last(r.log.order), 'deferred', 'said at once, after the rewrite');
        assert.deepEqual(r.clock.pending(), [delay]);
        r.clock.advance(delay - 1);
        assert.equal(r.ports.macWrites().length, writes, `still waiting at ${delay - 1} ms`);
        r.clock.advance(1);
        writes += 1;
        assert.equal(r.ports.macWrites().length, writes, `corrected after ${delay} ms`);
        const restored = last(r.log.restored);
        assert.equal(restored.deferred, true);
        // The flush of this rewrite arrived before the correction: nothing lost.
        assert.equal(restored.neighbours, 2);
        r.monitor.pump(); // the echo
      }
      assert.ok(delays.length >= 2, `the scenario needs a backoff phase, got ${delays.length}`);
      assert.deepEqual(
        delays.slice(1).map((d, i) => d / nth(delays, i)),
        Array<number>(delays.length - 1).fill(2),
        'each delay doubles',
      );
      assert.equal(r.guard.counters.deferredCorrections, delays.length);
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        Array<string>(writes).fill(FLANNEL_MAC),
      );

      // maxRewrites: contested. One alert with both MACs and the count, no more writes.
      r.clock.advance(100);
      const contestedAt = r.clock.now();
      assert.ok(contestedAt - start < windowMs, 'all within one window');
      flip(maxRewrites);
      const contested = only(r.log.contested);
      assert.deepEqual(
        { ...contested, detail: '' },
        {
          device: 'flannel.1',
          ifindex: r.ifindex,
          what: 'mac',
          expected: FLANNEL_MAC,
          observed: foreign(maxRewrites),
          rewrites: maxRewrites,
          windowMs,
          quietMs,
          detail: '',
        },
      );
      assert.ok(!('feature' in contested));
      assert.ok(contested.detail.includes(FLANNEL_MAC), contested.detail);
      assert.ok(contested.detail.includes(foreign(maxRewrites)), contested.detail);
      assert.equal(r.ports.macWrites().length, writes);
      assert.equal(only(r.guard.status()).contested, true);
      assert.equal(r.guard.counters.contested, 1);

      // The writer keeps going: observed, never answered, alerted only once.
      r.clock.advance(10_000);
      flip(maxRewrites + 1);
      r.clock.advance(10_000);
      flip(maxRewrites + 2);
      const lastRewriteAt = r.clock.now();
      assert.equal(r.log.rewrite.length, maxRewrites + 2);
      assert.equal(r.log.contested.length, 1);
      assert.equal(r.ports.macWrites().length, writes);

      // F2: the rewrites during the quiet period pushed the resumption back.
      r.clock.advance(contestedAt + quietMs - r.clock.now());
      assert.deepEqual(r.log.resumed, []);
      r.clock.advance(lastRewriteAt + quietMs - 1 - r.clock.now());
      assert.deepEqual(r.log.resumed, []);
      assert.equal(r.ports.macWrites().length, writes);
      r.clock.advance(1);
      assert.deepEqual(only(r.log.resumed), {
        device: 'flannel.1',
        ifindex: r.ifindex,
        what: 'mac',
      });
      assert.equal(r.ports.macWrites().length, writes + 1); // exactly one correction
      assert.equal(last(r.ports.macWrites()).mac, FLANNEL_MAC);
      assert.equal(only(r.guard.status()).contested, false);
      r.monitor.pump();
      r.clock.advance(DAY);
      assert.equal(r.ports.macWrites().length, writes + 1);

      // The backoff was reset: the next rewrite is corrected at once again.
      flip(maxRewrites + 3);
      assert.equal(r.ports.macWrites().length, writes + 2);
      assert.equal(last(r.log.restored).deferred, false);
    });

    it('applies the injected jitter to the backoff delay', function () {
      const randoms = [0, 0.75];
      const r = rigWithDevice({}, () => randoms.shift() ?? 0.5);
      rewriteUntilDeferred(r, r.ifindex);
      assert.deepEqual(r.clock.pending(), [800]); // 1000 ms -20 %
      r.clock.advance(800);
      assert.equal(last(r.log.restored).deferred, true);
      r.monitor.pump();
      rewrite(r, r.ifindex, FOREIGN_MAC);
      assert.deepEqual(r.clock.pending(), [2_200]); // 2000 ms +10 %
      assert.deepEqual(randoms, []);
    });

    it('keeps one pending correction when rewrites arrive while one is deferred', function () {
      const r = rigWithDevice({ fight: { maxRewrites: 10 } });
      rewriteUntilDeferred(r, r.ifindex);
      const writes = r.ports.macWrites().length;
      assert.deepEqual(r.clock.pending(), [1_000]);
      r.clock.advance(10);
      rewrite(r, r.ifindex, '02:00:00:00:0f:09');
      assert.deepEqual(r.clock.pending(), [990]);
      r.clock.advance(990);
      assert.equal(r.ports.macWrites().length, writes + 1);
      assert.deepEqual(r.clock.pending(), []);
      assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
    });

    it('drops a deferred correction when someone else puts the MAC back first', function () {
      const r = rigWithDevice();
      rewriteUntilDeferred(r, r.ifindex);
      const writes = r.ports.macWrites().length;
      const echoes = r.guard.counters.echoes;
      rewrite(r, r.ifindex, FLANNEL_MAC); // e.g. flannel itself
      assert.deepEqual(r.clock.pending(), []);
      r.clock.advance(DAY);
      assert.equal(r.ports.macWrites().length, writes);
      assert.equal(r.guard.counters.echoes, echoes + 1);
      assert.equal(r.guard.counters.deferredCorrections, 0);
    });

    it('two guards with different desired MACs both back off and go contested, no ping-pong (F5)', function () {
      const { maxRewrites, windowMs } = DEFAULT_FIGHT_POLICY;
      const kernel = new FakeKernel();
      const { ifindex } = kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
      kernel.setFeature(ifindex, CSUM, false);
      const clock = new FakeClock();
      const sides = ['02:00:00:00:aa:01', '02:00:00:00:bb:01'].map((mac) => {
        const monitor = new ScriptedMonitor(kernel, { queue: kernel.openQueue(), clock });
        const ports = new FakePorts(kernel);
        const guard = new FlannelGuard(guardConfig({ mac: { 'flannel.1': mac } }), {
          monitor,
          ports,
          clock,
          random: () => 0.5,
        });
        open.push(guard);
        return { mac, monitor, ports, guard, log: new GuardLog(guard) };
      });
      for (const side of sides) side.monitor.start();

      // Let them fight for 20 s, each reading its socket every 100 ms.
      const writesAt: number[] = [];
      for (let round = 0; round < 200; round += 1) {
        for (const side of sides) side.monitor.pump();
        clock.advance(100);
        const writes = sides.reduce((sum, side) => sum + side.ports.macWrites().length, 0);
        if (writes > writesAt.length) writesAt.push(clock.now());
      }
      assert.ok(clock.now() < windowMs);
      // One of them reached maxRewrites first and stopped with one alert naming both MACs; the
      // other, backing off too, found its MAC in place and had nothing left to correct.
      const loser = only(sides.filter((side) => side.log.contested.length > 0));
      const winner = only(sides.filter((side) => side !== loser));
      const contested = only(loser.log.contested);
      assert.equal(contested.what, 'mac');
      assert.equal(contested.expected, loser.mac);
      assert.equal(contested.observed, winner.mac);
      assert.equal(contested.rewrites, maxRewrites);
      assert.equal(only(loser.guard.status()).contested, true);
      assert.equal(kernel.link(ifindex).mac, winner.mac);
      for (const side of sides) {
        assert.ok(side.ports.macWrites().length < maxRewrites, 'bounded writes');
        assert.ok(side.ports.macWrites().every((c) => c.mac === side.mac));
        assert.ok(side.guard.counters.deferredCorrections > 0, 'both backed off');
      }
      // Both stopped: nothing written in the last seconds of the window.
      assert.ok(last(writesAt) < clock.now() - 10_000, `last write at ${last(writesAt)}`);
    });

    it('forgets old rewrites after windowMs: a slow writer is corrected at once every time', function () {
      const r = rigWithDevice({ fight: { windowMs: 1_000 } });
      for (let i = 0; i < 8; i += 1) {
        rewrite(r, r.ifindex, i % 2 === 0 ? FOREIGN_MAC : UDEV_MAC);
        assert.equal(r.ports.macWrites().length, i + 1);
        r.clock.advance(1_000);
      }
      assert.deepEqual(r.log.contested, []);
      assert.ok(r.log.restored.every((e) => !e.deferred));
    });

    it('backs off and goes contested per (device, feature) when offloads flap (F7)', function () {
      const { burst, maxRewrites, quietMs } = DEFAULT_FIGHT_POLICY;
      const r = rigWithDevice({ offload: { [CSUM]: false, 'tx-gso-partial': false } });
      const flap = (feature: string): void => {
        r.kernel.setFeature(r.ifindex, feature, true); // a udev RUN rule turning it back on
        r.monitor.pump();
      };

      // Another feature's flaps first: corrected, and no part of the checksum's fight.
      for (let n = 1; n <= burst; n += 1) {
        r.clock.advance(100);
        flap('tx-gso-partial');
        assert.deepEqual(last(r.ports.featureWrites()).wanted, { 'tx-gso-partial': false });
      }
      let writes = r.ports.featureWrites().length;
      assert.equal(writes, burst);
      assert.deepEqual(r.clock.pending(), []);

      const delays: number[] = [];
      for (let n = 1; n < maxRewrites; n += 1) {
        r.clock.advance(100);
        flap(CSUM);
        const delay = backoffOf(n);
        if (delay === 0) {
          writes += 1;
          assert.equal(r.ports.featureWrites().length, writes, `flap ${n} corrected at once`);
          assert.deepEqual(last(r.ports.featureWrites()), {
            method: 'setFeatures',
            name: 'flannel.1',
            wanted: { [CSUM]: false },
          });
          const offload = last(r.log.offload);
          assert.equal(offload.reason, 'drift');
          assert.equal(offload.written, true);
          continue;
        }
        delays.push(delay);
        assert.equal(r.ports.featureWrites().length, writes, `flap ${n} waits`);
        assert.deepEqual(r.clock.pending(), [delay]);
        r.clock.advance(delay - 1);
        assert.equal(r.ports.featureWrites().length, writes);
        r.clock.advance(1);
        writes += 1;
        assert.equal(r.ports.featureWrites().length, writes);
        assert.deepEqual(last(r.ports.featureWrites()).wanted, { [CSUM]: false });
        r.monitor.pump();
      }
      assert.ok(delays.length >= 2, 'some flaps were deferred');
      assert.ok(delays.every((d, i) => i === 0 || d === 2 * nth(delays, i - 1)));
      assert.equal(r.guard.counters.offloadDrifts, burst + maxRewrites - 1);

      r.clock.advance(100);
      flap(CSUM);
      const contested = only(r.log.contested);
      assert.deepEqual(
        { ...contested, detail: '' },
        {
          device: 'flannel.1',
          ifindex: r.ifindex,
          what: 'offload',
          feature: CSUM,
          expected: 'off',
          observed: 'on',
          rewrites: maxRewrites,
          windowMs: DEFAULT_FIGHT_POLICY.windowMs,
          quietMs,
          detail: '',
        },
      );
      assert.match(contested.detail, /udev RUN rule/);
      assert.equal(only(r.guard.status()).contested, false, 'the MAC is not contested');
      assert.equal(r.ports.featureWrites().length, writes);

      // Still flapping (off by hand, on again by the rule): observed, not answered.
      r.clock.advance(1_000);
      r.kernel.setFeature(r.ifindex, CSUM, false);
      r.monitor.pump();
      flap(CSUM);
      assert.equal(r.ports.featureWrites().length, writes, 'no write while contested');
      assert.equal(r.log.contested.length, 1);

      r.clock.advance(quietMs - 1);
      assert.deepEqual(r.log.resumed, []);
      r.clock.advance(1);
      assert.deepEqual(only(r.log.resumed), {
        device: 'flannel.1',
        ifindex: r.ifindex,
        what: 'offload',
        feature: CSUM,
      });
      assert.equal(r.ports.featureWrites().length, writes + 1);
      assert.equal(r.kernel.feature(r.ifindex, CSUM), false);
      // MAC corrections were never involved.
      assert.deepEqual(r.ports.macWrites(), []);
    });
  });

  describe('overruns and resyncs', function () {
    it('corrects a rewrite found by the re-dump and keeps the entries missing from it on the drifted device', function () {
      const r = rigWithDevice();
      r.clock.advance(60_000);
      r.kernel.setMac(r.ifindex, FOREIGN_MAC); // NEWLINK + flush ...
      r.monitor.overrunAndResync(); // ... lost: the re-dump finds the MAC and the missing entries

      assert.equal(only(r.log.overrun).cause, 'ENOBUFS');
      assert.equal(r.guard.counters.overruns, 1);
      assert.equal(r.guard.counters.resyncs, 1);
      assert.deepEqual(
        r.log.resync.map((e) => e.phase),
        ['begin', 'end'],
      );
      const event = only(r.log.rewrite);
      assert.equal(event.found, 'resync');
      assert.equal(event.previous, FLANNEL_MAC);
      assert.match(event.detail, /lost notifications/);
      assert.deepEqual(
        r.ports.macWrites().map((c) => c.mac),
        [FLANNEL_MAC],
      );
      assert.deepEqual(destinations(r), ['10.244.1.0', '10.244.2.0']);
      assert.deepEqual(removalCauses(r.monitor), ['10.244.1.0:resync', '10.244.2.0:resync']);
      assert.equal(only(r.guard.status()).neighbours, 2, 'still kept for the next correction');
      assert.ok(r.ports.methods().includes('getFeatures'), 'offloads re-checked at the end');

      r.monitor.pump();
      r.ports.clear();
      r.clock.advance(60_000);
      rewrite(r, r.ifindex, UDEV_MAC);
      assert.deepEqual(destinations(r), ['10.244.1.0', '10.244.2.0']);
    });

    it('puts back entries missing from a re-dump of a device that is not drifted (a flush seen late)', function () {
      const r = rigWithDevice();
      // Lost with the notifications: a rewrite put back by someone else flushed the entry.
      r.kernel.deleteNeighbour(permanentArp(r.ifindex, '10.244.2.0', REMOTE_B));
      r.monitor.overrunAndResync();
      assert.deepEqual(removalCauses(r.monitor), ['10.244.2.0:resync']);
      assert.equal(only(r.guard.status()).neighbours, 2);
      assert.deepEqual(destinations(r), ['10.244.1.0', '10.244.2.0']);
      assert.ok(
        [...r.kernel.neighbours.values()].some((n) => n.destination === '10.244.2.0'),
        'the kernel has it again',
      );
    });

    it('re-applies an offload turned back on while notifications were lost', function () {
      const r = rigWithDevice();
      r.kernel.setFeature(r.ifindex, CSUM, true);
      r.monitor.overrunAndResync();
      assert.deepEqual(r.ports.featureWrites(), [
        { method: 'setFeatures', name: 'flannel.1', wanted: { [CSUM]: false } },
      ]);
      assert.equal(last(r.log.offload).reason, 'resync');
      assert.equal(r.kernel.feature(r.ifindex, CSUM), false);
    });
  });

  describe('lifecycle', function () {
    it('close() is idempotent, cancels timers and closes the monitor and the ports', function () {
      const source = new TestSource();
      const r = rigWithDevice({ source });
      const rewrites = rewriteUntilDeferred(r, r.ifindex); // a deferred correction pending
      const rewriteEvent = lastEmitted(r.monitor, 'linkChanged');
      assert.equal(r.clock.pending().length, 1);

      r.guard.close();
      r.guard.close();
      assert.equal(r.log.closes, 1);
      assert.equal(r.monitor.closed, true);
      assert.equal(r.monitor.closeCalls, 1);
      assert.equal(r.ports.calls.filter((c) => c.method === 'close').length, 1);
      assert.deepEqual(r.clock.pending(), []);
      assert.equal(source.listeners.size, 0);

      r.ports.clear();
      r.clock.advance(DAY);
      r.monitor.emit('linkChanged', ...rewriteEvent.args); // a straggler
      assert.deepEqual(r.ports.calls, []);
      assert.equal(r.log.rewrite.length, rewrites);
    });

    it('resolves ready() once adopted, and forwards ref/unref to the monitor', async function () {
      const r = rigWithDevice();
      await r.guard.ready();
      assert.equal(r.guard.ref(), r.guard);
      assert.equal(r.guard.unref(), r.guard);
      assert.equal(r.monitor.refs, 1);
      assert.equal(r.monitor.unrefs, 1);
    });

    it('marks the guard-written entries with its own port id in the echoes', function () {
      const r = rigWithDevice();
      rewrite(r, r.ifindex, FOREIGN_MAC);
      const added = r.monitor.emitted.flatMap((e) =>
        e.type === 'neighbourAdded' ? [e.args[0]] : [],
      );
      assert.ok(added.length >= 2);
      assert.ok(added.every((e) => e.portid === GUARD_PORTID));
    });

    it('surfaces a failed write as an error event and keeps guarding', function () {
      const r = rigWithDevice();
      r.ports.fail('setFeatures', eopnotsupp('tx-checksum-ip-generic is fixed'));
      r.kernel.setFeature(r.ifindex, CSUM, true);
      r.monitor.pump();
      assert.equal(only(r.log.error).code, 'EOPNOTSUPP');
      rewrite(r, r.ifindex, FOREIGN_MAC);
      assert.equal(r.ports.macWrites().length, 1);
    });
  });
});

describe('FlannelGuard policy: regressions', function () {
  afterEach(function () {
    for (const guard of open.splice(0)) guard.close();
  });

  it('resumes after the quiet period even when the MAC was put back by someone else while contested (F2)', function () {
    const { quietMs } = DEFAULT_FIGHT_POLICY;
    const r = rigWithDevice();
    contestMac(r, 10);
    assert.equal(r.log.contested.length, 1);
    // While contested, the operator puts the published MAC back by hand ...
    r.clock.advance(10);
    rewrite(r, r.ifindex, FLANNEL_MAC);
    // ... and the foreign writer rewrites it once more, then stops for good.
    r.clock.advance(10);
    rewrite(r, r.ifindex, FOREIGN_MAC);
    const writes = r.ports.macWrites().length;

    r.clock.advance(quietMs + DAY);
    assert.equal(r.log.resumed.length, 1, 'resumed after the quiet period');
    assert.equal(r.ports.macWrites().length, writes + 1, 'one correction');
    assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
    assert.equal(only(r.guard.status()).contested, false);
  });

  it('counts only flips of a feature away from the policy as its rewrites (F7)', function () {
    const r = rigWithDevice();
    let flaps = 0;
    while (r.clock.pending().length === 0) {
      r.clock.advance(10);
      r.kernel.setFeature(r.ifindex, CSUM, true);
      r.monitor.pump();
      flaps += 1;
      assert.ok(flaps < 10);
    }
    const writes = r.ports.featureWrites().length;
    const delay = nth(r.clock.pending(), 0);
    // Meanwhile an admin toggles an unrelated feature (not in the policy): two IFLA_EVENT_FEATURES.
    r.kernel.setFeature(r.ifindex, 'rx-checksum', false);
    r.kernel.setFeature(r.ifindex, 'rx-checksum', true);
    r.monitor.pump();
    assert.deepEqual(r.log.contested, [], `not a fight: the checksum was flipped ${flaps} times`);
    r.clock.advance(delay);
    assert.equal(r.ports.featureWrites().length, writes + 1, 'the deferred correction ran');
    assert.equal(r.kernel.feature(r.ifindex, CSUM), false);
  });

  it('keeps a flushed permanent entry when the kernel reports a transient entry for the same IP', function () {
    const r = rigWithDevice();
    rewriteUntilDeferred(r, r.ifindex); // the MAC is wrong and its permanent entries flushed
    // Traffic to 10.244.1.0 meanwhile: the kernel tries ARP and reports the entry FAILED (portid 0).
    r.kernel.replaceNeighbour(
      {
        ...permanentArp(r.ifindex, '10.244.1.0', REMOTE_A),
        lladdr: null,
        state: 0x20, // NUD_FAILED
        states: ['failed'],
        permanent: false,
      },
      0,
    );
    r.monitor.pump();
    r.ports.clear();
    r.clock.advance(DAY); // the deferred correction
    assert.equal(last(r.log.restored).deferred, true);
    assert.deepEqual(destinations(r), ['10.244.1.0', '10.244.2.0']);
  });

  it("measures a deferred correction's latency from the rewrite event", function () {
    const r = rigWithDevice();
    rewriteUntilDeferred(r, r.ifindex);
    const delay = nth(r.clock.pending(), 0);
    r.clock.advance(delay);
    const restored = last(r.log.restored);
    assert.equal(restored.deferred, true);
    assert.ok(restored.latencyMs >= delay, `latencyMs ${restored.latencyMs} < ${delay}`);
  });

  it('restore on link up: ENODEV is the device going away, not an error (E14)', function () {
    const r = rigWithDevice();
    r.kernel.setUp(r.ifindex, false);
    r.monitor.pump();
    r.ports.before('replaceNeighbour', () => r.kernel.removeLink(r.ifindex));
    r.ports.fail('replaceNeighbour', enodev('flannel.1'));
    r.kernel.setUp(r.ifindex, true);
    r.monitor.pump();
    assert.deepEqual(
      r.log.error.map((e) => e.code),
      [],
    );
    assert.equal(only(r.log.released).reason, 'removed');
  });

  it('restore on link up: checks the write target by ifindex first (S6/S8)', function () {
    const r = rigWithDevice();
    r.kernel.setUp(r.ifindex, false);
    r.monitor.pump();
    r.kernel.setUp(r.ifindex, true);
    r.kernel.rename(r.ifindex, 'eth9');
    r.monitor.pumpOne(); // the up; the rename is still queued
    assert.deepEqual(r.ports.neighbourWrites(), []);
    assert.equal(only(r.log.error).code, 'EACCES');
  });

  it('does not re-adopt a vanishing device from the events before its DELLINK', function () {
    const r = rigWithDevice({ offload: 'none' });
    r.ports.before('setLinkMac', () => r.kernel.removeLink(r.ifindex));
    r.kernel.setMac(r.ifindex, FOREIGN_MAC);
    r.monitor.pump();
    assert.deepEqual(r.guard.status(), []);
    assert.equal(r.log.released.length, 1);
  });

  it('a device whose features cannot be read at start does not stop the guard', async function () {
    const kernel = new FakeKernel();
    kernel.addLink({ name: 'flannel.1', mac: FLANNEL_MAC });
    kernel.addLink({ name: 'flannel.2', mac: FLANNEL6_MAC });
    const clock = new FakeClock();
    const monitor = new ScriptedMonitor(kernel, { clock });
    const ports = new FakePorts(kernel);
    const guard = new FlannelGuard(guardConfig(), { monitor, ports, clock });
    open.push(guard);
    const log = new GuardLog(guard);
    ports.fail('getFeatures', eopnotsupp('flannel.1: no named features'));
    monitor.start();
    assert.equal(log.ready.length, 1, 'ready');
    assert.equal(guard.status().length, 2);
    assert.equal(only(log.error).code, 'EOPNOTSUPP');
    await guard.ready();
  });

  it('does not write a contested offload from the MAC-correction path', function () {
    const { maxRewrites } = DEFAULT_FIGHT_POLICY;
    const r = rigWithDevice();
    for (let n = 1; n <= maxRewrites; n += 1) {
      r.clock.advance(10);
      r.kernel.setFeature(r.ifindex, CSUM, false);
      r.monitor.pump();
      r.kernel.setFeature(r.ifindex, CSUM, true);
      r.monitor.pump();
    }
    assert.equal(only(r.log.contested).what, 'offload');
    const writes = r.ports.featureWrites().length;
    rewrite(r, r.ifindex, FOREIGN_MAC); // an unrelated MAC rewrite, corrected
    assert.equal(r.ports.macWrites().length, 1);
    assert.equal(r.ports.featureWrites().length, writes, 'no write of the contested feature');
  });

  it('a source notification does not bypass the contested state of the MAC', function () {
    const source = new TestSource();
    source.table.set('flannel.1', FLANNEL_MAC);
    const r = rigWithDevice({ source });
    contestMac(r, 10);
    assert.equal(only(r.log.contested).what, 'mac');
    const writes = r.ports.macWrites().length;
    source.set('flannel.1', FLANNEL_MAC); // e.g. a node-object update: the answer is unchanged
    assert.equal(r.ports.macWrites().length, writes, 'no MAC write while contested');
  });

  /** The events from `from` on, each rewrite followed by an answer before the next rewrite or the end. */
  function assertEveryRewriteAnswered(order: readonly string[], from: number): void {
    const answers = ['restored', 'contested', 'resumed'];
    const tail = order.slice(from);
    const lastRewrite = tail.lastIndexOf('rewrite');
    assert.ok(lastRewrite >= 0, `no rewrite in ${tail.join(', ')}`);
    assert.ok(
      tail.slice(lastRewrite + 1).some((name) => answers.includes(name)),
      `the last rewrite is not answered after it: ${tail.join(', ')}`,
    );
  }

  it('a rewrite queued when a contest ends is reported before the correction that answers it (sequence seed 75)', function () {
    const { quietMs } = DEFAULT_FIGHT_POLICY;
    const r = rigWithDevice();
    contestMac(r, 1);
    assert.equal(r.log.contested.length, 1);
    r.clock.advance(quietMs - 1);
    // The writer's next rewrite is made, its notification not read yet, when the quiet ends:
    // the resumption's timer runs first (libuv runs due timers before polling).
    r.kernel.setMac(r.ifindex, FOREIGN_MAC);
    const from = r.log.order.length;
    r.clock.advance(1);
    assert.deepEqual(r.log.order.slice(from), ['resumed']);
    r.monitor.pump();
    assert.deepEqual(r.log.order.slice(from), ['resumed', 'rewrite', 'restored']);
    assertEveryRewriteAnswered(r.log.order, from);
    assert.equal(last(r.log.restored).neighbours, 2);
    assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
    const arp = [...r.kernel.neighbours.values()].filter(
      (entry) => entry.ifindex === r.ifindex && entry.family === 'inet',
    );
    assert.equal(arp.length, 2);
  });

  for (const together of [false, true]) {
    it(`another writer's rewrite landing between the guard's re-read and its write is reported, then answered (read ${together ? "with its write's echo" : 'alone'}; sequence seed 3001276)`, function () {
      const r = rigWithDevice();
      const from = r.log.order.length;
      // udev's write on a re-created device, made while the guard waits for RTNL to write its own.
      r.ports.before('setLinkMac', () => r.kernel.setMac(r.ifindex, '02:00:00:00:0f:0d'));
      r.kernel.setMac(r.ifindex, FOREIGN_MAC);
      if (together) {
        r.monitor.pumpTogether(); // the first rewrite: corrected from JS, the race made
        r.monitor.pumpTogether(); // the second rewrite and the write's echo, in one batch
      }
      r.monitor.pump();
      assert.deepEqual(r.log.order.slice(from), ['rewrite', 'restored', 'rewrite', 'restored']);
      assertEveryRewriteAnswered(r.log.order, from);
      assert.equal(r.ports.macWrites().length, 1, 'the one write set back both');
      // As of the second rewrite its flush has taken the entries: they are written again.
      assert.equal(last(r.log.restored).neighbours, 2);
      assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
      const arp = [...r.kernel.neighbours.values()].filter(
        (entry) => entry.ifindex === r.ifindex && entry.family === 'inet',
      );
      assert.equal(arp.length, 2);
    });
  }

  it('a rewrite queued when a deferred correction comes due is reported before its answer', function () {
    const r = rigWithDevice();
    rewriteUntilDeferred(r, r.ifindex);
    const [delay] = r.clock.pending();
    assert.ok(delay !== undefined);
    r.clock.advance(delay - 1);
    r.kernel.setMac(r.ifindex, '02:00:00:00:0f:0e');
    const from = r.log.order.length;
    r.clock.advance(1);
    assert.deepEqual(r.log.order.slice(from), [], 'nothing written past a rewrite not yet read');
    r.monitor.pump();
    r.clock.advance(DAY);
    r.monitor.pump();
    assertEveryRewriteAnswered(r.log.order, from);
    assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
  });

  for (const macs of [
    ['02:00:00:00:0f:01', '02:00:00:00:0f:02'],
    ['02:00:00:00:0f:01', '02:00:00:00:0f:02', '02:00:00:00:0f:01'],
  ]) {
    it(`rewrites read in one batch (${macs.length}, the last ${macs.length === 3 ? 'the first again' : 'new'}): each is reported, the answer after the last`, function () {
      const r = rigWithDevice();
      const from = r.log.order.length;
      for (const mac of macs) r.kernel.setMac(r.ifindex, mac);
      r.monitor.pumpTogether();
      r.clock.advance(DAY); // three within the window: the third is answered after a backoff
      r.monitor.pump();
      const backoff = macs.length > DEFAULT_FIGHT_POLICY.burst ? ['deferred'] : [];
      assert.deepEqual(r.log.order.slice(from), [
        ...macs.map(() => 'rewrite'),
        ...backoff,
        'restored',
      ]);
      assert.equal(r.ports.macWrites().length, 1, 'one write answers them all');
      assert.equal(last(r.log.restored).neighbours, 2);
      assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
    });
  }

  it('corrects a device renamed within the globs between the event and the write, under its new name', function () {
    const r = rigWithDevice();
    r.kernel.setMac(r.ifindex, FOREIGN_MAC);
    r.kernel.rename(r.ifindex, 'flannel.9'); // renamed between the event and the write, still managed
    r.monitor.pump();
    assert.deepEqual(r.log.error, []);
    assert.equal(only(r.guard.status()).name, 'flannel.9');
    assert.equal(r.kernel.link(r.ifindex).mac, FLANNEL_MAC);
  });
});

describe('FlannelGuard policy: a source that has not caught up with a re-created device', function () {
  afterEach(function () {
    for (const guard of open.splice(0)) guard.close();
  });

  it('keeps the first-seen MAC until the source publishes anew, then follows the source', function () {
    const source = new TestSource();
    source.table.set('flannel.1', FLANNEL_MAC);
    const r = rig({ source });
    // flanneld re-creates the device: a new random MAC, the annotation still has the old one.
    const { ifindex } = r.kernel.addLink({ name: 'flannel.1', mac: FLANNEL6_MAC });
    r.monitor.pump();
    assert.deepEqual(r.ports.macWrites(), [], 'not set back to the old device MAC');
    assert.equal(only(r.guard.status()).desiredMac, FLANNEL6_MAC);
    assert.equal(only(r.guard.status()).macSource, 'first-seen');
    // udev rewrites it: corrected to the first-seen MAC.
    r.clock.advance(3);
    rewrite(r, ifindex, UDEV_MAC);
    assert.equal(r.kernel.link(ifindex).mac, FLANNEL6_MAC);
    // flanneld publishes the new MAC, then someone publishes another: the source wins again.
    source.set('flannel.1', FLANNEL6_MAC);
    assert.equal(only(r.guard.status()).macSource, 'source');
    source.set('flannel.1', SOURCE_MAC);
    assert.equal(r.kernel.link(ifindex).mac, SOURCE_MAC);
  });
});

describe('guardConfig: the options parsed once, frozen', function () {
  it('defaults, compiles and parses everything once, and freezes the result', function () {
    const config = guardConfig({
      netns: 'node1',
      interfaces: ['flannel.*'],
      mac: { 'flannel.1': '0E:00:00:00:00:01' },
      fight: { windowMs: 5 },
    });
    assert.ok(Object.isFrozen(config));
    assert.ok(Object.isFrozen(config.interfaces) && Object.isFrozen(config.fight));
    assert.deepEqual(config.netns, { path: '/run/netns/node1', label: 'node1' });
    assert.equal(config.interfaces[0]?.prefix, 'flannel.');
    assert.equal(config.interfaces[0]?.matches('flannel.1'), true);
    assert.equal(config.explicit?.desiredMac('flannel.1'), '0e:00:00:00:00:01');
    assert.deepEqual(config.fight, { ...DEFAULT_FIGHT_POLICY, windowMs: 5 });
    assert.equal(config.offload, DEFAULT_OFFLOAD);
    assert.equal(guardConfig({ offload: 'none' }).offload, null);
    assert.equal(guardConfig().netns, null);
    assert.equal(guardConfig().interfaces.length, DEFAULT_INTERFACES.length);
    assert.equal(guardConfig().pinFirstSeen, true);
    assert.equal(guardConfig().onNetnsDeleted, 'close');
    assert.equal(guardConfig().checksumErrorsPollMs, 2000);
  });

  it('refuses a bad option before anything opens: EINVAL, naming what it refused', function () {
    const refused = (options: FlannelGuardOptions, message: RegExp, option?: string): void => {
      assert.throws(
        () => guardConfig(options),
        (error: unknown) => {
          assert.equal((error as { code?: string }).code, 'EINVAL');
          assert.match((error as Error).message, message);
          assert.equal((error as { option?: string }).option, option);
          return true;
        },
      );
    };
    refused({ netns: 'a/b' }, /network namespace name "a\/b" is not valid/);
    refused({ interfaces: ['*'] }, /\*/);
    refused({ mac: { 'flannel.1': 'ff:ff:ff:ff:ff:ff' } }, /broadcast/);
    refused({ fight: { windowMs: -1 } }, /fight\.windowMs/);
    refused({ fight: { jitter: 1 } }, /fight\.jitter/);
    refused(
      { checksumErrorsPollMs: -1 },
      /checksumErrorsPollMs -1: expected a whole number from 0/,
    );
    refused({ checksumErrorsPollMs: 1.5 }, /checksumErrorsPollMs 1\.5/);
    refused({ strategy: 'adopt' }, /strategy 'adopt' needs a source/, 'strategy');
  });

  it('refuses a misspelt name and a wrong value of every option: EINVAL naming the option', function () {
    const wrong = (options: object): unknown => {
      try {
        guardConfig(options as FlannelGuardOptions);
      } catch (error) {
        return error;
      }
      return assert.fail(`accepted ${JSON.stringify(options)}`);
    };
    const expectRefused = (options: object, message: RegExp, option: string | undefined): void => {
      const error = wrong(options) as Error & { code?: string; option?: string; syscall?: string };
      assert.equal(error.code, 'EINVAL', error.message);
      assert.equal(error.syscall, undefined, 'refused before any system call');
      assert.match(error.message, message);
      assert.equal(error.option, option, error.message);
    };
    // Typed by the options' own names: an option added without a row here does not compile.
    // The option an error names: the row's third field, else the option's own name.
    type Row = [value: unknown, message: RegExp, option?: string];
    const table: Record<keyof FlannelGuardOptions, Row[]> = {
      netns: [['a/b', /network namespace name "a\/b" is not valid/]],
      interfaces: [['flannel.*', /option interfaces flannel\.\*: expected a list/]],
      mac: [[{ 'flannel.1': 'ff:ff:ff:ff:ff:ff' }, /broadcast/]],
      source: [[{ name: 'x' }, /option source: expected a DesiredMacSource/]],
      pin: [['firstseen', /option pin firstseen: expected first-seen or none/]],
      strategy: [['revrt', /option strategy revrt: expected revert or adopt/]],
      offload: [
        [{ 'tx-checksum-ip-generics': false }, /unknown feature tx-checksum-ip-generics/],
        [{ 'tx-checksum-ip-generic': 'off' }, /tx-checksum-ip-generic off: expected true/],
        ['off', /option offload off: expected none or auto/],
      ],
      autoOffload: [[{ roundMs: 1500 }, /autoOffload is only read with offload 'auto'/]],
      checksumErrorsPollMs: [['2000', /checksumErrorsPollMs string/]],
      dryRun: [['yes', /option dryRun yes: expected true or false/]],
      fight: [[{ maxRewrite: 3 }, /unknown option fight\.maxRewrite/, 'fight.maxRewrite']],
      receiveBuffer: [[10, /receiveBuffer 10: expected a whole number from 1024/]],
      kernelFilter: [[0, /option kernelFilter number 0: expected true or false/]],
      onNetnsDeleted: [['contine', /option onNetnsDeleted contine: expected close or continue/]],
      allowUserNamespace: [['true', /option allowUserNamespace true: expected true or false/]],
      stateDir: [['state', /option stateDir state: expected an absolute path/]],
      udevRoot: [['host', /option udevRoot host: expected an absolute path/]],
    };
    // Options whose check is shared with other entry points name the value, not the option.
    const unnamed = new Set(['netns', 'mac', 'checksumErrorsPollMs', 'receiveBuffer']);
    for (const [name, rows] of Object.entries(table)) {
      for (const [value, message, option] of rows) {
        expectRefused({ [name]: value }, message, unnamed.has(name) ? undefined : (option ?? name));
      }
    }
    expectRefused({ pni: 'none' }, /FlannelGuard: unknown option pni \(known: netns, /, 'pni');
    expectRefused(
      { offload: 'auto', autoOffload: { rounds: 2 } },
      /unknown option autoOffload\.rounds/,
      'autoOffload.rounds',
    );
    // The README's Library section has a row for each option, with its default and its refusal.
    const readme = readFileSync(join(__dirname, '..', '..', 'README.md'), 'utf8');
    const rows = new Set(
      [...readme.matchAll(/^\| ((?:`\w+`(?:, )?)+) \|/gm)].flatMap((row) =>
        [...(row[1] ?? '').matchAll(/`(\w+)`/g)].map((name) => name[1]),
      ),
    );
    assert.deepEqual(
      Object.keys(table).filter((name) => !rows.has(name)),
      [],
      'options missing from the README table',
    );
    // What a typo used to become silently is now refused, and the right spelling still works.
    assert.equal(guardConfig({ pin: 'none' }).pinFirstSeen, false);
    assert.deepEqual(guardConfig({ offload: { 'tx-checksum-ip-generic': true } }).offload, {
      'tx-checksum-ip-generic': true,
    });
  });
});
