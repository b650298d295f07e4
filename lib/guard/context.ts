/**
 * What the parts of a guard share: the device record, the monitor and clock a test may
 * replace, and the context each part is built with (configuration, sockets, counters,
 * reports, fight control, the device table).
 */
import type { EventEmitter } from 'node:events';

import { monotonicMs } from '../core/clock';
import type { CorrectionAllowance, LinkFilter, LinkMonitorEvents } from '../core/monitor';
import type { LinkInfo, NeighbourInfo } from '../core/types';
import type { GuardConfig } from './config';
import type { DeviceTable } from './devices';
import type { FlannelGuardEvents, GuardCounters, MacSourceKind } from './events';
import type { FightController } from './fight-control';
import type { GuardPorts } from './ports';
import type { UdevView } from '../udev/view';

/** What the guard needs of a monitor: LinkMonitor, or a scripted stand-in in unit tests. */
export interface GuardMonitor extends EventEmitter<LinkMonitorEvents> {
  readonly isReady: boolean;
  links(): LinkInfo[];
  getLink(ifindex: number): LinkInfo | undefined;
  /** See LinkMonitor.rewrittenLater. */
  rewrittenLater(ifindex: number): boolean;
  setFilter?(filter: LinkFilter | null): void;
  arm(
    ifindex: number,
    target: { name: string; mac: string; allowance?: CorrectionAllowance },
  ): void;
  disarm(ifindex: number): void;
  /** Keeps the device's restore set (see LinkMonitor.keep), with `recovered` entries taken in. */
  keep(ifindex: number, recovered?: readonly NeighbourInfo[]): void;
  /** Stops keeping it, and disarms the device. */
  release(ifindex: number): void;
  /** The permanent ARP/NDP entries a correction of the device puts back (see LinkMonitor.restoreSet). */
  restoreSet(ifindex: number): NeighbourInfo[];
  /** Reports held corrections now (see LinkMonitorOptions.reportIntervalMs). */
  flush?(): void;
  neighbours(filter?: { ifindex?: number }): NeighbourInfo[];
  ready(): Promise<void>;
  ref(): unknown;
  unref(): unknown;
  close(): void;
}

export interface GuardClock {
  now(): number;
  setTimeout(callback: () => void, ms: number): () => void;
}

export const realClock: GuardClock = {
  now: () => monotonicMs(),
  setTimeout(callback, ms) {
    // A pending correction must not keep a process alive on its own: the monitor's socket does.
    const timer = setTimeout(callback, ms).unref();
    return () => clearTimeout(timer);
  },
};

export type GuardEmit = EventEmitter<FlannelGuardEvents>['emit'];

export interface ManagedDevice {
  ifindex: number;
  name: string;
  /** first-seen / pinned-at-start MAC. */
  pin: string | null;
  pinKind: 'first-seen' | 'pinned-at-start' | null;
  /** The pin was taken from the state file of an earlier run (pinned then, as pinKind says). */
  pinFromStateFile: boolean;
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
  /**
   * A drift found put back when its correction came, but with a later change to the MAC in
   * the batch being handled: reported when that change is (its answer comes after it).
   */
  answerDue: { since: number; neighbours: number } | null;
  /** Set on ENODEV: the device is going away; nothing is written until its DELLINK. */
  vanishing: boolean;
  /**
   * The source changed its answer while the drift was held back (a contest, a backoff): its
   * answer is newer than the device's MAC, so `adopt` corrects to it instead of publishing the
   * MAC. Cleared by the next rewrite and when the drift ends.
   */
  sourceNewer: boolean;
  /**
   * This guard's adoptions for the device: the MACs it asked the source to store that are in
   * flight, and the last one stored. The source answering one of them is the echo of our own
   * adoption, never an answer newer than the device's MAC.
   */
  adoptions: { inFlight: string[]; stored: string | null };
  /** Last known active state of each policy feature. */
  offloads: Record<string, boolean | null>;
  /** What `--offload auto` measured this device needs (null: nothing, or not measured). */
  offloadPolicy: Readonly<Record<string, boolean>> | null;
}

export interface DesiredMac {
  mac: string;
  kind: MacSourceKind;
}

export interface GuardContext {
  readonly config: GuardConfig;
  readonly monitor: GuardMonitor;
  readonly ports: GuardPorts;
  readonly clock: GuardClock;
  readonly counters: GuardCounters;
  readonly emit: GuardEmit;
  readonly fight: FightController;
  readonly devices: DeviceTable;
  /** What udev does to MACs here (absent: writers are not proven). */
  readonly udev: UdevView | undefined;
  /** Reports a failure as an `error` event (counted). */
  fail(error: unknown): void;
  /** Whether the guard has been closed (an answer that arrives late is dropped). */
  isClosed(): boolean;
}
