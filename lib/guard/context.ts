/**
 * The context each part of a guard is built with: configuration, sockets, counters, reports,
 * fight control and the device table.
 */
import type { GuardConfig } from './config';
import type { DeviceTable } from './devices';
import type { GuardCounters } from './events';
import type { FightController } from './fight-control';
import type { GuardPorts } from './ports';
import type { GuardClock, GuardEmit, GuardMonitor } from './seams';
import type { UdevView } from '../udev/view';

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
