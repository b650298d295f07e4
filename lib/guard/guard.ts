/**
 * FlannelGuard: keeps the VXLAN devices that match its globs at their desired MAC, with the
 * permanent neighbour entries a MAC change flushes put back, and their offloads at the policy, in
 * the turn of the event loop that delivers the change. This class is the life cycle and the
 * dispatch: each monitor event, with the time it arrived, goes to the part that owns the answer
 * (devices.ts, mac.ts, offload.ts, fight-control.ts, device-state-store.ts, mesh-devices.ts,
 * pod-check.ts). Its own writes come back as events carrying the desired values, recognised by
 * value, never counted.
 */
import { EventEmitter } from 'node:events';

import { systemError, type SystemError } from '../core/errors';
import type {
  LinkAddedEvent,
  LinkChangedEvent,
  LinkRemovedEvent,
  NeighbourAddedEvent,
  NeighbourRemovedEvent,
  ResyncEvent,
} from '../core/monitor-events';
import type { ChecksumErrorCounters, LinkInfo } from '../core/types';
import { ChecksumErrorWatch } from './checksum-errors';
import { guardConfig, type FlannelGuardOptions, type GuardConfig } from './config';
import type { GuardContext } from './context';
import { newManagedDevice, type ManagedDevice } from './device';
import { realClock, type GuardClock, type GuardMonitor } from './seams';
import { DeviceTable } from './devices';
import {
  zeroCounters,
  type DeviceStatus,
  type FlannelGuardEvents,
  type GuardCounters,
  type OffloadEvent,
  type ReleasedEvent,
} from './events';
import { FightController } from './fight-control';
import { MacCorrection } from './mac';
import { OffloadEnforcement } from './offload';
import { OffloadAuto } from './offload-auto';
import { OtherGuards } from './other-guards';
import { openGuardParts, type GuardInternals } from './parts';
import { DeviceStateStore } from './device-state-store';
import type { GuardPorts } from './ports';
import { vtepTables } from './mesh-devices';
import { PodCheck } from './pod-check';
import type { MeshDevices } from '../mesh/view';

export class FlannelGuard extends EventEmitter<FlannelGuardEvents> {
  readonly netns: string | null;
  readonly dryRun: boolean;
  readonly #config: GuardConfig;
  readonly #monitor: GuardMonitor;
  readonly #ports: GuardPorts;
  readonly #clock: GuardClock;
  readonly #fight: FightController;
  readonly #devices: DeviceTable;
  readonly #mac: MacCorrection;
  readonly #offload: OffloadEnforcement;
  readonly #autoOffload: OffloadAuto | undefined;
  readonly #checksumErrors: ChecksumErrorWatch;
  readonly #state: DeviceStateStore;
  /** Other guards of the same devices (not looked for in a dry run, which writes nothing). */
  readonly #others: OtherGuards | undefined;
  readonly #counters: GuardCounters = zeroCounters();
  #unsubscribeSource: (() => void) | undefined;
  #unwatchNetns: (() => void) | undefined;
  readonly #stateProblem: Error | undefined;
  #started = false;
  #closed = false;

  /**
   * Starts guarding: parses `options` (guardConfig), opens the monitor, waits for its first
   * snapshot, takes on the managed devices and resolves once `ready` has been emitted.
   */
  static async start(options: FlannelGuardOptions = {}): Promise<FlannelGuard> {
    return FlannelGuard.open(guardConfig(options));
  }

  /** As start(), from a configuration parsed already. */
  static async open(config: GuardConfig): Promise<FlannelGuard> {
    const guard = FlannelGuard.create(config);
    try {
      await guard.ready();
    } catch (error) {
      guard.close();
      throw error;
    }
    return guard;
  }

  /**
   * Opens the sockets (throwing EPERM at once when writes are not allowed) and starts,
   * without waiting: attach listeners, then await `ready()`.
   */
  static create(config: GuardConfig): FlannelGuard {
    return new FlannelGuard(config, openGuardParts(config));
  }

