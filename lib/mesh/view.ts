/**
 * MeshView: the mesh table (mesh/compare.ts) kept current from what the Nodes publish and what
 * the guard's native mirror holds of its VTEPs' permanent entries: a Node event judges again the
 * rows it touches, an entry change reads the entries anew from the mirror (no dumps either
 * way), a divergence counted only after the grace period (so
 * flanneld's own update of a peer is not reported), and, in 'repair' mode, the peer's entries
 * written as flanneld writes them. Never fights: a peer whose entries are put back to the same
 * stale values twice within the fight window is `contested` and left alone until what it
 * publishes changes.
 */
import { EventEmitter } from 'node:events';

import { monotonicMs } from '../core/clock';
import { DEFAULT_MESH_FIGHT_WINDOW_MS, DEFAULT_MESH_GRACE_MS } from '../core/defaults';
import { invalidArgument, messageOf } from '../core/errors';
import { booleanOption, choiceOption, integerOption, rejectUnknownOptions } from '../core/options';
import { RANGES } from '../core/validate';
import type { NeighbourInfo } from '../core/types';
import {
  isHealthyVerdict,
  MeshComparison,
  type IncompletePeer,
  type MeshDelta,
  type MeshInput,
  type MeshSubject,
  type MeshTable,
  type OrphanEntry,
  type PeerLease,
  type PeerRow,
  type PeerVerdict,
} from './compare';
import { flannelEntries, orphanEntry } from './entries';

export type { MeshSubject } from './compare';

/** One Node's leases (none when it publishes nothing usable), as read from the API. */
export interface NodeLeases {
  node: string;
  leases: PeerLease[];
  incomplete: IncompletePeer[];
}

/** A change of a VTEP's permanent entry, as the guard's mirror reports it. */
export interface VtepEntryChange {
  device: string;
  entry: NeighbourInfo;
  removed: boolean;
  /** Netlink port id of the writer (0: the kernel, or not said). */
  portid: number;
}

/** The guard's side: its VTEPs as the native mirror holds them, and its request socket. */
export interface MeshDevices {
  /** The device's MAC and entries now; null when there is no such device. */
  read(device: string): { mac: string | null; entries: readonly NeighbourInfo[] } | null;
  /** The device's MAC now (null: no such device): what `read` says, without the entries. */
  mac(device: string): string | null;
  /** Replaces the entries (NLM_F_REPLACE); the ARP/NDP ones join the device's restore set. */
  write(device: string, entries: readonly NeighbourInfo[]): void;
  /** Deletes the entry (RTM_DELNEIGH); an ARP/NDP one leaves the restore set. */
  remove(device: string, entry: NeighbourInfo): void;
  /** Calls `listener` on each change of a VTEP's entries; returns the unsubscribe. */
  subscribe(listener: (change: VtepEntryChange) => void): () => void;
}

export interface MeshClock {
  now(): number;
  setTimeout(callback: () => void, ms: number): () => void;
}

/** report: say; repair: also write the peers' entries; prune: also delete orphans. */
export type MeshMode = 'report' | 'repair' | 'prune';

export interface MeshViewOptions {
  /** This node's name. */
  self: string;
  /** 'report' (default) or 'repair'. */
  mode?: MeshMode;
  /** How long a divergence must last before it counts (and is repaired); default 5 s. */
  graceMs?: number;
  /** Two repairs undone within this long: the peer is contested; default 60 s. */
  fightWindowMs?: number;
  /** flannel runs with `Backend.DirectRouting`: a peer with neither entry is 'direct' (default false). */
  directRouting?: boolean;
  /** The guard's devices: `FlannelGuard.meshDevices()`. */
  devices: MeshDevices;
  /** Default: CLOCK_MONOTONIC, timers that keep no process alive. */
  clock?: MeshClock;
}

/** Every name MeshViewOptions declares: anything else is a caller's mistake (EINVAL). */
const OPTION_NAMES = [
  'self',
  'mode',
  'graceMs',
  'fightWindowMs',
  'directRouting',
  'devices',
  'clock',
] as const satisfies readonly (keyof MeshViewOptions)[];

const REAL_CLOCK: MeshClock = {
  now: monotonicMs,
  setTimeout(callback, ms) {
    const timer = setTimeout(callback, ms).unref();
    return () => clearTimeout(timer);
  },
};

/** A change of a reported verdict ('gone': the row or entry is no more). */
export interface MeshVerdictEvent {
  key: string;
  verdict: PeerVerdict | 'contested' | 'orphan' | 'gone';
  previous: PeerVerdict | 'contested' | 'orphan' | null;
  subject: MeshSubject;
  /** contested: the netlink port id that last wrote the entry back (0: unknown). */
  writer?: number;
}

