/** Public data shapes of links, neighbours and features. */
import type { OperState } from './constants';

export interface VxlanInfo {
  vni: number | null;
  /** UDP destination port (8472 for flannel). */
  port: number | null;
  /** Local underlay address, when set. */
  local: string | null;
  /** Index of the underlay device (IFLA_VXLAN_LINK), when set. */
  underlayIfindex: number | null;
  learning: boolean | null;
}

export interface LinkInfo {
  ifindex: number;
  name: string;
  /** Canonical lower-case MAC, or null with `macError` when the device has no 6-byte address. */
  mac: string | null;
  macError?: string;
  flags: number;
  up: boolean;
  loopback: boolean;
  operstate: OperState;
  mtu: number | null;
  /** rtnl link kind: 'vxlan', 'veth', 'bridge', ... ('' for devices without one). */
  kind: string;
  vxlan: VxlanInfo | null;
  /** Index of the bridge/bond this device is enslaved to. */
  master: number | null;
  /** IFLA_LINK: the lower or peer device's index. */
  lowerIfindex: number | null;
  /** Set when `lowerIfindex` lives in another namespace: never resolve it here. */
  linkNetnsid: number | null;
  /**
   * /sys/class/net/NAME/addr_assign_type (0 permanent, 1 random, 2 stolen,
   * 3 set by userspace - which udev's MACAddressPolicy leaves alone); null for
   * devices in another namespace or when not read.
   */
  addrAssignType: number | null;
}

export type NeighbourFamily = 'inet' | 'inet6' | 'bridge';

export interface NeighbourInfo {
  family: NeighbourFamily;
  ifindex: number;
  /** IP address; for FDB entries the remote VTEP's underlay IP (null when none). */
  destination: string | null;
  lladdr: string | null;
  /** NUD_* bits. */
  state: number;
  /** Names of the NUD_* bits: 'permanent', 'reachable', 'noarp', ... */
  states: readonly string[];
  permanent: boolean;
  /** NTF_* bits. */
  flags: number;
  vni: number | null;
  master: number | null;
}

export interface FeatureState {
  name: string;
  /** The driver lets it be changed. */
  available: boolean;
  /** What was last asked for. */
  requested: boolean;
  /** In effect now. */
  active: boolean;
  /** Can never change ([fixed] in `ethtool -k`). */
  fixed: boolean;
}

export interface FeatureSetResult {
  interface: string;
  /** False when everything already matched and nothing was written. */
  written: boolean;
  /** True when named features are unavailable and ETHTOOL_STXCSUM was used. */
  legacy: boolean;
  requested: Record<string, boolean>;
  /** The requested features' state, re-read after the write. */
  active: Record<string, boolean>;
  /** Other features whose state changed as a consequence. */
  sideEffects: { name: string; before: boolean; after: boolean }[];
  /** Requested features whose active state differs from the request. */
  notApplied: string[];
}

export interface DriverInfo {
  driver: string;
  version: string;
  firmwareVersion: string;
  busInfo: string;
}

/**
 * A namespace's receive checksum-error counters (/proc/net/snmp, snmp6), since the namespace
 * began; null where the kernel keeps no such counter (before Linux 3.10; no IPv6).
 */
export interface ChecksumErrorCounters {
  /** `Udp: InCsumErrors`: IPv4 UDP, VXLAN's outer datagrams included. */
  udp: number | null;
  /** `Tcp: InCsumErrors`: TCP over IPv4 and IPv6. */
  tcp: number | null;
  /** `Udp6InCsumErrors`. */
  udp6: number | null;
}

/** What a sample of the packets arriving on a device found (native/checksum_sample.h). */
export interface ChecksumSample {
  /** Frames received on the device. */
  frames: number;
  /** Of which UDP or TCP whose checksum could be judged from the bytes. */
  checked: number;
  /** Of which with a bad checksum. */
  bad: number;
  /** The bad ones by source MAC (a sending node's VTEP MAC), at most 256 MACs. */
  senders: { mac: string; udp: number; tcp: number }[];
}
