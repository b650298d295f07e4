/**
 * A real systemd-udevd in a test network namespace that reads its .link files and rules from a
 * whole configuration tree (the same tree `flannel-guard doctor --root DIR` reads), so the
 * doctor's reading of precedence, masking, drop-ins and [Match] can be compared with what udev
 * actually does.
 *
 * Like test/support/udevd.ts it runs in a private mount namespace (`unshare -m --propagation
 * private` under `ip netns exec`): tmpfs on /run and /dev, a private /etc/machine-id, and here
 * DIR/etc/systemd/network, DIR/usr/lib/systemd/network and DIR/etc/udev/rules.d bind-mounted
 * over the real ones (an empty read-only tmpfs where DIR has none, except /usr/lib, which then
 * stays the system's), DIR/run/systemd/network and DIR/run/udev/rules.d copied into the private
 * /run. Nothing propagates to the host.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
} from './netns';
import { UDEVD_BINARY, randomMachineId } from './udevd';

const START_SCRIPT = `set -eu
r="$1"
d="$2"
mount -t tmpfs -o mode=0755,size=16m fgt-run /run
mkdir -p /run/udev/rules.d /run/systemd/network
mount -t tmpfs -o mode=0755,size=1m fgt-dev /dev
mknod -m 666 /dev/null c 1 3
mount --bind "$d/machine-id" /etc/machine-id
for p in /etc/systemd/network /etc/udev/rules.d; do
  if [ -d "$r$p" ]; then mount --bind "$r$p" "$p"
  elif [ -d "$p" ]; then mount -t tmpfs -o mode=0755,size=1m,ro fgt-mask "$p"; fi
done
if [ -d "$r/usr/lib/systemd/network" ]; then
  mount --bind "$r/usr/lib/systemd/network" /usr/lib/systemd/network
fi
if [ -d "$r/run/systemd/network" ]; then cp -a "$r/run/systemd/network/." /run/systemd/network/; fi
if [ -d "$r/run/udev/rules.d" ]; then cp -a "$r/run/udev/rules.d/." /run/udev/rules.d/; fi
exec ${UDEVD_BINARY} --debug
`;

export class UdevdRoot {
  #log = '';
  #stopped = false;
  readonly #unregister: () => void;

  private constructor(
    readonly ns: Netns,
    private readonly child: ChildProcess,
    private readonly tmpDir: string,
  ) {
    const onData = (chunk: Buffer): void => {
      if (this.#log.length < 64 * 1024 * 1024) this.#log += chunk.toString('utf8');
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    this.#unregister = registerSyncCleanup(() => rmSync(tmpDir, { recursive: true, force: true }));
  }

  /** Starts udevd reading the configuration tree `root`; resolves once it answers a ping. */
  static async start(ns: Netns, root: string): Promise<UdevdRoot> {
    const dir = mkdtempSync(tempDirPrefix('udevroot'));
    writeFileSync(join(dir, 'machine-id'), `${randomMachineId()}\n`, { mode: 0o444 });
    const child = ns.spawn(
      [
        'unshare',
        '-m',
        '--propagation',
        'private',
        'sh',
        '-c',
        START_SCRIPT,
        'fgt-udevd',
        root,
        dir,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const udevd = new UdevdRoot(ns, child, dir);
    try {
      await udevd.#waitReady(10_000);
    } catch (error) {
      await udevd.stop();
      throw error;
    }
    return udevd;
  }

  get running(): boolean {
    return !hasExited(this.child);
  }

  log(): string {
    return this.#log;
  }

  logOffset(): number {
    return this.#log.length;
  }

  /** Resolves with the log text after `from` once udevd has processed IFNAME's add event. */
  async waitForDeviceProcessed(ifname: string, from: number, timeoutMs = 5000): Promise<string> {
    const name = ifname.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const done = new RegExp(`^${name}: Device processed \\(SEQNUM=\\d+, ACTION=add\\)`, 'm');
    await waitFor(
      () => {
        if (!this.running) throw new Error(`udevd exited:\n${this.#log.slice(-3000)}`);
        return done.test(this.#log.slice(from));
      },
      { timeoutMs, intervalMs: 5, what: `udevd to process ${ifname}` },
    );
    return this.#log.slice(from);
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    try {
      await terminate(this.child, 3000);
    } finally {
      rmSync(this.tmpDir, { recursive: true, force: true });
      this.#unregister();
    }
  }

  async #waitReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const pid = (): number => {
      if (this.child.pid === undefined) throw new Error('udevd has no pid');
      return this.child.pid;
    };
    await waitFor(
      () => {
        if (!this.running) throw new Error(`udevd exited during start-up:\n${this.#log}`);
        try {
          return readFileSync(`/proc/${pid()}/cmdline`, 'utf8').split('\0')[0] === UDEVD_BINARY;
        } catch {
          return false;
        }
      },
      { timeoutMs, intervalMs: 5, what: 'udevd to exec' },
    );
    await waitFor(
      async () => {
        if (!this.running) throw new Error(`udevd exited during start-up:\n${this.#log}`);
        const left = Math.max(1, Math.ceil((deadline - Date.now()) / 1000));
        const result = await execFile(
          'nsenter',
          ['-t', String(pid()), '-m', '--', 'udevadm', 'control', '--ping', '-t', String(left)],
          { allowFailure: true, timeoutMs: left * 1000 + 1000 },
        );
        return result.code === 0;
      },
      { timeoutMs: Math.max(1, deadline - Date.now()), intervalMs: 20, what: 'udevd control ping' },
    );
  }
}

/** What udev did to a VXLAN device created as flannel creates it. */
export interface UdevOutcome {
  /** The .link file udev applied ("Config file X is applied"), or null. */
  applied: string | null;
  /** addr_assign_type after udev processed the add event (3: udev set the MAC). */
  addrAssignType: number;
  macBefore: string;
  macAfter: string;
  log: string;
}

/** Creates `name` (VXLAN, like flannel), waits for udev to process it, reports, deletes it. */
export async function createVxlanUnderUdev(
  udevd: UdevdRoot,
  name = 'flannel.1',
): Promise<UdevOutcome> {
  const ns = udevd.ns;
  const from = udevd.logOffset();
  const added = await ns.ipBatch(
    [`link add ${name} type vxlan id 1 dstport 8472 nolearning`, `link show dev ${name}`],
    { json: false },
  );
  const macBefore = /link\/ether ([0-9a-f:]{17})/.exec(added)?.[1] ?? '';
  const log = await udevd.waitForDeviceProcessed(name, from);
  const addrAssignType = Number(
    (await ns.readFile(`/sys/class/net/${name}/addr_assign_type`)).trim(),
  );
  const links = await ns.ipJson<{ address?: string }[]>(['link', 'show', 'dev', name]);
  await ns.ip(['link', 'del', name]);
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const applied = new RegExp(`^${escaped}: Config file (\\S+) is applied`, 'm').exec(log)?.[1];
  return {
    applied: applied ?? null,
    addrAssignType,
    macBefore,
    macAfter: links[0]?.address ?? '',
    log,
  };
}
