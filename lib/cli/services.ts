/**
 * What `flannel-guard watch` runs next to the guard when it runs against a
 * cluster or serves metrics: the metrics and health endpoint, the Kubernetes
 * client, the node annotation source (read before the guard starts, so that
 * a rewrite that happened before is corrected from it) and the Event
 * recorder; their log lines; their orderly shutdown.
 */
import { constants } from 'node:os';

import { isSystemError, systemError, type ErrnoCode } from '../core/errors';
import type { FlannelGuard } from '../guard';
import { backendDataKey } from '../kubernetes/annotation';
import { createKubernetesClient } from '../kubernetes/client';
import type { KubernetesApi } from '../kubernetes/api';
import type { ClusterSettings } from '../kubernetes/cluster';
import { NODE_CONDITION_TYPE, NodeConditionReporter } from '../kubernetes/condition';
import { EventRecorder } from '../kubernetes/event-recorder';
import { nodeReference, recordGuardEvents } from '../kubernetes/guard-events';
import { GuardMetrics } from '../kubernetes/metrics';
import type { ListenAddress } from '../kubernetes/listen';
import { GuardHealth, startMetricsServer, type MetricsServer } from '../kubernetes/server';
import { PeerNodes } from '../kubernetes/peer-nodes';
import { KubernetesMacSource, type SourceStatus } from '../kubernetes/source';
import type { MeshSnapshot } from '../mesh/view';
import type { LogLine } from './log-line';
import { startMesh, type MeshSettings } from './mesh';

export interface WatchServicesOptions {
  /** The cluster to read the Node from; null: none. */
  cluster: ClusterSettings | null;
  /** Where to serve /metrics, /healthz and /readyz; 'off': nowhere. */
  metricsAddress: ListenAddress | 'off';
  /** How long to wait for the first read of the Node before the guard starts without it. */
  sourceTimeoutMs: number;
  /** Dry run: no Events are written (the guard writes nothing either). */
  dryRun: boolean;
  /** Keep the Node condition flannel-guard.io/VtepHealthy (needs `patch nodes/status`). */
  nodeCondition: boolean;
  /** The mesh view (with a cluster); null: off. */
  mesh: MeshSettings | null;
  log: LogLine;
  /** Resolves when the user asks to stop (a signal) while the services start. */
  interrupted: Promise<unknown>;
}

/** One readable line for the source's state. */
export function describeSource(status: SourceStatus): string {
  const macs = Object.entries(status.macs).map(([device, mac]) => `${device}=${mac}`);
  const known = macs.length === 0 ? null : macs.join(' ');
  if (status.state === 'synced') return `source: node ${status.node} synced: ${known ?? '-'}`;
  const problem = status.problem === null ? '' : ` (${status.problem})`;
  return `source: node ${status.node} ${status.state}${problem}: ${status.message ?? ''}; guarding with ${known ?? 'first-seen'}`;
}

/** One line per kind of watch restart per this long; the others are counted. */
export const REPEAT_LOG_INTERVAL_MS = 60_000;

/**
 * Rate limit for a repeating condition's log line: the first line of a key
 * goes out, then at most one per interval, carrying how many were held back.
 */
export class RepeatLimiter {
  readonly #last = new Map<string, { at: number; suppressed: number }>();

  constructor(
    readonly intervalMs: number,
    readonly now: () => number = Date.now,
  ) {}

  /** null: hold this line back; else the number held back since the last one. */
  admit(key: string): number | null {
    const at = this.now();
    const last = this.#last.get(key);
    if (last && at - last.at < this.intervalMs) {
      last.suppressed += 1;
      return null;
    }
    this.#last.set(key, { at, suppressed: 0 });
    return last?.suppressed ?? 0;
  }
}

