/**
 * An opt-in Node condition for what persists, node-problem-detector's convention (Events say
 * what happened; a condition says what is still true): `flannel-guard.io/VtepHealthy` (and
 * `FlannelVtepHealthy`, its name before, for one release) is False while a
 * managed device stays drifted (its MAC off the desired one for longer than a correction takes)
 * or is contested (another agent keeps rewriting its MAC or offload), or its TX checksum offload
 * was measured broken (`--offload auto`) and is still on, or (with the mesh view) this node's
 * entries for a peer differ from what it publishes; True otherwise. Never
 * `NetworkUnavailable`, which flannel owns. Written with a strategic merge patch of the Node's
 * status (conditions merge by type, so kubelet's and others' stay), on every change of its
 * status, reason or message and as a heartbeat; a failed write is tried again on the next.
 */
import { EventEmitter } from 'node:events';

import type { DeviceStatus, FlannelGuard } from '../guard';
import { isHealthyVerdict } from '../mesh/compare';
import type { MeshSnapshot, MeshView } from '../mesh/view';
import type { KubernetesApi } from './api';

/**
 * The condition's type: domain-prefixed, as node-readiness-controller's rules name the
 * conditions they gate on (deploy/readiness). A name, not a domain anyone resolves.
 */
export const NODE_CONDITION_TYPE = 'flannel-guard.io/VtepHealthy';
/** The type written before it: written beside it, with the same value, until the next release. */
export const LEGACY_NODE_CONDITION_TYPE = 'FlannelVtepHealthy';

/** How long a device may be off its desired MAC before that is a state, not a correction. */
export const DEFAULT_DRIFT_GRACE_MS = 5_000;
/** The guard's events within this long are judged together: none pays for it on its own path. */
const EVALUATE_AFTER_MS = 100;
/** node-problem-detector's heartbeat of an unchanged condition. */
export const DEFAULT_HEARTBEAT_MS = 5 * 60_000;

export interface NodeConditionValue {
  status: 'True' | 'False';
  reason:
    'VtepHealthy' | 'VtepMacDrifted' | 'VtepContested' | 'VtepOffloadBroken' | 'VtepPeersStale';
  message: string;
}

/**
 * The condition for these devices; `persistentlyDrifted` says which drift has lasted. With the
 * mesh view, peers whose entries here differ from what they publish (past its grace) count too.
 */
export function vtepCondition(
  devices: readonly DeviceStatus[],
  persistentlyDrifted: (device: DeviceStatus) => boolean,
  mesh?: MeshSnapshot,
): NodeConditionValue {
  const contested = devices.filter((d) => d.contested);
  if (contested.length > 0) {
    return {
      status: 'False',
      reason: 'VtepContested',
      message: `${contested.map((d) => d.name).join(', ')}: another agent keeps rewriting it; the guard stopped correcting until it is quiet`,
    };
  }
  // Measured broken (--offload auto) and still offloading: the fix did not take.
  const broken = devices.filter(
    (d) => d.offloadVerdict === 'broken' && Object.values(d.offloads).some((on) => on === true),
  );
  if (broken.length > 0) {
    return {
      status: 'False',
      reason: 'VtepOffloadBroken',
      message: `${broken.map((d) => d.name).join(', ')}: TX checksum offload measured broken and still on: TCP and UDP between nodes fail`,
    };
  }
  const drifted = devices.filter(persistentlyDrifted);
  if (drifted.length > 0) {
    return {
      status: 'False',
      reason: 'VtepMacDrifted',
      message: drifted
        .map(
          (d) => `${d.name} has MAC ${d.mac ?? 'none'}, the other nodes use ${d.desiredMac ?? '?'}`,
        )
        .join('; '),
    };
  }
  const diverged = Object.entries(mesh?.reported ?? {}).filter(
    ([, verdict]) => !isHealthyVerdict(verdict),
  );
  if (diverged.length > 0) {
    return {
      status: 'False',
      reason: 'VtepPeersStale',
      message: `this node's ARP/FDB entries differ from what the peers publish: ${diverged
        .map(([peer, verdict]) => `${peer.replace('|', ' ')} ${verdict}`)
        .join(', ')}`,
    };
  }
  const names = devices.map((d) => d.name);
  return {
    status: 'True',
    reason: 'VtepHealthy',
    message:
      names.length === 0
        ? 'no VXLAN device of flannel here'
        : `${names.join(', ')} at the published MAC, not contested`,
  };
}

