/**
 * What the guard knows that the kernel may lose while the guard is down: the
 * permanent neighbour entries of each managed device (a MAC change flushes
 * them) and the MAC it pinned. Kept in one file per network namespace under
 * a state folder (default /run/flannel-guard: tmpfs, gone at reboot, when
 * the devices are gone too), written atomically after changes, read once at
 * start. The file is untrusted on reading: bounded, strictly validated, and
 * ignored whole when anything in it is wrong.
 */
import { lutimesSync, readdirSync, readFileSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';

import { NUD_PERMANENT } from '../core/constants';
import { readRegularFile, writeFileReplacing } from '../core/files';
import type { NeighbourInfo } from '../core/types';
import { ipVersion, parseMac, validateInterfaceName } from '../core/validate';

/** A 5000-node cluster's entries (two per peer, with IPv6) fit several times over. */
export const MAX_STATE_BYTES = 16 * 1024 * 1024;
export const MAX_PERSISTED_NEIGHBOURS = 20_000;
const MAX_DEVICES = 64;
const STATE_VERSION = 1;
/**
 * Files of namespaces seen held nowhere are removed once this old (a guard's
 * start, and every so long while it runs): a namespace held where this
 * process cannot see (another mount or PID namespace) keeps its file while its
 * guard writes it.
 */
export const STALE_AFTER_MS = 10 * 60 * 1000;

export interface PersistedDevice {
  name: string;
  ifindex: number;
  /** The MAC the guard pinned and enforced, or null. */
  pin: string | null;
  /** How it was pinned: seen at the device's creation, or current when the guard started. */
  pinKind: 'first-seen' | 'pinned-at-start' | null;
  neighbours: readonly NeighbourInfo[];
}

interface StateDocument {
  version: number;
  netnsCookie: string;
  devices: PersistedDevice[];
}

function fail(reason: string): never {
  throw new Error(reason);
}

function parseNeighbour(value: unknown, ifindex: number): NeighbourInfo {
  const entry = value as Partial<Record<keyof NeighbourInfo, unknown>> | null;
  if (typeof entry !== 'object' || entry === null) fail('a neighbour is not an object');
  const family = entry.family;
  if (family !== 'inet' && family !== 'inet6') fail(`neighbour family ${String(family)}`);
  const destination = entry.destination;
  if (typeof destination !== 'string' || ipVersion(destination) !== (family === 'inet' ? 4 : 6)) {
    fail(`neighbour destination ${JSON.stringify(destination)}`);
  }
  const lladdr = parseMac(entry.lladdr, `lladdr of ${destination}`);
  const flags = entry.flags;
  if (typeof flags !== 'number' || !Number.isInteger(flags) || flags < 0 || flags > 0xff) {
    fail(`neighbour flags ${String(flags)}`);
  }
  return {
    family,
    ifindex,
    destination,
    lladdr,
    state: NUD_PERMANENT,
    states: ['permanent'],
    permanent: true,
    flags,
    vni: null,
    master: null,
  };
}

function parseDevice(value: unknown): PersistedDevice {
  const device = value as Partial<Record<keyof PersistedDevice, unknown>> | null;
  if (typeof device !== 'object' || device === null) fail('a device is not an object');
  const name = validateInterfaceName(device.name, 'device name');
  const ifindex = device.ifindex;
  if (typeof ifindex !== 'number' || !Number.isInteger(ifindex) || ifindex <= 0) {
    fail(`ifindex ${String(ifindex)}`);
  }
  const pin = device.pin === null ? null : parseMac(device.pin, `pin of ${name}`);
  const pinKind = device.pinKind;
  if (pinKind !== 'first-seen' && pinKind !== 'pinned-at-start' && pinKind !== null) {
    fail(`pinKind ${JSON.stringify(pinKind)}`);
  }
  if ((pin === null) !== (pinKind === null)) fail(`pin and pinKind of ${name}`);
  if (!Array.isArray(device.neighbours) || device.neighbours.length > MAX_PERSISTED_NEIGHBOURS) {
    fail(`neighbours of ${name}: an array of at most ${MAX_PERSISTED_NEIGHBOURS}`);
  }
  return {
    name,
    ifindex,
    pin,
    pinKind,
    neighbours: device.neighbours.map((entry) => parseNeighbour(entry, ifindex)),
  };
}

/** The devices of a state file's text, for the namespace `netnsCookie`; throws what is wrong. */
export function parseState(text: string, netnsCookie: string): PersistedDevice[] {
  let document: unknown;
  try {
    document = JSON.parse(text);
  } catch (error) {
    fail(`not JSON (${(error as Error).message})`);
  }
  const state = document as Partial<StateDocument> | null;
  if (typeof state !== 'object' || state === null) fail('not an object');
  if (state.version !== STATE_VERSION) fail(`version ${String(state.version)}`);
  if (state.netnsCookie !== netnsCookie) fail('written for another network namespace');
  if (!Array.isArray(state.devices) || state.devices.length > MAX_DEVICES) {
    fail(`devices: an array of at most ${MAX_DEVICES}`);
  }
  return state.devices.map(parseDevice);
}

/**
 * The file of one network namespace, named by its cookie (its identity:
 * never reused while the system runs) and its inode (to tell, when pruning,
 * whether it may still exist).
 */
export class StateFile {
  readonly name: string;
  readonly path: string;

  constructor(
    readonly dir: string,
    readonly netnsCookie: string,
    readonly netnsInode: number,
  ) {
    this.name = `net-${netnsCookie}-${netnsInode}.json`;
    this.path = join(dir, this.name);
  }

  /** What was saved, by ifindex; empty when there is no file. Throws when the file is bad. */
  load(): Map<number, PersistedDevice> {
    const text = readRegularFile(this.path, MAX_STATE_BYTES, 'state file', { missing: 'null' });
    if (text === null) return new Map();
    return new Map(parseState(text, this.netnsCookie).map((device) => [device.ifindex, device]));
  }

  save(devices: readonly PersistedDevice[]): void {
    const document: StateDocument = {
      version: STATE_VERSION,
      netnsCookie: this.netnsCookie,
      devices: devices.map((device) => ({
        name: device.name,
        ifindex: device.ifindex,
        pin: device.pin,
        pinKind: device.pinKind,
        neighbours: device.neighbours.slice(0, MAX_PERSISTED_NEIGHBOURS).map((entry) => ({
          ...entry,
          // Only what parseNeighbour reads back.
          states: ['permanent'],
        })),
      })),
    };
    writeFileReplacing(this.dir, this.name, JSON.stringify(document), 0o600);
  }

  /** Marks the file as its running guard's: pruning goes by age. */
  touch(now = new Date()): void {
    try {
      lutimesSync(this.path, now, now);
    } catch {
      /* not written yet */
    }
  }

  /**
   * Removes the files of namespaces that no longer exist (their inode is not
   * a live namespace this process can see) and that were last written long
   * ago; bounded by the folder's size.
   */
  pruneStale(liveInodes: ReadonlySet<number>, now = Date.now()): void {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return;
    }
    for (const name of names.slice(0, 1000)) {
      const match = /^net-\d+-(\d+)\.json$/.exec(name);
      if (!match || name === this.name || liveInodes.has(Number(match[1]))) continue;
      const path = join(this.dir, name);
      try {
        if (now - statSync(path).mtimeMs > STALE_AFTER_MS) unlinkSync(path);
      } catch {
        /* gone meanwhile */
      }
    }
  }
}

