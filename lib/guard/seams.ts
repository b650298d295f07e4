/**
 * What a guard's parts are given that a test may replace: the monitor (LinkMonitor, or the
 * scripted one), the clock, and the emitter the parts report through.
 */
import type { EventEmitter } from 'node:events';

import { monotonicMs } from '../core/clock';
import type { CorrectionAllowance, LinkFilter } from '../core/monitor';
import type { LinkMonitorEvents } from '../core/monitor-events';
import type { LinkInfo, NeighbourInfo } from '../core/types';
import type { FlannelGuardEvents } from './events';

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
