/**
 * The first hour from a checkout, in a copy of it (its sources, this checkout's node_modules and
 * addon) with an npm cache of its own: a build interrupted at any moment leaves the previous
 * dist/ whole (the bin keeps running) and the next build cleans up; `npx` in the checkout never
 * compiles; a guard started through npx stops with npx (SIGTERM or SIGKILL to npx alone), never
 * outliving it as root; the lines that launcher.ts reads are parsed as the kernel writes them.
 * (npx in a checkout installs the checkout into npm's _npx cache first; npm interrupted during
 * that install leaves the cache folder without its package.json, and npm then fails with ENOENT
 * until the folder is deleted. That is npm's, and why the README runs the bin from a checkout.)
 */
import assert from 'node:assert/strict';
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

import { followLaunchers, npmLaunchers, parseStat, readProcess } from '../lib/cli/launcher';
import { delay, Netns, registerSyncCleanup, tempDirPrefix, waitFor } from './support/netns';
import { flannelDeviceLines, UNDERLAY_LINES } from './support/flannel-device';
import { runCommand, startCommand } from './support/node-child';

const CHECKOUT = join(__dirname, '..', '..');

/** A copy of the checkout without dist/ (the sources; node_modules and build/ linked). */
function copyCheckout(): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(tempDirPrefix('checkout'));
  registerSyncCleanup(() => rmSync(dir, { recursive: true, force: true }));
  for (const name of ['lib', 'test', 'scripts', 'package.json', 'tsconfig.json']) {
    cpSync(join(CHECKOUT, name), join(dir, name), { recursive: true });
  }
  for (const name of ['node_modules', 'build']) symlinkSync(join(CHECKOUT, name), join(dir, name));
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    npm_config_cache: join(dir, '.npm-cache'),
    npm_config_update_notifier: 'false',
    npm_config_fund: 'false',
    npm_config_audit: 'false',
  };
  delete env.npm_command; // this process may itself run under npm
  return { dir, env };
}

/** copyCheckout(), with dist/ built in the copy. */
async function builtCheckout(): Promise<ReturnType<typeof copyCheckout>> {
  const checkout = copyCheckout();
  const built = await runCommand(
    [process.execPath, join(checkout.dir, 'scripts', 'build-ts.mjs')],
    { env: checkout.env, timeoutMs: 180_000 },
  );
  assert.equal(built.code, 0, built.stderr);
  return checkout;
}

const building = (dir: string): string[] =>
  readdirSync(dir).filter((name) => name.startsWith('dist.'));

