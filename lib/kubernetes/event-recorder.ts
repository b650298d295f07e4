/**
 * Kubernetes Events on the guard's Node (guard-events.ts says which of the
 * guard's events become one), recorded the way kubelet's EventRecorder
 * (client-go tools/record) records them:
 *
 * - Events in the `default` namespace (a Node is cluster-scoped), named
 *   `<node>.<hex nanoseconds>`, through events.k8s.io/v1 (regarding, note,
 *   action, eventTime, reportingController/Instance) or, on an API server
 *   without that group, core/v1 (involvedObject, source, count and times);
 * - a repeat of an identical event (same object, type, reason and message)
 *   patches the existing Event - series {count, lastObservedTime}, or count and
 *   lastTimestamp in core/v1 - instead of creating another (strategic merge
 *   patch; a create again if it expired);
 * - more than 10 events differing only by message within 10 minutes are
 *   aggregated into one "(combined from similar events): ..." Event;
 * - a token bucket per object (burst 25, one more every 5 minutes) drops the
 *   rest, as client-go's spam filter does;
 * - Events go out one at a time, in order, off the guard's path; transport
 *   failures are retried with backoff, a refusal by the API is not.
 */
import { EventEmitter } from 'node:events';

import { backoffDelay, DEFAULT_JITTER, type BackoffPolicy } from '../core/backoff';
import {
  isKubernetesApiError,
  type EventApi,
  type KubeEvent,
  type KubernetesApi,
  type StoredEvent,
} from './api';
import { Sleeper } from './sleeper';

export const EVENT_COMPONENT = 'flannel-guard';

/** Reasons of the Events the guard records. */
export const EVENT_REASONS = {
  rewrite: 'VtepMacRewritten',
  restored: 'VtepMacRestored',
  adopted: 'VtepMacAdopted',
  contestedMac: 'VtepMacContested',
  contestedOffload: 'VtepOffloadContested',
  offloadBroken: 'VtepOffloadBroken',
  offloadUnverified: 'VtepOffloadUnverified',
  shared: 'VtepGuardedTwice',
  checksumErrors: 'ChecksumErrorsReceived',
  checksumSender: 'ChecksumErrorsFromPeer',
  meshDiverged: 'PeerEntriesStale',
  meshRepaired: 'PeerEntriesRepaired',
  meshContested: 'PeerEntriesContested',
  meshDuplicate: 'PeerVtepMacDuplicate',
} as const;

/** events.k8s.io/v1 `action` of each reason: what the guard saw or did (default: the reason). */
const EVENT_ACTIONS: Readonly<Record<string, string>> = {
  [EVENT_REASONS.rewrite]: 'Detected',
  [EVENT_REASONS.restored]: 'Restored',
  [EVENT_REASONS.adopted]: 'Adopted',
  [EVENT_REASONS.contestedMac]: 'StoppedCorrecting',
  [EVENT_REASONS.contestedOffload]: 'StoppedCorrecting',
  [EVENT_REASONS.offloadBroken]: 'DisabledOffload',
  [EVENT_REASONS.offloadUnverified]: 'RestoredOffload',
  [EVENT_REASONS.shared]: 'Detected',
  [EVENT_REASONS.checksumErrors]: 'Detected',
  [EVENT_REASONS.checksumSender]: 'Detected',
  [EVENT_REASONS.meshDiverged]: 'Detected',
  [EVENT_REASONS.meshRepaired]: 'Repaired',
  [EVENT_REASONS.meshContested]: 'StoppedRepairing',
  [EVENT_REASONS.meshDuplicate]: 'Detected',
};

export interface InvolvedObject {
  kind: string;
  apiVersion: string;
  name: string;
  uid: string;
  namespace?: string;
}

