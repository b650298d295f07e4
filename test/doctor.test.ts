/**
 * `flannel-guard doctor` on the devices: each broken state built for real in the flannel-like
 * test bed (real systemd-udevd per node) or in a throw-away namespace, the verdicts asserted
 * through the command as a user runs it (--json, exit status), and --fix proven by the state
 * and the traffic afterwards. Two facts no namespace can fake - a VMXNET3 NIC and a 5.7
 * kernel - are given to the library call (probe / kernelRelease); the rest is the real kernel.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

import {
  runDoctor,
  DOCTOR_SCHEMA,
  CHECK_IDS,
  type CheckResult,
  type DoctorReport,
} from '../lib/doctor/index';
import {
  execFile,
  Netns,
  registerSyncCleanup,
  snapshotTree,
  tempDirPrefix,
  trackChild,
  waitFor,
} from './support/netns';
import { runDoctorCli, type DoctorRun } from './support/doctor-run';
import { prng } from './support/prng';
import { FlannelTestbed, VTEP, type TestbedNode } from './support/testbed';

const DEFAULT_LINK = '/usr/lib/systemd/network/99-default.link';

function tree(): string {
  const root = mkdtempSync(tempDirPrefix('droot'));
  registerSyncCleanup(() => rmSync(root, { recursive: true, force: true }));
  mkdirSync(dirname(join(root, DEFAULT_LINK)), { recursive: true });
  copyFileSync(DEFAULT_LINK, join(root, DEFAULT_LINK));
  return root;
}

function check(
  report: DoctorReport,
  id: CheckResult['id'],
  device: string | null = VTEP,
): CheckResult {
  const found = report.checks.find((c) => c.id === id && c.device === device);
  assert.ok(
    found,
    `no ${id} check for ${device ?? 'the node'} in ${JSON.stringify(report.checks.map((c) => `${c.id}/${c.device ?? ''}`))}`,
  );
  return found;
}

function peerFlag(peer: TestbedNode, mac = peer.publishedMac): string[] {
  return ['--peer', `${peer.vtepIp}=${mac}@${peer.underlayIp}`];
}

async function doctor(args: readonly string[]): Promise<DoctorRun & { report: DoctorReport }> {
  const run = await runDoctorCli([...args, '--json']);
  assert.ok(run.report, `no JSON report (exit ${run.code}): ${run.stdout}\n${run.stderr}`);
  return run as DoctorRun & { report: DoctorReport };
}

describe('flannel-guard doctor in the test bed (real systemd-udevd)', function () {
  this.timeout(120_000);
  let bed: FlannelTestbed;
  let root: string;
  let n1: TestbedNode;
  let n2: TestbedNode;
  const base = (node: TestbedNode): string[] => ['--root', root, '--netns', node.ns.name];

  before(async function () {
    bed = await FlannelTestbed.create({ nodes: 2, udev: true });
    [n1, n2] = [bed.node(1), bed.node(2)];
    root = tree();
  });

  after(async function () {
    await bed.destroy();
  });

  it("vtep-mac fails after udev's rewrite and names both MACs; the cause is the .link check's fail", async function () {
    assert.equal(await bed.ping(n1, n2, { timeoutMs: 1500 }), false, 'broken before');
    const run = await doctor([...base(n1), '--mac', `${VTEP}=${n1.publishedMac}`, ...peerFlag(n2)]);
    assert.equal(run.code, 1);
    const mac = check(run.report, 'vtep-mac');
    assert.equal(mac.verdict, 'fail');
    assert.ok(
      mac.summary.includes(await n1.currentMac()) && mac.summary.includes(n1.publishedMac),
      mac.summary,
    );
    assert.ok(
      (mac.fix ?? '').includes(
        `flannel-guard doctor --root ${root} --netns ${n1.ns.name} --fix --mac flannel.1=`,
      ),
      mac.fix ?? '',
    );
    // Under the node's own udev root (its machine-id, its database) the writer is proven.
    const udevRoot = `/proc/${String(n1.udevd?.pid)}/root`;
    const proven = await doctor([
      ...['--root', udevRoot, '--netns', n1.ns.name],
      ...['--mac', `${VTEP}=${n1.publishedMac}`],
    ]);
    assert.ok(
      check(proven.report, 'vtep-mac').evidence.some((line) =>
        /^written by udev-persistent-policy: .*99-default\.link, udev-database.*siphash24/.test(
          line,
        ),
      ),
      JSON.stringify(check(proven.report, 'vtep-mac').evidence),
    );
    const links = check(run.report, 'link-files');
    assert.equal(links.verdict, 'fail');
    assert.match(
      links.summary,
      /99-default\.link applies to flannel\.1: MACAddressPolicy=persistent/,
    );
    // udev's write made it 3: a later re-trigger would not rewrite again.
    assert.equal(check(run.report, 'addr-assign-type').verdict, 'ok');
    // Node 1's own entries for node 2 are right; node 2's entries for node 1 are what broke.
    assert.equal(check(run.report, 'neighbours').verdict, 'ok');
    const remote = await doctor([
      ...base(n2),
      '--mac',
      `${VTEP}=${n2.publishedMac}`,
      ...peerFlag(n1),
    ]);
    assert.equal(check(remote.report, 'vtep-mac').verdict, 'fail');
  });

  it('--fix sets the published MAC back, restores the flushed neighbour entries, prints it all, and pods talk again', async function () {
    for (const [node, peer] of [
      [n1, n2],
      [n2, n1],
    ] as const) {
      const rewritten = await node.currentMac();
      const run = await runDoctorCli([
        ...base(node),
        '--fix',
        '--mac',
        `${VTEP}=${node.publishedMac}`,
        ...peerFlag(peer),
      ]);
      assert.ok(
        run.stdout.includes(`flannel.1: MAC ${rewritten} -> ${node.publishedMac}`),
        run.stdout,
      );
      assert.ok(
        run.stdout.includes(
          `flannel.1: neighbour ${peer.vtepIp} lladdr ${peer.publishedMac} permanent (flushed-by-mac-change)`,
        ),
        run.stdout,
      );
      assert.match(run.stdout, /tx-checksum-ip-generic on -> off/);
      assert.match(run.stdout, /^OK +vtep-mac/m);
      assert.equal(await node.currentMac(), node.publishedMac);
      const neighbours = await node.neighbours();
      assert.deepEqual(
        neighbours.map((n) => [n.dst, n.lladdr, n.state?.includes('PERMANENT')]),
        [[peer.vtepIp, peer.publishedMac, true]],
      );
    }
    assert.equal(await bed.ping(n1, n2), true);
    assert.equal(await bed.tcp(n1, n2, { bytes: 20_000 }), true);
    assert.equal(await bed.udp(n2, n1), true);
    const after = await doctor([
      ...base(n1),
      '--mac',
      `${VTEP}=${n1.publishedMac}`,
      ...peerFlag(n2),
    ]);
    for (const id of ['vtep-mac', 'neighbours', 'offload', 'link-files'] as const) {
      assert.equal(check(after.report, id).verdict, 'ok', id);
    }
  });

  it('neighbours: a missing entry, a wrong MAC, a non-permanent entry and a missing FDB entry each fail against --peer', async function () {
    const args = [...base(n1), '--mac', `${VTEP}=${n1.publishedMac}`, ...peerFlag(n2)];
    const cases: [string, () => Promise<void>, RegExp][] = [
      [
        'missing',
        () => n1.ns.ip(['neigh', 'del', n2.vtepIp, 'dev', VTEP]).then(() => undefined),
        /no neighbour entry for 198\.18\.2\.0/,
      ],
      [
        'wrong MAC',
        () =>
          n1.ns
            .ip([
              'neigh',
              'replace',
              n2.vtepIp,
              'lladdr',
              '0e:99:99:99:99:99',
              'dev',
              VTEP,
              'nud',
              'permanent',
            ])
            .then(() => undefined),
        /198\.18\.2\.0 points at 0e:99:99:99:99:99, published/,
      ],
      [
        'not permanent',
        () =>
          n1.ns
            .ip([
              'neigh',
              'replace',
              n2.vtepIp,
              'lladdr',
              n2.publishedMac,
              'dev',
              VTEP,
              'nud',
              'reachable',
            ])
            .then(() => undefined),
        /198\.18\.2\.0 is not permanent/,
      ],
      [
        'FDB entry missing',
        () =>
          n1.ns
            .bridge(['fdb', 'del', n2.publishedMac, 'dev', VTEP, 'dst', n2.underlayIp, 'self'])
            .then(() => undefined),
        /no FDB entry .* dst 192\.0\.2\.12/,
      ],
    ];
    for (const [what, breakIt, expected] of cases) {
      await breakIt();
      const run = await doctor(args);
      const result = check(run.report, 'neighbours');
      assert.equal(result.verdict, 'fail', what);
      assert.match(result.summary, expected, what);
      assert.equal(run.code, 1, what);
      const fixed = await runDoctorCli([...args, '--fix']);
      assert.match(fixed.stdout, /^OK +neighbours/m, `${what}: ${fixed.stdout}`);
      assert.equal(await bed.ping(n1, n2), true, `${what}: traffic after --fix`);
    }
  });

  it('neighbours without --peer: an ARP entry whose MAC has no FDB entry fails; a stale FDB entry against --peer warns', async function () {
    await n1.ns.ip([
      'neigh',
      'replace',
      '198.18.9.0',
      'lladdr',
      '0e:09:09:09:09:09',
      'dev',
      VTEP,
      'nud',
      'permanent',
    ]);
    try {
      const run = await doctor(base(n1));
      const result = check(run.report, 'neighbours');
      assert.equal(result.verdict, 'fail');
      assert.match(
        result.summary,
        /198\.18\.9\.0 points at 0e:09:09:09:09:09, which has no FDB entry/,
      );
    } finally {
      await n1.ns.ip(['neigh', 'del', '198.18.9.0', 'dev', VTEP]);
    }
    await n1.ns.bridge([
      'fdb',
      'append',
      '0e:08:08:08:08:08',
      'dev',
      VTEP,
      'dst',
      '192.0.2.99',
      'self',
      'permanent',
    ]);
    try {
      const run = await doctor([
        ...base(n1),
        '--mac',
        `${VTEP}=${n1.publishedMac}`,
        ...peerFlag(n2),
      ]);
      const result = check(run.report, 'neighbours');
      assert.equal(result.verdict, 'warn');
      assert.match(
        result.summary,
        /FDB entry 0e:08:08:08:08:08 dst 192\.0\.2\.99 is not a published MAC/,
      );
      assert.equal(run.code, 0, 'a warning alone exits 0');
    } finally {
      await n1.ns.bridge([
        'fdb',
        'del',
        '0e:08:08:08:08:08',
        'dev',
        VTEP,
        'dst',
        '192.0.2.99',
        'self',
      ]);
    }
  });

  it('offload: TX checksum offload on warns; --fix turns it off and prints what the kernel changed with it', async function () {
    await n2.setTxChecksum(true);
    const run = await doctor(base(n2));
    const result = check(run.report, 'offload');
    assert.equal(result.verdict, 'warn');
    assert.deepEqual(result.evidence, ['tx-checksum-ip-generic: on (policy off)']);
    // The command in the fix line, pasted into a shell, acts on the namespace examined.
    const pasted = /\((ip netns exec \S+ ethtool -K [^;]+);/.exec(result.fix ?? '')?.[1];
    assert.ok(pasted !== undefined && pasted.includes(n2.ns.name), result.fix ?? '');
    await execFile('sh', ['-c', pasted]);
    assert.equal(await n2.feature('tx-checksum-ip-generic'), 'off');
    await n2.setTxChecksum(true);
    const fixed = await runDoctorCli([...base(n2), '--fix']);
    assert.match(
      fixed.stdout,
      /flannel\.1: tx-checksum-ip-generic on -> off \(the kernel also changed tx-tcp-segmentation on -> off/,
    );
    assert.equal(await n2.feature('tx-checksum-ip-generic'), 'off');
    assert.equal(check((await doctor(base(n2))).report, 'offload').verdict, 'ok');
  });

  it('underlay-driver: the veth underlay read with ETHTOOL_GDRVINFO is fine; VMXNET3 with UDP 8472 and offload on fails', async function () {
    const real = await doctor(base(n1));
    const result = check(real.report, 'underlay-driver');
    assert.equal(result.verdict, 'ok');
    assert.match(result.summary, /^eth0 \(veth\)/);
    const vmxnet3 = {
      driverInfo: (name: string) =>
        Promise.resolve({
          driver: name === 'eth0' ? 'vmxnet3' : 'vxlan',
          version: '1.7.0.0-k-NAPI',
          firmwareVersion: '',
          busInfo: '0000:0b:00.0',
        }),
    };
    await n1.setTxChecksum(true);
    const bad = await runDoctor({ root, netns: n1.ns.name, probe: vmxnet3 });
    const failed = check(bad, 'underlay-driver');
    assert.equal(failed.verdict, 'fail');
    assert.match(failed.summary, /VMXNET3 .* UDP 8472 with TX checksum offload on/);
    assert.match(failed.fix ?? '', /tx-checksum-ip-generic off/);
    // The parent's tunnel offloads (a veth has them on): a recommendation, never a change.
    assert.ok(
      failed.evidence.includes('eth0: tx-udp_tnl-segmentation, tx-udp_tnl-csum-segmentation on'),
      failed.evidence.join('\n'),
    );
    assert.match(
      failed.fix ?? '',
      /The parent NIC is left as it is: .*ethtool -K eth0 tx-udp_tnl-segmentation off tx-udp_tnl-csum-segmentation off/,
    );
    const parentBefore = (await n1.ns.run(['ethtool', '-k', 'eth0'])).stdout;
    await runDoctor({ root, netns: n1.ns.name, probe: vmxnet3, fix: true });
    assert.equal((await n1.ns.run(['ethtool', '-k', 'eth0'])).stdout, parentBefore);
    assert.equal(
      await n1.feature('tx-checksum-ip-generic'),
      'off',
      '--fix turned it off on flannel.1',
    );
    await n1.setTxChecksum(false);
    const good = await runDoctor({ root, netns: n1.ns.name, probe: vmxnet3 });
    assert.equal(check(good, 'underlay-driver').verdict, 'ok');
    // Another port: not the known bad combination.
    await n1.ns.ip([
      'link',
      'add',
      'flannel.9',
      'type',
      'vxlan',
      'id',
      '9',
      'dstport',
      '4789',
      'dev',
      'eth0',
    ]);
    try {
      await n1.ns.run(['ethtool', '-K', 'flannel.9', 'tx-checksum-ip-generic', 'on']);
      const other = await runDoctor({
        root,
        netns: n1.ns.name,
        probe: vmxnet3,
        interfaces: ['flannel.9'],
      });
      assert.equal(check(other, 'underlay-driver', 'flannel.9').verdict, 'ok');
    } finally {
      await n1.ns.ip(['link', 'del', 'flannel.9']);
    }
  });

  it('random-fully: a real MASQUERADE --random-fully rule in the node fails on a 5.7 kernel with offload on', async function () {
    await n1.ns.run([
      'iptables',
      '-t',
      'nat',
      '-A',
      'POSTROUTING',
      '-s',
      '198.18.0.0/16',
      '!',
      '-d',
      '198.18.0.0/16',
      '-j',
      'MASQUERADE',
      '--random-fully',
    ]);
    try {
      await n1.setTxChecksum(true);
      const old = await runDoctor({ root, netns: n1.ns.name, kernelRelease: '5.4.0-42-generic' });
      const failed = check(old, 'random-fully');
      assert.equal(failed.verdict, 'fail', JSON.stringify(failed));
      assert.ok(
        failed.evidence.some((line) =>
          /MASQUERADE --random-fully|masquerade fully-random/.test(line),
        ),
        failed.evidence.join('\n'),
      );
      assert.equal(
        check(await runDoctor({ root, netns: n1.ns.name, kernelRelease: '5.7.19' }), 'random-fully')
          .verdict,
        'fail',
      );
      assert.equal(
        check(await runDoctor({ root, netns: n1.ns.name, kernelRelease: '5.8.0' }), 'random-fully')
          .verdict,
        'ok',
      );
      // This machine's kernel is newer than 5.7: fine even with the rule.
      assert.equal(
        check(await runDoctor({ root, netns: n1.ns.name }), 'random-fully').verdict,
        'ok',
      );
      await n1.setTxChecksum(false);
      assert.equal(
        check(await runDoctor({ root, netns: n1.ns.name, kernelRelease: '5.4.0' }), 'random-fully')
          .verdict,
        'ok',
      );
      // The rule set cannot be read (no iptables-save, no nft): an old kernel is a warning.
      const unreadable = await runDoctor({
        root,
        netns: n1.ns.name,
        kernelRelease: '5.4.0',
        probe: {
          natRules: () =>
            Promise.resolve({ sources: [], unavailable: ['iptables-save: not found'] }),
        },
      });
      assert.equal(check(unreadable, 'random-fully').verdict, 'warn');
    } finally {
      await n1.ns.run(['iptables', '-t', 'nat', '-F', 'POSTROUTING']);
      await n1.setTxChecksum(false);
    }
    const clean = await runDoctor({ root, netns: n1.ns.name, kernelRelease: '5.4.0' });
    assert.equal(check(clean, 'random-fully').verdict, 'ok');
    assert.ok(check(clean, 'random-fully').evidence.includes('no MASQUERADE --random-fully rule'));
  });

  it('vxlan-port: a process holding UDP 8472 keeps flannel.1 from coming up; the doctor names it', async function () {
    const ok = await doctor(base(n2));
    const fine = check(ok.report, 'vxlan-port');
    assert.equal(fine.verdict, 'ok');
    assert.match(fine.evidence.join('\n'), /0\.0\.0\.0:8472 inode \d+: kernel socket/);
    await n2.ns.ip(['link', 'set', VTEP, 'down']);
    const holder = trackChild(
      spawn(
        'ip',
        [
          'netns',
          'exec',
          n2.ns.name,
          process.execPath,
          '-e',
          "require('dgram').createSocket('udp4').bind(8472, () => console.log('bound'))",
        ],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      ),
    );
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout?.on('data', () => resolve());
        holder.once('exit', () => reject(new Error('the port holder exited')));
      });
      const up = await n2.ns.run(['ip', 'link', 'set', VTEP, 'up'], { allowFailure: true });
      assert.notEqual(up.code, 0, 'flannel.1 cannot come up');
      assert.match(up.stderr, /Address already in use/);
      const run = await doctor(base(n2));
      const result = check(run.report, 'vxlan-port');
      assert.equal(result.verdict, 'fail');
      assert.match(
        result.summary,
        new RegExp(
          `UDP port 8472 of flannel\\.1 is held by node \\(pid ${holder.pid ?? 0}\\): flannel\\.1 cannot come up`,
        ),
      );
      assert.equal(run.code, 1);
    } finally {
      holder.kill('SIGKILL');
      await waitFor(() => holder.exitCode !== null || holder.signalCode !== null, {
        timeoutMs: 5000,
        what: 'the port holder to exit',
      });
    }
    await n2.ns.ip(['link', 'set', VTEP, 'up']);
    await bed.programLocal(n2); // going down flushed node 2's permanent entries
    assert.equal(check((await doctor(base(n2))).report, 'vxlan-port').verdict, 'ok');
    assert.equal(await bed.ping(n2, n1), true);
  });

  it('--json: the stable schema, every check once per device, and the exit status follows the worst verdict', async function () {
    const run = await doctor([...base(n1), '--mac', `${VTEP}=${n1.publishedMac}`, ...peerFlag(n2)]);
    const report = run.report;
    assert.deepEqual(Object.keys(report), [
      'schema',
      'root',
      'netns',
      'kernel',
      'devices',
      'verdict',
      'counts',
      'checks',
      'fixed',
      'dryRun',
      'changes',
      'before',
    ]);
    assert.equal(report.schema, DOCTOR_SCHEMA);
    assert.equal(report.netns, n1.ns.name);
    assert.deepEqual(report.devices, [VTEP]);
    for (const result of report.checks) {
      assert.deepEqual(Object.keys(result), [
        'id',
        'device',
        'verdict',
        'summary',
        'evidence',
        'fix',
      ]);
      assert.ok(['ok', 'warn', 'fail'].includes(result.verdict));
      assert.equal(
        result.fix === null,
        result.verdict === 'ok',
        `${result.id}: a fix exactly when not ok`,
      );
    }
    // The device checks once for flannel.1; the configuration checks for flannel.1; the
    // cluster's VtepMACs only with --cluster (test/mesh.e2e.test.ts).
    assert.deepEqual(
      report.checks.map((c) => c.id),
      CHECK_IDS.filter((id) => id !== 'cluster-vtep-macs'),
    );
    assert.deepEqual(report.counts, {
      ok: report.checks.filter((c) => c.verdict === 'ok').length,
      warn: report.checks.filter((c) => c.verdict === 'warn').length,
      fail: report.checks.filter((c) => c.verdict === 'fail').length,
    });
    assert.equal(run.code, report.verdict === 'fail' ? 1 : 0);
  });
});

describe('flannel-guard doctor on a single namespace', function () {
  this.timeout(60_000);
  let ns: Netns;
  let root: string;

  beforeEach(async function () {
    ns = await Netns.create('fgt-doc');
    root = tree();
    await ns.ipBatch([
      'link add eth0 type veth peer name eth0p',
      'addr add 192.0.2.21/24 dev eth0',
      'link set eth0 up',
      'link set eth0p up',
    ]);
  });

  afterEach(async function () {
    await ns.destroy();
  });

  it('--fix with NetworkManager: writes the unmanaged-devices drop-in only, and the profile that sets the MAC is left', async function () {
    await ns.ip('link add flannel.1 type vxlan id 1 dstport 8472 nolearning');
    const profile = join(root, 'etc/NetworkManager/system-connections/flannel.1.nmconnection');
    const profileText =
      '[connection]\nid=flannel.1\ntype=vxlan\ninterface-name=flannel.1\n\n[ethernet]\ncloned-mac-address=02:42:ac:11:00:02\n';
    mkdirSync(dirname(profile), { recursive: true });
    writeFileSync(profile, profileText);
    writeFileSync(
      join(root, 'etc/NetworkManager/NetworkManager.conf'),
      '[main]\nplugins=keyfile\n',
    );
    const args = ['--root', root, '--netns', ns.name];
    const before = check((await doctor(args)).report, 'networkmanager');
    assert.equal(before.verdict, 'fail');
    assert.match(before.summary, /a profile sets its MAC .*flannel\.1\.nmconnection:7 /);
    const fixed = await doctor([...args, '--fix']);
    const dropIn = join(root, 'etc/NetworkManager/conf.d/99-flannel-guard.conf');
    const written = fixed.report.changes.filter((c) => c.kind === 'write-file');
    assert.ok(
      written.some((c) => c.kind === 'write-file' && c.path === dropIn),
      JSON.stringify(fixed.report.changes),
    );
    assert.match(
      readFileSync(dropIn, 'utf8'),
      /^\[keyfile\]\nunmanaged-devices\+=interface-name:flannel\.\*;interface-name:flannel-v6\.\*$/m,
    );
    assert.equal(check(fixed.report, 'networkmanager').verdict, 'ok');
    assert.equal(readFileSync(profile, 'utf8'), profileText, "the user's profile is untouched");
    assert.ok(
      !fixed.report.changes.some((c) => c.kind === 'command' && c.argv[0] === 'nmcli'),
      "no reload of the machine's NetworkManager for a --root",
    );
  });

  it('--fix --dry-run changes nothing, and its plan is what --fix then does (seeded nodes)', async function () {
    const random = prng(0xd0c);
    const mac = (): string =>
      `0e:${Array.from({ length: 5 }, () =>
        Math.floor(random() * 256)
          .toString(16)
          .padStart(2, '0'),
      ).join(':')}`;
    /** What --fix may change: the scratch root, and the device as iproute2 and ethtool read it. */
    const state = async (node: Netns, dir: string): Promise<string> =>
      [
        snapshotTree(dir),
        (await node.run(['ip', '-d', 'link', 'show', 'dev', 'flannel.1'])).stdout,
        (await node.run(['ip', 'neigh', 'show', 'dev', 'flannel.1'])).stdout,
        (await node.run(['bridge', 'fdb', 'show', 'dev', 'flannel.1'])).stdout,
        (await node.run(['ethtool', '-k', 'flannel.1'])).stdout,
      ].join('\n');
    // Offload outcomes are known only once written: the plan says what it asks for.
    const shape = (changes: DoctorReport['changes']): unknown[] =>
      changes.map((change) => {
        if (change.kind === 'command') return { kind: change.kind, argv: change.argv };
        if (change.kind !== 'device' || change.action.action !== 'set-offload') return change;
        const { action, device, requested } = change.action;
        return { kind: change.kind, device: change.device, action: { action, device, requested } };
      });
    for (let round = 0; round < 3; round += 1) {
      const node = round === 0 ? ns : await Netns.create('fgt-dplan');
      const dir = round === 0 ? root : tree();
      try {
        await node.ipBatch([
          ...(round === 0
            ? []
            : [
                'link add eth0 type veth peer name eth0p',
                'addr add 192.0.2.21/24 dev eth0',
                'link set eth0 up',
              ]),
          'link add flannel.1 type vxlan id 1 dstport 8472 nolearning local 192.0.2.21 dev eth0',
          'link set flannel.1 up',
          ...Array.from(
            { length: Math.floor(random() * 3) },
            (_, i) =>
              `neigh replace 198.18.${10 + i}.0 lladdr ${mac()} dev flannel.1 nud permanent`,
          ),
        ]);
        if (random() < 0.5) {
          mkdirSync(join(dir, 'etc/NetworkManager'), { recursive: true });
          writeFileSync(
            join(dir, 'etc/NetworkManager/NetworkManager.conf'),
            '[main]\nplugins=keyfile\n',
          );
        }
        const args = ['--root', dir, '--netns', node.name];
        if (random() < 0.6) args.push('--mac', `flannel.1=${mac()}`);
        for (let i = 0; i < Math.floor(random() * 3); i += 1) {
          args.push('--peer', `198.18.${20 + i}.0=${mac()}@192.0.2.${30 + i}`);
        }
        const before = await state(node, dir);
        const plain = await doctor(args);
        const planned = await doctor([...args, '--fix', '--dry-run']);
        const context = `round ${round}: ${args.join(' ')}`;
        assert.equal(await state(node, dir), before, `the dry run changed something, ${context}`);
        assert.equal(planned.report.dryRun, true);
        assert.equal(planned.report.fixed, false);
        assert.equal(planned.code, plain.code, context);
        // The verdicts of a plain run (evidence may carry timings: the run's length).
        const verdicts = (report: DoctorReport): string[] =>
          report.checks.map((c) => `${c.id} ${c.device ?? '-'} ${c.verdict}`);
        assert.deepEqual(verdicts(planned.report), verdicts(plain.report), context);
        assert.ok(planned.report.changes.length > 0, context);
        const text = await runDoctorCli([...args, '--fix', '--dry-run']);
        assert.match(text.stdout, /^Would change \(a dry run: nothing was changed\):$/m, context);
        assert.equal(await state(node, dir), before, `the dry run changed something, ${context}`);
        const fixed = await doctor([...args, '--fix']);
        assert.equal(fixed.report.dryRun, false);
        assert.deepEqual(shape(planned.report.changes), shape(fixed.report.changes), context);
      } finally {
        if (round > 0) await node.destroy();
      }
    }
  });

  it('vtep: no flannel device warns (exit 0); a veth called flannel.1 fails', async function () {
    const none = await doctor(['--root', root, '--netns', ns.name]);
    const missing = check(none.report, 'vtep', null);
    assert.equal(missing.verdict, 'warn');
    assert.match(missing.summary, /no device matching flannel\.\*, flannel-v6\.\*/);
    // The configuration checks still judge the names flannel would use.
    assert.equal(check(none.report, 'link-files', 'flannel.1').verdict, 'fail');
    assert.equal(check(none.report, 'link-files', 'flannel-v6.1').verdict, 'fail');
    await ns.ip(['link', 'add', 'flannel.1', 'type', 'veth', 'peer', 'name', 'other']);
    const wrong = await doctor(['--root', root, '--netns', ns.name]);
    assert.equal(check(wrong.report, 'vtep').verdict, 'fail');
    assert.match(check(wrong.report, 'vtep').summary, /not a VXLAN device \(kind veth\)/);
  });

  it('addr-assign-type 1 (udev may still rewrite) warns; --fix writes the same MAC once and keeps the neighbour entries', async function () {
    await ns.ipBatch([
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning local 192.0.2.21 dev eth0',
      'link set flannel.1 up',
      'neigh replace 198.18.7.0 lladdr 0e:07:07:07:07:07 dev flannel.1 nud permanent',
    ]);
    await ns.bridge([
      'fdb',
      'append',
      '0e:07:07:07:07:07',
      'dev',
      'flannel.1',
      'dst',
      '192.0.2.27',
      'self',
      'permanent',
    ]);
    const mac =
      (await ns.ipJson<{ address: string }[]>('link show dev flannel.1'))[0]?.address ?? '';
    const before = await doctor(['--root', root, '--netns', ns.name]);
    const result = check(before.report, 'addr-assign-type');
    assert.equal(result.verdict, 'warn');
    assert.deepEqual(result.evidence, ['/sys/class/net/flannel.1/addr_assign_type = 1 (random)']);
    const fixed = await runDoctorCli(['--root', root, '--netns', ns.name, '--fix']);
    assert.ok(
      fixed.stdout.includes(`flannel.1: wrote its MAC ${mac} again (addr_assign_type 1 -> 3)`),
      fixed.stdout,
    );
    assert.ok(
      fixed.stdout.includes(
        'flannel.1: neighbour 198.18.7.0 lladdr 0e:07:07:07:07:07 permanent (flushed-by-mac-change)',
      ),
    );
    assert.equal((await ns.readFile('/sys/class/net/flannel.1/addr_assign_type')).trim(), '3');
    assert.equal(
      (await ns.ipJson<{ address: string }[]>('link show dev flannel.1'))[0]?.address,
      mac,
    );
    const neighbours = await ns.ipJson<{ dst: string; state: string[] }[]>(
      '-4 neigh show dev flannel.1',
    );
    assert.deepEqual(
      neighbours.map((n) => [n.dst, n.state]),
      [['198.18.7.0', ['PERMANENT']]],
    );
  });

  it('exit status 2 with one line for a bad --mac, --peer, --offload or flag', async function () {
    for (const args of [
      ['--mac', 'flannel.1=zz'],
      ['--mac', 'flannel.1'],
      ['--peer', '198.18.1.0'],
      ['--peer', '198.18.1.0=0e:00:00:00:00:01@nowhere'],
      ['--peer', 'nope=0e:00:00:00:00:01'],
      ['--offload', 'tx-checksum-ip-generic=maybe'],
      ['--iface', '*'],
      ['--no-such-flag'],
      ['--netns', 'fgt-no-such-namespace'],
      ['--dry-run'],
    ]) {
      const run = await runDoctorCli(['--netns', ns.name, '--root', root, ...args]);
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stdout}${run.stderr}`);
      assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
      assert.equal(run.stdout, '');
    }
  });

  it('--peers-file takes the published peers as JSON', async function () {
    await ns.ipBatch([
      'link add flannel.1 type vxlan id 1 dstport 8472 nolearning local 192.0.2.21 dev eth0',
      'link set flannel.1 up',
    ]);
    const file = join(root, 'peers.json');
    const { writeFileSync } = await import('node:fs');
    writeFileSync(
      file,
      JSON.stringify({
        peers: [{ vtepIp: '198.18.3.0', mac: '0E:03:03:03:03:03', underlayIp: '192.0.2.23' }],
      }),
    );
    const run = await doctor(['--root', root, '--netns', ns.name, '--peers-file', file]);
    const result = check(run.report, 'neighbours');
    assert.equal(result.verdict, 'fail');
    assert.match(
      result.summary,
      /no neighbour entry for 198\.18\.3\.0 \(published 0e:03:03:03:03:03\); no FDB entry 0e:03:03:03:03:03 dst 192\.0\.2\.23/,
    );
    await runDoctorCli(['--root', root, '--netns', ns.name, '--peers-file', file, '--fix']);
    assert.equal(
      check(
        (await doctor(['--root', root, '--netns', ns.name, '--peers-file', file])).report,
        'neighbours',
      ).verdict,
      'ok',
    );
  });
});
