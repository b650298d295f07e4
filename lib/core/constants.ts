/** Linux UAPI values used across the library (stable kernel ABI). */

export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_BRIDGE = 7;
export const AF_INET6 = 10;

export const IFF_UP = 0x1;
export const IFF_LOOPBACK = 0x8;

/** ifi_change of an RTM_NEWLINK announcing a device that was just registered. */
export const CHANGE_MASK_NEW_DEVICE = 0xffffffff;

export const NUD_INCOMPLETE = 0x01;
export const NUD_REACHABLE = 0x02;
export const NUD_STALE = 0x04;
export const NUD_DELAY = 0x08;
export const NUD_PROBE = 0x10;
export const NUD_FAILED = 0x20;
export const NUD_NOARP = 0x40;
export const NUD_PERMANENT = 0x80;

export const NTF_SELF = 0x02;

/**
 * /sys/class/net/IFACE/addr_assign_type's "random" (the kernel made the MAC up): udev's
 * MACAddressPolicy rewrites such a MAC; a write from userspace makes it 3 (NET_ADDR_SET).
 */
export const NET_ADDR_RANDOM = 1;

export const OPERSTATES = [
  'unknown',
  'notpresent',
  'down',
  'lowerlayerdown',
  'testing',
  'dormant',
  'up',
] as const;

export type OperState = (typeof OPERSTATES)[number];

const NUD_NAMES: readonly [number, string][] = [
  [NUD_INCOMPLETE, 'incomplete'],
  [NUD_REACHABLE, 'reachable'],
  [NUD_STALE, 'stale'],
  [NUD_DELAY, 'delay'],
  [NUD_PROBE, 'probe'],
  [NUD_FAILED, 'failed'],
  [NUD_NOARP, 'noarp'],
  [NUD_PERMANENT, 'permanent'],
];

/** The names of the NUD_* bits set in `state`, as `ip neigh` prints them. */
const stateNames = new Map<number, readonly string[]>();

/** The names of the NUD_* bits; one shared, frozen list per state value (there are few). */
export function neighbourStateNames(state: number): readonly string[] {
  let names = stateNames.get(state);
  if (names === undefined) {
    names = Object.freeze(NUD_NAMES.filter(([bit]) => (state & bit) !== 0).map(([, name]) => name));
    if (stateNames.size < 256) stateNames.set(state, names);
  }
  return names;
}
