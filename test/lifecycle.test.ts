/**
 * The native core's lifecycle requirements against the real kernel: worker threads, fd leaks
 * over 1000 open/close cycles, CLOEXEC, the calling thread never changing namespace, missing
 * capabilities, throwing listeners, ref/unref, close() at awkward moments, and error shapes.
 */
import assert from 'node:assert/strict';
import { readdirSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

import { binding, type RawMonitorItem } from '../lib/core/binding';
import { isSystemError, type SystemError } from '../lib/core/errors';
import { LinkMonitor } from '../lib/core/monitor';
import { LINK_MONITOR_EVENTS } from '../lib/core/monitor-events';
import { getDriverInfo, getFeatures, getLink, getLinks, setLinkMac } from '../lib/core/oneshot';
import { collectEvents, nextEvent } from './support/events';
import type { ErrorReport } from './support/lifecycle-child';
import type { WorkerMessage, WorkerTask } from './support/lifecycle-worker';
import { delay, Netns, waitFor } from './support/netns';
import {
  LIB_INDEX,
  LIFECYCLE_CHILD,
  jsonLines,
  runCommand,
  startCommand,
  withoutCapability,
} from './support/node-child';

const WORKER = join(__dirname, 'support', 'lifecycle-worker.js');

/** A few turns of the event loop: enough for libuv to run pending close callbacks. */
async function turns(count = 5): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** fd number -> link target, for this process. */
function openFds(): Map<string, string> {
  const fds = new Map<string, string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      fds.set(fd, readlinkSync(`/proc/self/fd/${fd}`));
    } catch {
      /* the directory fd of readdirSync itself is gone by now */
    }
  }
  return fds;
}

function socketInodes(targets: Iterable<string>): Set<string> {
  return new Set([...targets].filter((target) => /^socket:\[\d+\]$/.test(target)));
}

/** Waits (bounded) for the fd count to drop back to `baseline`, then returns what is left over. */
async function leftoverFds(baseline: Map<string, string>): Promise<string[]> {
  let now = openFds();
  for (let round = 0; round < 50 && now.size > baseline.size; round += 1) {
    await turns(2);
    await delay(10);
    now = openFds();
  }
  return [...now]
    .filter(([fd, target]) => baseline.get(fd) !== target)
    .map(([fd, t]) => `${fd} -> ${t}`);
}

function netInode(path: string): number {
  return statSync(path).ino;
}

/**
 * Records every monitor event emitted after `monitor.closed` became true. ('error' is among
 * them, so an error event is recorded rather than thrown.)
 */
function eventsAfterClose(monitor: LinkMonitor): { late: string[]; closes: () => number } {
  const late: string[] = [];
  let closes = 0;
  const untyped = monitor as unknown as NodeJS.EventEmitter;
  for (const name of LINK_MONITOR_EVENTS) {
    untyped.on(name, () => {
      if (monitor.closed) late.push(name);
    });
  }
  monitor.on('close', () => {
    closes += 1;
  });
  return { late, closes: () => closes };
}

function assertSystemError(
  error: unknown,
  expected: Partial<SystemError> & { code: string; errno: number },
): asserts error is SystemError {
  assert.ok(error instanceof Error, `expected an Error, got ${String(error)}`);
  assert.ok(isSystemError(error), `not a system error: ${error.message}`);
  for (const [key, value] of Object.entries(expected)) {
    assert.deepEqual(
      (error as unknown as Record<string, unknown>)[key],
      value,
      `${key} of ${error.message}`,
    );
  }
}

function assertReport(report: ErrorReport | undefined, expected: Partial<ErrorReport>): void {
  assert.ok(report, 'an error was reported');
  for (const [key, value] of Object.entries(expected)) {
    assert.deepEqual(report[key as keyof ErrorReport], value, `${key} of ${report.message}`);
  }
}

// --- worker helpers -------------------------------------------------------------------

class TestWorker {
  readonly messages: WorkerMessage[] = [];
  readonly errors: Error[] = [];
  exitCode: number | undefined;
  readonly worker: Worker;
  readonly #waiters = new Set<() => void>();

  constructor(task: WorkerTask) {
    this.worker = new Worker(WORKER, { workerData: task });
    this.worker.on('message', (message: WorkerMessage) => {
      this.messages.push(message);
      this.#wake();
    });
    this.worker.on('error', (error) => {
      this.errors.push(error);
      this.#wake();
    });
    this.worker.on('exit', (code) => {
      this.exitCode = code;
      this.#wake();
    });
  }

  #wake(): void {
    for (const wake of this.#waiters) wake();
  }