describe('the first run from a checkout', function () {
  this.timeout(240_000);

  it('a build interrupted at any moment leaves the previous dist/ whole; the next one cleans up', async function () {
    const { dir, env } = copyCheckout();
    const build = (...flags: string[]): ReturnType<typeof startCommand> =>
      startCommand([process.execPath, join(dir, 'scripts', 'build-ts.mjs'), ...flags], {
        env,
        timeoutMs: 180_000,
      });
    const first = await build().exited;
    assert.equal(first.code, 0, first.stderr);
    const cli = join(dir, 'dist', 'lib', 'cli', 'main.js');
    assert.equal((await runCommand([cli, '--version'], { env })).code, 0);
    // Fresh: prepare's build costs nothing.
    const again = await build('--if-stale').exited;
    assert.equal(again.stderr, '', 'nothing rebuilt');
    // Stale, and killed in the middle: the old dist/ still runs.
    const source = join(dir, 'lib', 'cli', 'launcher.ts');
    utimesSync(source, new Date(), new Date());
    const interrupted = build('--if-stale');
    await delay(1500);
    await interrupted.kill('SIGKILL');
    assert.equal((await runCommand([cli, '--version'], { env })).code, 0, 'dist/ whole');
    assert.equal(building(dir).length, 1, 'the killed build left its folder');
    const rebuilt = await build('--if-stale').exited;
    assert.equal(rebuilt.code, 0, rebuilt.stderr);
    assert.deepEqual(building(dir), [], 'and the next build removed it');
    assert.equal((await runCommand([cli, '--version'], { env })).code, 0);
  });

  it("npx in the checkout never compiles (a build there is what left npm's cache wedged when interrupted)", async function () {
    const { dir, env } = await builtCheckout();
    const npx = (): Promise<Awaited<ReturnType<typeof runCommand>>> =>
      runCommand(['sh', '-c', `cd "${dir}" && exec npx --yes flannel-guard --version`], {
        env,
        timeoutMs: 120_000,
      });
    const fresh = await npx();
    assert.equal(fresh.code, 0, fresh.stderr);
    assert.match(fresh.stdout, /^0\.\d+\.\d+/m);
    assert.doesNotMatch(fresh.stderr, /compiling/);
    // Stale sources: npx still runs the dist/ there is, and builds nothing (npm hides what
    // lifecycle scripts print; the build's stamp shows that none ran).
    const stamp = readFileSync(join(dir, 'dist', '.build-stamp'), 'utf8');
    utimesSync(join(dir, 'lib', 'index.ts'), new Date(), new Date());
    rmSync(join(dir, '.npm-cache'), { recursive: true, force: true });
    const stale = await npx();
    assert.equal(stale.code, 0, stale.stderr);
    assert.equal(readFileSync(join(dir, 'dist', '.build-stamp'), 'utf8'), stamp);
    assert.deepEqual(building(dir), []);
  });

  it('a project that link-installs the checkout: its install builds only stale sources, the bin runs throughout, and its npx killed at any moment runs next time', async function () {
    const { dir, env } = await builtCheckout();
    const consumer = mkdtempSync(tempDirPrefix('consumer'));
    registerSyncCleanup(() => rmSync(consumer, { recursive: true, force: true }));
    writeFileSync(
      join(consumer, 'package.json'),
      JSON.stringify({
        name: 'consumer',
        version: '1.0.0',
        private: true,
        dependencies: { 'flannel-guard': `file:${dir}` },
      }),
    );
    const cli = join(dir, 'dist', 'lib', 'cli', 'main.js');
    /** npm install in the consumer, with the checkout's bin run over and over meanwhile. */
    const installWhileRunning = async (): Promise<number> => {
      const install = startCommand(['npm', 'install', '--offline'], {
        cwd: consumer,
        env,
        timeoutMs: 180_000,
      });
      let runs = 0;
      while (!install.hasExited && runs < 1000) {
        const version = await runCommand([cli, '--version'], { env });
        assert.equal(version.code, 0, `the bin during the install: ${version.stderr}`);
        runs += 1;
      }
      const installed = await install.exited;
      assert.equal(installed.code, 0, installed.stderr);
      return runs;
    };
    const stamp = (): string => readFileSync(join(dir, 'dist', '.build-stamp'), 'utf8');
    const fresh = stamp();
    await installWhileRunning();
    assert.equal(stamp(), fresh, "a fresh dist/ is not rebuilt by the consumer's install");
    utimesSync(join(dir, 'lib', 'index.ts'), new Date(), new Date());
    const runs = await installWhileRunning();
    assert.notEqual(stamp(), fresh, 'stale sources are rebuilt');
    assert.ok(runs > 1, `the bin ran ${runs} times during the rebuild`);
    assert.deepEqual(building(dir), []);
    // npx in the consumer runs node_modules/.bin: npm's _npx cache, which an interrupted
    // install leaves broken, is never used.
    const npx = ['npx', '--offline', 'flannel-guard', '--version'];
    for (const killAfterMs of [50, 150, 250, 400, 600]) {
      const interrupted = startCommand(npx, { cwd: consumer, env });
      await delay(killAfterMs);
      await interrupted.kill('SIGKILL');
      const next = await runCommand(npx, { cwd: consumer, env, timeoutMs: 60_000 });
      assert.equal(next.code, 0, `after a kill at ${killAfterMs} ms: ${next.stderr}`);
      assert.match(next.stdout, /^0\.\d+\.\d+/m);
    }
    assert.equal(existsSync(join(dir, '.npm-cache', '_npx')), false, 'nothing installed by npx');
  });

  describe('a guard started through npx', function () {
    let ns: Netns;

    beforeEach(async function () {
      ns = await Netns.create('fgnpx');
      await ns.ipBatch([...UNDERLAY_LINES, ...flannelDeviceLines(null)]);
    });

    afterEach(async function () {
      await ns.destroy();
    });

    // SIGINT to npx alone reaches no one (npm hands it to the shell, which waits for the guard);
    // Ctrl-C in a terminal signals the whole process group, which is what SIGINT is sent to here.
    for (const [signal, toGroup] of [
      ['SIGTERM', false],
      ['SIGKILL', false],
      ['SIGINT', true],
    ] as const) {
      const whom = toGroup ? "npx's process group (Ctrl-C)" : 'npx alone';
      it(`${signal} to ${whom}: the guard stops too, within a second or two, and so does npx`, async function () {
        const cache = mkdtempSync(tempDirPrefix('npx-cache'));
        registerSyncCleanup(() => rmSync(cache, { recursive: true, force: true }));
        const env: NodeJS.ProcessEnv = { ...process.env, npm_config_cache: cache };
        delete env.npm_command;
        const npx = startCommand(
          [
            // A process group of its own, led by npx (setsid execs, and sh execs npx).
            'setsid',
            'sh',
            '-c',
            `cd "${CHECKOUT}" && exec npx --yes flannel-guard watch --json --netns ${ns.name} --state-dir off --offload none`,
          ],
          { env, timeoutMs: 120_000 },
        );
        await npx.waitForLine((line) => line.includes('"event":"ready"'), 60_000);
        const guard = await waitFor(
          () => (readProcess(npx.child.pid ?? 0) === null ? undefined : guardPid(ns.name)),
          { timeoutMs: 5000, what: 'the guard process' },
        );
        const npxPid = npx.child.pid ?? 0;
        process.kill(toGroup ? -npxPid : npxPid, signal);
        await waitFor(() => readProcess(guard) === null, {
          timeoutMs: 5000,
          what: `the guard (pid ${guard}) ending with npx`,
        });
        await waitFor(() => npx.hasExited, { timeoutMs: 5000, what: 'npx ending' });
      });
    }
  });

  it('a restart says where its MAC comes from and what it found, not "X -> X"', async function () {
    const ns = await Netns.create();
    try {
      await ns.ipBatch([...UNDERLAY_LINES, ...flannelDeviceLines(null)]);
      const stateDir = mkdtempSync(tempDirPrefix('restart-state'));
      registerSyncCleanup(() => rmSync(stateDir, { recursive: true, force: true }));
      const watch = async (): Promise<string> => {
        const cli = join(CHECKOUT, 'dist', 'lib', 'cli', 'main.js');
        const guard = startCommand([cli, 'watch', '--netns', ns.name, '--state-dir', stateDir]);
        await guard.waitForLine((line) => / (restored|offload): /.test(line));
        guard.child.kill('SIGTERM'); // its last save is made as it stops
        const { stdout } = await guard.exited;
        return stdout;
      };
      const first = await watch();
      const pinned = /desired (\S+) \[pinned-at-start\]/.exec(first)?.[1];
      assert.ok(pinned !== undefined, first);
      await ns.ip('link set flannel.1 address 0e:00:00:00:00:07'); // while it is down
      const second = await watch();
      assert.match(
        second,
        new RegExp(`desired ${pinned} \\[pinned-at-start, from the state file\\]`),
      );
      assert.match(
        second,
        new RegExp(`rewrite: flannel\\.1 found at 0e:00:00:00:00:07 \\(expected ${pinned}\\)`),
      );
      assert.match(second, new RegExp(`restored: flannel\\.1 mac ${pinned} `));
    } finally {
      await ns.destroy();
    }
  });

  it('deploy/systemd: the unit passes systemd-analyze verify, hardened to the two capabilities it needs', async function () {
    const unit = readFileSync(join(CHECKOUT, 'deploy', 'systemd', 'flannel-guard.service'), 'utf8');
    assert.match(unit, /^CapabilityBoundingSet=CAP_NET_ADMIN CAP_NET_RAW$/m);
    assert.match(unit, /^ProtectSystem=strict$/m);
    assert.match(unit, /^RuntimeDirectory=flannel-guard$/m);
    assert.match(
      unit,
      /^ExecStart=\/usr\/local\/bin\/flannel-guard watch --state-dir \/run\/flannel-guard$/m,
    );
    // Every address family the native code opens a socket of is allowed (AF_PACKET for the
    // checksum sample was not: systemd-analyze cannot see that).
    const allowed = /^RestrictAddressFamilies=(.+)$/m.exec(unit)?.[1]?.split(' ') ?? [];
    const native = join(CHECKOUT, 'native');
    const opened = new Set(
      readdirSync(native)
        .filter((name) => name.endsWith('.cc'))
        .flatMap((name) => [
          ...readFileSync(join(native, name), 'utf8').matchAll(/\bsocket\((AF_[A-Z0-9]+)/g),
        ])
        .map((match) => match[1] ?? ''),
    );
    assert.ok(opened.has('AF_NETLINK') && opened.has('AF_PACKET'), [...opened].join(' '));
    for (const family of opened) assert.ok(allowed.includes(family), `${family}: ${unit}`);
    // verify also checks that ExecStart's program exists: this checkout's bin stands in for the
    // one `npm install -g` puts in /usr/local/bin.
    const dir = mkdtempSync(tempDirPrefix('unit'));
    try {
      const copy = join(dir, 'flannel-guard.service');
      writeFileSync(
        copy,
        unit.replace(
          '/usr/local/bin/flannel-guard',
          join(CHECKOUT, 'dist', 'lib', 'cli', 'main.js'),
        ),
      );
      const verified = await runCommand(['systemd-analyze', 'verify', copy], { timeoutMs: 60_000 });
      assert.equal(verified.code, 0, verified.stdout + verified.stderr);
      assert.equal(verified.stderr.trim(), '', verified.stderr);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('launcher: /proc stat lines, the npm chain, and following it', async function () {
    const stat =
      '4242 (sh (x) y) S 4241 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 2000 300';
    assert.deepEqual(parseStat(stat), { ppid: 4241, start: '987654', comm: 'sh (x) y' });
    assert.equal(parseStat('garbage'), null);
    const table = new Map([
      [20, { ppid: 10, start: '200', comm: 'sh' }],
      [10, { ppid: 1, start: '100', comm: 'npm exec flanne' }],
      [30, { ppid: 1, start: '300', comm: 'bash' }],
    ]);
    const read = (pid: number) => table.get(pid) ?? null;
    assert.deepEqual(npmLaunchers({ npm_command: 'exec' }, 20, read), [
      { pid: 20, start: '200' },
      { pid: 10, start: '100' },
    ]);
    assert.deepEqual(npmLaunchers({}, 20, read), [], 'not started by npm');
    assert.deepEqual(npmLaunchers({ npm_command: 'exec' }, 30, read), [], 'no npm above');
    // npm gone, or its PID taken by another process: the guard is told once.
    let gone = 0;
    const stop = followLaunchers(
      npmLaunchers({ npm_command: 'exec' }, 20, read),
      () => (gone += 1),
      read,
      10,
    );
    await delay(40);
    assert.equal(gone, 0);
    table.set(10, { ppid: 1, start: '999', comm: 'other' });
    await waitFor(() => gone === 1, { timeoutMs: 1000, what: 'told' });
    await delay(40);
    assert.equal(gone, 1);
    stop();
    assert.equal(readProcess(process.pid)?.ppid, process.ppid);
  });
});

/** The guard process watching `netns`, by its command line. */
function guardPid(netns: string): number | undefined {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const info = readProcess(Number(entry));
    if (info === null || info.comm.startsWith('npm') || info.comm === 'sh') continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (cmdline.includes('watch') && cmdline.includes(netns)) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}
