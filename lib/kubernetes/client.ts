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
import { delimiter } from 'node:path';

import { invalidArgument, isSystemError, type SystemError } from '../core/errors';
import { readRegularFile } from '../core/files';
import {
  CredentialError,
  credentialSource,
  folderOf,
  type CredentialSource,
  type RawUser,
} from './credentials';

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

/** A user as client-node keeps it (the fields it authenticates with). */
interface KubeUserLike {
  name: string;
  token?: string | null | undefined;
  authProvider?: { name?: string; config?: Record<string, unknown> } | null | undefined;
  exec?: unknown;
  certData?: string | null | undefined;
  keyData?: string | null | undefined;
  certFile?: string | null | undefined;
  keyFile?: string | null | undefined;
}

interface KubeConfigLike {
  loadFromString(text: string): void;
  makePathsAbsolute(rootDirectory: string): void;
  loadFromDefault(): void;
  loadFromCluster(): void;
  getCurrentCluster(): { name: string; server: string } | null;
  getCurrentUser(): KubeUserLike | null;
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
  listNode(param: { limit: number; _continue?: string }): Promise<{
    metadata?: { _continue?: string };
    items?: { metadata?: ObjectMetaLike }[];
  }>;
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
    authMethods: {
      default: { applySecurityAuthentication: KubeConfigLike['applySecurityAuthentication'] };
    };
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

export interface KubeNodePage {
  items: KubeNode[];
  /** Set when there are more: the token for the next page. */
  continue?: string;
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
  /** One page of the Nodes (GET /api/v1/nodes?limit=); `continue` asks for the next one. */
  listNodes(page: { limit: number; continue?: string }): Promise<KubeNodePage>;
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

  /** No answer, or one saying the server cannot serve now (5xx, 429); not a missing credential. */
  get transient(): boolean {
    if (this.code === 'ECREDENTIALS') return false;
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

/** A watch the server refused with 401. */
function isRefused(end: WatchEnd): boolean {
  return end.kind === 'error' && isKubernetesApiError(end.error) && end.error.statusCode === 401;
}

/**
 * How every request authenticates: client-node's KubeConfig for TLS (the CA,
 * client certificates, basic auth, oidc), the credential source for the bearer
 * token or an exec plugin's certificate (credentials.ts says why).
 */
class Authentication {
  readonly source: CredentialSource;
  readonly #config: KubeConfigLike;

  constructor(config: KubeConfigLike, source: CredentialSource) {
    this.#config = config;
    this.source = source;
  }

  async applySecurityAuthentication(context: RequestContextLike): Promise<void> {
    const credential = await this.source.current();
    const user = this.#config.getCurrentUser();
    if (user && credential.clientCertificate !== undefined && credential.clientKey !== undefined) {
      // client-node builds the TLS agent from the user's certificate data (base64 of the PEM).
      user.certData = Buffer.from(credential.clientCertificate).toString('base64');
      user.keyData = Buffer.from(credential.clientKey).toString('base64');
    }
    await this.#config.applySecurityAuthentication(context);
    if (credential.token !== undefined) {
      context.setHeaderParam('Authorization', `Bearer ${credential.token}`);
    }
  }
}

class ClientNodeApi implements KubernetesApi {
  readonly server: string;
  readonly origin: KubeconfigOrigin;
  readonly #k8s: ClientNodeModule;
  readonly #auth: Authentication;
  readonly #core: CoreV1ApiLike;
  readonly #eventsV1: EventApiLike;
  /** events.k8s.io/v1 until the server answers a create with 404 for the group. */
  #eventApi: EventApi = 'events.k8s.io/v1';
  readonly #transport: Transport;

  constructor(
    k8s: ClientNodeModule,
    config: KubeConfigLike,
    auth: Authentication,
    origin: KubeconfigOrigin,
    timeoutMs: number,
  ) {
    const cluster = config.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    this.server = cluster.server.replace(/\/+$/, '');
    this.origin = origin;
    this.#k8s = k8s;
    this.#auth = auth;
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
      authMethods: { default: auth },
      httpApi,
    });
    this.#core = new k8s.CoreV1Api(configuration);
    this.#eventsV1 = new k8s.EventsV1Api(configuration);
  }

