/**
 * Tests for the test infrastructure in test/support/ and, through it, for the failure modes
 * flannel-guard exists to fix (udev MAC rewrite, inner checksums left to the NIC).
 *
 * Privileged parts need root, iproute2, ethtool, tcpdump and systemd-udevd; they are skipped
 * (not failed) when those are missing. Pure parser tests always run.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import {
  CommandError,
  Netns,
  execFileText,
  hasExited,
  liveNetnsNames,
  reapStale,
  waitFor,
} from './support/netns';
import { FLANNEL_LINK_MAC_POLICY_NONE, Udevd, randomMachineId } from './support/udevd';
import { IpLinkMonitor } from './support/ip-monitor';
import { FlannelTestbed, VTEP, type TestbedNode } from './support/testbed';
import {
  VxlanCapture,
  analyzeVxlanPcap,
  classifyL4Checksum,
  onesComplementSum,
  parsePcap,
} from './support/vxlan-checksum';

const NEG_TIMEOUT_MS = 1500; // bound for probes that are expected to fail

function toolsMissing(): string | null {
  if (process.platform !== 'linux') return 'not Linux';
  if (process.getuid?.() !== 0) return 'not root';
  for (const p of ['/lib/systemd/systemd-udevd', '/usr/bin/udevadm']) {
    if (!existsSync(p)) return `${p} missing`;
  }
  return null;
}

/** Nothing here is optional (skips count as failures in `npm test`): fail with the reason. */
function privileged(): void {
  const why = toolsMissing();
  if (why !== null) {
    assert.fail(`privileged test needs root, iproute2, ethtool, tcpdump and udev: ${why}`);
  }
}

/** PIDs of udevd/udev-worker/tcpdump processes living in a network namespace other than ours. */
function strayProcesses(): string[] {
  const ownNet = readlinkSync('/proc/self/ns/net');
  const stray: string[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const comm = readFileSync(`/proc/${entry}/comm`, 'utf8').trim();
      if (!/udevd|udev-worker|tcpdump/.test(comm)) continue;
      // Ours: started by this process (ip netns exec ... execs into them); another suite's are not.
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (parent !== process.pid) continue;
      if (readlinkSync(`/proc/${entry}/ns/net`) !== ownNet) stray.push(`${entry} ${comm}`);
    } catch {
      /* exited meanwhile */
    }
  }
  return stray;
}

/**
 * This mount namespace's mounts but the network namespaces' own (`nsfs /run/netns/...`): other
 * suites (and the other lane of `npm test`) add and remove those at any moment.
 */
function mounts(): string {
  return readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .filter((line) => !line.startsWith('nsfs /run/netns/'))
    .join('\n');
}

function isGone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return / Z /.test(stat.slice(stat.lastIndexOf(')') + 1, stat.lastIndexOf(')') + 4));
  } catch {
    return true;
  }
}

async function netnsList(): Promise<string[]> {
  return (await execFileText('ip', ['netns', 'list']))
    .split('\n')
    .map((l) => l.split(' ')[0] ?? '')
    .filter((n) => n !== '');
}

// ---------------------------------------------------------------------------------------------
// Synthetic pcap builder for the parser tests
// ---------------------------------------------------------------------------------------------

function ipv4Header(src: number[], dst: number[], proto: number, payloadLen: number): Buffer {
  const h = Buffer.alloc(20);
  h[0] = 0x45;
  h.writeUInt16BE(20 + payloadLen, 2);
  h.writeUInt16BE(0x4000, 6); // DF
  h[8] = 64;
  h[9] = proto;
  Buffer.from(src).copy(h, 12);
  Buffer.from(dst).copy(h, 16);
  h.writeUInt16BE(~onesComplementSum(h) & 0xffff, 10);
  return h;
}

function ether(payload: Buffer, type = 0x0800): Buffer {
  const e = Buffer.alloc(14);
  Buffer.from([2, 0, 0, 0, 0, 2]).copy(e, 0);
  Buffer.from([2, 0, 0, 0, 0, 1]).copy(e, 6);
  e.writeUInt16BE(type, 12);
  return Buffer.concat([e, payload]);
}

type CsumKind = 'complete' | 'partial' | 'bad';

