/**
 * ensureVtep: one call for CNI wrappers and scripts. Reads the VXLAN device,
 * its neighbour/FDB entries and offload features once, and (unless dryRun)
 * brings it to the desired state: the published MAC (putting back the
 * permanent neighbour entries the MAC change flushes), a permanent ARP/NDP
 * and FDB entry for every published peer, and the offload policy.
 *
 * Every request runs on the libuv thread pool on one request socket that is
 * closed before the promise settles: nothing is left that keeps the process
 * alive. When nothing is wrong it is a handful of netlink round trips (well
 * under a millisecond each).
 */

import { monotonicMs } from '../core/clock';
import type { RawControl, RawNeighbour } from '../core/binding';
import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  AF_UNSPEC,
  NTF_SELF,
  NET_ADDR_RANDOM,
  NUD_PERMANENT,
} from '../core/constants';
import { systemError, type SystemError } from '../core/errors';
import { openControl, toFeatureSetResult } from '../core/oneshot';
import { toLinkInfo, toNeighbourInfo } from '../core/records';
import type { LinkInfo, NeighbourInfo } from '../core/types';
import { ipVersion, macBytes, netnsTarget } from '../core/validate';
import { plan, type EnsureVtepOptions, type Plan } from './plan';

export { MAX_PEERS, parsePeerSpec, unusablePeerAddress, validatePeer } from './peers';
export type { PeerExpectation } from './peers';
export type { EnsureVtepOptions } from './plan';

export type DriftKind = 'mac' | 'addr-assign-type' | 'neighbour' | 'fdb' | 'offload';

export interface Drift {
  kind: DriftKind;
  /** The neighbour's destination, or the feature's name, for those kinds. */
  subject?: string;
  expected: string;
  observed: string;
  /** False when it cannot be changed (a [fixed] feature). */
  fixable: boolean;
}

export type EnsureAction =
  | {
      action: 'set-mac';
      device: string;
      from: string | null;
      to: string;
      /** 'pin' when the MAC was already right and only addr_assign_type changed. */
      reason: 'drift' | 'pin';
    }
  | {
      action: 'replace-neighbour';
      device: string;
      family: 'inet' | 'inet6' | 'bridge';
      destination: string;
      lladdr: string;
      reason: 'missing' | 'wrong-mac' | 'not-permanent' | 'flushed-by-mac-change';
    }
  | {
      action: 'set-offload';
      device: string;
      requested: Record<string, boolean>;
      active: Record<string, boolean>;
      sideEffects: { name: string; before: boolean; after: boolean }[];
      notApplied: string[];
    };

/** A write the repair calls for, before it is made (an offload's outcome is not known yet). */
export type EnsurePlannedAction =
  | Exclude<EnsureAction, { action: 'set-offload' }>
  | { action: 'set-offload'; device: string; requested: Record<string, boolean> };

export interface EnsureVtepResult {
  device: string;
  ifindex: number;
  netns: string | null;
  /** The state as read before any write. */
  found: {
    mac: string | null;
    /** null when unknown (device in another namespace). */
    addrAssignType: number | null;
    up: boolean;
    vxlanPort: number | null;
    offloads: Record<string, boolean | null>;
    permanentNeighbours: number;
    fdbEntries: number;
  };
  /** Everything that differed from the desired state. */
  drift: Drift[];
  /** What was written (empty on a dry run or when nothing was wrong). */
  actions: EnsureAction[];
  /** The writes the repair calls for, in order: what a dry run would write. */
  planned: EnsurePlannedAction[];
  /** True when the device is in the desired state now (for a dry run: already was). */
  ok: boolean;
  dryRun: boolean;
  /** The signal stopped the writes part way: `actions` is what was done. */
  interrupted: boolean;
  durationMs: number;
}

function notVxlan(link: LinkInfo): SystemError {
  return systemError(
    'EINVAL',
    `${link.name} is not a VXLAN device (kind ${JSON.stringify(link.kind)})`,
    {
      interface: link.name,
      ifindex: link.ifindex,
    },
  );
}

function ipFamily(address: string): 'inet' | 'inet6' {
  return ipVersion(address) === 6 ? 'inet6' : 'inet';
}

