/**
 * What the guard asks of the Kubernetes API, in its own terms: the objects it reads and writes
 * (Nodes, Events), the watch stream, the KubernetesApi interface the source, the recorder and
 * the condition take (the real client, or a test's), and the API's errors.
 */
import * as http from 'node:http';

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

/** The part of a Node's spec the mesh reads (flannel's lease subnet). */
export interface KubeNodeSpec {
  podCIDR?: string;
  podCIDRs?: string[];
}

export interface KubeNode {
  metadata: KubeObjectMeta;
  /** Kept by lists and watches (the mesh view); not by reads of the guard's own Node. */
  spec?: KubeNodeSpec;
}

export interface KubeNodePage {
  items: KubeNode[];
  /** The list's resourceVersion: where a watch of every Node starts after the last page. */
  resourceVersion: string;
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
  /**
   * Watches every Node, or the one named (a field selector on its name):
   * GET /api/v1/nodes?watch=true.
   */
  watchNodes(
    options: WatchOptions & { name?: string },
    onEvent: (event: WatchEvent) => void,
  ): WatchStream;
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

export function transportError(error: unknown, what: string): KubernetesApiError {
  const code =
    typeof (error as { code?: unknown } | null)?.code === 'string'
      ? (error as { code: string }).code
      : undefined;
  const message = error instanceof Error ? error.message : String(error);
  return new KubernetesApiError(`${what}: ${message}`, { statusCode: 0, code });
}

/**
 * Every Node, read `pageSize` at a time (at most `maxPages` pages: a bound, not a cluster size
 * anyone runs), with the list's resourceVersion to watch from.
 */
export async function listAllNodes(
  api: Pick<KubernetesApi, 'listNodes'>,
  bounds: { pageSize: number; maxPages: number },
): Promise<{ items: KubeNode[]; resourceVersion: string }> {
  const items: KubeNode[] = [];
  let next: string | undefined;
  let resourceVersion = '';
  for (let page = 0; page < bounds.maxPages; page += 1) {
    const result = await api.listNodes({
      limit: bounds.pageSize,
      ...(next === undefined ? {} : { continue: next }),
    });
    items.push(...result.items);
    // The API server cuts every page from the first one's snapshot: the watch starts there.
    if (page === 0) resourceVersion = result.resourceVersion;
    next = result.continue;
    if (next === undefined) break;
  }
  return { items, resourceVersion };
}

/** A Node of a watch event, as the guard keeps it; undefined without a name. */
export function decodeNode(object: Record<string, unknown>): KubeNode | undefined {
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
  const spec = nodeSpec(object.spec);
  if (spec !== undefined) node.spec = spec;
  return node;
}

/** The pod CIDRs of a Node's spec as served (strings only; anything else is left out). */
export function nodeSpec(value: unknown): KubeNodeSpec | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const { podCIDR, podCIDRs } = value as Record<string, unknown>;
  const spec: KubeNodeSpec = {};
  if (typeof podCIDR === 'string') spec.podCIDR = podCIDR;
  if (Array.isArray(podCIDRs)) {
    spec.podCIDRs = podCIDRs.filter((cidr): cidr is string => typeof cidr === 'string');
  }
  return spec;
}
