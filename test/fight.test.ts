/**
 * FightTracker alone: the bookkeeping behind the guard's answer to a value
 * that keeps being rewritten (F1, F2, F5, F7), over an injected clock and an
 * injected random source.
 */
import assert from 'node:assert/strict';

import { backoffDelay, DEFAULT_JITTER } from '../lib/core/backoff';
import {
  DEFAULT_FIGHT_POLICY,
  FightTracker,
  type FightDecision,
  type FightPolicy,
} from '../lib/guard/fight-tracker';
import { prng } from './support/prng';

/** A tracker over a hand-moved clock; `random` answers from `randoms` (0.5 when empty). */
function tracker(
  policy: Partial<FightPolicy> = {},
  randoms: number[] = [],
): { fight: FightTracker; clock: { now: number }; randomCalls: () => number } {
  const clock = { now: 10_000 };
  let calls = 0;
  const fight = new FightTracker(
    policy,
    () => clock.now,
    () => {
      calls += 1;
      return randoms.shift() ?? 0.5;
    },
  );
  return { fight, clock, randomCalls: () => calls };
}

/** No jitter, one rewrite corrected at once, then 1 s, 2 s, 4 s ...; contested at the 5th. */
const PLAIN: FightPolicy = {
  maxRewrites: 5,
  windowMs: 60_000,
  burst: 1,
  backoffInitialMs: 1_000,
  backoffMaxMs: 300_000,
  jitter: 0,
  quietMs: 300_000,
};

