/**
 * The one-shot API (lib/core/oneshot.ts) against the real kernel in throw-away namespaces, checked
 * against the system's own tools: `ip -j link`, `ip neigh`, `bridge fdb`, `ethtool -k/-i`, and
 * (to prove that nothing was written) `ip monitor`, sysfs and strace.
 */
import assert from 'node:assert/strict';

import { isSystemError } from '../lib/core/errors';
import {
  getDriverInfo,
  getFeatures,
  getLink,
  getLinks,
  getNeighbours,
  setFeatures,
  setLinkMac,
} from '../lib/core/oneshot';
import type { FeatureState, LinkInfo } from '../lib/core/types';
import { IpLinkMonitor } from './support/ip-monitor';
import { Netns } from './support/netns';
import { LIB_INDEX, inNetns, runCommand } from './support/node-child';

interface IpLinkJson {
  ifindex: number;
  ifname: string;
  link?: string;
  flags: string[];
  mtu: number;
  address?: string;
  linkinfo?: {
    info_kind?: string;
    info_data?: { id?: number; port?: number; local?: string; link?: string; learning?: boolean };
  };
}

/** ethtool -k prints these legacy names for single kernel features. */
const ETHTOOL_ALIASES: Readonly<Record<string, string>> = {
  'rx-checksumming': 'rx-checksum',
  'generic-segmentation-offload': 'tx-generic-segmentation',
  'generic-receive-offload': 'rx-gro',
  'large-receive-offload': 'rx-lro',
  'rx-vlan-offload': 'rx-vlan-hw-parse',
  'tx-vlan-offload': 'tx-vlan-hw-insert',
  'ntuple-filters': 'rx-ntuple-filter',
  'receive-hashing': 'rx-hashing',
  'udp-fragmentation-offload': 'tx-udp-fragmentation',
};
/** ethtool -k summary lines covering several kernel features (listed indented below them). */
const ETHTOOL_SUMMARIES: ReadonlySet<string> = new Set([
  'tx-checksumming',
  'scatter-gather',
  'tcp-segmentation-offload',
]);

interface EthtoolFeature {
  active: boolean;
  fixed: boolean;
  /**
   * From '[requested on|off]'; equal to active when ethtool prints no such note; null for
   * [fixed] features, where ethtool never shows what was requested.
   */
  requested: boolean | null;
}

/** `ethtool -k` output by kernel feature name, summaries skipped and aliases resolved. */
function parseEthtoolK(output: string): Map<string, EthtoolFeature> {
  const features = new Map<string, EthtoolFeature>();
  const lines = output.split('\n').filter((line) => line.trim() !== '');
  assert.match(lines[0] ?? '', /^Features for /);
  for (const line of lines.slice(1)) {
    const match = /^\t?([^:\s]+): (on|off)(?: \[(fixed|requested on|requested off)\])?$/.exec(line);
    assert.ok(match?.[1] && match[2], `unparsed ethtool line: ${JSON.stringify(line)}`);
    const printed = match[1];
    if (ETHTOOL_SUMMARIES.has(printed)) continue;
    const name = ETHTOOL_ALIASES[printed] ?? printed;
    assert.equal(features.has(name), false, `${name} printed twice`);
    const active = match[2] === 'on';
    const note = match[3];
    features.set(name, {
      active,
      fixed: note === 'fixed',
      requested:
        note === 'fixed'
          ? null
          : note === 'requested on'
            ? true
            : note === 'requested off'
              ? false
              : active,
    });
  }
  return features;
}

function sideOf(features: FeatureState[]): Map<string, FeatureState> {
  return new Map(features.map((feature) => [feature.name, feature]));
}

