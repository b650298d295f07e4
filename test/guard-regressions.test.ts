/**
 * Plain regression tests for orders of events that once broke the guard, each the minimal
 * sequence that found it, against the real kernel in a throw-away namespace: through the real
 * CLI, or in-process where the order depends on when a timer fires (fired by hand then).
 * (The random sequence test, test/sequences.test.ts, searches for more.)
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';

import { monotonicMs } from '../lib/core/clock';
import { LinkMonitor } from '../lib/core/monitor';
import { FlannelGuard, type GuardClock } from '../lib/guard';
import { guardConfig } from '../lib/guard/config';
import { openGuardParts } from '../lib/guard/parts';
import { flannelDeviceLines, UNDERLAY_LINES } from './support/flannel-device';
import { GuardProcess } from './support/guard-process';
import { blockUntil, delay, Netns, tempDirPrefix, waitFor } from './support/netns';

const MAC_A = '02:00:00:00:00:0a';
const PEERS = [
  { ip: '198.18.2.0', mac: '02:00:00:00:01:02', underlay: '192.0.2.2' },
  { ip: '198.18.3.0', mac: '02:00:00:00:01:03', underlay: '192.0.2.3' },
];

/** flannel.1 as flanneld leaves it: MAC A, one permanent ARP and FDB entry per peer. */
async function flannelDevice(ns: Netns): Promise<void> {
  await ns.ipBatch([
    ...UNDERLAY_LINES,
    ...flannelDeviceLines(MAC_A),
    ...PEERS.map((p) => `neigh replace ${p.ip} lladdr ${p.mac} dev flannel.1 nud permanent`),
  ]);
  for (const p of PEERS) {
    await ns.bridge(`fdb append ${p.mac} dev flannel.1 dst ${p.underlay} self permanent`);
  }
}

async function deviceMac(ns: Netns): Promise<string> {
  const [link] = await ns.ipJson<{ address: string }[]>('link show dev flannel.1');
  return link?.address ?? '';
}

async function permanentArp(ns: Netns): Promise<string[]> {
  const entries = await ns.ipJson<{ dst: string; lladdr?: string; state?: string[] }[]>(
    'neigh show dev flannel.1 nud permanent',
  );
  return entries.map((e) => `${e.dst} ${e.lladdr ?? ''}`).sort();
}

const EXPECTED_ARP = PEERS.map((p) => `${p.ip} ${p.mac}`).sort();