function neighbourEntry(
  ifindex: number,
  family: 'inet' | 'inet6' | 'bridge',
  destination: string,
  lladdr: string,
): Parameters<RawControl['replaceNeighbour']>[0] {
  return {
    family: family === 'bridge' ? AF_BRIDGE : family === 'inet6' ? AF_INET6 : AF_INET,
    ifindex,
    destination,
    lladdr: macBytes(lladdr),
    state: NUD_PERMANENT,
    flags: family === 'bridge' ? NTF_SELF : 0,
  };
}

/**
 * Checks and (unless `dryRun`) fixes the VXLAN device's MAC, its neighbour/FDB entries to the
 * published peers and its offload policy. Rejects with ENODEV when the device does not exist,
 * EINVAL for bad options or a device that is not VXLAN, EPERM without CAP_NET_ADMIN.
 */
export async function ensureVtep(options: EnsureVtepOptions = {}): Promise<EnsureVtepResult> {
  const started = monotonicMs();
  const wanted = plan(options);
  const control = openControl(netnsTarget(options.netns));
  try {
    return await ensureWith(control, wanted, options.netns ?? null, started);
  } finally {
    control.close();
  }
}

/** What ensureVtep reads of the device, once each: the link, its entries and its features. */
interface VtepState {
  link: LinkInfo;
  addrAssignType: number | null;
  neighbours: NeighbourInfo[];
  fdb: NeighbourInfo[];
  features: Map<string, { active: boolean; fixed: boolean }>;
  /** Its permanent ARP/NDP entries, by destination: what a MAC change flushes. */
  permanentIp: NeighbourInfo[];
}

type NeighbourWrite = EnsureAction & { action: 'replace-neighbour' };

/** What differs from the plan, and the writes that fix it. */
interface Repair {
  drift: Drift[];
  /** The MAC to set: the desired one (drift), or the current one again (pin). */
  mac: { to: string; reason: 'drift' | 'pin' } | null;
  /** Neighbour writes, by (family, destination[, lladdr]). */
  writes: Map<string, NeighbourWrite>;
  offloads: Record<string, boolean | null>;
  offloadWanted: Record<string, boolean>;
}

async function readVtep(control: RawControl, wanted: Plan): Promise<VtepState> {
  const { device } = wanted;
  const link = toLinkInfo(await control.getLinkByName(device, true));
  if (link.kind !== 'vxlan') throw notVxlan(link);
  const addrAssignType =
    wanted.addrAssignType ??
    (link.mac === null ? null : control.readAddrAssignType(link.name, link.ifindex, link.mac));
  const needFdb = wanted.peers.some((peer) => peer.underlayIp !== undefined);
  const own = (raw: RawNeighbour[]): NeighbourInfo[] =>
    raw.filter((n) => n.ifindex === link.ifindex).map(toNeighbourInfo);
  const neighbours = own(await control.dumpNeighbours(AF_UNSPEC, true));
  const fdb = needFdb ? own(await control.dumpNeighbours(AF_BRIDGE, true)) : [];
  const features =
    Object.keys(wanted.offload).length === 0
      ? new Map<string, { active: boolean; fixed: boolean }>()
      : new Map((await control.getFeatures(device, true)).features.map((f) => [f.name, f]));
  const permanentIp = neighbours
    .filter(
      (n) => n.family !== 'bridge' && n.permanent && n.destination !== null && n.lladdr !== null,
    )
    .sort((a, b) => ((a.destination ?? '') < (b.destination ?? '') ? -1 : 1));
  return { link, addrAssignType, neighbours, fdb, features, permanentIp };
}

/** The repair the plan calls for, from what was read (no system call). */
function planRepair(wanted: Plan, state: VtepState): Repair {
  const repair: Repair = {
    drift: [],
    mac: null,
    writes: new Map(),
    offloads: {},
    offloadWanted: {},
  };
  planMac(wanted, state, repair);
  planPeers(wanted, state, repair);
  planOffloads(wanted, state, repair);
  return repair;
}

/**
 * The MAC, or a pin of the current one (addr_assign_type 1 -> 3); either way a MAC write,
 * which flushes every permanent ARP/NDP entry of the device: those are all put back.
 */
