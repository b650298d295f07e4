/**
 * Prometheus metrics of the guard (prom-client, a registry of its own), fed
 * by the guard's events, the Kubernetes source and the event recorder.
 *
 * Labels are bounded: `device` takes at most `maxDevices` interface names
 * (then "other"); every other label is a fixed set of values.
 */
import { createRequire } from 'node:module';

import type { Counter, Gauge, Histogram, Registry } from 'prom-client';

import type {
  ContestedEvent,
  FlannelGuard,
  RewriteEvent,
  SharedEvent,
  VerdictEvent,
} from '../guard';
import type { MeshView } from '../mesh/view';
import type { EventRecorder } from './event-recorder';
import type { KubernetesMacSource, SourceState } from './source';

export const METRIC_PREFIX = 'flannel_guard_';

/** Every value of mesh_peers' verdict label, present (0) from the first scrape. */
const MESH_VERDICTS = [
  'ok',
  'stale-mac',
  'stale-underlay',
  'missing',
  'duplicate-mac',
  'direct',
  'contested',
  'orphan',
] as const;

let promClient: typeof import('prom-client') | undefined;

const REDUNDANT_DEFAULT_GAUGES = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/** prom-client, loaded on first use: it takes longer to load than the rest of the package. */
function prom(): typeof import('prom-client') {
  promClient ??= createRequire(__filename)('prom-client') as typeof import('prom-client');
  return promClient;
}

