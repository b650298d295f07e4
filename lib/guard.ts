/**
 * FlannelGuard: keeps the VXLAN devices that match its globs at their
 * desired MAC, with the permanent neighbour entries a MAC change flushes put
 * back, and their offload features at the configured policy - all in the
 * turn of the event loop that delivers the change.
 *
 * One path per event: a managed device appears or changes -> compare with the
 * desired state -> (1) set the MAC back, (2) re-install the flushed
 * neighbours from the guard's own table, (3) apply the offload policy ->
 * verify by re-reading. The guard's own writes come back as events carrying
 * the desired values, so they are recognised by value and never counted.
 */
import { EventEmitter } from 'node:events';
import { mkdirSync, readFileSync, watch } from 'node:fs';
import { dirname } from 'node:path';

import { monotonicMs } from './clock';
import { binding, type RawControl } from './binding';
import { isSystemError, systemError, type SystemError } from './errors';
import { FightTracker, type FightDecision, type FightPolicy } from './fight';
import { guardConfig, type GuardConfig } from './guard-config';
import type {
  LinkAddedEvent,
  LinkChangedEvent,
  LinkMonitorEvents,
  LinkRemovedEvent,
  NeighbourAddedEvent,
  NeighbourRemovedEvent,
  OverrunEvent,
  ResyncEvent,
} from './monitor';
import { LinkMonitor, type LinkFilter, type NativeCorrection } from './monitor';
import { openControl } from './oneshot';
import { controlPorts, type GuardPorts } from './ports';
import { isRestorable, neighbourKey } from './records';
import type { DesiredMacSource } from './sources';
import { StateFile, liveNetnsInodes, type PersistedDevice } from './state-file';
import type { FeatureSetResult, LinkInfo, NeighbourInfo } from './types';

/**
 * The first rewrite this soon after a device's creation is attributed to
 * udev's MACAddressPolicy (it lands 1-50 ms after the add event).
 */
export const UDEV_REWRITE_WINDOW_MS = 1_000;

export interface FlannelGuardOptions {
  /** Network namespace by `ip netns` name or absolute path; the process's own when omitted. */
  netns?: string;
  /**
   * Interface globs to manage (default flannel.* and flannel-v6.*). Only
   * devices of kind vxlan are ever managed: anything else a glob matches is
   * reported once (`ignored`) and never written to.
   */
  interfaces?: readonly string[];
  /** Desired MACs by interface name; these win over every other source. */
  mac?: Record<string, string>;
  /** Another source of desired MACs (e.g. the Kubernetes node annotation). */
  source?: DesiredMacSource;
  /**
   * For devices no source knows: 'first-seen' pins the MAC of the first
   * RTM_NEWLINK after creation (the one flannel publishes), or the current
   * MAC for devices that existed before the guard; 'none' leaves them alone.
   */
  pin?: 'first-seen' | 'none';
  /**
   * On a rewrite: 'revert' (default) sets the desired MAC back; 'adopt' keeps
   * the device's new MAC and has the source publish it (its `adopt`), so the
   * other nodes follow. Either way the flushed neighbour entries are restored.
   */
  strategy?: 'revert' | 'adopt';
  /** Offload features to enforce (default tx-checksum-ip-generic off); 'none' leaves them alone. */
  offload?: Readonly<Record<string, boolean>> | 'none';
  /** Report what would be done, never write. */
  dryRun?: boolean;
  /** Backoff and contested-state thresholds. */
  fight?: Partial<FightPolicy>;
  /** Netlink socket receive buffer in bytes. */
  receiveBuffer?: number;
  /**
   * Filter unrelated link notifications in the kernel (default true): a flood
   * of changes to other devices then never reaches the guard.
   */
  kernelFilter?: boolean;
  /**
   * When the named network namespace is deleted under the guard: 'close'
   * (default) reports an ENOENT error and closes; 'continue' reports it and
   * keeps guarding the devices the guard's sockets still hold.
   */
  onNetnsDeleted?: 'close' | 'continue';
  /**
   * Run even inside a user namespace other than the initial one (S11). Off by
   * default: there the guard's capabilities do not reach devices the host
   * owns, so it would be guarding a sandbox, not the node.
   */
  allowUserNamespace?: boolean;
  /**
   * Folder for the state that survives a crash (the permanent neighbour
   * entries and pinned MAC of each device, one file per namespace), read at
   * start: a flush that happened while the guard was down is restored from
   * it. Off when omitted; the CLI uses /run/flannel-guard.
   */
  stateDir?: string;
}

export type MacSourceKind = 'explicit' | 'source' | 'first-seen' | 'pinned-at-start' | 'none';

export interface DeviceStatus {
  name: string;
  ifindex: number;
  mac: string | null;
  desiredMac: string | null;
  macSource: MacSourceKind;
  /** Name of the external source when macSource is 'source'. */
  sourceName?: string;
  addrAssignType: number | null;
  /** Active state of each policy feature (null when it could not be read). */
  offloads: Record<string, boolean | null>;
  /** Permanent neighbour entries the guard keeps for this device. */
  neighbours: number;
  contested: boolean;
}

export interface GuardReadyEvent {
  netns: string | null;
  devices: DeviceStatus[];
  dryRun: boolean;
}

export type RewriteCause =
  'udev-mac-policy' | 'external-write' | 'found-on-resync' | 'found-at-start';

export interface RewriteEvent {
  device: string;
  ifindex: number;
  /** The desired MAC the device should have. */
  expected: string;
  /** The MAC it has now. */
  mac: string | null;
  /** The MAC it had just before this change. */
  previous: string | null;
  cause: RewriteCause;
  /** One readable sentence naming the likely cause. */
  detail: string;
  msSinceCreation: number | null;
  dryRun: boolean;
}

export interface RestoredEvent {
  device: string;
  ifindex: number;
  mac: string;
  /** Permanent neighbour entries re-installed. */
  neighbours: number;
  /**
   * From the rewrite's notification reaching the monitor's socket (noted by a
   * native thread, so time the event loop was busy counts) to MAC and
   * neighbours being back.
   */
  latencyMs: number;
  /** True when this correction waited for backoff. */
  deferred: boolean;
}

