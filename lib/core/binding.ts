/**
 * The native addon's raw surface, typed once. Nothing outside this file sees an untyped value
 * from the addon; the public API in the other modules turns these records into friendlier shapes.
 */
import { join } from 'node:path';

import nodeGypBuild from 'node-gyp-build';

import type { SystemError } from './errors';
import type { ChecksumErrorCounters, ChecksumSample } from './types';

export interface RawVxlan {
  vni?: number;
  port?: number;
  local?: string | null;
  underlayIfindex?: number;
  learning?: boolean;
}

export interface RawLink {
  deleted: boolean;
  ifindex: number;
  name: string;
  nameTooLong?: true;
  mac: string | null;
  macError?: string;
  flags: number;
  deviceType: number;
  /** ifi_change: 0xffffffff when the kernel announces a new device. */
  changeMask: number;
  mtu?: number;
  operstate?: number;
  master?: number;
  lowerIfindex?: number;
  linkNetnsid?: number;
  event?: number;
  kind: string;
  vxlan?: RawVxlan;
}

export interface RawNeighbour {
  deleted: boolean;
  family: number;
  ifindex: number;
  state: number;
  flags: number;
  type: number;
  destination: string | null;
  lladdr: string | null;
  lladdrError?: string;
  vni?: number;
  master?: number;
}

/**
 * Neighbour and FDB entries as columns (entry i is element i of each): thousands of entries
 * cross the boundary as a few objects. -1 in `vni` and `master`: absent.
 */
export interface RawNeighbourColumns {
  family: Uint8Array;
  ifindex: Int32Array;
  state: Uint16Array;
  flags: Uint8Array;
  type: Uint8Array;
  vni: Int32Array;
  master: Int32Array;
  destination: (string | null)[];
  lladdr: (string | null)[];
}

/** A correction the native layer made in the read that saw the drift. */
export interface RawCorrection {
  mac: string;
  neighbours: number;
  /** From the datagram's arrival (see RawLinkItem.arrivalMs) to its reading, in ns. */
  queuedNs: number;
  /** From reading the datagram to the ACK of the MAC write, in ns. */
  macNs: number;
  /** ... to the ACK of the last neighbour entry. */
  doneNs: number;
  error?: SystemError;
  /** The device re-read after the writes: its name ('' when gone) and MAC. */
  afterName: string;
  afterMac: string | null;
  echoed?: true;
}

/** A link as the native mirror keeps it: the record and its addr_assign_type (null: unknown). */
export interface RawMirroredLink extends RawLink {
  addrAssignType: number | null;
}

export type RawChange = 'added' | 'changed' | 'removed';

/**
 * What one message changed in the native mirror, or (without `change`) only that it disarmed
 * the device: its correction was made, or the device is no longer the one armed.
 */
export interface RawLinkItem {
  kind: 'link';
  ifindex: number;
  change?: RawChange;
  fromDump?: boolean;
  record?: RawMirroredLink;
  /** changed only. */
  previous?: RawMirroredLink;
  /** added only: the kernel announced the device's creation. */
  created?: true;
  correction?: RawCorrection;
  disarmed?: true;
  /**
   * When its datagram arrived (ms, process.hrtime's clock): the batch's first one's arrival, else
   * when the read that returned it ended. Absent for a change another implies.
   */
  arrivalMs?: number;
}

export interface RawNeighbourItem {
  kind: 'neigh';
  change: RawChange;
  fromDump: boolean;
  portid: number;
  record: RawNeighbour;
  /** changed only. */
  previous?: RawNeighbour;
  /** removed only. */
  cause?: 'deleted' | 'flush' | 'device-removed' | 'resync';
}

export type RawMonitorItem =
  | RawLinkItem
  | RawNeighbourItem
  | { kind: 'ready' }
  | { kind: 'resync'; phase: 'begin'; reason: 'initial' | 'overrun' | 'requested' | 'correction' }
  | { kind: 'resync'; phase: 'end'; consistent: boolean }
  | { kind: 'overrun'; cause: 'ENOBUFS' | 'truncated' }
  | { kind: 'warning'; code: string; message: string }
  | { kind: 'fatal'; error: SystemError };

