/**
 * The other nodes' published VTEPs as the ensureVtep, the doctor and the CNI
 * plugin take them, checked before any system call. No Node dependency
 * beyond the checks in validate.ts: the CNI plugin parses its configuration
 * without loading the addon.
 */
import { invalidArgument } from '../core/errors';
import { ipVersion, parseMac } from '../core/validate';

/** What another node publishes: flannel programs exactly these entries for it. */
export interface PeerExpectation {
  /** The peer's VTEP address (its subnet's .0): destination of the ARP/NDP entry. */
  vtepIp: string;
  /** The peer's published VtepMAC. */
  mac: string;
  /** The peer's underlay (public) IP: destination of the FDB entry. Without it no FDB entry is checked. */
  underlayIp?: string;
}

/** The eight 16-bit groups of an address ipVersion() says is IPv6. */
function ipv6Groups(address: string): number[] {
  let body = address;
  if (body.includes('.')) {
    // A trailing dotted IPv4 part is the last two groups.
    const lastColon = body.lastIndexOf(':');
    const [a = 0, b = 0, c = 0, d = 0] = body
      .slice(lastColon + 1)
      .split('.')
      .map(Number);
    body = `${body.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const parse = (part: string): number[] =>
    part === '' ? [] : part.split(':').map((group) => parseInt(group, 16));
  const [head = '', tail] = body.split('::');
  if (tail === undefined) return parse(head);
  const left = parse(head);
  const right = parse(tail);
  return [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
}

/**
 * Why an address cannot be a VTEP or an underlay peer, or null: the
 * unspecified, loopback, multicast, broadcast and reserved (240/4) ranges
 * would program the device to send to nowhere or to everyone.
 */
export function unusablePeerAddress(address: string): string | null {
  const version = ipVersion(address);
  if (version === 4) {
    const first = Number(address.split('.')[0]);
    if (first === 0) return 'an unspecified ("this network") address';
    if (first === 127) return 'a loopback address';
    if (first >= 224 && first <= 239) return 'a multicast address';
    if (address === '255.255.255.255') return 'the broadcast address';
    if (first >= 240) return 'a reserved address';
    return null;
  }
  if (version === 6) {
    const groups = ipv6Groups(address);
    if (groups.every((g) => g === 0)) return 'the unspecified address';
    if (groups.slice(0, 7).every((g) => g === 0) && groups[7] === 1) return 'the loopback address';
    if (((groups[0] ?? 0) & 0xff00) === 0xff00) return 'a multicast address';
    // IPv4-mapped (::ffff:a.b.c.d): the IPv4 rules.
    if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
      const v4 = [
        (groups[6] ?? 0) >> 8,
        (groups[6] ?? 0) & 0xff,
        (groups[7] ?? 0) >> 8,
        (groups[7] ?? 0) & 0xff,
      ];
      return unusablePeerAddress(v4.join('.'));
    }
    return null;
  }
  return 'not an IP address';
}

/** A 5000-node cluster has 4999 peers; far more is a broken or hostile configuration. */
export const MAX_PEERS = 10_000;

/** Parses `VTEP_IP=MAC[@UNDERLAY_IP]` (the doctor's --peer flag). */
export function parsePeerSpec(spec: string): PeerExpectation {
  const equals = spec.indexOf('=');
  if (equals <= 0) {
    throw invalidArgument(`peer ${JSON.stringify(spec)}: expected VTEP_IP=MAC[@UNDERLAY_IP]`);
  }
  const vtepIp = spec.slice(0, equals);
  const rest = spec.slice(equals + 1);
  const at = rest.indexOf('@');
  const peer: PeerExpectation = { vtepIp, mac: at < 0 ? rest : rest.slice(0, at) };
  if (at >= 0) peer.underlayIp = rest.slice(at + 1);
  return validatePeer(peer);
}

/** Checks a peer's fields and returns it with its MAC in canonical form. */
export function validatePeer(value: unknown): PeerExpectation {
  if (typeof value !== 'object' || value === null) {
    throw invalidArgument('peer must be an object with vtepIp, mac and optionally underlayIp');
  }
  const peer = value as Partial<Record<keyof PeerExpectation, unknown>>;
  if (typeof peer.vtepIp !== 'string' || ipVersion(peer.vtepIp) === 0) {
    throw invalidArgument(`peer vtepIp ${JSON.stringify(peer.vtepIp)} is not an IP address`);
  }
  const unusableVtep = unusablePeerAddress(peer.vtepIp);
  if (unusableVtep !== null) {
    throw invalidArgument(`peer vtepIp ${peer.vtepIp} is ${unusableVtep}`);
  }
  const valid: PeerExpectation = {
    vtepIp: peer.vtepIp,
    mac: parseMac(peer.mac, `MAC of peer ${peer.vtepIp}`),
  };
  if (peer.underlayIp !== undefined) {
    if (typeof peer.underlayIp !== 'string' || ipVersion(peer.underlayIp) === 0) {
      throw invalidArgument(
        `peer ${peer.vtepIp}: underlayIp ${JSON.stringify(peer.underlayIp)} is not an IP address`,
      );
    }
    const unusableUnderlay = unusablePeerAddress(peer.underlayIp);
    if (unusableUnderlay !== null) {
      throw invalidArgument(
        `peer ${peer.vtepIp}: underlayIp ${peer.underlayIp} is ${unusableUnderlay}`,
      );
    }
    valid.underlayIp = peer.underlayIp;
  }
  return valid;
}
