/**
 * What LinkMonitor tells: its events and their payloads (the corrections the native core made,
 * the arrival of each notification), the async iteration's list, and each native item as the
 * event it tells of.
 */
import type { EventEmitter } from 'node:events';

import type {
  RawCorrection,
  RawLinkItem,
  RawMirroredLink,
  RawMonitorStats,
  RawNeighbourItem,
} from './binding';
import { toLinkInfo, toNeighbourInfo } from './records';
import type { SystemError } from './errors';
import type { LinkInfo, NeighbourInfo } from './types';

export type ChangeSource = 'event' | 'resync';

/**
 * A correction the native layer made for an armed device (see arm()) in the
 * same read that saw the drift, before the event reached JS.
 */
export interface NativeCorrection {
  /** The MAC written back. */
  mac: string;
  /** Permanent neighbour entries re-added. */
  neighbours: number;
  /** From the notification's arrival to its reading (time the event loop was busy). */
  queuedMs: number;
  /**
   * From reading the notification to the MAC write's answer, which is read with the first
   * neighbour entries' (the entries are sent without waiting for it).
   */
  macMs: number;
  /** ... to the last neighbour entry's acknowledgement. */
  doneMs: number;
  /**
   * Set when a write failed: the MAC write (the entries are written all the same, and the
   * table read again), or an entry's (the others stay written: `neighbours` counts them).
   */
  error?: SystemError;
  /** The device re-read after the writes: null when it is gone. */
  after: { name: string; mac: string | null } | null;
  /**
   * The kernel's notification of the MAC write itself came in the same read and changed
   * nothing else: it is not reported as another `linkChanged` (links() shows the device as
   * corrected). False when it comes later, or with other changes: then it is its own event.
   */
  echoed: boolean;
}

/**
 * When the kernel's notification reached the monitor's socket, in ms of
 * CLOCK_MONOTONIC (`Number(process.hrtime.bigint()) / 1e6`): noted by a native
 * thread, so it holds even when the event loop was busy, or the report of a
 * correction was held (see reportIntervalMs). The origin of the guard's latencies.
 */
export interface Arrival {
  receivedAt: number;
}

export interface LinkAddedEvent extends Partial<Arrival> {
  link: LinkInfo;
  source: ChangeSource;
  /** The kernel announced the device's creation (not just first seen by us). */
  created: boolean;
}

/** IFLA_EVENT: why the kernel re-announced a device whose state may be unchanged. */
export type LinkKernelEvent =
  'reboot' | 'features' | 'bonding-failover' | 'notify-peers' | 'igmp-resend' | 'bonding-options';

export const KERNEL_EVENTS: readonly (LinkKernelEvent | null)[] = [
  null,
  'reboot',
  'features',
  'bonding-failover',
  'notify-peers',
  'igmp-resend',
  'bonding-options',
];

export interface LinkChangedEvent extends Partial<Arrival> {
  link: LinkInfo;
  previous: LinkInfo;
  source: ChangeSource;
  /** Set when the kernel said why it re-announced the device ('features': offloads changed). */
  kernelEvent: LinkKernelEvent | null;
  /** Set when an armed correction answered this change already. */
  correction?: NativeCorrection;
}

export interface LinkRemovedEvent {
  link: LinkInfo;
  source: ChangeSource;
}

export interface NeighbourAddedEvent {
  neighbour: NeighbourInfo;
  source: ChangeSource;
  /** Netlink port id of the process whose request made the change (0 when the kernel does not say). */
  portid: number;
}

export interface NeighbourChangedEvent extends NeighbourAddedEvent {
  previous: NeighbourInfo;
}

/**
 * Why an entry went away. 'flush': the kernel dropped it because its device's
 * MAC changed or the device went down (it was not removed on purpose);
 * 'device-removed': its device was deleted; 'resync': it was missing from a
 * re-dump after lost notifications; 'deleted': anything else.
 */
export type NeighbourRemovalCause = 'deleted' | 'flush' | 'device-removed' | 'resync';

export interface NeighbourRemovedEvent {
  neighbour: NeighbourInfo;
  source: ChangeSource;
  cause: NeighbourRemovalCause;
  portid: number;
}

export interface OverrunEvent {
  /** 'ENOBUFS': the kernel dropped notifications; 'queue': an async iterator fell behind. */
  cause: 'ENOBUFS' | 'truncated' | 'queue';
}

