/**
 * Hostile and clumsy input against the real kernel (issue 11): the guard
 * writes only to VXLAN devices whatever the globs, the annotation or an
 * explicit --mac say, on the native fast path as on the JavaScript one; a
 * closed stdout never stops the guarding; files that never end or never open
 * are refused by type before a read; every number has a range.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  closeSync,
  constants,
  copyFileSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

import { CniError, parsePluginConfig } from '../lib/cni/request';
import { FightTracker } from '../lib/guard/fight-tracker';
import { FlannelGuard, type RestoredEvent } from '../lib/guard';
import { LinkMonitor } from '../lib/core/monitor';
import { Netns, delay, tempDirPrefix, trackChild, waitFor } from './support/netns';
import {
  CLI_PATH,
  jsonLines,
  runCommand,
  startCommand,
  type RunningChild,
} from './support/node-child';

interface CliLine {
  event: string;
  [field: string]: unknown;
}

describe('hardening: never write to a device that is not VXLAN (real kernel, netns)', function () {
  this.timeout(90_000);
  let ns: Netns;
  let children: RunningChild[] = [];

  beforeEach(async function () {
    ns = await Netns.create('fgt-hard');
    await ns.ipBatch([
      'link add eth0 type veth peer name eth1',
      'addr add 192.0.2.1/24 dev eth0',
      'link set eth0 up',
      'link set eth1 up',
      'link add flannel.1 type vxlan id 1 dstport 8472 local 192.0.2.1 dev eth0 nolearning',
      'link set flannel.1 up',
      // A veth that merely carries a flannel-like name.
      'link add flannel.7 type veth peer name pod7',
      'link set flannel.7 up',
      'link set pod7 up',
      'neigh add 198.18.0.1 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
      'neigh add 198.18.0.7 lladdr 02:00:00:00:07:01 dev flannel.7 nud permanent',
    ]);
  });

  afterEach(async function () {
    await Promise.all(children.map((child) => child.kill()));
    children = [];
    await ns.destroy();
  });

  function watch(args: readonly string[]): RunningChild {
    const child = startCommand(
      [process.execPath, CLI_PATH, 'watch', '--json', '--netns', ns.name, ...args],
      { timeoutMs: 60_000 },
    );
    children.push(child);
    return child;
  }

  async function macOf(device: string): Promise<string | undefined> {
    const [link] = await ns.ipJson<{ address?: string }[]>(['link', 'show', device]);
    return link?.address;
  }

  async function features(device: string): Promise<string> {
    const output = (await ns.run(['ethtool', '-k', device])).stdout;
    return ['tx-checksum-ip-generic', 'tcp-segmentation-offload']
      .map((name) => new RegExp(`^\\t?${name}: (on|off)`, 'm').exec(output)?.[1] ?? '?')
      .join(' ');
  }

  /** A rewrite of flannel.1, put back: the guard has handled everything before it. */
  async function roundTrip(child: RunningChild, mac: string): Promise<void> {
    const from = jsonLines<CliLine>(child.stdout).length;
    await ns.ip(`link set flannel.1 address ${mac}`);
    await child.waitForJson<CliLine>(
      (l) => l.event === 'restored' && l.device === 'flannel.1',
      10_000,
      from,
    );
  }

  it('default globs: a veth called flannel.7 is reported once and never written to', async function () {
    const before = { mac: await macOf('flannel.7'), features: await features('flannel.7') };
    const child = watch([]);
    const ready = await child.waitForJson<CliLine>((l) => l.event === 'ready');
    assert.deepEqual(
      (ready.devices as { name: string }[]).map((d) => d.name),
      ['flannel.1'],
    );
    const ignored = await child.waitForJson<CliLine>((l) => l.event === 'ignored');
    assert.equal(ignored.device, 'flannel.7');
    assert.equal(ignored.kind, 'veth');
    // The veth's MAC changes twice; flannel.1's rewrites prove the guard read past them.
    await ns.ip('link set flannel.7 address 02:00:00:00:77:01');
    await roundTrip(child, '02:00:00:00:12:01');
    await ns.ip('link set flannel.7 address 02:00:00:00:77:02');
    await ns.ip('link set flannel.7 down');
    await ns.ip('link set flannel.7 up');
    await roundTrip(child, '02:00:00:00:12:02');
    assert.equal(await macOf('flannel.7'), '02:00:00:00:77:02', 'not set back');
    assert.equal(await features('flannel.7'), before.features, 'offloads untouched');
    const lines = jsonLines<CliLine>(child.stdout);
    assert.equal(lines.filter((l) => l.event === 'ignored').length, 1, 'reported once');
    assert.deepEqual(
      lines.filter((l) => l.device === 'flannel.7' && l.event !== 'ignored'),
      [],
      'no other event about the veth',
    );
  });

  it("--iface 'eth*' touches neither the underlay nor its peer, MAC or offloads", async function () {
    const before = {
      eth0: { mac: await macOf('eth0'), features: await features('eth0') },
      eth1: { mac: await macOf('eth1'), features: await features('eth1') },
    };
    const child = watch(['--iface', 'eth*', '--iface', 'flannel.*']);
    const ready = await child.waitForJson<CliLine>((l) => l.event === 'ready');
    assert.deepEqual(
      (ready.devices as { name: string }[]).map((d) => d.name),
      ['flannel.1'],
    );
    await ns.ip('link set eth0 address 02:00:00:00:e0:01');
    await roundTrip(child, '02:00:00:00:12:03');
    assert.equal(await macOf('eth0'), '02:00:00:00:e0:01');
    assert.equal(await macOf('eth1'), before.eth1.mac);
    assert.equal(await features('eth0'), before.eth0.features);
    assert.equal(await features('eth1'), before.eth1.features);
    const ignored = jsonLines<CliLine>(child.stdout)
      .filter((l) => l.event === 'ignored')
      .map((l) => l.device)
      .sort();
    assert.deepEqual(ignored, ['eth0', 'eth1', 'flannel.7']);
  });

  it('an explicit --mac for a non-VXLAN device is never written', async function () {
    const child = watch(['--mac', 'flannel.7=02:00:00:00:77:77', '--offload', 'none']);
    await child.waitForJson<CliLine>((l) => l.event === 'ready');
    await roundTrip(child, '02:00:00:00:12:04');
    assert.notEqual(await macOf('flannel.7'), '02:00:00:00:77:77');
  });

  it('the native fast path refuses an armed device that is not VXLAN', async function () {
    const monitor = await LinkMonitor.open({ netns: ns.name });
    try {
      const veth = monitor.links().find((l) => l.name === 'flannel.7');
      assert.ok(veth);
      assert.equal(veth.kind, 'veth');
      monitor.keep(veth.ifindex);
      monitor.arm(veth.ifindex, { name: 'flannel.7', mac: veth.mac ?? '' });
      const changed = once(monitor, 'linkChanged');
      await ns.ip('link set flannel.7 address 02:00:00:00:77:03');
      const [event] = (await changed) as [{ correction?: unknown; link: { name: string } }];
      assert.equal(event.link.name, 'flannel.7');
      assert.equal(event.correction, undefined, 'no correction made');
      assert.equal(await macOf('flannel.7'), '02:00:00:00:77:03');
    } finally {
      monitor.close();
    }
  });

  it('readable output with stdout closed: the guard keeps correcting and exits 0 on SIGTERM', async function () {
    const original = await macOf('flannel.1');
    const child = trackChild(
      spawn(process.execPath, [CLI_PATH, 'watch', '--netns', ns.name, '--offload', 'none'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const exited = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
    const stdout = child.stdout;
    assert.ok(stdout);
    // `watch | head -1`: read the first line, then close the pipe.
    await new Promise<void>((resolve) => {
      let text = '';
      stdout.setEncoding('utf8').on('data', (chunk: string) => {
        text += chunk;
        if (text.includes('\n')) resolve();
      });
    });
    stdout.destroy();
    for (const [round, mac] of ['02:00:00:00:12:05', '02:00:00:00:12:06'].entries()) {
      await ns.ip(`link set flannel.1 address ${mac}`);
      await waitFor(async () => (await macOf('flannel.1')) === original, {
        timeoutMs: 5_000,
        what: `rewrite ${round + 1} corrected with stdout closed`,
      });
      await delay(100);
    }
    assert.equal(child.exitCode, null, `still running: ${stderr}`);
    child.kill('SIGTERM');
    const [code] = await exited;
    assert.equal(code, 0, stderr);
    assert.doesNotMatch(stderr, /EPIPE|Error/);
  });

  it('--json into a FIFO that is full and unread (a stalled log pipe): corrections go on, every line arrives in order once read', async function () {
    const original = await macOf('flannel.1');
    assert.ok(original);
    const dir = mkdtempSync(tempDirPrefix('fifo'));
    const fifo = join(dir, 'stdout');
    execFileSync('mkfifo', [fifo]);
    // Reader first, so that no open blocks; then filled to the brim by another writer.
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    const filler = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
    let filled = 0;
    try {
      for (let i = 0; i < 4096; i++) filled += writeSync(filler, Buffer.alloc(4096, 0x23));
      assert.fail('a pipe holds less than 16 MiB');
    } catch (error) {
      assert.equal((error as NodeJS.ErrnoException).code, 'EAGAIN');
    }
    closeSync(filler);
    await ns.ip('link set flannel.1 address 02:00:00:00:12:09');
    const writer = openSync(fifo, constants.O_WRONLY); // the guard's own, blocking file
    const child = trackChild(
      spawn(
        process.execPath,
        [
          CLI_PATH,
          'watch',
          '--json',
          '--netns',
          ns.name,
          '--offload',
          'none',
          '--rewrite-window',
          '1',
          '--mac',
          `flannel.1=${original}`,
        ],
        { stdio: ['ignore', writer, 'pipe'] },
      ),
    );
    closeSync(writer);
    let text = '';
    const drain = (): void => {
      const buffer = Buffer.alloc(65536);
      for (;;) {
        let n: number;
        try {
          n = readSync(reader, buffer);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return;
          throw error;
        }
        if (n === 0) return;
        text += buffer.toString('latin1', 0, n);
      }
    };
    try {
      // Nothing read: the MAC found wrong at start, then each rewrite, is put back all the same.
      await waitFor(async () => (await macOf('flannel.1')) === original, {
        timeoutMs: 10_000,
        what: 'the MAC found at start corrected with stdout full',
      });
      for (const [round, mac] of ['02:00:00:00:12:0a', '02:00:00:00:12:0b'].entries()) {
        await ns.ip(`link set flannel.1 address ${mac}`);
        await waitFor(async () => (await macOf('flannel.1')) === original, {
          timeoutMs: 10_000,
          what: `rewrite ${round + 1} corrected with stdout full`,
        });
      }
      assert.equal(child.exitCode, null);
      const lines = (): string[] =>
        text
          .slice(filled)
          .split('\n')
          .filter((line) => line !== '');
      await waitFor(
        async () => {
          drain();
          return lines().filter((line) => line.includes('"event":"restored"')).length >= 3;
        },
        { timeoutMs: 10_000, what: 'the lines held back, once read' },
      );
      assert.equal(text.slice(0, filled), '#'.repeat(filled), 'the filler first, untouched');
      const events = lines().map((line) => (JSON.parse(line) as { event: string }).event);
      assert.equal(events[0], 'ready');
      assert.deepEqual(
        events.filter((event) => event === 'rewrite' || event === 'restored').slice(-6),
        ['rewrite', 'restored', 'rewrite', 'restored', 'rewrite', 'restored'],
      );
    } finally {
      // A guard whose last lines are still unread waits for them: no SIGTERM here.
      child.kill('SIGKILL');
      await once(child, 'close');
      closeSync(reader);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('--json into a regular file (a log file): written directly, every line, in order', async function () {
    const dir = mkdtempSync(tempDirPrefix('log'));
    const file = join(dir, 'watch.jsonl');
    const fd = openSync(file, 'w');
    const child = trackChild(
      spawn(
        process.execPath,
        [CLI_PATH, 'watch', '--json', '--netns', ns.name, '--offload', 'none'],
        {
          stdio: ['ignore', fd, 'pipe'],
        },
      ),
    );
    closeSync(fd);
    const events = (): string[] =>
      readFileSync(file, 'utf8')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => (JSON.parse(line) as { event: string }).event);
    try {
      await waitFor(async () => events()[0] === 'ready', { timeoutMs: 10_000, what: 'ready' });
      for (const mac of ['02:00:00:00:12:07', '02:00:00:00:12:08']) {
        const before = events().length;
        await ns.ip(`link set flannel.1 address ${mac}`);
        await waitFor(async () => events().slice(before).includes('restored'), {
          timeoutMs: 5_000,
          what: `restored after ${mac}`,
        });
        assert.deepEqual(
          events()
            .slice(before)
            .filter((event) => event === 'rewrite' || event === 'restored'),
          ['rewrite', 'restored'],
        );
      }
    } finally {
      child.kill('SIGTERM');
      await once(child, 'close');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('hardening: files that never end or never open, numbers out of range, usage errors (CLI)', function () {
  this.timeout(60_000);
  let ns: Netns;
  let dir: string;

  before(async function () {
    ns = await Netns.create('fgt-input');
    await ns.ip('link add flannel.1 type vxlan id 1 dstport 8472 nolearning');
    dir = mkdtempSync(tempDirPrefix('input'));
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    writeFileSync(join(dir, 'empty'), '');
    writeFileSync(join(dir, 'list'), '[1, 2]\n');
    writeFileSync(join(dir, 'plain'), 'hello\n');
    mkdirSync(join(dir, 'folder'));
  });

  after(async function () {
    await ns.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Runs the bin: it must exit 2 with exactly one line on stderr, within a few seconds. */
  async function usageError(args: readonly string[], reason: RegExp): Promise<void> {
    const result = await runCommand([process.execPath, CLI_PATH, ...args], { timeoutMs: 10_000 });
    const what = args.join(' ');
    assert.equal(result.timedOut, false, `${what}: still running after 10 s`);
    assert.equal(result.code, 2, `${what}: exit ${String(result.code)}\n${result.stderr}`);
    const lines = result.stderr.split('\n').filter((line) => line !== '');
    assert.equal(lines.length, 1, `${what}: ${result.stderr}`);
    assert.match(lines[0] ?? '', reason, what);
    assert.ok(result.elapsedMs < 5_000, `${what}: took ${result.elapsedMs} ms`);
  }

  it('--kubeconfig at /dev/zero, /dev/urandom, /dev/null, a FIFO, a folder, an empty or non-kubeconfig file', async function () {
    const at = (file: string): string[] => [
      'watch',
      '--netns',
      ns.name,
      '--node',
      'node1',
      '--kubeconfig',
      file,
    ];
    await usageError(at('/dev/zero'), /--kubeconfig \/dev\/zero: a character device, not a file/);
    await usageError(at('/dev/urandom'), /a character device, not a file/);
    await usageError(at('/dev/null'), /a character device, not a file/);
    await usageError(at(join(dir, 'fifo')), /a FIFO, not a file/);
    await usageError(at(join(dir, 'folder')), /a directory, not a file/);
    await usageError(at(join(dir, 'missing')), /no such file/);
    await usageError(at(join(dir, 'empty')), /the file is empty/);
    await usageError(at(join(dir, 'list')), /not a kubeconfig|has no current cluster/);
  });

  it('--netns at a FIFO, a plain file or a folder: "not a network namespace", never a hang', async function () {
    for (const command of [['watch'], ['status'], ['doctor']]) {
      await usageError([...command, '--netns', join(dir, 'fifo')], /not a network namespace/);
      await usageError([...command, '--netns', join(dir, 'plain')], /not a network namespace/);
      await usageError([...command, '--netns', join(dir, 'folder')], /not a network namespace/);
    }
    await usageError(['doctor', '--netns', ns.name, '--peers-file', '/dev/zero'], /not a file/);
    // The library too: the native open is non-blocking and checks the namespace type.
    for (const path of [join(dir, 'fifo'), join(dir, 'plain'), '/proc/self/ns/mnt']) {
      assert.throws(() => new LinkMonitor({ netns: path }), {
        code: 'EINVAL',
        syscall: 'ioctl(NS_GET_NSTYPE)',
      });
    }
  });

  it('every number has a range: past it a usage error naming the range, nothing truncated', async function () {
    const netns = ['--netns', ns.name];
    const table: [string[], RegExp][] = [
      [
        ['--receive-buffer', '4294967396'],
        /--receive-buffer 4294967396: expected a whole number from 1024 to 536870912/,
      ],
      [['--receive-buffer', '2147483648'], /from 1024 to 536870912/],
      [
        ['--quiet-period', '4294967296'],
        /--quiet-period 4294967296: expected a whole number from 1 to 2147483647 \(ms\)/,
      ],
      [['--rewrite-window', '1e3'], /--rewrite-window 1e3/],
      [['--rewrite-window', '0x10'], /--rewrite-window 0x10/],
      [['--max-rewrites', '0'], /--max-rewrites 0: expected a whole number from 1 to 1000000/],
      [['--source-timeout', '99999999999999999999'], /--source-timeout/],
      [['--metrics-address', '300.1.1.1:9464'], /300\.1\.1\.1 is not a valid IPv4 address/],
      [['--metrics-address', '1.2.3:9464'], /not a valid IPv4 address/],
      [['--iface', 'abcdefghijklmnop'], /longer than 15 bytes/],
      [['--iface', '..'], /not allowed/],
      [['--iface', 'abcdefghijklmnop*'], /can never match/],
    ];
    for (const [args, reason] of table) await usageError(['watch', ...netns, ...args], reason);
  });

  it('the library refuses the same numbers (EINVAL), and the CNI plugin a budget past its range', function () {
    assert.throws(
      () => new LinkMonitor({ netns: ns.name, receiveBuffer: 2 ** 32 + 100 }),
      (error: NodeJS.ErrnoException) =>
        error.code === 'EINVAL' && /receiveBuffer/.test(error.message),
    );
    assert.throws(
      () => new FightTracker({ quietMs: 2 ** 32 }, () => 0),
      /fight\.quietMs 4294967296: expected a whole number from 1 to 2147483647/,
    );
    for (const budgetMs of [1e308, 600_001, 0, 1.5]) {
      assert.throws(
        () => parsePluginConfig({ budgetMs }),
        (error: CniError) => error instanceof CniError && error.code === 7,
        String(budgetMs),
      );
    }
    assert.equal(parsePluginConfig({ budgetMs: 600_000 }).budgetMs, 600_000);
  });
});

describe('hardening: doctor --fix --root never writes through a symlink out of the root', function () {
  this.timeout(60_000);
  const DEFAULT_LINK = '/usr/lib/systemd/network/99-default.link';
  let ns: Netns;
  let work: string;

  beforeEach(async function () {
    ns = await Netns.create('fgt-droot');
    await ns.ip('link add flannel.1 type vxlan id 1 dstport 8472 nolearning');
    work = mkdtempSync(tempDirPrefix('droot-hostile'));
    mkdirSync(join(work, 'outside'));
    writeFileSync(join(work, 'outside', 'victim'), 'precious\n');
  });

  afterEach(async function () {
    await ns.destroy();
    rmSync(work, { recursive: true, force: true });
  });

  /** A root holding Debian's 99-default.link (MACAddressPolicy=persistent): --fix wants to write. */
  function makeRoot(): string {
    const root = join(work, 'root');
    mkdirSync(join(root, '/usr/lib/systemd/network'), { recursive: true });
    copyFileSync(DEFAULT_LINK, join(root, DEFAULT_LINK));
    return root;
  }

  async function fix(root: string): Promise<{ changes: { kind: string; path?: string }[] }> {
    const result = await runCommand(
      [process.execPath, CLI_PATH, 'doctor', '--root', root, '--netns', ns.name, '--fix', '--json'],
      { timeoutMs: 30_000 },
    );
    return JSON.parse(result.stdout) as { changes: { kind: string; path?: string }[] };
  }

  const outside = (): string[] => readdirSync(join(work, 'outside')).sort();

  const layouts: [string, (root: string) => void][] = [
    [
      'the .link file a symlink to a file outside',
      (root) => {
        mkdirSync(join(root, 'etc/systemd/network'), { recursive: true });
        symlinkSync(
          join(work, 'outside', 'victim'),
          join(root, 'etc/systemd/network/10-flannel.link'),
        );
      },
    ],
    [
      'the .link file a relative symlink climbing out',
      (root) => {
        mkdirSync(join(root, 'etc/systemd/network'), { recursive: true });
        symlinkSync(
          '../../../../outside/victim',
          join(root, 'etc/systemd/network/10-flannel.link'),
        );
      },
    ],
    [
      'the network folder an absolute symlink to a folder outside',
      (root) => {
        mkdirSync(join(root, 'etc/systemd'), { recursive: true });
        symlinkSync(join(work, 'outside'), join(root, 'etc/systemd/network'));
      },
    ],
    [
      'the network folder a relative symlink climbing out',
      (root) => {
        mkdirSync(join(root, 'etc/systemd'), { recursive: true });
        symlinkSync('../../../outside', join(root, 'etc/systemd/network'));
      },
    ],
    [
      '/etc itself a symlink to a folder outside',
      (root) => {
        symlinkSync(join(work, 'outside'), join(root, 'etc'));
      },
    ],
  ];
  for (const [what, layout] of layouts) {
    it(`${what}: the fix lands inside the root, nothing outside changes`, async function () {
      const root = makeRoot();
      layout(root);
      const report = await fix(root);
      assert.deepEqual(outside(), ['victim'], 'no file added outside');
      assert.equal(readFileSync(join(work, 'outside', 'victim'), 'utf8'), 'precious\n');
      const written = report.changes.filter((c) => c.kind === 'write-file');
      assert.equal(written.length, 1, JSON.stringify(report.changes));
      const path = written[0]?.path ?? '';
      assert.ok(path.startsWith(`${root}/`), `${path} is inside ${root}`);
      assert.equal(lstatSync(path).isFile(), true, 'a regular file, not a link');
      assert.match(readFileSync(path, 'utf8'), /MACAddressPolicy=none/);
    });
  }
});

describe('hardening: a crash never loses the neighbour table (state under --state-dir)', function () {
  this.timeout(60_000);
  const MAC = '0e:00:00:00:aa:01';
  let ns: Netns;
  let stateDir: string;
  let children: RunningChild[] = [];

  beforeEach(async function () {
    ns = await Netns.create('fgt-state');
    stateDir = mkdtempSync(tempDirPrefix('state'));
    await ns.ipBatch([
      `link add flannel.1 address ${MAC} type vxlan id 1 dstport 8472 nolearning`,
      'link set flannel.1 up',
      'neigh add 198.18.0.1 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
      'neigh add 198.18.1.1 lladdr 02:00:00:00:01:02 dev flannel.1 nud permanent',
    ]);
  });

  afterEach(async function () {
    await Promise.all(children.map((child) => child.kill()));
    children = [];
    await ns.destroy();
    rmSync(stateDir, { recursive: true, force: true });
  });

  function watch(args: readonly string[]): RunningChild {
    const child = startCommand(
      [
        process.execPath,
        CLI_PATH,
        'watch',
        '--json',
        '--netns',
        ns.name,
        '--offload',
        'none',
        '--state-dir',
        stateDir,
        ...args,
      ],
      { timeoutMs: 60_000 },
    );
    children.push(child);
    return child;
  }

  async function permanent(): Promise<string[]> {
    const entries = await ns.ipJson<{ dst: string; lladdr?: string }[]>(
      '-4 neigh show dev flannel.1 nud permanent',
    );
    return entries.map((e) => `${e.dst} ${e.lladdr ?? '-'}`).sort();
  }

  const BOTH = ['198.18.0.1 02:00:00:00:01:01', '198.18.1.1 02:00:00:00:01:02'];

  async function macOf(): Promise<string | undefined> {
    return (await ns.ipJson<{ address?: string }[]>('link show flannel.1'))[0]?.address;
  }

  /** The guard saved both entries; then it is killed, and the MAC rewritten while it is down. */
  async function crashAndRewrite(args: readonly string[]): Promise<void> {
    const first = watch(args);
    await first.waitForJson<CliLine>((l) => l.event === 'ready');
    const file = await waitFor(
      () => {
        const name = readdirSync(stateDir).find((n) => /^net-\d+-\d+\.json$/.test(n));
        if (name === undefined) return undefined;
        const text = readFileSync(join(stateDir, name), 'utf8');
        return text.includes('198.18.1.1') && text.includes('198.18.0.1') ? name : undefined;
      },
      { timeoutMs: 5_000, what: 'the state file with both entries' },
    );
    assert.ok(file);
    await first.kill('SIGKILL');
    await ns.ip('link set flannel.1 address 02:00:00:00:bb:01');
    assert.deepEqual(await permanent(), [], 'the MAC change flushed them');
  }

  for (const [what, args] of [
    ['with --mac', ['--mac', `flannel.1=${MAC}`]],
    ['with the first-seen pin (no --mac)', []],
  ] as const) {
    it(`SIGKILL, a rewrite while down, a restart ${what}: MAC and both entries back`, async function () {
      await crashAndRewrite(args);
      const second = watch(args);
      await second.waitForJson<CliLine>((l) => l.event === 'ready');
      await waitFor(async () => (await macOf()) === MAC, { timeoutMs: 5_000, what: 'the MAC' });
      await waitFor(async () => (await permanent()).length === 2, {
        timeoutMs: 5_000,
        what: 'both entries back',
      });
      assert.deepEqual(await permanent(), BOTH);
      assert.equal(jsonLines<CliLine>(second.stdout).filter((l) => l.event === 'error').length, 0);
    });
  }

  it('one entry deleted on purpose while the guard was down stays deleted', async function () {
    const first = watch([]);
    await first.waitForJson<CliLine>((l) => l.event === 'ready');
    await delay(300); // the state save is coalesced over 100 ms
    await first.kill('SIGKILL');
    await ns.ip('neigh del 198.18.1.1 dev flannel.1');
    const second = watch([]);
    await second.waitForJson<CliLine>((l) => l.event === 'ready');
    await roundTripOf(second);
    assert.deepEqual(await permanent(), ['198.18.0.1 02:00:00:00:01:01']);
  });

  /** A rewrite of flannel.1 corrected by the running guard: it has handled all before it. */
  async function roundTripOf(child: RunningChild): Promise<void> {
    const from = jsonLines<CliLine>(child.stdout).length;
    await ns.ip('link set flannel.1 address 02:00:00:00:cc:01');
    await child.waitForJson<CliLine>((l) => l.event === 'restored', 10_000, from);
  }

  it("a state file that is not this namespace's, broken, or a FIFO is ignored with one error", async function () {
    await crashAndRewrite([]);
    const [name] = readdirSync(stateDir).filter((n) => /^net-\d+-\d+\.json$/.test(n));
    assert.ok(name);
    const path = join(stateDir, name);
    const saved = JSON.parse(readFileSync(path, 'utf8')) as { netnsCookie: string };
    const variants: [string, () => void][] = [
      [
        'another namespace',
        () => writeFileSync(path, JSON.stringify({ ...saved, netnsCookie: '999999999' })),
      ],
      ['not JSON', () => writeFileSync(path, '{"version": 1, "dev')],
      [
        'a hostile entry',
        () =>
          writeFileSync(
            path,
            readFileSync(path, 'utf8').replace('02:00:00:00:01:01', 'ff:ff:ff:ff:ff:ff'),
          ),
      ],
      [
        'a FIFO',
        () => {
          rmSync(path);
          execFileSync('mkfifo', [path]);
        },
      ],
    ];
    const original = readFileSync(path, 'utf8');
    for (const [what, spoil] of variants) {
      rmSync(path, { force: true });
      writeFileSync(path, original);
      spoil();
      const child = watch([]);
      await child.waitForJson<CliLine>((l) => l.event === 'ready');
      const error = await child.waitForJson<CliLine>((l) => l.event === 'error');
      assert.match(String(error.message), /state file .* ignored/, what);
      await child.kill();
      assert.deepEqual(await permanent(), [], `${what}: nothing restored from it`);
    }
  });
});

describe('hardening: latencies count from the notification reaching the socket', function () {
  this.timeout(30_000);
  let ns: Netns;

  before(async function () {
    ns = await Netns.create('fgt-arrival');
    await ns.ipBatch([
      'link add flannel.1 address 0e:00:00:00:dd:01 type vxlan id 1 dstport 8472 nolearning',
      'link set flannel.1 up',
      'neigh add 198.18.0.1 lladdr 02:00:00:00:01:01 dev flannel.1 nud permanent',
    ]);
  });

  after(async function () {
    await ns.destroy();
  });

  it('a busy event loop never delays a correction: the MAC is back while JavaScript is still blocked', async function () {
    const guard = await FlannelGuard.start({ netns: ns.name, offload: 'none' });
    try {
      for (const [i, busyMs] of [0, 300].entries()) {
        const restored = once(guard, 'restored') as Promise<[RestoredEvent]>;
        // The rewrite lands while this process (the guard's) is blocked, as by a long
        // JSON.parse or a slow listener; the blocked thread watches the device meanwhile.
        const ip = (...args: string[]): string =>
          execFileSync('ip', ['-n', ns.name, ...args], { encoding: 'utf8' });
        ip('link', 'set', 'flannel.1', 'address', `02:00:00:00:dd:0${String(i + 2)}`);
        const started = performance.now();
        let backAfterMs = NaN;
        while (performance.now() - started < Math.max(busyMs, 2000)) {
          if (
            Number.isNaN(backAfterMs) &&
            ip('link', 'show', 'flannel.1').includes('0e:00:00:00:dd:01')
          )
            backAfterMs = performance.now() - started;
          if (!Number.isNaN(backAfterMs) && performance.now() - started >= busyMs) break;
        }
        assert.ok(
          backAfterMs < 1000,
          `the MAC back while the loop was blocked (${backAfterMs} ms)`,
        );
        const [event] = await restored;
        assert.equal(event.mac, '0e:00:00:00:dd:01');
        assert.equal(event.neighbours, 1);
        // Counted from the notification's arrival to the writes' end: the loop's 300 ms are
        // the report's delay, not the correction's.
        assert.ok(event.latencyMs < 100, `latency ${event.latencyMs} ms, ${busyMs} ms busy`);
      }
    } finally {
      guard.close();
    }
  });
});
