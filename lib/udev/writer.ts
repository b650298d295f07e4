/**
 * Who wrote a MAC, from evidence instead of timing: a rewrite to the value udev's
 * MACAddressPolicy=persistent computes for this machine-id and name is udev's, proven; one to
 * the `MACAddress=` of the `.link` file udev applies to the device is udev's fixed MAC; any other
 * value was written by someone else. Pure: what udev would do is gathered elsewhere (`UdevView`).
 */
import type { MacPolicy } from './link-files';

export type MacWriter =
  /** The MAC is udev's persistent value for this machine-id and name. */
  | 'udev-persistent-policy'
  /** The MAC is the `MACAddress=` of the `.link` file udev applies. */
  | 'udev-static-mac'
  /** Neither: `ip link set address`, NetworkManager, another agent. */
  | 'another-writer'
  /** Udev cannot be ruled in or out: the machine-id is unknown. */
  | 'unknown';

/** What udev does to a device of this name, as far as it is known. */
export interface UdevExpectation {
  /** udev's persistent MAC for the name; null when the machine-id is unknown. */
  persistentMac: string | null;
  /** Where the machine-id was read (a system path), or why it is unknown. */
  machineId: string;
  /** The `.link` file udev applied (its database) or applies (the configuration); null: none. */
  linkFile: string | null;
  linkFileFrom: 'udev-database' | 'configuration' | null;
  /** That file's MACAddressPolicy= and MACAddress=. */
  policy: MacPolicy | null;
  macAddress: string | null;
}

/** The evidence a writer is named on. */
export interface WriterEvidence extends UdevExpectation {
  /** The MAC that was written. */
  mac: string | null;
  msSinceCreation: number | null;
  /**
   * /sys/class/net/DEV/addr_assign_type after the write (3: set by userspace); null: unread (the
   * guard reads it for a change found at start or on a re-read, not on a live rewrite's path).
   */
  addrAssignType: number | null;
}

export interface WriterAttribution {
  writer: MacWriter;
  evidence: WriterEvidence;
  /** One sentence: the writer and why. */
  detail: string;
}

function describe(writer: MacWriter, e: WriterEvidence): string {
  const file = e.linkFile === null ? '' : ` (${e.linkFile}, ${e.linkFileFrom ?? ''})`;
  switch (writer) {
    case 'udev-persistent-policy':
      return `systemd-udevd MACAddressPolicy=persistent${file}: ${e.mac ?? ''} is siphash24(machine-id from ${e.machineId} + name) under udev's key; a .link file with MACAddressPolicy=none prevents it`;
    case 'udev-static-mac':
      return `systemd-udevd MACAddress=${e.macAddress ?? ''}${file}`;
    case 'another-writer': {
      const facts = [
        e.mac !== null && e.mac === e.persistentMac
          ? `udev's persistent value, but the .link file udev applies${file} says MACAddressPolicy=${e.policy ?? ''}`
          : `not udev's persistent value ${e.persistentMac ?? ''}`,
        ...(e.msSinceCreation === null
          ? []
          : [`${e.msSinceCreation.toFixed(1)} ms after the device's creation`]),
        ...(e.addrAssignType === null ? [] : [`addr_assign_type ${e.addrAssignType}`]),
      ];
      return `another writer (ip link set address, NetworkManager, an agent): ${facts.join(', ')}`;
    }
    case 'unknown':
      return `unattributed: the machine-id is unknown (${e.machineId}), so udev's persistent value cannot be computed`;
  }
}

/** Names the writer of `evidence.mac`. */
export function attributeWriter(evidence: WriterEvidence): WriterAttribution {
  const { mac } = evidence;
  let writer: MacWriter;
  // udev's value under a .link file whose policy is not persistent was not written by udev
  // (another process copied it, or an older configuration did): another writer.
  const udevMayPersist = evidence.policy === null || evidence.policy === 'persistent';
  if (mac !== null && mac === evidence.persistentMac && udevMayPersist) {
    writer = 'udev-persistent-policy';
  } else if (
    mac !== null &&
    mac === evidence.macAddress &&
    // MACAddress= applies only without a generating policy (systemd.link(5)).
    (evidence.policy === null || evidence.policy === 'none')
  ) {
    writer = 'udev-static-mac';
  } else if (evidence.persistentMac === null) writer = 'unknown';
  else writer = 'another-writer';
  return { writer, evidence, detail: describe(writer, evidence) };
}
