/**
 * A local stand-in for kube-apiserver, on 127.0.0.1 over HTTPS, speaking the
 * wire format of the parts the guard uses:
 *
 * - Nodes: GET /api/v1/nodes/{name} (a Node as served: kind/apiVersion,
 *   metadata with uid, resourceVersion, creationTimestamp, labels,
 *   annotations, managedFields; spec; status), GET /api/v1/nodes (NodeList,
 *   fieldSelector metadata.name, pages by limit and continue), PATCH /api/v1/nodes/{name} with
 *   application/merge-patch+json (RFC 7386) or strategic-merge-patch+json
 *   (the same for the maps and scalars used here); metadata.resourceVersion in
 *   a patch is a precondition: a stale one is 409 Conflict; a patch that
 *   changes nothing changes no resourceVersion and sends no watch event.
 * - The watch: GET /api/v1/nodes?watch=true with fieldSelector,
 *   resourceVersion (replaying the changes after it; "0" or none: the current
 *   objects as ADDED), allowWatchBookmarks, timeoutSeconds (a clean end of the
 *   chunked body); newline-delimited {"type","object"} events, BOOKMARK
 *   objects carrying only metadata.resourceVersion, and a version older than
 *   the compaction point answered with an ERROR event holding a 410 Expired
 *   Status (or, `goneAsHttpStatus`, an HTTP 410).
 * - Events: POST /api/v1/namespaces/{ns}/events (201; the server sets uid,
 *   resourceVersion, creationTimestamp; a Node's Events must be in `default`;
 *   timestamps are stored to the second), PATCH of one (merge or strategic
 *   merge), GET of the list; 409 AlreadyExists, 404 NotFound. The same under
 *   /apis/events.k8s.io/v1 with that group's validation of a create
 *   (eventTime, reportingController, reportingInstance, action, reason,
 *   regarding, type, note of at most 1 kB; the deprecated core fields unset),
 *   or, `eventsV1: false`, a 404 for the whole group as an old cluster.
 * - Node status: PATCH /api/v1/nodes/{name}/status (strategic merge: the
 *   conditions merge by `type`; nothing outside `status` changes).
 * - Bearer token authentication (401 with a Status otherwise), Status bodies
 *   for every error, resourceVersions from one increasing counter as etcd's.
 *
 * Test controls: change Nodes as another writer would (flanneld), send
 * bookmarks, expire or drop the open watches, refuse connections (stop) and
 * come back on the same port, fail or delay chosen requests, run a hook
 * right before a Node patch is applied (a concurrent writer: real 409s), and
 * the log of every request.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { writeFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { Socket } from 'node:net';
import { join } from 'node:path';

import { FAKE_APISERVER_CERT, FAKE_APISERVER_KEY } from './fake-apiserver-tls';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface NodeSpec {
  name: string;
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  podCIDR?: string;
  internalIP?: string;
}

export interface RequestRecord {
  method: string;
  path: string;
  query: Record<string, string>;
  contentType: string | undefined;
  body: Json | undefined;
  status: number;
  at: number;
}

interface HistoryEntry {
  rv: number;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: JsonObject;
}

interface Watcher {
  response: ServerResponse;
  name: string | undefined;
  bookmarks: boolean;
  timer: NodeJS.Timeout | undefined;
}

interface Fault {
  method?: string;
  path?: RegExp;
  status: number;
  times: number;
  /** Never answer (the request hangs until the client gives up). */
  hang?: boolean;
}

export interface FakeApiServerEvents {
  node: [{ type: 'ADDED' | 'MODIFIED' | 'DELETED'; node: JsonObject }];
  event: [{ type: 'ADDED' | 'MODIFIED'; event: JsonObject }];
  request: [RequestRecord];
}

const REASONS: Record<number, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  405: 'MethodNotAllowed',
  409: 'Conflict',
  410: 'Gone',
  415: 'UnsupportedMediaType',
  422: 'Invalid',
  429: 'TooManyRequests',
  500: 'InternalError',
  503: 'ServiceUnavailable',
  504: 'Timeout',
};

function clone<T>(value: T): T {
  return structuredClone(value);
}

function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: Json | undefined, patch: Json): Json {
  if (!isObject(patch)) return clone(patch);
  const result: JsonObject = isObject(target) ? clone(target) : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) Reflect.deleteProperty(result, key);
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

/** A Kubernetes Status object. */
/** A 422 Invalid Status, as the API server words a failed validation. */
function invalid(message: string): JsonObject {
  return status(422, message, 'Invalid');
}

export function status(
  code: number,
  message: string,
  reason?: string,
  details?: JsonObject,
): JsonObject {
  const body: JsonObject = {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Failure',
    message,
    reason: reason ?? REASONS[code] ?? '',
    code,
  };
  if (details) body.details = details;
  return body;
}

