/**
 * The parts a guard is opened with: its request socket (checked for write access), its
 * LinkMonitor, the state file and the watch on a named namespace - or, in tests, doubles.
 */
import { readFileSync, watch } from 'node:fs';
import { dirname } from 'node:path';

import { binding } from '../core/binding';
import { isSystemError, systemError } from '../core/errors';
import { LinkMonitor } from '../core/monitor';
import { openControl } from '../core/oneshot';
import type { GuardConfig } from './config';
import type { GuardClock, GuardMonitor } from './seams';
import { openStateFile } from './device-state-store';
import type { NameClaims } from './other-guards';
import { controlPorts, type GuardPorts } from './ports';
import type { StateFile } from './state-file';
import { UdevView } from '../udev/view';

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
  /** What udev does to MACs here, for naming writers; absent: writers are not proven. */
  udev?: UdevView;
  /** Claims names in the namespace and watches them, to learn of other guards; absent: not looked for. */
  nameClaims?: NameClaims;
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

/** Writes are allowed here (CAP_NET_ADMIN), said in the guard's words when they are not. */
function probeWrites(ports: GuardPorts, config: GuardConfig): void {
  try {
    ports.probeWriteAccess();
  } catch (error) {
    if (!isSystemError(error) || error.code !== 'EPERM') throw error;
    const where = error.netns ?? config.netns?.label ?? 'this namespace';
    throw systemError(
      'EPERM',
      `cannot correct devices in netns ${where}: CAP_NET_ADMIN is missing there (a no-op write to lo was refused); --dry-run only reads`,
      { syscall: error.syscall ?? 'setlink', capability: 'CAP_NET_ADMIN', netns: where },
    );
  }
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
  const ports = controlPorts(control, config.netns);
  try {
    if (!config.dryRun) probeWrites(ports, config);
    const state = openStateFile(config, control);
    const monitor = new LinkMonitor({
      ...(config.netns === null ? {} : { netns: config.netns }),
      ...(config.receiveBuffer === undefined ? {} : { receiveBuffer: config.receiveBuffer }),
      // Only what the globs can match is ever read (the guard adds its devices' indexes later).
      ...(config.kernelFilter
        ? { filter: { ifindexes: [], namePrefixes: config.interfaces.map((glob) => glob.prefix) } }
        : {}),
      addrAssignType: false,
      // The guard keeps and restores ARP/NDP entries (FDB entries survive a MAC change); the
      // mesh view also compares the FDB entries with what the peers publish.
      neighbours: true,
      // It acts on permanent entries and on what a process changed (#onNeighbour): the
      // kernel's own entries (NOARP multicast, resolving) stay in the mirror, without events.
      neighbourEvents: 'permanent',
    });
    const watchNetns = config.netns === null ? undefined : netnsWatcher(config.netns.path);
    // Read once at start, like the configuration; unreadable parts only weaken the evidence.
    const udev = config.udevRoot === null ? undefined : UdevView.open(config.udevRoot);
    const netns = config.netns;
    const nameClaims: NameClaims = {
      claim: (name) =>
        netns === null ? binding.claimName(name) : binding.claimName(name, netns.path, netns.label),
      watch: (claim, onOthers) => new binding.ClaimWatch(claim.fd, claim.held, onOthers),
    };
    return {
      monitor,
      ports,
      nameClaims,
      ...(watchNetns ? { watchNetns } : {}),
      ...(udev ? { udev } : {}),
      ...state,
    };
  } catch (error) {
    ports.close();
    throw error;
  }
}
