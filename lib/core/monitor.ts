/**
 * LinkMonitor: the kernel's links and neighbour entries of one network
 * namespace, kept current from rtnetlink notifications, with typed events for
 * every change. The snapshot is rebuilt by a coalesced re-dump whenever the
 * kernel reports lost notifications, so after a `resync` event it is exact.
 */
import { EventEmitter } from 'node:events';

import {
  binding,
  type RawAllowance,
  type RawBatchListener,
  type RawLinkItem,
  type RawMonitor,
  type RawMonitorItem,
  type RawMonitorOptions,
} from './binding';
import { neighbourInfos, neighbourKey, toNeighbourInfo, toRawNeighbourEntries } from './records';
import type { LinkInfo, NeighbourInfo } from './types';
import { RANGES, integerInRange, macBytes, netnsTarget, type NetnsTarget } from './validate';
import {
  emitChange,
  linkInfo,
  toNativeCorrection,
  type LinkMonitorEvents,
  type LinkMonitorEvent,
  type LinkMonitorStats,
} from './monitor-events';
import { iterateEvents } from './monitor-iterator';
import { BatchChanges, LaterChanges } from './batch-changes';

/** See LinkMonitor.setFilter. */
export interface LinkFilter {
  /** Devices whose every notification must reach the monitor. */
  ifindexes: number[];
  /** Link notifications whose interface name starts with one of these reach it too. */
  namePrefixes: string[];
}

export interface LinkMonitorOptions {
  /**
   * Network namespace by `ip netns` name or absolute path, or as the guard's configuration
   * resolved it already (taken as is); the process's own when omitted.
   */
  netns?: string | NetnsTarget;
  /** Socket receive buffer in bytes (the kernel doubles it); the kernel default when omitted. */
  receiveBuffer?: number;
  /**
   * Also follow ARP/NDP neighbours and FDB entries (default true); 'ip' follows ARP/NDP only
   * (the FDB's entries, one per peer on a VTEP, are then neither dumped nor kept).
   */
  neighbours?: boolean | 'ip';
  /**
   * Which neighbour changes become events (default 'all'): 'permanent' reports only those with a
   * permanent entry before or after, or asked for by a process (port id set); the kernel's own
   * resolving, failed and NOARP entries are still in `neighbours()`, without events.
   */
  neighbourEvents?: 'all' | 'permanent';
  /** Read addr_assign_type from sysfs for new devices and MAC changes (default true; own namespace only). */
  addrAssignType?: boolean;
  /** Events buffered for an async iterator before it counts as an overrun (default 10 000). */
  queueLimit?: number;
  /** Narrow the monitor from the start (see setFilter): the first snapshot holds only what passes. */
  filter?: LinkFilter;
  /**
   * Corrections the native layer made (see arm()) are reported at most this often while they
   * keep coming, in one batch (default 50 ms; 0: each at once). The first after a quiet
   * interval is reported at once, and anything else takes the held ones along at once: only
   * a storm of rewrites that are answered already waits, so that it is not a JS call each.
   */
  reportIntervalMs?: number;
}

/**
 * How many rewrites an arming answers before its caller decides again: at most `limit`
 * within any `windowMs`, counting the rewrites at `recent` (ms, GuardClock's monotonic clock)
 * and each one it answers; the first it refuses ends the arming (see arm()).
 */
export type CorrectionAllowance = RawAllowance;

/** The largest `limit` an allowance may have (the native layer's bound, native/addon/monitor_wrap.cc). */
export const MAX_ALLOWANCE_LIMIT = 16;

export class LinkMonitor extends EventEmitter<LinkMonitorEvents> {
  readonly netns: string | undefined;
  /** The socket, the corrections and the mirror of the namespace's links and entries. */
  #native: RawMonitor;
  #queueLimit: number;
  /**
   * What each device is armed with in the native layer (name and MAC, as a
   * key): the guard re-arms after every event that may change it, and most of
   * those (the echoes of a correction) change nothing, so an unchanged target
   * is not sent again. Dropped whenever the native layer drops its arming.
   */
  #armed = new Map<number, string>();
  /** The MAC last armed, parsed once: a guard arms the same one after every correction. */
  #armedMac: { text: string; bytes: Buffer } | undefined;
  #ready = false;
  #closed = false;
  /** close() is reporting the corrections made before it: nothing else is emitted. */
  #closing = false;
  /** The batch being dispatched, and the index of its item being handled (see #laterChanges). */
  #batch: readonly RawMonitorItem[] | undefined;
  #position = 0;
  #batchChanges: BatchChanges | undefined;
  #later: { position: number; changes: LaterChanges } | undefined;
  /** The arrival of the batch being handled (see Arrival). */
  #receivedAt = 0;
  #queueOverruns = 0;
  #closeError: Error | undefined;

