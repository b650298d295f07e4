/**
 * ensureVtep's options, checked once (lib/core/options.ts) into the plan it carries out: the
 * device, the MAC, the peers (each checked, none twice), the offload policy and the rest.
 */
import { booleanOption, fixedOffloadPolicy, rejectUnknownOptions } from '../core/options';
import { invalidArgument } from '../core/errors';
import { integerInRange, parseMac, validateInterfaceName } from '../core/validate';
import { validatePeer, MAX_PEERS, type PeerExpectation } from './peers';

export interface EnsureVtepOptions {
  /** Network namespace by `ip netns` name or absolute path; the process's own when omitted. */
  netns?: string;
  /** The VXLAN device (default flannel.1). */
  device?: string;
  /** The MAC this node publishes for the device; left alone when omitted. */
  mac?: string;
  /** The other nodes' published VTEPs: each gets a permanent ARP/NDP and FDB entry. */
  peers?: readonly PeerExpectation[];
  /** Offload features to enforce (default tx-checksum-ip-generic off); 'none' leaves them alone. */
  offload?: Readonly<Record<string, boolean>> | 'none';
  /**
   * When addr_assign_type is 1 (random: udev's MACAddressPolicy may rewrite the MAC on a
   * re-trigger), write the MAC it already has, which makes it 3 (set by userspace: udev leaves
   * it alone). Needs the device in this process's namespace (sysfs). Default false.
   */
  pin?: boolean;
  /**
   * addr_assign_type as the caller read it, for a device in another namespace (whose sysfs
   * this process does not see); read from sysfs when omitted.
   */
  addrAssignType?: number;
  /** Report what would be done, write nothing. */
  dryRun?: boolean;
  /**
   * Stops the writes once aborted (a CNI plugin's time budget): the result
   * then has `interrupted` set and lists the actions made before.
   */
  signal?: AbortSignal;
}

export interface Plan {
  device: string;
  mac: string | undefined;
  peers: PeerExpectation[];
  offload: Readonly<Record<string, boolean>>;
  pin: boolean;
  addrAssignType: number | undefined;
  dryRun: boolean;
  signal: AbortSignal | undefined;
}

/** addr_assign_type's values: permanent, random, stolen, set by userspace. */
const ADDR_ASSIGN_TYPES = { min: 0, max: 3, unit: '' };

/** Every name EnsureVtepOptions declares: anything else is a caller's mistake (EINVAL). */
const OPTION_NAMES = [
  'netns',
  'device',
  'mac',
  'peers',
  'offload',
  'pin',
  'addrAssignType',
  'dryRun',
  'signal',
] as const satisfies readonly (keyof EnsureVtepOptions)[];

export function plan(options: EnsureVtepOptions): Plan {
  rejectUnknownOptions(options, OPTION_NAMES, 'ensureVtep');
  const device = validateInterfaceName(options.device ?? 'flannel.1', 'device');
  if ((options.peers?.length ?? 0) > MAX_PEERS) {
    throw invalidArgument(`${options.peers?.length} peers: at most ${MAX_PEERS}`);
  }
  const peers = (options.peers ?? []).map(validatePeer);
  const seen = new Set<string>();
  for (const peer of peers) {
    if (seen.has(peer.vtepIp)) throw invalidArgument(`peer ${peer.vtepIp} is listed twice`);
    seen.add(peer.vtepIp);
  }
  return {
    device,
    mac: options.mac === undefined ? undefined : parseMac(options.mac, `MAC of ${device}`),
    peers,
    offload: fixedOffloadPolicy(options.offload),
    pin: booleanOption(options.pin, 'pin', false),
    addrAssignType:
      options.addrAssignType === undefined
        ? undefined
        : integerInRange(options.addrAssignType, ADDR_ASSIGN_TYPES, 'addrAssignType'),
    dryRun: booleanOption(options.dryRun, 'dryRun', false),
    signal: options.signal,
  };
}
