/**
 * The guard's VTEPs as the mesh view (mesh/view.ts) reads and repairs them: their permanent
 * ARP/NDP and FDB entries from the native mirror (no dump), their changes with the writer's port
 * id, and writes through the guard's own request socket, so that the guard stays the one writer
 * of its devices. A repaired ARP/NDP entry joins the device's restore set at once: a MAC rewrite
 * read before the repair's notification puts back the repaired value, not the stale one.
 */
import { systemError } from '../core/errors';
import type { NeighbourInfo } from '../core/types';
import type { MeshDevices, VtepEntryChange } from '../mesh/view';
import type { DeviceTable } from './devices';
import type { GuardPorts } from './ports';
import type { GuardMonitor } from './seams';

export function vtepTables(
  monitor: GuardMonitor,
  ports: Pick<GuardPorts, 'replaceNeighbours' | 'deleteNeighbour'>,
  devices: Pick<DeviceTable, 'byName' | 'get'>,
  dryRun: boolean,
): MeshDevices {
  const writable = (name: string) => {
    const device = devices.byName(name);
    if (device === undefined) {
      throw systemError('ENODEV', `${name} is not a device the guard keeps`, { interface: name });
    }
    if (dryRun) {
      throw systemError('EPERM', `dry run: ${name}'s entries are not written`, { interface: name });
    }
    return device;
  };
  return {
    read(name) {
      const device = devices.byName(name);
      if (device === undefined) return null;
      const entries = monitor.neighbours({ ifindex: device.ifindex }).filter((e) => e.permanent);
      return { mac: monitor.getLink(device.ifindex)?.mac ?? null, entries };
    },
    mac(name) {
      const device = devices.byName(name);
      return device === undefined ? null : (monitor.getLink(device.ifindex)?.mac ?? null);
    },
    write(name, entries) {
      const device = writable(name);
      const placed: NeighbourInfo[] = entries.map((entry) => ({
        ...entry,
        ifindex: device.ifindex,
      }));
      ports.replaceNeighbours(placed, device.name);
      monitor.keep(
        device.ifindex,
        placed.filter((entry) => entry.family !== 'bridge'),
      );
    },
    remove(name, entry) {
      const device = writable(name);
      // The kernel's notification of the deletion takes it out of the restore set.
      ports.deleteNeighbour({ ...entry, ifindex: device.ifindex }, device.name);
    },
    subscribe(listener) {
      const tell = (entry: NeighbourInfo, removed: boolean, portid: number): void => {
        const device = devices.get(entry.ifindex);
        if (device === undefined) return;
        const change: VtepEntryChange = { device: device.name, entry, removed, portid };
        listener(change);
      };
      const onAdded = (e: { neighbour: NeighbourInfo; portid: number }): void => {
        tell(e.neighbour, false, e.portid);
      };
      const onRemoved = (e: { neighbour: NeighbourInfo; portid: number }): void => {
        tell(e.neighbour, true, e.portid);
      };
      monitor.on('neighbourAdded', onAdded);
      monitor.on('neighbourChanged', onAdded);
      monitor.on('neighbourRemoved', onRemoved);
      return () => {
        monitor.off('neighbourAdded', onAdded);
        monitor.off('neighbourChanged', onAdded);
        monitor.off('neighbourRemoved', onRemoved);
      };
    },
  };
}
