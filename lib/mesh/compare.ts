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
  | 'duplicate-mac'
  /**
   * Neither entry, with flannel's DirectRouting declared: flanneld routes a peer on this node's
   * own L2 segment straight to its public IP and writes no entries for it (vxlan_network.go:345).
   */
  | 'direct';

/** The verdicts under which traffic to the peer flows: all others are a divergence. */
export function isHealthyVerdict(verdict: string): boolean {
  return verdict === 'ok' || verdict === 'direct';
}

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
  /** flannel runs with `Backend.DirectRouting`: a peer with neither entry is 'direct'. */
  directRouting?: boolean;
}

/** The FDB's all-zeros entries (flooding, default destinations) belong to no peer. */
const ZERO_MAC = '00:00:00:00:00:00';

function fdbKey(device: string, mac: string): string {
  return `${device}|${mac}`;
}

function arpKey(device: string, address: string): string {
  return `${device}|${address}`;
}

/** Orders rows by node, then family; stable output. */
function byNode(a: { node: string; family: MeshFamily }, b: typeof a): number {
  return a.node < b.node ? -1 : a.node > b.node ? 1 : a.family < b.family ? -1 : 1;
}

/** A row or an entry of the table, as the view tracks it. */
export type MeshSubject =
  | { kind: 'peer'; row: PeerRow }
  | { kind: 'self'; row: SelfRow }
  | { kind: 'orphan'; entry: OrphanEntry };

/** What a change touched: each key now holds its subject, or is gone. */
export interface MeshDelta {
  changed: Map<string, MeshSubject>;
  removed: Set<string>;
}

/**
 * The table kept current: a Node's change judges again only the rows it can touch (its own,
 * those sharing a MAC with it, the entries its old and new leases account for), so that one
 * event among thousands of Nodes costs map lookups, not a comparison of the whole mesh. New
 * entries (any change the mirror reports) are loaded whole: they come in bursts (a MAC change
 * flushes every ARP entry) and are rare otherwise.
 */
export class MeshComparison {
  readonly #self: string;
  readonly #directRouting: boolean;
  readonly #leases = new Map<string, readonly PeerLease[]>();
  readonly #arp = new Map<string, NeighbourInfo>();
  /** A MAC may have several remotes (`bridge fdb append`): one dumped entry each. */
  readonly #fdb = new Map<string, NeighbourInfo[]>();
  #deviceMacs: ReadonlyMap<string, string | null> = new Map();
  /** The Nodes publishing each device|MAC (this node's included; one per lease). */
  readonly #publishers = new Map<string, string[]>();
  /** How many peer leases name each device|address: its ARP entry is no orphan. */
  readonly #arpClaims = new Map<string, number>();
  readonly #subjects = new Map<string, MeshSubject>();

  constructor(self: string, options: { directRouting?: boolean } = {}) {
    this.#self = self;
    this.#directRouting = options.directRouting === true;
  }

