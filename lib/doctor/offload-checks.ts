/**
 * The doctor's checks of TX checksum offload: the policy on the device, the underlay driver,
 * the kernel's --random-fully bug, the VXLAN port, the probe of the paths to peers and the
 * checksum-error counters.
 */
import type { FeatureState } from '../core/types';
import type { PathAnswer } from '../guard/events';
import { checksumErrorRise, describeChecksumCounts } from '../guard/checksum-errors';
import { judgePaths } from '../guard/offload-auto';
import { compareVersions } from '../udev/link-files';
import { type CheckResult, type DeviceState, type Gathered, type Verdict } from './check-types';
import { readChecksumErrors } from './gather';

function featureState(device: DeviceState, name: string): FeatureState | undefined {
  return device.features?.find((f) => f.name === name);
}

export function checkOffload(
  device: DeviceState,
  policy: Readonly<Record<string, boolean>>,
): CheckResult {
  const { link } = device;
  const entries = Object.entries(policy);
  if (entries.length === 0) {
    return {
      id: 'offload',
      device: link.name,
      verdict: 'ok',
      summary: 'no offload policy (--offload none)',
      evidence: [],
      fix: null,
    };
  }
  if (device.features === null) {
    return {
      id: 'offload',
      device: link.name,
      verdict: 'warn',
      summary: `offload features of ${link.name} could not be read`,
      evidence: [],
      fix: "Run the doctor with CAP_NET_ADMIN in the node's namespace.",
    };
  }
  const evidence: string[] = [];
  const off: string[] = [];
  for (const [name, wanted] of entries) {
    const feature = featureState(device, name);
    if (!feature) {
      evidence.push(`${name}: not a feature of this kernel`);
      off.push(name);
      continue;
    }
    evidence.push(
      `${name}: ${feature.active ? 'on' : 'off'}${feature.fixed ? ' [fixed]' : ''} (policy ${wanted ? 'on' : 'off'})`,
    );
    if (feature.active !== wanted) off.push(name);
  }
  if (off.length > 0) {
    const settings = entries.map(([name, on]) => `${name} ${on ? 'on' : 'off'}`).join(' ');
    return {
      id: 'offload',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name}: ${off.join(', ')} not at the policy`,
      evidence,
      fix: `Apply the policy (${device.fix.ethtool(`-K ${link.name} ${settings}`)}; ${device.fix.guard('doctor', '--fix')} does it) and keep it with ${device.fix.guard('watch')}, since a re-created device loses it.`,
    };
  }
  return {
    id: 'offload',
    device: link.name,
    verdict: 'ok',
    summary: `${link.name}: ${entries.map(([n, on]) => `${n} ${on ? 'on' : 'off'}`).join(', ')} as the policy wants`,
    evidence,
    fix: null,
  };
}

function txChecksumOn(device: DeviceState): boolean | null {
  return featureState(device, 'tx-checksum-ip-generic')?.active ?? null;
}

/** A VMXNET3 parent's offloads of UDP-tunnelled packets (the BZ#1960702 workaround's). */
const PARENT_TUNNEL_OFFLOADS: readonly string[] = [
  'tx-udp_tnl-segmentation',
  'tx-udp_tnl-csum-segmentation',
];

export async function checkUnderlayDriver(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const vx = link.vxlan;
  let underlay: string | null = null;
  const evidence: string[] = [];
  if (vx?.underlayIfindex != null && link.linkNetnsid === null) {
    underlay = gathered.links.find((l) => l.ifindex === vx.underlayIfindex)?.name ?? null;
    evidence.push(
      `underlay from the device (IFLA_VXLAN_LINK ${vx.underlayIfindex}): ${underlay ?? 'not found'}`,
    );
  }
  if (underlay === null && vx?.local) {
    underlay = await gathered.probe.interfaceWithAddress(vx.local);
    evidence.push(`underlay by local address ${vx.local}: ${underlay ?? 'not found'}`);
  }
  if (underlay === null) {
    return {
      id: 'underlay-driver',
      device: link.name,
      verdict: 'warn',
      summary: `the underlay NIC of ${link.name} is unknown`,
      evidence,
      fix: 'Create the VXLAN device with dev/local (flannel does: --iface) so the underlay NIC is known.',
    };
  }
  let driver = '';
  try {
    const info = await gathered.probe.driverInfo(underlay);
    driver = info.driver;
    evidence.push(
      `${underlay}: driver ${info.driver} ${info.version}${info.firmwareVersion ? `, firmware ${info.firmwareVersion}` : ''}${info.busInfo ? `, bus ${info.busInfo}` : ''}`,
    );
  } catch (error) {
    evidence.push(
      `${underlay}: driver unknown (${error instanceof Error ? error.message : String(error)})`,
    );
  }
  const port = vx?.port ?? null;
  const offloadOn = txChecksumOn(device);
  evidence.push(
    `VXLAN port ${port ?? '?'}, tx-checksum-ip-generic ${offloadOn === null ? '?' : offloadOn ? 'on' : 'off'} on ${link.name}`,
  );
  if (driver === 'vmxnet3' && port === 8472) {
    // The parent NIC's own tunnel offloads: reported, never changed (the node's NIC is not ours).
    const tunnel = await gathered.probe.features(underlay).then(
      (features) =>
        features
          .filter((f) => PARENT_TUNNEL_OFFLOADS.includes(f.name) && f.active)
          .map((f) => f.name),
      () => [],
    );
    evidence.push(
      `${underlay}: ${tunnel.length === 0 ? 'no tunnel offload on' : `${tunnel.join(', ')} on`}`,
    );
    if (offloadOn !== false) {
      const parent =
        tunnel.length === 0
          ? ''
          : ` The parent NIC is left as it is: Red Hat's workaround for BZ#1960702 also turns its tunnel offloads off (${device.fix.ethtool(`-K ${underlay} ${tunnel.map((f) => `${f} off`).join(' ')}`)}), as does a VMXNET3 without the bug (an ESXi or VM hardware update).`;
      return {
        id: 'underlay-driver',
        device: link.name,
        verdict: 'fail',
        summary: `${underlay} is VMXNET3 and ${link.name} uses UDP 8472 with TX checksum offload on: inner TCP/UDP checksums come out wrong (VMXNET3 v4, Red Hat BZ#1960702) - ping works, TCP and UDP do not`,
        evidence,
        fix: `Turn TX checksum offload off on the VXLAN device (${device.fix.ethtool(`-K ${link.name} tx-checksum-ip-generic off`)}; ${device.fix.guard('doctor', '--fix')}, and ${device.fix.guard('watch')} keeps it off).${parent}`,
      };
    }
    return {
      id: 'underlay-driver',
      device: link.name,
      verdict: 'ok',
      summary: `${underlay} is VMXNET3 with VXLAN on 8472, and TX checksum offload is off on ${link.name} (the VMXNET3 v4 checksum bug is avoided)`,
      evidence,
      fix: null,
    };
  }
  return {
    id: 'underlay-driver',
    device: link.name,
    verdict: driver === '' ? 'warn' : 'ok',
    summary:
      driver === ''
        ? `driver of ${underlay} unknown`
        : `${underlay} (${driver}): no known bad combination with VXLAN port ${port ?? '?'}`,
    evidence,
    fix:
      driver === '' ? 'Run the doctor with CAP_NET_ADMIN so ETHTOOL_GDRVINFO can be read.' : null,
  };
}

