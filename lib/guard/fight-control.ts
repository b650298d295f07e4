/**
 * The guard's fight control: the FightTracker's decisions carried out for typed keys (a
 * device's MAC, one of its offload features), with the timers they need - a deferred
 * correction, the check that ends a contest - owned here beside the state they belong to,
 * so that forgetting a device forgets both.
 */
import type { CorrectionAllowance } from '../core/monitor';
import type { ContestedEvent, GuardCounters } from './events';
import { FightTracker, type FightDecision, type FightPolicy } from './fight-tracker';
import type { ManagedDevice } from './device';
import type { GuardClock, GuardEmit } from './seams';

/** What is being fought over: a device's MAC, or one of its offload features. */
export type FightKey =
  | { readonly what: 'mac'; readonly device: ManagedDevice }
  | { readonly what: 'offload'; readonly device: ManagedDevice; readonly feature: string };

/** The contested event's account of a key, as the part that owns the key words it. */
export type ContestDetail = Omit<ContestedEvent, 'device' | 'ifindex' | 'windowMs' | 'quietMs'>;

export interface FightActions {
  /** Correct now, or after a backoff (`deferred`), at time `at`. */
  correct(deferred: boolean, at: number): void;
  /** This rewrite made the key contested: how to report it. */
  contested(rewrites: number): ContestDetail;
}

export interface FightControlDeps {
  policy: Partial<FightPolicy>;
  clock: GuardClock;
  random?: (() => number) | undefined;
  counters: GuardCounters;
  emit: GuardEmit;
  /** Runs a timer's handler as the guard runs an event's (errors reported, not thrown). */
  run(handler: (at: number) => void): void;
}

interface KeyTimers {
  /** Cancels the pending deferred correction. */
  deferred?: () => void;
  /** Cancels the check that ends the contest. */
  resume?: () => void;
}

function keyName(key: FightKey): string {
  return key.what === 'mac' ? 'mac' : `offload ${key.feature}`;
}

export class FightController {
  readonly policy: FightPolicy;
  readonly #tracker: FightTracker;
  readonly #deps: FightControlDeps;
  /** Timers by device index, then key name; every key the tracker knows has an entry. */
  readonly #keys = new Map<number, Map<string, KeyTimers>>();

  constructor(deps: FightControlDeps) {
    this.#deps = deps;
    this.#tracker = new FightTracker(deps.policy, () => deps.clock.now(), deps.random);
    this.policy = this.#tracker.policy;
  }

  /** Records a rewrite of `key` seen at `at` (default: now) and says what to do about it. */
  record(key: FightKey, at?: number): FightDecision {
    this.#ensureTimers(key);
    return this.#tracker.recordRewrite(this.#id(key), at);
  }

  /** What would be corrected at once, as terms for the native layer (null: none now); see FightTracker.allowance. */
  allowance(key: FightKey, maxLimit: number): CorrectionAllowance | null {
    return this.#tracker.allowance(this.#id(key), maxLimit);
  }

  isContested(key: FightKey): boolean {
    return this.#tracker.isContested(this.#id(key));
  }

  /** A correction is pending, or the key is contested: a write now is not the guard's to make. */
  heldBack(key: FightKey): boolean {
    return this.#timers(key)?.deferred !== undefined || this.isContested(key);
  }

  /** Carries out a decision: correct now, later (one pending at a time), or stop and alert. */
  act(key: FightKey, decision: FightDecision, actions: FightActions): void {
    const { device } = key;
    switch (decision.action) {
      case 'correct':
        actions.correct(false, this.#deps.clock.now());
        return;
      case 'defer': {
        const timers = this.#ensureTimers(key);
        if (timers.deferred) return; // the pending correction answers this rewrite too
        this.#deps.emit('deferred', {
          device: device.name,
          ifindex: device.ifindex,
          what: key.what,
          ...(key.what === 'offload' ? { feature: key.feature } : {}),
          delayMs: decision.delayMs,
        });
        timers.deferred = this.#deps.clock.setTimeout(() => {
          delete timers.deferred;
          this.#deps.run((at) => {
            actions.correct(true, at);
          });
        }, decision.delayMs);
        return;
      }
      case 'contested':
        this.#deps.counters.contested += 1;
        this.cancelDeferred(key);
        this.#deps.emit('contested', {
          device: device.name,
          ifindex: device.ifindex,
          windowMs: this.policy.windowMs,
          quietMs: this.policy.quietMs,
          ...actions.contested(decision.rewrites),
        });
        this.#scheduleResume(key, actions);
        return;
      case 'observe':
        return;
    }
  }

  cancelDeferred(key: FightKey): void {
    const timers = this.#timers(key);
    timers?.deferred?.();
    if (timers) delete timers.deferred;
  }

  /** Cancels a device's timers, keeping what its keys have seen (it is going away). */
  cancelTimers(device: ManagedDevice): void {
    for (const timers of this.#keys.get(device.ifindex)?.values() ?? []) {
      timers.deferred?.();
      timers.resume?.();
      delete timers.deferred;
      delete timers.resume;
    }
  }

  /** Forgets a device: its timers cancelled, its keys' history gone. */
  release(device: ManagedDevice): void {
    this.cancelTimers(device);
    for (const name of this.#keys.get(device.ifindex)?.keys() ?? []) {
      this.#tracker.reset(`${device.ifindex}|${name}`);
    }
    this.#keys.delete(device.ifindex);
  }

  /** Ends a contested state once the key has been quiet long enough, then corrects once. */
  #scheduleResume(key: FightKey, actions: FightActions): void {
    const id = this.#id(key);
    const timers = this.#ensureTimers(key);
    timers.resume = this.#deps.clock.setTimeout(
      () => {
        delete timers.resume;
        this.#deps.run((at) => {
          if (this.#tracker.quietRemaining(id) > 0) {
            this.#scheduleResume(key, actions);
            return;
          }
          this.#tracker.reset(id);
          const { device } = key;
          this.#deps.emit('resumed', {
            device: device.name,
            ifindex: device.ifindex,
            what: key.what,
            ...(key.what === 'offload' ? { feature: key.feature } : {}),
          });
          actions.correct(false, at);
        });
      },
      Math.max(this.#tracker.quietRemaining(id), 1),
    );
  }

  #id(key: FightKey): string {
    return `${key.device.ifindex}|${keyName(key)}`;
  }

  #timers(key: FightKey): KeyTimers | undefined {
    return this.#keys.get(key.device.ifindex)?.get(keyName(key));
  }

  #ensureTimers(key: FightKey): KeyTimers {
    let device = this.#keys.get(key.device.ifindex);
    if (!device) {
      device = new Map();
      this.#keys.set(key.device.ifindex, device);
    }
    let timers = device.get(keyName(key));
    if (!timers) {
      timers = {};
      device.set(keyName(key), timers);
    }
    return timers;
  }
}
