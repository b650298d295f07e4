/**
 * KubernetesMacSource: the desired MAC of flannel's VTEPs, read from the
 * guard's own Node object - the annotation every other node's flanneld
 * programs its ARP and FDB entries from.
 *
 * It reads the Node (a GET: the list of a single named object), then watches
 * it from that resourceVersion with bookmarks, following every change within
 * one watch event. A watch the server ends is resumed from the last
 * resourceVersion seen (events or bookmarks); `410 Gone` (too old a version,
 * as an HTTP status or an ERROR event) makes it read the Node again; a
 * dropped, refused or stalled connection is retried with a bounded, jittered
 * exponential backoff. Meanwhile the last valid value is kept and the
 * condition reported (`state` events, `status()`); it recovers by itself.
 *
 * `adopt` stores a new MAC: a JSON merge patch of that one annotation (every
 * other annotation and every other field of its value kept), carrying the
 * resourceVersion it was computed from, so a concurrent writer makes it fail
 * with 409 Conflict; it is then recomputed from a fresh read and retried.
 */
import { EventEmitter } from 'node:events';

import { backoffDelay, DEFAULT_JITTER, type BackoffPolicy } from '../core/backoff';
import { invalidArgument } from '../core/errors';
import type { DesiredMacSource } from '../guard/sources';
import { parseMac } from '../core/validate';
import {
  ADDRESS_FAMILIES,
  DEFAULT_ANNOTATION_PREFIX,
  readBackendData,
  withVtepMac,
  type AddressFamily,
} from './annotation';
import {
  isKubernetesApiError,
  type KubeNode,
  type KubernetesApi,
  type WatchEnd,
  type WatchEvent,
} from './api';
import { Sleeper } from './sleeper';

export type SourceState = 'starting' | 'synced' | 'degraded';

export type SourceProblem =
  /** No answer (refused, reset, timed out), or 5xx / 429. */
  | 'api-unreachable'
  | 'unauthorized'
  | 'forbidden'
  | 'node-not-found'
  | 'api-error'
  | 'node-deleted'
  | 'annotation-missing'
  | 'annotation-invalid';

export interface SourceStatus {
  source: 'kubernetes';
  node: string;
  /** starting: no answer yet; synced: the annotation is read and followed; degraded: see problem. */
  state: SourceState;
  problem: SourceProblem | null;
  message: string | null;
  /** When `state` last changed. */
  since: string;
  /** When the Node was last read or a watch event received. */
  lastSync: string | null;
  resourceVersion: string | null;
  /** Desired MACs by device, as the source answers them now. */
  macs: Record<string, string>;
}

export type WatchRestartReason =
  /** The server ended the watch (its timeout): resumed at once. */
  | 'closed'
  /** 410 Gone: the Node is read again. */
  | 'expired'
  /** The connection broke in the middle of the stream. */
  | 'dropped'
  /** Nothing arrived (not even a bookmark) for longer than the server's timeout. */
  | 'stalled'
  /** The watch request failed. */
  | 'error';

export interface WatchRestartEvent {
  reason: WatchRestartReason;
  /** Wait before the next attempt (0: at once). */
  delayMs: number;
  message?: string;
}

export interface AdoptEvent {
  device: string;
  mac: string;
  /** The MAC the annotation published before. */
  previous: string;
  annotation: string;
  result: 'stored' | 'failed';
  attempts: number;
  /** 409 Conflicts met (and retried). */
  conflicts: number;
  resourceVersion?: string;
  error?: string;
}

export interface KubernetesMacSourceEvents {
  state: [SourceStatus];
  /** The desired MACs changed. */
  change: [Record<string, string>];
  watch: [WatchRestartEvent];
  adopt: [AdoptEvent];
}

