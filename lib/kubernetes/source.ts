/**
 * KubernetesMacSource: the desired MAC of flannel's VTEPs, read from the
 * guard's own Node object - the annotation every other node's flanneld
 * programs its ARP and FDB entries from.
 *
 * The Node is followed by a Reflector (reflector.ts: a GET - the list of a
 * single named object - then a watch from its resourceVersion with bookmarks,
 * resumed, relisted on 410 and backed off by it); this class reads what the
 * annotation says of each change. Meanwhile the last valid value is kept and
 * the condition reported (`state` events, `status()`); it recovers by itself.
 *
 * `adopt` stores a new MAC through vtep-mac-writer.ts (a merge patch with a
 * resourceVersion precondition, recomputed and retried on 409), answering the
 * new MAC while the patch is in flight.
 */
import { EventEmitter } from 'node:events';

import { backoffDelay, type BackoffPolicy } from '../core/backoff';
import { invalidArgument, messageOf } from '../core/errors';
import type { DesiredMacSource } from '../guard/sources';
import { parseMac } from '../core/validate';
import {
  ADDRESS_FAMILIES,
  DEFAULT_ANNOTATION_PREFIX,
  readBackendData,
  type AddressFamily,
} from './annotation';
import { decodeNode, isKubernetesApiError, type KubeNode, type KubernetesApi } from './api';
import {
  DEFAULT_API_BACKOFF,
  Reflector,
  type ObjectChange,
  type WatchRestartEvent,
} from './reflector';
import { Sleeper } from './sleeper';
import { writeVtepMac, type AdoptEvent, type VtepMacWriterPorts } from './vtep-mac-writer';

export type { WatchRestartEvent, WatchRestartReason } from './reflector';
export type { AdoptEvent } from './vtep-mac-writer';

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

/** resourceVersions are opaque, but etcd's are integers: compared only when both are. */
function isOlder(candidate: string | undefined, than: string | undefined): boolean {
  if (candidate === undefined || than === undefined) return false;
  if (!/^\d+$/.test(candidate) || !/^\d+$/.test(than)) return false;
  return BigInt(candidate) < BigInt(than);
}

function problemOf(error: unknown, reading: 'list' | 'watch'): SourceProblem {
  if (!isKubernetesApiError(error)) return 'api-error';
  if (error.transient) return 'api-unreachable';
  if (error.statusCode === 401 || error.code === 'ECREDENTIALS') return 'unauthorized';
  if (error.statusCode === 403) return 'forbidden';
  if (error.statusCode === 404 && reading === 'list') return 'node-not-found';
  return 'api-error';
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
  readonly #reflector: Reflector<KubeNode>;
  readonly #backoff: BackoffPolicy;
  readonly #writerPorts: VtepMacWriterPorts;
  readonly #random: () => number;
  readonly #listeners = new Set<() => void>();
  /** Last valid value of each family's annotation. */
  readonly #families = new Map<AddressFamily, FamilyValue>();
  /** MACs being stored by `adopt`, answered while the patch is in flight. */
  readonly #optimistic = new Map<string, Optimistic>();
  #node: KubeNode | undefined;
  #apiProblem: Problem | null = null;
  #annotationProblem: Problem | null = null;
  #everSynced = false;
  #state: SourceState = 'starting';
  /** The last state reported, to report changes only. */
  #reported = 'starting||';
  #since = new Date();
  #lastSync: Date | null = null;
  /** Adopt's waits between retries, cut short by close(). */
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
    this.#backoff = { ...DEFAULT_API_BACKOFF, ...options.backoff };
    this.#random = options.random ?? Math.random;
    this.#writerPorts = {
      api: this.#api,
      nodeName: this.nodeName,
      annotationPrefix: this.annotationPrefix,
      maxConflicts: options.maxConflicts ?? 5,
      timeoutMs: options.adoptTimeoutMs ?? 30_000,
      random: this.#random,
      seen: (node) => {
        // Older than what the source has (a watch event overtook the answer): nothing new.
        if (
          this.#isClosed() ||
          isOlder(node.metadata.resourceVersion, this.#node?.metadata.resourceVersion)
        )
          return;
        this.#apply(node, false);
      },
      isClosed: () => this.#isClosed(),
      sleep: (ms) => this.#sleep(ms),
      retryDelay: (failures) => backoffDelay(this.#backoff, failures, this.#random),
      report: (event) => this.emit('adopt', event),
    };
    const api = this.#api;
    const name = this.nodeName;
    this.#reflector = new Reflector<KubeNode>(
      {
        what: `node ${name}`,
        list: async () => {
          const node = await api.getNode(name);
          return { items: [node], resourceVersion: node.metadata.resourceVersion ?? '' };
        },
        watch: (watchOptions, onEvent) => api.watchNodes({ ...watchOptions, name }, onEvent),
        decode: decodeNode,
        ...(options.watchTimeoutSeconds
          ? { watchTimeoutSeconds: options.watchTimeoutSeconds }
          : {}),
        backoff: this.#backoff,
        random: this.#random,
      },
      {
        listed: ([node]) => {
          if (node) this.#apply(node, true);
        },
        changed: (type, node, rv) => {
          this.#onChange(type, node, rv);
        },
        reachable: () => {
          this.#apiOk();
        },
        failed: (error, reading) => {
          this.#apiFailed(problemOf(error, reading), messageOf(error));
        },
        restarted: (event) => this.emit('watch', event),
      },
    );
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
        await writeVtepMac(this.#writerPorts, {
          family,
          device,
          mac: canonical,
          previous: this.#families.get(family)?.mac ?? '',
          node: this.#node,
        });
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
    this.#reflector.start();
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
    return this.#reflector.resumeVersion;
  }

  /** The Node's uid, once read. */
  get nodeUid(): string | undefined {
    return this.#node?.metadata.uid;
  }

  /** Stops watching; pending adoptions reject. Idempotent. */
  close(): void {
    if (this.#isClosed()) return;
    this.#closed = true;
    this.#reflector.close();
    this.#sleeper.wake();
    this.#listeners.clear();
  }

  /** A method, not the field: it changes while a request is awaited. */
  #isClosed(): boolean {
    return this.#closed;
  }

  // --- what the watch says -----------------------------------------------------------

  #onChange(type: ObjectChange, node: KubeNode, resourceVersion: string | undefined): void {
    if (node.metadata.name !== this.nodeName) return;
    this.#lastSync = new Date();
    if (type === 'DELETED') {
      this.#annotationProblem = {
        problem: 'node-deleted',
        message: `node ${this.nodeName} was deleted; keeping the last known MACs`,
      };
      this.#updateState();
      return;
    }
    // Older than what a patch response already told us: the watch is catching up.
    if (isOlder(resourceVersion, this.#node?.metadata.resourceVersion)) return;
    if (this.#annotationProblem?.problem === 'node-deleted') this.#annotationProblem = null;
    this.#apply(node, false);
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

  #sleep(ms: number): Promise<void> {
    return this.#closed ? Promise.resolve() : this.#sleeper.sleep(ms);
  }

  // --- adopt ------------------------------------------------------------------------

  #familyOf(device: string): AddressFamily | undefined {
    for (const [family, value] of this.#families) if (value.device === device) return family;
    return undefined;
  }
}