export interface MeshRepairEvent {
  node: string;
  family: PeerRow['family'];
  device: string;
  /** The verdict repaired. */
  verdict: PeerVerdict;
  /** What the entries held before, and what was written. */
  before: { arpMac: string | null; fdbDst: string | null };
  written: { arpMac: string; fdbDst: string };
  error?: string;
}

/** An orphan entry deleted ('prune' mode), after the grace period. */
export interface MeshPruneEvent {
  entry: OrphanEntry;
  error?: string;
}

export interface MeshViewEvents {
  verdict: [MeshVerdictEvent];
  repaired: [MeshRepairEvent];
  pruned: [MeshPruneEvent];
}

/** What the view reports now, for status, metrics and readiness. */
export interface MeshSnapshot {
  table: MeshTable;
  /** The verdict reported per peer key (node|family): after the grace period. */
  reported: Record<string, PeerVerdict | 'contested'>;
  incomplete: IncompletePeer[];
  repairs: number;
  /** Every peer and this node's own device reported ok (orphans do not stop traffic). */
  consistent: boolean;
  /** A Node list has been received. */
  synced: boolean;
}

interface Tracked {
  observed: PeerVerdict | 'orphan';
  since: number;
  reported: PeerVerdict | 'contested' | 'orphan' | null;
  subject: MeshSubject;
}

interface FightRecord {
  /** The stale values each repair overwrote, and when. */
  repairs: { at: number; stale: string[] }[];
  contested: boolean;
}

/** Coalesces a burst of entry changes (a flush and its re-adds) into one comparison. */
const COALESCE_MS = 20;

export class MeshView extends EventEmitter<MeshViewEvents> {
  readonly #options: Required<MeshViewOptions>;
  readonly #nodes = new Map<string, NodeLeases>();
  readonly #tracked = new Map<string, Tracked>();
  readonly #fights = new Map<string, FightRecord>();
  /** Last writer of each entry (device|arp|address, device|fdb|mac). */
  readonly #writers = new Map<string, number>();
  readonly #comparison: MeshComparison;
  /** The table as the comparison last gave it; undefined once anything changed. */
  #table: MeshTable | undefined;
  /** The mirror reported an entry change: the next comparison loads every entry. */
  #entriesChanged = true;
  #synced = false;
  #repairs = 0;
  #cancelTimer: (() => void) | undefined;
  #timerAt = Infinity;
  readonly #unsubscribe: () => void;
  #closed = false;