export interface KubernetesMacSourceOptions {
  api: KubernetesApi;
  /** The guard's own Node. */
  nodeName: string;
  /** flanneld's --kube-annotation-prefix (default flannel.alpha.coreos.com). */
  annotationPrefix?: string;
  /** The server is asked to end each watch after a random time in this range (s). */
  watchTimeoutSeconds?: readonly [number, number];
  /** Reconnection backoff (core/backoff.ts): first delay, cap (ms), jitter (default ±20 %). */
  backoff?: Partial<BackoffPolicy>;
  /** Conflicts retried by `adopt` before it gives up. */
  maxConflicts?: number;
  /** How long `adopt` retries an unreachable API before it gives up (ms). */
  adoptTimeoutMs?: number;
  random?: () => number;
}

const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 500, maxMs: 30_000, jitter: DEFAULT_JITTER };
/** A watch open this long was healthy: the next restart is immediate and the backoff starts over. */
const HEALTHY_WATCH_MS = 1_000;

/** resourceVersions are opaque, but etcd's are integers: compared only when both are. */
function isOlder(candidate: string | undefined, than: string | undefined): boolean {
  if (candidate === undefined || than === undefined) return false;
  if (!/^\d+$/.test(candidate) || !/^\d+$/.test(than)) return false;
  return BigInt(candidate) < BigInt(than);
}