  /**
   * One API call. A 401 re-reads the credential source at once and, if what a
   * request carries changed (a rotated token), the call is made once more.
   */
  async #call<T>(what: string, call: () => Promise<T>): Promise<T> {
    if (this.#transport.closed) throw new Error(`${what}: the Kubernetes client is closed`);
    try {
      return await call();
    } catch (error) {
      const failure = this.#failure(error, what);
      if (failure.statusCode !== 401 || !(await this.#refreshed())) throw failure;
    }
    try {
      return await call();
    } catch (error) {
      throw this.#failure(error, what);
    }
  }

  #failure(error: unknown, what: string): KubernetesApiError {
    if (error instanceof this.#k8s.ApiException) {
      return apiErrorFromStatus(error.code, error.body, what);
    }
    if (error instanceof KubernetesApiError) return error;
    if (error instanceof CredentialError) {
      return new KubernetesApiError(`${what}: ${error.message}`, {
        statusCode: 0,
        code: error.code,
      });
    }
    return transportError(error, what);
  }

  /** After a 401: whether the credential source, read again, gives something new to send. */
  async #refreshed(): Promise<boolean> {
    try {
      return await this.#auth.source.refused();
    } catch {
      return false; // the source cannot be read now: the 401 stands, the next request reads again
    }
  }

  async getNode(name: string): Promise<KubeNode> {
    const what = `get node ${name}`;
    const node = await this.#call(what, () => this.#core.readNode({ name }));
    return { metadata: objectMeta(node.metadata, what) };
  }