describe('one-shot API (real kernel, netns)', function () {
  this.timeout(60_000);
  let ns: Netns;

  beforeEach(async function () {
    ns = await Netns.create('fgt-one');
    await ns.ipBatch([
      'link add va type veth peer name vb',
      'addr add 192.0.2.1/24 dev va',
      'link set va up',
      'link set vb up',
      'link add vx0 type vxlan id 42 dstport 8472 local 192.0.2.1 dev va nolearning',
      'link add ifb0 type ifb',
    ]);
  });

  afterEach(async function () {
    await ns.destroy();
  });

  async function ipLinks(): Promise<IpLinkJson[]> {
    return ns.ipJson<IpLinkJson[]>('-d link show');
  }

  async function ethtoolK(device: string): Promise<Map<string, EthtoolFeature>> {
    return parseEthtoolK((await ns.run(['ethtool', '-k', device])).stdout);
  }

  async function assertFeaturesMatchEthtool(device: string): Promise<void> {
    const ours = (await getFeatures(device, { netns: ns.name })).features;
    const theirs = await ethtoolK(device);
    const names = ours.map((f) => f.name).filter((name) => name !== '');
    assert.equal(new Set(names).size, names.length, 'no duplicate names');
    assert.deepEqual([...names].sort(), [...theirs.keys()].sort(), `${device}: same feature names`);
    for (const feature of ours) {
      const expected = theirs.get(feature.name);
      assert.ok(expected, feature.name);
      assert.deepEqual(
        {
          active: feature.active,
          fixed: feature.fixed,
          requested: feature.fixed ? null : feature.requested,
        },
        expected,
        `${device} ${feature.name}`,
      );
    }
  }

  /** addr_assign_type of `device` as seen by a process inside the namespace (sysfs is per netns). */
  async function addrAssignTypeInside(
    device: string,
  ): Promise<{ fromLib: unknown; sysfs: number }> {
    const script = `require(${JSON.stringify(LIB_INDEX)}).getLink(${JSON.stringify(device)}).then((l) => console.log(JSON.stringify(l.addrAssignType)))`;
    const result = await runCommand([...inNetns(ns.name), process.execPath, '-e', script]);
    assert.equal(result.code, 0, result.stderr);
    const sysfs = Number((await ns.readFile(`/sys/class/net/${device}/addr_assign_type`)).trim());
    return { fromLib: JSON.parse(result.stdout) as unknown, sysfs };
  }

  describe('getLinks / getLink', function () {
    it('lists every link with the same index, name, MAC, MTU, kind and flags as ip -j link', async function () {
      const links = await getLinks({ netns: ns.name });
      const reference = await ipLinks();
      assert.deepEqual(
        links.map((l) => l.ifindex).sort((a, b) => a - b),
        reference.map((l) => l.ifindex).sort((a, b) => a - b),
      );
      const byName = new Map(reference.map((l) => [l.ifname, l]));
      for (const link of links) {
        const ip = byName.get(link.name);
        assert.ok(ip, link.name);
        assert.equal(link.ifindex, ip.ifindex, link.name);
        assert.equal(link.mac, ip.address, link.name);
        assert.equal(link.mtu, ip.mtu, link.name);
        assert.equal(link.kind, ip.linkinfo?.info_kind ?? '', link.name);
        assert.equal(link.up, ip.flags.includes('UP'), link.name);
        assert.equal(link.loopback, ip.flags.includes('LOOPBACK'), link.name);
        assert.equal(
          link.addrAssignType,
          null,
          `${link.name}: sysfs of another namespace is never read`,
        );
        assert.equal(link.linkNetnsid, null, link.name);
      }
      assert.deepEqual(links.map((l) => l.name).sort(), ['ifb0', 'lo', 'va', 'vb', 'vx0']);
    });

    it('reports vxlan attributes (vni, port, local, underlay) and veth peers like ip -d link', async function () {
      const reference = await ipLinks();
      const index = (name: string): number | undefined =>
        reference.find((l) => l.ifname === name)?.ifindex;
      const vx0 = await getLink('vx0', { netns: ns.name });
      const ipVx0 = reference.find((l) => l.ifname === 'vx0');
      assert.equal(vx0.kind, 'vxlan');
      assert.deepEqual(vx0.vxlan, {
        vni: ipVx0?.linkinfo?.info_data?.id,
        port: ipVx0?.linkinfo?.info_data?.port,
        local: ipVx0?.linkinfo?.info_data?.local,
        underlayIfindex: index(ipVx0?.linkinfo?.info_data?.link ?? ''),
        learning: ipVx0?.linkinfo?.info_data?.learning,
      });
      assert.deepEqual(vx0.vxlan, {
        vni: 42,
        port: 8472,
        local: '192.0.2.1',
        underlayIfindex: index('va'),
        learning: false,
      });
      for (const [name, peer] of [
        ['va', 'vb'],
        ['vb', 'va'],
      ] as const) {
        const veth = await getLink(name, { netns: ns.name });
        assert.equal(veth.kind, 'veth');
        assert.equal(veth.vxlan, null);
        assert.equal(veth.lowerIfindex, index(peer), `${name}'s peer`);
        assert.equal(veth.up, true);
      }
      const ifb = await getLink('ifb0', { netns: ns.name });
      assert.equal(ifb.kind, 'ifb');
      assert.equal(ifb.up, false);
      const lo = await getLink('lo', { netns: ns.name });
      assert.equal(lo.loopback, true);
      assert.equal(lo.kind, '');
    });

    it('getLink agrees with the getLinks entry for every device', async function () {
      const links = await getLinks({ netns: ns.name });
      for (const link of links) {
        assert.deepEqual(await getLink(link.name, { netns: ns.name }), link);
      }
    });
  });

  describe('setLinkMac', function () {
    it('round trip: the MAC changes, addr_assign_type becomes 3 inside the namespace, null from outside', async function () {
      const before = await addrAssignTypeInside('vx0');
      assert.deepEqual(before, { fromLib: 1, sysfs: 1 }, 'vxlan starts with a random MAC');
      const old = await getLink('vx0', { netns: ns.name });
      const result = await setLinkMac('vx0', '0E:00:00:00:00:42', { netns: ns.name });
      assert.deepEqual(result, {
        interface: 'vx0',
        ifindex: old.ifindex,
        previous: old.mac,
        mac: '0e:00:00:00:00:42',
        changed: true,
      });
      const [ip] = await ns.ipJson<IpLinkJson[]>('link show vx0');
      assert.equal(ip?.address, '0e:00:00:00:00:42');
      const after = await getLink('vx0', { netns: ns.name });
      assert.equal(after.mac, '0e:00:00:00:00:42');
      assert.equal(after.addrAssignType, null, 'from outside the namespace sysfs is not ours');
      assert.deepEqual(await addrAssignTypeInside('vx0'), { fromLib: 3, sysfs: 3 }, 'NET_ADDR_SET');
    });

    it('writes nothing when the MAC is already the requested one (no RTM_NEWLINK, addr_assign_type stays 1)', async function () {
      const current = (await getLink('vx0', { netns: ns.name })).mac;
      assert.ok(current);
      const monitor = await IpLinkMonitor.start(ns);
      try {
        const result = await setLinkMac('vx0', current.toUpperCase(), { netns: ns.name });
        assert.equal(result.changed, false);
        assert.equal(result.previous, current);
        assert.equal(result.mac, current);
        // Sentinel: a change made afterwards. Notifications are ordered, so a write made by
        // setLinkMac would have been reported before it.
        await ns.ip('link set vx0 mtu 1400');
        await monitor.waitFor((e) => e.ifname === 'vx0', 5000);
        const vx0Events = monitor.events.filter((e) => e.ifname === 'vx0');
        assert.equal(vx0Events.length, 1, vx0Events.map((e) => e.raw).join('\n'));
        assert.match(vx0Events[0]?.raw ?? '', /mtu 1400/);
        assert.deepEqual(await addrAssignTypeInside('vx0'), { fromLib: 1, sysfs: 1 });

        // Control: the same write made by ip *is* visible both ways, so the probes above can see one.
        const from = monitor.events.length;
        await ns.ip(['link', 'set', 'vx0', 'address', current]);
        await ns.ip('link set vx0 mtu 1450');
        await monitor.waitFor((e) => e.ifname === 'vx0' && /mtu 1450/.test(e.raw), 5000, from);
        const later = monitor.events.slice(from).filter((e) => e.ifname === 'vx0');
        assert.equal(later.length, 2, later.map((e) => e.raw).join('\n'));
        assert.deepEqual(await addrAssignTypeInside('vx0'), { fromLib: 3, sysfs: 3 });
      } finally {
        await monitor.stop();
      }
    });

    it('the kernel flushes the permanent ARP entries of a device whose MAC changes (FDB entries stay)', async function () {
      await ns.ip('link set vx0 up');
      await ns.ip('neigh add 198.18.0.5 lladdr 02:00:00:00:00:05 dev vx0 nud permanent');
      await ns.bridge('fdb append 02:00:00:00:00:05 dev vx0 dst 192.0.2.2 self permanent');
      const vx0 = await getLink('vx0', { netns: ns.name });
      const mine = async (): Promise<string[]> =>
        (await getNeighbours({ netns: ns.name }))
          .filter((n) => n.ifindex === vx0.ifindex && n.permanent)
          .map((n) => `${n.family} ${n.destination ?? '-'} ${n.lladdr ?? '-'}`)
          .sort();
      assert.deepEqual(await mine(), [
        'bridge 192.0.2.2 02:00:00:00:00:05',
        'inet 198.18.0.5 02:00:00:00:00:05',
      ]);
      await setLinkMac('vx0', '0e:00:00:00:00:43', { netns: ns.name });
      assert.deepEqual(await mine(), ['bridge 192.0.2.2 02:00:00:00:00:05']);
    });

    it('refuses bad MACs and names before any request, with EINVAL', async function () {
      const before = (await getLink('vx0', { netns: ns.name })).mac;
      for (const [name, mac] of [
        ['vx0', 'ff:ff:ff:ff:ff:ff'],
        ['vx0', '01:00:5e:00:00:01'],
        ['vx0', '00:00:00:00:00:00'],
        ['vx0', '02-00-00-00-00-01'],
        ['vx0/', '02:00:00:00:00:01'],
        ['', '02:00:00:00:00:01'],
      ] as const) {
        await assert.rejects(
          async () => setLinkMac(name, mac, { netns: ns.name }),
          (error: unknown) =>
            isSystemError(error) && error.code === 'EINVAL' && error.errno === -22,
          `${name} ${mac}`,
        );
      }
      assert.equal((await getLink('vx0', { netns: ns.name })).mac, before);
    });

    it('rejects with EOPNOTSUPP (interface, netns) on a device that cannot change its MAC (ifb)', async function () {
      await assert.rejects(
        setLinkMac('ifb0', '02:00:00:00:00:07', { netns: ns.name }),
        (error: unknown) => {
          assert.ok(isSystemError(error));
          assert.equal(error.code, 'EOPNOTSUPP');
          assert.equal(error.errno, -95);
          assert.equal(error.syscall, 'setlink');
          assert.equal(error.interface, 'ifb0');
          assert.equal(error.netns, ns.name);
          return true;
        },
      );
    });
  });

  describe('getFeatures', function () {
    for (const device of ['vx0', 'va', 'ifb0', 'lo']) {
      it(`matches ethtool -k ${device}: every feature, on/off, [fixed] and [requested]`, async function () {
        const table = await getFeatures(device, { netns: ns.name });
        assert.equal(table.interface, device);
        assert.equal(table.legacy, false);
        assert.ok(table.features.length > 30, `${table.features.length} features`);
        await assertFeaturesMatchEthtool(device);
      });
    }

    it('E16: lo has at least one [fixed] feature, and the feature names are the same for every device', async function () {
      const lo = await getFeatures('lo', { netns: ns.name });
      assert.ok(
        lo.features.some((f) => f.fixed),
        'lo has a fixed feature',
      );
      const vx0 = await getFeatures('vx0', { netns: ns.name });
      assert.deepEqual(
        lo.features.map((f) => f.name),
        vx0.features.map((f) => f.name),
      );
      for (const feature of lo.features) {
        if (!feature.available)
          assert.equal(feature.fixed, true, `${feature.name} is not changeable`);
      }
    });
  });

  describe('setFeatures', function () {
    /** Number of SIOCETHTOOL ioctls a node child running `call` makes (strace -f). */
    async function ethtoolIoctls(call: string): Promise<{ count: number; stdout: string }> {
      const script = `const fg = require(${JSON.stringify(LIB_INDEX)}); ${call}.then((r) => console.log(JSON.stringify(r)))`;
      const result = await runCommand(
        [
          'strace',
          '-f',
          '-qq',
          '-e',
          'trace=ioctl',
          '-e',
          'signal=none',
          process.execPath,
          '-e',
          script,
        ],
        { timeoutMs: 30_000 },
      );
      assert.equal(result.code, 0, result.stderr);
      return { count: (result.stderr.match(/SIOCETHTOOL/g) ?? []).length, stdout: result.stdout };
    }

    it('tx-checksum-ip-generic off on vxlan: written, active off, TSO off as a side effect, ethtool agrees', async function () {
      const before = sideOf((await getFeatures('vx0', { netns: ns.name })).features);
      assert.equal(before.get('tx-checksum-ip-generic')?.active, true);
      assert.equal(before.get('tx-tcp-segmentation')?.active, true);

      const result = await setFeatures(
        'vx0',
        { 'tx-checksum-ip-generic': false },
        { netns: ns.name },
      );
      assert.equal(result.interface, 'vx0');
      assert.equal(result.written, true);
      assert.equal(result.legacy, false);
      assert.deepEqual(result.requested, { 'tx-checksum-ip-generic': false });
      assert.deepEqual(result.active, { 'tx-checksum-ip-generic': false });
      assert.deepEqual(result.notApplied, []);
      assert.ok(
        result.sideEffects.some(
          (s) => s.name === 'tx-tcp-segmentation' && s.before === true && s.after === false,
        ),
        JSON.stringify(result.sideEffects),
      );
      assert.equal(
        result.sideEffects.some((s) => s.name === 'tx-checksum-ip-generic'),
        false,
        'the requested feature is not a side effect',
      );

      const after = sideOf((await getFeatures('vx0', { netns: ns.name })).features);
      for (const side of result.sideEffects) {
        assert.equal(before.get(side.name)?.active, side.before, side.name);
        assert.equal(after.get(side.name)?.active, side.after, side.name);
      }
      // Every feature that changed is either requested or listed as a side effect.
      for (const [name, feature] of after) {
        if (name === 'tx-checksum-ip-generic') continue;
        const changed = before.get(name)?.active !== feature.active;
        assert.equal(
          changed,
          result.sideEffects.some((s) => s.name === name),
          name,
        );
      }
      const ethtool = await ethtoolK('vx0');
      assert.equal(ethtool.get('tx-checksum-ip-generic')?.active, false);
      assert.equal(ethtool.get('tx-tcp-segmentation')?.active, false);
      await assertFeaturesMatchEthtool('vx0');
    });

    it('sends no ETHTOOL_SFEATURES when the state already matches: written false, no extra ioctl (strace)', async function () {
      const netns = JSON.stringify({ netns: ns.name });
      const read = await ethtoolIoctls(`fg.getFeatures('vx0', ${netns})`);
      assert.ok(read.count >= 2, `a read takes ${read.count} ioctls`);

      const first = await ethtoolIoctls(
        `fg.setFeatures('vx0', { 'tx-checksum-ip-generic': false }, ${netns})`,
      );
      assert.equal((JSON.parse(first.stdout) as { written: boolean }).written, true);
      assert.ok(
        first.count > read.count,
        `a write takes more ioctls (${first.count}) than a read (${read.count})`,
      );

      const again = await ethtoolIoctls(
        `fg.setFeatures('vx0', { 'tx-checksum-ip-generic': false }, ${netns})`,
      );
      const outcome = JSON.parse(again.stdout) as {
        written: boolean;
        active: Record<string, boolean>;
        sideEffects: unknown[];
      };
      assert.equal(outcome.written, false);
      assert.deepEqual(outcome.active, { 'tx-checksum-ip-generic': false });
      assert.deepEqual(outcome.sideEffects, []);
      assert.equal(again.count, read.count, 'only the reads of getFeatures were made');
      assert.equal((await ethtoolK('vx0')).get('tx-checksum-ip-generic')?.active, false);
    });

    it('turns the feature back on: written, and TSO comes back', async function () {
      await setFeatures('vx0', { 'tx-checksum-ip-generic': false }, { netns: ns.name });
      const result = await setFeatures(
        'vx0',
        { 'tx-checksum-ip-generic': true },
        { netns: ns.name },
      );
      assert.equal(result.written, true);
      assert.deepEqual(result.active, { 'tx-checksum-ip-generic': true });
      assert.ok(result.sideEffects.some((s) => s.name === 'tx-tcp-segmentation' && s.after));
      await assertFeaturesMatchEthtool('vx0');
    });

    it('an unknown feature is ENODATA and a fixed one EOPNOTSUPP; nothing is written', async function () {
      const before = await ethtoolK('vx0');
      await assert.rejects(
        setFeatures(
          'vx0',
          { 'tx-checksum-ip-generic': false, 'no-such-feature': true },
          { netns: ns.name },
        ),
        (error: unknown) => {
          assert.ok(isSystemError(error));
          assert.equal(error.code, 'ENODATA');
          assert.equal(error.errno, -61);
          assert.equal(error.syscall, 'ioctl(ETHTOOL_SFEATURES)');
          assert.equal(error.interface, 'vx0');
          assert.equal(error.netns, ns.name);
          assert.match(error.message, /no-such-feature/);
          return true;
        },
      );
      const fixed = [...before].find(([, f]) => f.fixed)?.[0];
      assert.ok(fixed);
      for (const device of ['vx0', 'lo']) {
        await assert.rejects(
          setFeatures(
            device,
            { 'tx-checksum-ip-generic': false, [fixed]: true },
            { netns: ns.name },
          ),
          (error: unknown) => {
            assert.ok(isSystemError(error));
            assert.equal(error.code, 'EOPNOTSUPP');
            assert.equal(error.errno, -95);
            assert.equal(error.interface, device);
            assert.ok(error.message.includes(fixed), error.message);
            return true;
          },
        );
      }
      assert.deepEqual(
        await ethtoolK('vx0'),
        before,
        'the valid half of the request was not applied',
      );
    });

    it('refuses empty and non-boolean requests and bad names before any request', async function () {
      await assert.rejects(async () => setFeatures('vx0', {}, { netns: ns.name }), RangeError);
      await assert.rejects(
        async () =>
          setFeatures(
            'vx0',
            { 'tx-checksum-ip-generic': 'off' } as unknown as Record<string, boolean>,
            {
              netns: ns.name,
            },
          ),
        TypeError,
      );
      await assert.rejects(
        async () => setFeatures('vx0:1', { 'tx-checksum-ip-generic': false }, { netns: ns.name }),
        (error: unknown) => isSystemError(error) && error.code === 'EINVAL',
      );
      assert.equal((await ethtoolK('vx0')).get('tx-checksum-ip-generic')?.active, true);
    });

    it("writes only the request's own keys: an inherited key is neither validated nor written", async function () {
      const request = Object.create({ 'tx-checksum-ip-generic': 0 }) as Record<string, boolean>;
      request['rx-gro'] = true;
      const result = await setFeatures('vx0', request, { netns: ns.name });
      assert.deepEqual(Object.keys(result.requested), ['rx-gro']);
      assert.equal((await ethtoolK('vx0')).get('tx-checksum-ip-generic')?.active, true);
    });

    it('every promise-returning function rejects on bad arguments instead of throwing', async function () {
      const calls: (() => Promise<unknown>)[] = [
        () => getLink('a/b'),
        () => setLinkMac('vx0', 'not a mac'),
        () => getFeatures(''),
        () => setFeatures('vx0', {}),
        () => getDriverInfo('x'.repeat(16)),
      ];
      for (const call of calls) {
        let promise: Promise<unknown> | undefined;
        assert.doesNotThrow(() => {
          promise = call();
        });
        await assert.rejects(promise as Promise<unknown>);
      }
    });
  });

  describe('getDriverInfo', function () {
    it('names the driver like ethtool -i: vxlan, veth, ifb', async function () {
      for (const [device, driver] of [
        ['vx0', 'vxlan'],
        ['va', 'veth'],
        ['ifb0', 'ifb'],
      ] as const) {
        const info = await getDriverInfo(device, { netns: ns.name });
        assert.equal(info.driver, driver, device);
        const ethtool = (await ns.run(['ethtool', '-i', device])).stdout;
        assert.match(ethtool, new RegExp(`^driver: ${driver}$`, 'm'));
        const version = /^version: (.*)$/m.exec(ethtool)?.[1] ?? '';
        assert.equal(info.version, version, device);
      }
    });
  });

  describe('getNeighbours', function () {
    it('reports permanent ARP and FDB entries with their fields, like ip neigh and bridge fdb', async function () {
      await ns.ip('link set vx0 up');
      await ns.ip('neigh add 198.18.0.5 lladdr 02:00:00:00:00:05 dev vx0 nud permanent');
      await ns.ip('neigh add 198.18.0.6 lladdr 02:00:00:00:00:06 dev vx0 nud stale');
      await ns.bridge('fdb append 02:00:00:00:00:05 dev vx0 dst 192.0.2.2 self permanent');
      await ns.bridge('fdb add 02:00:00:00:00:08 dev vx0 dst 192.0.2.3 vni 4242 self permanent');
      const vx0: LinkInfo = await getLink('vx0', { netns: ns.name });

      const all = await getNeighbours({ netns: ns.name });
      const arp = all.find((n) => n.family === 'inet' && n.destination === '198.18.0.5');
      assert.deepEqual(arp, {
        family: 'inet',
        ifindex: vx0.ifindex,
        destination: '198.18.0.5',
        lladdr: '02:00:00:00:00:05',
        state: 0x80,
        states: ['permanent'],
        permanent: true,
        flags: 0,
        vni: null,
        master: null,
      });
      const stale = all.find((n) => n.family === 'inet' && n.destination === '198.18.0.6');
      assert.equal(stale?.permanent, false);
      assert.deepEqual(stale?.states, ['stale']);

      const fdb = all.filter(
        (n) => n.family === 'bridge' && n.ifindex === vx0.ifindex && n.destination !== null,
      );
      assert.deepEqual(
        fdb
          .map((n) => [n.lladdr, n.destination, n.vni, n.permanent, (n.flags & 0x02) !== 0])
          .sort(),
        [
          ['02:00:00:00:00:05', '192.0.2.2', null, true, true],
          ['02:00:00:00:00:08', '192.0.2.3', 4242, true, true],
        ],
        'NTF_SELF entries; the VNI only where it differs from the device default',
      );

      // The same entries as the system's tools.
      const ipNeigh =
        await ns.ipJson<{ dst: string; lladdr?: string; state: string[] }[]>('neigh show dev vx0');
      for (const entry of ipNeigh) {
        const ours = all.find(
          (n) => n.family !== 'bridge' && n.ifindex === vx0.ifindex && n.destination === entry.dst,
        );
        assert.ok(ours, entry.dst);
        assert.equal(ours.lladdr, entry.lladdr ?? null, entry.dst);
        assert.deepEqual(
          ours.states.map((s) => s.toUpperCase()).sort(),
          [...entry.state].sort(),
          entry.dst,
        );
      }
      const bridgeFdb = JSON.parse(
        (await ns.run(['bridge', '-j', 'fdb', 'show', 'dev', 'vx0'])).stdout,
      ) as {
        mac: string;
        dst?: string;
      }[];
      assert.equal(
        all.filter((n) => n.family === 'bridge' && n.ifindex === vx0.ifindex).length,
        bridgeFdb.length,
        JSON.stringify(bridgeFdb),
      );

      const ipOnly = await getNeighbours({ netns: ns.name, family: 'ip' });
      assert.equal(
        ipOnly.some((n) => n.family === 'bridge'),
        false,
      );
      assert.ok(ipOnly.some((n) => n.destination === '198.18.0.5'));
      const bridgeOnly = await getNeighbours({ netns: ns.name, family: 'bridge' });
      assert.ok(bridgeOnly.every((n) => n.family === 'bridge'));
      assert.equal(bridgeOnly.filter((n) => n.ifindex === vx0.ifindex).length, bridgeFdb.length);
    });
  });
});
