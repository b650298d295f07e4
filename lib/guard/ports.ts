/**
 * The system calls the guard makes, as one small interface: the real one is
 * a request socket (synchronous, so a correction runs in the event's own
 * turn of the loop); unit tests substitute a recorder.
 */
import { binding, type RawControl } from '../core/binding';
import { isSystemError } from '../core/errors';
import {
  toLinkInfo,
  toNeighbourInfo,
  toRawNeighbourEntries,
  toRawNeighbourEntry,
} from '../core/records';
import type {
  ChecksumErrorCounters,
  ChecksumSample,
  FeatureSetResult,
  FeatureState,
  LinkInfo,
  NeighbourInfo,
} from '../core/types';
import { AF_BRIDGE } from '../core/constants';
import { toFeatureSetResult } from '../core/oneshot';
import { macBytes, type NetnsTarget } from '../core/validate';
import type { PathAnswer } from './events';

export interface GuardPorts {
  /** The device's current state, or null when no device has this index. */
  getLink(ifindex: number): LinkInfo | null;
  setLinkMac(ifindex: number, mac: string, name: string): void;
  /**
   * Adds or replaces neighbour entries exactly as given, in as few requests as
   * the socket allows; how many were written (throws the first failure).
   */
  replaceNeighbours(entries: readonly NeighbourInfo[], name: string): number;
  /** Deletes one neighbour or FDB entry (the mesh view's prune). */
  deleteNeighbour(entry: NeighbourInfo, name: string): void;
  getFeatures(name: string): FeatureState[];
  setFeatures(name: string, wanted: Record<string, boolean>): FeatureSetResult;
  /** /sys addr_assign_type when the device is in this process's namespace, else null. */
  addrAssignType(link: LinkInfo): number | null;
  /** The namespace's receive checksum-error counters (/proc/net/snmp). */
  checksumErrors(): ChecksumErrorCounters;
  /** Throws EPERM when writes are not allowed (no CAP_NET_ADMIN in the namespace). */
  probeWriteAccess(): void;
  /** One probe round through `device` to `addresses` (native/path_probe.h), off the loop. */
  probePaths(
    device: string,
    addresses: readonly string[],
    options: { timeoutMs: number; udpPort: number; tcpPort: number; echoId: number },
  ): Promise<PathAnswer[]>;
  /** A sample of what arrives on `device` (native/checksum_sample.h), off the loop. */
  sampleChecksums(
    device: string,
    options: { timeoutMs: number; maxFrames: number },
  ): Promise<ChecksumSample>;
  /** The device's FDB entries (each peer VTEP MAC's underlay address), off the loop. */
  forwardingEntries(ifindex: number): Promise<NeighbourInfo[]>;
  close(): void;
}

export function controlPorts(control: RawControl, netns: NetnsTarget | null): GuardPorts {
  const where = netns === null ? {} : { netns: netns.path, netnsLabel: netns.label };
  return {
    getLink(ifindex) {
      try {
        return toLinkInfo(control.getLink(ifindex));
      } catch (error) {
        if (isSystemError(error) && error.code === 'ENODEV') return null;
        throw error;
      }
    },
    setLinkMac(ifindex, mac, name) {
      control.setLinkAddress(ifindex, macBytes(mac), name);
    },
    replaceNeighbours(entries, name) {
      const raw = toRawNeighbourEntries(entries);
      return raw.family.length === 0 ? 0 : control.replaceNeighbours(raw, name);
    },
    deleteNeighbour(entry, name) {
      control.deleteNeighbour(toRawNeighbourEntry(entry), name);
    },
    getFeatures(name) {
      return control.getFeatures(name).features;
    },
    setFeatures(name, wanted) {
      return toFeatureSetResult(name, control.setFeatures(name, wanted));
    },
    addrAssignType(link) {
      return link.mac === null
        ? null
        : control.readAddrAssignType(link.name, link.ifindex, link.mac);
    },
    checksumErrors() {
      return control.readChecksumErrors();
    },
    probeWriteAccess() {
      control.probeWriteAccess();
    },
    probePaths(device, addresses, options) {
      return binding.probePaths({ ...where, ...options, device }, addresses);
    },
    sampleChecksums(device, options) {
      return binding.sampleChecksums({ ...where, ...options, device });
    },
    async forwardingEntries(ifindex) {
      const entries = await control.dumpNeighbours(AF_BRIDGE, true);
      return entries.map(toNeighbourInfo).filter((entry) => entry.ifindex === ifindex);
    },
    close() {
      control.close();
    },
  };
}