export interface EventRecorderOptions {
  api: Pick<KubernetesApi, 'createEvent' | 'patchEvent'>;
  /** source.host and reportingInstance: the node name. */
  host: string;
  component?: string;
  /** Wall clock in ms (tests). */
  now?: () => number;
  /** Spam filter: events per object at once, and the time one more takes to be allowed. */
  spamBurst?: number;
  spamRefillMs?: number;
  /** Aggregation: this many events differing only by message within the interval are combined. */
  aggregateMaxEvents?: number;
  aggregateIntervalMs?: number;
  /** Tries per Event (transport failures, 5xx, 429) and the backoff between them. */
  maxTries?: number;
  retryInitialMs?: number;
  retryMaxMs?: number;
  /** The retries' jitter draws from this (tests); Math.random by default. */
  random?: () => number;
  /** Events waiting beyond this are dropped. */
  queueLimit?: number;
}

export type EventDropReason = 'spam' | 'queue-full' | 'rejected' | 'retries-exhausted' | 'closed';

export interface RecordedEvent {
  action: 'created' | 'patched';
  event: KubeEvent;
  stored: StoredEvent;
}

export interface DroppedEvent {
  reason: EventDropReason;
  eventReason: string;
  message: string;
  error?: string;
}

export interface EventRecorderEvents {
  recorded: [RecordedEvent];
  dropped: [DroppedEvent];
}

const MAX_MESSAGE = 1024;
const CACHE_ENTRIES = 4096;

interface Pending {
  involved: InvolvedObject;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  at: number;
}

interface LoggedEvent {
  name: string;
  count: number;
  firstTimestamp: Date;
  eventTime: Date;
  resourceVersion: string | undefined;
  /** Where it is stored (a repeat patches it there); undefined until stored. */
  api: EventApi | undefined;
}

interface AggregateRecord {
  messages: Set<string>;
  last: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** A Map that forgets its least recently used entries beyond `limit`. */
class LruCache<V> {
  readonly #map = new Map<string, V>();
  constructor(readonly limit: number) {}
  get(key: string): V | undefined {
    const value = this.#map.get(key);
    if (value !== undefined) {
      this.#map.delete(key);
      this.#map.set(key, value);
    }
    return value;
  }
  set(key: string, value: V): void {
    this.#map.delete(key);
    this.#map.set(key, value);
    if (this.#map.size > this.limit) {
      const oldest = this.#map.keys().next();
      if (!oldest.done) this.#map.delete(oldest.value);
    }
  }
}

/** metav1.Time: RFC 3339 to the second. */
function toSeconds(ms: number): Date {
  return new Date(Math.floor(ms / 1000) * 1000);
}

export class EventRecorder extends EventEmitter<EventRecorderEvents> {
  readonly host: string;
  readonly component: string;
  readonly #api: Pick<KubernetesApi, 'createEvent' | 'patchEvent'>;
  readonly #now: () => number;
  readonly #spamBurst: number;
  readonly #spamRefillMs: number;
  readonly #aggregateMax: number;
  readonly #aggregateIntervalMs: number;
  readonly #maxTries: number;
  readonly #retry: BackoffPolicy;
  readonly #random: () => number;
  readonly #queueLimit: number;
  readonly #queue: Pending[] = [];
  readonly #logged = new LruCache<LoggedEvent>(CACHE_ENTRIES);
  readonly #aggregates = new LruCache<AggregateRecord>(CACHE_ENTRIES);
  readonly #buckets = new LruCache<Bucket>(CACHE_ENTRIES);
  readonly #idleWaiters = new Set<() => void>();
  #working = false;
  #closed = false;
  #sequence = 0;
  readonly #sleeper = new Sleeper();

  constructor(options: EventRecorderOptions) {
    super();
    this.#api = options.api;
    this.host = options.host;
    this.component = options.component ?? EVENT_COMPONENT;
    this.#now = options.now ?? Date.now;
    this.#spamBurst = options.spamBurst ?? 25;
    this.#spamRefillMs = options.spamRefillMs ?? 300_000;
    this.#aggregateMax = options.aggregateMaxEvents ?? 10;
    this.#aggregateIntervalMs = options.aggregateIntervalMs ?? 600_000;
    this.#maxTries = options.maxTries ?? 12;
    this.#retry = {
      initialMs: options.retryInitialMs ?? 1_000,
      maxMs: options.retryMaxMs ?? 10_000,
      jitter: DEFAULT_JITTER,
    };
    this.#random = options.random ?? Math.random;
    this.#queueLimit = options.queueLimit ?? 1_000;
  }