/** An inner TCP segment with the requested checksum kind, VXLAN-encapsulated to UDP `port`. */
function vxlanTcpFrame(kind: CsumKind, port = 8472, payload = Buffer.from('hello, flannel!')) {
  const isrc = [198, 18, 1, 2];
  const idst = [198, 18, 2, 2];
  const tcp = Buffer.alloc(20);
  tcp.writeUInt16BE(40000, 0);
  tcp.writeUInt16BE(7777, 2);
  tcp.writeUInt32BE(1, 4);
  tcp[12] = 5 << 4;
  tcp[13] = 0x18; // PSH|ACK
  tcp.writeUInt16BE(65535, 14);
  const seg = Buffer.concat([tcp, payload]);
  const pseudo = Buffer.concat([
    Buffer.from(isrc),
    Buffer.from(idst),
    Buffer.from([0, 6]),
    Buffer.from([seg.length >> 8, seg.length & 0xff]),
  ]);
  const pseudoSum = onesComplementSum(pseudo);
  if (kind === 'partial') seg.writeUInt16BE(pseudoSum, 16);
  else if (kind === 'complete') seg.writeUInt16BE(~onesComplementSum(seg, pseudoSum) & 0xffff, 16);
  else seg.writeUInt16BE(0x1234, 16);
  const inner = ether(Buffer.concat([ipv4Header(isrc, idst, 6, seg.length), seg]));
  const vxlan = Buffer.from([0x08, 0, 0, 0, 0, 0, 1, 0]);
  const udpPayload = Buffer.concat([vxlan, inner]);
  const udp = Buffer.alloc(8);
  udp.writeUInt16BE(51000, 0);
  udp.writeUInt16BE(port, 2);
  udp.writeUInt16BE(8 + udpPayload.length, 4);
  const udpAll = Buffer.concat([udp, udpPayload]);
  return ether(
    Buffer.concat([ipv4Header([192, 0, 2, 11], [192, 0, 2, 12], 17, udpAll.length), udpAll]),
  );
}

function pcapFile(frames: Buffer[], bigEndian = false, snap = 262144): Buffer {
  const w32 = (b: Buffer, v: number, o: number): void => {
    if (bigEndian) b.writeUInt32BE(v, o);
    else b.writeUInt32LE(v, o);
  };
  const w16 = (b: Buffer, v: number, o: number): void => {
    if (bigEndian) b.writeUInt16BE(v, o);
    else b.writeUInt16LE(v, o);
  };
  const g = Buffer.alloc(24);
  w32(g, 0xa1b2c3d4, 0);
  w16(g, 2, 4);
  w16(g, 4, 6);
  w32(g, snap, 16);
  w32(g, 1, 20);
  const parts: Buffer[] = [g];
  for (const f of frames) {
    const incl = Math.min(f.length, snap);
    const r = Buffer.alloc(16);
    w32(r, 1, 0);
    w32(r, 2, 4);
    w32(r, incl, 8);
    w32(r, f.length, 12);
    parts.push(r, f.subarray(0, incl));
  }
  return Buffer.concat(parts);
}

// ---------------------------------------------------------------------------------------------