export interface RawMonitorStats {
  /** Batches handed to JS, and corrections whose report was held for a later batch. */
  reports: number;
  heldCorrections: number;
  wakeups: number;
  datagrams: number;
  messages: number;
  overruns: number;
  resyncs: number;
  dumpRetries: number;
  inconsistentDumps: number;
  foreignSenderDrops: number;
  truncatedDrops: number;
  malformed: number;
  staleReplies: number;
  /** Neighbour notifications of a native correction (its flush, its re-adds), not passed on. */
  correctionEchoes: number;
  /** A native correction's own RTM_NEWLINK, folded into the change that carries it. */
  foldedEchoes: number;
  /** An armed drift the re-read before writing found put back already: nothing written. */
  staleRecords: number;
  /** An armed drift with nothing read or queued behind it: written without a re-read. */
  currentRecords: number;
  /** A native correction reported with a later rewrite its write answered too (queued before its echo). */
  carriedCorrections: number;
  /**
   * An FDB remote notified beside another remote of its MAC: a VXLAN device tells a `replace`
   * that moved the remote and an `append` alike, so the tables are dumped again.
   */
  fdbRemoteResyncs: number;
  receiveBuffer: number;
  /** Links and neighbour/FDB entries in the native mirror. */
  links: number;
  neighbours: number;
}

export interface RawNetnsOptions {
  /** Path of the namespace file; omitted for the process's own. */
  netns?: string;
  /** How errors name the namespace. */
  netnsLabel?: string;
}

export interface RawMonitorOptions extends RawNetnsOptions {
  receiveBuffer?: number;
  /** 'ip': ARP and NDP entries only, no FDB. */
  neighbours?: boolean | 'ip';
  /** 'permanent': only changes with a permanent entry on either side, or asked for by a process. */
  neighbourEvents?: 'all' | 'permanent';
  /** Read addr_assign_type from sysfs (own namespace only). */
  addrAssignType?: boolean;
  /** Corrections already made are reported at most this often while they keep coming (0..1000; 0: at once). */
  reportIntervalMs?: number;
}

/**
 * How many rewrites an arming answers: at most `limit` within any `windowMs`, counting the
 * rewrites at `recent` (ms of process.hrtime's clock) and each one it answers.
 */
export interface RawAllowance {
  limit: number;
  windowMs: number;
  recent: readonly number[];
}

export interface RawLinkFilter {
  ifindexes: number[];
  namePrefixes: string[];
}

export interface RawMonitor {
  start(): void;
  resync(): void;
  setFilter(filter: RawLinkFilter | null): void;
  /** Arms a correction for a kept device (see keep()); throws EINVAL for another. */
  arm(
    ifindex: number,
    target: {
      name: string;
      mac: Buffer;
      /** Corrections made before the caller decides again (without it: one). */
      allowance?: RawAllowance;
    },
  ): void;
  /** Keeps the device's restore set (its permanent ARP/NDP entries, followed), and `recovered`. */
  keep(ifindex: number, recovered?: RawNeighbourEntries): void;
  /** Stops keeping the device's restore set, and disarms it. */
  release(ifindex: number): void;
  /** The device's restore set (empty when none is kept). */
  restoreSet(ifindex: number): RawNeighbourColumns;
  disarm(ifindex: number): void;
  ref(): void;
  unref(): void;
  stats(): RawMonitorStats;
  /** The mirror as of the last batch handed over (what was read since is left out). */
  links(): RawMirroredLink[];
  getLink(key: number | string): RawMirroredLink | undefined;
  neighbours(ifindex?: number): RawNeighbourColumns;
  resyncing(): boolean;
  /** Reports the corrections held for the next report now. */
  flush(): void;
  close(): void;
}

export interface RawFeature {
  name: string;
  available: boolean;
  requested: boolean;
  active: boolean;
  fixed: boolean;
}

export interface RawFeatureTable {
  features: RawFeature[];
  legacy: boolean;
}

export interface RawFeatureRequest {
  name: string;
  enable: boolean;
}

export interface RawSetFeaturesOutcome {
  written: boolean;
  legacy: boolean;
  requested: RawFeatureRequest[];
  active: RawFeatureRequest[];
  sideEffects: { name: string; before: boolean; after: boolean }[];
  notApplied: string[];
}

export interface RawDriverInfo {
  driver: string;
  version: string;
  firmwareVersion: string;
  busInfo: string;
}

/**
 * Entries to write, as columns (entry i is element i of each), so that thousands cross the
 * boundary as a few objects: `lladdr` in the canonical text form, `destination` null for an FDB
 * entry without one.
 */
export interface RawNeighbourEntries {
  family: Uint8Array;
  ifindex: Int32Array;
  state: Uint16Array;
  flags: Uint8Array;
  destination: (string | null)[];
  lladdr: string[];
}