/**
 * Inodes of the network namespaces this process can see held: its own, every
 * process's (/proc/PID/ns/net: a pod's namespace is held by its pause process),
 * /run/netns and any other nsfs mount (a container runtime's folder). Bounded.
 */
export function liveNetnsInodes(): Set<number> {
  const inodes = new Set<number>();
  const add = (path: string): void => {
    try {
      inodes.add(statSync(path).ino);
    } catch {
      /* not there, or gone meanwhile */
    }
  };
  const entries = (dir: string): string[] => {
    try {
      return readdirSync(dir).slice(0, 100_000);
    } catch {
      return [];
    }
  };
  add('/proc/self/ns/net');
  for (const name of entries('/proc')) if (/^\d+$/.test(name)) add(`/proc/${name}/ns/net`);
  for (const name of entries('/run/netns')) add(join('/run/netns', name));
  for (const mountPoint of nsfsMountPoints()) add(mountPoint);
  return inodes;
}

/** Where nsfs is mounted in this mount namespace (namespaces bound to a file). */
function nsfsMountPoints(): string[] {
  let text: string;
  try {
    text = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  const points: string[] = [];
  for (const line of text.split('\n').slice(0, 100_000)) {
    // ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER-OPTIONS
    const [before, after] = line.split(' - ');
    if (after?.startsWith('nsfs ') !== true) continue;
    const mountPoint = before?.split(' ')[4];
    // Octal escapes (\040 for a space) as the kernel writes them.
    if (mountPoint !== undefined) {
      points.push(
        mountPoint.replace(/\\([0-7]{3})/g, (_, octal: string) =>
          String.fromCharCode(parseInt(octal, 8)),
        ),
      );
    }
  }
  return points;
}
