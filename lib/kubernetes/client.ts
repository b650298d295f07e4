/**
 * The few Kubernetes API calls the guard makes, through @kubernetes/client-node:
 * its KubeConfig (in-cluster service account or a kubeconfig file, with every
 * authentication method it supports), its typed CoreV1Api for reading and
 * patching the Node (and its status, for the opt-in condition) and its
 * EventsV1Api for Events (events.k8s.io/v1, what current controllers and
 * `kubectl events` use; core/v1 Events only once the API server has answered
 * that it lacks the group). Two things are ours:
 *
 * - the HTTP transport under CoreV1Api (client-node's default has no timeout
 *   and cannot be aborted): every request has a deadline and `close()` aborts
 *   whatever is in flight, so a hung API server never wedges the guard;
 * - the watch stream, read line by line with an idle deadline on the same
 *   transport and the same authentication (client-node's Watch cannot be
 *   aborted while it connects).
 *
 * client-node is an ES module; it is loaded with `import()` on first use, so
 * nothing Kubernetes is loaded unless a cluster is used. Its type
 * declarations need @types/ws, which this package does not have, so the
 * parts used here are declared below instead of imported.
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { delimiter, dirname, resolve } from 'node:path';

import { invalidArgument, isSystemError, type SystemError } from '../core/errors';
import { readRegularFile } from '../core/files';

// --- the parts of @kubernetes/client-node used here ------------------------------

interface RequestContextLike {
  getUrl(): string;
  getHttpMethod(): string;
  getHeaders(): Record<string, string>;
  getBody(): unknown;
  getAgent(): http.Agent | https.Agent | undefined;
  setHeaderParam(key: string, value: string): void;
}

interface ResponseBodyLike {
  text(): Promise<string>;
  binary(): Promise<Buffer>;
}

interface KubeConfigLike {
  loadFromString(text: string): void;
  makePathsAbsolute(rootDirectory: string): void;
  loadFromDefault(): void;
  loadFromCluster(): void;
  getCurrentCluster(): { name: string; server: string } | null;
  getCurrentUser(): { name: string } | null;
  applySecurityAuthentication(context: RequestContextLike): Promise<void>;
}

interface ObjectMetaLike {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  annotations?: Record<string, string>;
}

interface EventLike {
  metadata: ObjectMetaLike;
  /** core/v1 */
  count?: number;
  /** events.k8s.io/v1 */
  series?: { count?: number };
}

interface EventApiLike {
  createNamespacedEvent(param: {
    namespace: string;
    body: object;
    fieldManager?: string;
  }): Promise<EventLike>;
  patchNamespacedEvent(
    param: { name: string; namespace: string; body: object; fieldManager?: string },
    options?: unknown,
  ): Promise<EventLike>;
}

interface CoreV1ApiLike extends EventApiLike {
  readNode(param: { name: string }): Promise<{ metadata?: ObjectMetaLike }>;
  patchNode(
    param: { name: string; body: object; fieldManager?: string },
    options?: unknown,
  ): Promise<{ metadata?: ObjectMetaLike }>;
  patchNodeStatus(
    param: { name: string; body: object; fieldManager?: string },
    options?: unknown,
  ): Promise<{ metadata?: ObjectMetaLike }>;
}

interface ClientNodeModule {
  KubeConfig: new () => KubeConfigLike;
  CoreV1Api: new (configuration: unknown) => CoreV1ApiLike;
  EventsV1Api: new (configuration: unknown) => EventApiLike;
  ServerConfiguration: new (url: string, variables: Record<string, string>) => unknown;
  RequestContext: new (url: string, method: string) => RequestContextLike;
  ResponseContext: new (
    status: number,
    headers: Record<string, string>,
    body: ResponseBodyLike,
  ) => unknown;
  Observable: new (promise: Promise<unknown>) => unknown;
  ApiException: abstract new (...args: never[]) => Error & { code: number; body: unknown };
  createConfiguration(parameters: {
    baseServer: unknown;
    authMethods: { default: KubeConfigLike };
    httpApi: { send(context: RequestContextLike): unknown };
  }): unknown;
  setHeaderOptions(key: string, value: string): unknown;
  loadAllYaml(text: string): unknown[];
}