export interface ResyncEvent {
  phase: 'begin' | 'end';
  /** 'correction': a native MAC write failed after the kernel had taken its re-adds. */
  reason?: 'initial' | 'overrun' | 'requested' | 'correction';
  /** End only: every dump completed without interruption, so removals were applied. */
  consistent?: boolean;
}

export interface MonitorWarning {
  code: string;
  message: string;
}

export interface LinkMonitorEvents {
  ready: [];
  linkAdded: [LinkAddedEvent];
  linkChanged: [LinkChangedEvent];
  linkRemoved: [LinkRemovedEvent];
  neighbourAdded: [NeighbourAddedEvent];
  neighbourChanged: [NeighbourChangedEvent];
  neighbourRemoved: [NeighbourRemovedEvent];
  overrun: [OverrunEvent];
  resync: [ResyncEvent];
  warning: [MonitorWarning];
  error: [SystemError];
  close: [];
}

/** One event as yielded by async iteration: its name and its payload. */
export type LinkMonitorEvent = {
  [Name in Exclude<keyof LinkMonitorEvents, 'close'>]: LinkMonitorEvents[Name] extends [
    infer Payload,
  ]
    ? { type: Name } & Payload
    : { type: Name };
}[Exclude<keyof LinkMonitorEvents, 'close'>];

export interface LinkMonitorStats extends RawMonitorStats {
  queueOverruns: number;
}

/** Every LinkMonitor event but `close`: what async iteration yields. */
export const LINK_MONITOR_EVENTS = [
  'ready',
  'linkAdded',
  'linkChanged',
  'linkRemoved',
  'neighbourAdded',
  'neighbourChanged',
  'neighbourRemoved',
  'overrun',
  'resync',
  'warning',
  'error',
] as const satisfies readonly (keyof LinkMonitorEvents)[];

export function toNativeCorrection(raw: RawCorrection): NativeCorrection {
  return {
    mac: raw.mac,
    neighbours: raw.neighbours,
    queuedMs: raw.queuedNs / 1e6,
    macMs: raw.macNs / 1e6,
    doneMs: raw.doneNs / 1e6,
    after: raw.afterName === '' ? null : { name: raw.afterName, mac: raw.afterMac },
    echoed: raw.echoed === true,
    ...(raw.error ? { error: raw.error } : {}),
  };
}

/** Emits the event a native item tells of (nothing for a link item without a change). */
export function emitChange(
  target: EventEmitter<LinkMonitorEvents>,
  item: RawLinkItem | RawNeighbourItem,
  extra: Partial<Arrival> & { correction?: NativeCorrection } = {},
): void {
  const arrival = extra.receivedAt === undefined ? {} : { receivedAt: extra.receivedAt };
  if (item.kind === 'neigh') {
    const neighbour = toNeighbourInfo(item.record);
    const source: ChangeSource = item.fromDump ? 'resync' : 'event';
    const { portid } = item;
    if (item.change === 'removed') {
      target.emit('neighbourRemoved', {
        neighbour,
        source,
        cause: item.cause ?? 'deleted',
        portid,
      });
    } else if (item.change === 'added') {
      target.emit('neighbourAdded', { neighbour, source, portid });
    } else if (item.previous !== undefined) {
      target.emit('neighbourChanged', {
        neighbour,
        previous: toNeighbourInfo(item.previous),
        source,
        portid,
      });
    }
    return;
  }
  const { record, change } = item;
  if (record === undefined || change === undefined) return;
  const source: ChangeSource = item.fromDump === true ? 'resync' : 'event';
  const link = linkInfo(record);
  if (change === 'removed') {
    target.emit('linkRemoved', { link, source });
  } else if (change === 'added') {
    target.emit('linkAdded', { link, source, created: item.created === true, ...arrival });
  } else if (item.previous !== undefined) {
    target.emit('linkChanged', {
      link,
      previous: linkInfo(item.previous),
      source,
      kernelEvent: KERNEL_EVENTS[record.event ?? 0] ?? null,
      ...arrival,
      ...(extra.correction ? { correction: extra.correction } : {}),
    });
  }
}

export function linkInfo(raw: RawMirroredLink): LinkInfo {
  return toLinkInfo(raw, raw.addrAssignType);
}
