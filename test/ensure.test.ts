/**
 * ensureVtep (lib/ensure/ensure.ts) against the real kernel in a throw-away namespace: a healthy VTEP
 * is left alone (nothing written, fast), every kind of drift is found and fixed - checked with
 * `ip`, `bridge`, `ethtool` and sysfs -, a dry run writes nothing, bad options and devices are
 * refused before or at the first system call, and a process that calls it exits by itself.
 */
import assert from 'node:assert/strict';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import {
  ensureVtep,
  parsePeerSpec,
  type EnsureVtepResult,
  type PeerExpectation,
} from '../lib/ensure/ensure';
import { isSystemError } from '../lib/core/errors';
import { ipVersion } from '../lib/core/validate';
import { Netns } from './support/netns';
import { runCommand } from './support/node-child';

const ENSURE = join(__dirname, '..', 'lib', 'ensure', 'ensure.js');
const PUBLISHED = '0e:00:00:00:01:01';
const PEERS: PeerExpectation[] = [
  { vtepIp: '198.18.2.0', mac: '0e:00:00:00:02:02', underlayIp: '192.0.2.12' },
  { vtepIp: '198.18.3.0', mac: '0e:00:00:00:03:03', underlayIp: '192.0.2.13' },
];

interface IpNeighbour {
  dst: string;
  lladdr?: string;
  state?: string[];
}
interface FdbEntry {
  mac: string;
  dst?: string;
  state?: string;
}