interface EventGroup {
  store: Map<string, JsonObject>;
  apiVersion: string;
  /** As Status messages name it. */
  resource: string;
  /** What the API server does to a stored object's fields (metav1.Time to the second). */
  normalise: (event: JsonObject) => void;
}

/** How a FakeApiServer behaves. */
export interface FakeApiServerOptions {
  /** Serve events.k8s.io/v1 (default); false answers 404 for the group, as an old cluster. */
  eventsV1?: boolean;
}

/** metav1.Time: RFC 3339 to the second. */
function timeOf(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function normaliseTime(value: Json | undefined): Json {
  if (typeof value !== 'string') return value ?? null;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : timeOf(date);
}

function sameIgnoring(a: JsonObject, b: JsonObject): boolean {
  const strip = (o: JsonObject): JsonObject => {
    const copy = clone(o);
    const meta = copy.metadata as JsonObject;
    delete meta.resourceVersion;
    delete meta.managedFields;
    return copy;
  };
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

export class FakeApiServer extends EventEmitter<FakeApiServerEvents> {
  /** The one bearer token accepted; `rotateToken` replaces it. */
  token: string;
  readonly requests: RequestRecord[] = [];
  /** Body bytes sent: replies and watch events (what a client reads). */
  bytesSent = 0;
  /** Answer a watch from a too old version with an HTTP 410 instead of an ERROR event. */
  goneAsHttpStatus = false;
  /** When set, answers every (authenticated) watch request instead of the store: a hostile server. */
  watchOverride: ((res: ServerResponse) => void) | undefined;
  #server: Server;
  #port = 0;
  #rv = 1000;
  /** The oldest resourceVersion a watch may start from (older: 410). */
  #compactedRv = 1000;
  readonly #nodes = new Map<string, JsonObject>();
  readonly #events = new Map<string, JsonObject>();
  readonly #eventsV1 = new Map<string, JsonObject>();
  /** The two APIs Events are written through, each with its store (the real one shares it). */
  readonly #groups: Record<'core' | 'v1', EventGroup> = {
    core: {
      store: this.#events,
      apiVersion: 'v1',
      resource: 'events',
      normalise: (event) => {
        for (const key of ['firstTimestamp', 'lastTimestamp'])
          event[key] = normaliseTime(event[key]);
        event.eventTime ??= null;
      },
    },
    v1: {
      store: this.#eventsV1,
      apiVersion: 'events.k8s.io/v1',
      resource: 'events.events.k8s.io',
      normalise: () => undefined,
    },
  };
  readonly #hasEventsV1: boolean;
  readonly #history: HistoryEntry[] = [];
  readonly #watchers = new Set<Watcher>();
  readonly #sockets = new Set<Socket>();
  readonly #faults: Fault[] = [];
  #beforePatch: (() => void) | undefined;

  private constructor(token: string, options: FakeApiServerOptions) {
    super();
    this.token = token;
    this.#hasEventsV1 = options.eventsV1 ?? true;
    this.#server = this.#createServer();
  }

  static async start(
    token = 'fake-token-for-tests',
    options: FakeApiServerOptions = {},
  ): Promise<FakeApiServer> {
    const server = new FakeApiServer(token, options);
    await server.#listen(0);
    return server;
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `https://127.0.0.1:${this.#port}`;
  }

  /** Current resourceVersion of the store. */
  get resourceVersion(): string {
    return String(this.#rv);
  }

  /**
   * The token is rotated: the old one is refused from now on (401) and every open watch
   * is ended, as an API server does once the token it authenticated has expired.
   */
  rotateToken(token: string): void {
    this.token = token;
    for (const watcher of [...this.#watchers]) this.#endWatch(watcher);
  }

  /**
   * A kubeconfig for this server (its CA), written to `dir`; its user sends the
   * token unless `user` gives the user's fields as YAML lines.
   */
  writeKubeconfig(dir: string, name = 'kubeconfig', user = [`token: ${this.token}`]): string {
    const ca = Buffer.from(FAKE_APISERVER_CERT).toString('base64');
    const text = [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: fake',
      '  cluster:',
      `    server: ${this.url}`,
      `    certificate-authority-data: ${ca}`,
      'users:',
      '- name: guard',
      '  user:',
      ...user.map((line) => `    ${line}`),
      'contexts:',
      '- name: fake',
      '  context:',
      '    cluster: fake',
      '    user: guard',
      'current-context: fake',
      '',
    ].join('\n');
    const path = join(dir, name);
    writeFileSync(path, text, { mode: 0o600 });
    return path;
  }

  // --- the store, as other writers change it ---------------------------------------

  /** Registers a Node as kubelet and flanneld would have it. */
  addNode(spec: NodeSpec): JsonObject {
    const created = new Date(Date.now() - 3_600_000);
    const ip = spec.internalIP ?? '192.0.2.1';
    const node: JsonObject = {
      kind: 'Node',
      apiVersion: 'v1',
      metadata: {
        name: spec.name,
        uid: randomUUID(),
        resourceVersion: '',
        creationTimestamp: timeOf(created),
        labels: {
          'beta.kubernetes.io/arch': 'amd64',
          'beta.kubernetes.io/os': 'linux',
          'kubernetes.io/arch': 'amd64',
          'kubernetes.io/hostname': spec.name,
          'kubernetes.io/os': 'linux',
          ...spec.labels,
        },
        annotations: {
          'kubeadm.alpha.kubernetes.io/cri-socket': 'unix:///var/run/containerd/containerd.sock',
          'node.alpha.kubernetes.io/ttl': '0',
          'volumes.kubernetes.io/controller-managed-attach-detach': 'true',
          ...spec.annotations,
        },
        managedFields: [
          {
            manager: 'kubelet',
            operation: 'Update',
            apiVersion: 'v1',
            time: timeOf(created),
            fieldsType: 'FieldsV1',
            fieldsV1: { 'f:metadata': { 'f:labels': { '.': {} } } },
          },
        ],
      },
      spec: {
        podCIDR: spec.podCIDR ?? '198.18.0.0/24',
        podCIDRs: [spec.podCIDR ?? '198.18.0.0/24'],
      },
      status: {
        addresses: [
          { type: 'InternalIP', address: ip },
          { type: 'Hostname', address: spec.name },
        ],
        allocatable: { cpu: '2', memory: '3922764Ki', pods: '110' },
        capacity: { cpu: '2', memory: '4025164Ki', pods: '110' },
        conditions: [
          {
            type: 'Ready',
            status: 'True',
            lastHeartbeatTime: timeOf(created),
            lastTransitionTime: timeOf(created),
            reason: 'KubeletReady',
            message: 'kubelet is posting ready status',
          },
        ],
        daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
        nodeInfo: {
          architecture: 'amd64',
          containerRuntimeVersion: 'containerd://1.7.24',
          kernelVersion: '6.1.0-28-amd64',
          kubeProxyVersion: 'v1.31.4',
          kubeletVersion: 'v1.31.4',
          operatingSystem: 'linux',
          osImage: 'Debian GNU/Linux 12 (bookworm)',
          machineID: '0123456789abcdef0123456789abcdef',
          systemUUID: randomUUID(),
          bootID: randomUUID(),
        },
      },
    };
    this.#store(node, 'ADDED');
    return this.node(spec.name);
  }

  hasNode(name: string): boolean {
    return this.#nodes.has(name);
  }

  /** A copy of the stored Node. */
  node(name: string): JsonObject {
    const node = this.#nodes.get(name);
    if (!node) throw new Error(`no node ${name} in the fake API server`);
    return clone(node);
  }

  annotations(name: string): Record<string, string> {
    return (this.node(name).metadata as JsonObject).annotations as Record<string, string>;
  }

  /** Another writer (flanneld, kubelet) changes the Node: a new resourceVersion and a watch event. */
  updateNode(name: string, change: (node: JsonObject) => void): JsonObject {
    const node = this.node(name);
    change(node);
    this.#store(node, 'MODIFIED');
    return this.node(name);
  }

  /** Sets (or with null removes) an annotation as another writer would. */
  setAnnotation(name: string, key: string, value: string | null): JsonObject {
    return this.updateNode(name, (node) => {
      const annotations = ((node.metadata as JsonObject).annotations ?? {}) as JsonObject;
      if (value === null) Reflect.deleteProperty(annotations, key);
      else annotations[key] = value;
      (node.metadata as JsonObject).annotations = annotations;
    });
  }

  deleteNode(name: string): void {
    const node = this.node(name);
    this.#nodes.delete(name);
    this.#rv += 1;
    (node.metadata as JsonObject).resourceVersion = String(this.#rv);
    this.#record('DELETED', node);
  }

  /** Every stored Event goes away, as when their TTL (an hour by default) runs out. */
  expireEvents(): void {
    this.#events.clear();
    this.#eventsV1.clear();
  }

  /** The stored Events, oldest first. */
  /** events.k8s.io/v1 Events, as stored through that group. */
  eventsV1(): JsonObject[] {
    return [...this.#eventsV1.values()].map(clone);
  }

  events(): JsonObject[] {
    return [...this.#events.values()].map(clone);
  }

  // --- faults ---------------------------------------------------------------------

  /** The next `times` requests matching get `status` (a Status body), or never an answer. */
  fail(match: { method?: string; path?: RegExp }, statusCode: number, times = 1): void {
    this.#faults.push({ ...match, status: statusCode, times });
  }

  hang(match: { method?: string; path?: RegExp }, times = 1): void {
    this.#faults.push({ ...match, status: 0, times, hang: true });
  }

  /** Runs `hook` right before the next Node patch is applied (after the request arrived). */
  beforeNextPatch(hook: () => void): void {
    this.#beforePatch = hook;
  }

  /** A BOOKMARK with the current resourceVersion on every open watch that asked for them. */
  sendBookmark(): void {
    for (const watcher of this.#watchers) {
      if (!watcher.bookmarks) continue;
      this.#send(watcher, {
        type: 'BOOKMARK',
        object: {
          kind: 'Node',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.#rv), creationTimestamp: null },
        },
      });
    }
  }

  /** Forgets the history: a watch from any version before now is 410 Gone. */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history.length = 0;
  }

  /** Compacts and ends every open watch with an ERROR event holding 410 Expired. */
  expireWatches(): void {
    const from = this.#compactedRv;
    this.compact();
    for (const watcher of [...this.#watchers]) {
      this.#send(watcher, {
        type: 'ERROR',
        object: status(410, `too old resource version: ${from} (${this.#rv})`, 'Expired'),
      });
      this.#endWatch(watcher);
    }
  }

  /** Destroys the connections of every open watch (no terminating chunk): a dropped connection. */
  dropWatches(): void {
    for (const watcher of [...this.#watchers]) {
      this.#watchers.delete(watcher);
      clearTimeout(watcher.timer);
      watcher.response.socket?.destroy();
    }
  }

  get listening(): boolean {
    return this.#server.listening;
  }

  get openWatches(): number {
    return this.#watchers.size;
  }

  /** The API server goes away: connections refused, open ones reset. */
  async stop(): Promise<void> {
    for (const watcher of this.#watchers) clearTimeout(watcher.timer);
    this.#watchers.clear();
    await new Promise<void>((resolve) => {
      this.#server.close(() => {
        resolve();
      });
      for (const socket of this.#sockets) socket.destroy();
    });
  }

  /** Back on the same port (a new server: same store). */
  async restart(): Promise<void> {
    this.#server = this.#createServer();
    await this.#listen(this.#port);
  }

  async close(): Promise<void> {
    if (this.#server.listening) await this.stop();
  }

  // --- the server -------------------------------------------------------------------

  #createServer(): Server {
    const server = createServer(
      { cert: FAKE_APISERVER_CERT, key: FAKE_APISERVER_KEY },
      (req, res) => {
        this.#handle(req, res).catch((error: unknown) => {
          if (!res.headersSent) {
            this.#reply(res, 500, status(500, String(error)));
          } else {
            res.destroy();
          }
        });
      },
    );
    server.on('connection', (socket: Socket) => {
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
    });
    server.on('secureConnection', (socket: Socket) => {
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
    });
    return server;
  }

  #listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, '127.0.0.1', () => {
        this.#server.off('error', reject);
        const address = this.#server.address();
        if (typeof address === 'object' && address !== null) this.#port = address.port;
        resolve();
      });
    });
  }

  #reply(res: ServerResponse, code: number, body: JsonObject): void {
    const text = JSON.stringify(body);
    res.writeHead(code, {
      'Audit-Id': randomUUID(),
      'Cache-Control': 'no-cache, private',
      'Content-Type': 'application/json',
      'X-Kubernetes-Pf-Flowschema-Uid': '0b8e7a2c-0000-4000-8000-000000000001',
      'X-Kubernetes-Pf-Prioritylevel-Uid': '0b8e7a2c-0000-4000-8000-000000000002',
      'Content-Length': Buffer.byteLength(text),
    });
    this.bytesSent += Buffer.byteLength(text);
    res.end(text);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const query = Object.fromEntries(url.searchParams);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const record: RequestRecord = {
      method: req.method ?? 'GET',
      path: url.pathname,
      query,
      contentType: req.headers['content-type'],
      body: undefined,
      status: 0,
      at: Date.now(),
    };
    const reply = (code: number, body: JsonObject): void => {
      record.status = code;
      this.requests.push(record);
      this.emit('request', record);
      this.#reply(res, code, body);
    };
    if (raw !== '') {
      try {
        record.body = JSON.parse(raw) as Json;
      } catch {
        reply(400, status(400, `couldn't get version/kind; json parse error: ${raw.slice(0, 40)}`));
        return;
      }
    }
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      reply(401, status(401, 'Unauthorized'));
      return;
    }
    const fault = this.#faults.find(
      (f) =>
        (f.method === undefined || f.method === record.method) &&
        (f.path === undefined || f.path.test(record.path)),
    );
    if (fault) {
      fault.times -= 1;
      if (fault.times <= 0) this.#faults.splice(this.#faults.indexOf(fault), 1);
      if (fault.hang) {
        record.status = -1;
        this.requests.push(record);
        return; // never answered
      }
      reply(fault.status, status(fault.status, `injected failure (${fault.status})`));
      return;
    }
    const statusMatch = /^\/api\/v1\/nodes\/([^/]+)\/status$/.exec(url.pathname);
    if (statusMatch && req.method === 'PATCH') {
      this.#patchNodeStatus(decodeURIComponent(statusMatch[1] ?? ''), record, query, reply);
      return;
    }
    const v1Match = /^\/apis\/events\.k8s\.io\/v1\/namespaces\/([^/]+)\/events(?:\/([^/]+))?$/.exec(
      url.pathname,
    );
    if (v1Match && this.#hasEventsV1) {
      const namespace = decodeURIComponent(v1Match[1] ?? '');
      const name = v1Match[2] === undefined ? undefined : decodeURIComponent(v1Match[2]);
      if (req.method === 'POST' && name === undefined) {
        this.#createEventV1(namespace, record, query, reply);
        return;
      }
      if (req.method === 'PATCH' && name !== undefined) {
        this.#patchEvent(this.#groups.v1, namespace, name, record, reply);
        return;
      }
      reply(405, status(405, `the server does not allow this method on the requested resource`));
      return;
    }
    const nodeMatch = /^\/api\/v1\/nodes(?:\/([^/]+))?$/.exec(url.pathname);
    const eventMatch = /^\/api\/v1\/namespaces\/([^/]+)\/events(?:\/([^/]+))?$/.exec(url.pathname);
    if (nodeMatch) {
      const name = nodeMatch[1] === undefined ? undefined : decodeURIComponent(nodeMatch[1]);
      if (req.method === 'GET' && name === undefined) {
        if (query.watch === 'true' || query.watch === '1') {
          record.status = 200;
          this.requests.push(record);
          this.emit('request', record);
          this.#watch(query, res);
          return;
        }
        const selected = this.#selected(query.fieldSelector);
        const all = [...this.#nodes.values()].filter((n) => selected(n));
        // Pages as the API server cuts them: `limit` items, `continue` for the rest.
        const from =
          query.continue === undefined
            ? 0
            : Number(Buffer.from(query.continue, 'base64url').toString());
        const limit = query.limit === undefined ? all.length : Number(query.limit);
        if (!Number.isInteger(from) || from < 0 || !Number.isInteger(limit) || limit < 0) {
          reply(400, status(400, 'invalid limit or continue'));
          return;
        }
        const end = limit === 0 ? all.length : Math.min(all.length, from + limit);
        const metadata: JsonObject = { resourceVersion: String(this.#rv) };
        if (end < all.length) metadata.continue = Buffer.from(String(end)).toString('base64url');
        reply(200, {
          kind: 'NodeList',
          apiVersion: 'v1',
          metadata,
          items: all.slice(from, end).map(clone),
        });
        return;
      }
      if (req.method === 'GET' && name !== undefined) {
        const node = this.#nodes.get(name);
        if (!node) reply(404, notFound('nodes', name));
        else reply(200, clone(node));
        return;
      }
      if (req.method === 'PATCH' && name !== undefined) {
        this.#patchNode(name, record, query, reply);
        return;
      }
      reply(405, status(405, `the server does not allow this method on the requested resource`));
      return;
    }
    if (eventMatch) {
      const namespace = decodeURIComponent(eventMatch[1] ?? '');
      const name = eventMatch[2] === undefined ? undefined : decodeURIComponent(eventMatch[2]);
      if (req.method === 'POST' && name === undefined) {
        this.#createEvent(namespace, record, query, reply);
        return;
      }
      if (req.method === 'PATCH' && name !== undefined) {
        this.#patchEvent(this.#groups.core, namespace, name, record, reply);
        return;
      }
      if (req.method === 'GET' && name === undefined) {
        const items = [...this.#events.values()]
          .filter((e) => (e.metadata as JsonObject).namespace === namespace)
          .map(clone);
        reply(200, {
          kind: 'EventList',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(this.#rv) },
          items,
        });
        return;
      }
      reply(405, status(405, `the server does not allow this method on the requested resource`));
      return;
    }
    reply(404, status(404, 'the server could not find the requested resource', 'NotFound', {}));
  }

  #selected(fieldSelector: string | undefined): (node: JsonObject) => boolean {
    if (!fieldSelector) return () => true;
    const match = /^metadata\.name=(.+)$/.exec(fieldSelector);
    if (!match) return () => false;
    return (node) => (node.metadata as JsonObject).name === match[1];
  }

  // --- watch --------------------------------------------------------------------------

  #watch(query: Record<string, string>, res: ServerResponse): void {
    if (this.watchOverride) {
      this.watchOverride(res);
      return;
    }
    const selector = this.#selected(query.fieldSelector);
    const fromText = query.resourceVersion ?? '';
    const from = fromText === '' || fromText === '0' ? null : Number(fromText);
    if (from !== null && (!Number.isInteger(from) || from < this.#compactedRv)) {
      const gone = status(410, `too old resource version: ${fromText} (${this.#rv})`, 'Expired');
      if (this.goneAsHttpStatus) {
        this.#reply(res, 410, { ...gone, reason: 'Gone' });
        return;
      }
      res.writeHead(200, {
        'Content-Type': 'application/json',
        'Cache-Control': 'no-cache, private',
      });
      res.end(`${JSON.stringify({ type: 'ERROR', object: gone })}\n`);
      return;
    }
    res.writeHead(200, {
      'Audit-Id': randomUUID(),
      'Cache-Control': 'no-cache, private',
      'Content-Type': 'application/json',
    });
    res.flushHeaders(); // as kube-apiserver does: the client sees the watch open before any event
    const fieldName = /^metadata\.name=(.+)$/.exec(query.fieldSelector ?? '')?.[1];
    const watcher: Watcher = {
      response: res,
      name: fieldName,
      bookmarks: query.allowWatchBookmarks === 'true',
      timer: undefined,
    };
    const timeout = Number(query.timeoutSeconds ?? '0');
    if (timeout > 0) {
      watcher.timer = setTimeout(() => {
        this.#endWatch(watcher);
      }, timeout * 1000);
    }
    res.once('close', () => {
      clearTimeout(watcher.timer);
      this.#watchers.delete(watcher);
    });
    this.#watchers.add(watcher);
    if (from === null) {
      for (const node of this.#nodes.values()) {
        if (selector(node)) this.#send(watcher, { type: 'ADDED', object: clone(node) });
      }
    } else {
      for (const entry of this.#history) {
        if (entry.rv > from && selector(entry.object)) {
          this.#send(watcher, { type: entry.type, object: clone(entry.object) });
        }
      }
    }
  }

  #send(watcher: Watcher, event: JsonObject): void {
    const line = `${JSON.stringify(event)}\n`;
    this.bytesSent += Buffer.byteLength(line);
    watcher.response.write(line);
  }

  #endWatch(watcher: Watcher): void {
    clearTimeout(watcher.timer);
    this.#watchers.delete(watcher);
    watcher.response.end();
  }

  #store(node: JsonObject, type: 'ADDED' | 'MODIFIED'): void {
    this.#rv += 1;
    (node.metadata as JsonObject).resourceVersion = String(this.#rv);
    const name = (node.metadata as JsonObject).name as string;
    this.#nodes.set(name, clone(node));
    this.#record(type, node);
  }

  #record(type: 'ADDED' | 'MODIFIED' | 'DELETED', node: JsonObject): void {
    const snapshot = clone(node);
    this.#history.push({ rv: this.#rv, type, object: snapshot });
    const name = (node.metadata as JsonObject).name as string;
    for (const watcher of this.#watchers) {
      if (watcher.name === undefined || watcher.name === name) {
        this.#send(watcher, { type, object: clone(snapshot) });
      }
    }
    this.emit('node', { type, node: clone(snapshot) });
  }

  // --- patches ------------------------------------------------------------------------

  #patchable(
    record: RequestRecord,
    reply: (code: number, body: JsonObject) => void,
  ): JsonObject | undefined {
    const type = (record.contentType ?? '').split(';')[0]?.trim();
    if (
      type !== 'application/merge-patch+json' &&
      type !== 'application/strategic-merge-patch+json'
    ) {
      reply(
        415,
        status(
          415,
          `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml`,
        ),
      );
      return undefined;
    }
    if (!isObject(record.body)) {
      reply(400, status(400, 'the patch is not a JSON object'));
      return undefined;
    }
    return record.body;
  }

  #patchNode(
    name: string,
    record: RequestRecord,
    query: Record<string, string>,
    reply: (code: number, body: JsonObject) => void,
  ): void {
    const patch = this.#patchable(record, reply);
    if (!patch) return;
    const hook = this.#beforePatch;
    this.#beforePatch = undefined;
    hook?.();
    const current = this.#nodes.get(name);
    if (!current) {
      reply(404, notFound('nodes', name));
      return;
    }
    const merged = mergePatch(current, patch) as JsonObject;
    const meta = merged.metadata as JsonObject;
    const currentMeta = current.metadata as JsonObject;
    if (meta.resourceVersion !== currentMeta.resourceVersion) {
      reply(
        409,
        status(
          409,
          `Operation cannot be fulfilled on nodes "${name}": the object has been modified; please apply your changes to the latest version and try again`,
          'Conflict',
          { name, kind: 'nodes' },
        ),
      );
      return;
    }
    if (meta.name !== name || meta.uid !== currentMeta.uid) {
      reply(
        422,
        invalid(`Node "${name}" is invalid: metadata.name, metadata.uid: field is immutable`),
      );
      return;
    }
    const annotations = meta.annotations ?? {};
    if (!isObject(annotations) || Object.values(annotations).some((v) => typeof v !== 'string')) {
      reply(
        400,
        status(
          400,
          'json: cannot unmarshal value into Go struct field ObjectMeta.metadata.annotations of type string',
        ),
      );
      return;
    }
    if (sameIgnoring(merged, current)) {
      reply(200, clone(current)); // a no-op: no new resourceVersion, no watch event
      return;
    }
    const managed = (meta.managedFields ?? []) as JsonObject[];
    const manager = query.fieldManager ?? 'unknown';
    meta.managedFields = [
      ...managed.filter((m) => m.manager !== manager),
      {
        manager,
        operation: 'Update',
        apiVersion: 'v1',
        time: timeOf(new Date()),
        fieldsType: 'FieldsV1',
        fieldsV1: { 'f:metadata': { 'f:annotations': {} } },
      },
    ];
    this.#store(merged, 'MODIFIED');
    reply(200, this.node(name));
  }

  /** Strategic merge of the status: `conditions` merge by `type`, the rest as a merge patch. */
  #patchNodeStatus(
    name: string,
    record: RequestRecord,
    query: Record<string, string>,
    reply: (code: number, body: JsonObject) => void,
  ): void {
    const patch = this.#patchable(record, reply);
    if (!patch) return;
    const current = this.#nodes.get(name);
    if (!current) {
      reply(404, notFound('nodes', name));
      return;
    }
    const patchStatus = isObject(patch.status) ? patch.status : {};
    const { conditions: patchConditions, ...rest } = patchStatus;
    const merged = clone(current);
    merged.status = mergePatch(merged.status, rest);
    const conditions = [...(((merged.status as JsonObject).conditions ?? []) as JsonObject[])];
    for (const condition of (Array.isArray(patchConditions) ? patchConditions : []) as Json[]) {
      if (!isObject(condition) || typeof condition.type !== 'string') {
        reply(422, invalid(`Node "${name}" is invalid: status.conditions: type required`));
        return;
      }
      const at = conditions.findIndex((c) => c.type === condition.type);
      if (at < 0) conditions.push(clone(condition));
      else conditions[at] = mergePatch(conditions[at], condition) as JsonObject;
    }
    (merged.status as JsonObject).conditions = conditions;
    const meta = merged.metadata as JsonObject;
    const manager = query.fieldManager ?? 'unknown';
    meta.managedFields = [
      ...((meta.managedFields ?? []) as JsonObject[]).filter(
        (m) => !(m.manager === manager && m.subresource === 'status'),
      ),
      {
        manager,
        operation: 'Update',
        apiVersion: 'v1',
        time: timeOf(new Date()),
        fieldsType: 'FieldsV1',
        fieldsV1: { 'f:status': { 'f:conditions': {} } },
        subresource: 'status',
      },
    ];
    this.#store(merged, 'MODIFIED');
    reply(200, this.node(name));
  }

  // --- events.k8s.io/v1 ---------------------------------------------------------------

  /** events.k8s.io/v1's create validation (ValidateEventCreate for that group). */
  #invalidEventV1(event: JsonObject): string | null {
    const micro = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
    const regarding = event.regarding;
    const problems = [
      typeof event.eventTime !== 'string' || !micro.test(event.eventTime)
        ? 'eventTime: Required value (a MicroTime, six fractional digits)'
        : null,
      typeof event.reportingController !== 'string' ||
      !/^([a-z0-9.-]+\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(event.reportingController)
        ? 'reportingController: Invalid value (a qualified name)'
        : null,
      typeof event.reportingInstance !== 'string' ||
      event.reportingInstance === '' ||
      event.reportingInstance.length > 128
        ? 'reportingInstance: Required value'
        : null,
      typeof event.action !== 'string' || event.action === '' || event.action.length > 128
        ? 'action: Required value'
        : null,
      typeof event.reason !== 'string' || event.reason === '' || event.reason.length > 128
        ? 'reason: Required value'
        : null,
      event.type !== 'Normal' && event.type !== 'Warning' ? 'type: Unsupported value' : null,
      !isObject(regarding) || typeof regarding.kind !== 'string'
        ? 'regarding: Required value'
        : null,
      typeof event.note === 'string' && Buffer.byteLength(event.note) > 1024
        ? 'note: Too long: may not be longer than 1024'
        : null,
      ...[
        'deprecatedSource',
        'deprecatedFirstTimestamp',
        'deprecatedLastTimestamp',
        'deprecatedCount',
      ]
        .filter((field) => event[field] !== undefined && event[field] !== null)
        .map((field) => `${field}: Invalid value: needs to be unset`),
    ].filter((problem): problem is string => problem !== null);
    return problems.length === 0 ? null : problems.join(', ');
  }

  #createEventV1(
    namespace: string,
    record: RequestRecord,
    query: Record<string, string>,
    reply: (code: number, body: JsonObject) => void,
  ): void {
    if (!isObject(record.body)) {
      reply(400, status(400, 'the body is not an Event'));
      return;
    }
    const event = clone(record.body);
    const meta = (isObject(event.metadata) ? event.metadata : {}) as JsonObject;
    event.metadata = meta;
    const name = typeof meta.name === 'string' ? meta.name : '';
    const problem = name === '' ? 'metadata.name: Required value' : this.#invalidEventV1(event);
    if (problem !== null) {
      reply(422, invalid(`Event.events.k8s.io "${name}" is invalid: ${problem}`));
      return;
    }
    meta.namespace = namespace;
    this.#storeNewEvent(this.#groups.v1, event, query, reply);
  }

  #createEvent(
    namespace: string,
    record: RequestRecord,
    query: Record<string, string>,
    reply: (code: number, body: JsonObject) => void,
  ): void {
    const body = record.body;
    if (!isObject(body)) {
      reply(400, status(400, 'the body is not an Event'));
      return;
    }
    const event = clone(body);
    const meta = (isObject(event.metadata) ? event.metadata : {}) as JsonObject;
    event.metadata = meta;
    if (meta.namespace !== undefined && meta.namespace !== namespace) {
      reply(
        400,
        status(
          400,
          'the namespace of the provided object does not match the namespace sent on the request',
        ),
      );
      return;
    }
    meta.namespace = namespace;
    if (typeof meta.name !== 'string' || meta.name === '') {
      if (typeof meta.generateName === 'string')
        meta.name = `${meta.generateName}${randomUUID().slice(0, 5)}`;
      else {
        reply(
          422,
          invalid(
            'Event "" is invalid: metadata.name: Required value: name or generateName is required',
          ),
        );
        return;
      }
    }
    const involved = event.involvedObject;
    if (
      !isObject(involved) ||
      typeof involved.kind !== 'string' ||
      typeof involved.name !== 'string'
    ) {
      reply(
        422,
        invalid(`Event "${String(meta.name)}" is invalid: involvedObject: Required value`),
      );
      return;
    }
    if ((involved.namespace ?? '') === '' && namespace !== 'default') {
      reply(
        422,
        invalid(
          `Event "${String(meta.name)}" is invalid: involvedObject.namespace: Invalid value: "": does not match event.namespace`,
        ),
      );
      return;
    }
    this.#storeNewEvent(this.#groups.core, event, query, reply);
  }

  /** A valid new Event of `group` stored as the API server does: 409 if its name is taken. */
  #storeNewEvent(
    group: EventGroup,
    event: JsonObject,
    query: Record<string, string>,
    reply: (code: number, body: JsonObject) => void,
  ): void {
    const meta = event.metadata as JsonObject;
    const name = String(meta.name);
    const key = `${String(meta.namespace)}/${name}`;
    if (group.store.has(key)) {
      reply(
        409,
        status(409, `${group.resource} "${name}" already exists`, 'AlreadyExists', {
          name,
          kind: 'events',
        }),
      );
      return;
    }
    this.#rv += 1;
    meta.uid = randomUUID();
    meta.resourceVersion = String(this.#rv);
    meta.creationTimestamp = timeOf(new Date());
    meta.managedFields = [
      {
        manager: query.fieldManager ?? 'unknown',
        operation: 'Update',
        apiVersion: group.apiVersion,
        time: timeOf(new Date()),
        fieldsType: 'FieldsV1',
        fieldsV1: { 'f:reason': {}, 'f:type': {} },
      },
    ];
    event.kind = 'Event';
    event.apiVersion = group.apiVersion;
    group.normalise(event);
    group.store.set(key, event);
    this.emit('event', { type: 'ADDED', event: clone(event) });
    reply(201, clone(event));
  }

  /** A merge or strategic merge patch of a stored Event of `group`; 404 if there is none. */
  #patchEvent(
    group: EventGroup,
    namespace: string,
    name: string,
    record: RequestRecord,
    reply: (code: number, body: JsonObject) => void,
  ): void {
    const patch = this.#patchable(record, reply);
    if (!patch) return;
    const key = `${namespace}/${name}`;
    const current = group.store.get(key);
    if (!current) {
      reply(404, notFound(group.resource, name));
      return;
    }
    const merged = mergePatch(current, patch) as JsonObject;
    this.#rv += 1;
    (merged.metadata as JsonObject).resourceVersion = String(this.#rv);
    group.normalise(merged);
    group.store.set(key, merged);
    this.emit('event', { type: 'MODIFIED', event: clone(merged) });
    reply(200, clone(merged));
  }
}

function notFound(kind: string, name: string): JsonObject {
  return status(404, `${kind} "${name}" not found`, 'NotFound', { name, kind });
}
