/**
 * While another process floods the namespace with unrelated link changes
 * (MTU flips on 200 ifb devices, as fast as it can), every rewrite of the
 * guarded device is still corrected and its neighbour entries restored: with
 * the kernel socket filter (the default), and without it, where the socket
 * overruns and the coalesced resync has to find the rewrite.
 */
import assert from 'node:assert/strict';

import { startFlood } from './support/flooder';
import { GuardProcess } from './support/guard-process';
import { Netns } from './support/netns';
const REWRITES = 5;

interface IpLink {
  ifindex: number;
  ifname: string;
  address?: string;
}

describe('guarding through a flood of unrelated link changes (real kernel, netns)', function () {
  this.timeout(120_000);
  let ns: Netns;
  let pinned: string;
  let ifbIndexes: number[];

  before(async function () {
    ns = await Netns.create('fgt-flood');
    await ns.ipBatch([
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning',
      'link set flannel.1 up',
      'neigh add 198.18.2.0 lladdr 0e:00:00:00:00:02 dev flannel.1 nud permanent',
      ...Array.from({ length: 200 }, (_, i) => `link add ifb${i} type ifb`),
    ]);
    const links = await ns.ipJson<IpLink[]>('link show');
    pinned = links.find((l) => l.ifname === 'flannel.1')?.address ?? '';
    ifbIndexes = links.filter((l) => l.ifname.startsWith('ifb')).map((l) => l.ifindex);
  });

  after(async function () {
    await ns.destroy();
  });

  for (const filter of [true, false]) {
    it(`corrects every rewrite during a flood of MTU changes on 200 other links ${filter ? 'with' : 'without'} the kernel filter`, async function () {
      const guard = await GuardProcess.start([
        '--netns',
        ns.name,
        '--mac',
        `flannel.1=${pinned}`,
        '--offload',
        'none',
        '--rewrite-window',
        '1',
        ...(filter ? [] : ['--no-kernel-filter']),
      ]);
      const flood = startFlood(ns, ifbIndexes, 8);
      try {
        for (let round = 0; round < REWRITES; round += 1) {
          await new Promise((resolve) => setTimeout(resolve, 500));
          const from = guard.lines.length;
          await ns.ip(['link', 'set', 'flannel.1', 'address', `0e:00:00:00:10:0${round}`]);
          const restored = await guard.waitFor((l) => l.event === 'restored', 5000, from);
          assert.equal(restored.mac, pinned);
        }
        assert.ok(await flood.finished(20_000), 'the flooder finishes');
      } finally {
        await flood.stop();
        assert.equal(await guard.stop(), 0);
      }
      // The rate reached depends on the machine (scripts/bench/flood.ts reports it); here the
      // flood only has to have happened, around the rewrites.
      const changes = Number(/^(\d+) changes/.exec(flood.output())?.[1]);
      assert.ok(changes >= 50_000, `flood: ${flood.output().trim()}`);
      const [link] = await ns.ipJson<IpLink[]>('link show flannel.1');
      assert.equal(link?.address, pinned);
      assert.match(
        await ns.ip('neigh show dev flannel.1 nud permanent'),
        /198\.18\.2\.0 lladdr 0e:00:00:00:00:02/,
      );
      if (filter) {
        assert.equal(guard.events('overrun').length, 0, 'the filter keeps the flood out');
      }
    });
  }
});