describe('ensureVtep (real kernel, netns)', function () {
  this.timeout(60_000);
  let ns: Netns;
  const at = (): { netns: string } => ({ netns: ns.name });

  const mac = async (): Promise<string> =>
    (await ns.ipJson<{ address: string }[]>('link show dev flannel.1'))[0]?.address ?? '';
  const assignType = async (): Promise<number> =>
    Number((await ns.readFile('/sys/class/net/flannel.1/addr_assign_type')).trim());
  const neighbours = async (): Promise<[string, string | undefined, boolean][]> =>
    (await ns.ipJson<IpNeighbour[]>('-4 neigh show dev flannel.1'))
      .map((n): [string, string | undefined, boolean] => [
        n.dst,
        n.lladdr,
        n.state?.includes('PERMANENT') ?? false,
      ])
      .sort();
  const fdb = async (): Promise<[string, string | undefined, boolean][]> =>
    (JSON.parse(await ns.bridge(['-j', 'fdb', 'show', 'dev', 'flannel.1'])) as FdbEntry[])
      .filter((e) => e.dst !== undefined)
      .map((e): [string, string | undefined, boolean] => [e.mac, e.dst, e.state === 'permanent'])
      .sort();
  const txChecksum = async (): Promise<string> => {
    const out = (await ns.run(['ethtool', '-k', 'flannel.1'])).stdout;
    return /tx-checksum-ip-generic: (on|off)/.exec(out)?.[1] ?? '?';
  };

  /** A node as flannel leaves it: its VTEP at the published MAC, entries for both peers. */
  async function healthyNode(): Promise<void> {
    await ns.ipBatch([
      'link add eth0 type veth peer name eth0p',
      'addr add 192.0.2.11/24 dev eth0',
      'link set eth0 up',
      'link set eth0p up',
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning local 192.0.2.11 dev eth0',
      'link set flannel.1 up',
      ...PEERS.map((p) => `neigh replace ${p.vtepIp} lladdr ${p.mac} dev flannel.1 nud permanent`),
    ]);
    for (const p of PEERS) {
      await ns.bridge([
        'fdb',
        'append',
        p.mac,
        'dev',
        'flannel.1',
        'dst',
        p.underlayIp ?? '',
        'self',
        'permanent',
      ]);
    }
    await ns.run(['ethtool', '-K', 'flannel.1', 'tx-checksum-ip-generic', 'off']);
  }

  beforeEach(async function () {
    ns = await Netns.create('fgt-ens');
    await healthyNode();
  });

  afterEach(async function () {
    await ns.destroy();
  });

  it('a healthy VTEP: ok, no drift, nothing written (addr_assign_type stays 1), well under 50 ms', async function () {
    const current = await mac();
    const durations: number[] = [];
    let result: EnsureVtepResult | undefined;
    for (let i = 0; i < 25; i += 1) {
      const started = performance.now();
      result = await ensureVtep({ ...at(), mac: current, peers: PEERS });
      durations.push(performance.now() - started);
    }
    assert.ok(result);
    assert.equal(result.ok, true);
    assert.deepEqual(result.drift, []);
    assert.deepEqual(result.actions, []);
    assert.equal(result.device, 'flannel.1');
    assert.equal(result.netns, ns.name);
    assert.deepEqual(result.found.offloads, { 'tx-checksum-ip-generic': false });
    assert.equal(result.found.mac, current);
    assert.equal(result.found.permanentNeighbours, 2);
    assert.equal(result.found.fdbEntries, 2);
    assert.equal(result.found.vxlanPort, 8472);
    assert.equal(result.found.addrAssignType, null, 'sysfs of another namespace is not read');
    assert.equal(await assignType(), 1, 'no MAC was written');
    durations.sort((a, b) => a - b);
    const median = durations[Math.floor(durations.length / 2)] ?? Infinity;
    assert.ok(
      median < 50,
      `median ${median.toFixed(2)} ms (all: ${durations.map((d) => d.toFixed(1)).join(' ')})`,
    );
  });

  it('a rewritten MAC: set back, and the permanent entries the change flushed put back; FDB untouched', async function () {
    const before = await neighbours();
    await ns.ip(['link', 'set', 'flannel.1', 'address', PUBLISHED]);
    await ns.ipBatch(
      PEERS.map((p) => `neigh replace ${p.vtepIp} lladdr ${p.mac} dev flannel.1 nud permanent`),
    );
    await ns.ip(['link', 'set', 'flannel.1', 'address', '0e:99:99:99:99:99']);
    assert.deepEqual(await neighbours(), [], 'the kernel flushed them');
    const result = await ensureVtep({ ...at(), mac: PUBLISHED, peers: PEERS });
    assert.equal(result.ok, true);
    assert.deepEqual(
      result.drift.map((d) => d.kind),
      ['mac', 'neighbour', 'neighbour'],
    );
    assert.deepEqual(result.actions[0], {
      action: 'set-mac',
      device: 'flannel.1',
      from: '0e:99:99:99:99:99',
      to: PUBLISHED,
      reason: 'drift',
    });
    assert.deepEqual(
      result.actions
        .slice(1)
        .map((a) => (a.action === 'replace-neighbour' ? [a.destination, a.reason] : a.action)),
      [
        ['198.18.2.0', 'missing'],
        ['198.18.3.0', 'missing'],
      ],
    );
    assert.equal(await mac(), PUBLISHED);
    assert.deepEqual(await neighbours(), before);
    assert.equal((await fdb()).length, 2);
    assert.deepEqual((await ensureVtep({ ...at(), mac: PUBLISHED, peers: PEERS })).actions, []);
  });

  it('without peers, a MAC change still puts back the entries it flushed (read before the write)', async function () {
    const before = await neighbours();
    const result = await ensureVtep({ ...at(), mac: PUBLISHED });
    assert.deepEqual(
      result.actions.map((a) =>
        a.action === 'replace-neighbour' ? `${a.destination} ${a.reason}` : a.action,
      ),
      ['set-mac', '198.18.2.0 flushed-by-mac-change', '198.18.3.0 flushed-by-mac-change'],
    );
    assert.deepEqual(await neighbours(), before);
  });

  it('peers: a missing, a wrong and a non-permanent entry and a missing FDB entry are installed as published', async function () {
    const [first, second] = PEERS as [PeerExpectation, PeerExpectation];
    await ns.ip(['neigh', 'del', first.vtepIp, 'dev', 'flannel.1']);
    await ns.ip([
      'neigh',
      'replace',
      second.vtepIp,
      'lladdr',
      '0e:99:99:99:99:99',
      'dev',
      'flannel.1',
      'nud',
      'permanent',
    ]);
    await ns.bridge([
      'fdb',
      'del',
      second.mac,
      'dev',
      'flannel.1',
      'dst',
      second.underlayIp ?? '',
      'self',
    ]);
    const extra: PeerExpectation = {
      vtepIp: '198.18.4.0',
      mac: '0e:00:00:00:04:04',
      underlayIp: '192.0.2.14',
    };
    await ns.ip([
      'neigh',
      'replace',
      extra.vtepIp,
      'lladdr',
      extra.mac,
      'dev',
      'flannel.1',
      'nud',
      'reachable',
    ]);
    const current = await mac();
    const result = await ensureVtep({ ...at(), mac: current, peers: [...PEERS, extra] });
    assert.deepEqual(
      result.drift.map((d) => `${d.kind} ${d.subject ?? ''}`),
      [
        'neighbour 198.18.2.0',
        'neighbour 198.18.3.0',
        'fdb 192.0.2.13',
        'neighbour 198.18.4.0',
        'fdb 192.0.2.14',
      ],
    );
    assert.deepEqual(
      result.actions.map((a) =>
        a.action === 'replace-neighbour' ? `${a.family} ${a.destination} ${a.reason}` : a.action,
      ),
      [
        'inet 198.18.2.0 missing',
        'inet 198.18.3.0 wrong-mac',
        'bridge 192.0.2.13 missing',
        'inet 198.18.4.0 not-permanent',
        'bridge 192.0.2.14 missing',
      ],
    );
    assert.deepEqual(await neighbours(), [
      ['198.18.2.0', first.mac, true],
      ['198.18.3.0', second.mac, true],
      ['198.18.4.0', extra.mac, true],
    ]);
    assert.deepEqual(await fdb(), [
      [first.mac, first.underlayIp, true],
      [second.mac, second.underlayIp, true],
      [extra.mac, extra.underlayIp, true],
    ]);
    assert.equal(await assignType(), 1, 'the MAC was right: not written');
  });

  it('offload: tx-checksum-ip-generic on is turned off, with the side effects reported', async function () {
    await ns.run(['ethtool', '-K', 'flannel.1', 'tx-checksum-ip-generic', 'on']);
    const result = await ensureVtep(at());
    assert.deepEqual(result.found.offloads, { 'tx-checksum-ip-generic': true });
    const action = result.actions[0];
    assert.ok(action?.action === 'set-offload');
    assert.deepEqual(action.active, { 'tx-checksum-ip-generic': false });
    assert.ok(action.sideEffects.some((s) => s.name === 'tx-tcp-segmentation' && !s.after));
    assert.equal(await txChecksum(), 'off');
    // A policy the other way round, and none.
    assert.equal(
      (await ensureVtep({ ...at(), offload: { 'tx-checksum-ip-generic': true } })).actions.length,
      1,
    );
    assert.equal(await txChecksum(), 'on');
    const none = await ensureVtep({ ...at(), offload: 'none' });
    assert.deepEqual(none.found.offloads, {});
    assert.equal(await txChecksum(), 'on');
  });

  it('dryRun: every drift reported, nothing written', async function () {
    await ns.run(['ethtool', '-K', 'flannel.1', 'tx-checksum-ip-generic', 'on']);
    await ns.ip(['neigh', 'del', '198.18.2.0', 'dev', 'flannel.1']);
    const current = await mac();
    const result = await ensureVtep({ ...at(), mac: PUBLISHED, peers: PEERS, dryRun: true });
    assert.equal(result.ok, false);
    assert.equal(result.dryRun, true);
    assert.deepEqual(
      result.drift.map((d) => d.kind),
      ['mac', 'neighbour', 'offload'],
    );
    assert.deepEqual(result.drift[0], {
      kind: 'mac',
      expected: PUBLISHED,
      observed: current,
      fixable: true,
    });
    assert.deepEqual(result.actions, []);
    assert.equal(await mac(), current);
    assert.equal(await txChecksum(), 'on');
    assert.equal((await neighbours()).length, 1);
  });

  it('pin: addr_assign_type 1 becomes 3 by writing the same MAC once; the flushed entries come back', async function () {
    const current = await mac();
    const before = await neighbours();
    const result = await ensureVtep({ ...at(), pin: true, addrAssignType: await assignType() });
    assert.deepEqual(result.actions[0], {
      action: 'set-mac',
      device: 'flannel.1',
      from: current,
      to: current,
      reason: 'pin',
    });
    assert.equal(await assignType(), 3);
    assert.equal(await mac(), current);
    assert.deepEqual(await neighbours(), before);
    // Once pinned there is nothing to do.
    assert.deepEqual((await ensureVtep({ ...at(), pin: true, addrAssignType: 3 })).actions, []);
  });

  it('refuses bad options before any system call, and names the device that is missing or not VXLAN', async function () {
    for (const bad of [
      { mac: 'ff:ff:ff:ff:ff:ff' },
      { device: 'a/b' },
      { peers: [{ vtepIp: '198.18.2.0', mac: 'nope' }] },
      { peers: [{ vtepIp: 'x', mac: PUBLISHED }] },
      { peers: [{ vtepIp: '198.18.2.0', mac: PUBLISHED, underlayIp: '300.1.1.1' }] },
      { peers: [PEERS[0], PEERS[0]] as PeerExpectation[] },
      { offload: { 'tx-checksum-ip-generic': 'off' } as unknown as Record<string, boolean> },
      { netns: 'no/such' },
    ]) {
      await assert.rejects(
        ensureVtep({ netns: ns.name, ...bad }),
        (error: unknown) => isSystemError(error) && error.code === 'EINVAL',
        JSON.stringify(bad),
      );
    }
    await assert.rejects(
      ensureVtep({ ...at(), device: 'flannel.9' }),
      (error: unknown) => isSystemError(error) && error.code === 'ENODEV',
    );
    await assert.rejects(
      ensureVtep({ ...at(), device: 'eth0' }),
      (error: unknown) =>
        isSystemError(error) &&
        error.code === 'EINVAL' &&
        /eth0 is not a VXLAN device \(kind "veth"\)/.test(error.message),
    );
  });

  it('ipVersion agrees with node:net isIP on the forms neighbour destinations take', function () {
    for (const address of [
      '192.0.2.1',
      '198.18.255.0',
      '256.1.1.1',
      '01.2.3.4',
      '1.2.3',
      '1.2.3.4.5',
      '::',
      '::1',
      'fe80::1',
      '2001:db8::8a2e:370:7334',
      '1:2:3:4:5:6:7:8',
      '1:2:3:4:5:6:7:8:9',
      '1::2::3',
      '::ffff:192.0.2.1',
      '1:2:3:4:5:6:192.0.2.1',
      '1:2:3:4:5:6:7:192.0.2.1',
      ':1',
      '1:',
      '12345::',
      'x',
      '',
      '::1.2.3',
      'g::1',
    ]) {
      assert.equal(ipVersion(address), isIP(address), address);
    }
  });

  it('parsePeerSpec: VTEP_IP=MAC[@UNDERLAY_IP]', function () {
    assert.deepEqual(parsePeerSpec('198.18.2.0=0E:00:00:00:02:02@192.0.2.12'), PEERS[0]);
    assert.deepEqual(parsePeerSpec('198.18.2.0=0e:00:00:00:02:02'), {
      vtepIp: '198.18.2.0',
      mac: '0e:00:00:00:02:02',
    });
    for (const bad of [
      '198.18.2.0',
      '=0e:00:00:00:02:02',
      '198.18.2.0=0e:00:00:00:02:02@',
      '198.18.2.0=0e:00:00:00:02@192.0.2.1',
    ]) {
      assert.throws(
        () => parsePeerSpec(bad),
        (error: unknown) => isSystemError(error) && error.code === 'EINVAL',
        bad,
      );
    }
  });

  it('leaves nothing that keeps a process alive: a child that calls it exits right after, fixing or failing', async function () {
    const script = (call: string): string => `
      const { performance } = require('node:perf_hooks');
      const { ensureVtep } = require(${JSON.stringify(ENSURE)});
      process.on('exit', () => console.log(JSON.stringify({ exit: performance.now() })));
      ${call}.then(
        (r) => console.log(JSON.stringify({ settled: performance.now(), actions: r.actions.length, resources: process.getActiveResourcesInfo() })),
        (e) => console.log(JSON.stringify({ settled: performance.now(), error: e.code, resources: process.getActiveResourcesInfo() })),
      );`;
    await ns.ip(['link', 'set', 'flannel.1', 'address', '0e:55:55:55:55:55']);
    await ns.run(['ethtool', '-K', 'flannel.1', 'tx-checksum-ip-generic', 'on']);
    for (const [call, expect] of [
      [
        `ensureVtep({ netns: ${JSON.stringify(ns.name)}, mac: ${JSON.stringify(PUBLISHED)}, peers: ${JSON.stringify(PEERS)} })`,
        { actions: 4 },
      ],
      [
        `ensureVtep({ netns: ${JSON.stringify(ns.name)}, mac: ${JSON.stringify(PUBLISHED)}, peers: ${JSON.stringify(PEERS)} })`,
        { actions: 0 },
      ],
      [
        `ensureVtep({ netns: ${JSON.stringify(ns.name)}, device: 'flannel.9' })`,
        { error: 'ENODEV' },
      ],
    ] as const) {
      const child = await runCommand([process.execPath, '-e', script(call)], { timeoutMs: 10_000 });
      assert.equal(child.code, 0, child.stderr);
      assert.equal(child.timedOut, false);
      const lines = child.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      const settled = lines[0] as { settled: number; resources: string[] } & Record<
        string,
        unknown
      >;
      const exit = lines[1] as { exit: number };
      for (const [key, value] of Object.entries(expect))
        assert.equal(settled[key], value, `${call}: ${key}`);
      assert.deepEqual(
        settled.resources.filter((r) => r !== 'TTYWrap' && r !== 'PipeWrap'),
        [],
        `${call}: active resources`,
      );
      assert.ok(
        exit.exit - settled.settled < 100,
        `${call}: exited ${(exit.exit - settled.settled).toFixed(1)} ms after settling`,
      );
    }
  });
});