  async listNodes(page: { limit: number; continue?: string }): Promise<KubeNodePage> {
    const what = 'list nodes';
    const list = await this.#call(what, () =>
      this.#core.listNode({
        limit: page.limit,
        ...(page.continue === undefined ? {} : { _continue: page.continue }),
      }),
    );
    const items = (list.items ?? []).map((node) => ({ metadata: objectMeta(node.metadata, what) }));
    const next = list.metadata?._continue;
    return next ? { items, continue: next } : { items };
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
    let inner: WatchStream | undefined;
    let aborted = false;
    // A function: `aborted` changes across the awaits below.
    const isAborted = (): boolean => aborted;
    const onLine = (line: string): void => {
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
    };
    // Authentication is asynchronous (token files, exec plugins): open once it is applied.
    // A watch the server refuses with 401 is opened once more if the credential changed.
    const open = async (mayRetry: boolean): Promise<WatchStream> => {
      const context = new this.#k8s.RequestContext(url.toString(), 'GET');
      context.setHeaderParam('Accept', 'application/json');
      await this.#auth.applySecurityAuthentication(context);
      if (isAborted()) throw new Error(`${what}: aborted`);
      inner = this.#transport.stream(context, what, options.idleTimeoutMs, onLine);
      if (
        !mayRetry ||
        (await inner.opened.then(
          () => true,
          () => false,
        ))
      )
        return inner;
      const end = await inner.ended;
      if (isRefused(end) && !isAborted() && (await this.#refreshed())) return open(false);
      return inner;
    };
    const ready = open(true);
    const opened = ready.then((stream) => stream.opened);
    opened.catch(() => undefined);
    const ended: Promise<WatchEnd> = ready.then(
      (stream) => stream.ended,
      (error: unknown): WatchEnd =>
        aborted ? { kind: 'aborted' } : { kind: 'error', error: this.#failure(error, what) },
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
function loadKubeconfig(config: KubeConfigLike, file: string): string {
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
  config.makePathsAbsolute(folderOf(file));
  return text;
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
  // The files the user may be spelled in (in-cluster: none, client-node's user is the truth).
  let texts: KubeconfigText[] | null = null;
  let where: { prefix: string; fields?: { option: string; path: string } };
  if (options.kubeconfig !== undefined && !options.inCluster) {
    const file = options.kubeconfig;
    texts = [{ text: loadKubeconfig(config, file), folder: folderOf(file) }];
    origin = 'file';
    where = { prefix: `option kubeconfig ${file}`, fields: { option: 'kubeconfig', path: file } };
  } else if (process.env.KUBECONFIG && !options.inCluster) {
    const files = process.env.KUBECONFIG.split(delimiter).filter((f) => f !== '');
    const read: KubeconfigText[] = [];
    loadFrom('KUBECONFIG', config, () => {
      // client-node reads and merges these itself: each is checked first.
      for (const file of files) {
        read.push({
          text: readRegularFile(file, MAX_KUBECONFIG_BYTES, 'KUBECONFIG'),
          folder: folderOf(file),
        });
      }
      config.loadFromDefault();
    });
    texts = read;
    origin = 'KUBECONFIG';
    where = { prefix: 'KUBECONFIG' };
  } else {
    loadFrom('in-cluster', config, () => {
      config.loadFromCluster();
    });
    origin = 'in-cluster';
    where = { prefix: 'in-cluster' };
  }
  let source: CredentialSource;
  try {
    source = takeCredentials(k8s, config, texts);
  } catch (error) {
    const reason = error instanceof Error ? error.message.replace(/^EINVAL: /, '') : String(error);
    throw Object.assign(invalidArgument(`${where.prefix}: ${reason}`, where.fields), {
      cause: error,
    });
  }
  const auth = new Authentication(config, source);
  return new ClientNodeApi(k8s, config, auth, origin, options.requestTimeoutMs ?? 10_000);
}

interface KubeconfigText {
  text: string;
  folder: string;
}

/** The current user as the first kubeconfig file naming it spells it (client-go's merge). */
function rawUser(
  k8s: ClientNodeModule,
  texts: KubeconfigText[],
  name: string,
): { raw: RawUser; folder: string } | undefined {
  for (const { text, folder } of texts) {
    const [document] = k8s.loadAllYaml(text) as [{ users?: unknown } | null | undefined];
    const users: unknown[] = Array.isArray(document?.users) ? document.users : [];
    const entry = users.find((u) => (u as { name?: unknown } | null)?.name === name) as
      { user?: unknown } | undefined;
    if (entry !== undefined) {
      const raw = typeof entry.user === 'object' && entry.user !== null ? entry.user : {};
      return { raw, folder };
    }
  }
  return undefined;
}

/**
 * The current user's credential source; what it takes over is cleared from
 * client-node's user, so that one side only sends a credential (client-node
 * keeps no `tokenFile`, and would run an exec plugin its own way).
 */
function takeCredentials(
  k8s: ClientNodeModule,
  config: KubeConfigLike,
  texts: KubeconfigText[] | null,
): CredentialSource {
  const user = config.getCurrentUser();
  const server = config.getCurrentCluster()?.server ?? '';
  if (!user) return credentialSource('', {}, undefined, server, false);
  const found =
    texts === null
      ? { raw: inClusterUser(user), folder: undefined }
      : (rawUser(k8s, texts, user.name) ?? { raw: {}, folder: undefined });
  const hasCertificate = Boolean(user.certData ?? user.certFile);
  const source = credentialSource(user.name, found.raw, found.folder, server, hasCertificate);
  if (source.kind !== 'none') {
    user.token = null;
    user.exec = null;
    if (user.authProvider?.config?.tokenFile !== undefined || user.authProvider?.name === 'exec') {
      user.authProvider = null;
    }
  }
  return source;
}

/** client-node's in-cluster user: an auth-provider carrying the service account's token file. */
function inClusterUser(user: KubeUserLike): RawUser {
  const tokenFile = user.authProvider?.config?.tokenFile;
  return typeof tokenFile === 'string' ? { tokenFile } : {};
}
