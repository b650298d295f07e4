/**
 * The kernel entries the mesh writes and deletes, as flanneld writes them
 * (flannel-io/flannel cdf76059, pkg/backend/vxlan/device.go).
 */
import { NTF_SELF, NUD_PERMANENT } from '../core/constants';
import type { NeighbourInfo } from '../core/types';
import { ipVersion } from '../core/validate';
import type { MeshFamily, OrphanEntry, PeerRow } from './compare';

/** The kernel entry an orphan stands for, to delete it. */
export function orphanEntry(orphan: OrphanEntry): NeighbourInfo {
  if (orphan.kind === 'fdb') return fdbEntry(orphan.lladdr, orphan.destination);
  const family = ipVersion(orphan.destination ?? '') === 6 ? 'ipv6' : 'ipv4';
  return arpEntry(family, orphan.destination, orphan.lladdr);
}

/** A permanent ARP/NDP entry, as flanneld writes one (device.go AddARP, AddV6ARP). */
function arpEntry(family: MeshFamily, address: string | null, mac: string): NeighbourInfo {
  return {
    family: family === 'ipv4' ? 'inet' : 'inet6',
    ifindex: 0,
    destination: address,
    lladdr: mac,
    state: NUD_PERMANENT,
    states: ['permanent'],
    permanent: true,
    flags: 0,
    vni: null,
    master: null,
  };
}

/** A permanent FDB entry of the device itself, as flanneld writes one (device.go AddFDB). */
function fdbEntry(mac: string, remote: string | null): NeighbourInfo {
  return { ...arpEntry('ipv4', remote, mac), family: 'bridge', flags: NTF_SELF };
}

/** The two entries flanneld writes for a peer (see compare.ts), ARP/NDP first. */
export function flannelEntries(row: PeerRow): NeighbourInfo[] {
  return [
    arpEntry(row.family, row.vtepIp, row.publishedMac),
    fdbEntry(row.publishedMac, row.publicIp),
  ];
}
