/**
 * The mesh seen from one node: what every peer publishes against the permanent ARP/NDP and FDB
 * entries this node's VTEP holds for it. Pure: the same inputs give the same table, with no
 * clock and no I/O (the view, mesh/view.ts, adds the grace period and the repairs).
 *
 * The model is what flanneld's vxlan backend programs for each other Node's lease
 * (flannel-io/flannel cdf76059, pkg/backend/vxlan/vxlan_network.go:355-366 and :409-418):
 *   ARP/NDP  `<lease subnet's first address>` lladdr `<VtepMAC>` nud permanent   (device.go:231-251)
 *   FDB      `<VtepMAC>` dst `<public IP>` self permanent                          (device.go:185-207)
 * both written with NLM_F_REPLACE; the old FDB entry of a MAC that changed is never deleted
 * (only a removed lease deletes its entries, vxlan_network.go:454-476), so it stays as an orphan.
 */
import type { NeighbourInfo } from '../core/types';

export type MeshFamily = 'ipv4' | 'ipv6';

/** What one Node publishes for one address family: the entries flanneld programs for it. */
export interface PeerLease {
  node: string;
  family: MeshFamily;
  /** The VTEP device the entries live on (flannel.<VNI>, flannel-v6.<VNI>). */
  device: string;
  /** The lease subnet's first address: the ARP/NDP entry's destination. */
  vtepIp: string;
  /** The published VtepMAC (lower case). */
  mac: string;
  /** The FDB entry's destination (flannel's public-ip / public-ipv6 annotation). */
  publicIp: string;
}

/** A Node whose published data for a family cannot give entries (flanneld logs and skips it). */
export interface IncompletePeer {
  node: string;
  family: MeshFamily;
  reason: string;
}

export type PeerVerdict =
  | 'ok'
  /** The ARP/NDP entry's lladdr is not the published VtepMAC. */
  | 'stale-mac'
  /** The FDB entry of the published VtepMAC sends to another underlay address. */
  | 'stale-underlay'
  /** Published, but the ARP/NDP or the FDB entry is absent. */
  | 'missing'
  /** Another Node publishes the same VtepMAC: the FDB cannot tell them apart. */
  | 'duplicate-mac';

export interface PeerRow {
  node: string;
  family: MeshFamily;
  device: string;
  vtepIp: string;
  publishedMac: string;
  publicIp: string;
  /** The lladdr of the permanent ARP/NDP entry for vtepIp (null: none). */
  arpMac: string | null;
  /** The dst of the permanent FDB entry for publishedMac (null: none). */
  fdbDst: string | null;
  verdict: PeerVerdict;
  /** duplicate-mac: the other Nodes publishing the same MAC. */
  sharedWith?: string[];
}

/** A permanent entry no Node's lease accounts for: a deleted Node's, or a MAC nobody holds. */
export interface OrphanEntry {
  kind: 'arp' | 'fdb';
  device: string;
  /** ARP/NDP: the address; FDB: the underlay destination. */
  destination: string | null;
  lladdr: string;
}

/** This node's own VTEP against its own annotation (the guard's job, shown in the same view). */
export interface SelfRow {
  node: string;
  family: MeshFamily;
  device: string;
  publishedMac: string;
  /** The device's MAC now (null: no such device). */
  deviceMac: string | null;
  verdict: 'ok' | 'stale-mac' | 'missing';
}

export interface MeshTable {
  self: SelfRow[];
  peers: PeerRow[];
  orphans: OrphanEntry[];
}

export interface MeshInput {
  /** This node's name: its own leases are compared with its device, not with entries. */
  self: string;
  /** Every lease published, this node's included. */
  leases: readonly PeerLease[];
  /** The permanent entries of each VTEP device, by device name (absent: no such device). */
  entries: ReadonlyMap<string, readonly NeighbourInfo[]>;
  /** Each VTEP device's MAC now, by device name. */
  deviceMacs: ReadonlyMap<string, string | null>;
}

/** The FDB's all-zeros entries (flooding, default destinations) belong to no peer. */
const ZERO_MAC = '00:00:00:00:00:00';

function fdbKey(device: string, mac: string): string {
  return `${device}|${mac}`;
}

function arpKey(device: string, address: string): string {
  return `${device}|${address}`;
}

/** Orders peers by node, then family; orphans by device, kind and address: stable output. */
function byPeer(a: PeerRow, b: PeerRow): number {
  return a.node < b.node ? -1 : a.node > b.node ? 1 : a.family < b.family ? -1 : 1;
}

