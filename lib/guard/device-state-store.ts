/**
 * The guard's crash state: what it keeps of each device (the pinned MAC, the permanent
 * neighbour entries) saved to the namespace's state file soon after it changes, and read
 * back at start, so that a flush that happened while the guard was down is put back.
 */
import { mkdirSync } from 'node:fs';

import type { RawControl } from '../core/binding';
import { systemError, type SystemError } from '../core/errors';
import { neighbourKey } from '../core/records';
import type { LinkInfo } from '../core/types';
import type { GuardConfig } from './config';
import type { ManagedDevice } from './device';
import type { GuardClock, GuardMonitor } from './seams';
import type { DeviceTable } from './devices';
import { STALE_AFTER_MS, StateFile, liveNetnsInodes, type PersistedDevice } from './state-file';

/** Saves are coalesced over this long: a flush and its restore are one write. */
const STATE_SAVE_DELAY_MS = 100;
/** A running guard keeps its file young and prunes the others' this often. */
const STATE_SWEEP_INTERVAL_MS = STALE_AFTER_MS / 4;

/**
 * The namespace's state file under `config.stateDir` (made if missing, stale
 * files pruned), named by the namespace's cookie: an inode is reused once a
 * namespace is gone, and another namespace's entries must never be restored.
 */
export function openStateFile(
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

export interface DeviceStateDeps {
  file: StateFile | undefined;
  clock: GuardClock;
  devices: DeviceTable;
  /** Keeps the devices' restore sets (the native layer's). */
  monitor: GuardMonitor;
  dryRun: boolean;
  fail(error: unknown): void;
}

export class DeviceStateStore {
  readonly #deps: DeviceStateDeps;
  /** What the file held at start, by ifindex, until the devices present then are taken on. */
  #persisted = new Map<number, PersistedDevice>();
  #cancelSave: (() => void) | undefined;
  #cancelSweep: (() => void) | undefined;
  /** Why the file was not read (reported once the guard is ready). */
  readonly loadProblem: Error | undefined;

  constructor(deps: DeviceStateDeps) {
    this.#deps = deps;
    let problem: Error | undefined;
    if (deps.file) {
      try {
        this.#persisted = deps.file.load();
      } catch (error) {
        problem = stateError(deps.file, 'ignored', error);
      }
    }
    this.loadProblem = problem;
    if (deps.file && !deps.dryRun) this.#scheduleSweep(deps.file);
  }

  #scheduleSweep(file: StateFile): void {
    this.#cancelSweep = this.#deps.clock.setTimeout(() => {
      file.touch();
      file.pruneStale(liveNetnsInodes());
      this.#scheduleSweep(file);
    }, STATE_SWEEP_INTERVAL_MS);
  }

  /**
   * Takes back what the state file knew of a device present at start (same
   * index and name): the pinned MAC, and the permanent entries - but only when
   * the evidence says they were flushed (none left, or the MAC was changed),
   * never to undo a single entry someone removed while the guard was down.
   */
  recover(device: ManagedDevice, link: LinkInfo | undefined): boolean {
    const saved = this.#persisted.get(device.ifindex);
    if (saved?.name !== device.name) return false;
    if (saved.pin !== null && saved.pinKind !== null && device.pinKind !== null) {
      device.pin = saved.pin;
      device.pinKind = saved.pinKind;
      device.pinFromStateFile = true;
    }
    const { devices, monitor } = this.#deps;
    const desired = devices.desiredMac(device);
    const kept = new Set(monitor.restoreSet(device.ifindex).map(neighbourKey));
    const flushed = kept.size === 0 || (desired !== null && link?.mac !== desired.mac);
    if (!flushed) return false;
    // The table's own entry wins over the one saved for its address.
    monitor.keep(
      device.ifindex,
      saved.neighbours.filter((entry) => !kept.has(neighbourKey(entry))),
    );
    return saved.neighbours.length > 0;
  }

  /** The devices present at start are taken on: what the file held is no longer needed. */
  recovered(): void {
    this.#persisted.clear();
  }

  /** Saves the devices' state soon (coalesced): after the changes of this burst. */
  schedule(): void {
    if (!this.#deps.file || this.#deps.dryRun || this.#cancelSave) return;
    this.#cancelSave = this.#deps.clock.setTimeout(() => {
      this.#save();
    }, STATE_SAVE_DELAY_MS);
  }

  /** Writes a pending save now, and sweeps no more. */
  close(): void {
    this.#cancelSweep?.();
    if (this.#cancelSave) this.#save();
  }

  #save(): void {
    this.#cancelSave?.();
    this.#cancelSave = undefined;
    const { file, devices } = this.#deps;
    if (!file) return;
    try {
      file.save(
        [...devices.values()].map((device) => {
          // Only a pin in force is worth restoring: one an explicit or source MAC overrides
          // may be a rewritten MAC pinned at start.
          const pinned =
            device.pinKind !== null && devices.desiredMac(device)?.kind === device.pinKind;
          return {
            name: device.name,
            ifindex: device.ifindex,
            pin: pinned ? device.pin : null,
            pinKind: pinned ? device.pinKind : null,
            neighbours: this.#deps.monitor.restoreSet(device.ifindex),
          };
        }),
      );
    } catch (error) {
      this.#deps.fail(stateError(file, 'not written', error));
    }
  }
}
