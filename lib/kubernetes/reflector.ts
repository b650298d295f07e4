/**
 * Reflector: a list of Kubernetes objects, then a watch from the list's resourceVersion with
 * bookmarks, kept going for as long as it runs - client-go's reflector, for the few objects the
 * guard follows (its own Node; every Node for the mesh view).
 *
 * A watch the server ends is resumed from the last resourceVersion seen (events and
 * bookmarks); `410 Gone` (too old a version, as an HTTP status or an ERROR event) lists again;
 * a dropped, refused or stalled connection is retried after a bounded, jittered exponential
 * backoff (core/backoff.ts). What the objects mean is the owner's: it gets each list whole and
 * each change in stream order, and is told when the API fails and recovers.
 */
import { backoffDelay, DEFAULT_JITTER, type BackoffPolicy } from '../core/backoff';
import { messageOf } from '../core/errors';
import { isKubernetesApiError, type WatchEnd, type WatchEvent, type WatchStream } from './api';
import { Sleeper } from './sleeper';

export type WatchRestartReason =
  /** The server ended the watch (its timeout): resumed at once. */
  | 'closed'
  /** 410 Gone: the objects are listed again. */
  | 'expired'
  /** The connection broke in the middle of the stream. */
  | 'dropped'
  /** Nothing arrived (not even a bookmark) for longer than the server's timeout. */
  | 'stalled'
  /** The list or the watch request failed. */
  | 'error';

export interface WatchRestartEvent {
  reason: WatchRestartReason;
  /** Wait before the next attempt (0: at once). */
  delayMs: number;
  message?: string;
}

export type ObjectChange = 'ADDED' | 'MODIFIED' | 'DELETED';

/** What the reflector tells its owner, in the order it happens. */
export interface ReflectorHandlers<T> {
  /** A fresh list: every object there is now (after a start or a 410). */
  listed(items: readonly T[], resourceVersion: string): void;
  /** One watch event whose object decoded. */
  changed(type: ObjectChange, item: T, resourceVersion: string | undefined): void;
  /** A list answered or a watch opened. */
  reachable(): void;
  /** A list failed, or a watch was refused before it opened. */
  failed(error: unknown, reading: 'list' | 'watch'): void;
  /** The watch ended; the next attempt is in `delayMs`. */
  restarted(event: WatchRestartEvent): void;
}

export interface ReflectorOptions<T> {
  /** Reads every object followed, with the resourceVersion to watch from. */
  list(): Promise<{ items: readonly T[]; resourceVersion: string }>;
  /** Opens a watch from `resourceVersion` with bookmarks. */
  watch(
    options: { resourceVersion: string; timeoutSeconds: number; idleTimeoutMs: number },
    onEvent: (event: WatchEvent) => void,
  ): WatchStream;
  /** The object of a watch event, or undefined to pass it by (its resourceVersion still counts). */
  decode(object: Record<string, unknown>): T | undefined;
  /** For messages: what is watched ("node n1", "nodes"). */
  what: string;
  /** The server is asked to end each watch after a random time in this range (s). */
  watchTimeoutSeconds?: readonly [number, number];
  /** Reconnection backoff: first delay, cap (ms), jitter (default ±20 %). */
  backoff?: Partial<BackoffPolicy>;
  random?: () => number;
}

/** The API's reconnection backoff, also adopt's retries (KubernetesMacSource). */
export const DEFAULT_API_BACKOFF: BackoffPolicy = {
  initialMs: 500,
  maxMs: 30_000,
  jitter: DEFAULT_JITTER,
};
/** A watch open this long was healthy: the next restart is immediate and the backoff starts over. */
const HEALTHY_WATCH_MS = 1_000;

function resourceVersionOf(object: Record<string, unknown>): string | undefined {
  const metadata = object.metadata as { resourceVersion?: unknown } | undefined;
  return typeof metadata?.resourceVersion === 'string' ? metadata.resourceVersion : undefined;
}

export class Reflector<T> {
  readonly #options: ReflectorOptions<T>;
  readonly #handlers: ReflectorHandlers<T>;
  readonly #watchTimeout: readonly [number, number];
  readonly #backoff: BackoffPolicy;
  readonly #random: () => number;
  readonly #sleeper = new Sleeper();
  /** Where the watch resumes: the last resourceVersion of its stream (events and bookmarks). */
  #resourceVersion: string | null = null;
  #expired = false;
  #watchFailure: Error | null = null;
  #stream: WatchStream | undefined;
  #running = false;
  #closed = false;

  constructor(options: ReflectorOptions<T>, handlers: ReflectorHandlers<T>) {
    this.#options = options;
    this.#handlers = handlers;
    this.#watchTimeout = options.watchTimeoutSeconds ?? [300, 600];
    this.#backoff = { ...DEFAULT_API_BACKOFF, ...options.backoff };
    this.#random = options.random ?? Math.random;
  }

  /** Where the watch resumes after a disconnection: the last resourceVersion it delivered. */
  get resumeVersion(): string | null {
    return this.#resourceVersion;
  }

  /** Starts listing and watching (idempotent). */
  start(): void {
    if (this.#closed) throw new Error(`the reflector of ${this.#options.what} is closed`);
    if (this.#running) return;
    this.#running = true;
    this.#run().catch((error: unknown) => {
      // #run handles every API failure itself; anything else (a handler's bug) is worth seeing.
      process.emitWarning(error instanceof Error ? error : new Error(String(error)));
    });
  }