/** Kernels up to 5.7 corrupt VXLAN checksums when masquerading with --random-fully. */
export function kernelAffectedByRandomFully(release: string): boolean {
  const match = /^(\d+)\.(\d+)/.exec(release);
  if (!match) return false;
  return compareVersions(`${match[1]}.${match[2]}`, '5.7') <= 0;
}

export async function checkRandomFully(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const kernel = gathered.kernel;
  const affected = kernelAffectedByRandomFully(kernel);
  const rules = await gathered.probe.natRules();
  const lines = rules.sources.flatMap(({ tool, text }) =>
    text
      .split('\n')
      .filter((line) => /masquerade/i.test(line) && /random-fully|fully-random/.test(line))
      .map((line) => `${tool}: ${line.trim()}`),
  );
  const offloadOn = txChecksumOn(device);
  const evidence = [
    `kernel ${kernel}${affected ? ' (5.7 or older)' : ''}`,
    `NAT rules read with ${rules.sources.map((s) => s.tool).join(', ') || 'nothing'}`,
    ...rules.unavailable.map((why) => `not read: ${why}`),
    ...(lines.length > 0 ? lines : ['no MASQUERADE --random-fully rule']),
    `tx-checksum-ip-generic ${offloadOn === null ? '?' : offloadOn ? 'on' : 'off'} on ${link.name}`,
  ];
  const result = (verdict: Verdict, summary: string, fix: string | null): CheckResult => ({
    id: 'random-fully',
    device: link.name,
    verdict,
    summary,
    evidence,
    fix,
  });
  if (!affected) {
    return result(
      'ok',
      `kernel ${kernel} is newer than 5.7: --random-fully masquerade does not break VXLAN checksums`,
      null,
    );
  }
  if (lines.length > 0) {
    if (offloadOn !== false) {
      return result(
        'fail',
        `kernel ${kernel} with MASQUERADE --random-fully and TX checksum offload on ${link.name}: VXLAN packets leave with bad checksums (TCP/UDP across nodes fail, ping works)`,
        `Turn TX checksum offload off on ${link.name} (${device.fix.ethtool(`-K ${link.name} tx-checksum-ip-generic off`)}; ${device.fix.guard('doctor', '--fix')}) or upgrade the kernel past 5.7.`,
      );
    }
    return result(
      'ok',
      `kernel ${kernel} masquerades with --random-fully, but TX checksum offload is off on ${link.name}`,
      null,
    );
  }
  if (rules.sources.length === 0) {
    return result(
      'warn',
      `kernel ${kernel} is 5.7 or older and the NAT rules could not be read`,
      `Check for MASQUERADE --random-fully (iptables-save -t nat) and keep TX checksum offload off on ${link.name}.`,
    );
  }
  return result(
    'ok',
    `kernel ${kernel} is 5.7 or older, but nothing masquerades with --random-fully`,
    null,
  );
}

