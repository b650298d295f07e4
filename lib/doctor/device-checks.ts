/**
 * The doctor's checks of the VXLAN devices found: the device itself, its MAC against the
 * published one (and who wrote it), its addr_assign_type, its neighbour entries.
 */
import { NET_ADDR_RANDOM } from '../core/constants';
import { type CheckResult, type DeviceState, type Gathered } from './check-types';

export function checkVtep(gathered: Gathered): CheckResult[] {
  if (gathered.devices.length === 0) {
    return [
      {
        id: 'vtep',
        device: null,
        verdict: 'warn',
        summary: `no device matching ${gathered.globs.join(', ')}`,
        evidence: [`links: ${gathered.links.map((l) => l.name).join(', ')}`],
        fix: 'Start flannel (its vxlan backend creates flannel.1), or name the device with --iface.',
      },
    ];
  }
  return gathered.devices.map(({ link, fix }) => {
    const vx = link.vxlan;
    const evidence = [
      `kind ${link.kind || 'none'}, ${link.up ? 'up' : 'down'}, mtu ${link.mtu ?? '?'}`,
      ...(vx
        ? [
            `vni ${vx.vni ?? '?'}, port ${vx.port ?? '?'}, local ${vx.local ?? 'none'}, underlay ifindex ${vx.underlayIfindex ?? 'none'}, learning ${vx.learning === null ? '?' : vx.learning ? 'on' : 'off'}`,
          ]
        : []),
    ];
    if (link.kind !== 'vxlan') {
      return {
        id: 'vtep',
        device: link.name,
        verdict: 'fail',
        summary: `${link.name} is not a VXLAN device (kind ${link.kind || 'none'})`,
        evidence,
        fix: `Remove ${link.name} or narrow --iface: flannel's vxlan backend creates a vxlan device under this name.`,
      } satisfies CheckResult;
    }
    if (!link.up) {
      return {
        id: 'vtep',
        device: link.name,
        verdict: 'warn',
        summary: `${link.name} is down`,
        evidence,
        fix: `Bring it up (${fix.ip(`link set ${link.name} up`)}) or restart flannel; if that fails with "Address already in use", see the vxlan-port check.`,
      } satisfies CheckResult;
    }
    return {
      id: 'vtep',
      device: link.name,
      verdict: 'ok',
      summary: `${link.name}: VXLAN, up`,
      evidence,
      fix: null,
    } satisfies CheckResult;
  });
}

export function checkMac(device: DeviceState): CheckResult {
  const { link } = device;
  const evidence = [
    `device MAC ${link.mac ?? 'none'}`,
    `published MAC ${device.publishedMac ?? 'unknown'}${device.publishedBy ? ` (${device.publishedBy})` : ''}`,
  ];
  if (device.publishedMac === null) {
    return {
      id: 'vtep-mac',
      device: link.name,
      verdict: 'warn',
      summary: `the MAC ${link.name} published is unknown: not compared`,
      evidence,
      fix: `Pass --mac ${link.name}=MAC with the VtepMAC of the node annotation flannel.alpha.coreos.com/backend-data.`,
    };
  }
  if (link.mac !== device.publishedMac) {
    if (device.writer) evidence.push(`written by ${device.writer.writer}: ${device.writer.detail}`);
    return {
      id: 'vtep-mac',
      device: link.name,
      verdict: 'fail',
      summary: `${link.name} has MAC ${link.mac ?? 'none'}, but the other nodes were told ${device.publishedMac}: cross-node traffic is dropped`,
      evidence,
      fix: `Set it back and restore the neighbour entries the change flushes (${device.fix.guard('doctor', `--fix --mac ${link.name}=${device.publishedMac}`)}), and keep it there with ${device.fix.guard('watch')}.`,
    };
  }
  return {
    id: 'vtep-mac',
    device: link.name,
    verdict: 'ok',
    summary: `${link.name} has the published MAC ${link.mac}`,
    evidence,
    fix: null,
  };
}

const ASSIGN_TYPES = ['permanent', 'random', 'stolen', 'set by userspace'];

export function checkAddrAssignType(device: DeviceState): CheckResult {
  const { link } = device;
  const value = device.addrAssignType;
  const named = value === null ? 'unknown' : `${value} (${ASSIGN_TYPES[value] ?? '?'})`;
  const evidence = [`/sys/class/net/${link.name}/addr_assign_type = ${named}`];
  if (value === NET_ADDR_RANDOM) {
    return {
      id: 'addr-assign-type',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name} still has the kernel's random MAC (addr_assign_type 1): udev's MACAddressPolicy rewrites it on the next add event (udevadm trigger)`,
      evidence,
      fix: `Write the MAC it already has once (addr_assign_type becomes 3, which udev leaves alone); ${device.fix.guard('doctor', '--fix')} does that and restores the neighbour entries.`,
    };
  }
  if (value === null) {
    return {
      id: 'addr-assign-type',
      device: link.name,
      verdict: 'warn',
      summary: `addr_assign_type of ${link.name} could not be read`,
      evidence,
      fix: "Run the doctor in the node's own network namespace (or with --netns by name) so sysfs can be read.",
    };
  }
  return {
    id: 'addr-assign-type',
    device: link.name,
    verdict: 'ok',
    summary: `addr_assign_type ${named}: udev's MACAddressPolicy leaves it alone`,
    evidence,
    fix: null,
  };
}

