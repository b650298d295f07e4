/** What a guard reports: its events, its devices' status and its counters. */
import type { SystemError } from '../core/errors';
import type { OverrunEvent, ResyncEvent } from '../core/monitor-events';
import type { ChecksumErrorCounters, FeatureSetResult } from '../core/types';
import type { MacWriter, WriterEvidence } from '../udev/writer';

export type MacSourceKind = 'explicit' | 'source' | 'first-seen' | 'pinned-at-start' | 'none';

export interface DeviceStatus {
  name: string;
  ifindex: number;
  mac: string | null;
  desiredMac: string | null;
  macSource: MacSourceKind;
  /** Name of the external source when macSource is 'source'. */
  sourceName?: string;
  /** The first-seen or pinned-at-start MAC was kept in the state file by an earlier run. */
  fromStateFile?: true;
  addrAssignType: number | null;
  /** Active state of each policy feature (null when it could not be read). */
  offloads: Record<string, boolean | null>;
  /** Permanent neighbour entries the guard keeps for this device. */
  neighbours: number;
  contested: boolean;
  /** `--offload auto`: the device's last verdict (null: none yet). */
  offloadVerdict?: VerdictEvent['verdict'] | null;
}

export interface GuardReadyEvent {
  netns: string | null;
  devices: DeviceStatus[];
  dryRun: boolean;
}

/** Where a rewrite was seen: its notification, a re-dump after lost ones, or at start. */
export type RewriteFound = 'event' | 'resync' | 'start';

export interface RewriteEvent {
  device: string;
  ifindex: number;
  /** The desired MAC the device should have. */
  expected: string;
  /** The MAC it has now. */
  mac: string | null;
  /** The MAC it had just before this change (null: not known, a drift found at start). */
  previous: string | null;
  /** Who wrote the MAC, proven from what udev computes (never guessed from timing). */
  writer: MacWriter;
  /** What the writer is named on: udev's persistent value, the `.link` file, timing. */
  evidence: WriterEvidence;
  found: RewriteFound;
  /** One readable sentence naming the writer and why. */
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
   * From the drift's first notification reaching the monitor's socket (noted by a native
   * thread, so time the event loop was busy counts) to MAC and neighbours being back: the
   * same origin whether the native layer corrected in the read that saw the drift or
   * JavaScript did (after a backoff, the wait counts). For a source's new MAC, from the
   * event that brought it.
   */
  latencyMs: number;
  /** True when this correction waited for backoff. */
  deferred: boolean;
}

export interface OffloadEvent extends FeatureSetResult {
  device: string;
  ifindex: number;
  /** 'probe': `--offload auto` set it after measuring (see `verdict`); 'pod': a CNI ADD found it off. */
  reason: 'created' | 'start' | 'managed' | 'drift' | 'resync' | 'probe' | 'pod';
  dryRun: boolean;
}

/** One peer's answers in a probe round. */
export interface PathAnswer {
  address: string;
  /** ICMP echo reply (its checksum is software's: the path works). */
  echo: boolean;
  /** ICMP port unreachable for the UDP datagram: its checksum arrived right. */
  udp: boolean;
  /** RST for the SYN: its checksum arrived right. */
  tcp: boolean;
}

/** `--offload auto`'s measured verdict on a device's TX checksum offload. */
export interface VerdictEvent {
  device: string;
  ifindex: number;
  feature: string;
  /** broken: off made UDP and TCP answer; healthy: they answer as it is; else inconclusive. */
  verdict: 'healthy' | 'broken' | 'inconclusive';
  /** What the guard did: turned it off (and keeps it off), turned it back on, or left it. */
  action: 'turned-off' | 'restored-on' | 'kept-on' | 'kept-off';
  /** The feature's state now (null: unread). */
  active: boolean | null;
  detail: string;
  /** Probe rounds and probes (3 per peer per round) since the device was taken on. */
  rounds: number;
  probes: number;
  msSinceStart: number;
  /** The last rounds: the feature's state during each, and every peer's answers. */
  evidence: { offload: boolean; answers: PathAnswer[] }[];
}

/**
 * The namespace's receive checksum-error counters rose (/proc/net/snmp): datagrams or segments
 * arrived with bad checksums and were dropped. A peer sends with broken TX checksum offload;
 * which one, the counters cannot say.
 */
export interface ChecksumErrorsEvent {
  netns: string | null;
  /** The rise of each counter since the last read (null: the kernel keeps no such counter). */
  rise: ChecksumErrorCounters;
  /** The counters now (since the namespace began). */
  totals: ChecksumErrorCounters;
  /** Since the last read. */
  intervalMs: number;
  /** The first rise after a read that showed none. */
  onset: boolean;
  /** Devices whose `--offload auto` probe round was brought forward by it. */
  recheck: string[];
}

/** A node that sent packets with bad checksums, as the device's own entries name it. */
export interface ChecksumSender {
  /** The frames' source MAC: the sending node's VTEP MAC. */
  mac: string;
  /** Its VTEP address (the device's permanent ARP/NDP entry for the MAC); null when none. */
  vtep: string | null;
  /** Its underlay address (the device's FDB entry for the MAC); null when none. */
  underlay: string | null;
  /** Bad UDP and TCP checksums from it in the sample. */
  udp: number;
  tcp: number;
}

/**
 * After a rise of the counters, a sample of what arrives on a device (a packet socket, for a
 * bounded time; nothing sent) found bad checksums: who sent them, most first.
 */
export interface ChecksumSendersEvent {
  netns: string | null;
  device: string;
  /** Frames received, of which judged, of which bad. */
  frames: number;
  checked: number;
  bad: number;
  sampleMs: number;
  senders: ChecksumSender[];
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

/**
 * A rewrite past the fight policy's burst: corrected after `delayMs` (a `restored` or `offload`
 * with `deferred` follows, unless the value is right by then or the rewrites go on to a contest).
 */
export interface DeferredEvent {
  device: string;
  ifindex: number;
  what: 'mac' | 'offload';
  feature?: string;
  delayMs: number;
}

/** A device matched the globs but is not a VXLAN device: never written to. */
export interface IgnoredEvent {
  device: string;
  ifindex: number;
  /** Its rtnl link kind ('veth', 'bridge', '' for none). */
  kind: string;
  detail: string;
}

/** Another guard watches the same device (others > 0), or no longer does (others 0). */
export interface SharedEvent {
  device: string;
  /** Other guards of the device: those connected to this one, or 1 (the one holding it). */
  others: number;
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

/** Every counter at zero: a new guard's. */
export function zeroCounters(): GuardCounters {
  return {
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
}

export interface FlannelGuardEvents {
  ready: [GuardReadyEvent];
  rewrite: [RewriteEvent];
  restored: [RestoredEvent];
  adopted: [AdoptedEvent];
  offload: [OffloadEvent];
  verdict: [VerdictEvent];
  checksumErrors: [ChecksumErrorsEvent];
  checksumSenders: [ChecksumSendersEvent];
  contested: [ContestedEvent];
  resumed: [ResumedEvent];
  deferred: [DeferredEvent];
  released: [ReleasedEvent];
  ignored: [IgnoredEvent];
  shared: [SharedEvent];
  overrun: [OverrunEvent];
  resync: [ResyncEvent];
  error: [SystemError];
  close: [];
}