  /** Queues an Event about `involved`; returns at once. */
  record(
    involved: InvolvedObject,
    type: 'Normal' | 'Warning',
    reason: string,
    message: string,
  ): void {
    const text = message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE - 1)}…` : message;
    if (this.#closed) {
      this.emit('dropped', { reason: 'closed', eventReason: reason, message: text });
      return;
    }
    if (this.#queue.length >= this.#queueLimit) {
      this.emit('dropped', { reason: 'queue-full', eventReason: reason, message: text });
      return;
    }
    this.#queue.push({ involved, type, reason, message: text, at: this.#now() });
    void this.#work();
  }

  /** Resolves once every queued Event has been sent (or dropped), or after `timeoutMs`. */
  flush(timeoutMs: number): Promise<boolean> {
    if (!this.#working && this.#queue.length === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#idleWaiters.delete(done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      this.#idleWaiters.add(done);
    });
  }

  /** Stops sending; what is still queued is dropped. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#sleeper.wake();
    for (const pending of this.#queue.splice(0)) {
      this.emit('dropped', {
        reason: 'closed',
        eventReason: pending.reason,
        message: pending.message,
      });
    }
  }

  async #work(): Promise<void> {
    if (this.#working) return;
    this.#working = true;
    try {
      for (let next = this.#queue.shift(); next; next = this.#queue.shift()) {
        if (this.#closed) break;
        await this.#deliver(next);
      }
    } finally {
      this.#working = false;
      for (const wake of [...this.#idleWaiters]) wake();
      this.#idleWaiters.clear();
    }
  }

  /** The correlation of client-go's EventCorrelator, then create or patch. */
  async #deliver(pending: Pending): Promise<void> {
    const { event, key } = this.#aggregate(this.#makeEvent(pending));
    const logged = this.#logged.get(key);
    let repeatOf: StoredEvent | undefined;
    if (logged) {
      event.metadata.name = logged.name;
      event.firstTimestamp = logged.firstTimestamp;
      event.eventTime = logged.eventTime;
      event.count = logged.count + 1;
      if (logged.api) {
        repeatOf = {
          name: logged.name,
          namespace: event.metadata.namespace,
          resourceVersion: logged.resourceVersion,
          count: logged.count,
          api: logged.api,
        };
      }
    }
    this.#logged.set(key, {
      name: event.metadata.name,
      count: event.count,
      firstTimestamp: event.firstTimestamp,
      eventTime: event.eventTime,
      resourceVersion: logged?.resourceVersion,
      api: logged?.api,
    });
    if (!this.#allow(event)) {
      this.emit('dropped', { reason: 'spam', eventReason: event.reason, message: event.message });
      return;
    }
    for (let attempt = 1; ; attempt += 1) {
      if (this.#closed) {
        this.emit('dropped', {
          reason: 'closed',
          eventReason: event.reason,
          message: event.message,
        });
        return;
      }
      try {
        let stored: StoredEvent | undefined;
        let action: RecordedEvent['action'] = 'created';
        if (repeatOf) {
          try {
            stored = await this.#api.patchEvent(repeatOf, {
              count: event.count,
              lastTimestamp: event.lastTimestamp,
              message: event.message,
            });
            action = 'patched';
          } catch (error) {
            // Expired (Events live an hour by default): create it again.
            if (!(isKubernetesApiError(error) && error.statusCode === 404)) throw error;
          }
        }
        stored ??= await this.#api.createEvent(event);
        this.#logged.set(key, {
          name: stored.name,
          count: stored.count,
          firstTimestamp: event.firstTimestamp,
          eventTime: event.eventTime,
          resourceVersion: stored.resourceVersion,
          api: stored.api,
        });
        this.emit('recorded', { action, event, stored });
        return;
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        const retry = !isKubernetesApiError(error) || error.transient;
        if (!retry || attempt >= this.#maxTries) {
          this.emit('dropped', {
            reason: retry ? 'retries-exhausted' : 'rejected',
            eventReason: event.reason,
            message: event.message,
            error: message,
          });
          return;
        }
        await this.#sleeper.sleep(backoffDelay(this.#retry, attempt, this.#random));
      }
    }
  }

  #makeEvent(pending: Pending): KubeEvent {
    const at = toSeconds(pending.at);
    return {
      metadata: {
        name: this.#eventName(pending.involved.name, pending.at),
        namespace: pending.involved.namespace || 'default',
      },
      involvedObject: { ...pending.involved },
      reason: pending.reason,
      message: pending.message,
      type: pending.type,
      count: 1,
      firstTimestamp: at,
      lastTimestamp: at,
      source: { component: this.component, host: this.host },
      reportingComponent: this.component,
      reportingInstance: this.host,
      action: EVENT_ACTIONS[pending.reason] ?? pending.reason,
      eventTime: new Date(pending.at),
    };
  }

  /** `<object name>.<hex of the time in ns>`, unique within this process. */
  #eventName(object: string, at: number): string {
    this.#sequence = (this.#sequence + 1) % 1_000_000;
    const nanos = BigInt(Math.floor(at)) * 1_000_000n + BigInt(this.#sequence);
    return `${object}.${nanos.toString(16)}`;
  }

  #objectKey(event: KubeEvent): string {
    const o = event.involvedObject;
    return [
      event.source.component,
      event.source.host,
      o.kind,
      o.namespace ?? '',
      o.name,
      o.uid,
      o.apiVersion,
    ].join('\u0000');
  }

  /** client-go's EventAggregator: similar events (all but the message) beyond the limit are combined. */
  #aggregate(event: KubeEvent): { event: KubeEvent; key: string } {
    const aggregateKey = [
      this.#objectKey(event),
      event.type,
      event.reason,
      event.reportingComponent,
      event.reportingInstance,
    ].join('\u0000');
    const eventKey = `${aggregateKey}\u0000${event.message}`;
    const now = this.#now();
    let record = this.#aggregates.get(aggregateKey);
    if (!record || now - record.last > this.#aggregateIntervalMs) {
      record = { messages: new Set(), last: now };
    }
    record.messages.add(event.message);
    record.last = now;
    this.#aggregates.set(aggregateKey, record);
    if (record.messages.size < this.#aggregateMax) return { event, key: eventKey };
    // Do not let the set grow beyond the limit.
    const first = record.messages.values().next();
    if (!first.done) record.messages.delete(first.value);
    const at = toSeconds(now);
    return {
      event: {
        ...event,
        metadata: {
          name: this.#eventName(event.involvedObject.name, now),
          namespace: event.metadata.namespace,
        },
        message: `(combined from similar events): ${event.message}`,
        count: 1,
        firstTimestamp: at,
        lastTimestamp: at,
        eventTime: new Date(now),
      },
      key: aggregateKey,
    };
  }

  /** client-go's spam filter: a token bucket per object. */
  #allow(event: KubeEvent): boolean {
    const key = this.#objectKey(event);
    const now = this.#now();
    const bucket = this.#buckets.get(key) ?? { tokens: this.#spamBurst, at: now };
    bucket.tokens = Math.min(
      this.#spamBurst,
      bucket.tokens + (now - bucket.at) / this.#spamRefillMs,
    );
    bucket.at = now;
    const allowed = bucket.tokens >= 1;
    if (allowed) bucket.tokens -= 1;
    this.#buckets.set(key, bucket);
    return allowed;
  }
}
