/**
 * Where the guard learns a device's desired MAC. A source answers for the
 * devices it knows and says when its answers change; devices it has no
 * answer for fall back to the guard's pin (first-seen). The Kubernetes node
 * annotation is one such source.
 */
import { parseMac, validateInterfaceName } from '../core/validate';

export interface DesiredMacSource {
  /** Shown in events and status ('explicit', 'kubernetes', ...). */
  readonly name: string;
  /** The desired MAC of the device called `device`, or undefined for no opinion. */
  desiredMac(device: string): string | undefined;
  /**
   * Makes `mac` the desired MAC of `device` where the source keeps it (the
   * 'adopt' strategy: e.g. patching the node annotation other nodes read).
   * Resolves once stored; `desiredMac` answers `mac` from then on.
   */
  adopt?(device: string, mac: string): Promise<void>;
  /** Calls `listener` whenever an answer may have changed; returns an unsubscribe function. */
  subscribe?(listener: () => void): () => void;
  /** Releases what the source holds (connections, timers). */
  close?(): void;
}

/** A fixed map from interface name to MAC, validated up front. */
export function explicitMacSource(macs: Record<string, string>): DesiredMacSource {
  const table = new Map<string, string>();
  for (const [device, mac] of Object.entries(macs)) {
    table.set(validateInterfaceName(device), parseMac(mac, `MAC for ${device}`));
  }
  return {
    name: 'explicit',
    desiredMac: (device) => table.get(device),
  };
}