  /** From opened parts (openGuardParts, or test doubles): use create(), open() or start(). */
  constructor(config: GuardConfig, internals: GuardInternals) {
    super();
    this.#config = config;
    this.netns = config.netns?.label ?? null;
    this.dryRun = config.dryRun;
    this.#monitor = internals.monitor;
    this.#ports = internals.ports;
    this.#clock = internals.clock ?? realClock;
    const emit = this.emit.bind(this);
    const fail = (error: unknown) => {
      this.#fail(error);
    };
    this.#fight = new FightController({
      policy: config.fight,
      clock: this.#clock,
      random: internals.random,
      counters: this.#counters,
      emit,
      run: (handler) => {
        this.#handle(handler);
      },
    });
    this.#devices = new DeviceTable({
      config,
      monitor: this.#monitor,
      ports: this.#ports,
      fight: this.#fight,
      emit,
      fail,
    });
    const context: GuardContext = {
      config,
      monitor: this.#monitor,
      ports: this.#ports,
      clock: this.#clock,
      counters: this.#counters,
      emit,
      fight: this.#fight,
      devices: this.#devices,
      udev: internals.udev,
      fail,
      isClosed: () => this.#closed,
    };
    this.#mac = new MacCorrection(context);
    this.#offload = new OffloadEnforcement(context);
    this.#autoOffload =
      config.autoOffload === null
        ? undefined
        : new OffloadAuto(
            context,
            this.#offload,
            config.autoOffload,
            internals.random ?? Math.random,
          );
    this.#checksumErrors = new ChecksumErrorWatch(context, {
      recheck: (at) => {
        const autoOffload = this.#autoOffload;
        if (autoOffload === undefined) return [];
        return [...this.#devices.values()]
          .filter((device) => autoOffload.recheckEarly(device, at))
          .map((device) => device.name);
      },
      devices: () => [...this.#devices.values()],
    });
    this.#state = new DeviceStateStore({
      file: internals.stateFile,
      clock: this.#clock,
      devices: this.#devices,
      monitor: this.#monitor,
      dryRun: config.dryRun,
      fail,
    });
    this.#stateProblem = internals.stateProblem ?? this.#state.loadProblem;
    this.#others =
      internals.nameClaims === undefined || config.dryRun
        ? undefined
        : new OtherGuards(internals.nameClaims, emit);

    const monitor = this.#monitor;
    monitor.on('linkAdded', (event) => {
      this.#handle((at) => this.#onLinkAdded(event, at), event.receivedAt);
    });
    monitor.on('linkChanged', (event) => {
      this.#handle((at) => this.#onLinkChanged(event, at), event.receivedAt);
    });
    monitor.on('linkRemoved', (event) => this.#handle(() => this.#onLinkRemoved(event)));
    monitor.on('neighbourAdded', (event) => this.#handle(() => this.#onNeighbour(event)));
    monitor.on('neighbourChanged', (event) => this.#handle(() => this.#onNeighbour(event)));
    monitor.on('neighbourRemoved', (event) => this.#handle(() => this.#onNeighbourRemoved(event)));
    monitor.on('overrun', (event) => {
      this.#counters.overruns += 1;
      this.emit('overrun', event);
    });
    monitor.on('resync', (event) => this.#handle(() => this.#onResync(event)));
    monitor.on('error', (error) => this.#fail(error));
    // Adopt in the same turn as the snapshot, before any later event is handled.
    if (monitor.isReady) this.#initialize(this.#clock.now());
    else monitor.once('ready', () => this.#handle((at) => this.#initialize(at)));
    this.#unwatchNetns = internals.watchNetns?.(() => {
      this.#onNetnsDeleted(config.onNetnsDeleted);
    });
    this.#unsubscribeSource = config.source?.subscribe?.(() =>
      this.#handle((at) => this.#reconcileAll(at)),
    );
  }

  /** Resolves once the guard has taken on its devices and emitted `ready`. */
  ready(): Promise<void> {
    if (this.#started) return Promise.resolve();
    return this.#monitor.ready().then(() => {
      if (!this.#started) throw new Error('guard closed before it was ready');
    });
  }

  /** Receive checksum-error counters at the last read (every `checksumErrorsPollMs`), or null. */
  checksumErrors(): ChecksumErrorCounters | null {
    return this.#checksumErrors.totals();
  }

  get counters(): Readonly<GuardCounters> {
    return { ...this.#counters };
  }

  /** The guarded VTEPs as the mesh view reads and repairs them (mesh/view.ts). */
  meshDevices(): MeshDevices {
    return vtepTables(this.#monitor, this.#ports, this.#devices, this.dryRun);
  }

  /** The guarded VTEPs as a CNI call checks and repairs them (cni/server.ts). */
  podCheck(): PodCheck {
    const parts = { devices: this.#devices, monitor: this.#monitor, offload: this.#offload };
    const run = (handler: (at: number) => void) => this.#handle(handler);
    return new PodCheck({ ...parts, mac: this.#mac, dryRun: this.dryRun, run });
  }

  /** The managed devices as the guard sees them now. */
  status(): DeviceStatus[] {
    return [...this.#devices.values()].map((device) => this.#deviceStatus(device));
  }

  ref(): this {
    this.#monitor.ref();
    return this;
  }

  unref(): this {
    this.#monitor.unref();
    return this;
  }

  /** Stops guarding and releases sockets and timers. Idempotent. */
  close(): void {
    if (this.#closed) return;
    // Corrections already made, whose reports are held, are accounted for first.
    this.#monitor.flush?.();
    this.#closed = true;
    for (const device of this.#devices.values()) this.#fight.cancelTimers(device);
    this.#autoOffload?.close();
    this.#checksumErrors.close();
    this.#others?.close();
    this.#state.close();
    this.#unsubscribeSource?.();
    this.#unwatchNetns?.();
    this.#monitor.close();
    this.#ports.close();
    this.emit('close');
  }

  /**
   * Runs one handler at the time its event arrived; a failure becomes an `error` event,
   * never an exception into the monitor. `receivedAt`: when the kernel's notification
   * arrived, which latencies count from (the event loop may have been busy since).
   */
  #handle(handler: (at: number) => void, receivedAt?: number): void {
    if (this.#closed) return;
    try {
      handler(receivedAt ?? this.#clock.now());
    } catch (error) {
      this.#fail(error);
    }
  }

  #onNetnsDeleted(then: 'close' | 'continue'): void {
    this.#fail(
      systemError(
        'ENOENT',
        `network namespace ${this.netns ?? ''} was deleted${then === 'close' ? '; closing' : '; still guarding what its sockets hold'}`,
        { syscall: 'netns', netns: this.netns ?? '' },
      ),
    );
    if (then === 'close') this.close();
  }

  #fail(error: unknown): void {
    this.#counters.errors += 1;
    const failure = (error instanceof Error ? error : new Error(String(error))) as SystemError;
    if (this.listenerCount('error') > 0) this.emit('error', failure);
    else process.emitWarning(failure);
  }

  /** Takes on the devices of the first snapshot, reports `ready`, then brings them to policy. */
  #initialize(at: number): void {
    const links = this.#monitor.links();
    const byIndex = new Map(links.map((link) => [link.ifindex, link]));
    const managed = links
      .filter((link) => link.kind === 'vxlan' && this.#devices.matches(link))
      .map((link) => this.#track(link, 'start', at));
    const recovered = new Set(
      managed.filter((device) => this.#state.recover(device, byIndex.get(device.ifindex))),
    );
    this.#state.recovered();
    // One device that cannot be read must not keep the others unguarded.
    for (const device of managed) this.#handle(() => this.#offload.read(device));
    this.#updateFilter();
    this.#started = true;
    this.emit('ready', {
      netns: this.netns,
      devices: this.status(),
      dryRun: this.dryRun,
    });
    if (this.#stateProblem) this.#fail(this.#stateProblem);
    // After `ready`: the devices the globs match but the guard never touches.
    for (const link of links) if (link.kind !== 'vxlan') this.#devices.matches(link);
    for (const device of managed) {
      this.#handle(() => {
        this.#enforce(device, 'start', at);
        // A flush while the guard was down, with the MAC already right: the entries back.
        if (recovered.has(device) && !this.#devices.isDrifted(device)) {
          this.#mac.restoreMissing(device);
        }
        this.#mac.arm(device);
      });
    }
    this.#state.schedule();
    this.#handle(() => {
      this.#checksumErrors.start();
    });
  }

  #onLinkAdded(event: LinkAddedEvent, at: number): void {
    if (!this.#started || !this.#devices.matches(event.link)) return;
    const reason = event.created ? 'created' : event.source === 'resync' ? 'resync' : 'managed';
    this.#manage(event.link, reason, at);
  }

  #onLinkChanged(event: LinkChangedEvent, at: number): void {
    if (!this.#started) return;
    const { link, previous } = event;
    const device = this.#devices.get(link.ifindex);
    const managed = this.#devices.matches(link);
    if (device && !managed) {
      this.#release(device, 'renamed');
      return;
    }
    if (!device) {
      if (managed) this.#manage(link, 'managed', at);
      return;
    }
    if (device.vanishing) return;
    device.name = link.name;
    // A correction may ride on a change that moved no MAC as the mirror saw it (the drift
    // was already the mirror's state): it is accounted all the same.
    if (link.mac !== previous.mac || event.correction) {
      this.#mac.changed(device, link, previous.mac, event.source, at, event.correction);
    }
    if (!previous.up && link.up) this.#mac.restoreAfterUp(device);
    if (event.kernelEvent === 'features') this.#offload.check(device, 'drift');
    this.#mac.arm(device);
  }

  #onLinkRemoved(event: LinkRemovedEvent): void {
    this.#devices.forget(event.link.ifindex);
    const device = this.#devices.get(event.link.ifindex);
    if (device) this.#release(device, 'removed');
  }

  /**
   * The native layer follows the device's restore set as it reads the table (LinkMonitor.keep);
   * the guard saves it, and answers a flush.
   */
  #onNeighbour(event: NeighbourAddedEvent): void {
    const device = this.#devices.get(event.neighbour.ifindex);
    if (device && event.neighbour.family !== 'bridge') this.#scheduleSave();
  }

  #onNeighbourRemoved(event: NeighbourRemovedEvent): void {
    const entry = event.neighbour;
    const device = this.#devices.get(entry.ifindex);
    if (!device || entry.family === 'bridge' || !entry.permanent) return;
    // Flushed (a MAC write, a down): kept in the restore set, and put back once the MAC is
    // right. Missing from a re-dump after lost notifications: most likely the same flush seen
    // late, kept too, and put back at the resync's end.
    if (event.cause === 'flush') this.#mac.afterFlush(device);
    else if (event.cause !== 'resync') this.#scheduleSave();
  }

  #onResync(event: ResyncEvent): void {
    if (event.phase === 'begin') this.#counters.resyncs += 1;
    this.emit('resync', event);
    // Feature and neighbour notifications may have been lost with the rest.
    if (event.phase === 'end' && this.#started) {
      for (const device of this.#devices.values()) {
        this.#handle(() => {
          this.#offload.check(device, 'resync');
          if (event.consistent === true && !this.#devices.isDrifted(device)) {
            this.#mac.restoreMissing(device);
          }
        });
      }
    }
  }

  /** A source changed its answers: bring every device to them (not counted as rewrites). */
  #reconcileAll(at: number): void {
    if (!this.#started || this.dryRun) return;
    for (const device of this.#devices.values()) this.#mac.reconcile(device, at);
  }

  // --- devices ----------------------------------------------------------------

  #manage(link: LinkInfo, reason: OffloadEvent['reason'], at: number): void {
    const device = this.#track(link, reason, at);
    this.#enforce(device, reason, at);
    this.#mac.arm(device);
  }

  /** Starts keeping state for a device: its pin and its permanent neighbours. */
  #track(link: LinkInfo, reason: OffloadEvent['reason'], at: number): ManagedDevice {
    const firstSeen = reason === 'created';
    const { pinFirstSeen, source } = this.#config;
    const device = newManagedDevice(link.ifindex, link.name, {
      pin: pinFirstSeen ? link.mac : null,
      pinKind: pinFirstSeen ? (firstSeen ? 'first-seen' : 'pinned-at-start') : null,
      createdAt: firstSeen ? at : null,
      staleSourceMac: firstSeen ? source?.desiredMac(link.name) : undefined,
    });
    this.#devices.add(device);
    this.#monitor.keep(link.ifindex);
    this.#others?.watch(link.name);
    if (this.#started) {
      this.#updateFilter();
      this.#scheduleSave();
    }
    return device;
  }

  /** Lets through the kernel's filter what the guard needs: its globs and its devices. */
  #updateFilter(): void {
    if (!this.#config.kernelFilter) return;
    this.#monitor.setFilter?.({
      ifindexes: this.#devices.indexes(),
      namePrefixes: this.#config.interfaces.map((glob) => glob.prefix),
    });
  }

  /** Applies the offload policy and, when a source disagrees with the device already, the MAC. */
  #enforce(device: ManagedDevice, reason: OffloadEvent['reason'], at: number): void {
    this.#offload.check(device, reason);
    this.#autoOffload?.start(device, at);
    const link = this.#devices.currentLink(device);
    const desired = this.#devices.desiredMac(device);
    if (link && desired && link.mac !== desired.mac) {
      this.#mac.changed(device, link, null, 'start', at); // its MAC before: not known
    }
  }

  #release(device: ManagedDevice, reason: ReleasedEvent['reason']): void {
    this.#monitor.release(device.ifindex);
    this.#fight.release(device);
    this.#autoOffload?.release(device);
    this.#devices.delete(device);
    this.#updateFilter();
    this.#scheduleSave();
    this.emit('released', { device: device.name, ifindex: device.ifindex, reason });
  }

  #scheduleSave(): void {
    if (this.#started) this.#state.schedule();
  }

  #deviceStatus(device: ManagedDevice): DeviceStatus {
    const link = this.#devices.currentLink(device);
    const desired = this.#devices.desiredMac(device);
    const status: DeviceStatus = {
      name: device.name,
      ifindex: device.ifindex,
      mac: link?.mac ?? null,
      desiredMac: desired?.mac ?? null,
      macSource: desired?.kind ?? 'none',
      addrAssignType: link ? this.#ports.addrAssignType(link) : null,
      offloads: { ...device.offloads },
      neighbours: this.#monitor.restoreSet(device.ifindex).length,
      contested: this.#mac.isContested(device),
    };
    if (desired?.kind === 'source' && this.#config.source)
      status.sourceName = this.#config.source.name;
    if (desired?.kind === device.pinKind && device.pinFromStateFile) status.fromStateFile = true;
    if (this.#autoOffload) status.offloadVerdict = this.#autoOffload.verdictOf(device);
    return status;
  }
}