describe('FightTracker', function () {
  it('merges a partial policy over the documented defaults', function () {
    assert.deepEqual(DEFAULT_FIGHT_POLICY, {
      maxRewrites: 5,
      windowMs: 60_000,
      burst: 2,
      backoffInitialMs: 1_000,
      backoffMaxMs: 300_000,
      jitter: 0.2,
      quietMs: 300_000,
    });
    const { fight } = tracker({ maxRewrites: 9, jitter: 0 });
    assert.deepEqual(fight.policy, { ...DEFAULT_FIGHT_POLICY, maxRewrites: 9, jitter: 0 });
    assert.deepEqual(new FightTracker(undefined, () => 0).policy, DEFAULT_FIGHT_POLICY);
  });

  it('answers correct, defer (growing), contested once, then observe', function () {
    const { fight, clock } = tracker(PLAIN);
    const decisions: FightDecision[] = [];
    for (let i = 0; i < 7; i += 1) {
      decisions.push(fight.recordRewrite('2|mac'));
      clock.now += 100;
    }
    assert.deepEqual(decisions, [
      { action: 'correct' },
      { action: 'defer', delayMs: 1_000 },
      { action: 'defer', delayMs: 2_000 },
      { action: 'defer', delayMs: 4_000 },
      { action: 'contested', rewrites: 5 },
      { action: 'observe' },
      { action: 'observe' },
    ]);
    assert.equal(fight.isContested('2|mac'), true);
  });

  it('corrects the first `burst` rewrites at once with the default policy', function () {
    const { fight, clock } = tracker({ jitter: 0 });
    const actions: (string | number)[] = [];
    for (let i = 0; i < DEFAULT_FIGHT_POLICY.maxRewrites + 1; i += 1) {
      const decision = fight.recordRewrite('k');
      actions.push(decision.action === 'defer' ? decision.delayMs : decision.action);
      clock.now += 10;
    }
    assert.deepEqual(actions, ['correct', 'correct', 1_000, 2_000, 'contested', 'observe']);
  });

  it('correctionsNow(k) is the count of rewrites in a row, from now, that record as correct (seeded)', function () {
    const random = prng(0xf16e7);
    for (let round = 0; round < 300; round += 1) {
      const policy = {
        maxRewrites: 1 + Math.floor(random() * 6),
        burst: Math.floor(random() * 5),
        windowMs: 10 + Math.floor(random() * 1000),
        quietMs: 10 + Math.floor(random() * 1000),
        jitter: 0,
      };
      const { fight, clock } = tracker(policy);
      // A random history: rewrites at random gaps, some past the window or the quiet time.
      const history = Math.floor(random() * 8);
      for (let i = 0; i < history; i += 1) {
        fight.recordRewrite('k');
        clock.now += Math.floor(random() * 1500);
      }
      const what = `round ${round}: ${JSON.stringify(policy)} after ${history} rewrites`;
      const n = fight.correctionsNow('k');
      assert.equal(fight.wouldCorrectNow('k'), n > 0, what);
      const actions = Array.from({ length: n + 1 }, () => fight.recordRewrite('k').action);
      assert.deepEqual(actions.slice(0, n), Array<string>(n).fill('correct'), what);
      assert.notEqual(actions[n], 'correct', `${what}: one more is not corrected at once`);
    }
  });

  it('allowance(k): its terms, carried out over time as the native layer does, answer exactly the rewrites recordRewrite(k, at) would correct, up to the first it refuses (seeded)', function () {
    const random = prng(0xa110);
    for (let round = 0; round < 300; round += 1) {
      const policy = {
        maxRewrites: 2 + Math.floor(random() * 6),
        burst: 1 + Math.floor(random() * 5),
        windowMs: 10 + Math.floor(random() * 500),
        jitter: 0,
      };
      const { fight, clock } = tracker(policy);
      for (let i = Math.floor(random() * 4); i > 0; i -= 1) {
        fight.recordRewrite('k');
        clock.now += Math.floor(random() * 300);
      }
      const what = `round ${round}: ${JSON.stringify(policy)}`;
      const terms = fight.allowance('k', 16);
      assert.equal(terms === null, fight.correctionsNow('k') === 0, what);
      if (!terms) continue;
      assert.ok(terms.recent.length < terms.limit, what);
      // native/correction_allowance.cc's rule: answered while fewer than `limit` in the window.
      const answered = [...terms.recent];
      let at = clock.now;
      for (let step = 0; step < 12; step += 1) {
        at += Math.floor(random() * policy.windowMs * 0.6);
        const windowMs = terms.windowMs;
        const now = at;
        const inWindow: number = answered.filter((t) => now - t < windowMs).length;
        const native: boolean = inWindow < terms.limit;
        const decision = fight.recordRewrite('k', at).action;
        assert.equal(native, decision === 'correct', `${what}: step ${step} at ${at}`);
        if (!native) break;
        answered.push(at);
      }
    }
  });

  it('recordRewrite(k, at) counts a rewrite at its own time: a report that was held does not bunch rewrites together', function () {
    const { fight, clock } = tracker({ ...PLAIN, burst: 2, windowMs: 100 });
    // Three rewrites 60 ms apart, recorded together 200 ms later.
    clock.now += 200;
    const at = clock.now - 200;
    assert.deepEqual(
      [at, at + 60, at + 120].map((t) => fight.recordRewrite('k', t).action),
      ['correct', 'correct', 'correct'],
    );
    assert.deepEqual(fight.recentRewrites('k'), [at + 120]);
  });

  it('keeps keys apart: a fight on one key changes nothing for another', function () {
    const { fight } = tracker(PLAIN);
    for (let i = 0; i < PLAIN.maxRewrites; i += 1) fight.recordRewrite('2|mac');
    assert.equal(fight.isContested('2|mac'), true);
    assert.deepEqual(fight.recordRewrite('2|offload|tx-checksum-ip-generic'), {
      action: 'correct',
    });
    assert.deepEqual(fight.recordRewrite('3|mac'), { action: 'correct' });
    assert.equal(fight.isContested('3|mac'), false);
    assert.equal(fight.isContested('never-seen'), false);
  });

  it('forgets rewrites older than windowMs: a slow writer is always corrected at once', function () {
    const { fight, clock } = tracker(PLAIN);
    for (let i = 0; i < 20; i += 1) {
      assert.deepEqual(fight.recordRewrite('k'), { action: 'correct' }, `rewrite ${i + 1}`);
      clock.now += PLAIN.windowMs; // exactly windowMs later: outside the window
    }
    assert.equal(fight.isContested('k'), false);
  });

  it('counts only the rewrites inside the sliding window', function () {
    const { fight, clock } = tracker(PLAIN);
    fight.recordRewrite('k'); // t0
    clock.now += 30_000;
    assert.deepEqual(fight.recordRewrite('k'), { action: 'defer', delayMs: 1_000 }); // t0+30 s: 2
    clock.now += 29_999;
    assert.deepEqual(fight.recordRewrite('k'), { action: 'defer', delayMs: 2_000 }); // 3 in window
    clock.now += 1; // t0 + 60 s: the first one leaves the window
    assert.deepEqual(fight.recordRewrite('k'), { action: 'defer', delayMs: 2_000 }); // still 3
    clock.now += 60_000; // all gone
    assert.deepEqual(fight.recordRewrite('k'), { action: 'correct' });
  });

  it('goes contested only with maxRewrites inside one window', function () {
    const { fight, clock } = tracker(PLAIN);
    for (let i = 0; i < 4; i += 1) {
      fight.recordRewrite('k');
      clock.now += 15_000; // 4 rewrites at 0, 15, 30, 45 s
    }
    // At 60 s the one at 0 s has left the window: 4 inside, not 5.
    assert.equal(fight.recordRewrite('k').action, 'defer');
    assert.equal(fight.isContested('k'), false);
    clock.now += 1;
    assert.deepEqual(fight.recordRewrite('k'), { action: 'contested', rewrites: 5 });
  });

  it('doubles the delay up to backoffMaxMs', function () {
    const { fight, clock } = tracker({
      ...PLAIN,
      maxRewrites: 100,
      backoffInitialMs: 1_000,
      backoffMaxMs: 5_000,
    });
    const delays: number[] = [];
    for (let i = 0; i < 8; i += 1) {
      const decision = fight.recordRewrite('k');
      if (decision.action === 'defer') delays.push(decision.delayMs);
      clock.now += 1;
    }
    assert.deepEqual(delays, [1_000, 2_000, 4_000, 5_000, 5_000, 5_000, 5_000]);
  });

  it('spreads each delay by ±jitter from the injected random source, and only for defers', function () {
    const randoms = [0, 0.5, 0.999_999, 0.25];
    const { fight, clock, randomCalls } = tracker({ ...PLAIN, jitter: 0.2 }, randoms);
    const delays: number[] = [];
    for (let i = 0; i < 5; i += 1) {
      const decision = fight.recordRewrite('k');
      if (decision.action === 'defer') delays.push(decision.delayMs);
      clock.now += 1;
    }
    // Bases 1 s, 2 s, 4 s with random 0 (-20 %), 0.5 (±0), ~1 (+20 %); then contested.
    assert.deepEqual(delays, [800, 2_000, 4_800]);
    assert.equal(randomCalls(), 3, 'random is drawn for defers only');
    fight.recordRewrite('k'); // observe
    assert.equal(randomCalls(), 3);
  });

  it('keeps jittered delays within base·(1 ± jitter) and never negative', function () {
    for (const jitter of [0, 0.2, 0.5]) {
      for (let r = 0; r < 1; r += 0.05) {
        const { fight } = tracker({ ...PLAIN, jitter }, [r]);
        fight.recordRewrite('k');
        const decision = fight.recordRewrite('k');
        assert.equal(decision.action, 'defer');
        if (decision.action !== 'defer') continue;
        assert.ok(decision.delayMs >= Math.floor(1_000 * (1 - jitter)), `${jitter} ${r}`);
        assert.ok(decision.delayMs <= Math.ceil(1_000 * (1 + jitter)), `${jitter} ${r}`);
      }
    }
    // A spread of 100 % or more could make a delay zero or negative: refused.
    assert.throws(() => tracker({ ...PLAIN, jitter: 2 }, [0]), /fight\.jitter 2: expected/);
    assert.throws(() => tracker({ ...PLAIN, jitter: 1 }, [0]), /fight\.jitter 1: expected/);
  });

  it('applies the jitter after the cap: a capped delay stays within backoffMaxMs·(1 ± jitter)', function () {
    const { fight } = tracker(
      { ...PLAIN, maxRewrites: 100, backoffMaxMs: 3_000, jitter: 0.2 },
      [0.5, 0.5, 0.999_999],
    );
    fight.recordRewrite('k');
    fight.recordRewrite('k'); // 1 s
    fight.recordRewrite('k'); // 2 s
    const capped = fight.recordRewrite('k'); // 4 s capped to 3 s, then +20 %
    assert.deepEqual(capped, { action: 'defer', delayMs: 3_600 });
  });

  it('reports the quiet time a contested key still needs; observed rewrites push it back', function () {
    const { fight, clock } = tracker(PLAIN);
    assert.equal(fight.quietRemaining('k'), 0, 'unknown key');
    fight.recordRewrite('k');
    assert.equal(fight.quietRemaining('k'), 0, 'not contested');
    for (let i = 1; i < PLAIN.maxRewrites; i += 1) fight.recordRewrite('k');
    assert.equal(fight.isContested('k'), true);
    assert.equal(fight.quietRemaining('k'), PLAIN.quietMs);

    clock.now += 100_000;
    assert.equal(fight.quietRemaining('k'), PLAIN.quietMs - 100_000);
    assert.deepEqual(fight.recordRewrite('k'), { action: 'observe' });
    assert.equal(fight.quietRemaining('k'), PLAIN.quietMs);

    clock.now += PLAIN.quietMs - 1;
    assert.equal(fight.quietRemaining('k'), 1);
    clock.now += 1;
    assert.equal(fight.quietRemaining('k'), 0);
    clock.now += DEFAULT_FIGHT_POLICY.quietMs;
    assert.equal(fight.quietRemaining('k'), 0, 'never negative');
    // Quiet long enough is not the same as resumed: that takes a reset.
    assert.equal(fight.isContested('k'), true);
    assert.deepEqual(fight.recordRewrite('k'), { action: 'observe' });
  });

  it('reset forgets one key: the next rewrite is corrected at once with a fresh backoff', function () {
    const { fight } = tracker(PLAIN);
    for (let i = 0; i < PLAIN.maxRewrites; i += 1) fight.recordRewrite('k');
    fight.recordRewrite('other');
    fight.recordRewrite('other');
    fight.reset('k');
    assert.equal(fight.isContested('k'), false);
    assert.equal(fight.quietRemaining('k'), 0);
    assert.deepEqual(fight.recordRewrite('k'), { action: 'correct' });
    assert.deepEqual(fight.recordRewrite('k'), { action: 'defer', delayMs: 1_000 });
    assert.deepEqual(fight.recordRewrite('other'), { action: 'defer', delayMs: 2_000 });
    fight.reset('never-seen'); // harmless
  });
});

