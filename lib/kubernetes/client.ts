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
 * nothing Kubernetes is loaded unless a cluster is used. The parts used are
 * declared in client-node.ts as the guard uses them rather than taken from its
 * declarations, which do type-check here (with @types/ws): they type request
 * bodies as its models (Date fields, required fields such as eventTime), while
 * the guard sends JSON it builds itself (merge patches, microTime strings), and
 * they make the user's credentials read-only, which the guard replaces from its
 * own credential source. Taking them would mean a cast at every call.
 */
import { delimiter } from 'node:path';

import { invalidArgument } from '../core/errors';
import { readRegularFile } from '../core/files';
import { CredentialError, folderOf, type CredentialSource } from './credentials';
import {
  type ClientNodeModule,
  type CoreV1ApiLike,
  type EventApiLike,
  type KubeConfigLike,
  type RequestContextLike,
  loadClientNode,
} from './client-node';
import { coreV1Body, eventsV1Body, microTime, noteOf, objectMeta, storedEvent } from './bodies';
import {
  type EventApi,
  type EventRepeat,
  FIELD_MANAGER,
  type KubeEvent,
  type KubeNode,
  type KubeNodePage,
  type KubernetesApi,
  KubernetesApiError,
  MERGE_PATCH,
  STRATEGIC_MERGE_PATCH,
  type StoredEvent,
  type WatchEnd,
  type WatchEvent,
  type WatchOptions,
  type WatchStream,
  apiErrorFromStatus,
  isKubernetesApiError,
  nodeSpec,
  transportError,
} from './api';
import { Transport } from './transport';
import {
  type KubeconfigText,
  MAX_KUBECONFIG_BYTES,
  loadFrom,
  loadKubeconfig,
  takeCredentials,
} from './kubeconfig';

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
    const items = (list.items ?? []).map((node): KubeNode => {
      const spec = nodeSpec(node.spec);
      const metadata = objectMeta(node.metadata, what);
      return spec === undefined ? { metadata } : { metadata, spec };
    });
    const resourceVersion = list.metadata?.resourceVersion ?? '';
    const next = list.metadata?._continue;
    return next ? { items, resourceVersion, continue: next } : { items, resourceVersion };
  }

  watchNodes(
    options: WatchOptions & { name?: string },
    onEvent: (event: WatchEvent) => void,
  ): WatchStream {
    const { name } = options;
    const what = name === undefined ? 'watch nodes' : `watch node ${name}`;
    const url = new URL(`${this.server}/api/v1/nodes`);
    url.searchParams.set('allowWatchBookmarks', 'true');
    if (name !== undefined) url.searchParams.set('fieldSelector', `metadata.name=${name}`);
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
