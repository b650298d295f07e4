/**
 * What the doctor's checks share: the result of a check, the input the doctor takes, what it
 * gathered from the namespace and the files, and the commands its fix sentences quote.
 */
import type { PeerExpectation } from '../ensure/ensure';
import type { DesiredMacSource } from '../guard/sources';
import type { ChecksumErrorCounters, FeatureState, LinkInfo, NeighbourInfo } from '../core/types';
import { FsRoot } from '../core/fsroot';
import { type WriterAttribution } from '../udev/writer';
import { type DeviceFacts, type HostFacts, type LinkFile } from '../udev/link-files';
import { type NmConfig } from './networkmanager';
import { type SystemProbe } from './system';
import { type UdevRule } from './udev-rules';

export type Verdict = 'ok' | 'warn' | 'fail';

export const CHECK_IDS = [
  'link-files',
  'udev-rules',
  'networkmanager',
  'vtep',
  'vtep-mac',
  'addr-assign-type',
  'neighbours',
  'offload',
  'offload-probe',
  'underlay-driver',
  'random-fully',
  'vxlan-port',
  'checksum-errors',
  'cluster-vtep-macs',
] as const;
export type CheckId = (typeof CHECK_IDS)[number];

export interface CheckResult {
  id: CheckId;
  /** The device the check is about (null for node-wide checks). */
  device: string | null;
  verdict: Verdict;
  /** One line: what was found. */
  summary: string;
  /** What the verdict is based on. */
  evidence: string[];
  /** One sentence; null when the verdict is ok. */
  fix: string | null;
}

export interface DoctorInput {
  /** Configuration files are read under this directory (default '/'). */
  root?: string;
  /** Network namespace by `ip netns` name or path; the process's own when omitted. */
  netns?: string;
  /** Interface globs (default flannel.*, flannel-v6.*). */
  interfaces?: readonly string[];
  /** The published MAC per device (like --mac); wins over `source`. */
  mac?: Readonly<Record<string, string>>;
  /** Where the published MAC comes from otherwise (e.g. the Kubernetes node annotation). */
  source?: DesiredMacSource;
  /** The other nodes' published VTEPs, or a function that fetches them. */
  peers?: readonly PeerExpectation[] | (() => Promise<readonly PeerExpectation[]>);
  /** Offload policy (default tx-checksum-ip-generic off); 'none' checks nothing. */
  offload?: Readonly<Record<string, boolean>> | 'none';
  /** The kernel release to judge (default: the running kernel's). */
  kernelRelease?: string;
  /** Replaces single system probes (tests, or callers that know better). */
  probe?: Partial<SystemProbe>;
  /** What every Node publishes (`doctor --cluster`): checked for VtepMACs published twice. */
  cluster?: ClusterPublished;
  /** Send nothing: the offload-probe check (ICMP, UDP and TCP to up to 8 peers) is not run. */
  passive?: boolean;
}

/** The VtepMACs the cluster's Nodes publish, as flanneld reads them. */
export interface ClusterPublished {
  /** Nodes read. */
  nodes: number;
  /** Every Node's VtepMAC per device. */
  macs: readonly { node: string; device: string; mac: string }[];
}

/**
 * The commands a fix sentence quotes, aimed at what the doctor examined: a line pasted from a
 * doctor run with --netns (or --root) must never act on the host's namespace (or /etc) instead.
 */
export interface FixCommands {
  /** `ip ARGS` in the namespace. */
  ip(args: string): string;
  /** `ethtool ARGS` in the namespace. */
  ethtool(args: string): string;
  /** `flannel-guard doctor|watch ARGS` for the namespace. */
  guard(command: 'doctor' | 'watch', args?: string): string;
}

/** A word as a shell reads it back: as is when plain, else single-quoted. */
function shellWord(word: string): string {
  return /^[\w./:@%+=-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

export function fixCommands(netns: string | undefined, root = '/'): FixCommands {
  const rootFlag = root === '/' ? '' : ` --root ${shellWord(root)}`;
  const guard = (command: string, netnsFlag: string, args?: string): string =>
    `flannel-guard ${command}${command === 'doctor' ? rootFlag : ''}${netnsFlag}${args === undefined ? '' : ` ${args}`}`;
  if (netns === undefined) {
    return {
      ip: (args) => `ip ${args}`,
      ethtool: (args) => `ethtool ${args}`,
      guard: (command, args) => guard(command, '', args),
    };
  }
  const ns = shellWord(netns);
  // `ip -n` and `ip netns exec` take a name; a path (/proc/PID/ns/net) needs nsenter.
  const inside = netns.includes('/') ? `nsenter --net=${ns}` : `ip netns exec ${ns}`;
  return {
    ip: (args) => (netns.includes('/') ? `${inside} ip ${args}` : `ip -n ${ns} ${args}`),
    ethtool: (args) => `${inside} ethtool ${args}`,
    guard: (command, args) => guard(command, ` --netns ${ns}`, args),
  };
}

/** A VXLAN device found in the namespace, with what the checks need. */
export interface DeviceState {
  link: LinkInfo;
  /** The commands its fix sentences quote (in its namespace). */
  fix: FixCommands;
  addrAssignType: number | null;
  publishedMac: string | null;
  publishedBy: string | null;
  peers: PeerExpectation[];
  neighbours: NeighbourInfo[];
  features: FeatureState[] | null;
  facts: DeviceFacts;
  /** Who wrote the device's MAC, when it is not the published one (null otherwise). */
  writer: WriterAttribution | null;
}

export interface Gathered {
  fs: FsRoot;
  /** The commands fix sentences quote (for the namespace and root examined). */
  fix: FixCommands;
  probe: SystemProbe;
  host: HostFacts;
  kernel: string;
  globs: string[];
  links: LinkInfo[];
  devices: DeviceState[];
  /** Devices the configuration checks are about (the found ones, or the names flannel uses). */
  subjects: DeviceFacts[];
  linkFiles: LinkFile[];
  rules: UdevRule[];
  nm: NmConfig;
  offload: Readonly<Record<string, boolean>>;
  peersGiven: boolean;
  cluster: ClusterPublished | null;
  /** --passive: no packet sent (the paths are not probed). */
  passive: boolean;
  /** The checksum-error counters when the doctor began (read again at the end), or why not. */
  checksumErrorsAtStart: { counters: ChecksumErrorCounters; at: number } | Error;
}
