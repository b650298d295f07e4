/**
 * FightController: the tracker's decisions carried out for typed keys, with the timers
 * (deferred correction, end of a contest) it owns, over a hand-moved clock. No root.
 */
import assert from 'node:assert/strict';

import { newManagedDevice } from '../lib/guard/device';
import { zeroCounters, type FlannelGuardEvents, type GuardCounters } from '../lib/guard/events';
import { FightController, type FightActions, type FightKey } from '../lib/guard/fight-control';
import type { FightPolicy } from '../lib/guard/fight-tracker';

const POLICY: FightPolicy = {
  maxRewrites: 3,
  windowMs: 60_000,
  burst: 1,
  backoffInitialMs: 1_000,
  backoffMaxMs: 300_000,
  jitter: 0,
  quietMs: 10_000,
};

/** A controller over a clock whose timers fire only when `advance` passes them. */
function controller(): {
  fight: FightController;
  advance: (ms: number) => void;
  pendingTimers: () => number;
  emitted: [string, unknown][];
  counters: GuardCounters;
} {
  let now = 0;
  let nextId = 0;
  const timers = new Map<number, { at: number; fire: () => void }>();
  const emitted: [string, unknown][] = [];
  const counters = zeroCounters();
  const fight = new FightController({
    policy: POLICY,
    clock: {
      now: () => now,
      setTimeout(fire, ms) {
        const id = (nextId += 1);
        timers.set(id, { at: now + ms, fire });
        return () => timers.delete(id);
      },
    },
    counters,
    emit: <K extends keyof FlannelGuardEvents>(name: K, ...args: FlannelGuardEvents[K]) => {
      emitted.push([name, args[0]]);
      return true;
    },
    run: (handler) => {
      handler(now);
    },
  });
  const advance = (ms: number): void => {
    const until = now + ms;
    // Bounded: a resume check may re-arm itself, but never more than a few times per call.
    for (let fired = 0; fired < 1_000; fired += 1) {
      const due = [...timers.entries()]
        .filter(([, timer]) => timer.at <= until)
        .sort(([, a], [, b]) => a.at - b.at)[0];
      if (!due) break;
      timers.delete(due[0]);
      now = due[1].at;
      due[1].fire();
    }
    now = until;
  };
  return { fight, advance, pendingTimers: () => timers.size, emitted, counters };
}

/** Actions that record each correction with its `deferred` flag and time. */
function recording(): { actions: FightActions; corrections: [boolean, number][] } {
  const corrections: [boolean, number][] = [];
  return {
    corrections,
    actions: {
      correct: (deferred, at) => corrections.push([deferred, at]),
      contested: (rewrites) => ({
        what: 'mac',
        expected: 'e',
        observed: 'o',
        rewrites,
        detail: 'test',
      }),
    },
  };
}

describe('FightController', function () {
  it('corrects at once, then once after the backoff however often the key is rewritten meanwhile', function () {
    const { fight, advance, pendingTimers } = controller();
    const key: FightKey = { what: 'mac', device: newManagedDevice(2, 'flannel.1') };
    const { actions, corrections } = recording();
    fight.act(key, fight.record(key), actions);
    assert.deepEqual(corrections, [[false, 0]]);
    assert.equal(fight.heldBack(key), false);
    advance(10);
    fight.act(key, fight.record(key), actions);
    assert.equal(fight.heldBack(key), true, 'a pending correction holds the key back');
    assert.equal(pendingTimers(), 1);
    advance(999);
    assert.equal(corrections.length, 1);
    advance(1);
    assert.deepEqual(corrections, [
      [false, 0],
      [true, 1_010],
    ]);
    assert.equal(fight.heldBack(key), false);
  });

  it('contests at maxRewrites, reports once, and resumes after quiet with one correction and a resumed event naming the feature', function () {
    const { fight, advance, emitted, counters } = controller();
    const key: FightKey = {
      what: 'offload',
      device: newManagedDevice(4, 'flannel.4'),
      feature: 'tx-x',
    };
    const { actions, corrections } = recording();
    for (let i = 0; i < POLICY.maxRewrites; i += 1) fight.act(key, fight.record(key), actions);
    assert.equal(fight.isContested(key), true);
    assert.equal(counters.contested, 1);
    // Past the burst one deferral is announced (the next rewrites ride on it), then the contest.
    assert.deepEqual(
      emitted.map(([name]) => name),
      ['deferred', 'contested'],
    );
    assert.deepEqual(emitted[0], [
      'deferred',
      { device: 'flannel.4', ifindex: 4, what: 'offload', feature: 'tx-x', delayMs: 1000 },
    ]);
    assert.equal(fight.allowance(key, 16), null, 'nothing is corrected at once');
    const before = corrections.length;
    advance(POLICY.quietMs - 1);
    assert.equal(corrections.length, before);
    advance(1);
    assert.equal(fight.isContested(key), false);
    assert.deepEqual(emitted[2], [
      'resumed',
      { device: 'flannel.4', ifindex: 4, what: 'offload', feature: 'tx-x' },
    ]);
    assert.deepEqual(corrections.at(-1), [false, POLICY.quietMs]);
  });

  it("release forgets exactly one device's keys and cancels their timers; cancelTimers keeps the history", function () {
    const { fight, advance, pendingTimers } = controller();
    const two = newManagedDevice(2, 'flannel.2');
    const twentyTwo = newManagedDevice(22, 'flannel.22');
    const keys: FightKey[] = [
      { what: 'mac', device: two },
      { what: 'offload', device: two, feature: 'tx-x' },
      { what: 'mac', device: twentyTwo },
      { what: 'offload', device: twentyTwo, feature: 'tx-x' },
    ];
    const { actions, corrections } = recording();
    for (const key of keys) {
      for (let i = 0; i < POLICY.maxRewrites; i += 1) fight.act(key, fight.record(key), actions);
    }
    assert.equal(pendingTimers(), 4, 'one resume check per contested key');
    fight.release(two);
    assert.deepEqual(
      keys.map((key) => fight.isContested(key)),
      [false, false, true, true],
    );
    assert.equal(pendingTimers(), 2);
    fight.cancelTimers(twentyTwo);
    assert.equal(pendingTimers(), 0);
    assert.equal(fight.isContested(keys[2] as FightKey), true, 'history kept');
    const count = corrections.length;
    advance(POLICY.quietMs * 2);
    assert.equal(corrections.length, count, 'no timer of a released device fires');
    assert.deepEqual(fight.record(keys[0] as FightKey), { action: 'correct' });
  });
});