  constructor(options: MeshViewOptions) {
    super();
    rejectUnknownOptions(options, OPTION_NAMES, 'MeshView');
    const { self, devices } = options;
    if (typeof self !== 'string' || self === '') {
      throw invalidArgument("option self must be this node's name", { option: 'self' });
    }
    this.#options = {
      self,
      mode: choiceOption(options.mode, ['report', 'repair', 'prune'], 'mode', 'report'),
      graceMs: integerOption(options.graceMs, RANGES.timerMs, 'graceMs', DEFAULT_MESH_GRACE_MS),
      fightWindowMs: integerOption(
        options.fightWindowMs,
        RANGES.timerMs,
        'fightWindowMs',
        DEFAULT_MESH_FIGHT_WINDOW_MS,
      ),
      directRouting: booleanOption(options.directRouting, 'directRouting', false),
      devices,
      clock: options.clock ?? REAL_CLOCK,
    };
    this.#comparison = new MeshComparison(self, { directRouting: this.#options.directRouting });
    const clock = this.#options.clock;
    this.#unsubscribe = devices.subscribe((change) => {
      this.#noteWriter(change);
      this.#entriesChanged = true;
      this.#schedule(clock.now() + COALESCE_MS);
    });
  }

  /** Every Node there is (a list): replaces what was known. */
  setNodes(nodes: readonly NodeLeases[]): void {
    const before = new Map(this.#nodes);
    this.#nodes.clear();
    for (const node of nodes) this.#nodes.set(node.node, node);
    for (const node of nodes) this.#forgetFightIfChanged(before.get(node.node), node);
    this.#synced = true;
    this.#entriesChanged = true;
    this.#evaluate();
  }

  /**
   * One Node added or changed (null leases: deleted). A change that leaves what it publishes as
   * it was (a label, a heartbeat of its status) compares nothing again.
   */
  updateNode(name: string, leases: NodeLeases | null): void {
    const before = this.#nodes.get(name);
    if (before !== undefined && leases !== null && sameLeases(before, leases)) return;
    this.#forgetFightIfChanged(before, leases);
    if (leases === null) this.#nodes.delete(name);
    else this.#nodes.set(name, leases);
    if (!this.#synced) return;
    const known = this.#comparison.devices;
    // A device no lease named before: its entries are read with all the others.
    if (leases?.leases.some((lease) => !known.has(lease.device)) === true) {
      this.#entriesChanged = true;
    }
    this.#evaluate(this.#comparison.setNode(name, leases?.leases ?? []));
  }

  /** A list of the Nodes has been received. */
  get synced(): boolean {
    return this.#synced;
  }

  /** The Node that publishes `mac` (lower case), on any device; null when none does. */
  nodeOf(mac: string): string | null {
    for (const node of this.#nodes.values()) {
      if (node.leases.some((lease) => lease.mac === mac)) return node.node;
    }
    return null;
  }

  snapshot(): MeshSnapshot {
    const reported: Record<string, PeerVerdict | 'contested'> = {};
    let consistent = this.#synced;
    for (const [key, tracked] of this.#tracked) {
      const healthy = tracked.subject.kind === 'orphan' || isHealthyVerdict(tracked.reported ?? '');
      if (!healthy) consistent = false;
      if (tracked.subject.kind === 'peer' && tracked.reported !== null) {
        reported[key] = tracked.reported as PeerVerdict | 'contested';
      }
    }
    this.#table ??= this.#comparison.table();
    return {
      table: this.#table,
      reported,
      incomplete: [...this.#nodes.values()].flatMap((node) => node.incomplete),
      repairs: this.#repairs,
      consistent,
      synced: this.#synced,
    };
  }

  close(): void {
    this.#closed = true;
    this.#unsubscribe();
    this.#cancelTimer?.();
    this.#cancelTimer = undefined;
  }

  #noteWriter(change: VtepEntryChange): void {
    const { entry } = change;
    const key =
      entry.family === 'bridge'
        ? `${change.device}|fdb|${entry.lladdr ?? ''}`
        : `${change.device}|arp|${entry.destination ?? ''}`;
    if (!change.removed) this.#writers.set(key, change.portid);
  }

  /** A peer whose published data changed is no longer contested: its new values may be fine. */
  #forgetFightIfChanged(before: NodeLeases | undefined, after: NodeLeases | null): void {
    if (before === undefined) return;
    if (after !== null && JSON.stringify(before.leases) === JSON.stringify(after.leases)) return;
    for (const key of [...this.#fights.keys()]) {
      if (key.startsWith(`${before.node}|`)) this.#fights.delete(key);
    }
  }

  #schedule(at: number): void {
    if (this.#closed || at >= this.#timerAt) return;
    this.#cancelTimer?.();
    this.#timerAt = at;
    this.#cancelTimer = this.#options.clock.setTimeout(
      () => {
        this.#timerAt = Infinity;
        this.#cancelTimer = undefined;
        this.#evaluate();
      },
      Math.max(0, at - this.#options.clock.now()),
    );
  }

  /** Applies what changed (`delta`: a Node's), then reports what has lasted the grace period. */
  #evaluate(delta?: MeshDelta): void {
    if (this.#closed || !this.#synced) return;
    const deltas: MeshDelta[] = [];
    if (this.#entriesChanged) {
      this.#entriesChanged = false;
      deltas.push(this.#comparison.load(this.#readDevices()));
    } else {
      if (delta !== undefined) deltas.push(delta);
      const macs = new Map<string, string | null>();
      for (const device of this.#comparison.devices) {
        macs.set(device, this.#options.devices.mac(device));
      }
      deltas.push(this.#comparison.setDeviceMacs(macs));
    }
    const now = this.#options.clock.now();
    for (const { changed, removed } of deltas) {
      if (changed.size > 0 || removed.size > 0) this.#table = undefined;
      for (const key of removed) this.#forget(key);
      for (const [key, subject] of changed) this.#observe(key, subject, now);
    }
    for (const [key, tracked] of this.#tracked) this.#settle(key, tracked, now);
  }

  /** Every lease, and the entries and MAC of every device a lease names (null: absent). */
  #readDevices(): Omit<MeshInput, 'self'> {
    const leases = [...this.#nodes.values()].flatMap((node) => node.leases);
    const entries = new Map<string, readonly NeighbourInfo[]>();
    const deviceMacs = new Map<string, string | null>();
    for (const device of new Set(leases.map((lease) => lease.device))) {
      const state = this.#options.devices.read(device);
      entries.set(device, state?.entries ?? []);
      deviceMacs.set(device, state?.mac ?? null);
    }
    return { leases, entries, deviceMacs };
  }

  #observe(key: string, subject: MeshSubject, now: number): void {
    const observed = subject.kind === 'orphan' ? 'orphan' : subject.row.verdict;
    const tracked = this.#tracked.get(key);
    if (tracked === undefined) {
      this.#tracked.set(key, { observed, since: now, reported: null, subject });
      return;
    }
    if (tracked.observed !== observed) {
      tracked.observed = observed;
      tracked.since = now;
    }
    tracked.subject = subject;
  }

  /** A row or entry that is no more: 'gone', if it had been reported. */
  #forget(key: string): void {
    const tracked = this.#tracked.get(key);
    if (tracked === undefined) return;
    this.#tracked.delete(key);
    if (tracked.reported !== null) {
      this.emit('verdict', {
        key,
        verdict: 'gone',
        previous: tracked.reported,
        subject: tracked.subject,
      });
    }
  }

  /** Reports the observed verdict once it has lasted the grace period (a healthy one at once). */
  #settle(key: string, tracked: Tracked, now: number): void {
    const due = tracked.since + this.#options.graceMs;
    if (!isHealthyVerdict(tracked.observed) && now < due) {
      this.#schedule(due);
      return;
    }
    let verdict: Tracked['reported'] = tracked.observed;
    const subject = tracked.subject;
    let writer: number | undefined;
    const prune = subject.kind === 'orphan' && this.#options.mode === 'prune';
    if (prune && tracked.reported === null) this.#prune(subject.entry);
    if (subject.kind === 'peer' && isRepairable(subject.row.verdict)) {
      const fight = this.#fights.get(key);
      if (fight?.contested === true) {
        verdict = 'contested';
      } else if (this.#options.mode !== 'report') {
        if (this.#isFight(key, subject.row, now)) {
          verdict = 'contested';
          writer = this.#writerOf(subject.row);
        } else {
          this.#repair(key, subject.row, now);
          // Another repair only after another grace period: the mirror has the writes by then.
          tracked.since = now;
        }
      }
    }
    if (verdict === tracked.reported) return;
    const previous = tracked.reported;
    tracked.reported = verdict;
    this.emit('verdict', {
      key,
      verdict,
      previous,
      subject,
      ...(writer === undefined ? {} : { writer }),
    });
  }

  /** An entry put back to a value twice repaired within the window: someone keeps writing it. */
  #isFight(key: string, row: PeerRow, now: number): boolean {
    const fight = this.#fights.get(key) ?? { repairs: [], contested: false };
    this.#fights.set(key, fight);
    fight.repairs = fight.repairs.filter((r) => now - r.at <= this.#options.fightWindowMs);
    const stale = staleValues(row);
    const again = fight.repairs.filter((r) => r.stale.some((value) => stale.includes(value)));
    if (again.length >= 2) fight.contested = true;
    return fight.contested;
  }

  #writerOf(row: PeerRow): number {
    return (
      this.#writers.get(`${row.device}|arp|${row.vtepIp}`) ??
      this.#writers.get(`${row.device}|fdb|${row.publishedMac}`) ??
      0
    );
  }

  /** Deletes an orphan past its grace (a Node gone), once: not again before the mirror reads it. */
  #prune(entry: OrphanEntry): void {
    const event: MeshPruneEvent = { entry };
    try {
      this.#options.devices.remove(entry.device, orphanEntry(entry));
    } catch (error) {
      event.error = messageOf(error);
    }
    this.emit('pruned', event);
  }

  #repair(key: string, row: PeerRow, now: number): void {
    const entries = flannelEntries(row);
    const event: MeshRepairEvent = {
      node: row.node,
      family: row.family,
      device: row.device,
      verdict: row.verdict,
      before: { arpMac: row.arpMac, fdbDst: row.fdbDst },
      written: { arpMac: row.publishedMac, fdbDst: row.publicIp },
    };
    try {
      this.#options.devices.write(row.device, entries);
      this.#repairs += 1;
      this.#fights.get(key)?.repairs.push({ at: now, stale: staleValues(row) });
    } catch (error) {
      event.error = messageOf(error);
    }
    this.emit('repaired', event);
    // The mirror reports the writes; compare again then (or at the next grace if they failed).
    this.#schedule(now + (event.error === undefined ? COALESCE_MS : this.#options.graceMs));
  }
}

function sameLeases(a: NodeLeases, b: NodeLeases): boolean {
  return (
    JSON.stringify(a.leases) === JSON.stringify(b.leases) &&
    JSON.stringify(a.incomplete) === JSON.stringify(b.incomplete)
  );
}

function isRepairable(verdict: PeerVerdict): boolean {
  return verdict === 'stale-mac' || verdict === 'missing' || verdict === 'stale-underlay';
}

/** The wrong values the peer's entries hold (an absent entry is no value anyone writes back). */
function staleValues(row: PeerRow): string[] {
  const stale: string[] = [];
  if (row.arpMac !== null && row.arpMac !== row.publishedMac) stale.push(`arp ${row.arpMac}`);
  if (row.fdbDst !== null && row.fdbDst !== row.publicIp) stale.push(`fdb ${row.fdbDst}`);
  return stale;
}