export function compareMesh(input: MeshInput): MeshTable {
  const arp = new Map<string, NeighbourInfo>();
  // A MAC may have several remotes (`bridge fdb append`): one dumped entry each.
  const fdb = new Map<string, NeighbourInfo[]>();
  for (const [device, entries] of input.entries) {
    for (const entry of entries) {
      if (!entry.permanent || entry.lladdr === null) continue;
      if (entry.family === 'bridge') {
        if (entry.lladdr === ZERO_MAC) continue;
        const key = fdbKey(device, entry.lladdr);
        const remotes = fdb.get(key);
        if (remotes === undefined) fdb.set(key, [entry]);
        else remotes.push(entry);
      } else if (entry.destination !== null) {
        arp.set(arpKey(device, entry.destination), entry);
      }
    }
  }
  const publishers = new Map<string, string[]>();
  for (const lease of input.leases) {
    const key = fdbKey(lease.device, lease.mac);
    const nodes = publishers.get(key);
    if (nodes === undefined) publishers.set(key, [lease.node]);
    else if (!nodes.includes(lease.node)) nodes.push(lease.node);
  }
  const self: SelfRow[] = [];
  const peers: PeerRow[] = [];
  const accountedArp = new Set<string>();
  for (const lease of input.leases) {
    const macKey = fdbKey(lease.device, lease.mac);
    const publishedBy = publishers.get(macKey) ?? [];
    // Almost always the lease's own node alone: no array built then.
    const others =
      publishedBy.length > 1 ? publishedBy.filter((node) => node !== lease.node).sort() : [];
    if (lease.node === input.self) {
      const deviceMac = input.deviceMacs.get(lease.device) ?? null;
      self.push({
        node: lease.node,
        family: lease.family,
        device: lease.device,
        publishedMac: lease.mac,
        deviceMac,
        verdict: deviceMac === null ? 'missing' : deviceMac === lease.mac ? 'ok' : 'stale-mac',
      });
      continue;
    }
    const key = arpKey(lease.device, lease.vtepIp);
    accountedArp.add(key);
    const arpMac = arp.get(key)?.lladdr ?? null;
    const remotes = fdb.get(macKey) ?? [];
    const fdbDst =
      (remotes.find((entry) => entry.destination === lease.publicIp) ?? remotes[0])?.destination ??
      null;
    let verdict: PeerVerdict;
    if (others.length > 0) verdict = 'duplicate-mac';
    else if (arpMac !== null && arpMac !== lease.mac) verdict = 'stale-mac';
    else if (arpMac === null || fdbDst === null) verdict = 'missing';
    // Any remote of the MAC at the public IP reaches the peer (one appended beside it only
    // doubles the frames), so only a MAC without it is stale.
    else if (fdbDst !== lease.publicIp) verdict = 'stale-underlay';
    else verdict = 'ok';
    peers.push({
      node: lease.node,
      family: lease.family,
      device: lease.device,
      vtepIp: lease.vtepIp,
      publishedMac: lease.mac,
      publicIp: lease.publicIp,
      arpMac,
      fdbDst,
      verdict,
      ...(others.length > 0 ? { sharedWith: others } : {}),
    });
  }
  const orphans: OrphanEntry[] = [];
  for (const [key, entry] of arp) {
    if (accountedArp.has(key) || entry.lladdr === null) continue;
    orphans.push({
      kind: 'arp',
      device: key.slice(0, key.indexOf('|')),
      destination: entry.destination,
      lladdr: entry.lladdr,
    });
  }
  for (const [key, remotes] of fdb) {
    if (publishers.has(key)) continue;
    for (const entry of remotes) {
      orphans.push({
        kind: 'fdb',
        device: key.slice(0, key.indexOf('|')),
        destination: entry.destination,
        lladdr: entry.lladdr ?? '',
      });
    }
  }
  orphans.sort((a, b) => orphanKey(a).localeCompare(orphanKey(b)));
  return { self, peers: peers.sort(byPeer), orphans };
}

/** One key per peer row and family (node|family): what verdicts are tracked by. */
export function peerKey(row: { node: string; family: MeshFamily }): string {
  return `${row.node}|${row.family}`;
}

/** One key per orphan entry (device|kind|lladdr|destination). */
export function orphanKey(entry: OrphanEntry): string {
  return `${entry.device}|${entry.kind}|${entry.lladdr}|${entry.destination ?? ''}`;
}
