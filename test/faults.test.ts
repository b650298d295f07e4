/**
 * `flannel-guard watch` under faults, as a user runs it: a device that
 * vanishes mid-correction, the namespace deleted under the guard, SIGTERM
 * during a resync, two guards that want different MACs, and a foreign writer
 * flapping the MAC every 10 ms.
 */
import assert from 'node:assert/strict';

import { startFlood } from './support/flooder';
import { GuardProcess } from './support/guard-process';
import { Netns } from './support/netns';

interface IpLink {
  ifindex: number;
  ifname: string;
  address?: string;
}

describe('faults (real kernel, netns, the CLI)', function () {
  this.timeout(120_000);
  let ns: Netns;
  let guards: GuardProcess[];

  beforeEach(async function () {
    ns = await Netns.create('fgt-fault');
    await ns.ipBatch([
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning',
      'link set flannel.1 up',
      'neigh add 198.18.2.0 lladdr 0e:00:00:00:00:02 dev flannel.1 nud permanent',
    ]);
    guards = [];
  });

  afterEach(async function () {
    await Promise.all(guards.map((guard) => guard.stop('SIGKILL')));
    await ns.destroy();
  });

  async function start(args: readonly string[]): Promise<GuardProcess> {
    const guard = await GuardProcess.start(['--netns', ns.name, '--offload', 'none', ...args]);
    guards.push(guard);
    return guard;
  }

  async function macOf(name: string): Promise<string | undefined> {
    return (await ns.ipJson<IpLink[]>(`link show ${name}`))[0]?.address;
  }

  it('a device that vanishes mid-correction is released without an error', async function () {
    const guard = await start([]);
    // Rewritten and deleted in one go: the correction meets a device that is gone.
    await ns.ipBatch(['link set flannel.1 address 0e:00:00:00:00:99', 'link del flannel.1']);
    await guard.waitFor((l) => l.event === 'released');
    assert.deepEqual(guard.events('error'), []);
    const released = guard.events('released');
    assert.equal(released.length, 1);
    assert.equal(released[0]?.reason, 'removed');
  });

  it('the namespace deleted under the guard: an ENOENT error naming it, and exit 1', async function () {
    const guard = await start([]);
    await ns.destroy();
    const error = await guard.waitFor((l) => l.event === 'error');
    assert.equal(error.code, 'ENOENT');
    assert.match(String(error.message), new RegExp(`network namespace ${ns.name} was deleted`));
    assert.equal(await guard.exited(), 1);
  });

  it('--on-netns-deleted continue: reports it, keeps running, exits 0 on SIGTERM', async function () {
    const guard = await start(['--on-netns-deleted', 'continue']);
    await ns.destroy();
    const error = await guard.waitFor((l) => l.event === 'error');
    assert.match(String(error.message), /still guarding/);
    assert.equal(await guard.stop('SIGTERM'), 0);
  });

  it('SIGTERM during a resync (a tiny buffer overrun by a flood) exits 0', async function () {
    await ns.ipBatch(Array.from({ length: 100 }, (_, i) => `link add ifb${i} type ifb`));
    const indexes = (await ns.ipJson<IpLink[]>('link show type ifb')).map((l) => l.ifindex);
    const guard = await start(['--no-kernel-filter', '--receive-buffer', '4096']);
    const flood = startFlood(ns, indexes, 10);
    try {
      await guard.waitFor((l) => l.event === 'resync' && l.phase === 'begin', 10_000);
      assert.equal(await guard.stop('SIGTERM'), 0);
    } finally {
      await flood.stop();
    }
  });

  it('two guards wanting different MACs both back off; one alert names both MACs; writes stay bounded', async function () {
    const fight = ['--max-rewrites', '4', '--quiet-period', '600000'];
    const [a, b] = ['0e:00:00:00:0a:0a', '0e:00:00:00:0b:0b'];
    const first = await start(['--mac', `flannel.1=${a}`, ...fight]);
    const second = await start(['--mac', `flannel.1=${b}`, ...fight]);
    const contested = await Promise.race([
      first.waitFor((l) => l.event === 'contested', 30_000),
      second.waitFor((l) => l.event === 'contested', 30_000),
    ]);
    assert.match(String(contested.detail), /0e:00:00:00:0a:0a|0e:00:00:00:0b:0b/);
    assert.ok(
      [contested.expected, contested.observed].includes(a) &&
        [contested.expected, contested.observed].includes(b),
      JSON.stringify(contested),
    );
    // The fight has stopped: the MAC no longer changes.
    const settled = await macOf('flannel.1');
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.equal(await macOf('flannel.1'), settled);
    for (const guard of [first, second]) {
      assert.ok(guard.events('restored').length <= 4, 'bounded writes');
      assert.ok(guard.events('contested').length <= 1, 'one alert');
    }
  });

  it('a foreign writer flapping every 10 ms: a bounded number of writes, then contested', async function () {
    const pinned = (await macOf('flannel.1')) ?? '';
    const guard = await start(['--mac', `flannel.1=${pinned}`]);
    const flaps = Array.from(
      { length: 200 },
      (_, i) =>
        `link set flannel.1 address 0e:00:00:00:f0:${(i % 2 === 0 ? 1 : 2).toString(16).padStart(2, '0')}`,
    );
    // One `ip` per flap, 10 ms apart: 2 s of flapping.
    for (const flap of flaps) {
      await ns.ip(flap);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const contested = await guard.waitFor((l) => l.event === 'contested');
    assert.equal(contested.expected, pinned);
    assert.equal(contested.rewrites, 5);
    assert.ok(guard.events('restored').length <= 5, `${guard.events('restored').length} writes`);
    assert.equal(guard.events('contested').length, 1);
  });
});