// A variable, so that TypeScript does not load client-node's declarations (see above).
const CLIENT_NODE = '@kubernetes/client-node';
let clientNode: Promise<ClientNodeModule> | undefined;

/** Loads @kubernetes/client-node (an ES module) once. */
export function loadClientNode(): Promise<ClientNodeModule> {
  clientNode ??= import(CLIENT_NODE) as Promise<ClientNodeModule>;
  return clientNode;
}

// --- what the guard uses ------------------------------------------------------------

export const FIELD_MANAGER = 'flannel-guard';
export const MERGE_PATCH = 'application/merge-patch+json';
export const STRATEGIC_MERGE_PATCH = 'application/strategic-merge-patch+json';

/** The metadata of an object as the guard keeps it. */
export interface KubeObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  annotations?: Record<string, string>;
}

export interface KubeNode {
  metadata: KubeObjectMeta;
}

/** The API an Event is stored through: events.k8s.io/v1, or core/v1 where the group is missing. */
export type EventApi = 'events.k8s.io/v1' | 'v1';

/**
 * An Event as the recorder correlates it, in core/v1's fields; the client writes it through
 * events.k8s.io/v1 (regarding, note, eventTime, reportingController, action, series) where
 * the API server has that group.
 */
export interface KubeEvent {
  metadata: { name: string; namespace: string; resourceVersion?: string };
  involvedObject: {
    kind: string;
    apiVersion: string;
    name: string;
    uid: string;
    namespace?: string;
  };
  reason: string;
  message: string;
  type: 'Normal' | 'Warning';
  count: number;
  firstTimestamp: Date;
  lastTimestamp: Date;
  source: { component: string; host: string };
  reportingComponent: string;
  reportingInstance: string;
  /** events.k8s.io/v1 `action`: what the reporter did or saw ('Detected', 'Restored', ...). */
  action: string;
  /** events.k8s.io/v1 `eventTime`: the first occurrence, to the microsecond. */
  eventTime: Date;
}

/** A repeat of a stored Event (kubelet's recorder patches instead of creating another). */
export interface EventRepeat {
  count: number;
  lastTimestamp: Date;
  message: string;
}

/** What the API server stored of an Event. */
export interface StoredEvent {
  name: string;
  namespace: string;
  resourceVersion: string | undefined;
  count: number;
  api: EventApi;
}

/** One event of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR. */
export interface WatchEvent {
  type: string;
  object: Record<string, unknown>;
}

/** How a watch stream ended. */
export type WatchEnd =
  { kind: 'closed' } | { kind: 'aborted' } | { kind: 'stalled' } | { kind: 'error'; error: Error };

export interface WatchStream {
  /** Resolves once the server answered 200 and the stream is open; rejects otherwise. */
  readonly opened: Promise<void>;
  /** Resolves when the stream has ended (never rejects). */
  readonly ended: Promise<WatchEnd>;
  abort(): void;
}

export interface WatchOptions {
  resourceVersion: string;
  /** Asks the server to end the watch after this long (it then ends cleanly). */
  timeoutSeconds: number;
  /** Ends the stream as `stalled` when nothing arrives for this long. */
  idleTimeoutMs: number;
}

/** The API calls the Kubernetes source and the event recorder make. */
export interface KubernetesApi {
  /** The API server's URL, for messages. */
  readonly server: string;
  getNode(name: string): Promise<KubeNode>;
  /** Watches one Node (a field selector on its name): GET /api/v1/nodes?watch=true. */
  watchNode(name: string, options: WatchOptions, onEvent: (event: WatchEvent) => void): WatchStream;
  /** A JSON merge patch (RFC 7386) of the Node. */
  patchNode(name: string, patch: object): Promise<KubeNode>;
  /** Through events.k8s.io/v1, or core/v1 once the server said it lacks that group. */
  createEvent(event: KubeEvent): Promise<StoredEvent>;
  /** A repeat, through the API that stored the Event (`series` or `count`). */
  patchEvent(stored: StoredEvent, repeat: EventRepeat): Promise<StoredEvent>;
  /** A strategic merge patch of the Node's status (conditions merge by `type`). */
  patchNodeStatus(name: string, patch: object): Promise<KubeNode>;
  /** Aborts whatever is in flight; later calls reject. */
  close(): void;
}

