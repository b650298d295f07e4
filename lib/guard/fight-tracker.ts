/**
 * Fight control: how the guard answers a value that keeps being rewritten.
 * The first `burst` rewrites within the window are corrected at once (udev's
 * one rewrite at creation plus a stray one is not a fight); further ones wait
 * an exponentially growing, jittered delay; after `maxRewrites` within
 * `windowMs` the key is contested: the guard stops writing, alerts once, and
 * resumes only after `quietMs` without a rewrite. Pure bookkeeping over an
 * injected clock, so it is unit-testable.
 */

import { invalidArgument } from '../core/errors';
import type { CorrectionAllowance } from '../core/monitor';
import { backoffDelay, DEFAULT_JITTER } from '../core/backoff';
import { rejectUnknownOptions } from '../core/options';
import { RANGES, integerInRange } from '../core/validate';

export interface FightPolicy {
  /** Rewrites within `windowMs` after which the guard stops correcting. */
  maxRewrites: number;
  windowMs: number;
  /** Rewrites within `windowMs` corrected without delay. */
  burst: number;
  /** Delay before the first correction past the burst; doubles for each further one. */
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** Fraction of random spread applied to each delay (0.2: ±20 %). */
  jitter: number;
  /** A contested key resumes after this long without a rewrite. */
  quietMs: number;
}

export const DEFAULT_FIGHT_POLICY: FightPolicy = {
  maxRewrites: 5,
  windowMs: 60_000,
  burst: 2,
  backoffInitialMs: 1_000,
  backoffMaxMs: 300_000,
  jitter: DEFAULT_JITTER,
  quietMs: 300_000,
};

export type FightDecision =
  /** Correct now. */
  | { action: 'correct' }
  /** Correct after `delayMs`, if the value is still wrong then. */
  | { action: 'defer'; delayMs: number }
  /** This rewrite made the key contested: stop correcting and alert. */
  | { action: 'contested'; rewrites: number }
  /** Already contested: keep observing. */
  | { action: 'observe' };

interface FightState {
  /** Times of the rewrites inside the current window. */
  rewrites: number[];
  contestedAt: number | null;
  lastRewriteAt: number;
}

/** A complete fight policy: `policy` over the defaults, every value checked (EINVAL). */
export function fightPolicy(policy: Partial<FightPolicy> = {}): FightPolicy {
  rejectUnknownOptions(policy, Object.keys(DEFAULT_FIGHT_POLICY), 'fight policy', 'fight.');
  const complete = { ...DEFAULT_FIGHT_POLICY, ...policy };
  const { count, timerMs } = RANGES;
  integerInRange(complete.maxRewrites, count, 'fight.maxRewrites');
  integerInRange(complete.burst, { ...count, min: 0 }, 'fight.burst');
  for (const key of ['windowMs', 'backoffInitialMs', 'backoffMaxMs', 'quietMs'] as const) {
    integerInRange(complete[key], timerMs, `fight.${key}`);
  }
  if (!(complete.jitter >= 0 && complete.jitter < 1)) {
    throw invalidArgument(`fight.jitter ${complete.jitter}: expected a fraction from 0 to below 1`);
  }
  return complete;
}

export class FightTracker {
  readonly policy: FightPolicy;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #states = new Map<string, FightState>();

  constructor(
    policy: Partial<FightPolicy> = {},
    now: () => number,
    random: () => number = Math.random,
  ) {
    this.policy = fightPolicy(policy);
    this.#now = now;
    this.#random = random;
  }

  /**
   * Records a rewrite of `key` seen at `now` (default: the clock's now; a rewrite whose report
   * was held counts at its own time) and says what to do about it.
   */
  recordRewrite(key: string, now: number = this.#now()): FightDecision {
    const state = this.#states.get(key) ?? { rewrites: [], contestedAt: null, lastRewriteAt: now };
    this.#states.set(key, state);
    state.lastRewriteAt = now;
    if (state.contestedAt !== null) return { action: 'observe' };

    state.rewrites = state.rewrites.filter((at) => now - at < this.policy.windowMs);
    state.rewrites.push(now);
    const count = state.rewrites.length;
    if (count >= this.policy.maxRewrites) {
      state.contestedAt = now;
      return { action: 'contested', rewrites: count };
    }
    if (count <= this.policy.burst) return { action: 'correct' };
    const { backoffInitialMs: initialMs, backoffMaxMs: maxMs, jitter } = this.policy;
    const delayMs = backoffDelay(
      { initialMs, maxMs, jitter },
      count - this.policy.burst,
      this.#random,
    );
    return { action: 'defer', delayMs };
  }

  /** Whether a rewrite of `key` now would be corrected at once (read-only). */
  wouldCorrectNow(key: string): boolean {
    return this.correctionsNow(key) > 0;
  }

  /**
   * How many rewrites in a row, from now, would each be corrected at once:
   * what is left of the burst, and short of the contest (0 when contested).
   */
  correctionsNow(key: string): number {
    if (this.isContested(key)) return 0;
    return Math.max(0, this.#atOnce - this.recentRewrites(key).length);
  }

  /**
   * The rule of correctionsNow as terms the native layer carries out over time (see
   * CorrectionAllowance): at most `limit` corrected at once within any `windowMs`, counting
   * the rewrites at `recent`. Null when none would be now. `maxLimit` caps the limit (the
   * native bound), which only ever refuses more: the refused ones come back here.
   */
  allowance(key: string, maxLimit: number): CorrectionAllowance | null {
    if (this.isContested(key)) return null;
    const recent = this.recentRewrites(key);
    if (recent.length >= this.#atOnce) return null;
    const limit = Math.min(this.#atOnce, maxLimit);
    return { limit, windowMs: this.policy.windowMs, recent: recent.slice(-limit) };
  }

  /** Rewrites corrected at once within one window: the burst, short of the contest. */
  get #atOnce(): number {
    return Math.min(this.policy.burst, this.policy.maxRewrites - 1);
  }

  /** The times of the key's rewrites inside the window, as of now, oldest first. */
  recentRewrites(key: string): number[] {
    const now = this.#now();
    return (this.#states.get(key)?.rewrites ?? []).filter((at) => now - at < this.policy.windowMs);
  }

  isContested(key: string): boolean {
    return (this.#states.get(key)?.contestedAt ?? null) !== null;
  }

  /** Milliseconds until a contested key has been quiet long enough (0: now). */
  quietRemaining(key: string): number {
    const state = this.#states.get(key);
    if (!state || state.contestedAt === null) return 0;
    return Math.max(0, state.lastRewriteAt + this.policy.quietMs - this.#now());
  }

  /** Forgets a key: after a resume, or when its device is gone. */
  reset(key: string): void {
    this.#states.delete(key);
  }
}