export interface OffloadEvent extends FeatureSetResult {
  device: string;
  ifindex: number;
  reason: 'created' | 'start' | 'managed' | 'drift' | 'resync';
  dryRun: boolean;
}

export interface AdoptedEvent {
  device: string;
  ifindex: number;
  /** The device's MAC, now published as the desired one. */
  mac: string;
  /** The MAC the source had before. */
  previous: string;
  /** Permanent neighbour entries re-installed (the MAC change flushed them). */
  neighbours: number;
  /** From the rewrite event's arrival to the source having stored the new MAC. */
  latencyMs: number;
}

export interface ContestedEvent {
  device: string;
  ifindex: number;
  what: 'mac' | 'offload';
  /** For offloads: the feature being fought over. */
  feature?: string;
  expected: string;
  observed: string;
  rewrites: number;
  windowMs: number;
  /** The guard resumes after this long without a rewrite. */
  quietMs: number;
  detail: string;
}

export interface ResumedEvent {
  device: string;
  ifindex: number;
  what: 'mac' | 'offload';
  feature?: string;
}

/** A device matched the globs but is not a VXLAN device: never written to. */
export interface IgnoredEvent {
  device: string;
  ifindex: number;
  /** Its rtnl link kind ('veth', 'bridge', '' for none). */
  kind: string;
  detail: string;
}

export interface ReleasedEvent {
  device: string;
  ifindex: number;
  reason: 'renamed' | 'removed';
}

export interface GuardCounters {
  rewrites: number;
  corrections: number;
  deferredCorrections: number;
  neighboursRestored: number;
  offloadChecks: number;
  offloadApplications: number;
  offloadDrifts: number;
  contested: number;
  echoes: number;
  writes: number;
  errors: number;
  overruns: number;
  resyncs: number;
}

export interface FlannelGuardEvents {
  ready: [GuardReadyEvent];
  rewrite: [RewriteEvent];
  restored: [RestoredEvent];
  adopted: [AdoptedEvent];
  offload: [OffloadEvent];
  contested: [ContestedEvent];
  resumed: [ResumedEvent];
  released: [ReleasedEvent];
  ignored: [IgnoredEvent];
  overrun: [OverrunEvent];
  resync: [ResyncEvent];
  error: [SystemError];
  close: [];
}

/** What the guard needs of a monitor: LinkMonitor, or a scripted stand-in in unit tests. */
export interface GuardMonitor extends EventEmitter<LinkMonitorEvents> {
  readonly isReady: boolean;
  links(): LinkInfo[];
  getLink(ifindex: number): LinkInfo | undefined;
  setFilter?(filter: LinkFilter | null): void;
  arm?(
    ifindex: number,
    target: { name: string; mac: string; neighbours: readonly NeighbourInfo[]; shots?: number },
  ): void;
  disarm?(ifindex: number): void;
  neighbours(filter?: { ifindex?: number }): NeighbourInfo[];
  /** The device's permanent ARP/NDP entries (see LinkMonitor.restoreEntries). */
  restoreEntries(ifindex: number): readonly NeighbourInfo[];
  ready(): Promise<void>;
  ref(): unknown;
  unref(): unknown;
  close(): void;
}

export interface GuardClock {
  now(): number;
  setTimeout(callback: () => void, ms: number): () => void;
}

const realClock: GuardClock = {
  now: () => monotonicMs(),
  setTimeout(callback, ms) {
    // A pending correction must not keep a process alive on its own: the monitor's socket does.
    const timer = setTimeout(callback, ms).unref();
    return () => clearTimeout(timer);
  },
};

interface ManagedDevice {
  ifindex: number;
  name: string;
  /** first-seen / pinned-at-start MAC. */
  pin: string | null;
  pinKind: 'first-seen' | 'pinned-at-start' | null;
  /**
   * For a device seen created: the source's answer at that moment, which
   * describes the device it replaces until the source publishes anew.
   */
  staleSourceMac: string | undefined;
  createdAt: number | null;
  /** Rewrites seen since the guard took the device on. */
  rewrites: number;
  /** When the MAC left the desired value (start of the correction latency); null when at it. */
  driftSince: number | null;
  /** Set on ENODEV: the device is going away; nothing is written until its DELLINK. */
  vanishing: boolean;
  /** Permanent neighbour entries by key, as they were before any flush. */
  neighbours: RestoreSet;
  /** Cancels a deferred correction, by fight key. */
  deferred: Map<string, () => void>;
  /** Cancels the check that ends a contested state, by fight key. */
  resumeChecks: Map<string, () => void>;
  /** Last known active state of each policy feature. */
  offloads: Record<string, boolean | null>;
}

/**
 * A device's permanent neighbour entries by key. `list()` gives the same array
 * while they are unchanged: the monitor then does not send them to the native
 * layer again when the guard re-arms (with thousands of peers, every event).
 */
class RestoreSet extends Map<string, NeighbourInfo> {
  #list: readonly NeighbourInfo[] | undefined;

  /** A set of `entries` whose list() is `entries` itself until it changes. */
  static of(entries: readonly NeighbourInfo[]): RestoreSet {
    const set = new RestoreSet();
    for (const entry of entries) set.set(neighbourKey(entry), entry);
    set.#list = entries;
    return set;
  }

  override set(key: string, entry: NeighbourInfo): this {
    if (super.get(key) !== entry) this.#list = undefined;
    return super.set(key, entry);
  }

  override delete(key: string): boolean {
    const had = super.delete(key);
    if (had) this.#list = undefined;
    return had;
  }

  override clear(): void {
    this.#list = undefined;
    super.clear();
  }

  list(): readonly NeighbourInfo[] {
    this.#list ??= Object.freeze([...this.values()]);
    return this.#list;
  }
}

interface DesiredMac {
  mac: string;
  kind: MacSourceKind;
}

function describeRewrite(cause: RewriteCause, sinceCreation: number | null): string {
  switch (cause) {
    case 'udev-mac-policy':
      return `within ${sinceCreation?.toFixed(1) ?? '?'} ms of creation: systemd-udevd MACAddressPolicy=persistent (a .link file with MACAddressPolicy=none prevents it)`;
    case 'external-write':
      return 'changed by a userspace write (ip link set address, another agent)';
    case 'found-on-resync':
      return 'found when re-reading the namespace after lost notifications (the change itself was not seen)';
    case 'found-at-start':
      return 'differs from the desired MAC when the guard began managing the device';
  }
}