function planMac(wanted: Plan, state: VtepState, repair: Repair): void {
  const { link } = state;
  if (wanted.mac !== undefined && link.mac !== wanted.mac) {
    repair.drift.push({
      kind: 'mac',
      expected: wanted.mac,
      observed: link.mac ?? 'none',
      fixable: true,
    });
    repair.mac = { to: wanted.mac, reason: 'drift' };
  } else if (wanted.pin && state.addrAssignType === NET_ADDR_RANDOM && link.mac !== null) {
    repair.drift.push({ kind: 'addr-assign-type', expected: '3', observed: '1', fixable: true });
    repair.mac = { to: link.mac, reason: 'pin' };
  }
  if (repair.mac === null) return;
  for (const entry of state.permanentIp) {
    repair.writes.set(`${entry.family}|${entry.destination ?? ''}`, {
      action: 'replace-neighbour',
      device: wanted.device,
      family: entry.family as 'inet' | 'inet6',
      destination: entry.destination ?? '',
      lladdr: entry.lladdr ?? '',
      reason: 'flushed-by-mac-change',
    });
  }
}

/** Each peer's permanent ARP/NDP entry, and its FDB entry when it has an underlay address. */
function planPeers(wanted: Plan, state: VtepState, repair: Repair): void {
  const { device } = wanted;
  const { drift, writes } = repair;
  // Indexed once: with thousands of peers a search per peer would be quadratic.
  const neighbourAt = new Map<string, NeighbourInfo>();
  for (const n of state.neighbours) {
    const key = `${n.family}|${n.destination ?? ''}`;
    if (!neighbourAt.has(key)) neighbourAt.set(key, n);
  }
  const fdbAt = new Map<string, NeighbourInfo>();
  const fdbTo = new Map<string, NeighbourInfo[]>();
  for (const n of state.fdb) {
    const key = `${n.lladdr ?? ''}|${n.destination ?? ''}`;
    if (!fdbAt.has(key)) fdbAt.set(key, n);
    const list = fdbTo.get(n.destination ?? '') ?? [];
    list.push(n);
    fdbTo.set(n.destination ?? '', list);
  }
  for (const peer of wanted.peers) {
    const family = ipFamily(peer.vtepIp);
    const key = `${family}|${peer.vtepIp}`;
    const entry = neighbourAt.get(key);
    const reason =
      entry === undefined || entry.lladdr === null
        ? 'missing'
        : entry.lladdr !== peer.mac
          ? 'wrong-mac'
          : !entry.permanent
            ? 'not-permanent'
            : null;
    if (reason !== null) {
      drift.push({
        kind: 'neighbour',
        subject: peer.vtepIp,
        expected: `${peer.mac} permanent`,
        observed: entry ? `${entry.lladdr ?? 'none'} ${entry.states.join(',') || 'none'}` : 'none',
        fixable: true,
      });
    }
    if (reason !== null || writes.has(key)) {
      writes.set(key, {
        action: 'replace-neighbour',
        device,
        family,
        destination: peer.vtepIp,
        lladdr: peer.mac,
        reason: reason ?? 'flushed-by-mac-change',
      });
    }
    if (peer.underlayIp === undefined) continue;
    const forward = fdbAt.get(`${peer.mac}|${peer.underlayIp}`);
    if (forward !== undefined && forward.permanent) continue;
    drift.push({
      kind: 'fdb',
      subject: peer.underlayIp,
      expected: `${peer.mac} dst ${peer.underlayIp} permanent`,
      observed:
        forward === undefined
          ? (fdbTo.get(peer.underlayIp) ?? [])
              .map((n) => `${n.lladdr ?? 'none'} dst ${peer.underlayIp ?? ''}`)
              .join('; ') || 'none'
          : `${peer.mac} dst ${peer.underlayIp} ${forward.states.join(',') || 'not permanent'}`,
      fixable: true,
    });
    writes.set(`bridge|${peer.mac}|${peer.underlayIp}`, {
      action: 'replace-neighbour',
      device,
      family: 'bridge',
      destination: peer.underlayIp,
      lladdr: peer.mac,
      reason: forward === undefined ? 'missing' : 'not-permanent',
    });
  }
}