function logSource(source: KubernetesMacSource, log: LogLine): void {
  const node = source.nodeName;
  const limiter = new RepeatLimiter(REPEAT_LOG_INTERVAL_MS);
  source.on('state', (status) => {
    log('source', status.state === 'synced' ? 'info' : 'warn', status, describeSource(status));
  });
  source.on('watch', (e) => {
    if (e.reason === 'closed' && e.delayMs === 0) return; // the server's watch timeout: routine
    const suppressed = limiter.admit(`${e.reason}|${e.message ?? ''}`);
    if (suppressed === null) return;
    const next = e.delayMs > 0 ? `retrying in ${e.delayMs} ms` : 'reading again';
    const why = e.message === undefined ? '' : ` (${e.message})`;
    const held = suppressed > 0 ? `; ${suppressed} more like it not logged` : '';
    log(
      'watch',
      e.reason === 'expired' ? 'info' : 'warn',
      suppressed > 0 ? { ...e, suppressed } : e,
      `watch: node ${node} ${e.reason}${why}; ${next}${held}`,
    );
  });
  source.on('adopt', (e) => {
    const text =
      e.result === 'stored'
        ? `annotation: ${e.annotation} on node ${node} publishes ${e.mac} for ${e.device} (was ${e.previous}; ${e.conflicts} conflicts retried)`
        : `annotation: ${e.annotation} on node ${node} not updated to ${e.mac}: ${e.error ?? ''}`;
    log('annotation', e.result === 'stored' ? 'info' : 'warn', e, text);
  });
}

export class WatchServices {
  readonly health = new GuardHealth();
  readonly metrics: GuardMetrics | undefined;
  #server: MetricsServer | undefined;
  #api: KubernetesApi | undefined;
  #source: KubernetesMacSource | undefined;
  #recorder: EventRecorder | undefined;
  #peerNodes: PeerNodes | undefined;
  #condition: NodeConditionReporter | undefined;
  #cluster: ClusterSettings | null;
  #closing: Promise<void> | undefined;
  readonly #mesh: MeshSettings | null;
  readonly #log: LogLine;
  #closeMesh: (() => void) | undefined;
  /** The mesh seen from this node, once attach() started its view. */
  meshSnapshot: (() => MeshSnapshot) | undefined;

  private constructor(options: WatchServicesOptions) {
    this.#cluster = options.cluster;
    this.#mesh = options.mesh;
    this.#log = options.log;
    this.metrics = options.metricsAddress === 'off' ? undefined : new GuardMetrics();
  }