/** Dependencies a test may replace. */
export interface GuardInternals {
  monitor: GuardMonitor;
  ports: GuardPorts;
  clock?: GuardClock;
  random?: () => number;
  /** Calls `onDeleted` once the namespace is deleted; returns a function that stops watching. */
  watchNetns?: (onDeleted: () => void) => () => void;
  stateFile?: StateFile;
  /** Why the state asked for is not kept (reported after `ready`). */
  stateProblem?: Error;
}

/** Saves are coalesced over this long: a flush and its restore are one write. */
const STATE_SAVE_DELAY_MS = 100;

/**
 * The namespace's state file under `options.stateDir` (made if missing, stale
 * files pruned), named by the namespace's cookie: an inode is reused once a
 * namespace is gone, and another namespace's entries must never be restored.
 */
function openStateFile(
  config: GuardConfig,
  control: RawControl,
): { stateFile?: StateFile; stateProblem?: Error } {
  const dir = config.stateDir;
  if (dir === undefined) return {};
  if (control.netnsCookie === null) {
    return {
      stateProblem: systemError(
        'ENOPROTOOPT',
        `the kernel has no SO_NETNS_COOKIE (Linux 5.14+) to tell namespaces apart: no state kept in ${dir}`,
        { syscall: 'getsockopt' },
      ),
    };
  }
  if (!config.dryRun) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const stateFile = new StateFile(dir, control.netnsCookie, control.netnsInode);
  if (!config.dryRun) stateFile.pruneStale(liveNetnsInodes());
  return { stateFile };
}

function stateError(file: StateFile, what: string, error: unknown): SystemError {
  return systemError(
    'EINVAL',
    `state file ${file.path} ${what}: ${error instanceof Error ? error.message : String(error)}`,
    { path: file.path },
  );
}

function currentInode(path: string): number | null {
  try {
    return binding.netnsInode(path);
  } catch {
    return null;
  }
}

/**
 * Watches the directory of a named namespace (inotify, no polling) for the
 * name going away or being bound to another namespace. Paths without a
 * directory to watch (/proc/PID/ns/net) are not watched.
 */
function netnsWatcher(path: string): GuardInternals['watchNetns'] {
  if (!path.startsWith('/run/netns/')) return undefined;
  const inode = binding.netnsInode(path);
  return (onDeleted) => {
    const watcher = watch(dirname(path), () => {
      if (currentInode(path) === inode) return;
      watcher.close();
      onDeleted();
    });
    // The monitor's socket keeps the process alive; the watcher must not.
    watcher.unref();
    return () => {
      watcher.close();
    };
  };
}

/** The process's uid mapping when it runs in a user namespace other than the initial one. */
export function userNamespaceMapping(
  uidMap = readFileSync('/proc/self/uid_map', 'utf8'),
): string | null {
  const mapping = uidMap.trim().split(/\s+/).join(' ');
  return mapping === '0 0 4294967295' ? null : mapping;
}

/** The real sockets: a request socket (checked for write access) and a LinkMonitor. */
export function openGuardParts(config: GuardConfig): GuardInternals {
  const mapping = config.allowUserNamespace ? null : userNamespaceMapping();
  if (mapping !== null) {
    throw systemError(
      'EPERM',
      `running inside a user namespace (uid_map "${mapping}"): its capabilities do not reach the node's own devices; allow it explicitly (option allowUserNamespace) to guard this namespace anyway`,
      {
        syscall: 'userns',
        capability: 'CAP_NET_ADMIN in the initial user namespace',
        option: 'allowUserNamespace',
      },
    );
  }
  const control = openControl(config.netns);
  const ports = controlPorts(control);
  try {
    if (!config.dryRun) ports.probeWriteAccess();
    const state = openStateFile(config, control);
    const monitor = new LinkMonitor({
      ...(config.netns === null ? {} : { netns: config.netns.label }),
      ...(config.receiveBuffer === undefined ? {} : { receiveBuffer: config.receiveBuffer }),
      // Only what the globs can match is ever read (the guard adds its devices' indexes later).
      ...(config.kernelFilter
        ? { filter: { ifindexes: [], namePrefixes: config.interfaces.map((glob) => glob.prefix) } }
        : {}),
      addrAssignType: false,
      // The guard keeps and restores ARP/NDP entries; FDB entries survive a MAC change.
      neighbours: 'ip',
      // It acts on permanent entries and on what a process changed (#onNeighbour): the
      // kernel's own entries (NOARP multicast, resolving) stay in the mirror, without events.
      neighbourEvents: 'permanent',
    });
    const watchNetns = config.netns === null ? undefined : netnsWatcher(config.netns.path);
    return { monitor, ports, ...(watchNetns ? { watchNetns } : {}), ...state };
  } catch (error) {
    ports.close();
    throw error;
  }
}

