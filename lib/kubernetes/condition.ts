/**
 * An opt-in Node condition for what persists, node-problem-detector's convention (Events say
 * what happened; a condition says what is still true): `FlannelVtepHealthy` is False while a
 * managed device stays drifted (its MAC off the desired one for longer than a correction takes)
 * or is contested (another agent keeps rewriting its MAC or offload), or its TX checksum offload
 * was measured broken (`--offload auto`) and is still on; True otherwise. Never
 * `NetworkUnavailable`, which flannel owns. Written with a strategic merge patch of the Node's
 * status (conditions merge by type, so kubelet's and others' stay), on every change of its
 * status, reason or message and as a heartbeat; a failed write is tried again on the next.
 */
import { EventEmitter } from 'node:events';

import type { DeviceStatus, FlannelGuard } from '../guard';
import type { KubernetesApi } from './client';

export const NODE_CONDITION_TYPE = 'FlannelVtepHealthy';

/** How long a device may be off its desired MAC before that is a state, not a correction. */
export const DEFAULT_DRIFT_GRACE_MS = 5_000;
/** The guard's events within this long are judged together: none pays for it on its own path. */
const EVALUATE_AFTER_MS = 100;
/** node-problem-detector's heartbeat of an unchanged condition. */
export const DEFAULT_HEARTBEAT_MS = 5 * 60_000;

export interface NodeConditionValue {
  status: 'True' | 'False';
  reason: 'VtepHealthy' | 'VtepMacDrifted' | 'VtepContested' | 'VtepOffloadBroken';
  message: string;
}

/** The condition for these devices; `persistentlyDrifted` says which drift has lasted. */
export function vtepCondition(
  devices: readonly DeviceStatus[],
  persistentlyDrifted: (device: DeviceStatus) => boolean,
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

export interface NodeConditionOptions {
  api: Pick<KubernetesApi, 'patchNodeStatus'>;
  nodeName: string;
  driftGraceMs?: number;
  heartbeatMs?: number;
  /** Wall clock in ms (tests). */
  now?: () => number;
}

export interface NodeConditionEvents {
  /** The condition was written (a change, or a heartbeat). */
  written: [{ condition: NodeConditionValue; transition: boolean }];
  /** A write failed; it is tried again with the next change or heartbeat. */
  failed: [{ condition: NodeConditionValue; error: string }];
}

function rfc3339(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export class NodeConditionReporter extends EventEmitter<NodeConditionEvents> {
  readonly #api: Pick<KubernetesApi, 'patchNodeStatus'>;
  readonly #nodeName: string;
  readonly #graceMs: number;
  readonly #heartbeatMs: number;
  readonly #now: () => number;
  readonly #driftSince = new Map<string, number>();
  #written: NodeConditionValue | undefined;
  #transitionAt = 0;
  #writing: Promise<void> = Promise.resolve();
  #heartbeat: NodeJS.Timeout | undefined;
  #graceTimer: NodeJS.Timeout | undefined;
  #evaluateTimer: NodeJS.Timeout | undefined;
  #guard: FlannelGuard | undefined;
  #closed = false;

  constructor(options: NodeConditionOptions) {
    super();
    this.#api = options.api;
    this.#nodeName = options.nodeName;
    this.#graceMs = options.driftGraceMs ?? DEFAULT_DRIFT_GRACE_MS;
    this.#heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
    this.#now = options.now ?? Date.now;
  }

  /** Follows the guard's events; returns a function that stops following. */
  attach(guard: FlannelGuard): () => void {
    this.#guard = guard;
    // A correction's events come in the turn that corrects: the status is read a little later,
    // once for all of them, not by each event's listener.
    const update = (): void => {
      this.#evaluateTimer ??= setTimeout(() => {
        this.#evaluateTimer = undefined;
        this.update();
      }, EVALUATE_AFTER_MS).unref();
    };
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
    for (const name of names) guard.on(name, update);
    this.#heartbeat = setInterval(() => {
      this.update(true);
    }, this.#heartbeatMs).unref();
    this.update();
    return () => {
      for (const name of names) guard.off(name, update);
    };
  }

  /** Re-evaluates the condition and writes it if it changed (or always, for a heartbeat). */
  update(heartbeat = false): void {
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
    const condition = vtepCondition(devices, (d) => {
      const since = this.#driftSince.get(d.name);
      return since !== undefined && now - since >= this.#graceMs;
    });
    // A drift not yet old enough to count: look again once it is.
    if (this.#driftSince.size > 0 && this.#graceTimer === undefined) {
      this.#graceTimer = setTimeout(() => {
        this.#graceTimer = undefined;
        this.update();
      }, this.#graceMs).unref();
    }
    const previous = this.#written;
    const changed =
      previous?.status !== condition.status ||
      previous.reason !== condition.reason ||
      previous.message !== condition.message;
    if (!changed && !heartbeat) return;
    const transition = previous?.status !== condition.status;
    if (transition) this.#transitionAt = now;
    this.#written = condition;
    const patch = {
      status: {
        conditions: [
          {
            type: NODE_CONDITION_TYPE,
            ...condition,
            lastHeartbeatTime: rfc3339(now),
            lastTransitionTime: rfc3339(this.#transitionAt),
          },
        ],
      },
    };
    this.#writing = this.#writing.then(async () => {
      if (this.#closed) return;
      try {
        await this.#api.patchNodeStatus(this.#nodeName, patch);
        this.emit('written', { condition, transition });
      } catch (error) {
        // Not written: the next change or heartbeat writes whatever is true then.
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
    if (this.#evaluateTimer !== undefined) {
      clearTimeout(this.#evaluateTimer);
      this.#evaluateTimer = undefined;
      this.update();
    }
    return this.#writing;
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#heartbeat);
    clearTimeout(this.#graceTimer);
    clearTimeout(this.#evaluateTimer);
  }
}
