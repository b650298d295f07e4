/**
 * What systemd-udevd does to a network device's MAC on this machine, read once under a root:
 * the machine-id (for the persistent MAC), the `.link` files (which one applies to a device of
 * a given name, with its MAC settings), and udev's database record of the device when there is
 * one (`/run/udev/data/n<IFINDEX>`, `E:ID_NET_LINK_FILE=`: the file udev says it applied).
 * Every read is bounded and never follows a link out of the root; nothing here blocks on a FIFO.
 */
import { FsRoot } from '../core/fsroot';
import { readHostFacts, MACHINE_ID_PATH } from './host';
import {
  evaluateLinkFiles,
  loadLinkFiles,
  type DeviceFacts,
  type HostFacts,
  type LinkFile,
} from './link-files';
import { udevPersistentMac } from './persistent-mac';
import type { UdevExpectation } from './writer';

/** udev's database of devices (`udev_device_get_db_path`: `n` + ifindex for a network device). */
export const UDEV_DATABASE_DIR = '/run/udev/data';

/** A database record is a few hundred bytes; anything past this is not one. */
const MAX_DATABASE_BYTES = 64 * 1024;

/** Devices remembered by name (names are few; the bound keeps a renaming storm finite). */
const MAX_NAMES = 1024;

/** The `E:` properties of a udev database record. */
export function parseUdevDatabase(text: string): Map<string, string> {
  const properties = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('E:')) continue;
    const equals = line.indexOf('=');
    if (equals > 2) properties.set(line.slice(2, equals), line.slice(equals + 1));
  }
  return properties;
}

function vxlanDevice(name: string): DeviceFacts {
  return { name, kind: 'vxlan', type: 'vxlan', driver: 'vxlan', path: null, mac: null };
}

export class UdevView {
  readonly #fs: FsRoot;
  readonly #host: HostFacts;
  readonly #linkFiles: LinkFile[];
  readonly #persistent = new Map<string, string>();
  readonly #applied = new Map<string, LinkFile | null>();
  /** Where the machine-id was read, or why it is unknown: worded once, not per rewrite. */
  readonly #machineIdSource: string;

  /** Over what a caller has read already (the doctor). */
  constructor(fs: FsRoot, host: HostFacts, linkFiles: LinkFile[]) {
    this.#fs = fs;
    this.#host = host;
    this.#linkFiles = linkFiles;
    const path = fs.real(MACHINE_ID_PATH);
    this.#machineIdSource = host.machineId === null ? `${path} missing or not a machine-id` : path;
  }

  /** Reads the machine-id and the `.link` files under `root` (default `/`). */
  static open(root = '/'): UdevView {
    const fs = new FsRoot(root);
    return new UdevView(fs, readHostFacts(fs), loadLinkFiles(fs));
  }

  get machineId(): string | null {
    return this.#host.machineId;
  }

  /**
   * What udev does to device `name` (index `ifindex`), for a write of `mac`. udev's database is
   * read only when `mac` is one udev would write (its persistent value, or the MACAddress= of
   * the file it applies): a rewrite by anyone else costs two lookups, not a file read.
   */
  expect(name: string, ifindex: number, mac: string | null): UdevExpectation {
    const configured = this.#appliedFile(name);
    const persistentMac = this.#persistentMac(name);
    const udevValue =
      mac !== null && (mac === persistentMac || mac === (configured?.macAddress ?? null));
    const database = udevValue ? this.#databaseLinkFile(ifindex, name) : null;
    // The database names the file udev applied; its settings are known if it was loaded.
    const file =
      database === null
        ? configured
        : (this.#linkFiles.find((link) => link.path === database) ?? null);
    return {
      persistentMac,
      machineId: this.#machineIdSource,
      linkFile: database ?? configured?.path ?? null,
      linkFileFrom: database !== null ? 'udev-database' : configured ? 'configuration' : null,
      policy: file?.macAddressPolicy ?? null,
      macAddress: file?.macAddress ?? null,
    };
  }

  #persistentMac(name: string): string | null {
    const { machineId } = this.#host;
    if (machineId === null) return null;
    const known = this.#persistent.get(name);
    if (known !== undefined) return known;
    const mac = udevPersistentMac(machineId, name);
    this.#remember(this.#persistent, name, mac);
    return mac;
  }

  #appliedFile(name: string): LinkFile | null {
    const known = this.#applied.get(name);
    if (known !== undefined) return known;
    const applied = evaluateLinkFiles(this.#linkFiles, vxlanDevice(name), this.#host).applied;
    this.#remember(this.#applied, name, applied);
    return applied;
  }

  /**
   * The file udev's record of index `ifindex` names, if the record is this device's: udev sees
   * the devices of its own namespace only, so in another namespace the same index is another
   * device (the record must name `name`).
   */
  #databaseLinkFile(ifindex: number, name: string): string | null {
    const text = this.#fs.readText(`${UDEV_DATABASE_DIR}/n${ifindex}`, MAX_DATABASE_BYTES);
    if (text === null) return null;
    const properties = parseUdevDatabase(text);
    const named =
      properties.get('ID_NET_NAME') === name ||
      properties.get('SYSTEMD_ALIAS') === `/sys/subsystem/net/devices/${name}`;
    return named ? (properties.get('ID_NET_LINK_FILE') ?? null) : null;
  }

  #remember<T>(map: Map<string, T>, name: string, value: T): void {
    if (map.size >= MAX_NAMES) map.clear();
    map.set(name, value);
  }
}