export class FlannelGuard extends EventEmitter<FlannelGuardEvents> {
  readonly netns: string | null;
  readonly dryRun: boolean;
  readonly #config: GuardConfig;
  readonly #monitor: GuardMonitor;
  readonly #ports: GuardPorts;
  readonly #clock: GuardClock;
  readonly #fight: FightTracker;
  readonly #devices = new Map<number, ManagedDevice>();
  /** Devices reported as matching a glob without being VXLAN, by ifindex, with that name. */
  readonly #ignored = new Map<number, string>();
  readonly #counters: GuardCounters = {
    rewrites: 0,
    corrections: 0,
    deferredCorrections: 0,
    neighboursRestored: 0,
    offloadChecks: 0,
    offloadApplications: 0,
    offloadDrifts: 0,
    contested: 0,
    echoes: 0,
    writes: 0,
    errors: 0,
    overruns: 0,
    resyncs: 0,
  };
  #unsubscribeSource: (() => void) | undefined;
  #unwatchNetns: (() => void) | undefined;
  readonly #stateFile: StateFile | undefined;
  /** What the state file held at start, by ifindex (consumed by #initialize). */
  #persisted = new Map<number, PersistedDevice>();
  #stateProblem: Error | undefined;
  #cancelSave: (() => void) | undefined;
  #started = false;
  #closed = false;
  /** Event currently being handled: the start of every latency figure. */
  #eventAt = 0;

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
    this.#fight = new FightTracker(config.fight, () => this.#clock.now(), internals.random);
    this.#stateFile = internals.stateFile;
    this.#stateProblem = internals.stateProblem;
    if (this.#stateFile) {
      try {
        this.#persisted = this.#stateFile.load();
      } catch (error) {
        this.#stateProblem = stateError(this.#stateFile, 'ignored', error);
      }
    }

    const monitor = this.#monitor;
    monitor.on('linkAdded', (event) => {
      this.#handle(() => this.#onLinkAdded(event), event.receivedAt);
    });
    monitor.on('linkChanged', (event) => {
      this.#handle(() => this.#onLinkChanged(event), event.receivedAt);
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
    if (monitor.isReady) this.#initialize();
    else monitor.once('ready', () => this.#handle(() => this.#initialize()));
    this.#unwatchNetns = internals.watchNetns?.(() => {
      this.#onNetnsDeleted(config.onNetnsDeleted);
    });
    this.#unsubscribeSource = this.#config.source?.subscribe?.(() =>
      this.#handle(() => this.#reconcileAll()),
    );
  }

  /** Resolves once the guard has taken on its devices and emitted `ready`. */
  ready(): Promise<void> {
    if (this.#started) return Promise.resolve();
    return this.#monitor.ready().then(() => {
      if (!this.#started) throw new Error('guard closed before it was ready');
    });
  }

  get counters(): Readonly<GuardCounters> {
    return { ...this.#counters };
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
    this.#closed = true;
    for (const device of this.#devices.values()) this.#cancelTimers(device);
    if (this.#cancelSave) this.#save();
    this.#unsubscribeSource?.();
    this.#unwatchNetns?.();
    this.#monitor.close();
    this.#ports.close();
    this.emit('close');
  }

  // --- event handling -------------------------------------------------------

  /**
   * Runs one handler; a failure becomes an `error` event, never an exception
   * into the monitor. `receivedAt`: when the kernel's notification arrived,
   * which latencies count from (the event loop may have been busy since).
   */
  #handle(handler: () => void, receivedAt?: number): void {
    if (this.#closed) return;
    this.#eventAt = receivedAt ?? this.#clock.now();
    try {
      handler();
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
  #initialize(): void {
    const links = this.#monitor.links();
    const managed = links
      .filter((link) => link.kind === 'vxlan' && this.#isManaged(link))
      .map((link) => this.#track(link, 'start'));
    const recovered = managed.filter((device) => this.#recover(device, links));
    this.#persisted.clear();
    // One device that cannot be read must not keep the others unguarded.
    for (const device of managed) this.#handle(() => this.#readOffloads(device));
    this.#updateFilter();
    this.#started = true;
    this.emit('ready', {
      netns: this.netns,
      devices: this.status(),
      dryRun: this.dryRun,
    });
    if (this.#stateProblem) this.#fail(this.#stateProblem);
    // After `ready`: the devices the globs match but the guard never touches.
    for (const link of links) if (link.kind !== 'vxlan') this.#isManaged(link);
    for (const device of managed) {
      this.#handle(() => {
        this.#enforce(device, 'start');
        // A flush while the guard was down, with the MAC already right: the entries back.
        if (recovered.includes(device) && !this.#isDrifted(device)) this.#restoreMissing(device);
        this.#arm(device);
      });
    }
    this.#scheduleSave();
  }

  /**
   * Takes back what the state file knew of a device present at start (same
   * index and name): the pinned MAC, and the permanent entries - but only when
   * the evidence says they were flushed (none left, or the MAC was changed),
   * never to undo a single entry someone removed while the guard was down.
   */
  #recover(device: ManagedDevice, links: readonly LinkInfo[]): boolean {
    const saved = this.#persisted.get(device.ifindex);
    if (saved?.name !== device.name) return false;
    if (saved.pin !== null && saved.pinKind !== null && device.pinKind !== null) {
      device.pin = saved.pin;
      device.pinKind = saved.pinKind;
    }
    const link = links.find((l) => l.ifindex === device.ifindex);
    const desired = this.#desiredMac(device);
    const flushed = device.neighbours.size === 0 || (desired !== null && link?.mac !== desired.mac);
    if (!flushed) return false;
    for (const entry of saved.neighbours) {
      const key = neighbourKey(entry);
      if (!device.neighbours.has(key)) device.neighbours.set(key, entry);
    }
    return saved.neighbours.length > 0;
  }

  /** Saves the devices' state soon (coalesced): after the changes of this burst. */
  #scheduleSave(): void {
    if (!this.#stateFile || this.dryRun || this.#cancelSave || !this.#started) return;
    this.#cancelSave = this.#clock.setTimeout(() => {
      this.#save();
    }, STATE_SAVE_DELAY_MS);
  }

  #save(): void {
    this.#cancelSave?.();
    this.#cancelSave = undefined;
    const file = this.#stateFile;
    if (!file) return;
    try {
      file.save(
        [...this.#devices.values()].map((device) => {
          // Only a pin in force is worth restoring: one an explicit or source MAC overrides
          // may be a rewritten MAC pinned at start.
          const pinned =
            device.pinKind !== null && this.#desiredMac(device)?.kind === device.pinKind;
          return {
            name: device.name,
            ifindex: device.ifindex,
            pin: pinned ? device.pin : null,
            pinKind: pinned ? device.pinKind : null,
            neighbours: device.neighbours.list(),
          };
        }),
      );
    } catch (error) {
      this.#fail(stateError(file, 'not written', error));
    }
  }

  #onLinkAdded(event: LinkAddedEvent): void {
    if (!this.#started || !this.#isManaged(event.link)) return;
    this.#manage(
      event.link,
      event.created ? 'created' : event.source === 'resync' ? 'resync' : 'managed',
    );
  }

  #onLinkChanged(event: LinkChangedEvent): void {
    if (!this.#started) return;
    const { link, previous } = event;
    const device = this.#devices.get(link.ifindex);
    const managed = this.#isManaged(link);
    if (device && !managed) {
      this.#release(device, 'renamed');
      return;
    }
    if (!device) {
      if (managed) this.#manage(link, 'managed');
      return;
    }
    if (device.vanishing) return;
    device.name = link.name;
    if (link.mac !== previous.mac) {
      this.#onMacChanged(device, link, previous.mac, event.source, event.correction);
    }
    if (!previous.up && link.up) this.#restoreAfterUp(device);
    if (event.kernelEvent === 'features') this.#checkOffloads(device, 'drift');
    this.#arm(device);
  }

  #onLinkRemoved(event: LinkRemovedEvent): void {
    this.#ignored.delete(event.link.ifindex);
    const device = this.#devices.get(event.link.ifindex);
    if (device) this.#release(device, 'removed');
  }

  #onNeighbour(event: NeighbourAddedEvent): void {
    const entry = event.neighbour;
    const device = this.#devices.get(entry.ifindex);
    if (!device || entry.family === 'bridge') return;
    const key = neighbourKey(entry);
    if (isRestorable(entry)) {
      device.neighbours.set(key, entry);
    } else if (event.portid !== 0) {
      // A process made it non-permanent on purpose. The kernel's own entries for
      // the same address (resolving, failed: port id 0) only appear once the
      // permanent one was flushed, and must not replace it.
      device.neighbours.delete(key);
    } else {
      return;
    }
    this.#scheduleSave();
    this.#arm(device);
  }

  #onNeighbourRemoved(event: NeighbourRemovedEvent): void {
    const entry = event.neighbour;
    const device = this.#devices.get(entry.ifindex);
    if (!device || entry.family === 'bridge' || !entry.permanent) return;
    // Flushed by a MAC change (or a down): not removed on purpose, so kept for
    // restoring. Found missing by a re-dump after lost notifications: most
    // likely the same flush seen late (a rewrite put back by someone else
    // meanwhile), so kept too, and put back at the resync's end.
    if (event.cause === 'flush' || event.cause === 'resync') return;
    device.neighbours.delete(neighbourKey(entry));
    this.#scheduleSave();
    this.#arm(device);
  }

  #onResync(event: ResyncEvent): void {
    if (event.phase === 'begin') this.#counters.resyncs += 1;
    this.emit('resync', event);
    // Feature and neighbour notifications may have been lost with the rest.
    if (event.phase === 'end' && this.#started) {
      for (const device of this.#devices.values()) {
        this.#handle(() => {
          this.#checkOffloads(device, 'resync');
          if (event.consistent === true && !this.#isDrifted(device)) this.#restoreMissing(device);
        });
      }
    }
  }

  // --- devices ----------------------------------------------------------------

  /**
   * Whether the guard may write to this device: its name matches a glob and
   * it is a VXLAN device. A non-VXLAN match (a veth called flannel.7, an
   * `--iface 'eth*'` typo) is reported once per device and name.
   */
  #isManaged(link: LinkInfo): boolean {
    if (!this.#config.interfaces.some((glob) => glob.matches(link.name))) return false;
    if (link.kind === 'vxlan') return true;
    if (this.#ignored.get(link.ifindex) !== link.name) {
      this.#ignored.set(link.ifindex, link.name);
      this.emit('ignored', {
        device: link.name,
        ifindex: link.ifindex,
        kind: link.kind,
        detail: `${link.name} matches the interface globs but is ${link.kind === '' ? 'a device without a link kind' : `of kind ${link.kind}`}, not vxlan: never written to`,
      });
    }
    return false;
  }

  #manage(link: LinkInfo, reason: OffloadEvent['reason']): void {
    const device = this.#track(link, reason);
    this.#enforce(device, reason);
    this.#arm(device);
  }

  /** Starts keeping state for a device: its pin and its permanent neighbours. */
  #track(link: LinkInfo, reason: OffloadEvent['reason']): ManagedDevice {
    const firstSeen = reason === 'created';
    const device: ManagedDevice = {
      ifindex: link.ifindex,
      name: link.name,
      pin: this.#config.pinFirstSeen ? link.mac : null,
      pinKind: this.#config.pinFirstSeen ? (firstSeen ? 'first-seen' : 'pinned-at-start') : null,
      createdAt: firstSeen ? this.#eventAt : null,
      staleSourceMac: firstSeen ? this.#config.source?.desiredMac(link.name) : undefined,
      rewrites: 0,
      driftSince: null,
      vanishing: false,
      neighbours: RestoreSet.of(this.#monitor.restoreEntries(link.ifindex)),
      deferred: new Map(),
      resumeChecks: new Map(),
      offloads: {},
    };
    this.#devices.set(link.ifindex, device);
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
      ifindexes: [...this.#devices.keys()],
      namePrefixes: this.#config.interfaces.map((glob) => glob.prefix),
    });
  }

  /** Applies the offload policy and, when a source disagrees with the device already, the MAC. */
  #enforce(device: ManagedDevice, reason: OffloadEvent['reason']): void {
    this.#checkOffloads(device, reason);
    const link = this.#currentLink(device);
    const desired = this.#desiredMac(device);
    if (link && desired && link.mac !== desired.mac) {
      this.#onMacChanged(device, link, link.mac, 'found');
    }
  }

  #release(device: ManagedDevice, reason: ReleasedEvent['reason']): void {
    this.#monitor.disarm?.(device.ifindex);
    this.#cancelTimers(device);
    this.#fight.resetPrefix(`${device.ifindex}|`);
    this.#devices.delete(device.ifindex);
    this.#updateFilter();
    this.#scheduleSave();
    this.emit('released', { device: device.name, ifindex: device.ifindex, reason });
  }

  #desiredMac(device: ManagedDevice): DesiredMac | null {
    const explicit = this.#config.explicit?.desiredMac(device.name);
    if (explicit) return { mac: explicit, kind: 'explicit' };
    const external = this.#config.source?.desiredMac(device.name);
    // A re-created device: until the source publishes anew, its answer is the
    // old device's MAC, and the first-seen one is what flanneld is publishing.
    const stale =
      external !== undefined && external === device.staleSourceMac && device.pin !== null;
    if (external && !stale) return { mac: external, kind: 'source' };
    if (device.pin && device.pinKind) return { mac: device.pin, kind: device.pinKind };
    return null;
  }

  #currentLink(device: ManagedDevice): LinkInfo | undefined {
    return this.#monitor.getLink(device.ifindex);
  }

  #isDrifted(device: ManagedDevice): boolean {
    const desired = this.#desiredMac(device);
    const link = this.#currentLink(device);
    return desired !== null && link !== undefined && link.mac !== desired.mac;
  }

  /**
   * Arms the native layer to answer the device's next drift in the read that
   * sees it - the MAC set back and the kept neighbours re-added before JS
   * runs - when policy allows a correction right now; disarms it otherwise.
   * Called after every change to what that decision depends on.
   */
  #arm(device: ManagedDevice): void {
    const monitor = this.#monitor;
    if (!monitor.arm || !monitor.disarm) return;
    const desired = this.#desiredMac(device);
    const key = macKey(device);
    const shots = this.#fight.correctionsNow(key);
    const allowed =
      !this.dryRun &&
      !device.vanishing &&
      this.#devices.get(device.ifindex) === device &&
      desired !== null &&
      !(this.#config.strategy === 'adopt' && desired.kind === 'source') &&
      !this.#heldBack(device, key) &&
      shots > 0;
    if (!allowed) {
      monitor.disarm(device.ifindex);
      return;
    }
    monitor.arm(device.ifindex, {
      name: device.name,
      mac: desired.mac,
      neighbours: device.neighbours.list(),
      shots,
    });
  }

  /** A correction is pending, or the key is contested: leave it to fight control. */
  #heldBack(device: ManagedDevice, key: string): boolean {
    return device.deferred.has(key) || this.#fight.isContested(key);
  }

  #onMacChanged(
    device: ManagedDevice,
    link: LinkInfo,
    previous: string | null,
    origin: 'event' | 'resync' | 'found',
    correction?: NativeCorrection,
  ): void {
    const desired = this.#desiredMac(device);
    if (!desired) return;
    const key = macKey(device);
    if (link.mac === desired.mac) {
      // Back at the desired value: our own write's echo, or someone else's fix.
      this.#backAtDesired(device, key);
      return;
    }
    device.driftSince ??= this.#eventAt;
    this.#counters.rewrites += 1;
    device.rewrites += 1;
    const sinceCreation = device.createdAt === null ? null : this.#eventAt - device.createdAt;
    const cause: RewriteCause =
      origin === 'found'
        ? 'found-at-start'
        : origin === 'resync'
          ? 'found-on-resync'
          : device.rewrites === 1 &&
              sinceCreation !== null &&
              sinceCreation <= UDEV_REWRITE_WINDOW_MS
            ? 'udev-mac-policy'
            : 'external-write';
    this.emit('rewrite', {
      device: device.name,
      ifindex: device.ifindex,
      expected: desired.mac,
      mac: link.mac,
      previous,
      cause,
      detail: describeRewrite(cause, sinceCreation),
      msSinceCreation: sinceCreation,
      dryRun: this.dryRun,
    });
    if (this.dryRun) return;
    const decision = this.#fight.recordRewrite(key);
    if (correction) {
      this.#afterNativeCorrection(device, desired.mac, link.mac ?? 'none', correction, decision);
      return;
    }
    this.#decide(device, key, decision, {
      correct: (deferred) => {
        if (this.#config.strategy === 'adopt' && desired.kind === 'source') this.#adoptMac(device);
        else this.#correctMac(device, deferred);
      },
      contested: (rewrites) => this.#macContest(device, desired.mac, link.mac ?? 'none', rewrites),
    });
  }

  #backAtDesired(device: ManagedDevice, key: string): void {
    this.#counters.echoes += 1;
    device.driftSince = null;
    this.#cancelDeferred(device, key);
  }

  #macContest(
    device: ManagedDevice,
    expected: string,
    observed: string,
    rewrites: number,
  ): Omit<ContestedEvent, 'device' | 'ifindex' | 'windowMs' | 'quietMs'> {
    return {
      what: 'mac',
      expected,
      observed,
      rewrites,
      detail: `${device.name} rewritten ${rewrites} times within ${this.#fight.policy.windowMs} ms (now ${observed}, expected ${expected}): another agent is setting its MAC; correcting stops until it has been quiet for ${this.#fight.policy.quietMs} ms`,
    };
  }

  /**
   * The native layer has answered the drift already (it was armed because
   * policy allowed a correction now): account for it as the correction the
   * decision called for, verify it, and finish the path (offloads).
   */
  #afterNativeCorrection(
    device: ManagedDevice,
    desired: string,
    observed: string,
    correction: NativeCorrection,
    decision: FightDecision,
  ): void {
    if (correction.error) {
      if (correction.error.code === 'ENODEV') {
        device.vanishing = true;
        this.#cancelTimers(device);
      } else {
        this.#fail(correction.error);
      }
      return;
    }
    this.#counters.corrections += 1;
    this.#counters.writes += 1 + correction.neighbours;
    this.#counters.neighboursRestored += correction.neighbours;
    this.emit('restored', {
      device: device.name,
      ifindex: device.ifindex,
      mac: desired,
      neighbours: correction.neighbours,
      latencyMs: correction.queuedMs + correction.doneMs,
      deferred: false,
    });
    if (decision.action === 'contested') {
      // Armed before this rewrite made the fight a contest: alert, stop from now on.
      this.#decide(device, macKey(device), decision, {
        correct: () => undefined,
        contested: (rewrites) => this.#macContest(device, desired, observed, rewrites),
      });
    }
    // The write's own notification, when folded into this change, is the echo that follows.
    if (correction.echoed) this.#backAtDesired(device, macKey(device));
    this.#verify(device, desired, correction.after);
  }

  /**
   * Checks the device as re-read after a correction. A MAC other than the one
   * written is a new rewrite, whose own event follows; only losing the device
   * or its name is an error.
   */
  #verify(device: ManagedDevice, desired: string, after: { name: string } | null): void {
    if (after && after.name === device.name) return;
    throw systemError(
      'EIO',
      `${device.name} changed under its correction to ${desired} (re-read: ${after ? `now ${after.name}` : 'gone'})`,
      { interface: device.name, ifindex: device.ifindex },
    );
  }

  /** Acts on a fight decision: correct now, later, or stop and alert. */
  #decide(
    device: ManagedDevice,
    key: string,
    decision: FightDecision,
    actions: {
      correct: (deferred: boolean) => void;
      contested: (
        rewrites: number,
      ) => Omit<ContestedEvent, 'device' | 'ifindex' | 'windowMs' | 'quietMs'>;
    },
  ): void {
    switch (decision.action) {
      case 'correct':
        actions.correct(false);
        return;
      case 'defer':
        if (device.deferred.has(key)) return; // one pending correction is enough
        device.deferred.set(
          key,
          this.#clock.setTimeout(() => {
            device.deferred.delete(key);
            this.#handle(() => {
              actions.correct(true);
            });
          }, decision.delayMs),
        );
        return;
      case 'contested':
        this.#counters.contested += 1;
        this.#cancelDeferred(device, key);
        this.emit('contested', {
          device: device.name,
          ifindex: device.ifindex,
          windowMs: this.#fight.policy.windowMs,
          quietMs: this.#fight.policy.quietMs,
          ...actions.contested(decision.rewrites),
        });
        this.#scheduleResume(device, key, () => {
          actions.correct(false);
        });
        return;
      case 'observe':
        return;
    }
  }

  /** Ends a contested state once the key has been quiet long enough, then corrects once. */
  #scheduleResume(device: ManagedDevice, key: string, correct: () => void): void {
    const wait = Math.max(this.#fight.quietRemaining(key), 1);
    device.resumeChecks.set(
      key,
      this.#clock.setTimeout(() => {
        device.resumeChecks.delete(key);
        this.#handle(() => {
          if (this.#fight.quietRemaining(key) > 0) {
            this.#scheduleResume(device, key, correct);
            return;
          }
          this.#fight.reset(key);
          const [, what, feature] = key.split('|');
          this.emit('resumed', {
            device: device.name,
            ifindex: device.ifindex,
            what: what === 'offload' ? 'offload' : 'mac',
            ...(feature === undefined ? {} : { feature }),
          });
          correct();
        });
      }, wait),
    );
  }

  /** Verifies the write target, then MAC, neighbours, offloads, and a re-read. */
  #correctMac(device: ManagedDevice, deferred: boolean): void {
    if (!this.#devices.has(device.ifindex) || device.vanishing) return;
    this.#attempt(device, () => {
      const target = this.#writeTarget(device);
      // Desired after the target check: a rename within the globs may change it.
      const desired = this.#desiredMac(device);
      if (!target || !desired) return;
      if (target.mac === desired.mac) return; // someone else already put it back
      this.#ports.setLinkMac(device.ifindex, desired.mac, device.name);
      this.#counters.writes += 1;
      const restored = this.#restoreNeighbours(device);
      const latencyMs = this.#clock.now() - (device.driftSince ?? this.#eventAt);
      this.#verify(device, desired.mac, this.#ports.getLink(device.ifindex));
      this.#counters.corrections += 1;
      if (deferred) this.#counters.deferredCorrections += 1;
      this.emit('restored', {
        device: device.name,
        ifindex: device.ifindex,
        mac: desired.mac,
        neighbours: restored,
        latencyMs,
        deferred,
      });
    });
    this.#arm(device);
  }

  /**
   * The 'adopt' strategy: keep the device's MAC, put back the neighbour
   * entries its change flushed, and have the source publish the MAC.
   */
  #adoptMac(device: ManagedDevice): void {
    const source = this.#config.source;
    const desired = this.#desiredMac(device);
    if (!source?.adopt || !desired || device.vanishing) return;
    const adopt = source.adopt.bind(source);
    this.#attempt(device, () => {
      const target = this.#writeTarget(device);
      if (!target?.mac || target.mac === desired.mac) return;
      const mac = target.mac;
      const neighbours = this.#restoreNeighbours(device);
      const since = device.driftSince ?? this.#eventAt;
      adopt(device.name, mac).then(
        () => {
          if (this.#closed) return;
          device.driftSince = null;
          this.emit('adopted', {
            device: device.name,
            ifindex: device.ifindex,
            mac,
            previous: desired.mac,
            neighbours,
            latencyMs: this.#clock.now() - since,
          });
        },
        (error: unknown) => {
          this.#fail(error);
        },
      );
    });
  }

  /** After a re-dump: puts back kept entries the kernel no longer has. */
  #restoreMissing(device: ManagedDevice): void {
    if (this.dryRun) return;
    const present = new Set(
      this.#monitor.neighbours({ ifindex: device.ifindex }).map(neighbourKey),
    );
    if ([...device.neighbours.keys()].every((key) => present.has(key))) return;
    this.#attempt(device, () => {
      if (this.#writeTarget(device)) this.#restoreNeighbours(device);
    });
  }

  /** The kernel flushes permanent entries when a device goes down: put them back once it is up. */
  #restoreAfterUp(device: ManagedDevice): void {
    if (this.dryRun || device.neighbours.size === 0) return;
    this.#attempt(device, () => {
      if (this.#writeTarget(device)) this.#restoreNeighbours(device);
    });
  }

  /**
   * Runs system calls for a device. ENODEV means it is going away, which its
   * DELLINK will confirm: nothing more is done for it (undefined is returned).
   */
  #attempt<T>(device: ManagedDevice, calls: () => T): T | undefined {
    try {
      return calls();
    } catch (error) {
      if (isSystemError(error) && error.code === 'ENODEV') {
        device.vanishing = true;
        this.#cancelTimers(device);
        return undefined;
      }
      throw error;
    }
  }

  /**
   * Re-reads the device by index right before a write (S6/S8): it must still
   * exist and match the globs under its current name, which it is then known by.
   */
  #writeTarget(device: ManagedDevice): LinkInfo | null {
    const current = this.#ports.getLink(device.ifindex);
    if (!current) {
      device.vanishing = true;
      this.#cancelTimers(device);
      return null;
    }
    if (!this.#isManaged(current)) {
      const error = systemError(
        'EACCES',
        `interface not managed: ifindex ${device.ifindex} is now ${current.name}, not ${device.name}; nothing written`,
        { interface: current.name, ifindex: device.ifindex },
      );
      this.#fail(error);
      return null;
    }
    device.name = current.name;
    return current;
  }

  /** Re-installs every kept permanent entry (replace is idempotent). Returns how many. */
  #restoreNeighbours(device: ManagedDevice): number {
    const restored =
      device.neighbours.size === 0
        ? 0
        : this.#ports.replaceNeighbours(device.neighbours.list(), device.name);
    this.#counters.writes += restored;
    this.#counters.neighboursRestored += restored;
    return restored;
  }

  // --- offloads ---------------------------------------------------------------

  /** Reads the policy features' state into the device; null when the device vanished. */
  #readOffloads(device: ManagedDevice): Map<string, boolean> | null {
    const policy = this.#config.offload;
    if (!policy) return new Map();
    this.#counters.offloadChecks += 1;
    const active = this.#attempt(
      device,
      () => new Map(this.#ports.getFeatures(device.name).map((f) => [f.name, f.active])),
    );
    if (!active) return null;
    for (const name of Object.keys(policy)) device.offloads[name] = active.get(name) ?? null;
    return active;
  }

  #checkOffloads(device: ManagedDevice, reason: OffloadEvent['reason']): void {
    const policy = this.#config.offload;
    if (!policy || device.vanishing) return;
    const before = { ...device.offloads };
    const active = this.#readOffloads(device);
    if (!active) return;
    const unknown = Object.keys(policy).filter((name) => !active.has(name));
    if (unknown.length > 0 && reason !== 'drift') {
      this.#fail(
        systemError('ENODATA', `${device.name} has no feature ${unknown.join(', ')}`, {
          interface: device.name,
        }),
      );
    }
    const drifted: Record<string, boolean> = {};
    for (const [name, wanted] of Object.entries(policy)) {
      const key = offloadKey(device, name);
      if (!active.has(name) || active.get(name) === wanted) {
        if (active.has(name)) this.#cancelDeferred(device, key);
        continue;
      }
      if (reason !== 'drift') {
        if (!this.#heldBack(device, key)) drifted[name] = wanted;
        continue;
      }
      // A rewrite is a flip away from the policy; a features event while the
      // feature is still off-policy (a correction pending) is not another one.
      if (before[name] !== wanted) continue;
      this.#counters.offloadDrifts += 1;
      if (this.dryRun) {
        drifted[name] = wanted;
        continue;
      }
      this.#decide(device, key, this.#fight.recordRewrite(key), {
        correct: () => {
          this.#applyOffloads(device, { [name]: wanted }, 'drift');
        },
        contested: (rewrites) => ({
          what: 'offload',
          feature: name,
          expected: wanted ? 'on' : 'off',
          observed: wanted ? 'off' : 'on',
          rewrites,
          detail: `${name} on ${device.name} turned back ${rewrites} times within ${this.#fight.policy.windowMs} ms: something (a udev RUN rule, another agent) re-applies it; remove it or align the policy`,
        }),
      });
    }
    if (Object.keys(drifted).length === 0) return;
    if (this.dryRun) {
      this.#emitOffload(device, reason, {
        interface: device.name,
        written: false,
        legacy: false,
        requested: drifted,
        active: Object.fromEntries(
          Object.keys(drifted).map((name) => [name, active.get(name) ?? false]),
        ),
        sideEffects: [],
        notApplied: Object.keys(drifted),
      });
      return;
    }
    this.#applyOffloads(device, drifted, reason);
  }

  #applyOffloads(
    device: ManagedDevice,
    wanted: Record<string, boolean>,
    reason: OffloadEvent['reason'],
  ): void {
    if (!this.#devices.has(device.ifindex) || device.vanishing) return;
    this.#attempt(device, () => {
      if (!this.#writeTarget(device)) return;
      const result = this.#ports.setFeatures(device.name, wanted);
      if (result.written) {
        this.#counters.writes += 1;
        this.#counters.offloadApplications += 1;
      }
      for (const [name, state] of Object.entries(result.active)) device.offloads[name] = state;
      this.#emitOffload(device, reason, result);
    });
  }

  #emitOffload(
    device: ManagedDevice,
    reason: OffloadEvent['reason'],
    result: FeatureSetResult,
  ): void {
    this.emit('offload', {
      ...result,
      device: device.name,
      ifindex: device.ifindex,
      reason,
      dryRun: this.dryRun,
    });
  }

  // --- misc -------------------------------------------------------------------

  /** A source changed its answers: bring every device to them (not counted as rewrites). */
  #reconcileAll(): void {
    if (!this.#started || this.dryRun) return;
    for (const device of this.#devices.values()) {
      if (this.#isDrifted(device) && !this.#heldBack(device, macKey(device))) {
        this.#correctMac(device, false);
      }
      this.#arm(device); // the desired MAC itself may have changed
    }
  }

  #cancelDeferred(device: ManagedDevice, key: string): void {
    device.deferred.get(key)?.();
    device.deferred.delete(key);
  }

  #cancelTimers(device: ManagedDevice): void {
    for (const cancel of [...device.deferred.values(), ...device.resumeChecks.values()]) cancel();
    device.deferred.clear();
    device.resumeChecks.clear();
  }

  #deviceStatus(device: ManagedDevice): DeviceStatus {
    const link = this.#currentLink(device);
    const desired = this.#desiredMac(device);
    const status: DeviceStatus = {
      name: device.name,
      ifindex: device.ifindex,
      mac: link?.mac ?? null,
      desiredMac: desired?.mac ?? null,
      macSource: desired?.kind ?? 'none',
      addrAssignType: link ? this.#ports.addrAssignType(link) : null,
      offloads: { ...device.offloads },
      neighbours: device.neighbours.size,
      contested: this.#fight.isContested(macKey(device)),
    };
    if (desired?.kind === 'source' && this.#config.source)
      status.sourceName = this.#config.source.name;
    return status;
  }
}

function macKey(device: ManagedDevice): string {
  return `${device.ifindex}|mac`;
}

function offloadKey(device: ManagedDevice, feature: string): string {
  return `${device.ifindex}|offload|${feature}`;
}