  /** The devices whose entries were loaded (present or not). */
  get devices(): ReadonlySet<string> {
    return new Set(this.#deviceMacs.keys());
  }

  /** Every lease and every entry anew. */
  load(input: Omit<MeshInput, 'self' | 'directRouting'>): MeshDelta {
    this.#leases.clear();
    this.#publishers.clear();
    this.#arpClaims.clear();
    for (const lease of input.leases) {
      const leases = this.#leases.get(lease.node);
      if (leases === undefined) this.#leases.set(lease.node, [lease]);
      else this.#leases.set(lease.node, [...leases, lease]);
      this.#index(lease, 1);
    }
    this.#arp.clear();
    this.#fdb.clear();
    for (const [device, entries] of input.entries) {
      for (const entry of entries) {
        if (!entry.permanent || entry.lladdr === null) continue;
        if (entry.family === 'bridge') {
          if (entry.lladdr === ZERO_MAC) continue;
          const key = fdbKey(device, entry.lladdr);
          const remotes = this.#fdb.get(key);
          if (remotes === undefined) this.#fdb.set(key, [entry]);
          else remotes.push(entry);
        } else if (entry.destination !== null) {
          this.#arp.set(arpKey(device, entry.destination), entry);
        }
      }
    }
    this.#deviceMacs = input.deviceMacs;
    const before = new Set(this.#subjects.keys());
    this.#subjects.clear();
    const delta: MeshDelta = { changed: new Map(), removed: new Set() };
    for (const lease of input.leases) this.#judge(lease, delta);
    for (const key of this.#arp.keys()) this.#judgeArp(key, delta);
    for (const key of this.#fdb.keys()) this.#judgeFdb(key, delta);
    for (const key of before) if (!this.#subjects.has(key)) delta.removed.add(key);
    return delta;
  }

  /** One Node's leases now (none: it publishes nothing usable, or is gone). */
  setNode(node: string, leases: readonly PeerLease[]): MeshDelta {
    const delta: MeshDelta = { changed: new Map(), removed: new Set() };
    const old = this.#leases.get(node) ?? [];
    const both = [...old, ...leases];
    for (const lease of old) {
      this.#index(lease, -1);
      this.#put(rowKey(lease, this.#self), undefined, delta);
    }
    if (leases.length === 0) this.#leases.delete(node);
    else this.#leases.set(node, leases);
    for (const lease of leases) this.#index(lease, 1);
    // The Node and every other publishing one of its old or new MACs (duplicate-mac comes and goes).
    const nodes = new Set([node]);
    for (const lease of both) {
      for (const other of this.#publishers.get(fdbKey(lease.device, lease.mac)) ?? [])
        nodes.add(other);
    }
    for (const name of nodes)
      for (const lease of this.#leases.get(name) ?? []) this.#judge(lease, delta);
    for (const lease of both) {
      this.#judgeArp(arpKey(lease.device, lease.vtepIp), delta);
      this.#judgeFdb(fdbKey(lease.device, lease.mac), delta);
    }
    return delta;
  }

  /** This node's devices' MACs now: its own rows judged again. */
  setDeviceMacs(deviceMacs: ReadonlyMap<string, string | null>): MeshDelta {
    const delta: MeshDelta = { changed: new Map(), removed: new Set() };
    const changed = [...deviceMacs].some(([device, mac]) => this.#deviceMacs.get(device) !== mac);
    this.#deviceMacs = new Map([...this.#deviceMacs, ...deviceMacs]);
    if (changed) for (const lease of this.#leases.get(this.#self) ?? []) this.#judge(lease, delta);
    return delta;
  }

  table(): MeshTable {
    const table: MeshTable = { self: [], peers: [], orphans: [] };
    for (const subject of this.#subjects.values()) {
      if (subject.kind === 'self') table.self.push(subject.row);
      else if (subject.kind === 'peer') table.peers.push(subject.row);
      else table.orphans.push(subject.entry);
    }
    table.self.sort(byNode);
    table.peers.sort(byNode);
    table.orphans.sort((a, b) => orphanKey(a).localeCompare(orphanKey(b)));
    return table;
  }

  #index(lease: PeerLease, step: 1 | -1): void {
    const macKey = fdbKey(lease.device, lease.mac);
    const publishers = this.#publishers.get(macKey) ?? [];
    if (step === 1) this.#publishers.set(macKey, [...publishers, lease.node]);
    else {
      const at = publishers.indexOf(lease.node);
      const rest = publishers.filter((_, i) => i !== at);
      if (rest.length === 0) this.#publishers.delete(macKey);
      else this.#publishers.set(macKey, rest);
    }
    if (lease.node === this.#self) return;
    const claim = arpKey(lease.device, lease.vtepIp);
    const claims = (this.#arpClaims.get(claim) ?? 0) + step;
    if (claims === 0) this.#arpClaims.delete(claim);
    else this.#arpClaims.set(claim, claims);
  }

  #put(key: string, subject: MeshSubject | undefined, delta: MeshDelta): void {
    if (subject !== undefined) {
      this.#subjects.set(key, subject);
      delta.changed.set(key, subject);
      delta.removed.delete(key);
    } else if (this.#subjects.delete(key)) {
      delta.changed.delete(key);
      delta.removed.add(key);
    }
  }

  #judge(lease: PeerLease, delta: MeshDelta): void {
    const macKey = fdbKey(lease.device, lease.mac);
    const publishedBy = this.#publishers.get(macKey) ?? [];
    // Almost always the lease's own node alone: no array built then.
    const others =
      publishedBy.length > 1
        ? [...new Set(publishedBy.filter((node) => node !== lease.node))].sort()
        : [];
    const key = rowKey(lease, this.#self);
    if (lease.node === this.#self) {
      const deviceMac = this.#deviceMacs.get(lease.device) ?? null;
      const verdict = deviceMac === null ? 'missing' : deviceMac === lease.mac ? 'ok' : 'stale-mac';
      const row: SelfRow = { ...selfOf(lease), deviceMac, verdict };
      this.#put(key, { kind: 'self', row }, delta);
      return;
    }
    const arpMac = this.#arp.get(arpKey(lease.device, lease.vtepIp))?.lladdr ?? null;
    const remotes = this.#fdb.get(macKey) ?? [];
    const fdbDst =
      (remotes.find((entry) => entry.destination === lease.publicIp) ?? remotes[0])?.destination ??
      null;
    let verdict: PeerVerdict;
    if (others.length > 0) verdict = 'duplicate-mac';
    else if (arpMac !== null && arpMac !== lease.mac) verdict = 'stale-mac';
    else if (arpMac === null && remotes.length === 0 && this.#directRouting) verdict = 'direct';
    else if (arpMac === null || fdbDst === null) verdict = 'missing';
    // Any remote of the MAC at the public IP reaches the peer (one appended beside it only
    // doubles the frames), so only a MAC without it is stale.
    else if (fdbDst !== lease.publicIp) verdict = 'stale-underlay';
    else verdict = 'ok';
    const row: PeerRow = {
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
    };
    this.#put(key, { kind: 'peer', row }, delta);
  }

  /** The ARP/NDP entry of device|address: an orphan when no peer's lease names the address. */
  #judgeArp(key: string, delta: MeshDelta): void {
    const entry = this.#arp.get(key);
    if (entry === undefined || entry.lladdr === null) return;
    const orphan: OrphanEntry = {
      kind: 'arp',
      device: key.slice(0, key.indexOf('|')),
      destination: entry.destination,
      lladdr: entry.lladdr,
    };
    this.#put(
      `orphan|${orphanKey(orphan)}`,
      this.#arpClaims.has(key) ? undefined : { kind: 'orphan', entry: orphan },
      delta,
    );
  }

  /** The FDB remotes of device|MAC: orphans when no Node publishes the MAC. */
  #judgeFdb(key: string, delta: MeshDelta): void {
    const published = this.#publishers.has(key);
    for (const entry of this.#fdb.get(key) ?? []) {
      const orphan: OrphanEntry = {
        kind: 'fdb',
        device: key.slice(0, key.indexOf('|')),
        destination: entry.destination,
        lladdr: entry.lladdr ?? '',
      };
      this.#put(
        `orphan|${orphanKey(orphan)}`,
        published ? undefined : { kind: 'orphan', entry: orphan },
        delta,
      );
    }
  }
}

function selfOf(lease: PeerLease): Pick<SelfRow, 'node' | 'family' | 'device' | 'publishedMac'> {
  return { node: lease.node, family: lease.family, device: lease.device, publishedMac: lease.mac };
}

/** The key a lease's row is tracked by: node|family, with `self|` before this node's own. */
function rowKey(lease: PeerLease, self: string): string {
  return lease.node === self ? `self|${peerKey(lease)}` : peerKey(lease);
}

export function compareMesh(input: MeshInput): MeshTable {
  const comparison = new MeshComparison(input.self, {
    directRouting: input.directRouting === true,
  });
  comparison.load(input);
  return comparison.table();
}

/** One key per peer row and family (node|family): what verdicts are tracked by. */
export function peerKey(row: { node: string; family: MeshFamily }): string {
  return `${row.node}|${row.family}`;
}

/** One key per orphan entry (device|kind|lladdr|destination). */
export function orphanKey(entry: OrphanEntry): string {
  return `${entry.device}|${entry.kind}|${entry.lladdr}|${entry.destination ?? ''}`;
}
