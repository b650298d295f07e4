/**
 * `--offload auto` on scripted paths (no privileges): the verdict rules, and the guard's rounds
 * against peers that answer as a path through a NIC with broken TX checksum offload would (ICMP
 * echo only while the device's tx-checksum-ip-generic is on), a filtered path (echo only,
 * whatever the checksum), a healthy one, and none. The real paths are in
 * test/offload-auto.e2e.test.ts.
 */
import assert from 'node:assert/strict';

import {
  FlannelGuard,
  describeChecksumErrors,
  describeChecksumSenders,
  type ChecksumErrorsEvent,
  type ChecksumSendersEvent,
  type OffloadEvent,
  type VerdictEvent,
} from '../lib/guard';
import { guardConfig } from '../lib/guard/config';
import { judgePaths } from '../lib/guard/offload-auto';
import { prng } from './support/prng';
import type { FlannelGuardOptions } from '../lib/guard/config';
import type { PathAnswer } from '../lib/guard/events';
import { FakePorts, permanentArp, permanentFdb, permanentNdp } from './support/scripted-monitor';
import { addFlannelDevice, scriptedGuard, type ScriptedGuard } from './support/scripted-guard';

const CSUM = 'tx-checksum-ip-generic';
const answer = (echo: boolean, udp: boolean, tcp: boolean): PathAnswer => ({
  address: '198.18.2.0',
  echo,
  udp,
  tcp,
});

interface Rig extends ScriptedGuard {
  ifindex: number;
  verdicts: VerdictEvent[];
  offloads: OffloadEvent[];
}

const open: FlannelGuard[] = [];
afterEach(function () {
  for (const guard of open.splice(0)) guard.close();
});

/** flannel.1 with `peers` permanent ARP entries, TX checksum offload on, under `--offload auto`. */
function rig(
  peers: number,
  options: FlannelGuardOptions = {},
  random = (): number => 0.25,
  before: (ports: FakePorts, guard: FlannelGuard) => void = () => undefined,
): Rig {
  const peerList = Array.from({ length: peers }, (_, i) => ({
    vtep: `198.18.${2 + i}.0`,
    mac: `7a:11:22:33:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 0xff).toString(16).padStart(2, '0')}`,
  }));
  let ifindex = 0;
  const scripted = scriptedGuard(
    { offload: 'auto', ...options },
    {
      random,
      prepare: (kernel) => {
        ifindex = addFlannelDevice(kernel, '5e:89:db:49:c6:a4', peerList);
      },
    },
  );
  open.push(scripted.guard);
  const r: Rig = { ...scripted, ifindex, verdicts: [], offloads: [] };
  r.guard.on('verdict', (e) => r.verdicts.push(e));
  r.guard.on('offload', (e) => r.offloads.push(e));
  before(r.ports, r.guard);
  r.monitor.start();
  r.monitor.pump();
  return r;
}

/** A path through a NIC that leaves the checksum unfinished: while the device offloads it, only echo. */
function brokenOffload(r: Rig): void {
  r.ports.answerProbe = () => {
    const offloaded = r.kernel.feature(r.ifindex, CSUM);
    return { echo: true, udp: !offloaded, tcp: !offloaded };
  };
}

/** Runs the guard's timers for `ms`, letting each round's answer arrive. */
async function run(r: Rig, ms: number): Promise<void> {
  for (let step = 0; step < ms; step += 100) {
    r.clock.advance(100);
    r.monitor.pump();
    await new Promise((resolve) => setImmediate(resolve));
  }
}

function probeCalls(r: Rig): { addresses: readonly string[] }[] {
  return r.ports.calls.filter(
    (c): c is Extract<typeof c, { method: 'probePaths' }> => c.method === 'probePaths',
  );
}

