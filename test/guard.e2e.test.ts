/**
 * The product's main job, proven in the flannel-like test bed where every
 * node runs a real systemd-udevd with MACAddressPolicy=persistent: without
 * the guard, udev's rewrite breaks cross-node pod traffic; with
 * `flannel-guard watch` running, it keeps working through flannel restarts
 * and foreign MAC writes, and the offload policy shows on the wire.
 */
import assert from 'node:assert/strict';

import { GuardProcess, type GuardLine } from './support/guard-process';
import { FlannelTestbed, type TestbedNode } from './support/testbed';
import { VxlanCapture } from './support/vxlan-checksum';

const BROKEN_PROBE = { timeoutMs: 1500 };

describe('flannel-guard watch in the test bed (real systemd-udevd)', function () {
  this.timeout(120_000);
  let bed: FlannelTestbed;
  let guards: GuardProcess[] = [];

  before(async function () {
    bed = await FlannelTestbed.create({ nodes: 2, udev: true });
  });

  after(async function () {
    await Promise.all(guards.map((guard) => guard.stop()));
    await bed.destroy();
  });

  const nodes = (): [TestbedNode, TestbedNode] => [bed.node(1), bed.node(2)];

  async function allTrafficWorks(): Promise<void> {
    const [n1, n2] = nodes();
    assert.equal(await bed.ping(n1, n2), true, 'ping 1 -> 2');
    assert.equal(await bed.ping(n2, n1), true, 'ping 2 -> 1');
    assert.equal(await bed.tcp(n1, n2, { bytes: 20_000 }), true, 'TCP 1 -> 2');
    assert.equal(await bed.tcp(n2, n1, { bytes: 20_000 }), true, 'TCP 2 -> 1');
    assert.equal(await bed.udp(n1, n2), true, 'UDP 1 -> 2');
  }

  /** Restarts flannel on `node` and waits for the guard's correction of udev's rewrite. */
  async function restartAndAwaitCorrection(
    node: TestbedNode,
    guard: GuardProcess,
  ): Promise<GuardLine> {
    const from = guard.lines.length;
    const mac = await bed.restartFlannel(node);
    const restored = await guard.waitFor(
      (l) => l.event === 'restored' && l.mac === mac,
      10_000,
      from,
    );
    // The test bed re-creates the device when udev beat its read; the last creation counts.
    const rewrite = guard.lines
      .slice(from)
      .find((l) => l.event === 'rewrite' && l.expected === mac);
    // Proven, not guessed: the new MAC is udev's persistent value for this machine-id and name.
    assert.equal(rewrite?.writer, 'udev-persistent-policy', JSON.stringify(rewrite));
    const evidence = rewrite.evidence as { persistentMac: string; linkFile: string };
    assert.equal(evidence.persistentMac, rewrite.mac);
    assert.equal(evidence.linkFile, '/usr/lib/systemd/network/99-default.link');
    const ifindex = rewrite.ifindex;
    const offload = guard.lines
      .slice(from)
      .find((l) => l.event === 'offload' && l.reason === 'created' && l.ifindex === ifindex);
    assert.deepEqual(offload?.active, { 'tx-checksum-ip-generic': false });
    return restored;
  }

  it('without the guard, udev rewrites both VTEPs and cross-node ping and TCP fail', async function () {
    const [n1, n2] = nodes();
    for (const node of [n1, n2]) {
      assert.notEqual(await node.currentMac(), node.publishedMac, `${node.name} rewritten by udev`);
      assert.equal(await node.addrAssignType(), 3);
    }
    assert.equal(await bed.ping(n1, n2, BROKEN_PROBE), false);
    assert.equal(await bed.tcp(n1, n2, BROKEN_PROBE), false);
  });

  it('with the guard told the published MACs, it fixes rewrites that happened before it started', async function () {
    const [n1, n2] = nodes();
    guards = await Promise.all(
      [n1, n2].map((node) =>
        GuardProcess.start([
          '--netns',
          node.ns.name,
          '--mac',
          `flannel.1=${node.publishedMac}`,
          ...node.udevRootFlags(),
        ]),
      ),
    );
    for (const [index, node] of [n1, n2].entries()) {
      const guard = guards[index] as GuardProcess;
      const rewrite = await guard.waitFor((l) => l.event === 'rewrite');
      assert.equal(rewrite.found, 'start');
      assert.equal(rewrite.previous, null, 'its MAC before the guard began: not known');
      assert.equal(rewrite.writer, 'udev-persistent-policy');
      const restored = await guard.waitFor((l) => l.event === 'restored');
      // The neighbour entries programmed after udev's rewrite were flushed by the guard's own
      // correction and put back by it.
      assert.equal(restored.neighbours, 1);
      assert.equal(await node.currentMac(), node.publishedMac);
      assert.equal((await node.neighbours()).length, 1);
    }
    await allTrafficWorks();
    await Promise.all(guards.map((guard) => guard.stop()));
  });

  it('started as a user starts it, corrects udev on every flannel restart, with offload off each time', async function () {
    const [n1, n2] = nodes();
    guards = await Promise.all(
      [n1, n2].map((node) =>
        GuardProcess.start(['--netns', node.ns.name, ...node.udevRootFlags()]),
      ),
    );
    for (const guard of guards) {
      const ready = guard.events('ready')[0];
      assert.equal((ready?.devices as { macSource: string }[])[0]?.macSource, 'pinned-at-start');
    }
    for (let round = 0; round < 3; round += 1) {
      for (const [index, node] of [n1, n2].entries()) {
        await restartAndAwaitCorrection(node, guards[index] as GuardProcess);
        assert.equal(await node.currentMac(), node.publishedMac);
        assert.equal(await node.feature('tx-checksum-ip-generic'), 'off');
      }
      await allTrafficWorks();
    }
  });

  it('puts back the MAC and the flushed neighbour entries after `ip link set address` from another process', async function () {
    const [, n2] = nodes();
    const guard = guards[1] as GuardProcess;
    for (const foreign of ['0e:12:34:56:78:9a', '0e:12:34:56:78:9b']) {
      const from = guard.lines.length;
      await n2.ns.ip(['link', 'set', 'flannel.1', 'address', foreign]);
      const rewrite = await guard.waitFor((l) => l.event === 'rewrite', 5000, from);
      assert.equal(rewrite.writer, 'another-writer');
      assert.equal(rewrite.mac, foreign);
      const restored = await guard.waitFor((l) => l.event === 'restored', 5000, from);
      assert.equal(restored.neighbours, 1);
      assert.equal(await n2.currentMac(), n2.publishedMac);
      const neighbours = await n2.neighbours();
      assert.equal(neighbours.length, 1);
      assert.ok(neighbours[0]?.state?.includes('PERMANENT'));
      await allTrafficWorks();
    }
  });

  it('on the wire: inner TCP checksums are left partial with offload on, complete under the policy', async function () {
    const [n1, n2] = nodes();
    const measure = async (): Promise<{ partial: number; complete: number }> => {
      const capture = await VxlanCapture.start(n1.ns);
      try {
        assert.equal(await bed.tcp(n1, n2, { bytes: 20_000 }), true);
      } catch (error) {
        await capture.discard();
        throw error;
      }
      const result = await capture.stop({ outerSrc: n1.underlayIp, innerSrc: n1.podIp });
      assert.equal(result.tcp.bad, 0);
      return result.tcpWithPayload;
    };
    // Offload on: the guard on node 1 stopped, the feature turned back on by hand.
    await (guards[0] as GuardProcess).stop();
    await n1.setTxChecksum(true);
    const on = await measure();
    assert.ok(on.partial > 0, `partial inner checksums with offload on: ${JSON.stringify(on)}`);
    assert.equal(on.complete, 0);

    // The guard started with its default policy turns it off before it reports ready.
    guards[0] = await GuardProcess.start(['--netns', n1.ns.name, ...n1.udevRootFlags()]);
    const offload = await (guards[0] as GuardProcess).waitFor((l) => l.event === 'offload');
    assert.equal(offload.reason, 'start');
    assert.deepEqual(offload.active, { 'tx-checksum-ip-generic': false });
    assert.equal(await n1.feature('tx-checksum-ip-generic'), 'off');
    const off = await measure();
    assert.ok(
      off.complete > 0,
      `complete inner checksums under the policy: ${JSON.stringify(off)}`,
    );
    assert.equal(off.partial, 0);
  });

  it('exits 0 on SIGTERM and SIGINT', async function () {
    const [first, second] = guards as [GuardProcess, GuardProcess];
    assert.equal(await first.stop('SIGTERM'), 0);
    assert.equal(await second.stop('SIGINT'), 0);
  });
});
