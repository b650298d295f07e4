/**
 * The devices a guard manages, by index, and the checks every write goes through: a
 * device is managed only while its name matches a glob and it is VXLAN, and it is
 * re-read by index right before a write.
 */
import { isSystemError, systemError } from '../core/errors';
import type { LinkInfo } from '../core/types';
import type { GuardConfig } from './config';
import type { DesiredMac, ManagedDevice } from './device';
import type { GuardEmit, GuardMonitor } from './seams';
import type { FightController } from './fight-control';
import type { GuardPorts } from './ports';

export interface DeviceTableDeps {
  config: GuardConfig;
  monitor: GuardMonitor;
  ports: GuardPorts;
  fight: FightController;
  emit: GuardEmit;
  fail(error: unknown): void;
}

export class DeviceTable {
  readonly #deps: DeviceTableDeps;
  readonly #devices = new Map<number, ManagedDevice>();
  /** Devices reported as matching a glob without being VXLAN, by ifindex, with that name. */
  readonly #ignored = new Map<number, string>();

  constructor(deps: DeviceTableDeps) {
    this.#deps = deps;
  }

  get(ifindex: number): ManagedDevice | undefined {
    return this.#devices.get(ifindex);
  }

  values(): IterableIterator<ManagedDevice> {
    return this.#devices.values();
  }

  /** The managed device of that name (the mesh view and CNI calls name devices). */
  byName(name: string): ManagedDevice | undefined {
    for (const device of this.#devices.values()) if (device.name === name) return device;
    return undefined;
  }

  indexes(): number[] {
    return [...this.#devices.keys()];
  }

  add(device: ManagedDevice): void {
    this.#devices.set(device.ifindex, device);
  }

  delete(device: ManagedDevice): void {
    this.#devices.delete(device.ifindex);
  }

  /** The device is still the one managed under its index, and not going away. */
  isWritable(device: ManagedDevice): boolean {
    return this.#devices.get(device.ifindex) === device && !device.vanishing;
  }

  /**
   * Whether the guard may write to this device: its name matches a glob and
   * it is a VXLAN device. A non-VXLAN match (a veth called flannel.7, an
   * `--iface 'eth*'` typo) is reported once per device and name.
   */
  matches(link: LinkInfo): boolean {
    if (!this.#deps.config.interfaces.some((glob) => glob.matches(link.name))) return false;
    if (link.kind === 'vxlan') return true;
    if (this.#ignored.get(link.ifindex) !== link.name) {
      this.#ignored.set(link.ifindex, link.name);
      this.#deps.emit('ignored', {
        device: link.name,
        ifindex: link.ifindex,
        kind: link.kind,
        detail: `${link.name} matches the interface globs but is ${link.kind === '' ? 'a device without a link kind' : `of kind ${link.kind}`}, not vxlan: never written to`,
      });
    }
    return false;
  }

  /** A link is gone: a device of another kind may come back under its index. */
  forget(ifindex: number): void {
    this.#ignored.delete(ifindex);
  }

  /** The MAC the device should have, and where that comes from; null: none is known. */
  desiredMac(device: ManagedDevice): DesiredMac | null {
    const { explicit, source } = this.#deps.config;
    const explicitMac = explicit?.desiredMac(device.name);
    if (explicitMac) return { mac: explicitMac, kind: 'explicit' };
    const external = source?.desiredMac(device.name);
    // A re-created device: until the source publishes anew, its answer is the
    // old device's MAC, and the first-seen one is what flanneld is publishing.
    const stale =
      external !== undefined && external === device.staleSourceMac && device.pin !== null;
    if (external && !stale) return { mac: external, kind: 'source' };
    if (device.pin && device.pinKind) return { mac: device.pin, kind: device.pinKind };
    return null;
  }

  currentLink(device: ManagedDevice): LinkInfo | undefined {
    return this.#deps.monitor.getLink(device.ifindex);
  }

  isDrifted(device: ManagedDevice): boolean {
    const desired = this.desiredMac(device);
    const link = this.currentLink(device);
    return desired !== null && link !== undefined && link.mac !== desired.mac;
  }

  /** ENODEV or gone on a re-read: nothing is written to it until its DELLINK. */
  vanish(device: ManagedDevice): void {
    device.vanishing = true;
    this.#deps.fight.cancelTimers(device);
  }

  /**
   * Runs system calls for a device. ENODEV means it is going away, which its
   * DELLINK will confirm: nothing more is done for it (undefined is returned).
   */
  attempt<T>(device: ManagedDevice, calls: () => T): T | undefined {
    try {
      return calls();
    } catch (error) {
      if (isSystemError(error) && error.code === 'ENODEV') {
        this.vanish(device);
        return undefined;
      }
      throw error;
    }
  }

  /**
   * Re-reads the device by index right before a write (S6/S8): it must still
   * exist and match the globs under its current name, which it is then known by.
   */
  writeTarget(device: ManagedDevice): LinkInfo | null {
    const current = this.#deps.ports.getLink(device.ifindex);
    if (!current) {
      this.vanish(device);
      return null;
    }
    if (!this.matches(current)) {
      this.#deps.fail(
        systemError(
          'EACCES',
          `interface not managed: ifindex ${device.ifindex} is now ${current.name}, not ${device.name}; nothing written`,
          { interface: current.name, ifindex: device.ifindex },
        ),
      );
      return null;
    }
    device.name = current.name;
    return current;
  }
}
