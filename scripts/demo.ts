/**
 * `npm run demo` (as root): two flannel-like nodes in network namespaces,
 * each with its own systemd-udevd applying MACAddressPolicy=persistent.
 * Shows udev's rewrite breaking cross-node pod traffic, then
 * `flannel-guard watch` fixing it through a flannel restart and a foreign
 * `ip link set address`, then removes everything it created.
 */
import { describe, type GuardEventName } from '../lib/cli/output';
import type { FlannelGuardEvents } from '../lib/guard';
import { GuardProcess } from '../test/support/guard-process';
import { claimStateRoot, destroyAll, releaseStateRoot } from '../test/support/netns';
import { FlannelTestbed, VTEP, type TestbedNode } from '../test/support/testbed';

const bold = (text: string): string => (process.stdout.isTTY ? `\x1b[1m${text}\x1b[0m` : text);
const say = (text: string): void => {
  console.log(`\n${bold(`== ${text}`)}`);
};

async function traffic(bed: FlannelTestbed, from: TestbedNode, to: TestbedNode): Promise<string> {
  const ping = await bed.ping(from, to, { timeoutMs: 1500 });
  const tcp = await bed.tcp(from, to, { timeoutMs: 1500 });
  return `pod ${from.podIp} -> pod ${to.podIp}: ping ${ping ? 'ok' : 'FAILS'}, TCP ${tcp ? 'ok' : 'FAILS'}`;
}

async function describeNode(node: TestbedNode): Promise<string> {
  return `${node.name}: published VtepMAC ${node.publishedMac}, ${VTEP} now has ${await node.currentMac()} (addr_assign_type ${await node.addrAssignType()})`;
}

function show(guard: GuardProcess, from: number, label: string): void {
  for (const line of guard.lines.slice(from)) {
    const event = line.event as GuardEventName;
    console.log(
      `  [guard ${label}] ${describe(event, line as unknown as FlannelGuardEvents[typeof event][0])}`,
    );
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0)
    throw new Error('the demo creates network namespaces: run it as root');
  // The guards' state files go to a folder of the demo's own, removed with the rest.
  claimStateRoot();
  say('Building two flannel-like nodes, each running systemd-udevd (MACAddressPolicy=persistent)');
  const bed = await FlannelTestbed.create({ nodes: 2, udev: true });
  const guards: GuardProcess[] = [];
  try {
    const [n1, n2] = [bed.node(1), bed.node(2)];
    for (const node of [n1, n2]) console.log(`  ${await describeNode(node)}`);

    say('Without flannel-guard: udev rewrote both VTEP MACs after flanneld published them');
    console.log(`  ${await traffic(bed, n1, n2)}`);
    console.log(`  ${await traffic(bed, n2, n1)}`);

    say('Starting `flannel-guard watch` in each node, told the MAC flanneld published');
    for (const node of [n1, n2]) {
      guards.push(
        // The node's udev root: the writer is named from its machine-id and .link files.
        await GuardProcess.start([
          ...['--netns', node.ns.name, '--mac', `${VTEP}=${node.publishedMac}`],
          ...node.udevRootFlags(),
        ]),
      );
    }
    await Promise.all(guards.map((guard) => guard.waitFor((l) => l.event === 'restored')));
    guards.forEach((guard, i) => {
      show(guard, 0, `node${i + 1}`);
    });
    console.log(`  ${await traffic(bed, n1, n2)}`);
    console.log(`  ${await traffic(bed, n2, n1)}`);

    say('Restarting flannel on node2 with a guard that pins what flanneld publishes (first-seen)');
    await (guards[1] as GuardProcess).stop();
    guards[1] = await GuardProcess.start(['--netns', n2.ns.name, ...n2.udevRootFlags()]);
    const guard2 = guards[1];
    let from = guard2.lines.length;
    const mac = await bed.restartFlannel(n2);
    await guard2.waitFor((l) => l.event === 'restored' && l.mac === mac, 10_000, from);
    show(guard2, from, 'node2');
    console.log(`  ${await describeNode(n2)}`);
    console.log(`  ${await traffic(bed, n1, n2)}`);

    say(
      "Another process sets node2's VTEP MAC (which also flushes its permanent neighbour entries)",
    );
    from = guard2.lines.length;
    await n2.ns.ip(['link', 'set', VTEP, 'address', '0e:de:ad:be:ef:01']);
    await guard2.waitFor((l) => l.event === 'restored', 5000, from);
    show(guard2, from, 'node2');
    console.log(`  ${await traffic(bed, n1, n2)}`);
    console.log(`  ${await traffic(bed, n2, n1)}`);
  } finally {
    say('Cleaning up');
    await Promise.all(guards.map((guard) => guard.stop()));
    await bed.destroy();
    await destroyAll();
    releaseStateRoot();
    console.log('  all namespaces, processes and files removed');
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exitCode = 1;
});