export interface VtepHealthOptions {
  driftGraceMs?: number;
  /** Wall clock in ms (tests). */
  now?: () => number;
}

export interface VtepHealthEvents {
  /** The guard's status was judged (after its events, and once a drift's grace is over). */
  judged: [{ condition: NodeConditionValue }];
}

/**
 * Judges this node's VTEPs from the guard's status, for the Node condition and for the
 * endpoint a readiness reporter polls: a drift counts once it has outlasted the grace (a
 * correction's few milliseconds never show).
 */
export class VtepHealth extends EventEmitter<VtepHealthEvents> {
  readonly #graceMs: number;
  readonly #now: () => number;
  readonly #driftSince = new Map<string, number>();
  #value: NodeConditionValue | undefined;
  #graceTimer: NodeJS.Timeout | undefined;
  #evaluateTimer: NodeJS.Timeout | undefined;
  #guard: FlannelGuard | undefined;
  #mesh: MeshView | undefined;
  #closed = false;

  constructor(options: VtepHealthOptions = {}) {
    super();
    this.#graceMs = options.driftGraceMs ?? DEFAULT_DRIFT_GRACE_MS;
    this.#now = options.now ?? Date.now;
  }

  /** The last judgement; undefined until a guard is attached. */
  get value(): NodeConditionValue | undefined {
    return this.#value;
  }