/**
 * An answer other than success from the API server, with the fields of its
 * Status object, or a request that never got one (`statusCode` 0: refused,
 * reset, timed out).
 */
export class KubernetesApiError extends Error {
  readonly statusCode: number;
  /** Status.reason: 'Conflict', 'NotFound', 'Expired', 'Forbidden' ... */
  readonly reason: string | undefined;
  /** The transport error's code (ECONNREFUSED, ETIMEDOUT ...) when there was no answer. */
  readonly code: string | undefined;

  constructor(
    message: string,
    fields: { statusCode: number; reason?: string | undefined; code?: string | undefined },
  ) {
    super(message);
    this.name = 'KubernetesApiError';
    this.statusCode = fields.statusCode;
    this.reason = fields.reason;
    this.code = fields.code;
  }

  /** No answer, or one saying the server cannot serve now (5xx, 429). */
  get transient(): boolean {
    return this.statusCode === 0 || this.statusCode === 429 || this.statusCode >= 500;
  }
}

export function isKubernetesApiError(error: unknown): error is KubernetesApiError {
  return error instanceof KubernetesApiError;
}

interface StatusLike {
  kind?: unknown;
  message?: unknown;
  reason?: unknown;
  code?: unknown;
}

function parseStatus(body: unknown): StatusLike | undefined {
  if (typeof body === 'object' && body !== null) return body;
  if (typeof body !== 'string' || body === '') return undefined;
  try {
    const parsed = JSON.parse(body) as unknown;
    return typeof parsed === 'object' && parsed !== null ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** An API error from an HTTP status and its (Status) body. */
export function apiErrorFromStatus(
  statusCode: number,
  body: unknown,
  what: string,
): KubernetesApiError {
  const status = parseStatus(body);
  const reason = typeof status?.reason === 'string' ? status.reason : undefined;
  const named = reason ?? http.STATUS_CODES[statusCode] ?? '';
  const message = typeof status?.message === 'string' ? status.message : named;
  const text = message === named ? `${statusCode} ${named}` : `${statusCode} ${named}: ${message}`;
  return new KubernetesApiError(`${what}: ${text}`, { statusCode, reason });
}

function transportError(error: unknown, what: string): KubernetesApiError {
  const code =
    typeof (error as { code?: unknown } | null)?.code === 'string'
      ? (error as { code: string }).code
      : undefined;
  const message = error instanceof Error ? error.message : String(error);
  return new KubernetesApiError(`${what}: ${message}`, { statusCode: 0, code });
}

// --- transport ------------------------------------------------------------------------

interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Caps on what the API server may send. etcd refuses objects over 1.5 MiB, so
 * a Node, and a watch line carrying one, is far below these; anything longer
 * is hostile or broken and is dropped, never buffered.
 */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
export const MAX_WATCH_LINE_BYTES = 4 * 1024 * 1024;
/** An error body (a Status) is read up to this much; the rest is discarded. */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;

function tooLarge(subject: string, limit: number): Error {
  return Object.assign(new Error(`${subject} longer than ${limit} bytes: dropped`), {
    code: 'EMSGSIZE',
  });
}

/** Collects a body up to `limit` bytes: the chunks, and whether more arrived. */
class BoundedBody {
  readonly #chunks: Buffer[] = [];
  #length = 0;
  overflowed = false;

  constructor(readonly limit: number) {}

  /** False once the limit is passed (the chunk beyond it is not kept). */
  add(chunk: Buffer): boolean {
    if (this.#length + chunk.length > this.limit) {
      this.overflowed = true;
      return false;
    }
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    return true;
  }

  text(): string {
    return Buffer.concat(this.#chunks, this.#length).toString('utf8');
  }
}

function flattenHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return flat;
}

class Transport {
  readonly #inflight = new Set<http.ClientRequest>();
  readonly #timeoutMs: number;
  #closed = false;

  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  get closed(): boolean {
    return this.#closed;
  }

  #open(context: RequestContextLike, body?: string): http.ClientRequest {
    if (this.#closed) throw new Error('the Kubernetes client is closed');
    const url = new URL(context.getUrl());
    const headers: Record<string, string | number> = { ...context.getHeaders() };
    if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
    const options: https.RequestOptions = { method: context.getHttpMethod(), headers };
    const agent = context.getAgent();
    if (agent) options.agent = agent;
    const request =
      url.protocol === 'https:' ? https.request(url, options) : http.request(url, options);
    this.#inflight.add(request);
    request.once('close', () => this.#inflight.delete(request));
    return request;
  }

  /** One request with a deadline; resolves with any HTTP answer, rejects without one. */
  send(context: RequestContextLike): Promise<RawResponse> {
    const rawBody = context.getBody();
    const body = typeof rawBody === 'string' ? rawBody : undefined;
    return new Promise((resolve, reject) => {
      let request: http.ClientRequest;
      try {
        request = this.#open(context, body);
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
        return;
      }
      const timer = setTimeout(() => {
        request.destroy(
          Object.assign(new Error(`no answer within ${this.#timeoutMs} ms`), {
            code: 'ETIMEDOUT',
          }),
        );
      }, this.#timeoutMs);
      request.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      request.once('response', (response) => {
        const body = new BoundedBody(MAX_RESPONSE_BYTES);
        response.on('data', (chunk: Buffer) => {
          if (!body.add(chunk)) {
            clearTimeout(timer);
            request.destroy();
            reject(tooLarge('a response', MAX_RESPONSE_BYTES));
          }
        });
        response.once('error', (error) => {
          clearTimeout(timer);
          reject(error);
        });
        response.once('end', () => {
          clearTimeout(timer);
          resolve({
            status: response.statusCode ?? 0,
            headers: flattenHeaders(response.headers),
            body: body.text(),
          });
        });
      });
      request.end(body);
    });
  }

  /**
   * A streaming GET whose body is read as JSON lines. A line longer than
   * MAX_WATCH_LINE_BYTES ends the stream with EMSGSIZE; only complete lines
   * count as activity, so a server dripping bytes still goes `stalled`.
   */
  stream(
    context: RequestContextLike,
    what: string,
    idleTimeoutMs: number,
    onLine: (line: string) => void,
  ): WatchStream {
    let resolveOpened: () => void = () => {};
    let rejectOpened: (error: Error) => void = () => {};
    let resolveEnded: (end: WatchEnd) => void = () => {};
    const opened = new Promise<void>((resolve, reject) => {
      resolveOpened = resolve;
      rejectOpened = reject;
    });
    // Never leave a rejection of `opened` unhandled: `ended` reports the same failure.
    opened.catch(() => undefined);
    const ended = new Promise<WatchEnd>((resolve) => {
      resolveEnded = resolve;
    });
    let settled = false;
    let aborted = false;
    let stalled = false;
    let idle: NodeJS.Timeout | undefined;
    let request: http.ClientRequest | undefined;
    const finish = (end: WatchEnd): void => {
      if (settled) return;
      settled = true;
      clearTimeout(idle);
      if (end.kind === 'error') rejectOpened(end.error);
      else rejectOpened(new Error(`${what}: ${end.kind}`));
      resolveEnded(end);
    };
    const armIdle = (): void => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        stalled = true;
        request?.destroy();
      }, idleTimeoutMs);
    };
    const endOf = (error: unknown): WatchEnd =>
      aborted
        ? { kind: 'aborted' }
        : stalled
          ? { kind: 'stalled' }
          : { kind: 'error', error: transportError(error, what) };
    try {
      request = this.#open(context);
    } catch (error) {
      finish({ kind: 'error', error: transportError(error, what) });
      return { opened, ended, abort: () => undefined };
    }
    armIdle();
    request.once('error', (error) => {
      finish(endOf(error));
    });
    request.once('response', (response) => {
      const status = response.statusCode ?? 0;
      response.once('error', (error) => {
        finish(endOf(error));
      });
      if (status !== 200) {
        const body = new BoundedBody(MAX_ERROR_BODY_BYTES);
        response.on('data', (chunk: Buffer) => body.add(chunk));
        response.once('end', () => {
          finish({ kind: 'error', error: apiErrorFromStatus(status, body.text(), what) });
        });
        return;
      }
      resolveOpened();
      armIdle();
      // The part of the current line received so far, as chunks: each byte is
      // scanned for a newline once, however the line is cut.
      let partial: Buffer[] = [];
      let partialBytes = 0;
      response.on('data', (chunk: Buffer) => {
        let start = 0;
        for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
          partial.push(chunk.subarray(start, newline));
          const line = Buffer.concat(partial, partialBytes + newline - start)
            .toString('utf8')
            .trim();
          partial = [];
          partialBytes = 0;
          start = newline + 1;
          armIdle();
          if (line !== '') onLine(line);
          if (settled) return;
        }
        partialBytes += chunk.length - start;
        if (partialBytes > MAX_WATCH_LINE_BYTES) {
          const error = tooLarge('a watch line', MAX_WATCH_LINE_BYTES);
          finish({ kind: 'error', error: transportError(error, what) });
          request.destroy();
          return;
        }
        if (start < chunk.length) partial.push(chunk.subarray(start));
      });
      // 'end': the server finished the chunked body. 'close' without it: the connection dropped.
      response.once('end', () => {
        finish({ kind: 'closed' });
      });
      response.once('close', () => {
        finish(
          endOf(
            Object.assign(new Error('connection closed in the middle of the stream'), {
              code: 'ECONNRESET',
            }),
          ),
        );
      });
    });
    request.end();
    return {
      opened,
      ended,
      abort: () => {
        if (settled) return;
        aborted = true;
        request.destroy();
      },
    };
  }

  close(): void {
    this.#closed = true;
    for (const request of this.#inflight) request.destroy();
    this.#inflight.clear();
  }
}

// --- the client -----------------------------------------------------------------------

export interface KubernetesClientOptions {
  /**
   * A kubeconfig file. Without it: the files in $KUBECONFIG when set, else the
   * pod's service account (in-cluster).
   */
  kubeconfig?: string;
  /** Use the pod's service account even when KUBECONFIG is set. */
  inCluster?: boolean;
  /** Deadline of every request but the watch (default 10 s). */
  requestTimeoutMs?: number;
}

/** Where the client takes its configuration from, for messages. */
export type KubeconfigOrigin = 'file' | 'KUBECONFIG' | 'in-cluster';

function objectMeta(meta: ObjectMetaLike | undefined, what: string): KubeObjectMeta {
  if (!meta?.name) throw new Error(`${what}: the API server sent an object without metadata.name`);
  const result: KubeObjectMeta = { name: meta.name };
  if (meta.namespace !== undefined) result.namespace = meta.namespace;
  if (meta.uid !== undefined) result.uid = meta.uid;
  if (meta.resourceVersion !== undefined) result.resourceVersion = meta.resourceVersion;
  if (meta.annotations !== undefined) result.annotations = { ...meta.annotations };
  return result;
}

function storedEvent(
  event: EventLike,
  namespace: string,
  api: EventApi,
  what: string,
): StoredEvent {
  const meta = objectMeta(event.metadata, what);
  return {
    name: meta.name,
    namespace: meta.namespace ?? namespace,
    resourceVersion: meta.resourceVersion,
    count: (api === 'v1' ? event.count : event.series?.count) ?? 1,
    api,
  };
}

/** events.k8s.io/v1 limits `note` to 1 kB (NoteLengthLimit); cut on a character boundary. */
export const EVENT_NOTE_LIMIT = 1024;

function noteOf(message: string): string {
  if (Buffer.byteLength(message) <= EVENT_NOTE_LIMIT) return message;
  let note = message.slice(0, EVENT_NOTE_LIMIT);
  while (Buffer.byteLength(note) > EVENT_NOTE_LIMIT - 3) note = note.slice(0, -1);
  return `${note}...`;
}

/** A MicroTime as the API server parses it (RFC 3339 with exactly six fractional digits). */
export function microTime(at: Date): string {
  return at.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** The events.k8s.io/v1 body of an Event (the deprecated core fields left unset, as required). */
function eventsV1Body(event: KubeEvent): object {
  return {
    apiVersion: 'events.k8s.io/v1',
    kind: 'Event',
    metadata: { name: event.metadata.name, namespace: event.metadata.namespace },
    eventTime: microTime(event.eventTime),
    reportingController: event.reportingComponent,
    reportingInstance: event.reportingInstance,
    action: event.action,
    reason: event.reason,
    regarding: event.involvedObject,
    note: noteOf(event.message),
    type: event.type,
  };
}

/** The core/v1 body: the recorder's Event without the events.k8s.io/v1-only fields. */
function coreV1Body(event: KubeEvent): object {
  return {
    metadata: event.metadata,
    involvedObject: event.involvedObject,
    reason: event.reason,
    message: event.message,
    type: event.type,
    count: event.count,
    firstTimestamp: event.firstTimestamp,
    lastTimestamp: event.lastTimestamp,
    source: event.source,
    reportingComponent: event.reportingComponent,
    reportingInstance: event.reportingInstance,
  };
}

class ClientNodeApi implements KubernetesApi {
  readonly server: string;
  readonly origin: KubeconfigOrigin;
  readonly #k8s: ClientNodeModule;
  readonly #config: KubeConfigLike;
  readonly #core: CoreV1ApiLike;
  readonly #eventsV1: EventApiLike;
  /** events.k8s.io/v1 until the server answers a create with 404 for the group. */
  #eventApi: EventApi = 'events.k8s.io/v1';
  readonly #transport: Transport;

  constructor(
    k8s: ClientNodeModule,
    config: KubeConfigLike,
    origin: KubeconfigOrigin,
    timeoutMs: number,
  ) {
    const cluster = config.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    this.server = cluster.server.replace(/\/+$/, '');
    this.origin = origin;
    this.#k8s = k8s;
    this.#config = config;
    this.#transport = new Transport(timeoutMs);
    const transport = this.#transport;
    const httpApi = {
      send: (context: RequestContextLike): unknown =>
        new k8s.Observable(
          transport.send(context).then(
            (response) =>
              new k8s.ResponseContext(response.status, response.headers, {
                text: () => Promise.resolve(response.body),
                binary: () => Promise.resolve(Buffer.from(response.body)),
              }),
          ),
        ),
    };
    const configuration = k8s.createConfiguration({
      baseServer: new k8s.ServerConfiguration(this.server, {}),
      authMethods: { default: config },
      httpApi,
    });
    this.#core = new k8s.CoreV1Api(configuration);
    this.#eventsV1 = new k8s.EventsV1Api(configuration);
  }

  async #call<T>(what: string, call: () => Promise<T>): Promise<T> {
    if (this.#transport.closed) throw new Error(`${what}: the Kubernetes client is closed`);
    try {
      return await call();
    } catch (error) {
      if (error instanceof this.#k8s.ApiException) {
        throw apiErrorFromStatus(error.code, error.body, what);
      }
      if (error instanceof KubernetesApiError) throw error;
      throw transportError(error, what);
    }
  }

  async getNode(name: string): Promise<KubeNode> {
    const what = `get node ${name}`;
    const node = await this.#call(what, () => this.#core.readNode({ name }));
    return { metadata: objectMeta(node.metadata, what) };
  }

  watchNode(
    name: string,
    options: WatchOptions,
    onEvent: (event: WatchEvent) => void,
  ): WatchStream {
    const what = `watch node ${name}`;
    const url = new URL(`${this.server}/api/v1/nodes`);
    url.searchParams.set('allowWatchBookmarks', 'true');
    url.searchParams.set('fieldSelector', `metadata.name=${name}`);
    url.searchParams.set('resourceVersion', options.resourceVersion);
    url.searchParams.set('timeoutSeconds', String(options.timeoutSeconds));
    url.searchParams.set('watch', 'true');
    const context = new this.#k8s.RequestContext(url.toString(), 'GET');
    context.setHeaderParam('Accept', 'application/json');
    // Authentication is asynchronous (token files, exec plugins): open once it is applied.
    let inner: WatchStream | undefined;
    let aborted = false;
    const ready = this.#config.applySecurityAuthentication(context).then(() => {
      if (aborted) throw new Error(`${what}: aborted`);
      inner = this.#transport.stream(context, what, options.idleTimeoutMs, (line) => {
        let event: unknown;
        try {
          event = JSON.parse(line);
        } catch {
          return; // a line cut by a dropped connection; the end of the stream reports it
        }
        const candidate = event as { type?: unknown; object?: unknown } | null;
        if (
          typeof candidate?.type === 'string' &&
          typeof candidate.object === 'object' &&
          candidate.object !== null
        ) {
          onEvent({ type: candidate.type, object: candidate.object as Record<string, unknown> });
        }
      });
      return inner;
    });
    const opened = ready.then((stream) => stream.opened);
    opened.catch(() => undefined);
    const ended: Promise<WatchEnd> = ready.then(
      (stream) => stream.ended,
      (error: unknown): WatchEnd =>
        aborted ? { kind: 'aborted' } : { kind: 'error', error: transportError(error, what) },
    );
    return {
      opened,
      ended,
      abort: () => {
        aborted = true;
        inner?.abort();
      },
    };
  }

  async patchNode(name: string, patch: object): Promise<KubeNode> {
    const what = `patch node ${name}`;
    const node = await this.#call(what, () =>
      this.#core.patchNode(
        { name, body: patch, fieldManager: FIELD_MANAGER },
        this.#k8s.setHeaderOptions('Content-Type', MERGE_PATCH),
      ),
    );
    return { metadata: objectMeta(node.metadata, what) };
  }

  async createEvent(event: KubeEvent): Promise<StoredEvent> {
    const what = `create event ${event.metadata.name}`;
    const { namespace } = event.metadata;
    if (this.#eventApi === 'events.k8s.io/v1') {
      try {
        const created = await this.#call(what, () =>
          this.#eventsV1.createNamespacedEvent({
            namespace,
            body: eventsV1Body(event),
            fieldManager: FIELD_MANAGER,
          }),
        );
        return storedEvent(created, namespace, 'events.k8s.io/v1', what);
      } catch (error) {
        // A cluster without the group (before 1.19, or with it turned off) answers 404 for the
        // resource itself; a missing namespace would fail core/v1 the same way and be reported.
        if (!(isKubernetesApiError(error) && error.statusCode === 404)) throw error;
        this.#eventApi = 'v1';
      }
    }
    const created = await this.#call(what, () =>
      this.#core.createNamespacedEvent({
        namespace,
        body: coreV1Body(event),
        fieldManager: FIELD_MANAGER,
      }),
    );
    return storedEvent(created, namespace, 'v1', what);
  }

  async patchEvent(stored: StoredEvent, repeat: EventRepeat): Promise<StoredEvent> {
    const what = `patch event ${stored.name}`;
    const { name, namespace, api } = stored;
    const body =
      api === 'v1'
        ? {
            count: repeat.count,
            // metav1.Time: RFC 3339 to the second.
            lastTimestamp: repeat.lastTimestamp.toISOString().replace(/\.\d{3}Z$/, 'Z'),
            message: repeat.message,
          }
        : {
            series: { count: repeat.count, lastObservedTime: microTime(repeat.lastTimestamp) },
            note: noteOf(repeat.message),
          };
    const target = api === 'v1' ? this.#core : this.#eventsV1;
    const patched = await this.#call(what, () =>
      target.patchNamespacedEvent(
        { name, namespace, body, fieldManager: FIELD_MANAGER },
        this.#k8s.setHeaderOptions('Content-Type', STRATEGIC_MERGE_PATCH),
      ),
    );
    return storedEvent(patched, namespace, api, what);
  }

  async patchNodeStatus(name: string, patch: object): Promise<KubeNode> {
    const what = `patch node ${name} status`;
    const node = await this.#call(what, () =>
      this.#core.patchNodeStatus(
        { name, body: patch, fieldManager: FIELD_MANAGER },
        this.#k8s.setHeaderOptions('Content-Type', STRATEGIC_MERGE_PATCH),
      ),
    );
    return { metadata: objectMeta(node.metadata, what) };
  }

  close(): void {
    this.#transport.close();
  }
}