export async function checkVxlanPort(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const port = link.vxlan?.port ?? 8472;
  const sockets = (await gathered.probe.udpSockets()).filter((s) => s.port === port);
  const owners = await gathered.probe.socketOwners(sockets.map((s) => s.inode));
  const evidence = sockets.map((socket) => {
    const held = owners.get(socket.inode) ?? [];
    return `udp ${socket.family} ${socket.localAddress}:${port} inode ${socket.inode}: ${held.length > 0 ? held.map((o) => `${o.command} (pid ${o.pid})`).join(', ') : 'kernel socket (VXLAN)'}`;
  });
  const userspace = sockets.flatMap((socket) => owners.get(socket.inode) ?? []);
  if (userspace.length > 0) {
    const who = [...new Set(userspace.map((o) => `${o.command} (pid ${o.pid})`))].join(', ');
    return {
      id: 'vxlan-port',
      device: link.name,
      verdict: 'fail',
      summary: `UDP port ${port} of ${link.name} is held by ${who}${link.up ? '' : `: ${link.name} cannot come up (Address already in use)`}`,
      evidence,
      fix: `Stop ${who} or move it off UDP ${port} (or give flannel another port with the VXLAN "Port" setting).`,
    };
  }
  if (!link.up) {
    return {
      id: 'vxlan-port',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name} is down, so nothing listens on UDP ${port}`,
      evidence,
      fix: `Bring ${link.name} up (or restart flannel).`,
    };
  }
  if (sockets.length === 0) {
    return {
      id: 'vxlan-port',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name} is up but no socket is bound to UDP ${port}`,
      evidence,
      fix: `Re-create ${link.name} (restart flannel).`,
    };
  }
  return {
    id: 'vxlan-port',
    device: link.name,
    verdict: 'ok',
    summary: `UDP ${port} is held by the kernel's VXLAN socket only`,
    evidence,
    fix: null,
  };
}

/** Runs every check on gathered state. */
/** Peers probed by the doctor: a sample as small as the guard's. */
const PROBED_PEERS = 8;

/**
 * Measures what the offload check can only infer: one round of `--offload auto`'s probes to the
 * device's peers (its permanent ARP entries) with the offload as it is. Echo answered but UDP
 * and TCP silent on every peer: the checksums do not arrive (fail); all answered (ok).
 */
