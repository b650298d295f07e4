/**
 * A FlannelGuard over the scripted kernel (scripted-monitor.ts): the rig the policy suites
 * share. The guard is the product's, opened from guardConfig with the scripted monitor, ports
 * and clock in place of the sockets; nothing is started, so a suite attaches its handlers first.
 */
import { FlannelGuard, type FlannelGuardOptions } from '../../lib/guard';
import { guardConfig } from '../../lib/guard/config';
import type { UdevView } from '../../lib/udev/view';
import {
  FakeClock,
  FakeKernel,
  FakePorts,
  ScriptedMonitor,
  permanentArp,
  permanentFdb,
} from './scripted-monitor';

export interface ScriptedGuard {
  kernel: FakeKernel;
  monitor: ScriptedMonitor;
  ports: FakePorts;
  clock: FakeClock;
  guard: FlannelGuard;
}

export interface ScriptedGuardSetup {
  /** Adds what the namespace holds besides `lo`, before the guard sees it. */
  prepare?: (kernel: FakeKernel) => void;
  /** The guard's random source (its fight control's jitter); 0.5 by default: no spread. */
  random?: () => number;
  /** The native layer writes the corrections itself (the armed fast path). */
  corrections?: boolean;
  udev?: UdevView;
}

/** A guard over a fake namespace holding `lo` and what `setup.prepare` adds. */
export function scriptedGuard(
  options: FlannelGuardOptions,
  setup: ScriptedGuardSetup = {},
): ScriptedGuard {
  const kernel = new FakeKernel();
  kernel.addLink({ name: 'lo', mac: '00:00:00:00:00:00', ifindex: 1, loopback: true });
  setup.prepare?.(kernel);
  const clock = new FakeClock();
  const monitor = new ScriptedMonitor(kernel, {
    clock,
    ...(setup.corrections === undefined ? {} : { corrections: setup.corrections }),
  });
  const ports = new FakePorts(kernel);
  const guard = new FlannelGuard(guardConfig(options), {
    monitor,
    ports,
    clock,
    random: setup.random ?? (() => 0.5),
    ...(setup.udev === undefined ? {} : { udev: setup.udev }),
  });
  return { kernel, monitor, ports, clock, guard };
}

/** A peer as flanneld programs it on this node: VTEP address, VtepMAC, underlay address. */
export interface ScriptedPeer {
  vtep: string;
  mac: string;
  /** Its permanent FDB entry's destination; none when omitted. */
  underlay?: string;
}

/** Each peer's permanent ARP entry on device `ifindex`, then their FDB entries. */
export function addPeerEntries(
  kernel: FakeKernel,
  ifindex: number,
  peers: readonly ScriptedPeer[],
): void {
  for (const peer of peers) kernel.replaceNeighbour(permanentArp(ifindex, peer.vtep, peer.mac));
  for (const peer of peers) {
    if (peer.underlay !== undefined) {
      kernel.replaceNeighbour(permanentFdb(ifindex, peer.mac, peer.underlay));
    }
  }
}

/** flannel.1 at `mac` with each peer's permanent ARP (and FDB) entry; returns its ifindex. */
export function addFlannelDevice(
  kernel: FakeKernel,
  mac: string,
  peers: readonly ScriptedPeer[],
  offload?: { feature: string; active: boolean },
): number {
  const { ifindex } = kernel.addLink({ name: 'flannel.1', mac });
  addPeerEntries(kernel, ifindex, peers);
  if (offload) kernel.setFeature(ifindex, offload.feature, offload.active);
  return ifindex;
}