/** rewrite → restored latency buckets (s): the guard answers in ~1 ms, backoff takes seconds. */
export const LATENCY_BUCKETS = [
  0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

/** adopt latency buckets (s): an API round trip, retries on conflict. */
export const ADOPT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export interface GuardMetricsOptions {
  /** Distinct device label values kept before "other" (default 16). */
  maxDevices?: number;
  /** Also export the process and Node.js runtime metrics (default true). */
  defaultMetrics?: boolean;
}

const SOURCE_STATES: readonly SourceState[] = ['starting', 'synced', 'degraded'];

export class GuardMetrics {
  readonly registry: Registry;
  readonly #maxDevices: number;
  readonly #devices = new Set<string>();
  readonly #rewrites: Counter<'device' | 'cause'>;
  readonly #corrections: Counter<'device'>;
  readonly #adoptions: Counter<'device'>;
  readonly #neighbourRestores: Counter<'device'>;
  readonly #offloadApplications: Counter<'device'>;
  readonly #offloadVerdicts: Counter<'device' | 'verdict' | 'action'>;
  readonly #offloadBroken: Gauge<'device'>;
  readonly #drift: Gauge<'device'>;
  readonly #overruns: Counter;
  readonly #resyncs: Counter;
  readonly #errors: Counter;
  readonly #contested: Gauge<'device' | 'what'>;
  readonly #contestedTotal: Counter<'device' | 'what'>;
  readonly #otherGuards: Gauge<'device'>;
  readonly #restoreLatency: Histogram<'device'>;
  readonly #adoptLatency: Histogram<'device'>;
  readonly #ready: Gauge;
  readonly #managed: Gauge;
  readonly #checksumErrors: Counter<'protocol'>;
  readonly #sourceState: Gauge<'state'>;
  readonly #watchRestarts: Counter<'reason'>;
  readonly #annotationPatches: Counter<'result'>;
  readonly #events: Counter<'result'>;
  readonly #meshPeers: Gauge<'verdict'>;
  readonly #meshRepairs: Counter<'result'>;
  #guard: FlannelGuard | undefined;
  #mesh: MeshView | undefined;

  constructor(options: GuardMetricsOptions = {}) {
    this.#maxDevices = options.maxDevices ?? 16;
    const { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } = prom();
    this.registry = new Registry();
    const registers = [this.registry];
    const p = METRIC_PREFIX;
    this.#rewrites = new Counter({
      name: `${p}rewrites_total`,
      help: 'MAC rewrites of a managed device seen by the guard, by writer (udev-persistent-policy, udev-static-mac, another-writer, unknown)',
      labelNames: ['device', 'cause'],
      registers,
    });
    this.#corrections = new Counter({
      name: `${p}corrections_total`,
      help: 'MACs set back to the desired value (restored events)',
      labelNames: ['device'],
      registers,
    });
    this.#adoptions = new Counter({
      name: `${p}adoptions_total`,
      help: "Devices' new MACs published as the desired value (adopt strategy)",
      labelNames: ['device'],
      registers,
    });
    this.#neighbourRestores = new Counter({
      name: `${p}neighbour_restores_total`,
      help: 'Permanent neighbour entries re-installed after a MAC change flushed them',
      labelNames: ['device'],
      registers,
    });
    this.#offloadApplications = new Counter({
      name: `${p}offload_applications_total`,
      help: 'Offload policy writes (features that were not at the policy)',
      labelNames: ['device'],
      registers,
    });
    this.#offloadVerdicts = new Counter({
      name: `${p}offload_verdicts_total`,
      help: '--offload auto verdicts on TX checksum offload (healthy, broken, inconclusive) and what was done',
      labelNames: ['device', 'verdict', 'action'],
      registers,
    });
    this.#drift = new Gauge({
      name: `${p}drift`,
      help: "1 from a rewrite of the device's MAC until it is set back or adopted (stays 1 while a correction is deferred or the device contested)",
      labelNames: ['device'],
      registers,
    });
    this.#offloadBroken = new Gauge({
      name: `${p}offload_broken`,
      help: "1 while --offload auto has measured the device's TX checksum offload broken (and keeps it off)",
      labelNames: ['device'],
      registers,
    });
    this.#overruns = new Counter({
      name: `${p}netlink_overruns_total`,
      help: 'Netlink notifications lost (ENOBUFS); each is followed by a re-read',
      registers,
    });
    this.#resyncs = new Counter({
      name: `${p}resyncs_total`,
      help: 'Re-reads of the namespace',
      registers,
    });
    this.#errors = new Counter({
      name: `${p}errors_total`,
      help: 'Errors reported by the guard',
      registers,
    });
    this.#contested = new Gauge({
      name: `${p}contested`,
      help: '1 while the device is contested (another agent keeps rewriting it; the guard has stopped correcting)',
      labelNames: ['device', 'what'],
      registers,
    });
    this.#otherGuards = new Gauge({
      name: `${p}other_guards`,
      help: 'Other flannel-guard processes watching the device (each one doubles the writes of every correction)',
      labelNames: ['device'],
      registers,
    });
    this.#contestedTotal = new Counter({
      name: `${p}contested_total`,
      help: 'Times a device became contested',
      labelNames: ['device', 'what'],
      registers,
    });
    this.#restoreLatency = new Histogram({
      name: `${p}restore_latency_seconds`,
      help: 'From the rewrite notification to the MAC and the neighbour entries being back',
      labelNames: ['device'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.#adoptLatency = new Histogram({
      name: `${p}adopt_latency_seconds`,
      help: 'From the rewrite notification to the new MAC being stored in the node annotation',
      labelNames: ['device'],
      buckets: ADOPT_BUCKETS,
      registers,
    });
    this.#ready = new Gauge({
      name: `${p}ready`,
      help: '1 once the guard has taken on its devices',
      registers,
    });
    this.#managed = new Gauge({
      name: `${p}managed_devices`,
      help: 'Devices the guard manages',
      registers,
      collect: () => {
        if (this.#guard) this.#managed.set(this.#guard.status().length);
      },
    });
    this.#checksumErrors = new Counter({
      name: `${p}received_checksum_errors_total`,
      help: "Packets this node's namespace received with bad checksums and dropped (/proc/net/snmp InCsumErrors: udp, tcp, udp6), since the namespace began; a rise means a peer sends with broken TX checksum offload",
      labelNames: ['protocol'],
      registers,
      collect: () => {
        // The kernel's own counters, as the guard last read them.
        const totals = this.#guard?.checksumErrors() ?? null;
        this.#checksumErrors.reset();
        if (totals === null) return;
        for (const protocol of ['udp', 'tcp', 'udp6'] as const) {
          const value = totals[protocol];
          if (value !== null) this.#checksumErrors.inc({ protocol }, value);
        }
      },
    });
    this.#meshPeers = new Gauge({
      name: `${p}mesh_peers`,
      help: "Peers by the verdict on this node's entries for them (after the grace period): ok, stale-mac, stale-underlay, missing, duplicate-mac, direct, contested; orphan counts entries no Node publishes",
      labelNames: ['verdict'],
      registers,
      collect: () => {
        this.#meshPeers.reset();
        const snapshot = this.#mesh?.snapshot();
        if (snapshot === undefined) return;
        for (const verdict of MESH_VERDICTS) this.#meshPeers.set({ verdict }, 0);
        for (const verdict of Object.values(snapshot.reported)) this.#meshPeers.inc({ verdict });
        this.#meshPeers.set({ verdict: 'orphan' }, snapshot.table.orphans.length);
      },
    });
    this.#meshRepairs = new Counter({
      name: `${p}mesh_repairs_total`,
      help: "A peer's ARP/FDB entries written as flanneld would (--mesh repair: written, failed), or an orphan entry deleted (--mesh prune: pruned, prune-failed)",
      labelNames: ['result'],
      registers,
    });
    this.#sourceState = new Gauge({
      name: `${p}kubernetes_source_state`,
      help: 'State of the node annotation source (1 for the current state)',
      labelNames: ['state'],
      registers,
    });
    this.#watchRestarts = new Counter({
      name: `${p}kubernetes_watch_restarts_total`,
      help: 'Restarts of the Node watch, by reason (closed: the server ended it normally)',
      labelNames: ['reason'],
      registers,
    });
    this.#annotationPatches = new Counter({
      name: `${p}kubernetes_annotation_patches_total`,
      help: 'Annotation patches by the adopt strategy (conflict: 409, retried)',
      labelNames: ['result'],
      registers,
    });
    this.#events = new Counter({
      name: `${p}kubernetes_events_total`,
      help: 'Kubernetes Events: created, patched (a repeat), or dropped (rate limit, failures)',
      labelNames: ['result'],
      registers,
    });
    if (options.defaultMetrics ?? true) {
      collectDefaultMetrics({ register: this.registry });
      // prom-client's sums of the per-type gauges beside them are gauges named `_total`, which
      // Prometheus keeps for counters (promtool check metrics warns): the per-type ones stay.
      for (const name of REDUNDANT_DEFAULT_GAUGES) this.registry.removeSingleMetric(name);
    }
  }

  /** The label value for a device name: itself, or "other" past the limit. */
  device(name: string): string {
    if (this.#devices.has(name)) return name;
    if (this.#devices.size >= this.#maxDevices) return 'other';
    this.#devices.add(name);
    return name;
  }

  /** Counts the guard's events; returns a function that stops. */
  observeGuard(guard: FlannelGuard): () => void {
    this.#guard = guard;
    const on = {
      ready: () => this.#ready.set(1),
      rewrite: (e: RewriteEvent) => {
        const device = this.device(e.device);
        this.#rewrites.inc({ device, cause: e.writer });
        this.#drift.set({ device }, 1);
      },
      restored: (e: { device: string; neighbours: number; latencyMs: number }) => {
        const device = this.device(e.device);
        this.#drift.set({ device }, 0);
        this.#corrections.inc({ device });
        this.#neighbourRestores.inc({ device }, e.neighbours);
        this.#restoreLatency.observe({ device }, e.latencyMs / 1000);
      },
      adopted: (e: { device: string; neighbours: number; latencyMs: number }) => {
        const device = this.device(e.device);
        this.#drift.set({ device }, 0);
        this.#adoptions.inc({ device });
        this.#neighbourRestores.inc({ device }, e.neighbours);
        this.#adoptLatency.observe({ device }, e.latencyMs / 1000);
      },
      offload: (e: { device: string; written: boolean; dryRun: boolean }) => {
        if (e.written && !e.dryRun)
          this.#offloadApplications.inc({ device: this.device(e.device) });
      },
      verdict: (e: VerdictEvent) => {
        const device = this.device(e.device);
        this.#offloadVerdicts.inc({ device, verdict: e.verdict, action: e.action });
        this.#offloadBroken.set({ device }, e.verdict === 'broken' ? 1 : 0);
      },
      contested: (e: ContestedEvent) => {
        const labels = { device: this.device(e.device), what: e.what };
        this.#contested.set(labels, 1);
        this.#contestedTotal.inc(labels);
      },
      shared: (e: SharedEvent) =>
        this.#otherGuards.set({ device: this.device(e.device) }, e.others),
      resumed: (e: { device: string; what: 'mac' | 'offload' }) =>
        this.#contested.set({ device: this.device(e.device), what: e.what }, 0),
      released: (e: { device: string }) => {
        const device = this.device(e.device);
        this.#contested.set({ device, what: 'mac' }, 0);
        this.#contested.set({ device, what: 'offload' }, 0);
        this.#offloadBroken.set({ device }, 0);
        this.#drift.set({ device }, 0);
      },
      overrun: () => this.#overruns.inc(),
      resync: (e: { phase: string }) => {
        if (e.phase === 'begin') this.#resyncs.inc();
      },
      error: () => this.#errors.inc(),
      close: () => this.#ready.set(0),
    };
    for (const [name, listener] of Object.entries(on)) {
      guard.on(name as 'ready', listener as () => void);
    }
    return () => {
      for (const [name, listener] of Object.entries(on)) {
        guard.off(name as 'ready', listener as () => void);
      }
      if (this.#guard === guard) this.#guard = undefined;
    };
  }

  observeSource(source: KubernetesMacSource): () => void {
    const setState = (state: SourceState): void => {
      for (const candidate of SOURCE_STATES) {
        this.#sourceState.set({ state: candidate }, candidate === state ? 1 : 0);
      }
    };
    setState(source.state);
    const onState = (status: { state: SourceState }): void => {
      setState(status.state);
    };
    const onWatch = (e: { reason: string }): void => {
      this.#watchRestarts.inc({ reason: e.reason });
    };
    const onAdopt = (e: { result: string; conflicts: number }): void => {
      if (e.conflicts > 0) this.#annotationPatches.inc({ result: 'conflict' }, e.conflicts);
      this.#annotationPatches.inc({ result: e.result });
    };
    source.on('state', onState);
    source.on('watch', onWatch);
    source.on('adopt', onAdopt);
    return () => {
      source.off('state', onState);
      source.off('watch', onWatch);
      source.off('adopt', onAdopt);
    };
  }

  /** The mesh view's verdicts (collected at each scrape) and its repairs. */
  observeMesh(view: MeshView): void {
    this.#mesh = view;
    view.on('repaired', (e) => {
      this.#meshRepairs.inc({ result: e.error === undefined ? 'written' : 'failed' });
    });
    view.on('pruned', (e) => {
      this.#meshRepairs.inc({ result: e.error === undefined ? 'pruned' : 'prune-failed' });
    });
  }

  observeRecorder(recorder: EventRecorder): () => void {
    const onRecorded = (e: { action: 'created' | 'patched' }): void => {
      this.#events.inc({ result: e.action });
    };
    const onDropped = (e: { reason: string }): void => {
      this.#events.inc({ result: e.reason === 'spam' ? 'rate-limited' : 'dropped' });
    };
    recorder.on('recorded', onRecorded);
    recorder.on('dropped', onDropped);
    return () => {
      recorder.off('recorded', onRecorded);
      recorder.off('dropped', onDropped);
    };
  }

  /** The exposition text. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