describe('test support', function () {
  this.timeout(20_000);
  let baseline = new Set<string>();

  before(async function () {
    baseline = new Set(liveNetnsNames());
  });

  describe('vxlan-checksum pcap analysis (no privileges)', function () {
    it('classifies complete, partial and bad inner TCP checksums', function () {
      const buf = pcapFile([
        vxlanTcpFrame('complete'),
        vxlanTcpFrame('partial'),
        vxlanTcpFrame('partial'),
        vxlanTcpFrame('bad'),
      ]);
      const r = analyzeVxlanPcap(buf);
      assert.equal(r.packets, 4);
      assert.equal(r.vxlanPackets, 4);
      assert.deepEqual(r.tcp, { complete: 1, partial: 2, bad: 1, truncated: 0, none: 0 });
      assert.equal(r.tcpWithPayload.partial, 2);
      assert.equal(r.segments[0]?.innerSrc, '198.18.1.2');
      assert.equal(r.segments[0]?.vni, 1);
    });

    it('reads big-endian files, ignores other UDP ports, filters by address', function () {
      const buf = pcapFile([vxlanTcpFrame('complete'), vxlanTcpFrame('partial', 4789)], true);
      assert.equal(parsePcap(buf).records.length, 2);
      const r = analyzeVxlanPcap(buf);
      assert.equal(r.vxlanPackets, 1);
      assert.deepEqual(r.tcp, { complete: 1, partial: 0, bad: 0, truncated: 0, none: 0 });
      assert.equal(analyzeVxlanPcap(buf, { outerSrc: '192.0.2.99' }).vxlanPackets, 0);
      assert.equal(analyzeVxlanPcap(buf, { innerSrc: '198.18.9.9' }).tcp.complete, 0);
    });

    it('reports truncated captures instead of guessing', function () {
      const frame = vxlanTcpFrame('complete', 8472, Buffer.alloc(400, 0x5a));
      const r = analyzeVxlanPcap(pcapFile([frame], false, frame.length - 100));
      assert.equal(r.tcp.truncated, 1);
      // A partial checksum is still recognisable from the header alone.
      const p = vxlanTcpFrame('partial', 8472, Buffer.alloc(400, 0x5a));
      assert.equal(analyzeVxlanPcap(pcapFile([p], false, p.length - 100)).tcp.partial, 1);
    });

    it('rejects non-pcap input and computes RFC 1071 sums', function () {
      assert.throws(() => parsePcap(Buffer.from('not a pcap file at all....')), /bad magic/);
      // RFC 1071 example: 0001 f203 f4f5 f6f7 → sum 0xddf2.
      assert.equal(
        onesComplementSum(Buffer.from([0, 1, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
        0xddf2,
      );
      const src = Buffer.from([198, 18, 1, 2]);
      const dst = Buffer.from([198, 18, 2, 2]);
      const udp = Buffer.from([0, 1, 0, 2, 0, 8, 0, 0]);
      assert.equal(classifyL4Checksum(src, dst, 17, udp, 8), 'none');
    });
  });

  describe('Netns', function () {
    beforeEach(function () {
      privileged();
    });

    it('creates a namespace with lo up, runs commands, and destroys idempotently', async function () {
      const ns = await Netns.create();
      assert.match(ns.name, new RegExp(`^fgt-${process.pid}-\\d+$`));
      assert.equal(ns.path, `/run/netns/${ns.name}`);
      assert.ok((await netnsList()).includes(ns.name));
      const links =
        await ns.ipJson<{ ifname: string; operstate: string; flags: string[] }[]>(
          'link show dev lo',
        );
      assert.ok(links[0]?.flags.includes('UP'));
      assert.equal((await ns.run(['cat'], { input: 'stdin ok' })).stdout, 'stdin ok');
      await assert.rejects(ns.run(['ip', 'link', 'show', 'nonexistent0']), (err: unknown) => {
        assert.ok(err instanceof CommandError);
        assert.match(err.message, /does not exist/);
        return true;
      });
      const r = await ns.run(['sh', '-c', 'exit 3'], { allowFailure: true });
      assert.equal(r.code, 3);
      const t = await ns.run(['sleep', '5'], { allowFailure: true, timeoutMs: 100 });
      assert.equal(t.timedOut, true);
      const child = ns.spawn(['sleep', '30']);
      const pid = child.pid ?? -1;
      await ns.destroy();
      await ns.destroy();
      assert.ok(hasExited(child));
      assert.ok(isGone(pid));
      assert.ok(!(await netnsList()).includes(ns.name));
      assert.ok(!liveNetnsNames().includes(ns.name));
    });

    it("reapStale removes what a gone PID left, detaching mounts first, and keeps a live one's", async function () {
      // Objects of the shape helpers make, under a prefix of this test's own (`fgtreap`).
      const gone = spawn('true');
      await new Promise((resolve) => gone.on('close', resolve));
      const live = spawn('sleep', ['30'], { stdio: 'ignore' }); // not a node process: still live
      const deadPid = gone.pid ?? -1;
      const livePid = live.pid ?? -1;
      const outside = mkdtempSync(join(tmpdir(), 'fg-reap-outside-'));
      writeFileSync(join(outside, 'sentinel'), 'the machine');
      const deadDir = mkdtempSync(join(tmpdir(), `fgtreap-dir-${deadPid}-`));
      const liveDir = mkdtempSync(join(tmpdir(), `fgtreap-dir-${livePid}-`));
      const namespaces = [`fgtreap-${deadPid}-1`, `fgtreap-x-${livePid}-1`];
      const mounts = [join(deadDir, 'proc'), join(deadDir, 'bind')];
      try {
        for (const name of namespaces) await execFileText('ip', ['netns', 'add', name]);
        for (const point of mounts) mkdirSync(point);
        await execFileText('mount', ['-t', 'tmpfs', 'fgtreap', mounts[0] ?? '']);
        writeFileSync(join(mounts[0] ?? '', 'inside'), 'x');
        await execFileText('mount', ['--bind', outside, mounts[1] ?? '']);
        const reaped = await reapStale('fgtreap');
        assert.deepEqual(reaped.namespaces, [namespaces[0]]);
        assert.deepEqual(reaped.tempDirs, [basename(deadDir)]);
        assert.ok(!existsSync(deadDir));
        assert.ok(existsSync(liveDir));
        assert.deepEqual(
          (await netnsList()).filter((name) => name.startsWith('fgtreap')),
          [namespaces[1]],
        );
        assert.equal(readFileSync(join(outside, 'sentinel'), 'utf8'), 'the machine');
        assert.ok(!readFileSync('/proc/self/mountinfo', 'utf8').includes(deadDir));
      } finally {
        live.kill('SIGKILL');
        for (const point of mounts) spawnSync('umount', ['--lazy', point], { stdio: 'ignore' });
        for (const name of namespaces) spawnSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
        for (const dir of [deadDir, liveDir, outside])
          rmSync(dir, { recursive: true, force: true });
      }
    });

    it('waitFor is bounded and reports what it waited for', async function () {
      const start = Date.now();
      await assert.rejects(
        waitFor(() => false, { timeoutMs: 100, intervalMs: 10, what: 'godot' }),
        /timed out after 100 ms waiting for godot/,
      );
      assert.ok(Date.now() - start < 1000);
      let n = 0;
      assert.equal(
        await waitFor(() => (++n >= 3 ? 'yes' : ''), { timeoutMs: 1000, what: 'n' }),
        'yes',
      );
    });

    for (const how of ['exit', 'SIGINT', 'uncaught'] as const) {
      it(`leaves nothing behind when the test process ends by ${how}`, async function () {
        const mod = join(__dirname, 'support', 'netns.js');
        const script = `
          const { Netns } = require(${JSON.stringify(mod)});
          (async () => {
            const ns = await Netns.create('fgtcrash');
            const c = ns.spawn(['sleep', '30']);
            console.log(JSON.stringify({ name: ns.name, pid: c.pid }));
            if (${JSON.stringify(how)} === 'exit') process.exit(7);
            if (${JSON.stringify(how)} === 'uncaught') setTimeout(() => { throw new Error('boom'); }, 10);
            setTimeout(() => {}, 20000);
          })();`;
        const child = spawn(process.execPath, ['-e', script], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        child.stdout.on('data', (d: Buffer) => (out += d.toString()));
        const info = await waitFor(
          () => {
            const line = out.split('\n').find((l) => l.startsWith('{'));
            return line === undefined
              ? undefined
              : (JSON.parse(line) as { name: string; pid: number });
          },
          { timeoutMs: 5000, what: 'child to create its netns' },
        );
        if (how === 'SIGINT') child.kill('SIGINT');
        await waitFor(() => hasExited(child), { timeoutMs: 5000, what: 'child exit' });
        assert.ok(!(await netnsList()).includes(info.name), `${info.name} left behind`);
        await waitFor(() => isGone(info.pid), { timeoutMs: 2000, what: 'sleep to be killed' });
      });
    }
  });

  describe('Udevd', function () {
    beforeEach(function () {
      privileged();
    });

    let ns: Netns | undefined;
    const udevds: Udevd[] = [];
    afterEach(async function () {
      await Promise.all(udevds.splice(0).map((u) => u.stop()));
      await ns?.destroy();
      ns = undefined;
    });

    it('rewrites a new VXLAN MAC (persistent policy) within milliseconds, privately', async function () {
      ns = await Netns.create();
      const before = mounts();
      const u = await Udevd.start(ns);
      udevds.push(u);
      assert.ok(u.running);
      assert.match(u.log(), /99-default\.link/);
      const mon = await IpLinkMonitor.start(ns);
      try {
        const off = u.logOffset();
        await ns.ip(`link add ${VTEP} type vxlan id 1 dstport 8472 nolearning`);
        const first = await mon.waitFor((e) => e.ifname === VTEP, 2000);
        const second = await mon.waitFor((e) => e.ifname === VTEP && e.mac !== first.mac, 2000);
        const m = await u.waitForLog(
          /flannel\.1: Applying persistent MAC address: (\S+)/,
          2000,
          off,
        );
        await u.waitForDeviceProcessed(VTEP, off);
        assert.equal(m[1], second.mac);
        const ms = second.timeMs - first.timeMs;
        console.log(`      udev MAC rewrite ${ms.toFixed(2)} ms after RTM_NEWLINK`);
        assert.ok(ms >= 0 && ms < 1000, `rewrite took ${ms} ms`);
        assert.equal((await ns.readFile(`/sys/class/net/${VTEP}/addr_assign_type`)).trim(), '3');
        // Mounts exist only in udevd's mount namespace.
        const inside = (await u.exec(['cat', '/proc/self/mounts'])).stdout;
        assert.match(inside, / \/etc\/machine-id /);
        assert.match(inside, /^fgt-run \/run tmpfs/m);
        assert.equal(mounts(), before);
      } finally {
        await mon.stop();
      }
      await u.stop();
      await u.stop();
      assert.ok(!u.running);
      assert.deepEqual(await ns.pids(), []);
      assert.equal(mounts(), before);
      assert.doesNotMatch(mounts(), /machine-id/);
    });

    it('derives different persistent MACs from different machine-ids', async function () {
      const macs: string[] = [];
      for (const id of [randomMachineId(), randomMachineId()]) {
        const n = await Netns.create();
        try {
          const u = await Udevd.start(n, { machineId: id });
          udevds.push(u);
          const off = u.logOffset();
          await n.ip(`link add ${VTEP} type vxlan id 1 dstport 8472 nolearning`);
          const m = await u.waitForLog(
            /flannel\.1: Applying persistent MAC address: (\S+)/,
            3000,
            off,
          );
          macs.push(m[1] ?? '');
          await u.stop();
        } finally {
          await n.destroy();
        }
      }
      assert.equal(macs.length, 2);
      assert.notEqual(macs[0], macs[1]);
    });

    it('applies extra .link files and rules', async function () {
      ns = await Netns.create();
      const u = await Udevd.start(ns, {
        linkFiles: { '10-flannel.link': FLANNEL_LINK_MAC_POLICY_NONE },
        rules: {
          '90-fgt-test.rules':
            'ACTION=="add", SUBSYSTEM=="net", KERNEL=="flannel.*", ' +
            'RUN+="/usr/sbin/ethtool -K %k tx-checksum-ip-generic off"\n',
        },
      });
      udevds.push(u);
      const off = u.logOffset();
      const out = await ns.ipBatch(
        [`link add ${VTEP} type vxlan id 1 dstport 8472 nolearning`, `link show dev ${VTEP}`],
        { json: true },
      );
      const created = (JSON.parse(out) as { address: string }[])[0]?.address;
      await u.waitForDeviceProcessed(VTEP, off);
      assert.match(
        u.log().slice(off),
        /Config file \/run\/systemd\/network\/10-flannel\.link is applied/,
      );
      assert.doesNotMatch(u.log().slice(off), /Applying persistent MAC/);
      const now = (await ns.ipJson<{ address: string }[]>(`link show dev ${VTEP}`))[0]?.address;
      assert.equal(now, created);
      assert.equal((await ns.readFile(`/sys/class/net/${VTEP}/addr_assign_type`)).trim(), '1');
      const k = (await ns.run(['ethtool', '-k', VTEP])).stdout;
      assert.match(k, /tx-checksum-ip-generic: off/);
    });

    it('rejects bad options before starting anything', async function () {
      ns = await Netns.create();
      await assert.rejects(Udevd.start(ns, { machineId: 'xyz' }), /bad machine-id/);
      await assert.rejects(Udevd.start(ns, { linkFiles: { '../x.link': '' } }), /bad link file/);
      assert.deepEqual(await ns.pids(), []);
    });
  });

  describe('FlannelTestbed without udev', function () {
    let bed: FlannelTestbed | undefined;
    before(async function () {
      privileged();
      bed = await FlannelTestbed.create({ nodes: 2, udev: false });
    });
    after(async function () {
      await bed?.destroy();
    });

    it('publishes the real MAC and pod-to-pod ICMP, TCP and UDP work', async function () {
      const b = bed as FlannelTestbed;
      const [n1, n2] = [b.node(1), b.node(2)];
      for (const n of b.nodes) assert.equal(await n.currentMac(), n.publishedMac);
      assert.equal(await n1.addrAssignType(), 1);
      const neigh = await n2.neighbours();
      assert.ok(neigh.some((e) => e.dst === n1.vtepIp && e.lladdr === n1.publishedMac));
      const fdb = await n2.fdb();
      assert.ok(fdb.some((e) => e.mac === n1.publishedMac && e.dst === n1.underlayIp));
      assert.equal(await b.ping(n1, n2), true);
      assert.equal(await b.ping(n2, n1), true);
      assert.equal(await b.tcp(n1, n2, { bytes: 50_000 }), true);
      assert.equal(await b.udp(n2, n1), true);
    });

    it('restartFlannel re-creates the VTEP with a new MAC and traffic keeps working', async function () {
      const b = bed as FlannelTestbed;
      const [n1, n2] = [b.node(1), b.node(2)];
      const old = n1.publishedMac;
      const mac = await b.restartFlannel(n1);
      assert.notEqual(mac, old);
      assert.equal(await n1.currentMac(), mac);
      const fdb = await n2.fdb();
      assert.ok(fdb.some((e) => e.mac === mac));
      assert.ok(!fdb.some((e) => e.mac === old), 'stale FDB entry for the old MAC');
      assert.equal(await b.ping(n1, n2), true);
      assert.equal(await b.tcp(n2, n1), true);
    });

    it('inner TCP checksums are partial with tx-checksum-ip-generic on, complete with off', async function () {
      const b = bed as FlannelTestbed;
      const [n1, n2] = [b.node(1), b.node(2)];
      const measure = async (): Promise<ReturnType<typeof analyzeVxlanPcap>> => {
        const cap = await VxlanCapture.start(n1.ns);
        try {
          assert.equal(await b.tcp(n1, n2, { bytes: 20_000 }), true);
        } catch (e) {
          await cap.discard();
          throw e;
        }
        return cap.stop({ outerSrc: n1.underlayIp, innerSrc: n1.podIp });
      };
      assert.equal(await n1.feature('tx-checksum-ip-generic'), 'on');
      const on = await measure();
      // Data segments are what a checksum-broken NIC would corrupt. (Control segments are partial
      // too here, except TIME_WAIT ACKs/RSTs built by ip_send_unicast_reply, which are complete.)
      assert.ok(on.tcpWithPayload.partial > 0, JSON.stringify(on.tcp));
      assert.equal(on.tcpWithPayload.complete, 0);
      assert.equal(on.tcp.bad, 0);
      await n1.setTxChecksum(false);
      const off = await measure();
      assert.ok(off.tcpWithPayload.complete > 0, JSON.stringify(off.tcp));
      assert.equal(off.tcp.partial, 0);
      assert.equal(off.tcp.bad, 0);
      assert.equal(off.oversize, 0, 'no GSO super-packets once TSO is gone with the checksum');
      // The underlay matters too: with tx checksumming off on the veth eth0, the kernel resolves
      // CHECKSUM_PARTIAL in software before the packet reaches the tap.
      await n1.setTxChecksum(true);
      await n1.ns.run(['ethtool', '-K', 'eth0', 'tx', 'off']);
      try {
        const ethOff = await measure();
        assert.equal(ethOff.tcp.partial, 0);
        assert.ok(ethOff.tcp.complete > 0);
      } finally {
        await n1.ns.run(['ethtool', '-K', 'eth0', 'tx', 'on']);
      }
      console.log(
        `      on: ${JSON.stringify(on.tcp)} (GSO ${on.oversize}); off: ${JSON.stringify(off.tcp)}`,
      );
    });
  });

  describe('FlannelTestbed with udev (MACAddressPolicy=persistent)', function () {
    let bed: FlannelTestbed | undefined;
    before(async function () {
      privileged();
      bed = await FlannelTestbed.create({ nodes: 2, udev: true });
    });
    after(async function () {
      await bed?.destroy();
    });

    it('publishes the pre-udev MAC; udev rewrites it and cross-node traffic fails', async function () {
      const b = bed as FlannelTestbed;
      const [n1, n2] = [b.node(1), b.node(2)];
      for (const n of b.nodes) {
        const cur = await n.currentMac();
        assert.notEqual(cur, n.publishedMac, `${n.name}: udev did not rewrite`);
        assert.equal(n.lastCreation?.udevAppliedMac, cur);
        assert.equal(await n.addrAssignType(), 3);
      }
      assert.notEqual(await n1.currentMac(), await n2.currentMac());
      assert.equal(await b.ping(n1, n2, { timeoutMs: NEG_TIMEOUT_MS }), false);
      assert.equal(await b.tcp(n1, n2, { timeoutMs: NEG_TIMEOUT_MS }), false);
    });

    it('setting the published MAC back flushes neighbours; re-adding them restores traffic', async function () {
      const b = bed as FlannelTestbed;
      const [n1, n2] = [b.node(1), b.node(2)];
      for (const n of b.nodes) {
        const fdbBefore = await n.fdb();
        assert.equal((await n.neighbours()).length, 1);
        await n.setVtepMac(n.publishedMac);
        assert.equal(await n.currentMac(), n.publishedMac);
        assert.equal(await n.addrAssignType(), 3);
        assert.deepEqual(await n.neighbours(), [], 'permanent neighbours flushed by MAC change');
        assert.deepEqual(await n.fdb(), fdbBefore, 'FDB entries survive a MAC change');
      }
      assert.equal(await b.ping(n1, n2, { timeoutMs: NEG_TIMEOUT_MS }), false);
      for (const n of b.nodes) await b.programLocal(n);
      assert.equal(await b.ping(n1, n2), true);
      assert.equal(await b.tcp(n2, n1), true);
    });

    it('a flannel restart under udev breaks traffic again (new random MAC, rewritten)', async function () {
      const b = bed as FlannelTestbed;
      const [n1, n2] = [b.node(1), b.node(2)];
      const before = n1.publishedMac;
      const mac = await b.restartFlannel(n1);
      assert.notEqual(mac, before);
      assert.notEqual(await n1.currentMac(), mac);
      assert.equal(n1.lastCreation?.udevAppliedMac, await n1.currentMac());
      const neigh = await n2.neighbours();
      assert.ok(
        neigh.some((e) => e.dst === n1.vtepIp && e.lladdr === mac),
        'peer has the new MAC',
      );
      assert.equal(await b.ping(n2, n1, { timeoutMs: NEG_TIMEOUT_MS }), false);
    });
  });

  describe('FlannelTestbed with udev and 10-flannel.link MACAddressPolicy=none', function () {
    let bed: FlannelTestbed | undefined;
    before(async function () {
      privileged();
      bed = await FlannelTestbed.create({
        nodes: 3,
        udev: true,
        linkFiles: { '10-flannel.link': FLANNEL_LINK_MAC_POLICY_NONE },
      });
    });
    after(async function () {
      await bed?.destroy();
    });

    it('keeps the MAC and traffic works between all three nodes', async function () {
      const b = bed as FlannelTestbed;
      for (const n of b.nodes) {
        assert.equal(await n.currentMac(), n.publishedMac);
        assert.equal(n.lastCreation?.udevAppliedMac, null);
        assert.equal(await n.addrAssignType(), 1);
      }
      const pairs: [TestbedNode, TestbedNode][] = [
        [b.node(1), b.node(2)],
        [b.node(2), b.node(3)],
        [b.node(3), b.node(1)],
      ];
      for (const [x, y] of pairs) {
        assert.equal(await b.ping(x, y), true, `${x.name} → ${y.name} ping`);
        assert.equal(await b.tcp(x, y), true, `${x.name} → ${y.name} tcp`);
      }
    });
  });

  describe('teardown', function () {
    it('leaves no namespaces, udevd or tcpdump processes of ours', async function () {
      privileged();
      const mine = liveNetnsNames().filter((n) => !baseline.has(n));
      assert.deepEqual(mine, []);
      const listed = (await netnsList()).filter(
        (n) => n.includes(`-${process.pid}-`) && !baseline.has(n),
      );
      assert.deepEqual(listed, []);
      assert.deepEqual(strayProcesses(), []);
    });
  });
});
