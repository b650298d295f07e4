/**
 * Rewrite-to-restored latency in the test bed (two flannel-like nodes, each
 * with a real systemd-udevd), with `flannel-guard watch` running on both as
 * a user runs it. Two kinds of rewrite on node 2:
 *   - udev: flannel restarts (device deleted and re-created); udev's
 *     MACAddressPolicy rewrites the new device's MAC;
 *   - ip-link: `ip link set flannel.1 address ...` from another process,
 *     which also flushes the node's permanent neighbour entries.
 * An observer in the bench process (its own netlink socket in node 2's
 * namespace) timestamps, per rewrite, the RTM_NEWLINK carrying the foreign
 * MAC and the moment the pinned MAC and every flushed neighbour entry are
 * back. Prints the figures; asserts nothing.
 *
 * Usage: node dist/scripts/bench/testbed-latency.js [--udev N] [--ip-link N]
 */
import { performance } from 'node:perf_hooks';

import { LinkMonitor } from '../../lib/core/monitor';
import { GuardProcess } from '../../test/support/guard-process';
import { destroyAll, claimStateRoot, releaseStateRoot } from '../../test/support/netns';
import { FlannelTestbed, VTEP } from '../../test/support/testbed';
import { percentile } from './stats';

interface Sample {
  kind: 'udev' | 'ip-link';
  macMs: number;
  neighboursMs: number;
  neighbours: number;
}