describe('offload auto: the verdict of one round', function () {
  it('broken only when every peer that answers echo is silent on UDP and TCP', function () {
    const table: [PathAnswer[], string][] = [
      [[answer(true, true, true)], 'healthy'],
      [[answer(true, true, false)], 'healthy'], // the peer's own offload may drop its RST
      [[answer(true, false, true)], 'healthy'],
      [[answer(true, false, false)], 'broken'],
      [[answer(true, false, false), answer(false, false, false)], 'broken'],
      [[answer(false, false, false)], 'inconclusive'],
      [[], 'inconclusive'],
      [[answer(true, false, false), answer(true, true, true)], 'inconclusive'],
    ];
    for (const [answers, verdict] of table) {
      assert.equal(judgePaths(answers).verdict, verdict, JSON.stringify(answers));
    }
  });
});

describe('offload auto: the guard measures, then decides', function () {
  it('broken offload: confirmed, turned off, kept off only because that fixed it; the evidence says so', async function () {
    const r = rig(3);
    brokenOffload(r);
    await run(r, 10_000);
    const verdict = r.verdicts[0];
    assert.ok(verdict, 'a verdict');
    assert.equal(r.verdicts.length, 1);
    assert.equal(verdict.verdict, 'broken');
    assert.equal(verdict.action, 'turned-off');
    assert.equal(verdict.active, false);
    assert.equal(r.kernel.feature(r.ifindex, CSUM), false);
    // Two rounds on (confirmed broken), two off (confirmed fixed).
    assert.equal(verdict.rounds, 4);
    assert.equal(verdict.probes, 4 * 3 * 3);
    assert.deepEqual(
      verdict.evidence.map((round) => [round.offload, round.answers.every((a) => a.udp)]),
      [
        [true, false],
        [true, false],
        [false, true],
        [false, true],
      ],
    );
    assert.deepEqual(
      r.offloads.map((e) => [e.reason, e.active[CSUM]]),
      [['probe', false]],
    );
    // What it measured is now the device's policy: a flip back on is corrected like any drift.
    r.kernel.setFeatures(r.ifindex, { [CSUM]: true });
    r.monitor.pump();
    assert.equal(r.kernel.feature(r.ifindex, CSUM), false);
    assert.equal(r.offloads.at(-1)?.reason, 'drift');
  });

  it('a filtered path (echo only, whatever the checksum): turned off, no better, turned back on', async function () {
    const r = rig(2);
    r.ports.answerProbe = () => ({ echo: true, udp: false, tcp: false });
    await run(r, 10_000);
    const verdict = r.verdicts[0];
    assert.equal(verdict?.verdict, 'inconclusive');
    assert.equal(verdict.action, 'restored-on');
    assert.match(verdict.detail, /did not make UDP or TCP answer/);
    assert.equal(r.kernel.feature(r.ifindex, CSUM), true);
    assert.deepEqual(
      r.offloads.map((e) => e.active[CSUM]),
      [false, true],
    );
  });

  it('healthy: left on, reported once, and checked again only after the slow period', async function () {
    const r = rig(2, { autoOffload: { slowMs: 60_000 } });
    await run(r, 5_000);
    assert.deepEqual(
      r.verdicts.map((v) => [v.verdict, v.action, v.active]),
      [['healthy', 'kept-on', true]],
    );
    const rounds = probeCalls(r).length;
    assert.equal(rounds, 2);
    await run(r, 50_000);
    assert.equal(probeCalls(r).length, rounds, 'quiet until the slow period');
    await run(r, 15_000);
    assert.ok(probeCalls(r).length > rounds, 're-checked');
    assert.equal(r.verdicts.length, 1, 'an agreeing re-check is not news');
    assert.deepEqual(r.offloads, []);
  });

  it('bounded: a sample of at most 8 peers per round, rounds never closer than 1 s', async function () {
    // Faster than the peers' ICMP rate limit is refused, like every setting out of range.
    for (const [key, value] of [
      ['roundMs', 999],
      ['samplePeers', 65],
      ['confirmRounds', 0],
      ['timeoutMs', 10_001],
    ] as const) {
      assert.throws(
        () => guardConfig({ offload: 'auto', autoOffload: { [key]: value } }),
        new RegExp(`autoOffload\\.${key}`),
      );
    }
    const r = rig(40, { autoOffload: { roundMs: 1_000 } });
    const at: number[] = [];
    const answerAll = r.ports.answerProbe;
    r.ports.answerProbe = (name, address) => {
      at.push(r.clock.now());
      return answerAll(name, address);
    };
    await run(r, 5_000);
    for (const call of probeCalls(r)) {
      assert.ok(call.addresses.length <= 8, `${call.addresses.length} peers`);
      assert.equal(new Set(call.addresses).size, call.addresses.length);
    }
    const starts = [...new Set(at)];
    for (let i = 1; i < starts.length; i += 1) {
      assert.ok((starts[i] ?? 0) - (starts[i - 1] ?? 0) >= 1_000, JSON.stringify(starts));
    }
  });

  it('most peers down: the one that answers is found by fresh samples and kept in them', async function () {
    const r = rig(30, {}, prng(0x0ff10ad));
    const alive = '198.18.17.0';
    r.ports.answerProbe = (_name, address) =>
      address === alive
        ? { echo: true, udp: true, tcp: true }
        : { echo: false, udp: false, tcp: false };
    await run(r, 30_000);
    assert.deepEqual(
      r.verdicts.map((v) => [v.verdict, v.action]),
      [['healthy', 'kept-on']],
    );
    const calls = probeCalls(r);
    const found = calls.findIndex((c) => c.addresses.includes(alive));
    assert.ok(
      found >= 0 && found < calls.length - 1,
      `found in round ${found + 1} of ${calls.length}`,
    );
    for (const call of calls.slice(found)) assert.ok(call.addresses.includes(alive));
  });

  it('no peer yet: waits and measures once flanneld programs one; a removed device stops', async function () {
    const r = rig(0);
    await run(r, 5_000);
    assert.equal(probeCalls(r).length, 0);
    r.kernel.replaceNeighbour(permanentArp(r.ifindex, '198.18.2.0', '7a:11:22:33:44:01'));
    r.monitor.pump();
    await run(r, 10_000);
    assert.equal(r.verdicts[0]?.verdict, 'healthy');
    r.kernel.removeLink(r.ifindex);
    r.monitor.pump();
    const calls = probeCalls(r).length;
    await run(r, 700_000);
    assert.equal(probeCalls(r).length, calls, 'no round for a removed device');
  });

  it('IPv6 peers only (flannel-v6): said once, not probed, offload left alone', async function () {
    const r = rig(0);
    r.kernel.replaceNeighbour(permanentNdp(r.ifindex, 'fd00:18::2', '7a:11:22:33:44:06'));
    r.monitor.pump();
    await run(r, 20_000);
    assert.deepEqual(
      r.verdicts.map((v) => [v.verdict, v.action]),
      [['inconclusive', 'kept-on']],
    );
    assert.match(r.verdicts[0]?.detail ?? '', /IPv6 peers only/);
    assert.equal(probeCalls(r).length, 0);
    assert.deepEqual(r.offloads, []);
  });

  it('a failed round (no CAP_NET_RAW) is one error, then a slow retry; dry run never probes', async function () {
    const r = rig(1);
    const errors: Error[] = [];
    r.guard.on('error', (e) => errors.push(e));
    r.ports.fail('probePaths', Object.assign(new Error('EPERM'), { code: 'EPERM' }));
    await run(r, 5_000);
    assert.equal(errors.length, 1);
    assert.equal(probeCalls(r).length, 1);
    const dry = rig(1, { dryRun: true });
    await run(dry, 5_000);
    assert.equal(probeCalls(dry).length, 0);
  });
});

