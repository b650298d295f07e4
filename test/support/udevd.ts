/**
 * A real systemd-udevd running inside a test network namespace and its own private mount
 * namespace, so that MACAddressPolicy=persistent rewrites the MAC of links created in that netns
 * exactly as on a real node.
 *
 * Isolation (all mounts live in a private mount namespace created by `unshare -m
 * --propagation private`, under the already-slave namespace of `ip netns exec`; they vanish with
 * the process and nothing propagates to the host):
 *  - tmpfs on /run (so /run/udev, /run/systemd/network and /run/udev/rules.d are private),
 *  - tmpfs on /dev with only /dev/null,
 *  - a per-instance file bind-mounted over /etc/machine-id (the persistent MAC is derived from
 *    machine-id + interface name, so every node must have its own),
 *  - empty read-only tmpfs over /etc/systemd/network and /etc/udev/rules.d (host configuration
 *    must not change test results); extra `.link` files go to /run/systemd/network and extra
 *    rules to /run/udev/rules.d, both of which udev reads.
 * /usr/lib/systemd/network/99-default.link (MACAddressPolicy=persistent) stays visible.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import {
  execFile,
  hasExited,
  registerSyncCleanup,
  tempDirPrefix,
  terminate,
  waitFor,
  type Netns,
  type RunResult,
} from './netns';

export const UDEVD_BINARY = '/lib/systemd/systemd-udevd';

/** Options for `Udevd.start`. */
export interface UdevdOptions {
  /** 32 lower-case hex chars, not all zero. Default: random. */
  machineId?: string;
  /** Extra systemd `.link` files: file name → contents, e.g. `{'10-flannel.link': '...'}`. */
  linkFiles?: Record<string, string>;
  /** Extra udev rules: file name → contents, e.g. `{'90-test.rules': '...'}`. */
  rules?: Record<string, string>;
  /** Bound for start-up (process exec + control socket ping). Default 10 000 ms. */
  startTimeoutMs?: number;
}

/** A `.link` file that disables MAC rewriting for flannel* links (the documented workaround). */
export const FLANNEL_LINK_MAC_POLICY_NONE =
  '[Match]\nOriginalName=flannel*\n\n[Link]\nMACAddressPolicy=none\n';

const MAX_LOG = 64 * 1024 * 1024;

const START_SCRIPT = `set -eu
d="$1"
mount -t tmpfs -o mode=0755,size=16m fgt-run /run
mkdir -p /run/udev/rules.d /run/systemd/network
mount -t tmpfs -o mode=0755,size=1m fgt-dev /dev
mknod -m 666 /dev/null c 1 3
mount --bind "$d/machine-id" /etc/machine-id
for p in /etc/systemd/network /etc/udev/rules.d; do
  if [ -d "$p" ]; then mount -t tmpfs -o mode=0755,size=1m,ro fgt-mask "$p"; fi
done
for f in "$d"/link/*; do [ -e "$f" ] && cp -- "$f" /run/systemd/network/; done
for f in "$d"/rules/*; do [ -e "$f" ] && cp -- "$f" /run/udev/rules.d/; done
exec ${UDEVD_BINARY} --debug
`;

function validateFiles(kind: string, files: Record<string, string> | undefined, ext: string) {
  for (const name of Object.keys(files ?? {})) {
    if (!/^[A-Za-z0-9_.@-]+$/.test(name) || !name.endsWith(ext) || name.startsWith('.')) {
      throw new Error(`bad ${kind} file name ${JSON.stringify(name)} (must end in ${ext})`);
    }
  }
}

/** A random valid machine-id (32 lower-case hex characters). */
export function randomMachineId(): string {
  let id: string;
  do id = randomBytes(16).toString('hex');
  while (/^0+$/.test(id));
  return id;
}

/** A systemd-udevd process running in `ns` with private mounts. */
export class Udevd {
  private logText = '';
  private readonly events = new EventEmitter();
  private stopped = false;
  private readonly unregisterCleanup: () => void;