function argument(name: string, fallback: number): number {
  const index = process.argv.indexOf(name);
  const value = index >= 0 ? Number(process.argv[index + 1]) : fallback;
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name}: expected a count`);
  return value;
}

function summary(label: string, values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  const fmt = (v: number): string => v.toFixed(3).padStart(8);
  return `${label.padEnd(28)} n=${String(sorted.length).padStart(4)}  median ${fmt(percentile(sorted, 0.5))}  p90 ${fmt(percentile(sorted, 0.9))}  p99 ${fmt(percentile(sorted, 0.99))}  max ${fmt(sorted[sorted.length - 1] ?? NaN)}  (ms)`;
}

/**
 * Watches node 2's flannel.1 from its own socket and turns every
 * rewrite -> restored pair into a sample: each device is pinned at the MAC
 * of its creation event (what flanneld publishes), as the guard pins it.
 */
class CorrectionObserver {
  readonly samples: Sample[] = [];
  /** What the rewrites being made now are. */
  kind: Sample['kind'] = 'udev';
  #devices = new Map<
    number,
    {
      pinned: string | null;
      rewriteAt: number | null;
      macAt: number | null;
      expected: number;
      added: number;
    }
  >();
  #waiters: (() => void)[] = [];

  constructor(readonly monitor: LinkMonitor) {
    monitor.on('linkAdded', ({ link, created }) => {
      if (link.name === VTEP && created) {
        this.#devices.set(link.ifindex, {
          pinned: link.mac,
          rewriteAt: null,
          macAt: null,
          expected: 0,
          added: 0,
        });
      }
    });
    monitor.on('linkChanged', ({ link }) => {
      const device = this.#devices.get(link.ifindex);
      if (link.name !== VTEP || !device) return;
      const now = performance.now();
      if (link.mac !== device.pinned && device.rewriteAt === null) {
        device.rewriteAt = now;
        // The flush follows this event, so the snapshot still holds what it will remove.
        device.expected = monitor
          .neighbours({ ifindex: link.ifindex })
          .filter((n) => n.permanent && n.family === 'inet').length;
      } else if (link.mac === device.pinned && device.rewriteAt !== null && device.macAt === null) {
        device.macAt = now;
        this.#complete(link.ifindex);
      }
    });
    monitor.on('neighbourAdded', ({ neighbour }) => {
      const device = this.#devices.get(neighbour.ifindex);
      if (!device || device.macAt === null || !neighbour.permanent || neighbour.family !== 'inet')
        return;
      device.added += 1;
      this.#complete(neighbour.ifindex);
    });
  }

  /** Resolves once `count` samples exist. */
  async until(count: number, timeoutMs = 10_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (this.samples.length < count) {
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`only ${this.samples.length} of ${count} corrections seen`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  #complete(ifindex: number): void {
    const device = this.#devices.get(ifindex);
    if (
      !device ||
      device.rewriteAt === null ||
      device.macAt === null ||
      device.added < device.expected
    )
      return;
    const now = performance.now();
    this.samples.push({
      kind: this.kind,
      macMs: device.macAt - device.rewriteAt,
      neighboursMs: (device.expected > 0 ? now : device.macAt) - device.rewriteAt,
      neighbours: device.added,
    });
    Object.assign(device, { rewriteAt: null, macAt: null, expected: 0, added: 0 });
    for (const wake of this.#waiters.splice(0)) wake();
  }
}

async function main(): Promise<void> {
  const udevRounds = argument('--udev', 100);
  const ipLinkRounds = argument('--ip-link', 100);
  const bed = await FlannelTestbed.create({ nodes: 2, udev: true });
  const guards: GuardProcess[] = [];
  let monitor: LinkMonitor | undefined;
  claimStateRoot();
  try {
    const [n1, n2] = [bed.node(1), bed.node(2)];
    // Each rewrite here is a separate experiment, not a fight: a 1 ms window keeps backoff out.
    // Node 1 was rewritten by udev before its guard started: tell that guard the published MAC.
    // Node 2's guard pins each new device's first MAC, as flanneld publishes it.
    guards.push(
      await GuardProcess.start([
        '--netns',
        n1.ns.name,
        '--mac',
        `${VTEP}=${n1.publishedMac}`,
        '--rewrite-window',
        '1',
      ]),
      await GuardProcess.start(['--netns', n2.ns.name, '--rewrite-window', '1']),
    );
    monitor = await LinkMonitor.open({ netns: n2.ns.name, addrAssignType: false });
    const observer = new CorrectionObserver(monitor);

    // udev: every flannel restart creates a device (the test bed may create it more than once
    // when udev beat its read); each creation is rewritten by udev and corrected by the guard.
    for (let round = 0; round < udevRounds; round += 1) {
      const before = observer.samples.length;
      await bed.restartFlannel(n2);
      await observer.until(before + 1);
    }
    observer.kind = 'ip-link';
    const peers = bed.peersOf(n2).length;
    for (let round = 0; round < ipLinkRounds; round += 1) {
      const before = observer.samples.length;
      const foreign = `0e:00:00:${(round >> 8).toString(16).padStart(2, '0')}:${(round & 0xff).toString(16).padStart(2, '0')}:01`;
      await n2.ns.ip(['link', 'set', VTEP, 'address', foreign]);
      await observer.until(before + 1);
    }

    const traffic = (await bed.ping(n1, n2)) && (await bed.tcp(n1, n2)) && (await bed.tcp(n2, n1));
    const samples = observer.samples;
    const udev = samples.filter((s) => s.kind === 'udev');
    const ipLink = samples.filter((s) => s.kind === 'ip-link');
    console.log(
      `flannel-guard: rewrite -> restored in the test bed (${samples.length} rewrites, real udevd)`,
    );
    console.log(
      summary(
        'udev rewrite: MAC back',
        udev.map((s) => s.macMs),
      ),
    );
    console.log(
      summary(
        'ip link set: MAC back',
        ipLink.map((s) => s.macMs),
      ),
    );
    console.log(
      summary(
        `ip link set: MAC + ${peers} neighbour(s)`,
        ipLink.map((s) => s.neighboursMs),
      ),
    );
    console.log(
      summary(
        'all: MAC and neighbours back',
        samples.map((s) => s.neighboursMs),
      ),
    );
    console.log(
      `neighbour entries re-installed per ip-link rewrite: ${[...new Set(ipLink.map((s) => s.neighbours))].join(', ')}`,
    );
    console.log(`cross-node ping and TCP after the run: ${traffic ? 'working' : 'BROKEN'}`);
    if (!traffic && process.env.FG_DEBUG) {
      for (const node of [n1, n2]) {
        console.log(
          node.name,
          node.publishedMac,
          await node.currentMac(),
          JSON.stringify(await node.neighbours()),
          JSON.stringify(await node.fdb()),
        );
      }
      console.log(
        guards.map((g) => g.lines.map((l) => JSON.stringify(l)).join('\n')).join('\n----\n'),
      );
    }
  } finally {
    monitor?.close();
    await Promise.all(guards.map((guard) => guard.stop()));
    await bed.destroy();
    await destroyAll();
    releaseStateRoot();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
