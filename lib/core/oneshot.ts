/**
 * One-shot operations for library users: each opens a request socket in the
 * target namespace, runs on the libuv thread pool, and closes the socket.
 */
import { binding, type RawControl } from './binding';
import { AF_BRIDGE, AF_UNSPEC } from './constants';
import { toLinkInfo, toNeighbourInfo } from './records';
import type {
  ChecksumErrorCounters,
  DriverInfo,
  FeatureSetResult,
  FeatureState,
  LinkInfo,
  NeighbourInfo,
} from './types';
import {
  macBytes,
  netnsTarget,
  parseMac,
  validateInterfaceName,
  type NetnsTarget,
} from './validate';

export interface NetnsOptions {
  /** Network namespace by `ip netns` name or absolute path; the process's own when omitted. */
  netns?: string;
}

/** Opens a request socket in `netns` (without moving any thread of this process). */
/** The one way to open a request socket, in a namespace resolved already (netnsTarget). */
export function openControl(netns: NetnsTarget | null): RawControl {
  if (netns === null) return new binding.Control();
  return new binding.Control({ netns: netns.path, netnsLabel: netns.label });
}

async function withControl<T>(
  options: NetnsOptions,
  operation: (control: RawControl) => Promise<T>,
): Promise<T> {
  const control = openControl(netnsTarget(options.netns));
  try {
    return await operation(control);
  } finally {
    control.close();
  }
}

function addrAssignTypeOf(control: RawControl, link: LinkInfo): number | null {
  return link.mac === null ? null : control.readAddrAssignType(link.name, link.ifindex, link.mac);
}

/** Every link in the namespace, with addr_assign_type where sysfs shows it. */
export async function getLinks(options: NetnsOptions = {}): Promise<LinkInfo[]> {
  return withControl(options, async (control) => {
    const links = (await control.dumpLinks(true)).map((raw) => toLinkInfo(raw));
    for (const link of links) link.addrAssignType = addrAssignTypeOf(control, link);
    return links;
  });
}

/** One link by name; rejects with ENODEV when there is none. */
export async function getLink(name: string, options: NetnsOptions = {}): Promise<LinkInfo> {
  validateInterfaceName(name);
  return withControl(options, async (control) => {
    const link = toLinkInfo(await control.getLinkByName(name, true));
    link.addrAssignType = addrAssignTypeOf(control, link);
    return link;
  });
}

/**
 * The namespace's receive checksum-error counters (/proc/net/snmp, snmp6): packets that arrived
 * with bad checksums and were dropped, since the namespace began.
 */
export async function getChecksumErrors(
  options: NetnsOptions = {},
): Promise<ChecksumErrorCounters> {
  return withControl(options, (control) => Promise.resolve(control.readChecksumErrors()));
}

export interface NeighbourQuery extends NetnsOptions {
  /** 'ip' for ARP and NDP entries, 'bridge' for FDB entries, 'all' (default) for both. */
  family?: 'ip' | 'bridge' | 'all';
}

export async function getNeighbours(options: NeighbourQuery = {}): Promise<NeighbourInfo[]> {
  const family = options.family ?? 'all';
  return withControl(options, async (control) => {
    const raw = [
      ...(family === 'bridge' ? [] : await control.dumpNeighbours(AF_UNSPEC, true)),
      ...(family === 'ip' ? [] : await control.dumpNeighbours(AF_BRIDGE, true)),
    ];
    return raw.map(toNeighbourInfo);
  });
}

export interface SetLinkMacResult {
  interface: string;
  ifindex: number;
  previous: string | null;
  mac: string;
  /** False when the device already had this MAC and nothing was written. */
  changed: boolean;
}

/**
 * Sets a link's MAC (RTM_NEWLINK carrying only IFLA_ADDRESS). Writes nothing
 * when the MAC is already the requested one. Note that the kernel flushes the
 * device's neighbour entries, permanent ones included, on every MAC change.
 */
export async function setLinkMac(
  name: string,
  mac: string,
  options: NetnsOptions = {},
): Promise<SetLinkMacResult> {
  validateInterfaceName(name);
  const wanted = parseMac(mac);
  return withControl(options, async (control) => {
    const link = await control.getLinkByName(name, true);
    const result = { interface: name, ifindex: link.ifindex, previous: link.mac, mac: wanted };
    if (link.mac === wanted) return { ...result, changed: false };
    await control.setLinkAddress(link.ifindex, macBytes(wanted), name, true);
    return { ...result, changed: true };
  });
}

export interface FeatureTable {
  interface: string;
  /** True when named features are unavailable and only 'tx-checksumming' could be read. */
  legacy: boolean;
  features: FeatureState[];
}

/** The device's offload features by name, as `ethtool -k` lists them. */
export async function getFeatures(name: string, options: NetnsOptions = {}): Promise<FeatureTable> {
  validateInterfaceName(name);
  return withControl(options, async (control) => {
    const table = await control.getFeatures(name, true);
    return { interface: name, legacy: table.legacy, features: table.features };
  });
}

function validateFeatureRequest(wanted: Record<string, boolean>): void {
  const names = Object.keys(wanted);
  if (names.length === 0) throw new RangeError('setFeatures: no features requested');
  for (const feature of names) {
    if (typeof wanted[feature] !== 'boolean') {
      throw new TypeError(`setFeatures: the value for ${feature} must be a boolean`);
    }
  }
}

/**
 * Sets named features (ethtool -K) and reports, after re-reading, what is now
 * active and which other features changed as a side effect. Sends nothing
 * when every requested feature is already in the requested state.
 */
export async function setFeatures(
  name: string,
  wanted: Record<string, boolean>,
  options: NetnsOptions = {},
): Promise<FeatureSetResult> {
  validateInterfaceName(name);
  validateFeatureRequest(wanted);
  return withControl(options, async (control) =>
    toFeatureSetResult(name, await control.setFeatures(name, wanted, true)),
  );
}

export function toFeatureSetResult(
  name: string,
  outcome: Awaited<ReturnType<RawControl['setFeatures']>>,
): FeatureSetResult {
  return {
    interface: name,
    written: outcome.written,
    legacy: outcome.legacy,
    requested: Object.fromEntries(outcome.requested.map((r) => [r.name, r.enable])),
    active: Object.fromEntries(outcome.active.map((r) => [r.name, r.enable])),
    sideEffects: outcome.sideEffects,
    notApplied: outcome.notApplied,
  };
}

/** Driver name, version, firmware and bus (ethtool -i). */
export async function getDriverInfo(name: string, options: NetnsOptions = {}): Promise<DriverInfo> {
  validateInterfaceName(name);
  return withControl(options, (control) => control.getDriverInfo(name, true));
}
