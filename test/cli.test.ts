/**
 * `flannel-guard` as a user runs it: the package's bin in a child process. Flags and their
 * defaults, usage errors (exit 2, one line), `status` (JSON and table), `watch --json` correcting
 * a MAC rewrite, `--dry-run`, SIGINT, and missing CAP_NET_ADMIN (exit 77).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { LinkMonitor } from '../lib/core/monitor';
import type { StatusReport } from '../lib/cli/status';
import { collectEvents } from './support/events';
import { Netns } from './support/netns';
import {
  CLI_PATH,
  inNetns,
  jsonLines,
  runCommand,
  startCommand,
  withoutCapability,
  type ChildResult,
  type RunningChild,
} from './support/node-child';

const PACKAGE_JSON = join(__dirname, '..', '..', 'package.json');

interface CliLine {
  event: string;
  [field: string]: unknown;
}

function cli(args: readonly string[], prefix: readonly string[] = []): Promise<ChildResult> {
  return runCommand([...prefix, process.execPath, CLI_PATH, ...args], { timeoutMs: 15_000 });
}

function startWatch(args: readonly string[], prefix: readonly string[] = []): RunningChild {
  return startCommand([...prefix, process.execPath, CLI_PATH, 'watch', '--json', ...args], {
    timeoutMs: 60_000,
  });
}

/** Parsed JSON lines of a running `watch --json`. */
function linesOf(child: RunningChild): CliLine[] {
  return jsonLines<CliLine>(child.stdout);
}

function collapse(text: string): string {
  return text.replace(/\s+/g, ' ');
}