/** The policy's features; a [fixed] one that differs is drift nothing can fix. */
function planOffloads(wanted: Plan, state: VtepState, repair: Repair): void {
  for (const [name, on] of Object.entries(wanted.offload)) {
    const feature = state.features.get(name);
    repair.offloads[name] = feature?.active ?? null;
    if (feature === undefined || feature.active === on) continue;
    repair.drift.push({
      kind: 'offload',
      subject: name,
      expected: on ? 'on' : 'off',
      observed: feature.active ? 'on' : 'off',
      fixable: !feature.fixed,
    });
    if (!feature.fixed) repair.offloadWanted[name] = on;
  }
}

/** Makes the repair's writes, in order (MAC, entries, offloads), until the signal stops them. */
/** The writes applyRepair makes for this repair, in its order. */
function plannedActions(device: string, mac: string | null, repair: Repair): EnsurePlannedAction[] {
  const planned: EnsurePlannedAction[] = [];
  if (repair.mac !== null) {
    planned.push({
      action: 'set-mac',
      device,
      from: mac,
      to: repair.mac.to,
      reason: repair.mac.reason,
    });
  }
  planned.push(...repair.writes.values());
  if (Object.keys(repair.offloadWanted).length > 0) {
    planned.push({ action: 'set-offload', device, requested: { ...repair.offloadWanted } });
  }
  return planned;
}

async function applyRepair(
  control: RawControl,
  state: VtepState,
  repair: Repair,
  result: EnsureVtepResult,
  stopped: () => boolean,
): Promise<void> {
  const { link } = state;
  const device = result.device;
  if (repair.mac !== null) {
    await control.setLinkAddress(link.ifindex, macBytes(repair.mac.to), device, true);
    result.actions.push({
      action: 'set-mac',
      device,
      from: link.mac,
      to: repair.mac.to,
      reason: repair.mac.reason,
    });
  }
  for (const write of repair.writes.values()) {
    if (stopped()) break;
    await control.replaceNeighbour(
      neighbourEntry(link.ifindex, write.family, write.destination, write.lladdr),
      device,
      true,
    );
    result.actions.push(write);
  }
  if (Object.keys(repair.offloadWanted).length > 0 && !stopped()) {
    const outcome = toFeatureSetResult(
      device,
      await control.setFeatures(device, repair.offloadWanted, true),
    );
    result.actions.push({
      action: 'set-offload',
      device,
      requested: outcome.requested,
      active: outcome.active,
      sideEffects: outcome.sideEffects,
      notApplied: outcome.notApplied,
    });
  }
}

async function ensureWith(
  control: RawControl,
  wanted: Plan,
  netns: string | null,
  started: number,
): Promise<EnsureVtepResult> {
  const state = await readVtep(control, wanted);
  const { link } = state;
  const repair = planRepair(wanted, state);
  const { drift } = repair;
  const result: EnsureVtepResult = {
    device: wanted.device,
    ifindex: link.ifindex,
    netns,
    found: {
      mac: link.mac,
      addrAssignType: state.addrAssignType,
      up: link.up,
      vxlanPort: link.vxlan?.port ?? null,
      offloads: repair.offloads,
      permanentNeighbours: state.permanentIp.length,
      fdbEntries: state.fdb.length,
    },
    drift,
    actions: [],
    planned: plannedActions(wanted.device, link.mac, repair),
    ok: drift.length === 0,
    dryRun: wanted.dryRun,
    interrupted: false,
    durationMs: 0,
  };
  const stopped = (): boolean => {
    if (wanted.signal?.aborted !== true) return false;
    result.interrupted = true;
    return true;
  };
  if (wanted.dryRun || drift.length === 0) {
    result.durationMs = monotonicMs() - started;
    return result;
  }
  if (stopped()) {
    result.ok = false;
    result.durationMs = monotonicMs() - started;
    return result;
  }
  await applyRepair(control, state, repair, result, stopped);
  // Verify what matters most by re-reading: the device kept its MAC.
  const after = toLinkInfo(await control.getLink(link.ifindex, true));
  const expectedMac = wanted.mac ?? link.mac;
  result.ok =
    !result.interrupted &&
    after.mac === expectedMac &&
    drift.every((d) => d.fixable) &&
    result.actions.every((a) => a.action !== 'set-offload' || a.notApplied.length === 0);
  result.durationMs = monotonicMs() - started;
  return result;
}