describe('offload auto: the passive signal (checksum-error counters)', function () {
  function watch(r: Rig): ChecksumErrorsEvent[] {
    const seen: ChecksumErrorsEvent[] = [];
    r.guard.on('checksumErrors', (e) => seen.push(e));
    return seen;
  }

  it('a rise is reported with its size and interval; what rose before the guard started is history', async function () {
    // Counted before the guard started: not news.
    const r = rig(1, { offload: 'none' }, undefined, (ports) => {
      ports.checksumErrorCounters.udp = 40;
    });
    const seen = watch(r);
    await run(r, 5_000);
    assert.equal(seen.length, 0);
    assert.deepEqual(r.guard.checksumErrors(), { udp: 40, tcp: 0, udp6: 0 });
    r.ports.checksumErrorCounters.udp += 3;
    r.ports.checksumErrorCounters.tcp = 2;
    await run(r, 2_000);
    r.ports.checksumErrorCounters.udp += 1;
    await run(r, 2_000);
    await run(r, 2_000); // quiet
    r.ports.checksumErrorCounters.udp6 = 5;
    await run(r, 2_000);
    assert.deepEqual(
      seen.map((e) => [e.rise, e.onset, e.intervalMs, e.recheck]),
      [
        [{ udp: 3, tcp: 2, udp6: 0 }, true, 2_000, []],
        [{ udp: 1, tcp: 0, udp6: 0 }, false, 2_000, []],
        [{ udp: 0, tcp: 0, udp6: 5 }, true, 2_000, []],
      ],
    );
    assert.deepEqual(seen.at(-1)?.totals, { udp: 44, tcp: 2, udp6: 5 });
    assert.match(
      describeChecksumErrors(seen[0] as ChecksumErrorsEvent),
      /^3 UDP, 2 TCP packets with bad checksums received in 2\.0 s and dropped: a peer sends with broken TX checksum offload/,
    );
    assert.deepEqual(probeCalls(r), [], 'no probes without --offload auto');
  });

  it('brings a settled verdict’s next round forward: broken offload found in seconds, not at the slow re-check', async function () {
    const r = rig(3);
    const seen = watch(r);
    await run(r, 6_000);
    assert.deepEqual(
      r.verdicts.map((v) => [v.verdict, v.action]),
      [['healthy', 'kept-on']],
    );
    // The path breaks later (a kernel update, a new iptables rule): without a sign, nothing
    // measures it before slowMs (10 min).
    brokenOffload(r);
    const rounds = probeCalls(r).length;
    await run(r, 30_000);
    assert.equal(probeCalls(r).length, rounds);
    // The peers' packets arrive broken too (the same cause on every node): the counters rise.
    r.ports.checksumErrorCounters.tcp = 9;
    const risenAt = r.clock.now();
    await run(r, 10_000);
    assert.deepEqual(
      seen.map((e) => e.recheck),
      [['flannel.1']],
    );
    const found = r.verdicts[1];
    assert.ok(found, 'a verdict after the rise');
    assert.deepEqual([found.verdict, found.action], ['broken', 'turned-off']);
    assert.ok(r.clock.now() - risenAt <= 10_000);
    assert.equal(r.kernel.feature(r.ifindex, CSUM), false);
  });

  it('a peer that keeps sending bad checksums brings rounds forward at most once a minute', async function () {
    const r = rig(2);
    const seen = watch(r);
    await run(r, 6_000);
    const settled = probeCalls(r).length;
    for (let i = 0; i < 45; i += 1) {
      r.ports.checksumErrorCounters.udp += 1;
      await run(r, 2_000);
    }
    assert.equal(seen.length, 45);
    assert.equal(seen.filter((e) => e.onset).length, 1);
    assert.deepEqual(
      seen.flatMap((e, i) => (e.recheck.length > 0 ? [i] : [])),
      [0, 30],
    );
    // The first early re-check confirms healthy in two rounds, the second agrees in one (a
    // streak that agrees with the verdict changes nothing); nothing new is reported.
    assert.equal(probeCalls(r).length, settled + 3);
    assert.equal(r.verdicts.length, 1);
  });

  it('a rise samples each device once a minute at most and names the senders by their ARP and FDB entries', async function () {
    const r = rig(3, { offload: 'none' });
    r.kernel.replaceNeighbour(permanentFdb(r.ifindex, '7a:11:22:33:00:01', '192.0.2.12'));
    const senders: ChecksumSendersEvent[] = [];
    r.guard.on('checksumSenders', (e) => senders.push(e));
    const samples = () => r.ports.calls.filter((c) => c.method === 'sampleChecksums');
    await run(r, 2_000);
    // Peer 1 (198.18.3.0, FDB known) sends most; an unknown MAC (no entry: a stale peer) some.
    r.ports.checksumSample = {
      frames: 40,
      checked: 30,
      bad: 6,
      senders: [
        { mac: '7a:11:22:33:00:09', udp: 1, tcp: 0 },
        { mac: '7a:11:22:33:00:01', udp: 3, tcp: 2 },
      ],
    };
    r.ports.checksumErrorCounters.udp += 4;
    await run(r, 2_000);
    assert.deepEqual(samples(), [{ method: 'sampleChecksums', name: 'flannel.1' }]);
    assert.equal(senders.length, 1);
    const [event] = senders as [ChecksumSendersEvent];
    assert.deepEqual(
      { ...event, sampleMs: 0 },
      {
        netns: null,
        device: 'flannel.1',
        frames: 40,
        checked: 30,
        bad: 6,
        sampleMs: 0,
        senders: [
          { mac: '7a:11:22:33:00:01', vtep: '198.18.3.0', underlay: '192.0.2.12', udp: 3, tcp: 2 },
          { mac: '7a:11:22:33:00:09', vtep: null, underlay: null, udp: 1, tcp: 0 },
        ],
      },
    );
    assert.equal(
      describeChecksumSenders(event),
      'flannel.1: 6 of 30 packets checked in 0.0 s carried bad checksums, sent by VTEP 198.18.3.0 (underlay 192.0.2.12, 7a:11:22:33:00:01): 3 UDP, 2 TCP; an unknown peer (7a:11:22:33:00:09): 1 UDP: turn tx-checksum-ip-generic off on the sending nodes (--offload auto there does it)',
    );
    // The counters keep rising: no second sample within the minute, one after it.
    for (let i = 0; i < 30; i += 1) {
      r.ports.checksumErrorCounters.udp += 1;
      await run(r, 2_000);
    }
    assert.equal(samples().length, 2);
    // A sample that finds nothing bad (the sender stopped, or sends nothing now) says nothing.
    r.ports.checksumSample = { frames: 12, checked: 10, bad: 0, senders: [] };
    await run(r, 62_000);
    r.ports.checksumErrorCounters.tcp += 1;
    await run(r, 2_000);
    assert.equal(samples().length, 3);
    assert.equal(senders.length, 2);
  });

  it('a sample that cannot be taken (no CAP_NET_RAW) is one error, then never tried again', async function () {
    const errors: Error[] = [];
    const r = rig(1, { offload: 'none' }, undefined, (ports, guard) => {
      ports.fail('sampleChecksums', Object.assign(new Error('EPERM'), { code: 'EPERM' }));
      guard.on('error', (e) => errors.push(e));
    });
    await run(r, 2_000);
    for (let i = 0; i < 40; i += 1) {
      r.ports.checksumErrorCounters.udp += 1;
      await run(r, 2_000);
    }
    assert.equal(errors.length, 1);
    assert.equal(r.ports.calls.filter((c) => c.method === 'sampleChecksums').length, 1);
  });

  it('checksumErrorsPollMs 0: never read', async function () {
    const r = rig(1, { offload: 'none', checksumErrorsPollMs: 0 });
    r.ports.checksumErrorCounters.udp = 7;
    await run(r, 10_000);
    assert.equal(r.ports.calls.filter((c) => c.method === 'checksumErrors').length, 0);
    assert.equal(r.guard.checksumErrors(), null);
  });

  it('counters that cannot be read: one error, no more reads', async function () {
    const errors: Error[] = [];
    const r = rig(1, { offload: 'none' }, undefined, (ports, guard) => {
      ports.fail('checksumErrors', Object.assign(new Error('EBADMSG'), { code: 'EBADMSG' }));
      guard.on('error', (e) => errors.push(e));
    });
    await run(r, 10_000);
    assert.equal(errors.length, 1);
    assert.equal(r.ports.calls.filter((c) => c.method === 'checksumErrors').length, 1);
    assert.equal(r.guard.checksumErrors(), null);
  });
});