  #until<T>(found: () => T | undefined, what: string, timeoutMs: number): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const value = found();
        if (value !== undefined) {
          finish();
          resolve(value);
          return;
        }
        const failed = this.messages.find((m) => m.type === 'failed');
        if (failed || this.errors.length > 0 || this.exitCode !== undefined) {
          finish();
          reject(
            new Error(
              `worker ended before ${what}: ${JSON.stringify(failed)} ${this.errors.map(String).join('; ')} exit ${String(this.exitCode)}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`no ${what} from the worker within ${timeoutMs} ms`));
      }, timeoutMs);
      const finish = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }

  message<Type extends WorkerMessage['type']>(
    type: Type,
    timeoutMs = 10_000,
  ): Promise<Extract<WorkerMessage, { type: Type }>> {
    return this.#until(
      () => this.messages.find((m): m is Extract<WorkerMessage, { type: Type }> => m.type === type),
      `a '${type}' message`,
      timeoutMs,
    );
  }

  /** Resolves with the exit code; rejects if it does not exit within `timeoutMs`. */
  exit(timeoutMs = 10_000): Promise<number> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (this.exitCode === undefined) return;
        finish();
        resolve(this.exitCode);
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`worker did not exit within ${timeoutMs} ms`));
      }, timeoutMs);
      const finish = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }
}

describe('native core lifecycle (real kernel, netns)', function () {
  this.timeout(120_000);
  let namespaces: Netns[] = [];
  let monitors: LinkMonitor[] = [];
  let workers: TestWorker[] = [];

  async function netns(): Promise<Netns> {
    const ns = await Netns.create('fgt-life');
    namespaces.push(ns);
    return ns;
  }

  function track(monitor: LinkMonitor): LinkMonitor {
    monitors.push(monitor);
    return monitor;
  }

  function startWorker(task: WorkerTask): TestWorker {
    const worker = new TestWorker(task);
    workers.push(worker);
    return worker;
  }

  afterEach(async function () {
    for (const monitor of monitors) monitor.close();
    monitors = [];
    await Promise.all(workers.map((w) => w.worker.terminate().catch(() => undefined)));
    workers = [];
    await Promise.all(namespaces.map((ns) => ns.destroy()));
    namespaces = [];
  });

  describe('inside worker_threads', function () {
    it('opens a LinkMonitor, sees an ifb being added, and writes and reads through the one-shot API', async function () {
      const ns = await netns();
      await ns.ip('link add vx0 type vxlan id 7 dstport 8472 nolearning');
      const worker = startWorker({
        mode: 'observe',
        netns: ns.name,
        ifb: 'ifbw0',
        device: 'vx0',
        mac: '02:00:00:00:00:a1',
      });
      const ready = await worker.message('ready');
      assert.deepEqual([...ready.links].sort(), ['lo', 'vx0']);
      assert.equal(
        ready.netnsInode,
        binding.netnsInode(),
        'the worker thread stayed in its namespace',
      );

      await ns.ip('link add ifbw0 type ifb');
      const observed = await worker.message('observed');
      const [ifb] = await ns.ipJson<{ ifindex: number; address: string }[]>('link show ifbw0');
      assert.equal(observed.added.name, 'ifbw0');
      assert.equal(observed.added.kind, 'ifb');
      assert.equal(observed.added.ifindex, ifb?.ifindex);
      assert.equal(observed.added.mac, ifb?.address);
      assert.equal(observed.created, true);

      const [vx0] = await ns.ipJson<{ ifindex: number; address: string }[]>('link show vx0');
      assert.equal(observed.setMac.changed, true);
      assert.equal(observed.setMac.mac, '02:00:00:00:00:a1');
      assert.equal(observed.setMac.ifindex, vx0?.ifindex);
      assert.notEqual(observed.setMac.previous, '02:00:00:00:00:a1');
      assert.equal(observed.readBack, '02:00:00:00:00:a1');
      assert.equal(vx0?.address, '02:00:00:00:00:a1', 'the kernel has the MAC the worker set');

      assert.ok(observed.featureCount > 30, `${observed.featureCount} features`);
      assert.equal(observed.txChecksum, true);
      assertReport(observed.missing, {
        code: 'ENODEV',
        errno: -19,
        syscall: 'getlink',
        interface: 'nope0',
        netns: ns.name,
      });
      assert.equal(observed.closeEvents, 1);
      assert.equal(await worker.exit(), 0, 'the worker ends by itself once its monitor is closed');
    });

    it('survives worker.terminate() while the worker monitor is open and polling', async function () {
      const ns = await netns();
      for (let round = 0; round < 5; round += 1) {
        const worker = startWorker({ mode: 'poll', netns: ns.name });
        await worker.message('ready');
        // The monitor is live: it delivers an event, then its reader thread waits on the socket
        // when the worker is terminated (the teardown joins it).
        await ns.ip(`link add ifbt${round} type ifb`);
        assert.equal((await worker.message('seen')).name, `ifbt${round}`);
        const code = await worker.worker.terminate();
        assert.equal(code, 1, 'a terminated worker exits with code 1');
        assert.deepEqual(worker.errors, []);
      }
      // The main thread is fine: it can still open a monitor and see changes.
      const monitor = track(await LinkMonitor.open({ netns: ns.name }));
      const added = nextEvent(monitor, 'linkAdded', (e) => e.link.name === 'ifbmain');
      await ns.ip('link add ifbmain type ifb');
      assert.equal((await added)[0].link.kind, 'ifb');
      assert.deepEqual((await getLinks({ netns: ns.name })).map((l) => l.name).sort(), [
        'ifbmain',
        'ifbt0',
        'ifbt1',
        'ifbt2',
        'ifbt3',
        'ifbt4',
        'lo',
      ]);
    });

    for (const mode of ['events', 'oneshot'] as const) {
      it(`survives worker.terminate() ${mode === 'events' ? 'while a batch of events is being delivered' : 'with one-shot calls in flight on the thread pool'}`, async function () {
        this.timeout(120_000);
        const ns = await netns();
        const stress = join(__dirname, 'support', 'terminate-stress.js');
        const result = await runCommand([process.execPath, stress, mode, ns.name, '25'], {
          timeoutMs: 100_000,
        });
        assert.equal(result.signal, null, result.stderr);
        assert.equal(result.code, 0, result.stderr);
        assert.match(result.stdout, /survived 25 rounds/);
        assert.doesNotMatch(result.stderr, /terminate called|FATAL ERROR/);
      });
    }

    it('a worker whose monitor is closed, or unref()ed, exits normally by itself', async function () {
      const ns = await netns();
      const closing = startWorker({ mode: 'close', netns: ns.name });
      const closed = await closing.message('closed');
      assert.equal(closed.closeEvents, 1, "close() twice emits 'close' once");
      assert.equal(await closing.exit(), 0);
      assert.deepEqual(closing.errors, []);

      const unrefd = startWorker({ mode: 'unref', netns: ns.name });
      await unrefd.message('ready');
      assert.equal(await unrefd.exit(), 0);
      assert.deepEqual(unrefd.errors, []);
    });

    it("a throwing listener in a worker becomes that worker's 'error' event", async function () {
      const ns = await netns();
      const worker = startWorker({ mode: 'throw', netns: ns.name, ifb: 'ifbboom' });
      await worker.message('ready');
      await ns.ip('link add ifbboom type ifb');
      assert.equal(await worker.exit(), 1);
      assert.equal(worker.errors.length, 1);
      assert.equal(worker.errors[0]?.message, 'boom in worker: ifbboom');
    });
  });

  describe('fd leaks (N18)', function () {
    it('1000 LinkMonitor open/close cycles, in a netns and in the own namespace, leave no fd behind', async function () {
      const ns = await netns();
      await ns.ip('link add ifbl0 type ifb');
      // Warm-up: lazily created fds (thread pool, epoll) exist before the baseline.
      for (let i = 0; i < 5; i += 1) {
        (await LinkMonitor.open({ netns: ns.name })).close();
        (await LinkMonitor.open()).close();
      }
      await turns();
      const baseline = openFds();
      for (let i = 0; i < 1000; i += 1) {
        const inNetns = i % 2 === 0;
        const options = inNetns ? { netns: ns.name } : {};
        if (i % 4 < 2) {
          // Open, wait for the first snapshot, close.
          const monitor = await LinkMonitor.open(options);
          if (inNetns) assert.equal(monitor.links().length, 2);
          monitor.close();
        } else {
          // Close while the initial dump is still in flight.
          new LinkMonitor(options).close();
        }
        if (i % 100 === 99) await turns(1);
      }
      assert.deepEqual(await leftoverFds(baseline), []);
    });

    it('1000 raw Monitor start/close cycles leave no fd behind', async function () {
      const ns = await netns();
      const batches: RawMonitorItem[][] = [];
      const open = (netnsPath: string | undefined): void => {
        const monitor = new binding.Monitor(
          netnsPath === undefined ? {} : { netns: netnsPath },
          (b) => batches.push(b),
        );
        monitor.start();
        monitor.close();
      };
      for (let i = 0; i < 5; i += 1) open(ns.path);
      await turns();
      const baseline = openFds();
      for (let i = 0; i < 1000; i += 1) {
        open(i % 2 === 0 ? ns.path : undefined);
        if (i % 100 === 99) await turns(1);
      }
      assert.deepEqual(await leftoverFds(baseline), []);
      assert.deepEqual(batches, [], 'a monitor closed in the turn it started delivers nothing');
    });

    it('1000 Control open/close cycles, with sync and thread-pool requests, leave no fd behind', async function () {
      const ns = await netns();
      await ns.ip('link add vxl0 type vxlan id 3 dstport 8472 nolearning');
      for (let i = 0; i < 5; i += 1) {
        await getLink('vxl0', { netns: ns.name });
        await getLink('lo');
      }
      await turns();
      const baseline = openFds();
      for (let i = 0; i < 1000; i += 1) {
        const inNetns = i % 2 === 0;
        const control = inNetns
          ? new binding.Control({ netns: ns.path, netnsLabel: ns.name })
          : new binding.Control();
        if (i % 3 === 0) {
          assert.ok(control.dumpLinks().length >= 1);
        } else if (i % 3 === 1) {
          assert.equal((await control.getLinkByName('lo', true)).name, 'lo');
        }
        control.close();
        if (i % 10 === 0) {
          // The one-shot API: its own Control per call, on the thread pool.
          const link = await getLink(inNetns ? 'vxl0' : 'lo', inNetns ? { netns: ns.name } : {});
          assert.equal(link.name, inNetns ? 'vxl0' : 'lo');
          if (inNetns) assert.equal((await getFeatures('vxl0', { netns: ns.name })).legacy, false);
          if (inNetns)
            assert.equal((await getDriverInfo('vxl0', { netns: ns.name })).driver, 'vxlan');
        }
      }
      assert.deepEqual(await leftoverFds(baseline), []);
    });

    it('failed opens (missing namespace, a file that is not one) leave no fd behind', async function () {
      const missing = `fgt-missing-${process.pid}`;
      const notNetns = '/proc/self/status';
      const attempt = async (): Promise<void> => {
        assert.throws(() => new LinkMonitor({ netns: missing }), { code: 'ENOENT' });
        assert.throws(() => new binding.Control({ netns: notNetns }), {
          code: 'EINVAL',
          syscall: 'ioctl(NS_GET_NSTYPE)',
        });
        await assert.rejects(getLinks({ netns: notNetns }), { code: 'EINVAL' });
      };
      await attempt();
      await turns();
      const baseline = openFds();
      for (let i = 0; i < 500; i += 1) await attempt();
      assert.deepEqual(await leftoverFds(baseline), []);
    });

    it('a closed Control rejects further requests with EBADF and close() is idempotent', async function () {
      const ns = await netns();
      const control = new binding.Control({ netns: ns.path, netnsLabel: ns.name });
      control.close();
      control.close();
      assert.throws(
        () => control.dumpLinks(),
        (error: unknown) => {
          assertSystemError(error, { code: 'EBADF', errno: -9 });
          return true;
        },
      );
      await assert.rejects(control.dumpLinks(true), (error: unknown) => {
        assertSystemError(error, { code: 'EBADF', errno: -9 });
        return true;
      });
    });
  });

  describe('namespaces and inheritance', function () {
    it('N21: no netlink socket of an open monitor or control is inherited by a child process', async function () {
      const ns = await netns();
      const before = socketInodes(openFds().values());
      const inNetns = track(await LinkMonitor.open({ netns: ns.name }));
      const own = track(await LinkMonitor.open());
      const controlNetns = new binding.Control({ netns: ns.path, netnsLabel: ns.name });
      const controlOwn = new binding.Control();
      try {
        const ours = [...socketInodes(openFds().values())].filter((s) => !before.has(s));
        // One socket per monitor (sysfs is read natively, without a control), one per control.
        assert.ok(ours.length >= 4, `our netlink sockets: ${ours.join(' ')}`);
        assert.ok(inNetns.isReady && own.isReady);

        const child = await runCommand(['ls', '-l', '/proc/self/fd/']);
        assert.equal(child.code, 0, child.stderr);
        const inherited = new Set(child.stdout.match(/socket:\[\d+\]/g) ?? []);
        assert.deepEqual(
          ours.filter((socket) => inherited.has(socket)),
          [],
          `child fds:\n${child.stdout}`,
        );
        // The child's fd listing itself works: its stdio is listed.
        assert.match(child.stdout, / 1 -> /);
      } finally {
        controlNetns.close();
        controlOwn.close();
      }
    });

    it('N17: opening monitors and controls in other namespaces never moves a thread of this process', async function () {
      const a = await netns();
      const b = await netns();
      await a.ip('link add ifba type ifb');
      await b.ip('link add ifbb type ifb');
      const mainBefore = netInode('/proc/thread-self/ns/net');
      assert.equal(binding.netnsInode(), mainBefore);

      const monitorA = track(await LinkMonitor.open({ netns: a.name }));
      const monitorB = track(await LinkMonitor.open({ netns: b.name }));
      const control = new binding.Control({ netns: a.path, netnsLabel: a.name });
      assert.equal(control.ownNetns, false);
      assert.equal(control.netnsInode, netInode(a.path));
      control.dumpLinks();
      await control.dumpLinks(true);
      control.close();
      await Promise.all([getLinks({ netns: a.name }), getLinks({ netns: b.name }), getLinks()]);

      assert.equal(netInode('/proc/thread-self/ns/net'), mainBefore);
      assert.equal(binding.netnsInode(), mainBefore);
      assert.notEqual(binding.netnsInode(a.path), mainBefore);
      assert.notEqual(binding.netnsInode(a.path), binding.netnsInode(b.path));
      // Every thread (the libuv pool included) is still in our namespace.
      for (const task of readdirSync('/proc/self/task')) {
        assert.equal(netInode(`/proc/self/task/${task}/ns/net`), mainBefore, `thread ${task}`);
      }

      assert.deepEqual(
        monitorA
          .links()
          .map((l) => l.name)
          .sort(),
        ['ifba', 'lo'],
      );
      assert.deepEqual(
        monitorB
          .links()
          .map((l) => l.name)
          .sort(),
        ['ifbb', 'lo'],
      );
      const addedToA = collectEvents(monitorA, 'linkAdded');
      const inB = nextEvent(monitorB, 'linkAdded', (e) => e.link.name === 'ifbb2');
      await b.ip('link add ifbb2 type ifb');
      await inB;
      const sentinel = nextEvent(monitorA, 'linkAdded', (e) => e.link.name === 'ifba2');
      await a.ip('link add ifba2 type ifb');
      await sentinel;
      addedToA.stop();
      assert.deepEqual(
        addedToA.events.map((e) => e.link.name),
        ['ifba2'],
        "A's monitor sees A's links only",
      );
    });
  });

  describe('privileges (S9, S10, E13)', function () {
    /** CapEff of a process started with `prefix`, as a bigint. */
    async function effectiveCaps(prefix: string[]): Promise<bigint> {
      const result = await runCommand([...prefix, 'grep', 'CapEff', '/proc/self/status']);
      const hex = /CapEff:\s*([0-9a-f]+)/.exec(result.stdout)?.[1];
      assert.ok(hex, result.stdout + result.stderr);
      return BigInt(`0x${hex}`);
    }
    const CAP_NET_ADMIN = 12n;
    const CAP_SYS_ADMIN = 21n;

    it('N3: a receive buffer above rmem_max: forced with CAP_NET_ADMIN, else capped with a warning, never a failure', async function () {
      const ns = await netns();
      const script = `
        const { LinkMonitor } = require(${JSON.stringify(LIB_INDEX)});
        const monitor = new LinkMonitor({ netns: ${JSON.stringify(ns.name)}, receiveBuffer: 64 * 1024 * 1024 });
        const warnings = [];
        monitor.on('warning', (w) => warnings.push(w));
        monitor.ready().then(() => {
          console.log(JSON.stringify({ receiveBuffer: monitor.stats().receiveBuffer, warnings }));
          monitor.close();
        });`;
      const rmemMax = Number((await ns.readFile('/proc/sys/net/core/rmem_max')).trim());
      const privileged = await runCommand([process.execPath, '-e', script]);
      assert.equal(privileged.code, 0, privileged.stderr);
      const forced = JSON.parse(privileged.stdout) as {
        receiveBuffer: number;
        warnings: unknown[];
      };
      assert.equal(
        forced.receiveBuffer,
        2 * 64 * 1024 * 1024,
        'SO_RCVBUFFORCE, doubled by the kernel',
      );
      assert.deepEqual(forced.warnings, []);

      const capped = await runCommand([
        ...withoutCapability('net_admin'),
        process.execPath,
        '-e',
        script,
      ]);
      assert.equal(capped.code, 0, capped.stderr);
      const degraded = JSON.parse(capped.stdout) as {
        receiveBuffer: number;
        warnings: { code: string; message: string }[];
      };
      assert.equal(
        degraded.receiveBuffer,
        2 * rmemMax,
        'read back: plain SO_RCVBUF, capped by rmem_max',
      );
      assert.equal(degraded.warnings.length, 1);
      assert.equal(degraded.warnings[0]?.code, 'EDEGRADED');
      assert.match(
        degraded.warnings[0]?.message ?? '',
        /SO_RCVBUFFORCE failed \(EPERM\).*rmem_max/,
      );
    });

    it('without CAP_NET_ADMIN every write fails with EPERM naming CAP_NET_ADMIN, and reads still work', async function () {
      const ns = await netns();
      await ns.ip('link add vx0 type vxlan id 9 dstport 8472 nolearning');
      const [before] = await ns.ipJson<{ address: string }[]>('link show vx0');
      const prefix = withoutCapability('net_admin');
      const caps = await effectiveCaps(prefix);
      assert.equal((caps >> CAP_NET_ADMIN) & 1n, 0n, 'the child really lacks CAP_NET_ADMIN');
      assert.equal((caps >> CAP_SYS_ADMIN) & 1n, 1n, 'but may still enter the namespace');

      const result = await runCommand([
        ...prefix,
        process.execPath,
        LIFECYCLE_CHILD,
        'writes',
        ns.name,
        'vx0',
      ]);
      assert.equal(result.code, 0, result.stderr);
      const lines = jsonLines<{ what: string; ok: boolean; value?: unknown; error?: ErrorReport }>(
        result.stdout,
      );
      const line = (what: string): (typeof lines)[number] | undefined =>
        lines.find((l) => l.what === what);

      for (const [what, syscall] of [
        ['setLinkMac', 'setlink'],
        ['setFeatures', 'ioctl(ETHTOOL_SFEATURES)'],
      ] as const) {
        assert.equal(line(what)?.ok, false, `${what} must fail`);
        assertReport(line(what)?.error, {
          code: 'EPERM',
          errno: -1,
          syscall,
          capability: 'CAP_NET_ADMIN',
          netns: ns.name,
          interface: 'vx0',
        });
        assert.match(line(what)?.error?.message ?? '', /CAP_NET_ADMIN/);
        assert.match(line(what)?.error?.message ?? '', new RegExp(ns.name));
      }
      assert.equal(line('probeWriteAccess')?.ok, false);
      assertReport(line('probeWriteAccess')?.error, {
        code: 'EPERM',
        errno: -1,
        syscall: 'setlink',
        capability: 'CAP_NET_ADMIN',
        netns: ns.name,
      });
      assert.match(line('probeWriteAccess')?.error?.message ?? '', /CAP_NET_ADMIN/);

      assert.deepEqual(line('getLinks'), { what: 'getLinks', ok: true, value: ['lo', 'vx0'] });
      assert.deepEqual(line('getFeatures')?.value, {
        name: 'tx-checksum-ip-generic',
        available: true,
        requested: true,
        active: true,
        fixed: false,
      });
      // Nothing was changed.
      const [after] = await ns.ipJson<{ address: string }[]>('link show vx0');
      assert.equal(after?.address, before?.address);
      const ethtool = await ns.run(['ethtool', '-k', 'vx0']);
      assert.match(ethtool.stdout, /^\ttx-checksum-ip-generic: on$/m);
    });

    it('without CAP_SYS_ADMIN another namespace cannot be entered: EPERM naming CAP_SYS_ADMIN (setns)', async function () {
      const ns = await netns();
      const prefix = withoutCapability('sys_admin');
      const caps = await effectiveCaps(prefix);
      assert.equal((caps >> CAP_SYS_ADMIN) & 1n, 0n, 'the child really lacks CAP_SYS_ADMIN');

      const result = await runCommand([
        ...prefix,
        process.execPath,
        LIFECYCLE_CHILD,
        'enter',
        ns.name,
      ]);
      assert.equal(result.code, 0, result.stderr);
      const lines = jsonLines<{ what: string; ok: boolean; value?: unknown; error?: ErrorReport }>(
        result.stdout,
      );
      for (const what of ['getLinks', 'LinkMonitor', 'LinkMonitor.open']) {
        const line = lines.find((l) => l.what === what);
        assert.equal(line?.ok, false, `${what} must fail`);
        assertReport(line?.error, {
          code: 'EPERM',
          errno: -1,
          syscall: 'setns',
          capability: 'CAP_SYS_ADMIN',
          netns: ns.name,
        });
        assert.match(line?.error?.message ?? '', /CAP_SYS_ADMIN/);
      }
      assert.deepEqual(
        lines.find((l) => l.what === 'own namespace'),
        { what: 'own namespace', ok: true, value: true },
        'the own namespace still works',
      );
    });
  });

  describe('listeners and the event loop', function () {
    it('a throwing listener is an ordinary uncaught exception: the handler sees exactly that error', async function () {
      const ns = await netns();
      const result = await runCommand([
        process.execPath,
        LIFECYCLE_CHILD,
        'throw-handled',
        ns.name,
        'ifbx',
      ]);
      assert.equal(result.signal, null, result.stderr);
      assert.equal(result.code, 0, result.stderr);
      const lines = jsonLines<Record<string, unknown>>(result.stdout);
      assert.deepEqual(lines, [
        { what: 'ready' },
        { what: 'uncaught', calls: 1, same: true, message: 'boom' },
        { what: 'close', closes: 1 },
      ]);
    });

    it('without an uncaughtException handler the process exits with code 1 and prints the error, no abort', async function () {
      const ns = await netns();
      const result = await runCommand([
        process.execPath,
        LIFECYCLE_CHILD,
        'throw-unhandled',
        ns.name,
        'ifbx',
      ]);
      assert.equal(result.signal, null, `killed by ${String(result.signal)}: ${result.stderr}`);
      assert.equal(result.code, 1, result.stderr);
      assert.match(result.stderr, /Error: boom/);
      assert.doesNotMatch(result.stderr, /terminate called|Aborted|FATAL ERROR/);
      assert.deepEqual(jsonLines(result.stdout), [{ what: 'ready' }]);
    });

    it('an unref()ed open monitor lets the process exit by itself', async function () {
      const ns = await netns();
      const child = startCommand(
        [process.execPath, LIFECYCLE_CHILD, 'keepalive', ns.name, 'unref'],
        {
          timeoutMs: 15_000,
        },
      );
      await child.waitForLine((line) => line.includes('"ready"'));
      const readyAt = Date.now();
      const result = await child.exited;
      assert.equal(result.timedOut, false);
      assert.equal(result.code, 0, result.stderr);
      assert.ok(Date.now() - readyAt < 5000, `exited ${Date.now() - readyAt} ms after ready`);
    });

    for (const mode of ['ref', 'unref-ref']) {
      it(`a ${mode === 'ref' ? "ref'd (default)" : 'unref()ed then ref()ed'} open monitor keeps the process running`, async function () {
        const ns = await netns();
        const child = startCommand(
          [process.execPath, LIFECYCLE_CHILD, 'keepalive', ns.name, mode],
          {
            timeoutMs: 15_000,
          },
        );
        await child.waitForLine((line) => line.includes('"ready"'));
        await delay(1000);
        assert.equal(child.hasExited, false, `exited early: ${child.stderr}`);
        const result = await child.kill('SIGTERM');
        assert.equal(result.signal, 'SIGTERM');
      });
    }
  });

  describe('close() at awkward moments (N18)', function () {
    it("close() twice: one 'close' event, no throw, and the monitor stays usable for reads", async function () {
      const ns = await netns();
      const monitor = track(await LinkMonitor.open({ netns: ns.name }));
      const watch = eventsAfterClose(monitor);
      const iterator = monitor.events();
      const ended = iterator.next();
      monitor.close();
      monitor.close();
      assert.equal(watch.closes(), 1);
      assert.equal(monitor.closed, true);
      assert.deepEqual(await ended, { value: undefined, done: true });
      monitor.resync();
      monitor.ref();
      monitor.unref();
      assert.equal(typeof monitor.stats().datagrams, 'number');
      assert.deepEqual(
        monitor.links().map((l) => l.name),
        ['lo'],
      );
      await ns.ip('link add ifbc type ifb');
      await turns();
      assert.deepEqual(watch.late, []);
    });

    it('close() before the first snapshot: ready() rejects, no events', async function () {
      const ns = await netns();
      const monitor = track(new LinkMonitor({ netns: ns.name }));
      const watch = eventsAfterClose(monitor);
      const ready = monitor.ready();
      monitor.close();
      await assert.rejects(ready, /closed before it was ready/);
      await ns.ip('link add ifbd type ifb');
      await turns(10);
      assert.equal(monitor.isReady, false);
      assert.deepEqual(watch.late, []);
      assert.equal(watch.closes(), 1);
    });

    it('close() in the first linkAdded of a burst of 20: no crash, nothing after close, one close event', async function () {
      const ns = await netns();
      const monitor = track(await LinkMonitor.open({ netns: ns.name }));
      const witness = track(await LinkMonitor.open({ netns: ns.name }));
      const watch = eventsAfterClose(monitor);
      const added: string[] = [];
      monitor.on('linkAdded', (event) => {
        added.push(event.link.name);
        monitor.close();
        monitor.close();
      });
      const names = Array.from({ length: 20 }, (_, i) => `ifbb${i}`);
      const seen = new Set<string>();
      const all = new Promise<void>((resolve) => {
        witness.on('linkAdded', (event) => {
          seen.add(event.link.name);
          if (names.every((name) => seen.has(name))) resolve();
        });
      });
      await ns.ipBatch(names.map((name) => `link add ${name} type ifb`));
      await all;
      // Its own reader may run behind the witness's on a busy machine.
      await waitFor(() => added.length > 0, { timeoutMs: 5000, what: 'the first linkAdded' });
      await turns(10);
      assert.deepEqual(added, ['ifbb0']);
      assert.deepEqual(watch.late, []);
      assert.equal(watch.closes(), 1);
      // The mirror is read ahead of the events: at the close, it holds the batch being handed over.
      const left = monitor.links().map((link) => link.name);
      assert.ok(left.includes('ifbb0') && left.length >= 2 && left.length <= 21, left.join(' '));
    });

    it('a raw Monitor closed inside its batch callback never calls back again', async function () {
      const ns = await netns();
      const witness = track(await LinkMonitor.open({ netns: ns.name }));
      let callsAfterClose = 0;
      let closed = false;
      let readyBatches = 0;
      const raw = new binding.Monitor({ netns: ns.path, netnsLabel: ns.name }, (batch) => {
        if (closed) callsAfterClose += 1;
        if (batch.some((item) => item.kind === 'ready')) readyBatches += 1;
        if (batch.some((item) => item.kind === 'link' && item.fromDump === false)) {
          raw.close();
          raw.close();
          closed = true;
        }
      });
      raw.start();
      for (let i = 0; i < 100 && readyBatches === 0; i += 1) await delay(10);
      assert.equal(readyBatches, 1);
      const names = Array.from({ length: 20 }, (_, i) => `ifbr${i}`);
      const done = nextEvent(witness, 'linkAdded', (e) => e.link.name === 'ifbr19');
      await ns.ipBatch(names.map((name) => `link add ${name} type ifb`));
      await done;
      await turns(10);
      assert.equal(closed, true);
      assert.equal(callsAfterClose, 0);
    });

    it('close() right after resync(), and close() inside a resync, end quietly', async function () {
      const ns = await netns();
      await ns.ipBatch(Array.from({ length: 30 }, (_, i) => `link add ifbs${i} type ifb`));
      const witness = track(await LinkMonitor.open({ netns: ns.name }));

      const first = track(await LinkMonitor.open({ netns: ns.name }));
      const firstWatch = eventsAfterClose(first);
      first.resync();
      first.close();

      const second = track(await LinkMonitor.open({ netns: ns.name }));
      const secondWatch = eventsAfterClose(second);
      const begun = nextEvent(second, 'resync', (e) => e.phase === 'begin');
      second.on('resync', (event) => {
        if (event.phase === 'begin') second.close();
      });
      second.resync();
      await begun;
      assert.equal(second.closed, true);

      const done = nextEvent(witness, 'linkAdded', (e) => e.link.name === 'ifbafter');
      await ns.ip('link add ifbafter type ifb');
      await ns.ip('link del ifbs0');
      await done;
      await turns(10);
      assert.deepEqual(firstWatch.late, []);
      assert.deepEqual(secondWatch.late, []);
      assert.equal(firstWatch.closes(), 1);
      assert.equal(secondWatch.closes(), 1);
      assert.equal(first.links().length, 31);
    });
  });

  describe('error shape', function () {
    it('ENODEV for a missing device in a netns: code, errno, syscall, interface, netns', async function () {
      const ns = await netns();
      const cases: [string, () => Promise<unknown>, string][] = [
        ['getLink', () => getLink('nope0', { netns: ns.name }), 'getlink'],
        [
          'setLinkMac',
          () => setLinkMac('nope0', '02:00:00:00:00:01', { netns: ns.name }),
          'getlink',
        ],
        [
          'getFeatures',
          () => getFeatures('nope0', { netns: ns.name }),
          'ioctl(ETHTOOL_GSSET_INFO)',
        ],
        [
          'getDriverInfo',
          () => getDriverInfo('nope0', { netns: ns.name }),
          'ioctl(ETHTOOL_GDRVINFO)',
        ],
      ];
      for (const [what, operation, syscall] of cases) {
        await assert.rejects(operation(), (error: unknown) => {
          assertSystemError(error, {
            code: 'ENODEV',
            errno: -19,
            syscall,
            interface: 'nope0',
            netns: ns.name,
          });
          assert.match(error.message, /^ENODEV: /, what);
          assert.ok(error.message.includes(`netns ${ns.name}`), `${what}: ${error.message}`);
          return true;
        });
      }
    });

    it('ENOENT for a missing netns name: the message names the path', async function () {
      const missing = `fgt-missing-${process.pid}`;
      const path = `/run/netns/${missing}`;
      const check = (error: unknown): true => {
        assertSystemError(error, { code: 'ENOENT', errno: -2, syscall: 'open', netns: missing });
        assert.ok(error.message.includes(path), error.message);
        return true;
      };
      await assert.rejects(getLinks({ netns: missing }), check);
      await assert.rejects(getLink('lo', { netns: missing }), check);
      assert.throws(() => new LinkMonitor({ netns: missing }), check);
      await assert.rejects(LinkMonitor.open({ netns: missing }), check);
      assert.throws(() => new binding.Control({ netns: path, netnsLabel: missing }), check);
    });
  });
});