  /** Judges the mesh view's verdicts too, at each change of one. */
  attachMesh(view: MeshView): void {
    this.#mesh = view;
    view.on('verdict', () => this.#judgeSoon());
  }

  // A correction's events come in the turn that corrects: the status is read a little later,
  // once for all of them, not by each event's listener.
  #judgeSoon(): void {
    this.#evaluateTimer ??= setTimeout(() => {
      this.#evaluateTimer = undefined;
      this.judge();
    }, EVALUATE_AFTER_MS).unref();
  }

  /** Follows the guard's events; returns a function that stops following. */
  attach(guard: FlannelGuard): () => void {
    this.#guard = guard;
    const judgeSoon = (): void => this.#judgeSoon();
    const names = [
      'ready',
      'rewrite',
      'restored',
      'adopted',
      'contested',
      'resumed',
      'released',
      'verdict',
      'offload',
    ] as const;
    for (const name of names) guard.on(name, judgeSoon);
    this.judge();
    return () => {
      for (const name of names) guard.off(name, judgeSoon);
    };
  }

  /** Judges the guard's status now. */
  judge(): void {
    const guard = this.#guard;
    if (this.#closed || !guard) return;
    const now = this.#now();
    const devices = guard.status();
    for (const device of devices) {
      const drifted = device.desiredMac !== null && device.mac !== device.desiredMac;
      if (!drifted) this.#driftSince.delete(device.name);
      else if (!this.#driftSince.has(device.name)) this.#driftSince.set(device.name, now);
    }
    for (const name of this.#driftSince.keys()) {
      if (!devices.some((d) => d.name === name)) this.#driftSince.delete(name);
    }
    const condition = vtepCondition(
      devices,
      (d) => {
        const since = this.#driftSince.get(d.name);
        return since !== undefined && now - since >= this.#graceMs;
      },
      this.#mesh?.snapshot(),
    );
    // A drift not yet old enough to count: look again once it is.
    if (this.#driftSince.size > 0 && this.#graceTimer === undefined) {
      this.#graceTimer = setTimeout(() => {
        this.#graceTimer = undefined;
        this.judge();
      }, this.#graceMs).unref();
    }
    this.#value = condition;
    this.emit('judged', { condition });
  }

  /** Judges at once what is waiting for the short timer that gathers a turn's events. */
  settle(): void {
    if (this.#evaluateTimer === undefined) return;
    clearTimeout(this.#evaluateTimer);
    this.#evaluateTimer = undefined;
    this.judge();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#graceTimer);
    clearTimeout(this.#evaluateTimer);
  }
}

export interface NodeConditionOptions {
  api: Pick<KubernetesApi, 'patchNodeStatus'>;
  nodeName: string;
  /** What the condition says, judged from the guard it follows. */
  health: VtepHealth;
  heartbeatMs?: number;
  /** Wall clock in ms (tests). */
  now?: () => number;
}

export interface NodeConditionEvents {
  /** The condition was written (a change, or a heartbeat). */
  written: [{ condition: NodeConditionValue; transition: boolean }];
  /** A write failed; it is tried again with the next judgement or heartbeat. */
  failed: [{ condition: NodeConditionValue; error: string }];
}

function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Writes VtepHealth's judgement to the Node, under both condition types, as it changes. */
export class NodeConditionReporter extends EventEmitter<NodeConditionEvents> {
  readonly #api: Pick<KubernetesApi, 'patchNodeStatus'>;
  readonly #nodeName: string;
  readonly #health: VtepHealth;
  readonly #heartbeatMs: number;
  readonly #now: () => number;
  #written: NodeConditionValue | undefined;
  #transitionAt = 0;
  #writing: Promise<void> = Promise.resolve();
  #heartbeat: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #onJudged = (e: { condition: NodeConditionValue }): void => {
    this.#write(e.condition, false);
  };

  constructor(options: NodeConditionOptions) {
    super();
    this.#api = options.api;
    this.#nodeName = options.nodeName;
    this.#health = options.health;
    this.#heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
    this.#now = options.now ?? Date.now;
  }

  /** Writes the judgement there is, then every change and a heartbeat. */
  start(): void {
    this.#health.on('judged', this.#onJudged);
    this.#heartbeat = setInterval(() => {
      const value = this.#health.value;
      if (value) this.#write(value, true);
    }, this.#heartbeatMs).unref();
    const value = this.#health.value;
    if (value) this.#write(value, false);
  }

  /** Writes CONDITION if it is not what was written last (always, for a heartbeat). */
  #write(condition: NodeConditionValue, heartbeat: boolean): void {
    if (this.#closed) return;
    const previous = this.#written;
    const changed =
      previous?.status !== condition.status ||
      previous.reason !== condition.reason ||
      previous.message !== condition.message;
    if (!changed && !heartbeat) return;
    const now = this.#now();
    const transition = previous?.status !== condition.status;
    if (transition) this.#transitionAt = now;
    this.#written = condition;
    const times = {
      lastHeartbeatTime: rfc3339(now),
      lastTransitionTime: rfc3339(this.#transitionAt),
    };
    // Conditions merge by type: kubelet's and others' stay.
    const patch = {
      status: {
        conditions: [NODE_CONDITION_TYPE, LEGACY_NODE_CONDITION_TYPE].map((type) => ({
          type,
          ...condition,
          ...times,
        })),
      },
    };
    this.#writing = this.#writing.then(async () => {
      if (this.#closed) return;
      try {
        await this.#api.patchNodeStatus(this.#nodeName, patch);
        this.emit('written', { condition, transition });
      } catch (error) {
        // Not written: the next judgement or heartbeat writes whatever is true then.
        if (this.#written === condition) this.#written = undefined;
        this.emit('failed', {
          condition,
          error: error instanceof Error ? error.message : String(error),
        });
      }
    });
  }

  /** Judges what is pending now and resolves once the writes queued so far are done. */
  settled(): Promise<void> {
    this.#health.settle();
    return this.#writing;
  }

  close(): void {
    this.#closed = true;
    this.#health.off('judged', this.#onJudged);
    clearInterval(this.#heartbeat);
  }
}