function problemOf(error: unknown, reading: 'get' | 'watch'): SourceProblem {
  if (!isKubernetesApiError(error)) return 'api-error';
  if (error.transient) return 'api-unreachable';
  if (error.statusCode === 401 || error.code === 'ECREDENTIALS') return 'unauthorized';
  if (error.statusCode === 403) return 'forbidden';
  if (error.statusCode === 404 && reading === 'get') return 'node-not-found';
  return 'api-error';
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

interface FamilyValue {
  device: string;
  mac: string;
}

interface Problem {
  problem: SourceProblem;
  message: string;
}

interface Optimistic {
  mac: string;
  token: number;
}

export class KubernetesMacSource
  extends EventEmitter<KubernetesMacSourceEvents>
  implements DesiredMacSource
{
  readonly name = 'kubernetes';
  readonly nodeName: string;
  readonly annotationPrefix: string;
  readonly #api: KubernetesApi;
  readonly #watchTimeout: readonly [number, number];
  readonly #backoff: BackoffPolicy;
  readonly #maxConflicts: number;
  readonly #adoptTimeoutMs: number;
  readonly #random: () => number;
  readonly #listeners = new Set<() => void>();
  /** Last valid value of each family's annotation. */
  readonly #families = new Map<AddressFamily, FamilyValue>();
  /** MACs being stored by `adopt`, answered while the patch is in flight. */
  readonly #optimistic = new Map<string, Optimistic>();
  #node: KubeNode | undefined;
  /** Where the watch resumes: the last resourceVersion of its stream (events and bookmarks). */
  #watchRv: string | null = null;
  #apiProblem: Problem | null = null;
  #annotationProblem: Problem | null = null;
  #everSynced = false;
  #state: SourceState = 'starting';
  /** The last state reported, to report changes only. */
  #reported = 'starting||';
  #since = new Date();
  #lastSync: Date | null = null;
  #expired = false;
  #watchFailure: Error | null = null;
  #stream: { abort(): void } | undefined;
  readonly #sleeper = new Sleeper();
  #running = false;
  #adoptions: Promise<void> = Promise.resolve();
  #adoptToken = 0;
  #closed = false;

  constructor(options: KubernetesMacSourceOptions) {
    super();
    this.#api = options.api;
    this.nodeName = options.nodeName;
    this.annotationPrefix = options.annotationPrefix ?? DEFAULT_ANNOTATION_PREFIX;
    this.#watchTimeout = options.watchTimeoutSeconds ?? [300, 600];
    this.#backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
    this.#maxConflicts = options.maxConflicts ?? 5;
    this.#adoptTimeoutMs = options.adoptTimeoutMs ?? 30_000;
    this.#random = options.random ?? Math.random;
  }

  // --- DesiredMacSource -----------------------------------------------------------

  desiredMac(device: string): string | undefined {
    const pending = this.#optimistic.get(device);
    if (pending) return pending.mac;
    for (const value of this.#families.values()) if (value.device === device) return value.mac;
    return undefined;
  }

  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Stores `mac` as the VtepMAC of `device` in the Node's annotation. While the
   * patch is in flight `desiredMac(device)` answers `mac`; if it fails, the
   * stored value is answered again and subscribers are told, so the guard puts
   * the device back at what the other nodes use.
   */
  adopt(device: string, mac: string): Promise<void> {
    let canonical: string;
    try {
      canonical = parseMac(mac, `MAC to adopt for ${device}`);
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    const family = this.#familyOf(device);
    if (family === undefined) {
      return Promise.reject(
        invalidArgument(
          `no valid flannel annotation on node ${this.nodeName} names ${device}: nothing to adopt into`,
        ),
      );
    }
    const token = ++this.#adoptToken;
    this.#optimistic.set(device, { mac: canonical, token });
    const run = async (): Promise<void> => {
      try {
        await this.#store(family, device, canonical);
      } catch (error) {
        if (this.#optimistic.get(device)?.token === token) {
          this.#optimistic.delete(device);
          this.#notify();
        }
        throw error;
      }
      if (this.#optimistic.get(device)?.token === token) this.#optimistic.delete(device);
    };
    const result = this.#adoptions.then(run, run);
    this.#adoptions = result.catch(() => undefined);
    return result;
  }

  // --- lifecycle ------------------------------------------------------------------

  /** Starts reading and watching the Node (idempotent). */
  start(): this {
    if (this.#closed) throw new Error('the Kubernetes source is closed');
    if (this.#running) return this;
    this.#running = true;
    this.#run().catch((error: unknown) => {
      // #run handles every API failure itself; anything else is a bug worth seeing.
      process.emitWarning(error instanceof Error ? error : new Error(String(error)));
    });
    return this;
  }

  /**
   * Starts, then resolves once the Node has been read, or after `timeoutMs`:
   * then, unless it failed already, the source declares itself degraded
   * (api-unreachable) and keeps trying in the background.
   */
  async waitForSync(timeoutMs: number): Promise<SourceStatus> {
    this.start();
    if (!this.#everSynced) {
      await new Promise<void>((resolve) => {
        const onState = (): void => {
          if (this.#everSynced || this.#closed) done();
        };
        const timer = setTimeout(() => {
          if (!this.#everSynced && this.#state === 'starting') {
            this.#apiProblem = {
              problem: 'api-unreachable',
              message: `no answer from ${this.#api.server} within ${timeoutMs} ms`,
            };
            this.#updateState();
          }
          done();
        }, timeoutMs);
        const done = (): void => {
          clearTimeout(timer);
          this.off('state', onState);
          resolve();
        };
        this.on('state', onState);
      });
    }
    return this.status();
  }

  status(): SourceStatus {
    const problem = this.#apiProblem ?? this.#annotationProblem;
    const macs: Record<string, string> = {};
    for (const value of this.#families.values()) macs[value.device] = value.mac;
    for (const [device, pending] of this.#optimistic) macs[device] = pending.mac;
    return {
      source: 'kubernetes',
      node: this.nodeName,
      state: this.#state,
      problem: this.#state === 'synced' ? null : (problem?.problem ?? null),
      message: this.#state === 'synced' ? null : (problem?.message ?? null),
      since: this.#since.toISOString(),
      lastSync: this.#lastSync?.toISOString() ?? null,
      resourceVersion: this.#node?.metadata.resourceVersion ?? null,
      macs,
    };
  }

  get state(): SourceState {
    return this.#state;
  }

  /** Where the watch resumes after a disconnection: the last resourceVersion it delivered. */
  get resumeVersion(): string | null {
    return this.#watchRv;
  }

  /** The Node's uid, once read. */
  get nodeUid(): string | undefined {
    return this.#node?.metadata.uid;
  }

  /** Stops watching; pending adoptions reject. Idempotent. */
  close(): void {
    if (this.#isClosed()) return;
    this.#closed = true;
    this.#stream?.abort();
    this.#sleeper.wake();
    this.#listeners.clear();
  }

  /** A method, not the field: it changes while a request is awaited. */
  #isClosed(): boolean {
    return this.#closed;
  }

  // --- the list/watch loop ------------------------------------------------------------

  async #run(): Promise<void> {
    // Consecutive restarts without a healthy watch in between. Only a watch
    // that stayed open HEALTHY_WATCH_MS forgets them: a server answering every
    // watch with 410 or an instant close (and every read with success) must
    // meet the same growing delay as one that refuses, so that no answer of
    // the server's makes this loop spin.
    let failures = 0;
    while (!this.#closed) {
      if (this.#watchRv === null) {
        try {
          const node = await this.#api.getNode(this.nodeName);
          if (this.#isClosed()) return;
          this.#watchRv = node.metadata.resourceVersion ?? '';
          this.#apiOk();
          this.#apply(node, true);
        } catch (error) {
          if (this.#isClosed()) return;
          this.#apiFailed(problemOf(error, 'get'), messageOf(error));
          failures += 1;
          const delayMs = this.#delay(failures);
          this.emit('watch', { reason: 'error', delayMs, message: messageOf(error) });
          await this.#sleep(delayMs);
          continue;
        }
      }
      const { end, opened, lastedMs } = await this.#watchOnce(this.#watchRv);
      if (this.#isClosed()) return;
      const healthy = opened && lastedMs >= HEALTHY_WATCH_MS;
      failures = healthy ? 0 : failures + 1;
      // After a healthy watch the first restart is immediate; repeated ones back off.
      const delayMs = failures === 0 ? 0 : this.#delay(failures);
      const failure = this.#watchFailure;
      this.#watchFailure = null;
      const gone =
        this.#expired ||
        (end.kind === 'error' && isKubernetesApiError(end.error) && end.error.statusCode === 410);
      this.#expired = false;
      if (gone) {
        // 410 Gone: the resourceVersion is too old; read the Node again.
        this.#watchRv = null;
        this.emit('watch', { reason: 'expired', delayMs });
        if (delayMs > 0) await this.#sleep(delayMs);
        continue;
      }
      let reason: WatchRestartReason;
      let message: string | undefined;
      if (failure) {
        reason = 'error';
        message = failure.message;
      } else if (end.kind === 'closed') {
        reason = 'closed';
      } else if (end.kind === 'stalled') {
        reason = 'stalled';
      } else if (end.kind === 'error') {
        reason = opened ? 'dropped' : 'error';
        message = end.error.message;
        if (!opened) this.#apiFailed(problemOf(end.error, 'watch'), message);
      } else {
        return; // aborted: closing
      }
      this.emit(
        'watch',
        message === undefined ? { reason, delayMs } : { reason, delayMs, message },
      );
      if (delayMs > 0) await this.#sleep(delayMs);
    }
  }

  async #watchOnce(
    resourceVersion: string,
  ): Promise<{ end: WatchEnd; opened: boolean; lastedMs: number }> {
    const [min, max] = this.#watchTimeout;
    const timeoutSeconds = Math.round(min + this.#random() * (max - min));
    const stream = this.#api.watchNode(
      this.nodeName,
      { resourceVersion, timeoutSeconds, idleTimeoutMs: (timeoutSeconds + 30) * 1000 },
      (event) => {
        this.#onWatchEvent(event, stream);
      },
    );
    this.#stream = stream;
    let opened = false;
    const started = Date.now();
    stream.opened.then(
      () => {
        opened = true;
        this.#apiOk();
      },
      () => undefined,
    );
    const end = await stream.ended;
    this.#stream = undefined;
    return { end, opened, lastedMs: Date.now() - started };
  }

  #onWatchEvent(event: WatchEvent, stream: { abort(): void }): void {
    if (this.#isClosed()) return;
    const object = event.object as { metadata?: { resourceVersion?: unknown; name?: unknown } };
    const rv =
      typeof object.metadata?.resourceVersion === 'string'
        ? object.metadata.resourceVersion
        : undefined;
    switch (event.type) {
      case 'ADDED':
      case 'MODIFIED': {
        if (rv !== undefined) this.#watchRv = rv;
        const node = toNode(event.object);
        if (!node || node.metadata.name !== this.nodeName) return;
        this.#lastSync = new Date();
        // Older than what a patch response already told us: the watch is catching up.
        if (isOlder(rv, this.#node?.metadata.resourceVersion)) return;
        if (this.#annotationProblem?.problem === 'node-deleted') this.#annotationProblem = null;
        this.#apply(node, false);
        return;
      }
      case 'DELETED':
        if (rv !== undefined) this.#watchRv = rv;
        this.#lastSync = new Date();
        this.#annotationProblem = {
          problem: 'node-deleted',
          message: `node ${this.nodeName} was deleted; keeping the last known MACs`,
        };
        this.#updateState();
        return;
      case 'BOOKMARK':
        if (rv !== undefined) this.#watchRv = rv;
        return;
      case 'ERROR': {
        const status = event.object as { code?: unknown; message?: unknown; reason?: unknown };
        if (status.code === 410) {
          this.#expired = true;
        } else {
          this.#watchFailure = new Error(
            `watch node ${this.nodeName}: ${String(status.code)} ${String(status.reason)}: ${String(status.message)}`,
          );
        }
        stream.abort();
        return;
      }
      default:
        return;
    }
  }

  /** Takes a Node object's annotations; `relisted` also tells subscribers (a fresh read). */
  #apply(node: KubeNode, relisted: boolean): void {
    this.#node = node;
    this.#lastSync = new Date();
    const annotations = node.metadata.annotations ?? {};
    const readings = ADDRESS_FAMILIES.map((family) =>
      readBackendData(annotations, family, this.annotationPrefix),
    );
    let changed = false;
    for (const reading of readings) {
      if (reading.state !== 'valid') continue;
      const before = this.#families.get(reading.family);
      if (before?.device === reading.device && before.mac === reading.mac) continue;
      this.#families.set(reading.family, { device: reading.device, mac: reading.mac });
      changed = true;
    }
    const invalid = readings.flatMap((reading) =>
      reading.state === 'invalid' ? [`${reading.key}: ${reading.reason}`] : [],
    );
    if (invalid.length > 0) {
      this.#annotationProblem = {
        problem: 'annotation-invalid',
        message: `${invalid.join('; ')} (keeping the last valid value)`,
      };
    } else if (readings.every((reading) => reading.state === 'absent')) {
      this.#annotationProblem = {
        problem: 'annotation-missing',
        message: `node ${this.nodeName} has no ${readings.map((r) => r.key).join(' or ')} annotation (flanneld has not published its VTEP)`,
      };
    } else {
      this.#annotationProblem = null;
    }
    this.#everSynced = true;
    this.#updateState();
    if (changed) this.emit('change', this.status().macs);
    if (changed || relisted) this.#notify();
  }

  #apiOk(): void {
    if (this.#apiProblem === null) return;
    this.#apiProblem = null;
    this.#updateState();
    // Back after an outage: let the guard compare every device with the stored values again.
    if (this.#everSynced) this.#notify();
  }

  #apiFailed(problem: SourceProblem, message: string): void {
    if (this.#apiProblem?.problem === problem && this.#apiProblem.message === message) return;
    this.#apiProblem = { problem, message };
    this.#updateState();
  }

  #updateState(): void {
    const before = this.#state;
    if (!this.#everSynced) this.#state = this.#apiProblem ? 'degraded' : 'starting';
    else this.#state = this.#apiProblem || this.#annotationProblem ? 'degraded' : 'synced';
    if (this.#state !== before) this.#since = new Date();
    const after = this.status();
    const key = `${after.state}|${after.problem ?? ''}|${after.message ?? ''}`;
    if (key === this.#reported) return;
    this.#reported = key;
    this.emit('state', after);
  }

  #notify(): void {
    for (const listener of [...this.#listeners]) listener();
  }

  #delay(failures: number): number {
    return backoffDelay(this.#backoff, failures, this.#random);
  }

  #sleep(ms: number): Promise<void> {
    return this.#closed ? Promise.resolve() : this.#sleeper.sleep(ms);
  }

  // --- adopt ------------------------------------------------------------------------

  #familyOf(device: string): AddressFamily | undefined {
    for (const [family, value] of this.#families) if (value.device === device) return family;
    return undefined;
  }

  async #store(family: AddressFamily, device: string, mac: string): Promise<void> {
    const deadline = Date.now() + this.#adoptTimeoutMs;
    let attempts = 0;
    let conflicts = 0;
    let failures = 0;
    let previous = this.#families.get(family)?.mac ?? '';
    const report = (
      result: AdoptEvent['result'],
      key: string,
      extra: Partial<AdoptEvent> = {},
    ): void => {
      this.emit('adopt', {
        device,
        mac,
        previous,
        annotation: key,
        result,
        attempts,
        conflicts,
        ...extra,
      });
    };
    let node = this.#node;
    for (;;) {
      if (this.#closed) throw new Error(`adopt ${device}: the Kubernetes source is closed`);
      attempts += 1;
      try {
        if (!node) {
          node = await this.#api.getNode(this.nodeName);
          if (
            !this.#isClosed() &&
            !isOlder(node.metadata.resourceVersion, this.#node?.metadata.resourceVersion)
          ) {
            this.#apply(node, false);
          }
        }
      } catch (error) {
        if (isKubernetesApiError(error) && error.transient && Date.now() < deadline) {
          node = undefined;
          await this.#sleep(this.#delay(++failures));
          continue;
        }
        throw error;
      }
      const reading = readBackendData(node.metadata.annotations, family, this.annotationPrefix);
      if (reading.state !== 'valid' || reading.device !== device) {
        const why =
          reading.state === 'invalid'
            ? `is invalid (${reading.reason})`
            : reading.state === 'absent'
              ? 'is missing'
              : `names ${reading.device}`;
        const error = invalidArgument(
          `adopt ${device}: ${reading.key} on node ${this.nodeName} ${why}; not writing it`,
        );
        report('failed', reading.key, { error: error.message });
        throw error;
      }
      previous = reading.mac;
      if (reading.mac === mac) {
        report('stored', reading.key, { resourceVersion: node.metadata.resourceVersion ?? '' });
        return;
      }
      const patch = {
        metadata: {
          resourceVersion: node.metadata.resourceVersion,
          annotations: { [reading.key]: withVtepMac(reading.data, mac) },
        },
      };
      try {
        const updated = await this.#api.patchNode(this.nodeName, patch);
        if (!this.#isClosed()) this.#apply(updated, false);
        report('stored', reading.key, { resourceVersion: updated.metadata.resourceVersion ?? '' });
        return;
      } catch (error) {
        if (isKubernetesApiError(error) && error.statusCode === 409) {
          conflicts += 1;
          if (conflicts > this.#maxConflicts) {
            report('failed', reading.key, { error: messageOf(error) });
            throw error;
          }
          // Someone else changed the Node: recompute from a fresh read.
          node = undefined;
          await this.#sleep(Math.round(20 + this.#random() * 80));
          continue;
        }
        if (isKubernetesApiError(error) && error.transient && Date.now() < deadline) {
          await this.#sleep(this.#delay(++failures));
          continue;
        }
        report('failed', reading.key, { error: messageOf(error) });
        throw error;
      }
    }
  }
}

function toNode(object: Record<string, unknown>): KubeNode | undefined {
  const metadata = object.metadata as Record<string, unknown> | undefined;
  if (typeof metadata?.name !== 'string') return undefined;
  const node: KubeNode = { metadata: { name: metadata.name } };
  if (typeof metadata.uid === 'string') node.metadata.uid = metadata.uid;
  if (typeof metadata.resourceVersion === 'string') {
    node.metadata.resourceVersion = metadata.resourceVersion;
  }
  const annotations = metadata.annotations;
  if (typeof annotations === 'object' && annotations !== null) {
    node.metadata.annotations = { ...(annotations as Record<string, string>) };
  }
  return node;
}