describe('guard regressions (real kernel, real CLI)', function () {
  this.timeout(60_000);
  let ns: Netns;
  let guard: GuardProcess | undefined;

  beforeEach(async function () {
    ns = await Netns.create('fgreg');
    await flannelDevice(ns);
  });

  afterEach(async function () {
    await guard?.stop();
    guard = undefined;
    await ns.destroy();
  });

  // Issue 24: a guard started on a device udev had rewritten (and whose entries flanneld had
  // re-added since) corrected it, then lost the whole table on every later rewrite while
  // reporting success, with latencies from the start-time drift. The native reader answered
  // a notification queued before the guard's own write (a second, same-MAC write, which
  // flushes too), and that flush, with no MAC change before it, was taken for deletions.
  it('started on a rewritten device, keeps MAC and entries through every later rewrite', async function () {
    await ns.ip('link set flannel.1 address 02:00:00:00:00:0b');
    await ns.ipBatch(
      PEERS.map((p) => `neigh replace ${p.ip} lladdr ${p.mac} dev flannel.1 nud permanent`),
    );
    guard = await GuardProcess.start([
      '--netns',
      ns.name,
      '--mac',
      `flannel.1=${MAC_A}`,
      '--state-dir',
      'off',
    ]);
    const atStart = await guard.waitFor((l) => l.event === 'restored');
    assert.equal(atStart.neighbours, 2);
    for (const mac of ['02:00:00:00:00:0c', '02:00:00:00:00:0d', '02:00:00:00:00:0e']) {
      const from = guard.lines.length;
      const before = performance.now();
      await ns.ip(`link set flannel.1 address ${mac}`);
      const restored = await guard.waitFor((l) => l.event === 'restored', 10_000, from);
      const elapsed = performance.now() - before;
      assert.equal(restored.neighbours, 2, `after the rewrite to ${mac}`);
      assert.equal(await deviceMac(ns), MAC_A);
      assert.deepEqual(await permanentArp(ns), EXPECTED_ARP, `entries after the rewrite to ${mac}`);
      // Honest: never longer than the drift lasted as seen from here.
      assert.ok(
        (restored.latencyMs as number) <= elapsed,
        `latencyMs ${String(restored.latencyMs)} > ${elapsed} ms since the rewrite`,
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });
});

/** A GuardClock on real time whose timers run only when the test fires them. */
class HandClock implements GuardClock {
  readonly #timers = new Set<{ due: number; callback: () => void }>();

  now(): number {
    return monotonicMs();
  }

  setTimeout(callback: () => void, ms: number): () => void {
    const timer = { due: this.now() + ms, callback };
    this.#timers.add(timer);
    return () => this.#timers.delete(timer);
  }

  /** Runs the timers that are due, synchronously. */
  fireDue(): number {
    const due = [...this.#timers].filter((timer) => timer.due <= this.now());
    for (const timer of due) {
      this.#timers.delete(timer);
      timer.callback();
    }
    return due.length;
  }
}

describe('guard regressions (real kernel, in-process, timers fired by hand)', function () {
  this.timeout(60_000);
  let ns: Netns;
  let guard: FlannelGuard | undefined;
  let stateDir: string;

  beforeEach(async function () {
    ns = await Netns.create('fgreg');
    await flannelDevice(ns);
    stateDir = mkdtempSync(tempDirPrefix('regress-state'));
  });

  afterEach(async function () {
    guard?.close();
    guard = undefined;
    rmSync(stateDir, { recursive: true, force: true });
    await ns.destroy();
  });

  // Issue 24 (found by the sequence test, seed 1702): a contest's end came due while a
  // rewrite was read and not yet reported. The resumed correction found the device as the
  // native mirror had it, already rewritten, wrote it back and reported it before the rewrite;
  // the rewrite, reported then, was answered by a correction of nothing: restored.neighbours 0.
  it("a timer's correction never answers a rewrite read but not yet reported: the rewrite, then its answer with every entry", async function () {
    const clock = new HandClock();
    const config = guardConfig({
      netns: ns.name,
      mac: { 'flannel.1': MAC_A },
      fight: { maxRewrites: 2, windowMs: 60_000, burst: 2, jitter: 0, quietMs: 100 },
      offload: 'none',
      checksumErrorsPollMs: 0,
      stateDir,
      udevRoot: false,
    });
    const parts = openGuardParts(config);
    const { monitor } = parts;
    assert.ok(monitor instanceof LinkMonitor);
    guard = new FlannelGuard(config, { ...parts, clock });
    const events: { event: string; neighbours?: number; mac?: string }[] = [];
    for (const event of ['rewrite', 'restored', 'contested', 'resumed'] as const) {
      guard.on(event, (e: { neighbours?: number; mac?: string | null }) => {
        events.push({ event, neighbours: e.neighbours, mac: e.mac ?? undefined });
      });
    }
    await guard.ready();
    await ns.ip('link set flannel.1 address 02:00:00:00:00:0b');
    await ns.ip('link set flannel.1 address 02:00:00:00:00:0c');
    await waitFor(() => events.some((e) => e.event === 'contested'), {
      timeoutMs: 5000,
      what: 'the contest',
    });
    await delay(150); // quiet for longer than quietMs: the contest's end is due
    const from = events.length;
    const read = monitor.stats().messages;
    // With the loop blocked: the rewrite is made and read (the reader does not wait for the
    // loop), then the contest's end fires before the loop is handed what was read.
    execFileSync('ip', ['-n', ns.name, 'link', 'set', 'flannel.1', 'address', '02:00:00:00:00:0d']);
    assert.ok(
      blockUntil(() => monitor.stats().messages > read, 5000),
      'the reader read it',
    );
    assert.ok(clock.fireDue() > 0, 'the contest ended');
    await waitFor(() => events.slice(from).some((e) => e.event === 'restored'), {
      timeoutMs: 5000,
      what: 'the answer',
    });
    await delay(100);
    const after = events
      .slice(from)
      .map((e) => `${e.event}${e.neighbours === undefined ? '' : ` ${e.neighbours}`}`);
    assert.deepEqual(after, ['resumed', 'rewrite', 'restored 2']);
    assert.equal(await deviceMac(ns), MAC_A);
    assert.deepEqual(await permanentArp(ns), EXPECTED_ARP);
  });
});