describe('flannel-guard CLI (the bin, real kernel, netns)', function () {
  this.timeout(90_000);
  let ns: Netns;
  let children: RunningChild[] = [];

  beforeEach(async function () {
    ns = await Netns.create('fgt-cli');
    await ns.ipBatch([
      'link add va type veth peer name vb',
      'addr add 192.0.2.1/24 dev va',
      'link set va up',
      'link set vb up',
      'link add flannel.1 type vxlan id 1 dstport 8472 local 192.0.2.1 dev va nolearning',
      'link set flannel.1 up',
      'link add vx9 type vxlan id 9 dstport 4789 nolearning',
      'neigh add 198.18.0.1 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
      'neigh add 198.18.1.1 lladdr 02:00:00:00:01:02 dev flannel.1 nud permanent',
      'neigh add 198.18.2.1 lladdr 02:00:00:00:01:03 dev flannel.1 nud stale',
    ]);
    await ns.bridge('fdb append 02:00:00:00:01:01 dev flannel.1 dst 192.0.2.2 self permanent');
  });

  afterEach(async function () {
    await Promise.all(children.map((child) => child.kill()));
    children = [];
    await ns.destroy();
  });

  function watch(args: readonly string[], prefix: readonly string[] = []): RunningChild {
    const child = startWatch(args, prefix);
    children.push(child);
    return child;
  }

  async function macOf(device: string): Promise<string | undefined> {
    const [link] = await ns.ipJson<{ address?: string }[]>(['link', 'show', device]);
    return link?.address;
  }

  async function permanentArp(device: string): Promise<string[]> {
    const entries = await ns.ipJson<{ dst: string; lladdr?: string; state: string[] }[]>([
      'neigh',
      'show',
      'dev',
      device,
    ]);
    return entries
      .filter((e) => e.state.includes('PERMANENT'))
      .map((e) => `${e.dst} ${e.lladdr ?? '-'}`)
      .sort();
  }

  async function txChecksum(device: string): Promise<string | undefined> {
    const output = (await ns.run(['ethtool', '-k', device])).stdout;
    return /^\ttx-checksum-ip-generic: (on|off)/m.exec(output)?.[1];
  }

  describe('flags and help', function () {
    it("--version and -V print package.json's version", async function () {
      const { version } = JSON.parse(readFileSync(PACKAGE_JSON, 'utf8')) as { version: string };
      for (const flag of ['--version', '-V']) {
        const result = await cli([flag]);
        assert.equal(result.code, 0, result.stderr);
        assert.equal(result.stdout, `${version}\n`);
        assert.equal(result.stderr, '');
      }
    });

    it('runs from the checkout as `npx flannel-guard` (the bin is executable)', async function () {
      const { version } = JSON.parse(readFileSync(PACKAGE_JSON, 'utf8')) as { version: string };
      // npm exec links the checkout into the cache's _npx folder and would run
      // its install script there, rebuilding build/ under the running tests:
      // --ignore-scripts, and a cache of its own so that no earlier run's
      // _npx entry decides what happens.
      const cache = mkdtempSync(join(tmpdir(), 'fgt-npx-cache-'));
      try {
        const result = await runCommand(
          [
            'npm',
            'exec',
            '--offline',
            '--ignore-scripts',
            '--cache',
            cache,
            '--',
            'flannel-guard',
            '--version',
          ],
          { timeoutMs: 60_000 },
        );
        assert.equal(result.code, 0, result.stderr);
        assert.equal(result.stdout.trim(), version);
      } finally {
        rmSync(cache, { recursive: true, force: true });
      }
    });

    it('--help, watch --help and status --help exit 0 and name the defaults', async function () {
      const root = await cli(['--help']);
      assert.equal(root.code, 0, root.stderr);
      assert.match(root.stdout, /^Usage: flannel-guard/);
      assert.match(root.stdout, /\bwatch\b/);
      assert.match(root.stdout, /\bstatus\b/);

      for (const command of ['watch', 'status']) {
        for (const args of [
          [command, '--help'],
          ['help', command],
        ]) {
          const result = await cli(args);
          assert.equal(result.code, 0, `${args.join(' ')}: ${result.stderr}`);
          const text = collapse(result.stdout);
          assert.match(text, new RegExp(`^Usage: flannel-guard ${command}`));
          assert.ok(
            text.includes('flannel.*, flannel-v6.*'),
            `${command}: interface defaults\n${text}`,
          );
          assert.ok(text.includes('tx-checksum-ip-generic=off'), `${command}: offload default`);
          assert.ok(text.includes('--netns <name>'), command);
          if (command === 'watch') {
            assert.ok(text.includes('default: "first-seen"'), 'pin default');
            assert.ok(text.includes('--dry-run'));
          }
        }
      }
    });

    it('bad flags and values exit 2 with exactly one line on stderr and nothing on stdout', async function () {
      const missing = `fgt-missing-${process.pid}`;
      const netns = ['--netns', ns.name];
      const table: [string[], RegExp][] = [
        [['watch', ...netns, '--mac', 'flannel.1=01:00:5e:00:00:01'], /multicast/],
        [['watch', ...netns, '--mac', 'flannel.1=ff:ff:ff:ff:ff:ff'], /broadcast/],
        [['status', ...netns, '--mac', 'flannel.1=00:11:22:33:44'], /six colon-separated/],
        [['watch', ...netns, '--mac', 'flannel.1'], /IFACE=MAC/],
        [['watch', ...netns, '--mac', 'bad/name=02:00:00:00:00:01'], /"bad\/name"/],
        [
          ['watch', ...netns, '--offload', 'no-such-feature=off'],
          /unknown feature no-such-feature/,
        ],
        [['status', ...netns, '--offload', 'tx-checksum-ip-generic=maybe'], /FEATURE=on\|off/],
        [
          ['watch', ...netns, '--offload', 'none', '--offload', 'tx-checksum-ip-generic=off'],
          /none cannot be combined/,
        ],
        [['watch', ...netns, '--pin', 'bogus'], /first-seen/],
        [
          ['watch', '--netns', missing],
          new RegExp(`no such network namespace \\(/run/netns/${missing}\\)`),
        ],
        [['status', '--netns', missing], /no such network namespace/],
        [['watch', '--netns'], /argument missing/],
        [['watch', ...netns, '--bogus'], /unknown option '--bogus'/],
        [['status', ...netns, '--iface', '*'], /matches every interface/],
        [['watch', ...netns, '--iface', 'flannel.*', '--iface', '**'], /matches every interface/],
        [['watch', ...netns, '--iface', 'flannel/*'], /'\/'/],
        [['watch', ...netns, '--receive-buffer', '0'], /--receive-buffer 0/],
        [['watch', ...netns, '--udev-root', 'host'], /--udev-root host: expected an absolute path/],
        [['status', ...netns, '--offload', 'auto'], /--offload auto: only watch measures/],
        [['doctor', ...netns, '--offload', 'auto'], /--offload auto: the doctor probes the paths/],
        [
          ['watch', ...netns, '--offload', 'auto', '--offload', 'tx-checksum-ip-generic=off'],
          /auto cannot be combined/,
        ],
        [['bogus-command'], /unknown command/],
      ];
      for (const [args, reason] of table) {
        const result = await cli(args);
        const what = args.join(' ');
        assert.equal(result.timedOut, false, `${what}: still running`);
        assert.equal(
          result.code,
          2,
          `${what}: exit ${String(result.code)}\n${result.stdout}${result.stderr}`,
        );
        assert.equal(result.stdout, '', `${what}: stdout`);
        const lines = result.stderr.split('\n').filter((line) => line !== '');
        assert.equal(lines.length, 1, `${what}: ${JSON.stringify(result.stderr)}`);
        assert.match(lines[0] ?? '', reason, what);
        assert.ok(result.stderr.endsWith('\n'), `${what}: a complete line`);
      }
      // None of them touched the device.
      assert.equal(await txChecksum('flannel.1'), 'on');
    });
  });

  describe('status', function () {
    it('--json lists the managed vxlan device with its MAC, permanent neighbours and offload state', async function () {
      const result = await cli(['status', '--json', '--netns', ns.name]);
      assert.equal(result.code, 0, result.stderr);
      const report = JSON.parse(result.stdout) as StatusReport;
      const [ip] = await ns.ipJson<{ ifindex: number; address: string }[]>('link show flannel.1');
      const [va] = await ns.ipJson<{ ifindex: number }[]>('link show va');
      const fdb = (await ns.bridge('fdb show dev flannel.1'))
        .split('\n')
        .filter((l) => l.trim() !== '');
      assert.ok(
        fdb.some((l) => l.startsWith('02:00:00:00:01:01 dst 192.0.2.2')),
        fdb.join('\n'),
      );
      assert.equal(report.netns, ns.name);
      assert.deepEqual(report.devices, [
        {
          name: 'flannel.1',
          ifindex: ip?.ifindex,
          kind: 'vxlan',
          mac: ip?.address,
          desiredMac: null,
          addrAssignType: 1, // random: read in the namespace's own sysfs
          up: true,
          vxlan: {
            vni: 1,
            port: 8472,
            local: '192.0.2.1',
            underlayIfindex: va?.ifindex,
            learning: false,
          },
          permanentNeighbours: 2,
          fdbEntries: fdb.length,
          offloads: {
            'tx-checksum-ip-generic': {
              active: true,
              requested: true,
              fixed: false,
              matchesPolicy: false,
            },
          },
        },
      ]);
    });

    it('--json follows --mac, --offload and --iface, and sees an offload change', async function () {
      await ns.run(['ethtool', '-K', 'flannel.1', 'tx-checksum-ip-generic', 'off']);
      const result = await cli([
        'status',
        '--json',
        '--netns',
        ns.name,
        '--mac',
        'flannel.1=0E:00:00:00:00:01',
        '--iface',
        'flannel.*',
        '--iface',
        'vx?',
        '--offload',
        'tx-checksum-ip-generic=off',
        '--offload',
        'rx-gro=on',
      ]);
      assert.equal(result.code, 1, `a MAC other than --mac asks for: exit 1\n${result.stderr}`);
      const report = JSON.parse(result.stdout) as StatusReport;
      assert.deepEqual(report.devices.map((d) => d.name).sort(), ['flannel.1', 'vx9']);
      const flannel = report.devices.find((d) => d.name === 'flannel.1');
      assert.equal(flannel?.desiredMac, '0e:00:00:00:00:01');
      assert.deepEqual(flannel?.offloads, {
        'tx-checksum-ip-generic': {
          active: false,
          requested: false,
          fixed: false,
          matchesPolicy: true,
        },
        'rx-gro': { active: true, requested: true, fixed: false, matchesPolicy: true },
      });
      const none = await cli(['status', '--json', '--netns', ns.name, '--offload', 'none']);
      assert.equal(none.code, 0, none.stderr);
      assert.deepEqual((JSON.parse(none.stdout) as StatusReport).devices[0]?.offloads, {});
      const mac = await macOf('flannel.1');
      const matching = await cli(['status', '--netns', ns.name, '--mac', `flannel.1=${mac}`]);
      assert.equal(matching.code, 0, matching.stderr);
    });

    it('a device the globs match that is not VXLAN is named as ignored, never listed as managed', async function () {
      await ns.ip('link add flannel.7 type veth peer name fgpeer7');
      try {
        const json = await cli(['status', '--json', '--netns', ns.name]);
        assert.equal(json.code, 0, json.stderr);
        const report = JSON.parse(json.stdout) as StatusReport;
        assert.deepEqual(
          report.devices.map((d) => d.name),
          ['flannel.1'],
        );
        assert.deepEqual(
          report.ignored.map((d) => `${d.name} ${d.kind}`),
          ['flannel.7 veth'],
        );
        const text = await cli(['status', '--netns', ns.name]);
        assert.match(
          text.stdout,
          /^ignored: flannel\.7 \(kind veth\): not VXLAN, watch leaves it alone$/m,
        );
        assert.doesNotMatch(text.stdout, /^flannel\.7 /m);
      } finally {
        await ns.ip('link del flannel.7');
      }
    });

    it('prints a table for humans, with aligned columns', async function () {
      const result = await cli(['status', '--netns', ns.name]);
      assert.equal(result.code, 0, result.stderr);
      const mac = await macOf('flannel.1');
      assert.ok(mac);
      const lines = result.stdout.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 2, result.stdout);
      const [header, row] = lines as [string, string];
      assert.deepEqual(header.split(/\s+/), [
        'DEVICE',
        'IFINDEX',
        'MAC',
        'DESIRED',
        'MATCH',
        'ASSIGN',
        'NEIGH',
        'OFFLOADS',
      ]);
      const cells = row.split(/\s+/);
      assert.equal(cells[0], 'flannel.1');
      assert.equal(cells[2], mac);
      assert.equal(cells[6], '2', 'permanent neighbours');
      assert.equal(cells[7], 'tx-checksum-ip-generic=on(!)');
      for (const [title, value] of [
        ['MAC', mac],
        ['NEIGH', '2'],
        ['OFFLOADS', 'tx-checksum-ip-generic'],
      ] as const) {
        assert.ok(
          row.slice(header.indexOf(title)).startsWith(value),
          `${title} column aligned:\n${header}\n${row}`,
        );
      }
      const empty = await cli(['status', '--netns', ns.name, '--iface', 'nothing*']);
      assert.equal(empty.code, 0, empty.stderr);
      assert.equal(empty.stdout, `no managed devices in ${ns.name}\n`);
    });

    it('works without CAP_NET_ADMIN (read-only)', async function () {
      const result = await cli(
        ['status', '--json'],
        [...inNetns(ns.name), ...withoutCapability('net_admin')],
      );
      assert.equal(result.code, 0, result.stderr);
      const report = JSON.parse(result.stdout) as StatusReport;
      assert.deepEqual(
        report.devices.map((d) => d.name),
        ['flannel.1'],
      );
      assert.equal(report.devices[0]?.addrAssignType, 1, 'inside the namespace sysfs is readable');
    });
  });

  describe('watch', function () {
    it('--json: ready first, event first in every line; a MAC rewrite is reported and restored; SIGINT exits 0', async function () {
      const original = await macOf('flannel.1');
      assert.ok(original);
      const child = watch(['--netns', ns.name]);
      const ready = await child.waitForJson<CliLine>((l) => l.event === 'ready');
      assert.equal(linesOf(child)[0]?.event, 'ready', 'ready is the first line');
      assert.equal(ready.netns, ns.name);
      assert.equal(ready.dryRun, false);
      const devices = ready.devices as { name: string; mac: string; desiredMac: string }[];
      assert.deepEqual(
        devices.map((d) => [d.name, d.mac, d.desiredMac]),
        [['flannel.1', original, original]],
      );
      await child.waitForJson<CliLine>((l) => l.event === 'offload' && l.written === true);
      assert.equal(await txChecksum('flannel.1'), 'off', 'the default offload policy is applied');

      const from = linesOf(child).length;
      await ns.ip('link set flannel.1 address 02:00:00:00:12:34');
      const rewrite = await child.waitForJson<CliLine>((l) => l.event === 'rewrite', 10_000, from);
      assert.equal(rewrite.device, 'flannel.1');
      assert.equal(rewrite.mac, '02:00:00:00:12:34');
      assert.equal(rewrite.previous, original);
      assert.equal(rewrite.expected, original);
      assert.equal(rewrite.dryRun, false);
      const restored = await child.waitForJson<CliLine>(
        (l) => l.event === 'restored',
        10_000,
        from,
      );
      assert.equal(restored.device, 'flannel.1');
      assert.equal(restored.mac, original);
      assert.equal(restored.neighbours, 2);
      assert.equal(await macOf('flannel.1'), original);
      assert.deepEqual(await permanentArp('flannel.1'), [
        '198.18.0.1 02:00:00:00:01:01',
        '198.18.1.1 02:00:00:00:01:02',
      ]);

      child.child.kill('SIGINT');
      const result = await child.exited;
      assert.equal(result.signal, null);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stderr, '');
      const raw = result.stdout.split('\n').filter((l) => l !== '');
      assert.ok(raw.length >= 4);
      for (const line of raw) {
        assert.ok(line.startsWith('{"event":"'), `field event first: ${line}`);
        assert.equal(Object.keys(JSON.parse(line) as object)[0], 'event');
      }
    });

    it('SIGTERM also ends it with exit 0', async function () {
      const child = watch(['--netns', ns.name, '--offload', 'none']);
      await child.waitForJson<CliLine>((l) => l.event === 'ready');
      // A correction handled in a later turn shows the guard is fully up (see the report about
      // signals sent right after the ready line).
      const from = linesOf(child).length;
      await ns.ip('link set flannel.1 address 02:00:00:00:12:36');
      await child.waitForJson<CliLine>((l) => l.event === 'restored', 10_000, from);
      child.child.kill('SIGTERM');
      const result = await child.exited;
      assert.equal(result.signal, null, 'not killed by the signal');
      assert.equal(result.code, 0, result.stderr);
      assert.equal(await txChecksum('flannel.1'), 'on', '--offload none leaves offloads alone');
    });

    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      it(`${signal} sent the moment the ready line appears still exits 0`, async function () {
        for (let round = 0; round < 5; round += 1) {
          const child = watch(['--netns', ns.name]);
          await child.waitForJson<CliLine>((l) => l.event === 'ready');
          child.child.kill(signal);
          const result = await child.exited;
          assert.equal(result.signal, null, `round ${round}: killed by ${signal}`);
          assert.equal(result.code, 0, result.stderr);
        }
      });
    }

    it('--dry-run says in its lines that nothing is written nor saved, and what the policy would set', async function () {
      await ns.run(['ethtool', '-K', 'flannel.1', 'tx-checksum-ip-generic', 'on']);
      const child = startCommand(
        [
          process.execPath,
          CLI_PATH,
          'watch',
          '--netns',
          ns.name,
          '--dry-run',
          '--state-dir',
          'off',
        ],
        { timeoutMs: 30_000 },
      );
      await child.waitForLine((line) =>
        line.includes('ready (dry run: nothing is written, no state is saved): flannel.1'),
      );
      await child.waitForLine((line) =>
        line.includes('offload: flannel.1 tx-checksum-ip-generic=on (would be set off) [start]'),
      );
      child.child.kill('SIGINT');
      assert.equal((await child.exited).code, 0);
      assert.doesNotMatch(child.stdout, /not written/);
    });

    it('--dry-run reports the rewrite but never writes: the MAC stays changed, offloads untouched', async function () {
      const original = await macOf('flannel.1');
      const monitor = await LinkMonitor.open({ netns: ns.name });
      try {
        const changes = collectEvents(monitor, 'linkChanged');
        const child = watch(['--netns', ns.name, '--dry-run']);
        const ready = await child.waitForJson<CliLine>((l) => l.event === 'ready');
        assert.equal(ready.dryRun, true);

        const from = linesOf(child).length;
        await ns.ip('link set flannel.1 address 02:00:00:00:12:35');
        const rewrite = await child.waitForJson<CliLine>(
          (l) => l.event === 'rewrite',
          10_000,
          from,
        );
        assert.equal(rewrite.mac, '02:00:00:00:12:35');
        assert.equal(rewrite.expected, original);
        assert.equal(rewrite.dryRun, true);
        // Sentinel: a non-MAC change after the rewrite was reported; anything the guard wrote
        // in reaction to the rewrite would reach our monitor first.
        const sentinel = new Promise<void>((resolve) => {
          monitor.on('linkChanged', (e) => {
            if (e.link.name === 'flannel.1' && e.link.mtu === 1400) resolve();
          });
        });
        await ns.ip('link set flannel.1 mtu 1400');
        await sentinel;
        child.child.kill('SIGINT');
        const result = await child.exited;
        assert.equal(result.code, 0, result.stderr);
        changes.stop();

        const macChanges = changes.events.filter(
          (e) => e.link.name === 'flannel.1' && e.link.mac !== e.previous.mac,
        );
        assert.deepEqual(
          macChanges.map((e) => e.link.mac),
          ['02:00:00:00:12:35'],
          'only our own MAC write happened',
        );
        assert.equal(await macOf('flannel.1'), '02:00:00:00:12:35');
        assert.deepEqual(
          await permanentArp('flannel.1'),
          [],
          'the flushed entries were not put back',
        );
        assert.equal(await txChecksum('flannel.1'), 'on', 'no offload write');
        const events = jsonLines<CliLine>(result.stdout).map((l) => l.event);
        assert.equal(events.includes('restored'), false, events.join(' '));
        assert.equal(
          jsonLines<CliLine>(result.stdout).some(
            (l) => l.event === 'offload' && l.written === true,
          ),
          false,
        );
      } finally {
        monitor.close();
      }
    });

    it('without CAP_NET_ADMIN exits 77 with a message naming CAP_NET_ADMIN, and changes nothing', async function () {
      const original = await macOf('flannel.1');
      const result = await cli(
        ['watch', '--json'],
        [...inNetns(ns.name), ...withoutCapability('net_admin')],
      );
      assert.equal(result.timedOut, false);
      assert.equal(result.code, 77, `${result.stdout}${result.stderr}`);
      assert.match(result.stderr, /CAP_NET_ADMIN/);
      assert.match(result.stderr, /EPERM/);
      // One line, in the guard's words, and root is not told to run as root.
      assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr);
      assert.doesNotMatch(result.stderr, /run as root|ifindex 1/);
      assert.match(
        result.stderr,
        /cannot correct devices .*; --dry-run only reads; grant CAP_NET_ADMIN/,
      );
      // S9: the namespace is named even when it is the process's own.
      assert.match(result.stderr, /in netns net:\[\d+\]/);
      assert.equal(await macOf('flannel.1'), original);
      assert.equal(await txChecksum('flannel.1'), 'on');
    });

    it('the path probe and the checksum sample without CAP_NET_RAW name CAP_NET_RAW, not CAP_NET_ADMIN', async function () {
      const binding = join(__dirname, '..', 'lib', 'core', 'binding.js');
      const calls = [
        `probePaths({ device: 'flannel.1', timeoutMs: 100, udpPort: 9, tcpPort: 9, echoId: 1 }, ['192.0.2.9'])`,
        `sampleChecksums({ device: 'flannel.1', timeoutMs: 100, maxFrames: 10 })`,
      ];
      for (const call of calls) {
        const script = `require(${JSON.stringify(binding)}).binding.${call}.then(() => console.log('no error'), (e) => console.log(e.code, e.capability))`;
        const result = await runCommand(
          [...inNetns(ns.name), ...withoutCapability('net_raw'), process.execPath, '-e', script],
          { timeoutMs: 15_000 },
        );
        assert.equal(result.stdout.trim(), 'EPERM CAP_NET_RAW', `${call}: ${result.stderr}`);
      }
    });

    it('S11: inside an unprivileged user namespace it refuses (77) unless --allow-user-namespace', async function () {
      const userns = ['unshare', '--user', '--map-root-user', '--net', process.execPath, CLI_PATH];
      const refused = await runCommand([...userns, 'watch', '--json'], { timeoutMs: 15_000 });
      assert.equal(refused.code, 77, refused.stderr);
      assert.match(refused.stderr, /inside a user namespace \(uid_map "0 0 1"\)/);
      assert.match(refused.stderr, /--allow-user-namespace/);
      const allowed = startCommand([...userns, 'watch', '--json', '--allow-user-namespace']);
      await allowed.waitForLine((line) => line.includes('"event":"ready"'));
      allowed.child.kill('SIGTERM');
      assert.equal((await allowed.exited).code, 0);
    });

    it('--netns without CAP_SYS_ADMIN exits 77 naming CAP_SYS_ADMIN (watch and status)', async function () {
      for (const command of ['watch', 'status']) {
        const result = await cli(
          [command, '--json', '--netns', ns.name],
          withoutCapability('sys_admin'),
        );
        assert.equal(result.code, 77, `${command}: ${result.stdout}${result.stderr}`);
        assert.equal(result.stdout, '', command);
        assert.match(result.stderr, /setns/, command);
        assert.match(result.stderr, /grant CAP_SYS_ADMIN/, command);
      }
      assert.equal(await txChecksum('flannel.1'), 'on');
    });
  });
});