export interface RawNeighbourEntry {
  family: number;
  ifindex: number;
  /** IPv4 or IPv6 address; null for an FDB entry without a destination. */
  destination: string | null;
  lladdr: Buffer;
  state: number;
  flags: number;
}

/** Every method is synchronous, or runs on the thread pool when `async` is true. */
export interface RawControl {
  readonly netnsInode: number;
  readonly ownNetns: boolean;
  /** SO_NETNS_COOKIE (decimal): unique for the system's uptime; null on kernels before 5.14. */
  readonly netnsCookie: string | null;
  dumpLinks(async?: false): RawLink[];
  dumpLinks(async: true): Promise<RawLink[]>;
  dumpNeighbours(family: number, async?: false): RawNeighbour[];
  dumpNeighbours(family: number, async: true): Promise<RawNeighbour[]>;
  getLink(ifindex: number, async?: false): RawLink;
  getLink(ifindex: number, async: true): Promise<RawLink>;
  getLinkByName(name: string, async?: false): RawLink;
  getLinkByName(name: string, async: true): Promise<RawLink>;
  setLinkAddress(ifindex: number, mac: Buffer, interfaceName?: string, async?: false): void;
  setLinkAddress(ifindex: number, mac: Buffer, interfaceName: string, async: true): Promise<void>;
  replaceNeighbour(entry: RawNeighbourEntry, interfaceName?: string, async?: false): void;
  replaceNeighbour(entry: RawNeighbourEntry, interfaceName: string, async: true): Promise<void>;
  deleteNeighbour(entry: RawNeighbourEntry, interfaceName?: string, async?: false): void;
  deleteNeighbour(entry: RawNeighbourEntry, interfaceName: string, async: true): Promise<void>;
  replaceNeighbours(entries: RawNeighbourEntries, interfaceName?: string, async?: false): number;
  replaceNeighbours(
    entries: RawNeighbourEntries,
    interfaceName: string,
    async: true,
  ): Promise<number>;
  probeWriteAccess(async?: false): void;
  probeWriteAccess(async: true): Promise<void>;
  getFeatures(name: string, async?: false): RawFeatureTable;
  getFeatures(name: string, async: true): Promise<RawFeatureTable>;
  setFeatures(name: string, wanted: Record<string, boolean>, async?: false): RawSetFeaturesOutcome;
  setFeatures(
    name: string,
    wanted: Record<string, boolean>,
    async: true,
  ): Promise<RawSetFeaturesOutcome>;
  getDriverInfo(name: string, async?: false): RawDriverInfo;
  getDriverInfo(name: string, async: true): Promise<RawDriverInfo>;
  readAddrAssignType(name: string, ifindex: number, mac: string): number | null;
  /** The namespace's checksum-error counters (native/snmp_counters.h); its files open on first use. */
  readChecksumErrors(): ChecksumErrorCounters;
  close(): void;
}

export interface RawParsedMessage {
  type: number;
  flags: number;
  seq: number;
  portid: number;
  link?: RawLink;
  neigh?: RawNeighbour;
  ack?: { error: number; extack: string };
  done?: { error: number };
  malformed?: string;
}

/** What the monitor hands its batches to: `arrivalMs` in ms of process.hrtime's clock. */
export type RawBatchListener = (batch: RawMonitorItem[], arrivalMs: number) => void;

/**
 * The kernel a ScriptedMonitor writes to (its corrections): each call answers as the kernel
 * would, and queues what the kernel would send for it (through feed()).
 */
export interface RawScriptedKernel {
  /** The RTM_NEWLINK the kernel answers an RTM_GETLINK with; null: no such device. */
  getLink(ifindex: number): Buffer | null;
  /** Throws a SystemError (negative `errno`) to fail. */
  setLinkAddress(ifindex: number, mac: Buffer): void;
  replaceNeighbour(entry: {
    family: number;
    ifindex: number;
    destination: Buffer;
    lladdr: Buffer;
    state: number;
    flags: number;
  }): void;
  /** Answers a request the monitor sends (a dump) through feed(), at once, as the kernel does. */
  answer?(request: Buffer): void;
  /** Whether notifications for the monitor are queued but not fed yet (a socket holds them). */
  unfed?(): boolean;
}

export interface RawScriptedMonitorOptions {
  neighbours?: boolean | 'ip';
  neighbourEvents?: 'all' | 'permanent';
  /** The port id its dump requests' replies are addressed to. */
  portid: number;
  /** The port id its corrections' notifications name. */
  writerPortid: number;
  /** false: arm() arms nothing (the guard's own corrections alone). */
  corrections?: boolean;
  /** The core's time in ms (arrivals, the timings of its corrections); the real clock without. */
  clock?: () => number;
}