  /** Stops: the open watch is aborted and no request follows. Idempotent. */
  close(): void {
    this.#closed = true;
    this.#stream?.abort();
    this.#sleeper.wake();
  }

  /** A method, not the field: it changes while a request is awaited. */
  #isClosed(): boolean {
    return this.#closed;
  }

  async #run(): Promise<void> {
    // Consecutive restarts without a healthy watch in between. Only a watch that stayed open
    // HEALTHY_WATCH_MS forgets them: a server answering every watch with 410 or an instant
    // close (and every list with success) meets the same growing delay as one that refuses,
    // so that no answer of the server's makes this loop spin.
    let failures = 0;
    while (!this.#closed) {
      if (this.#resourceVersion === null) {
        try {
          const { items, resourceVersion } = await this.#options.list();
          if (this.#isClosed()) return;
          this.#resourceVersion = resourceVersion;
          this.#handlers.reachable();
          this.#handlers.listed(items, resourceVersion);
        } catch (error) {
          if (this.#isClosed()) return;
          this.#handlers.failed(error, 'list');
          failures += 1;
          const delayMs = this.#delay(failures);
          this.#handlers.restarted({ reason: 'error', delayMs, message: messageOf(error) });
          await this.#sleep(delayMs);
          continue;
        }
      }
      const { end, opened, lastedMs } = await this.#watchOnce(this.#resourceVersion);
      if (this.#isClosed()) return;
      const healthy = opened && lastedMs >= HEALTHY_WATCH_MS;
      failures = healthy ? 0 : failures + 1;
      // After a healthy watch the first restart is immediate; repeated ones back off.
      const delayMs = failures === 0 ? 0 : this.#delay(failures);
      const restart = this.#restartOf(end, opened, delayMs);
      if (restart === undefined) return; // aborted: closing
      this.#handlers.restarted(restart);
      if (delayMs > 0) await this.#sleep(delayMs);
    }
  }

  /** Why the watch ended, as the restart to report; a 410 also forgets where to resume. */
  #restartOf(end: WatchEnd, opened: boolean, delayMs: number): WatchRestartEvent | undefined {
    const failure = this.#watchFailure;
    this.#watchFailure = null;
    const gone =
      this.#expired ||
      (end.kind === 'error' && isKubernetesApiError(end.error) && end.error.statusCode === 410);
    this.#expired = false;
    if (gone) {
      // 410 Gone: the resourceVersion is too old; list again.
      this.#resourceVersion = null;
      return { reason: 'expired', delayMs };
    }
    if (failure) return { reason: 'error', delayMs, message: failure.message };
    switch (end.kind) {
      case 'closed':
      case 'stalled':
        return { reason: end.kind, delayMs };
      case 'error':
        if (!opened) this.#handlers.failed(end.error, 'watch');
        return { reason: opened ? 'dropped' : 'error', delayMs, message: end.error.message };
      case 'aborted':
        return undefined;
    }
  }

  async #watchOnce(
    resourceVersion: string,
  ): Promise<{ end: WatchEnd; opened: boolean; lastedMs: number }> {
    const [min, max] = this.#watchTimeout;
    const timeoutSeconds = Math.round(min + this.#random() * (max - min));
    const stream = this.#options.watch(
      { resourceVersion, timeoutSeconds, idleTimeoutMs: (timeoutSeconds + 30) * 1000 },
      (event) => {
        this.#onEvent(event, stream);
      },
    );
    this.#stream = stream;
    let opened = false;
    const started = Date.now();
    stream.opened.then(
      () => {
        opened = true;
        if (!this.#isClosed()) this.#handlers.reachable();
      },
      () => undefined,
    );
    const end = await stream.ended;
    this.#stream = undefined;
    return { end, opened, lastedMs: Date.now() - started };
  }

  #onEvent(event: WatchEvent, stream: WatchStream): void {
    if (this.#isClosed()) return;
    const resourceVersion = resourceVersionOf(event.object);
    switch (event.type) {
      case 'ADDED':
      case 'MODIFIED':
      case 'DELETED': {
        if (resourceVersion !== undefined) this.#resourceVersion = resourceVersion;
        const item = this.#options.decode(event.object);
        if (item !== undefined) this.#handlers.changed(event.type, item, resourceVersion);
        return;
      }
      case 'BOOKMARK':
        if (resourceVersion !== undefined) this.#resourceVersion = resourceVersion;
        return;
      case 'ERROR': {
        const status = event.object as { code?: unknown; message?: unknown; reason?: unknown };
        if (status.code === 410) {
          this.#expired = true;
        } else {
          this.#watchFailure = new Error(
            `watch ${this.#options.what}: ${String(status.code)} ${String(status.reason)}: ${String(status.message)}`,
          );
        }
        stream.abort();
        return;
      }
      default:
        return;
    }
  }

  #delay(failures: number): number {
    return backoffDelay(this.#backoff, failures, this.#random);
  }

  #sleep(ms: number): Promise<void> {
    return this.#closed ? Promise.resolve() : this.#sleeper.sleep(ms);
  }
}
