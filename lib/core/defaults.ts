/**
 * The product's defaults, in one place: what the guard, `status`, `ensureVtep`, the CNI
 * plugin and the doctor assume when they are not told otherwise.
 */

/** The devices flannel's VXLAN backend creates (IPv4 and IPv6). */
export const DEFAULT_INTERFACES = ['flannel.*', 'flannel-v6.*'] as const;

/** The fix for broken VXLAN TX checksum offload; the kernel also drops TSO with it. */
export const DEFAULT_OFFLOAD: Readonly<Record<string, boolean>> = Object.freeze({
  'tx-checksum-ip-generic': false,
});

/** Where the guard keeps the state that survives a crash (the CLI's --state-dir). */
export const DEFAULT_STATE_DIR = '/run/flannel-guard';

/** Where systemd-udevd's machine-id, `.link` files and database are read (the CLI's --udev-root). */
export const DEFAULT_UDEV_ROOT = '/';

/** How often the guard reads its namespace's checksum-error counters (/proc/net/snmp). */
export const DEFAULT_CHECKSUM_ERRORS_POLL_MS = 2_000;
/** One sample of what arrives on a device after a rise: bounded in time and frames. */
export const CHECKSUM_SAMPLE = { timeoutMs: 1_000, maxFrames: 500 } as const;
/** A device is sampled at most this often, however long the counters keep rising. */
export const CHECKSUM_SAMPLE_INTERVAL_MS = 60_000;

/** The mesh view: how long a peer's entries may differ from what it publishes before it counts. */
export const DEFAULT_MESH_GRACE_MS = 5_000;
/** Two repairs of a peer undone within this long: it is contested, and left alone. */
export const DEFAULT_MESH_FIGHT_WINDOW_MS = 60_000;
