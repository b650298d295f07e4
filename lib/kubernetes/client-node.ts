/**
 * The parts of @kubernetes/client-node the guard uses, declared as it uses them (client.ts says
 * why not from the package's own declarations), and the module loaded once, on first use: it is
 * an ES module, and nothing Kubernetes is loaded unless a cluster is used.
 */
import * as http from 'node:http';
import * as https from 'node:https';

export interface RequestContextLike {
  getUrl(): string;
  getHttpMethod(): string;
  getHeaders(): Record<string, string>;
  getBody(): unknown;
  getAgent(): http.Agent | https.Agent | undefined;
  setHeaderParam(key: string, value: string): void;
}

export interface ResponseBodyLike {
  text(): Promise<string>;
  binary(): Promise<Buffer>;
}

/** A user as client-node keeps it (the fields it authenticates with). */
export interface KubeUserLike {
  name: string;
  token?: string | null | undefined;
  authProvider?: { name?: string; config?: Record<string, unknown> } | null | undefined;
  exec?: unknown;
  certData?: string | null | undefined;
  keyData?: string | null | undefined;
  certFile?: string | null | undefined;
  keyFile?: string | null | undefined;
}

export interface KubeConfigLike {
  loadFromString(text: string): void;
  makePathsAbsolute(rootDirectory: string): void;
  loadFromDefault(): void;
  loadFromCluster(): void;
  getCurrentCluster(): { name: string; server: string } | null;
  getCurrentUser(): KubeUserLike | null;
  applySecurityAuthentication(context: RequestContextLike): Promise<void>;
}

export interface ObjectMetaLike {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  annotations?: Record<string, string>;
}

export interface EventLike {
  metadata: ObjectMetaLike;
  /** core/v1 */
  count?: number;
  /** events.k8s.io/v1 */
  series?: { count?: number };
}

export interface EventApiLike {
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

export interface CoreV1ApiLike extends EventApiLike {
  readNode(param: { name: string }): Promise<{ metadata?: ObjectMetaLike }>;
  listNode(param: { limit: number; _continue?: string }): Promise<{
    metadata?: { _continue?: string; resourceVersion?: string };
    items?: { metadata?: ObjectMetaLike; spec?: unknown }[];
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

export interface ClientNodeModule {
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
