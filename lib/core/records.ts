/** Raw addon records to the public shapes, and the keys that identify them. */
import type {
  RawLink,
  RawNeighbour,
  RawNeighbourColumns,
  RawNeighbourEntries,
  RawNeighbourEntry,
} from './binding';
import {
  AF_BRIDGE,
  AF_INET6,
  IFF_LOOPBACK,
  IFF_UP,
  NUD_PERMANENT,
  OPERSTATES,
  neighbourStateNames,
} from './constants';
import type { LinkInfo, NeighbourFamily, NeighbourInfo } from './types';
import { macBytes } from './validate';

export function toLinkInfo(raw: RawLink, addrAssignType: number | null = null): LinkInfo {
  const link: LinkInfo = {
    ifindex: raw.ifindex,
    name: raw.name,
    mac: raw.mac,
    flags: raw.flags,
    up: (raw.flags & IFF_UP) !== 0,
    loopback: (raw.flags & IFF_LOOPBACK) !== 0,
    operstate: OPERSTATES[raw.operstate ?? 0] ?? 'unknown',
    mtu: raw.mtu ?? null,
    kind: raw.kind,
    vxlan: raw.vxlan
      ? {
          vni: raw.vxlan.vni ?? null,
          port: raw.vxlan.port ?? null,
          local: raw.vxlan.local ?? null,
          underlayIfindex: raw.vxlan.underlayIfindex ?? null,
          learning: raw.vxlan.learning ?? null,
        }
      : null,
    master: raw.master ?? null,
    lowerIfindex: raw.lowerIfindex ?? null,
    linkNetnsid: raw.linkNetnsid ?? null,
    addrAssignType,
  };
  if (raw.macError !== undefined) link.macError = raw.macError;
  return link;
}

function familyName(family: number): NeighbourFamily {
  if (family === AF_BRIDGE) return 'bridge';
  return family === AF_INET6 ? 'inet6' : 'inet';
}

function neighbourInfo(
  family: number,
  ifindex: number,
  destination: string | null,
  lladdr: string | null,
  state: number,
  flags: number,
  vni: number | null,
  master: number | null,
): NeighbourInfo {
  return {
    family: familyName(family),
    ifindex,
    destination,
    lladdr,
    state,
    states: neighbourStateNames(state),
    permanent: (state & NUD_PERMANENT) !== 0,
    flags,
    vni,
    master,
  };
}

export function toNeighbourInfo(raw: RawNeighbour): NeighbourInfo {
  return neighbourInfo(
    raw.family,
    raw.ifindex,
    raw.destination,
    raw.lladdr,
    raw.state,
    raw.flags,
    raw.vni ?? null,
    raw.master ?? null,
  );
}

/** Entries handed over as columns (see RawNeighbourColumns), as records. */
export function neighbourInfos(columns: RawNeighbourColumns): NeighbourInfo[] {
  const entries: NeighbourInfo[] = [];
  const { family, ifindex, destination, lladdr, state, flags, vni, master } = columns;
  for (let i = 0; i < family.length; i += 1) {
    const entryVni = vni[i] ?? -1;
    const entryMaster = master[i] ?? -1;
    entries.push(
      neighbourInfo(
        family[i] ?? 0,
        ifindex[i] ?? 0,
        destination[i] ?? null,
        lladdr[i] ?? null,
        state[i] ?? 0,
        flags[i] ?? 0,
        entryVni < 0 ? null : entryVni,
        entryMaster < 0 ? null : entryMaster,
      ),
    );
  }
  return entries;
}

/**
 * Identity of a neighbour entry: ARP/NDP entries by (device, IP); FDB entries
 * by (device, MAC, remote IP, VNI), since one MAC may have several remotes.
 */
/** What a restore set keeps: a permanent ARP or NDP entry with a MAC (not FDB). */
export function isRestorable(entry: NeighbourInfo): boolean {
  return entry.permanent && entry.family !== 'bridge' && entry.lladdr !== null;
}

export function neighbourKey(entry: {
  family: NeighbourFamily;
  ifindex: number;
  destination: string | null;
  lladdr: string | null;
  vni: number | null;
}): string {
  if (entry.family === 'bridge') {
    return `bridge|${entry.ifindex}|${entry.lladdr ?? ''}|${entry.destination ?? ''}|${entry.vni ?? ''}`;
  }
  return `${entry.family}|${entry.ifindex}|${entry.destination ?? ''}`;
}

/** The entries that can be written back (those with an lladdr), as the addon takes them. */
export function toRawNeighbourEntries(entries: readonly NeighbourInfo[]): RawNeighbourEntries {
  const kept = entries.filter(
    (entry): entry is NeighbourInfo & { lladdr: string } => entry.lladdr !== null,
  );
  const columns: RawNeighbourEntries = {
    family: new Uint8Array(kept.length),
    ifindex: new Int32Array(kept.length),
    state: new Uint16Array(kept.length),
    flags: new Uint8Array(kept.length),
    destination: [],
    lladdr: [],
  };
  kept.forEach((entry, i) => {
    columns.family[i] = familyNumber(entry.family);
    columns.ifindex[i] = entry.ifindex;
    columns.state[i] = entry.state;
    columns.flags[i] = entry.flags;
    columns.destination.push(entry.destination);
    columns.lladdr.push(entry.lladdr);
  });
  return columns;
}

/** One entry as the addon takes it (an entry without an lladdr is named by all zeros). */
export function toRawNeighbourEntry(entry: NeighbourInfo): RawNeighbourEntry {
  return {
    family: familyNumber(entry.family),
    ifindex: entry.ifindex,
    destination: entry.destination,
    lladdr: macBytes(entry.lladdr ?? '00:00:00:00:00:00'),
    state: entry.state,
    flags: entry.flags,
  };
}

export function familyNumber(family: NeighbourFamily): number {
  return family === 'bridge' ? AF_BRIDGE : family === 'inet6' ? AF_INET6 : 2;
}