export async function checkOffloadProbe(
  gathered: Gathered,
  device: DeviceState,
): Promise<CheckResult> {
  const { link } = device;
  const base = { id: 'offload-probe' as const, device: link.name };
  const peers = [
    ...new Set(
      device.neighbours
        .filter((n) => n.family === 'inet' && n.permanent)
        .flatMap((n) => (n.destination === null ? [] : [n.destination])),
    ),
  ].slice(0, PROBED_PEERS);
  const state = device.features?.find((f) => f.name === 'tx-checksum-ip-generic')?.active;
  const offload = `tx-checksum-ip-generic ${state === undefined ? 'unknown' : state ? 'on' : 'off'}`;
  if (link.kind !== 'vxlan' || peers.length === 0) {
    return {
      ...base,
      verdict: 'ok',
      summary: `${link.name}: no peer VTEP to probe (no permanent ARP entry)`,
      evidence: [offload],
      fix: null,
    };
  }
  if (gathered.passive) {
    return {
      ...base,
      verdict: 'warn',
      summary: `${link.name}: ${peers.length} peer path(s) not probed (--passive: the doctor sent nothing)`,
      evidence: [offload],
      fix: 'Run the doctor without --passive to measure the paths (one ICMP echo, UDP datagram and TCP SYN to a closed port per peer).',
    };
  }
  let answers: PathAnswer[];
  try {
    answers = await gathered.probe.probePaths(link.name, peers);
  } catch (error) {
    return {
      ...base,
      verdict: 'warn',
      summary: `${link.name}: the paths could not be probed (${(error as Error).message})`,
      evidence: [offload],
      fix: 'Run the doctor with CAP_NET_RAW (a raw ICMP socket sends the echo).',
    };
  }
  const judged = judgePaths(answers);
  const evidence = [
    offload,
    ...answers.map(
      (a) =>
        `${a.address}: echo ${a.echo ? 'yes' : 'no'}, udp ${a.udp ? 'yes' : 'no'}, tcp ${a.tcp ? 'yes' : 'no'}`,
    ),
  ];
  if (judged.verdict === 'broken') {
    return {
      ...base,
      verdict: 'fail',
      summary: `${link.name}: ${judged.why} with ${offload}: checksums left to the NIC arrive unfinished (TCP and UDP between nodes fail, ping works)`,
      evidence,
      fix:
        state === true
          ? `Turn tx-checksum-ip-generic off (${device.fix.guard('doctor', '--fix')}, or ${device.fix.guard('watch', '--offload auto')} to measure and fix it on every node).`
          : 'The offload is already off here: look for a filter on UDP and TCP between the nodes.',
    };
  }
  return {
    ...base,
    verdict: judged.verdict === 'healthy' ? 'ok' : 'warn',
    summary: `${link.name}: ${judged.why} with ${offload}`,
    evidence,
    fix:
      judged.verdict === 'healthy'
        ? null
        : 'Check that the peers are up and that nothing filters ICMP, UDP or TCP between the nodes.',
  };
}

/**
 * The passive evidence: packets this namespace received with bad checksums (/proc/net/snmp),
 * read when the doctor began and again now, after the probes. Rising during the run: a peer
 * sends with broken TX checksum offload now (fail); counted before only: it did once (warn).
 */
export async function checkChecksumErrors(gathered: Gathered): Promise<CheckResult> {
  const base = { id: 'checksum-errors' as const, device: null };
  const unreadable = (error: Error): CheckResult => ({
    ...base,
    verdict: 'warn',
    summary: `the checksum-error counters could not be read (${error.message})`,
    evidence: [],
    fix: 'Run the doctor where /proc/net/snmp of the namespace can be read.',
  });
  const start = gathered.checksumErrorsAtStart;
  if (start instanceof Error) return unreadable(start);
  const end = await readChecksumErrors(gathered.probe);
  if (end instanceof Error) return unreadable(end);
  const seconds = ((end.at - start.at) / 1000).toFixed(1);
  const rose = describeChecksumCounts(checksumErrorRise(end.counters, start.counters));
  const counted = describeChecksumCounts(end.counters);
  const evidence = [
    `/proc/net/snmp InCsumErrors: udp ${end.counters.udp ?? 'not kept'}, tcp ${end.counters.tcp ?? 'not kept'}; snmp6 Udp6InCsumErrors ${end.counters.udp6 ?? 'not kept'}`,
    `rise during the doctor's ${seconds} s: ${rose || 'none'}`,
  ];
  const peersFix = `Run ${gathered.fix.guard('doctor')} on the other nodes (its offload-probe check finds the sender), or ${gathered.fix.guard('watch', '--offload auto')} on every node.`;
  if (rose !== '') {
    return {
      ...base,
      verdict: 'fail',
      summary: `${rose} packets with bad checksums received in ${seconds} s and dropped: a peer sends with broken TX checksum offload now`,
      evidence,
      fix: peersFix,
    };
  }
  if (counted !== '') {
    return {
      ...base,
      verdict: 'warn',
      summary: `${counted} packets with bad checksums received since the namespace began, none during this run: a peer sent with broken TX checksum offload before`,
      evidence,
      fix: `If it comes back: ${peersFix}`,
    };
  }
  return {
    ...base,
    verdict: 'ok',
    summary: 'no packet with a bad checksum received in this namespace',
    evidence,
    fix: null,
  };
}