  private constructor(
    readonly ns: Netns,
    readonly machineId: string,
    private readonly child: ChildProcess,
    private readonly tmpDir: string,
  ) {
    this.events.setMaxListeners(100);
    const onData = (d: Buffer): void => {
      if (this.logText.length < MAX_LOG) this.logText += d.toString('utf8');
      this.events.emit('log');
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', () => this.events.emit('exit'));
    this.unregisterCleanup = registerSyncCleanup(() =>
      rmSync(tmpDir, { recursive: true, force: true }),
    );
  }

  /** Start udevd in `ns` and wait until its event loop answers a control-socket ping. */
  static async start(ns: Netns, opts: UdevdOptions = {}): Promise<Udevd> {
    const machineId = opts.machineId ?? randomMachineId();
    if (!/^[0-9a-f]{32}$/.test(machineId) || /^0+$/.test(machineId)) {
      throw new Error(`bad machine-id ${JSON.stringify(machineId)}`);
    }
    validateFiles('link', opts.linkFiles, '.link');
    validateFiles('rules', opts.rules, '.rules');
    const dir = mkdtempSync(tempDirPrefix('udevd'));
    try {
      writeFileSync(join(dir, 'machine-id'), `${machineId}\n`, { mode: 0o444 });
      mkdirSync(join(dir, 'link'));
      mkdirSync(join(dir, 'rules'));
      for (const [name, text] of Object.entries(opts.linkFiles ?? {})) {
        writeFileSync(join(dir, 'link', name), text);
      }
      for (const [name, text] of Object.entries(opts.rules ?? {})) {
        writeFileSync(join(dir, 'rules', name), text);
      }
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    const child = ns.spawn(
      ['unshare', '-m', '--propagation', 'private', 'sh', '-c', START_SCRIPT, 'fgt-udevd', dir],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const udevd = new Udevd(ns, machineId, child, dir);
    try {
      await udevd.waitReady(opts.startTimeoutMs ?? 10_000);
    } catch (err) {
      await udevd.stop().catch(() => undefined);
      throw err;
    }
    return udevd;
  }

  /** PID of the udevd main process (`ip netns exec`, `unshare` and `sh` all exec into it). */
  get pid(): number {
    if (this.child.pid === undefined) throw new Error('udevd has no pid');
    return this.child.pid;
  }

  /** Whether the udevd process is still running. */
  get running(): boolean {
    return !hasExited(this.child);
  }

  /** Everything udevd wrote so far (debug log; stderr and stdout interleaved). */
  log(): string {
    return this.logText;
  }

  /** Current length of the log; pass it as `fromOffset` to only match newer lines. */
  logOffset(): number {
    return this.logText.length;
  }

  /**
   * Resolve with the first match of `re` in the log after `fromOffset` (default: whole log).
   * Event-driven (re-checked on each log chunk); rejects after `timeoutMs` or if udevd exits.
   */
  waitForLog(re: RegExp, timeoutMs: number, fromOffset = 0): Promise<RegExpExecArray> {
    const flags = re.flags.replace(/[gy]/g, '');
    const rx = new RegExp(re.source, flags);
    return new Promise<RegExpExecArray>((resolve, reject) => {
      const check = (): boolean => {
        const m = rx.exec(this.logText.slice(fromOffset));
        if (m === null) return false;
        cleanup();
        resolve(m);
        return true;
      };
      const onExit = (): void => {
        if (check()) return;
        cleanup();
        reject(new Error(`udevd exited while waiting for ${String(re)}\n${this.logTail()}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for udevd log ${String(re)}`));
      }, timeoutMs);
      const onLog = (): void => {
        check();
      };
      const cleanup = (): void => {
        clearTimeout(timer);
        this.events.removeListener('log', onLog);
        this.events.removeListener('exit', onExit);
      };
      this.events.on('log', onLog);
      this.events.once('exit', onExit);
      if (check()) return;
      if (!this.running) onExit();
    });
  }

  /**
   * Wait until udevd has finished processing the `add` uevent of network interface `ifname`
   * (log line "IFNAME: Device processed (SEQNUM=..., ACTION=add)") after `fromOffset`.
   */
  waitForDeviceProcessed(ifname: string, fromOffset: number, timeoutMs = 5000) {
    const name = ifname.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    return this.waitForLog(
      new RegExp(`^${name}: Device processed \\(SEQNUM=\\d+, ACTION=add\\)`, 'm'),
      timeoutMs,
      fromOffset,
    );
  }

  /** The MAC udev logged it applied to `ifname` ("Applying persistent MAC address: ...") after `fromOffset`. */
  persistentMacApplied(ifname: string, fromOffset: number): string | null {
    const name = ifname.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const pattern = new RegExp(`^${name}: Applying persistent MAC address: ([0-9a-f:]{17})`, 'm');
    return pattern.exec(this.logText.slice(fromOffset))?.[1] ?? null;
  }

  /** Run a command inside udevd's mount namespace (and the test netns). */
  exec(argv: readonly string[], timeoutMs = 10_000): Promise<RunResult> {
    if (!this.running) throw new Error('udevd is not running');
    return execFile('nsenter', ['-t', String(this.pid), '-m', '-n', '--', ...argv], {
      timeoutMs,
    });
  }

  /** `udevadm settle` against this udevd (waits until its event queue is empty). */
  async settle(timeoutMs = 5000): Promise<void> {
    const secs = String(Math.max(1, Math.ceil(timeoutMs / 1000)));
    await this.exec(['udevadm', 'settle', '-t', secs], timeoutMs + 2000);
  }

  /** SIGTERM, then SIGKILL after `graceMs`; waits for exit; removes temp files. Idempotent. */
  async stop(graceMs = 3000): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    try {
      await terminate(this.child, graceMs);
    } finally {
      rmSync(this.tmpDir, { recursive: true, force: true });
      this.unregisterCleanup();
    }
  }

  private logTail(lines = 30): string {
    return this.logText.split('\n').slice(-lines).join('\n');
  }

  private async waitReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const failIfExited = (): void => {
      if (!this.running) {
        throw new Error(
          `udevd exited during start-up (code ${String(this.child.exitCode)})\n${this.logTail()}`,
        );
      }
    };
    // 1. The exec chain ip→unshare→sh→systemd-udevd has completed, so all mounts are in place
    //    and /run/udev/control (if present) is the private one, never a host udevd's.
    await waitFor(
      () => {
        failIfExited();
        try {
          // systemd-udevd is a symlink to the multi-call udevadm binary, so check argv[0].
          const argv0 = readFileSync(`/proc/${this.pid}/cmdline`, 'utf8').split('\0')[0];
          return argv0 === UDEVD_BINARY;
        } catch {
          return false;
        }
      },
      { timeoutMs, intervalMs: 5, what: 'udevd to exec' },
    );
    // 2. A control-socket ping is answered only from udevd's event loop, i.e. after the rules
    //    are loaded and the uevent monitor is listening: that is the readiness signal.
    await waitFor(
      async () => {
        failIfExited();
        const left = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
        const r = await execFile(
          'nsenter',
          ['-t', String(this.pid), '-m', '--', 'udevadm', 'control', '--ping', '-t', String(left)],
          { allowFailure: true, timeoutMs: left * 1000 + 1000 },
        );
        return r.code === 0;
      },
      {
        timeoutMs: Math.max(1, deadline - Date.now()),
        intervalMs: 20,
        what: 'udevd control ping',
      },
    );
  }
}