export function checkNeighbours(device: DeviceState, peersGiven: boolean): CheckResult {
  const { link } = device;
  const ip = device.neighbours.filter((n) => n.family !== 'bridge');
  const fdb = device.neighbours.filter((n) => n.family === 'bridge');
  const permanent = ip.filter((n) => n.permanent);
  const evidence = [
    ...permanent.map(
      (n) => `neigh ${n.destination ?? '?'} lladdr ${n.lladdr ?? 'none'} ${n.states.join(',')}`,
    ),
    ...ip
      .filter((n) => !n.permanent && !n.states.includes('noarp'))
      .map(
        (n) =>
          `neigh ${n.destination ?? '?'} ${n.lladdr ?? ''} ${n.states.join(',')} (not permanent)`,
      ),
    ...fdb.map(
      (n) =>
        `fdb ${n.lladdr ?? '?'} dst ${n.destination ?? 'none'}${n.permanent ? ' permanent' : ''}`,
    ),
  ];
  const problems: string[] = [];
  const warnings: string[] = [];
  if (device.peers.length > 0) {
    for (const peer of device.peers) {
      const arp = ip.find((n) => n.destination === peer.vtepIp);
      if (!arp) problems.push(`no neighbour entry for ${peer.vtepIp} (published ${peer.mac})`);
      else if (arp.lladdr !== peer.mac) {
        problems.push(`${peer.vtepIp} points at ${arp.lladdr ?? 'none'}, published ${peer.mac}`);
      } else if (!arp.permanent) problems.push(`${peer.vtepIp} is not permanent`);
      if (peer.underlayIp !== undefined) {
        const entry = fdb.find((n) => n.lladdr === peer.mac && n.destination === peer.underlayIp);
        if (!entry) problems.push(`no FDB entry ${peer.mac} dst ${peer.underlayIp}`);
        else if (!entry.permanent)
          problems.push(`FDB entry ${peer.mac} dst ${peer.underlayIp} is not permanent`);
      }
    }
    const published = new Set(device.peers.map((p) => p.vtepIp));
    const macs = new Set(device.peers.map((p) => p.mac));
    for (const n of permanent) {
      if (n.destination !== null && !published.has(n.destination)) {
        warnings.push(`${n.destination} is not a published VTEP (a node that left?)`);
      }
    }
    for (const n of fdb) {
      if (n.lladdr !== null && n.lladdr !== '00:00:00:00:00:00' && !macs.has(n.lladdr)) {
        warnings.push(
          `FDB entry ${n.lladdr} dst ${n.destination ?? 'none'} is not a published MAC (stale)`,
        );
      }
    }
  } else {
    for (const n of permanent) {
      if (n.lladdr !== null && !fdb.some((f) => f.lladdr === n.lladdr)) {
        problems.push(
          `${n.destination ?? '?'} points at ${n.lladdr}, which has no FDB entry: its traffic has no underlay destination`,
        );
      }
    }
    for (const n of ip.filter(
      (e) => e.states.includes('failed') || e.states.includes('incomplete'),
    )) {
      warnings.push(
        `${n.destination ?? '?'} is unresolved (${n.states.join(',')}): no published entry for it`,
      );
    }
  }
  const counts = `${permanent.length} permanent neighbour and ${fdb.length} FDB entries`;
  if (problems.length > 0) {
    return {
      id: 'neighbours',
      device: link.name,
      verdict: 'fail',
      summary: `${link.name}: ${problems.join('; ')}`,
      evidence: [...evidence, ...warnings],
      fix: peersGiven
        ? `Re-install the published entries (${device.fix.guard('doctor', '--fix --peer ...')} does it), or restart flannel so it re-programs them.`
        : `Restart flannel so it re-programs its neighbour and FDB entries, or pass the published peers: ${device.fix.guard('doctor', '--fix --peer ...')}.`,
    };
  }
  if (warnings.length > 0) {
    return {
      id: 'neighbours',
      device: link.name,
      verdict: 'warn',
      summary: `${link.name}: ${warnings.join('; ')}`,
      evidence,
      fix: `Remove entries for nodes that no longer exist (${device.fix.ip(`neigh del ADDRESS dev ${link.name}`)}, and its FDB entry) or restart flannel.`,
    };
  }
  return {
    id: 'neighbours',
    device: link.name,
    verdict: 'ok',
    summary: peersGiven
      ? `${link.name}: ${counts}, every published peer present and correct`
      : `${link.name}: ${counts}, consistent (no published peers given: pass --peer to compare)`,
    evidence,
    fix: null,
  };
}