describe('backoffDelay (core/backoff.ts): the one backoff of the source, the recorder and fight control', function () {
  const policy = { initialMs: 100, maxMs: 1_000, jitter: DEFAULT_JITTER };

  it('doubles from the first delay, is capped before its jitter, and spreads ±jitter', function () {
    const at = (random: number): number[] =>
      [1, 2, 3, 4, 5, 6].map((attempt) => backoffDelay(policy, attempt, () => random));
    assert.deepEqual(at(0.5), [100, 200, 400, 800, 1_000, 1_000]);
    assert.deepEqual(at(0), [80, 160, 320, 640, 800, 800]);
    assert.deepEqual(at(1), [120, 240, 480, 960, 1_200, 1_200]);
  });

  it('grows with every attempt below the cap, whatever the draws (jitter below 1/3)', function () {
    const random = prng(0xbac0);
    for (let run = 0; run < 200; run += 1) {
      const jitter = random() / 3.01;
      let previous = 0;
      for (let attempt = 1; attempt <= 8; attempt += 1) {
        const delay = backoffDelay({ initialMs: 10, maxMs: 10_000, jitter }, attempt, random);
        assert.ok(delay > previous, `attempt ${attempt}: ${delay} after ${previous}`);
        previous = delay;
      }
    }
  });
});
