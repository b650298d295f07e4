/**
 * The product's one backoff: a delay that doubles with each attempt up to a cap, spread by a
 * jitter drawn from an injected random source (tests pass their own). The annotation source's
 * reconnects, the Event recorder's retries and fight control's deferred corrections all use it;
 * each resets by starting again from attempt 1 (a healthy watch, a new Event, a quiet window).
 */
export interface BackoffPolicy {
  /** The first delay (ms). */
  readonly initialMs: number;
  /** No delay grows past this before its jitter (ms). */
  readonly maxMs: number;
  /**
   * Fraction of random spread around each delay (0.2: ±20 %). Below 1/3, each delay is
   * longer than the one before, whatever the draw.
   */
  readonly jitter: number;
}

/** The spread retries get unless told otherwise: enough that many clients do not retry in step. */
export const DEFAULT_JITTER = 0.2;

/** The delay before attempt `attempt` (1: the first retry), with `random()` in [0, 1). */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number): number {
  const base = Math.min(policy.maxMs, policy.initialMs * 2 ** Math.min(attempt - 1, 30));
  return Math.max(0, Math.round(base * (1 + policy.jitter * (2 * random() - 1))));
}