/** A kubeconfig is a few KiB; an embedded exec plugin config or many contexts stay far below. */
const MAX_KUBECONFIG_BYTES = 1024 * 1024;

/**
 * Loads a kubeconfig file, read once within bounds, its relative paths taken from its
 * folder. Its errors are about the option: `option kubeconfig FILE: REASON`, with the
 * field `option` (a CLI says its flag).
 */
function loadKubeconfig(config: KubeConfigLike, file: string): void {
  const fields = { option: 'kubeconfig', path: file };
  const fail = (reason: string, cause?: unknown): SystemError =>
    Object.assign(invalidArgument(`option kubeconfig ${file}: ${reason}`, fields), { cause });
  const text = readRegularFile(file, MAX_KUBECONFIG_BYTES, 'option kubeconfig', { fields });
  if (text.trim() === '') throw fail('the file is empty');
  try {
    config.loadFromString(text);
  } catch (error) {
    throw fail(
      `not a kubeconfig: ${error instanceof Error ? error.message : String(error)}`,
      error,
    );
  }
  if (!config.getCurrentCluster()) throw fail('the kubeconfig has no current cluster');
  config.makePathsAbsolute(dirname(resolve(file)));
}

/**
 * Runs client-node's loading of a configuration that did not come from option `kubeconfig`;
 * its errors say where the configuration came from (`KUBECONFIG: …`, `in-cluster: …`).
 */