  /**
   * Starts the endpoint and, with a cluster, reads the Node (waiting at most
   * `sourceTimeoutMs`). Resolves 'stopped' when interrupted meanwhile (all
   * closed again). Rejects when the address cannot be bound (Error) or the
   * cluster configuration cannot be read (EINVAL: a usage error).
   */
  static async start(options: WatchServicesOptions): Promise<WatchServices | 'stopped'> {
    const services = new WatchServices(options);
    try {
      if (await services.#start(options)) return services;
      await services.close();
      return 'stopped';
    } catch (error) {
      await services.close();
      throw error;
    }
  }

  /** The desired-MAC source for the guard (with a cluster). */
  get source(): KubernetesMacSource | undefined {
    return this.#source;
  }

  /** Extra fields of the `ready` line: where the endpoint listens, the source's state. */
  readyFields(): Record<string, unknown> {
    const fields: Record<string, unknown> = {};
    if (this.#server) fields.metrics = this.#server.endpoint;
    if (this.#source) fields.source = this.#source.status();
    return fields;
  }

  /** Follows the guard: health, metrics, Events. */
  attach(guard: FlannelGuard): void {
    this.health.attachGuard(guard);
    this.metrics?.observeGuard(guard);
    const source = this.#source;
    const cluster = this.#cluster;
    const involvedObject = () => nodeReference(cluster?.nodeName ?? '', source?.nodeUid);
    let peerNodes: Pick<PeerNodes, 'nodeFor'> | undefined = this.#peerNodes;
    if (this.#mesh && this.#api && source && cluster) {
      const mesh = startMesh(guard, {
        api: this.#api,
        nodeName: cluster.nodeName,
        annotationPrefix: source.annotationPrefix,
        settings: this.#mesh,
        log: this.#log,
        metrics: this.metrics,
        recorder: this.#recorder,
        involvedObject,
      });
      this.meshSnapshot = () => mesh.view.snapshot();
      this.health.attachMesh(this.meshSnapshot);
      this.health.vtep.attachMesh(mesh.view);
      this.#closeMesh = mesh.close;
      // The mesh's watch of every Node names a checksum sender; its own listing until synced.
      const listing = this.#peerNodes;
      peerNodes = {
        nodeFor: (mac) =>
          mesh.view.synced || listing === undefined
            ? Promise.resolve(mesh.view.nodeOf(mac))
            : listing.nodeFor(mac),
      };
    }
    if (this.#recorder && source && cluster) {
      recordGuardEvents(guard, this.#recorder, {
        involvedObject,
        annotation: backendDataKey('ipv4', source.annotationPrefix),
        ...(peerNodes === undefined ? {} : { peerNodes }),
      });
    }
    this.#condition?.start();
  }

  /** Stops everything; the Events of the last moments get up to 2 s to be sent. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closeMesh?.();
      this.#source?.close();
      this.#condition?.close();
      this.health.close();
      if (this.#recorder) {
        await this.#recorder.flush(2000);
        this.#recorder.close();
      }
      this.#api?.close();
      await this.#server?.close();
    })();
    return this.#closing;
  }

  async #start(options: WatchServicesOptions): Promise<boolean> {
    const metrics = this.metrics;
    if (metrics && options.metricsAddress !== 'off') {
      const address = options.metricsAddress;
      try {
        this.#server = await startMetricsServer({
          address,
          metrics: () => metrics.metrics(),
          contentType: metrics.registry.contentType,
          health: this.health,
        });
      } catch (error) {
        const message = `option metricsAddress ${address.host}:${address.port}: ${(error as Error).message}`;
        if (!isSystemError(error) || !(error.code in constants.errno)) {
          throw Object.assign(new Error(message, { cause: error }), { option: 'metricsAddress' });
        }
        throw systemError(error.code as ErrnoCode, message, {
          option: 'metricsAddress',
          ...(error.syscall === undefined ? {} : { syscall: error.syscall }),
        });
      }
    }
    const cluster = options.cluster;
    if (!cluster) return true;
    // Its errors say which configuration (option kubeconfig, KUBECONFIG, in-cluster) failed.
    const api: KubernetesApi = await createKubernetesClient(
      cluster.kubeconfig === undefined
        ? { inCluster: cluster.inCluster }
        : { kubeconfig: cluster.kubeconfig },
    );
    this.#api = api;
    const source = new KubernetesMacSource({ api, nodeName: cluster.nodeName });
    this.#source = source;
    this.health.attachSource(source);
    metrics?.observeSource(source);
    logSource(source, options.log);
    const stop = Symbol('stop');
    const synced = await Promise.race([
      source.waitForSync(options.sourceTimeoutMs),
      options.interrupted.then(() => stop),
    ]);
    if (synced === stop) return false;
    if (!options.dryRun) {
      const recorder = new EventRecorder({ api, host: cluster.nodeName });
      this.#recorder = recorder;
      this.#peerNodes = new PeerNodes({
        api,
        annotationPrefix: source.annotationPrefix,
        onProblem: (problem) => {
          options.log(
            'kubernetes-peers',
            'warn',
            problem,
            problem.forbidden
              ? `peers: may not list nodes (${problem.error}): senders of bad checksums are named by their addresses; deploy/rbac.yaml grants it`
              : `peers: nodes not listed (${problem.error}): senders of bad checksums are named by their addresses this time`,
          );
        },
      });
      metrics?.observeRecorder(recorder);
      recorder.on('dropped', (e) => {
        if (e.reason === 'spam') return; // rate-limited like kubelet's; counted in the metrics
        const why = e.error === undefined ? e.reason : `${e.reason}: ${e.error}`;
        options.log('kubernetes-event', 'warn', e, `event: ${e.eventReason} not recorded (${why})`);
      });
      if (options.nodeCondition) {
        const condition = new NodeConditionReporter({
          api,
          nodeName: cluster.nodeName,
          health: this.health.vtep,
        });
        this.#condition = condition;
        condition.on('written', (e) => {
          if (!e.transition) return;
          const { status, reason, message } = e.condition;
          options.log(
            'node-condition',
            status === 'True' ? 'info' : 'warn',
            e.condition,
            `condition: ${NODE_CONDITION_TYPE}=${status} ${reason}: ${message}`,
          );
        });
        condition.on('failed', (e) => {
          options.log(
            'node-condition',
            'warn',
            e,
            `condition: ${NODE_CONDITION_TYPE} not written (${e.error})`,
          );
        });
      }
    }
    return true;
  }
}
