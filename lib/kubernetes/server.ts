/**
 * The guard's HTTP endpoint: Prometheus `/metrics`, `/healthz` (liveness) and
 * `/readyz` (readiness), JSON bodies for the health checks.
 *
 * - live: the guard has not stopped (it was closed or never started after an
 *   error). Nothing about the API server: restarting the guard never fixes it.
 * - ready: the guard has taken on its devices (its `ready` event) and the
 *   desired-MAC source is either synced or has explicitly declared itself
 *   degraded (API unreachable, annotation missing or invalid: the guard then
 *   keeps the last known value, or first-seen). Only "starting" - the first
 *   read of the Node neither answered nor timed out - is not ready. A later
 *   API outage keeps the guard ready: it keeps guarding, and says so in the
 *   body, the metrics and the log.
 * - vtep (`/vtep`): this node's VTEPs are healthy - the guard is ready and the Node
 *   condition's judgement is True (no lasting drift, nothing contested, no offload measured
 *   broken and on). For node-readiness-controller's readiness-condition-reporter, which writes
 *   a condition from a 2xx or not; the guard can also write the condition itself
 *   (--node-condition).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

import type { FlannelGuard } from '../guard';
import { isHealthyVerdict } from '../mesh/compare';
import type { MeshSnapshot } from '../mesh/view';
import { VtepHealth } from './condition';
import type { ListenAddress } from './listen';
import type { KubernetesMacSource, SourceStatus } from './source';

export interface HealthReport {
  ok: boolean;
  [field: string]: unknown;
}

/** Liveness and readiness of a running `watch`. */
export class GuardHealth {
  /** The VTEPs' judgement, for `/vtep` and the Node condition. */
  readonly vtep = new VtepHealth();
  #guardReady = false;
  #guardClosed = false;
  #source: KubernetesMacSource | undefined;
  #mesh: (() => MeshSnapshot) | undefined;

  /** Follows the guard's `ready` and `close`. */
  attachGuard(guard: FlannelGuard): void {
    guard.once('ready', () => {
      this.#guardReady = true;
    });
    guard.once('close', () => {
      this.#guardClosed = true;
    });
    this.vtep.attach(guard);
  }

  attachSource(source: KubernetesMacSource): void {
    this.#source = source;
  }

  /** The mesh view: said in /readyz (not judged there: a peer's stale entry is not this pod's). */
  attachMesh(snapshot: () => MeshSnapshot): void {
    this.#mesh = snapshot;
  }

  live(): HealthReport {
    return { ok: !this.#guardClosed, guard: this.#guardState() };
  }

  ready(): HealthReport {
    const source = this.#source?.status();
    const sourceOk = source === undefined || source.state !== 'starting';
    const report: HealthReport = {
      ok: this.#guardReady && !this.#guardClosed && sourceOk,
      guard: this.#guardState(),
    };
    if (source) report.source = sourceSummary(source);
    const mesh = this.#mesh?.();
    if (mesh) report.mesh = meshSummary(mesh);
    return report;
  }

  /** 200 for a reporter only once the guard is ready and the judgement is True. */
  vtepReport(): HealthReport {
    const condition = this.vtep.value;
    const ready = this.#guardReady && !this.#guardClosed;
    return {
      ok: ready && condition?.status === 'True',
      guard: this.#guardState(),
      ...(condition === undefined ? {} : { condition }),
    };
  }

  close(): void {
    this.vtep.close();
  }

  #guardState(): 'starting' | 'ready' | 'stopped' {
    if (this.#guardClosed) return 'stopped';
    return this.#guardReady ? 'ready' : 'starting';
  }
}

function meshSummary(mesh: MeshSnapshot): Record<string, unknown> {
  const verdicts: Record<string, number> = {};
  for (const verdict of Object.values(mesh.reported))
    verdicts[verdict] = (verdicts[verdict] ?? 0) + 1;
  const diverged = Object.entries(mesh.reported)
    .filter(([, verdict]) => !isHealthyVerdict(verdict))
    .map(([peer]) => peer);
  return {
    consistent: mesh.consistent,
    synced: mesh.synced,
    verdicts,
    diverged,
    orphans: mesh.table.orphans.length,
  };
}

function sourceSummary(status: SourceStatus): Record<string, unknown> {
  return {
    name: status.source,
    node: status.node,
    state: status.state,
    problem: status.problem,
    message: status.message,
    since: status.since,
    lastSync: status.lastSync,
  };
}

export interface MetricsServerOptions {
  address: ListenAddress;
  /** The exposition text and its content type. */
  metrics: () => Promise<string>;
  contentType: string;
  health: GuardHealth;
}

export interface MetricsServer {
  /** Where it listens (the real port when 0 was asked for). */
  readonly address: ListenAddress;
  /** HOST:PORT, IPv6 bracketed. */
  readonly endpoint: string;
  close(): Promise<void>;
}

function send(
  response: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  head: boolean,
): void {
  response.writeHead(status, {
    'Content-Type': contentType,
    'Content-Length': Buffer.byteLength(body),
    'Cache-Control': 'no-store',
  });
  response.end(head ? undefined : body);
}

/** Starts listening; rejects when the address cannot be bound (in use, not local). */
export async function startMetricsServer(options: MetricsServerOptions): Promise<MetricsServer> {
  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    const head = request.method === 'HEAD';
    if (request.method !== 'GET' && !head) {
      response.setHeader('Allow', 'GET, HEAD');
      send(response, 405, 'text/plain; charset=utf-8', 'method not allowed\n', false);
      return;
    }
    const sendReport = (report: HealthReport): void => {
      const body = JSON.stringify({ status: report.ok ? 'ok' : 'unavailable', ...report });
      send(response, report.ok ? 200 : 503, 'application/json', `${body}\n`, head);
    };
    switch (path) {
      case '/metrics':
        send(response, 200, options.contentType, await options.metrics(), head);
        return;
      case '/healthz':
      case '/livez':
        sendReport(options.health.live());
        return;
      case '/readyz':
        sendReport(options.health.ready());
        return;
      case '/vtep':
        sendReport(options.health.vtepReport());
        return;
      default:
        send(response, 404, 'text/plain; charset=utf-8', 'not found\n', head);
    }
  };
  const server: Server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      const message = error instanceof Error ? error.message : String(error);
      if (!response.headersSent) {
        send(response, 500, 'text/plain; charset=utf-8', `${message}\n`, false);
      } else {
        response.destroy();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.address.port, options.address.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address();
  const port = typeof bound === 'object' && bound !== null ? bound.port : options.address.port;
  const address = { host: options.address.host, port };
  return {
    address,
    endpoint: `${address.host.includes(':') ? `[${address.host}]` : address.host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => {
          resolve();
        });
        server.closeAllConnections();
      }),
  };
}