function loadFrom(
  origin: 'KUBECONFIG' | 'in-cluster',
  config: KubeConfigLike,
  load: () => void,
): void {
  try {
    load();
  } catch (error) {
    if (isSystemError(error)) throw error; // ours, and naming its source already
    throw Object.assign(
      invalidArgument(`${origin}: ${error instanceof Error ? error.message : String(error)}`),
      { cause: error },
    );
  }
  if (!config.getCurrentCluster()) {
    throw invalidArgument(`${origin}: the kubeconfig has no current cluster`);
  }
}

/**
 * A client for the cluster: `kubeconfig` when given, else $KUBECONFIG when
 * set, else the pod's service account. Throws EINVAL, saying where the
 * configuration came from, when it cannot be read or has no current cluster.
 */
export async function createKubernetesClient(
  options: KubernetesClientOptions = {},
): Promise<KubernetesApi & { readonly origin: KubeconfigOrigin }> {
  const k8s = await loadClientNode();
  const config = new k8s.KubeConfig();
  let origin: KubeconfigOrigin;
  if (options.kubeconfig !== undefined && !options.inCluster) {
    loadKubeconfig(config, options.kubeconfig);
    origin = 'file';
  } else if (process.env.KUBECONFIG && !options.inCluster) {
    const files = process.env.KUBECONFIG.split(delimiter).filter((f) => f !== '');
    loadFrom('KUBECONFIG', config, () => {
      // client-node reads and merges these itself: each is checked first.
      for (const file of files) readRegularFile(file, MAX_KUBECONFIG_BYTES, 'KUBECONFIG');
      config.loadFromDefault();
    });
    origin = 'KUBECONFIG';
  } else {
    loadFrom('in-cluster', config, () => {
      config.loadFromCluster();
    });
    origin = 'in-cluster';
  }
  return new ClientNodeApi(k8s, config, origin, options.requestTimeoutMs ?? 10_000);
}
