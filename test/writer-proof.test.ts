/**
 * Who rewrote the MAC, proven against the real systemd-udevd (its own machine-id, private /run):
 * a guard in the same namespace names every rewrite udev makes `udev-persistent-policy`, with the
 * `.link` file from udev's database or configuration, and never blames udev for an
 * `ip link set address`, not even one writing udev's value for another device name or machine.
 * Ground truth is udevd's own log ("Applying persistent MAC address") and the test's own writes.
 * Seeded, bounded: ROUNDS device creations, each followed by foreign writes.
 */
import assert from 'node:assert/strict';

import { FlannelGuard, type RewriteEvent } from '../lib/guard';
import { udevPersistentMac } from '../lib/udev/persistent-mac';
import { Netns, waitFor } from './support/netns';
import { prng } from './support/prng';
import { randomMachineId, Udevd } from './support/udevd';

const ROUNDS = 110;
const SEED = 0x14c0de;
const STATIC_NAME = 'flannel.9999';
const STATIC_MAC = '02:fa:11:00:00:01';

describe('rewrite attribution against the real systemd-udevd', function () {
  this.timeout(240_000);
  let ns: Netns;
  let udevd: Udevd;
  let guard: FlannelGuard | undefined;
  /** The guard's rewrites of the running test (each test collects its own). */
  let rewrites: RewriteEvent[] = [];
  const errors: Error[] = [];

  before(async function () {
    ns = await Netns.create('fgt-writer');
    // One name gets a fixed MAC from a .link file (before 99-default.link in name order).
    udevd = await Udevd.start(ns, {
      linkFiles: {
        '10-static.link': `[Match]\nOriginalName=${STATIC_NAME}\n\n[Link]\nMACAddressPolicy=none\nMACAddress=${STATIC_MAC}\n`,
      },
    });
    guard = await FlannelGuard.start({
      netns: ns.path,
      interfaces: ['flannel.*'],
      offload: 'none',
      udevRoot: `/proc/${udevd.pid}/root`,
      // Every write here is the test's own, many to one device: none is a contest.
      fight: { maxRewrites: 1000 },
    });
    guard.on('rewrite', (event) => rewrites.push(event));
    guard.on('error', (error) => errors.push(error));
  });

  beforeEach(function () {
    rewrites = [];
  });

  after(async function () {
    guard?.close();
    await udevd.stop().catch(() => undefined);
    await ns.destroy();
  });

  it(`names every udev rewrite with proof and no ip link rewrite as udev's (${ROUNDS} devices)`, async function () {
    const random = prng(SEED);
    const randomMac = (): string =>
      [
        '02',
        ...[...Array(5)].map(() =>
          Math.floor(random() * 256)
            .toString(16)
            .padStart(2, '0'),
        ),
      ].join(':');

    const truth = { udev: 0, foreign: 0 };
    const other = randomMachineId();
    for (let round = 0; round < ROUNDS; round += 1) {
      const name = `flannel.${1 + Math.floor(random() * 4000)}`;
      const offset = udevd.logOffset();
      const before = rewrites.length;
      await ns.ip([
        'link',
        'add',
        name,
        'type',
        'vxlan',
        'id',
        '1',
        'dstport',
        '8472',
        'nolearning',
      ]);
      await udevd.waitForDeviceProcessed(name, offset);
      const applied = udevd.persistentMacApplied(name, offset);
      assert.equal(applied, udevPersistentMac(udevd.machineId, name), 'udev wrote its own value');
      truth.udev += 1;
      await waitFor(() => rewrites.length > before, {
        timeoutMs: 5000,
        what: `${name}: udev's rewrite`,
      });
      // Foreign writes: a random MAC, udev's value for another name, udev's value on another machine.
      const foreign = [
        randomMac(),
        udevPersistentMac(udevd.machineId, `${name}0`),
        udevPersistentMac(other, name),
      ];
      const writes = round % 3 === 0 ? foreign : [foreign[round % 3] ?? randomMac()];
      for (const mac of writes) {
        const seen = rewrites.length;
        await ns.ip(['link', 'set', name, 'address', mac]);
        truth.foreign += 1;
        await waitFor(() => rewrites.slice(seen).some((e) => e.mac === mac), {
          timeoutMs: 5000,
          what: `${name}: the write of ${mac}`,
        });
      }
      await ns.ip(['link', 'del', name]);
    }

    const byWriter = (mac: (e: RewriteEvent) => boolean): Record<string, number> => {
      const counts: Record<string, number> = {};
      for (const e of rewrites.filter(mac)) counts[e.writer] = (counts[e.writer] ?? 0) + 1;
      return counts;
    };
    const udevs = rewrites.filter((e) => e.mac === udevPersistentMac(udevd.machineId, e.device));
    const foreigns = rewrites.filter((e) => e.mac !== udevPersistentMac(udevd.machineId, e.device));
    // The counts for the closing note.
    console.log(
      `      attribution: udev ${udevs.length} of ${truth.udev} ${JSON.stringify(byWriter((e) => udevs.includes(e)))}, ip link ${foreigns.length} of ${truth.foreign} ${JSON.stringify(byWriter((e) => foreigns.includes(e)))}`,
    );
    assert.deepEqual(errors, []);
    assert.equal(udevs.length, truth.udev);
    assert.equal(foreigns.length, truth.foreign);
    assert.deepEqual(
      byWriter((e) => udevs.includes(e)),
      { 'udev-persistent-policy': truth.udev },
    );
    assert.deepEqual(
      byWriter((e) => foreigns.includes(e)),
      { 'another-writer': truth.foreign },
    );
    const from: Record<string, number> = {};
    for (const e of udevs)
      from[String(e.evidence.linkFileFrom)] = (from[String(e.evidence.linkFileFrom)] ?? 0) + 1;
    console.log(`      .link file evidence from: ${JSON.stringify(from)}`);
    for (const e of udevs) {
      assert.equal(e.evidence.persistentMac, e.mac);
      assert.equal(e.evidence.linkFile, '/usr/lib/systemd/network/99-default.link');
      assert.equal(e.evidence.policy, 'persistent');
    }
  });

  it("names udev's MACAddress= from a .link file udev-static-mac, with the file", async function () {
    const rounds = 10;
    for (let round = 0; round < rounds; round += 1) {
      const offset = udevd.logOffset();
      const before = rewrites.length;
      await ns.ip(['link', 'add', STATIC_NAME, 'type', 'vxlan', 'id', '2', 'dstport', '8472']);
      await udevd.waitForDeviceProcessed(STATIC_NAME, offset);
      await waitFor(() => rewrites.length > before, { timeoutMs: 5000, what: 'the static MAC' });
      await ns.ip(['link', 'del', STATIC_NAME]);
    }
    console.log(
      `      attribution: MACAddress= ${rewrites.length} of ${rounds} ${JSON.stringify([...new Set(rewrites.map((e) => e.writer))])}`,
    );
    assert.equal(rewrites.length, rounds);
    for (const e of rewrites) {
      assert.equal(e.mac, STATIC_MAC);
      assert.equal(e.writer, 'udev-static-mac', JSON.stringify(e));
      assert.equal(e.evidence.linkFile, '/run/systemd/network/10-static.link');
      assert.equal(e.evidence.macAddress, STATIC_MAC);
    }
    assert.deepEqual(errors, []);
  });
});
