/**
 * Offload enforcement: the policy's features read on every device the guard takes on and
 * after every features notification or re-dump, and set where they differ. A feature
 * flipped back after the guard set it is a rewrite, answered through fight control as a
 * MAC rewrite is, under a key of its own.
 */
import { systemError } from '../core/errors';
import { recordOffloads } from '../core/journal';
import type { FeatureSetResult } from '../core/types';
import type { GuardContext } from './context';
import type { GuardPorts } from './ports';
import type { GuardConfig } from './config';
import type { ManagedDevice } from './device';
import type { OffloadEvent } from './events';
import type { FightKey } from './fight-control';

export type OffloadReason = OffloadEvent['reason'];

function offloadKey(device: ManagedDevice, feature: string): FightKey {
  return { what: 'offload', device, feature };
}

/** What offload enforcement may touch: it reads and writes a device's offload features only. */
export type OffloadEnforcementContext = Pick<
  GuardContext,
  'counters' | 'emit' | 'fight' | 'devices' | 'fail'
> & {
  readonly config: Pick<GuardConfig, 'dryRun' | 'offload' | 'stateDir' | 'netns'>;
  readonly ports: Pick<GuardPorts, 'getFeatures' | 'setFeatures'>;
};

export class OffloadEnforcement {
  readonly #ctx: OffloadEnforcementContext;

  constructor(context: OffloadEnforcementContext) {
    this.#ctx = context;
  }

  /**
   * Reads one feature's state into the device (the device's offload states are this part's to
   * keep); null when it is unknown or the device vanished.
   */
  readFeature(device: ManagedDevice, feature: string): boolean | null {
    const features = this.#ctx.devices.attempt(device, () =>
      this.#ctx.ports.getFeatures(device.name),
    );
    const state = features?.find((f) => f.name === feature)?.active ?? null;
    device.offloads[feature] = state;
    return state;
  }

  /** Reads the policy features' state into the device; null when the device vanished. */
  read(device: ManagedDevice): Map<string, boolean> | null {
    const { counters, devices, ports } = this.#ctx;
    const policy = this.policyOf(device);
    if (!policy) return new Map();
    counters.offloadChecks += 1;
    const active = devices.attempt(
      device,
      () => new Map(ports.getFeatures(device.name).map((f) => [f.name, f.active])),
    );
    if (!active) return null;
    for (const name of Object.keys(policy)) device.offloads[name] = active.get(name) ?? null;
    return active;
  }

  /** Brings the device's features to the policy; `drift`: a features notification. */
  check(device: ManagedDevice, reason: OffloadReason): void {
    const { config, counters, fight } = this.#ctx;
    const policy = this.policyOf(device);
    if (!policy || device.vanishing) return;
    const before = { ...device.offloads };
    const active = this.read(device);
    if (!active) return;
    const unknown = Object.keys(policy).filter((name) => !active.has(name));
    if (unknown.length > 0 && reason !== 'drift') {
      this.#ctx.fail(
        systemError('ENODATA', `${device.name} has no feature ${unknown.join(', ')}`, {
          interface: device.name,
        }),
      );
    }
    const drifted: Record<string, boolean> = {};
    for (const [name, wanted] of Object.entries(policy)) {
      const key = offloadKey(device, name);
      if (!active.has(name) || active.get(name) === wanted) {
        if (active.has(name)) fight.cancelDeferred(key);
        continue;
      }
      if (reason !== 'drift') {
        if (!fight.heldBack(key)) drifted[name] = wanted;
        continue;
      }
      // A rewrite is a flip away from the policy; a features event while the
      // feature is still off-policy (a correction pending) is not another one.
      if (before[name] !== wanted) continue;
      counters.offloadDrifts += 1;
      if (config.dryRun) {
        drifted[name] = wanted;
        continue;
      }
      fight.act(key, fight.record(key), {
        correct: () => {
          this.apply(device, { [name]: wanted }, 'drift');
        },
        contested: (rewrites) => ({
          what: 'offload',
          feature: name,
          expected: wanted ? 'on' : 'off',
          observed: wanted ? 'off' : 'on',
          rewrites,
          detail: `${name} on ${device.name} turned back ${rewrites} times within ${fight.policy.windowMs} ms: something (a udev RUN rule, another agent) re-applies it; remove it or align the policy`,
        }),
      });
    }
    if (Object.keys(drifted).length === 0) return;
    if (config.dryRun) {
      this.#report(device, reason, {
        interface: device.name,
        written: false,
        legacy: false,
        requested: drifted,
        active: Object.fromEntries(
          Object.keys(drifted).map((name) => [name, active.get(name) ?? false]),
        ),
        sideEffects: [],
        notApplied: Object.keys(drifted),
      });
      return;
    }
    this.apply(device, drifted, reason);
  }

  /** The configured policy, or what `--offload auto` measured this device needs. */
  policyOf(device: ManagedDevice): Readonly<Record<string, boolean>> | null {
    return this.#ctx.config.offload ?? device.offloadPolicy;
  }

  /** Sets features on the device (re-read by index first) and reports it as an `offload` event. */
  apply(device: ManagedDevice, wanted: Record<string, boolean>, reason: OffloadReason): void {
    const { counters, devices, ports } = this.#ctx;
    if (!devices.isWritable(device)) return;
    devices.attempt(device, () => {
      if (!devices.writeTarget(device)) return;
      const result = ports.setFeatures(device.name, wanted);
      if (result.written) {
        counters.writes += 1;
        counters.offloadApplications += 1;
        this.#journal(device, result);
      }
      for (const [name, state] of Object.entries(result.active)) device.offloads[name] = state;
      this.#report(device, reason, result);
    });
  }

  /** Notes what the write changed, with the states before, for `flannel-guard undo`. */
  #journal(device: ManagedDevice, result: FeatureSetResult): void {
    const { stateDir, netns } = this.#ctx.config;
    if (stateDir === undefined) return;
    const before: Record<string, boolean> = {};
    for (const [name, active] of Object.entries(result.active)) {
      const previous = device.offloads[name];
      if (typeof previous === 'boolean' && previous !== active) before[name] = previous;
    }
    for (const change of result.sideEffects) before[change.name] = change.before;
    if (Object.keys(before).length === 0) return;
    try {
      recordOffloads(stateDir, netns?.label ?? null, device.name, before);
    } catch (error) {
      this.#ctx.fail(error);
    }
  }

  #report(device: ManagedDevice, reason: OffloadReason, result: FeatureSetResult): void {
    this.#ctx.emit('offload', {
      ...result,
      device: device.name,
      ifindex: device.ifindex,
      reason,
      dryRun: this.#ctx.config.dryRun,
    });
  }
}