/**
 * The real monitor core on scripted input (tests): what Monitor is, read when the script says.
 * Batches go to onBatch synchronously, from read().
 */
export interface RawScriptedMonitor extends RawMonitor {
  feed(datagram: Buffer): void;
  /** The kernel dropped notifications here (ENOBUFS). */
  overrun(): void;
  /** Reads everything queued; the number of batches handed over. */
  read(): number;
  /** What the device is armed with and the restore set the core keeps for it. */
  armed(ifindex: number): { name: string; mac: string; neighbours: string[] } | undefined;
}

export interface RawBinding {
  Monitor: new (options: RawMonitorOptions, onBatch: RawBatchListener) => RawMonitor;
  ScriptedMonitor: new (
    options: RawScriptedMonitorOptions,
    kernel: RawScriptedKernel,
    onBatch: RawBatchListener,
  ) => RawScriptedMonitor;
  Control: new (options?: RawNetnsOptions) => RawControl;
  /** Takes a claim's descriptor; `onOthers` hears how many other guards it knows of, on change. */
  ClaimWatch: new (
    fd: number,
    held: boolean,
    onOthers: (others: number) => void,
  ) => { close(): void };
  parseDatagram(bytes: Buffer): {
    messages: RawParsedMessage[];
    error?: { offset: number; reason: string };
  };
  netnsInode(path?: string): number;
  /** A write that never blocks (RWF_NOWAIT): bytes written, or a negative errno (-EAGAIN, -EOPNOTSUPP). */
  writeNoWait(fd: number, bytes: Buffer): number;
  /**
   * One ICMP echo, UDP datagram and TCP SYN to each address (at most 64) through `device`, on
   * the thread pool; what answered within `timeoutMs` (native/path_probe.h).
   */
  probePaths(options: RawProbeOptions, addresses: readonly string[]): Promise<RawPathAnswer[]>;
  /**
   * Reads what arrives on `device` for `timeoutMs` or `maxFrames` frames, on the thread pool, and
   * judges each UDP and TCP checksum from its bytes (native/checksum_sample.h); the bad ones per
   * source MAC (at most 256 of them).
   */
  sampleChecksums(options: RawSampleOptions): Promise<ChecksumSample>;
  /** Claims `name` (native/name_claim.h): held, listening; else connected, or -1 (queue full). */
  claimName(name: string, netns?: string, netnsLabel?: string): { fd: number; held: boolean };
  /** Who is at the other end of a connected unix socket, as connect() recorded it (SO_PEERCRED). */
  peerCredentials(fd: number): { pid: number; uid: number; gid: number };
}

export interface RawProbeOptions extends RawNetnsOptions {
  device: string;
  timeoutMs: number;
  udpPort: number;
  tcpPort: number;
  echoId: number;
}

export interface RawSampleOptions extends RawNetnsOptions {
  device: string;
  timeoutMs: number;
  maxFrames: number;
}

export interface RawPathAnswer {
  address: string;
  echo: boolean;
  udp: boolean;
  tcp: boolean;
}

/** The package's root: build/ and prebuilds/ are there. */
const PACKAGE_ROOT = join(__dirname, '..', '..', '..');

let loaded: RawBinding | undefined;

/**
 * Loads the addon on first use: a build of this checkout (build/Release), else the prebuilt
 * binary for this platform, architecture and libc from prebuilds/ (node-gyp-build; `bindings`
 * only looks in build folders). Until then nothing native is loaded: --help works without it.
 */
function loadBinding(): RawBinding {
  if (loaded) return loaded;
  try {
    loaded = nodeGypBuild(PACKAGE_ROOT) as RawBinding;
  } catch (error) {
    const reason = (error instanceof Error ? error.message : String(error)).split('\n')[0];
    throw Object.assign(
      new Error(
        `the native addon cannot be loaded (${reason}): no prebuilt binary matches ${process.platform}-${process.arch} and none was built; with make, g++ and python3 installed, run npm rebuild flannel-guard`,
        { cause: error },
      ),
      { code: 'ERR_ADDON_UNAVAILABLE' },
    );
  }
  return loaded;
}

export const binding: RawBinding = new Proxy({} as RawBinding, {
  get: (_target, key) => Reflect.get(loadBinding(), key) as unknown,
});
