/**
 * A pod is being added on the node (the CNI socket, cni/server.ts): is each VTEP as the guard
 * keeps it - its desired MAC, its restore set present, its offloads at the policy? Read from the
 * guard's live state (the native mirror and the device table: no netlink dump), and, for what is
 * off, the guard's own corrections started, as a source's new answer or a re-dump would start
 * them: fight control still decides, so a contested device is reported, not fought over, and the
 * guard stays the one writer of its devices.
 */
import { neighbourKey } from '../core/records';
import type { DeviceTable } from './devices';
import type { MacCorrection } from './mac';
import type { OffloadEnforcement } from './offload';
import type { GuardMonitor } from './seams';

export interface PodCheckDrift {
  kind: 'mac' | 'neighbour' | 'offload';
  /** The neighbour's destination, or the feature's name. */
  subject?: string;
  expected: string;
  observed: string;
  /** False when the guard leaves it (a contested MAC): waiting for it is pointless. */
  fixable: boolean;
}

export interface PodCheckDeps {
  devices: Pick<DeviceTable, 'byName' | 'currentLink' | 'desiredMac' | 'isDrifted'>;
  monitor: Pick<GuardMonitor, 'restoreSet' | 'neighbours'>;
  mac: Pick<MacCorrection, 'isContested' | 'reconcile' | 'restoreMissing'>;
  offload: Pick<OffloadEnforcement, 'check' | 'policyOf'>;
  /** A dry run writes nothing, here too. */
  dryRun: boolean;
  /** Runs a handler as the guard runs its events' (a failure becomes its `error` event). */
  run: (handler: (at: number) => void) => void;
}

export class PodCheck {
  readonly #deps: PodCheckDeps;

  constructor(deps: PodCheckDeps) {
    this.#deps = deps;
  }

  /** What differs now on the device named `name`; null when the guard does not keep it. */
  drift(name: string): PodCheckDrift[] | null {
    const device = this.#deps.devices.byName(name);
    if (device === undefined) return null;
    const { devices, monitor, mac, offload } = this.#deps;
    const drift: PodCheckDrift[] = [];
    const link = devices.currentLink(device);
    const desired = devices.desiredMac(device);
    // Flushed entries come back once the MAC is right: not while another writer holds it.
    const contested = mac.isContested(device);
    if (desired !== null && link?.mac !== desired.mac) {
      drift.push({
        kind: 'mac',
        expected: desired.mac,
        observed: `${link?.mac ?? 'none'}${contested ? ' (contested: left alone)' : ''}`,
        fixable: !contested,
      });
    }
    const present = new Set(monitor.neighbours({ ifindex: device.ifindex }).map(neighbourKey));
    for (const entry of monitor.restoreSet(device.ifindex)) {
      if (present.has(neighbourKey(entry))) continue;
      drift.push({
        kind: 'neighbour',
        subject: entry.destination ?? 'none',
        expected: entry.lladdr ?? 'an entry',
        observed: 'missing',
        fixable: !contested,
      });
    }
    for (const [feature, wanted] of Object.entries(offload.policyOf(device) ?? {})) {
      const active = device.offloads[feature];
      if (active === undefined || active === null || active === wanted) continue;
      drift.push({
        kind: 'offload',
        subject: feature,
        expected: wanted ? 'on' : 'off',
        observed: active ? 'on' : 'off',
        fixable: true,
      });
    }
    return drift;
  }

  /** Starts the guard's own corrections of what differs on `name` (no-op when nothing does). */
  repair(name: string): void {
    const device = this.#deps.devices.byName(name);
    if (device === undefined || this.#deps.dryRun) return;
    const { devices, mac, offload } = this.#deps;
    this.#deps.run((at) => {
      offload.check(device, 'pod');
      mac.reconcile(device, at);
      if (!devices.isDrifted(device)) mac.restoreMissing(device);
    });
  }
}
