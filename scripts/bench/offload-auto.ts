/**
 * `--offload auto` on both test beds, as a user runs it: two flannel-like nodes whose wire is a
 * userspace AF_PACKET relay that finishes no checksum (as behind the seed's VMXNET3), and two
 * whose wire is a bridge. Per bed and run: pod-to-pod ping, TCP and UDP before, then
 * `flannel-guard watch --offload auto` on both nodes; each node's verdict, the time from the
 * guard's start to it, the probe rounds and probes sent; the traffic after and the feature's
 * state. Prints the figures; asserts nothing.
 *
 * Usage: node dist/scripts/bench/offload-auto.js [--runs N] [--peers N]
 *   --peers: extra permanent ARP entries per node for VTEPs nobody has (a bigger cluster's
 *   sample, of which only the real peer answers)
 */
import { performance } from 'node:perf_hooks';

import { GuardProcess, type GuardLine } from '../../test/support/guard-process';
import { destroyAll } from '../../test/support/netns';
import { FlannelTestbed, VTEP } from '../../test/support/testbed';

const QUICK = { timeoutMs: 1500 };

function argument(name: string, fallback: number): number {
  const index = process.argv.indexOf(name);
  const value = index >= 0 ? Number(process.argv[index + 1]) : fallback;
  if (!Number.isInteger(value) || value < 0 || value > 200) {
    throw new Error(`${name}: expected a count up to 200`);
  }
  return value;
}

async function traffic(bed: FlannelTestbed): Promise<string> {
  const [n1, n2] = [bed.node(1), bed.node(2)];
  const yes = (ok: boolean): string => (ok ? 'yes' : 'no');
  const ping = (await bed.ping(n1, n2, QUICK)) && (await bed.ping(n2, n1, QUICK));
  const tcp =
    (await bed.tcp(n1, n2, { ...QUICK, bytes: 20_000 })) && (await bed.tcp(n2, n1, QUICK));
  const udp = (await bed.udp(n1, n2, QUICK)) && (await bed.udp(n2, n1, QUICK));
  return `ping ${yes(ping)} tcp ${yes(tcp)} udp ${yes(udp)}`;
}

async function run(wire: 'relay' | 'bridge', extraPeers: number): Promise<string[]> {
  const bed = await FlannelTestbed.create({ nodes: 2, udev: false, wire });
  const guards: GuardProcess[] = [];
  try {
    for (const node of bed.nodes) {
      await node.ns.run(['ethtool', '-K', VTEP, 'tx-checksum-ip-generic', 'on']);
      // VTEPs of nodes that do not exist (198.18.100.0 and up): probed, never answering.
      const lines = [...Array(extraPeers).keys()].map(
        (i) =>
          `neigh replace 198.18.${100 + i}.0 lladdr 02:00:00:00:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 0xff).toString(16).padStart(2, '0')} dev ${VTEP} nud permanent`,
      );
      if (lines.length > 0) await node.ns.ipBatch(lines);
    }
    const before = await traffic(bed);
    const started = performance.now();
    guards.push(
      ...(await Promise.all(
        bed.nodes.map((node) =>
          GuardProcess.start(['--netns', node.ns.name, '--offload', 'auto', '--state-dir', 'off']),
        ),
      )),
    );
    const verdicts: GuardLine[] = await Promise.all(
      guards.map((guard) => guard.waitFor((l) => l.event === 'verdict', 60_000)),
    );
    const wall = performance.now() - started;
    const after = await traffic(bed);
    const rows: string[] = [];
    for (const [index, v] of verdicts.entries()) {
      const node = bed.node(index + 1);
      rows.push(
        [
          wire.padEnd(7),
          node.name.padEnd(6),
          `${String(v.verdict)} ${String(v.action)}`.padEnd(22),
          `${Number(v.msSinceStart).toFixed(0).padStart(6)} ms`,
          `${String(v.rounds).padStart(3)} rounds`,
          `${String(v.probes).padStart(4)} probes`,
          `before: ${before}`,
          `after: ${after}`,
          `${await node.feature('tx-checksum-ip-generic')}`,
          `(both verdicts ${wall.toFixed(0)} ms from the first start)`,
        ].join('  '),
      );
    }
    return rows;
  } finally {
    await Promise.all(guards.map((guard) => guard.stop()));
    await bed.destroy();
  }
}

async function main(): Promise<void> {
  const runs = Math.max(1, argument('--runs', 3));
  const peers = argument('--peers', 0);
  console.log(
    `--offload auto: ${runs} runs per bed, ${peers} extra peers per node that never answer; columns: bed, node, verdict and action, start to verdict, rounds, probes, traffic before and after (both directions), tx-checksum-ip-generic after`,
  );
  try {
    for (let i = 0; i < runs; i += 1) {
      for (const wire of ['relay', 'bridge'] as const) {
        for (const row of await run(wire, peers)) console.log(row);
      }
    }
  } finally {
    await destroyAll();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