  /**
   * Opens the monitor's socket in `options.netns` and starts reading. `open` is for tests: it
   * opens the native monitor instead (the real core on scripted input, binding.ScriptedMonitor).
   */
  constructor(
    options: LinkMonitorOptions = {},
    open: (options: RawMonitorOptions, onBatch: RawBatchListener) => RawMonitor = (
      rawOptions,
      onBatch,
    ) => new binding.Monitor(rawOptions, onBatch),
  ) {
    super();
    const netns = typeof options.netns === 'string' ? netnsTarget(options.netns) : options.netns;
    this.netns = netns?.label;
    this.#queueLimit = options.queueLimit ?? 10_000;
    this.#native = open(
      {
        ...(netns === undefined ? {} : { netns: netns.path, netnsLabel: netns.label }),
        ...(options.receiveBuffer === undefined
          ? {}
          : {
              receiveBuffer: integerInRange(
                options.receiveBuffer,
                RANGES.receiveBuffer,
                'receiveBuffer',
              ),
            }),
        neighbours: options.neighbours ?? true,
        neighbourEvents: options.neighbourEvents ?? 'all',
        addrAssignType: options.addrAssignType ?? true,
        reportIntervalMs: integerInRange(
          options.reportIntervalMs ?? 50,
          RANGES.reportIntervalMs,
          'reportIntervalMs',
        ),
      },
      (batch, arrivalMs) => {
        this.#onBatch(batch, arrivalMs);
      },
    );
    if (options.filter) this.setFilter(options.filter);
    this.#native.start();
  }

  /** Opens a monitor and resolves once its first snapshot is loaded. */
  static async open(options: LinkMonitorOptions = {}): Promise<LinkMonitor> {
    const monitor = new LinkMonitor(options);
    await monitor.ready();
    return monitor;
  }

  get isReady(): boolean {
    return this.#ready;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** True between a resync's begin and end: the snapshot is being re-read. */
  get resyncing(): boolean {
    return this.#native.resyncing();
  }

  /** Resolves when the first snapshot is loaded; rejects if the monitor closes first. */
  ready(): Promise<void> {
    if (this.#ready) return Promise.resolve();
    if (this.#closed) return Promise.reject(this.#closeError ?? new Error('monitor closed'));
    return new Promise((resolve, reject) => {
      const onReady = (): void => {
        this.off('close', onClose);
        resolve();
      };
      const onClose = (): void => {
        this.off('ready', onReady);
        reject(this.#closeError ?? new Error('monitor closed before it was ready'));
      };
      this.once('ready', onReady);
      this.once('close', onClose);
    });
  }

  /**
   * The namespace's links, from the native mirror, as of the event being handled (see
   * #laterChanges).
   */
  links(): LinkInfo[] {
    const raws = this.#native.links();
    const later = this.#laterChanges();
    if (!later) return raws.map(linkInfo);
    const asOf = raws.filter((raw) => !later.links.has(raw.ifindex));
    for (const ifindex of later.links.keys()) {
      const raw = later.link(ifindex);
      if (raw) asOf.push(raw);
    }
    return asOf.sort((a, b) => a.ifindex - b.ifindex).map(linkInfo);
  }

  getLink(key: number | string): LinkInfo | undefined {
    const later = this.#laterChanges();
    if (later && typeof key === 'number') {
      const raw = later.link(key);
      if (raw !== undefined) return raw === null ? undefined : linkInfo(raw);
    } else if (later) {
      for (const ifindex of later.links.keys()) {
        const raw = later.link(ifindex);
        if (raw?.name === key) return linkInfo(raw);
      }
    }
    const raw = this.#native.getLink(key);
    // A device changed later in the batch had another name then (checked above).
    if (raw === undefined || later?.links.has(raw.ifindex) === true) return undefined;
    return linkInfo(raw);
  }

  /**
   * Whether the batch being dispatched changes the device's MAC again after the event being
   * handled: a write made now would answer that rewrite before it is reported.
   */
  rewrittenLater(ifindex: number): boolean {
    const batch = this.#batch;
    if (batch === undefined || this.#position >= batch.length - 1) return false;
    this.#batchChanges ??= new BatchChanges(batch);
    return (this.#batchChanges.links.get(ifindex) ?? []).some(
      ({ position, item }) =>
        position > this.#position &&
        item.change === 'changed' &&
        item.previous?.mac !== item.record?.mac,
    );
  }

  /** The mirror's neighbour and FDB entries (of one device when `ifindex` is given), as of the event being handled. */
  neighbours(filter: { ifindex?: number } = {}): NeighbourInfo[] {
    const entries = neighbourInfos(this.#native.neighbours(filter.ifindex));
    const later = this.#laterChanges();
    if (!later || later.neighbours.size === 0) return entries;
    const asOf = entries.filter((entry) => !later.neighbours.has(neighbourKey(entry)));
    for (const key of later.neighbours.keys()) {
      const raw = later.neighbour(key);
      if (raw && (filter.ifindex === undefined || raw.ifindex === filter.ifindex)) {
        asOf.push(toNeighbourInfo(raw));
      }
    }
    return asOf;
  }

  /**
   * The native layer applies a whole batch to the mirror before JS sees its first item: while
   * an item is being dispatched, the batch's later changes say what the mirror held as of that
   * item (their `previous` states), so that a listener's query never runs ahead of the events.
   * (What was read after the batch, or between two batches, the native views leave out
   * themselves: a timer's query answers as of the last batch handed over.)
   */
  #laterChanges(): LaterChanges | undefined {
    const batch = this.#batch;
    if (batch === undefined || this.#position >= batch.length - 1) return undefined;
    if (this.#later?.position !== this.#position) {
      this.#batchChanges ??= new BatchChanges(batch);
      this.#later = {
        position: this.#position,
        changes: new LaterChanges(this.#batchChanges, this.#position),
      };
    }
    return this.#later.changes;
  }

  stats(): LinkMonitorStats {
    return { ...this.#native.stats(), queueOverruns: this.#queueOverruns };
  }

  /**
   * Narrows the monitor to the listed devices and the devices whose name
   * starts with a listed prefix. Their notifications are kept from the rest
   * in the kernel (a classic BPF socket filter), so a flood of changes to
   * other devices cannot reach or overrun the monitor; dump replies and
   * neighbour entries of other devices are dropped natively. The snapshot
   * then holds only those devices (others leave it silently). A device that
   * enters the view appears when next seen; one that leaves it (renamed away,
   * deleted) is reported once more. `null` removes the filter and re-dumps
   * everything.
   */
  setFilter(filter: LinkFilter | null): void {
    if (!filter) {
      this.#native.setFilter(null);
      this.#native.resync();
      return;
    }
    // The mirror drops what the view no longer covers.
    this.#native.setFilter({
      ifindexes: [...filter.ifindexes],
      namePrefixes: [...filter.namePrefixes],
    });
  }

  /**
   * Keeps the device's restore set in the native layer: the permanent ARP/NDP entries a MAC
   * change flushes and a correction puts back. It starts as the device's entries in the mirror
   * now (unless one is kept already), takes `recovered` in, and from then on follows the table
   * as the native layer reads it (an entry added, changed, deleted or made non-permanent by a
   * process; a flush keeps it), until the device is deleted or released: the one account of
   * what a correction puts back, whichever layer makes it.
   */
  keep(ifindex: number, recovered: readonly NeighbourInfo[] = []): void {
    if (recovered.length === 0) this.#native.keep(ifindex);
    else this.#native.keep(ifindex, toRawNeighbourEntries(recovered));
  }

  /** Stops keeping the device's restore set, and disarms it. */
  release(ifindex: number): void {
    this.#armed.delete(ifindex);
    this.#native.release(ifindex);
  }

  /** The device's restore set as the native layer keeps it now (see keep()). */
  restoreSet(ifindex: number): NeighbourInfo[] {
    return neighbourInfos(this.#native.restoreSet(ifindex));
  }

  /**
   * Arms a correction, made by the native layer in the very read that sees a kept `ifindex`
   * (still called `name`) with a MAC other than `mac`: the MAC set back and the restore set
   * re-added before the event reaches JS. The `linkChanged` event then carries the
   * `correction`. Without an `allowance` one correction ends the arming; with one, each rewrite
   * it lets through is answered, so that a storm the caller's policy allows needs no JS round
   * per rewrite, and the first it refuses ends the arming (its event carries no correction: the
   * caller decides about it). The caller keeps the policy: it re-arms when the arming ended or
   * its terms changed. Sent again only then: while the arming lasts, the native layer counts
   * the rewrites it answers.
   */
  arm(
    ifindex: number,
    target: { name: string; mac: string; allowance?: CorrectionAllowance },
  ): void {
    const { allowance } = target;
    const key = `${target.name}|${target.mac}|${allowance ? `${allowance.limit}|${allowance.windowMs}` : 'once'}`;
    if (this.#armed.get(ifindex) === key) return;
    if (this.#armedMac?.text !== target.mac) {
      this.#armedMac = { text: target.mac, bytes: macBytes(target.mac) };
    }
    this.#native.arm(ifindex, {
      name: target.name,
      mac: this.#armedMac.bytes,
      ...(allowance ? { allowance } : {}),
    });
    this.#armed.set(ifindex, key);
  }

  disarm(ifindex: number): void {
    this.#armed.delete(ifindex);
    this.#native.disarm(ifindex);
  }

  /** Re-dumps everything now (coalesced with any resync in progress). */
  resync(): void {
    this.#native.resync();
  }

  /** Keeps the event loop alive while open (the default). */
  ref(): this {
    this.#native.ref();
    return this;
  }

  /** Lets the process exit while the monitor is still open. */
  unref(): this {
    this.#native.unref();
    return this;
  }

  /** Reports the corrections held for the next report (see reportIntervalMs) now. */
  flush(): void {
    if (!this.#closed) this.#native.flush();
  }

  /**
   * Stops monitoring and releases the sockets, after reporting the corrections the native layer
   * made (each must be accounted for). Nothing else read but not yet reported is emitted: from
   * close() on, the mirror's state is what links() and neighbours() show, and a `ready` the
   * reader had read but JS had not seen does not resolve ready(). Idempotent.
   */
  close(): void {
    if (this.#closed) return;
    this.#closing = true;
    this.#native.flush();
    this.#closed = true;
    this.#native.close();
    this.emit('close');
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<LinkMonitorEvent> {
    return this.events();
  }

  /**
   * Every event as it happens, in order. The buffer is bounded: a consumer
   * that falls behind gets one `overrun` event (cause 'queue') in place of the
   * events it missed; the monitor's own snapshot is unaffected, so the
   * consumer catches up by re-reading `links()` and `neighbours()`. Ends when
   * the monitor closes; an aborted signal rejects with an AbortError.
   */
  events(options: { signal?: AbortSignal } = {}): AsyncIterableIterator<LinkMonitorEvent> {
    return iterateEvents(this, {
      signal: options.signal,
      closed: this.#closed,
      queueLimit: this.#queueLimit,
      onQueueOverrun: () => {
        this.#queueOverruns += 1;
      },
    });
  }

  #onBatch(batch: RawMonitorItem[], arrivalMs: number): void {
    this.#receivedAt = arrivalMs;
    this.#batch = batch;
    try {
      for (const [position, item] of batch.entries()) {
        if (this.#closed) return;
        if (this.#closing && (item.kind !== 'link' || item.correction === undefined)) continue;
        this.#position = position;
        this.#dispatch(item);
      }
    } finally {
      this.#batch = undefined;
      this.#batchChanges = undefined;
      this.#later = undefined;
    }
  }

  #dispatch(item: RawMonitorItem): void {
    switch (item.kind) {
      case 'link':
        this.#onLink(item);
        break;
      case 'neigh':
        emitChange(this, item);
        break;
      case 'ready':
        this.#ready = true;
        this.emit('ready');
        break;
      case 'resync':
        if (item.phase === 'begin') this.emit('resync', { phase: 'begin', reason: item.reason });
        else this.emit('resync', { phase: 'end', consistent: item.consistent });
        break;
      case 'overrun':
        this.emit('overrun', { cause: item.cause });
        break;
      case 'warning':
        this.emit('warning', { code: item.code, message: item.message });
        break;
      case 'fatal':
        this.#closeError = item.error;
        try {
          this.emit('error', item.error);
        } finally {
          this.close();
        }
        break;
    }
  }

  #onLink(item: RawLinkItem): void {
    // The arming ended (spent, refused, or void for a device gone or renamed):
    // forget its key, so that the next arm() is sent.
    if (item.disarmed) this.#armed.delete(item.ifindex);
    if (item.change === 'removed') this.#armed.delete(item.ifindex);
    emitChange(this, item, {
      receivedAt: item.arrivalMs ?? this.#receivedAt,
      ...(item.correction ? { correction: toNativeCorrection(item.correction) } : {}),
    });
  }
}

/** Emits the event a change of the native mirror is. */
