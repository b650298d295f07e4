/**
 * Checks made before any system call: MAC addresses, interface names,
 * interface globs and namespace names. Everything rejected here never reaches
 * the kernel, and nothing is silently truncated or normalised beyond the one
 * canonical MAC form.
 */
import { invalidArgument } from './errors';

const MAC_PATTERN = /^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$/i;

/**
 * Parses a unicast Ethernet MAC written as six colon-separated two-digit hex
 * octets (either case) and returns its canonical lower-case form. All-zero,
 * broadcast and multicast (I/G bit set) addresses are refused. Globally
 * administered addresses (U/L bit clear) are accepted: flannel generates
 * locally administered ones, but a VTEP may legitimately carry either.
 */
export function parseMac(value: unknown, what = 'MAC address'): string {
  if (typeof value !== 'string') {
    throw invalidArgument(`${what} must be a string, got ${typeof value}`);
  }
  if (!MAC_PATTERN.test(value)) {
    throw invalidArgument(
      `${what} ${JSON.stringify(value)} is not six colon-separated hex octets (aa:bb:cc:dd:ee:ff)`,
    );
  }
  const mac = value.toLowerCase();
  if (mac === '00:00:00:00:00:00') throw invalidArgument(`${what} ${mac} is the all-zero MAC`);
  if (mac === 'ff:ff:ff:ff:ff:ff') throw invalidArgument(`${what} ${mac} is the broadcast MAC`);
  if ((parseInt(mac.slice(0, 2), 16) & 0x01) !== 0) {
    throw invalidArgument(`${what} ${mac} is a multicast MAC (I/G bit set)`);
  }
  return mac;
}

export interface NumberRange {
  min: number;
  max: number;
  unit: string;
}

/**
 * The documented range of every number an option takes (inclusive). Timers
 * stop at Node's limit (2^31 - 1 ms, 24.8 days: past it setTimeout fires
 * after 1 ms); the receive buffer at 512 MiB, which the kernel can still
 * double without overflowing an int.
 */
export const RANGES = {
  receiveBuffer: { min: 1024, max: 2 ** 29, unit: 'bytes' },
  count: { min: 1, max: 1_000_000, unit: '' },
  timerMs: { min: 1, max: 2 ** 31 - 1, unit: 'ms' },
  reportIntervalMs: { min: 0, max: 1000, unit: 'ms' },
  cniBudgetMs: { min: 1, max: 600_000, unit: 'ms' },
} as const satisfies Record<string, NumberRange>;

export function describeRange(range: NumberRange): string {
  return `a whole number from ${range.min} to ${range.max}${range.unit === '' ? '' : ` (${range.unit})`}`;
}

/** A whole number within `range`, or EINVAL naming `what` and the range. */
export function integerInRange(value: unknown, range: NumberRange, what: string): number {
  if (
    typeof value !== 'number' ||
    !Number.isInteger(value) ||
    value < range.min ||
    value > range.max
  ) {
    throw invalidArgument(
      `${what} ${typeof value === 'number' ? String(value) : typeof value}: expected ${describeRange(range)}`,
    );
  }
  return value;
}

/** The 6 bytes of a MAC already checked by parseMac. */
export function macBytes(mac: string): Buffer {
  return Buffer.from(mac.replaceAll(':', ''), 'hex');
}

/**
 * Checks an interface name against the kernel's rules (dev_valid_name:
 * non-empty, at most 15 bytes, not '.' or '..', no '/', ':' or whitespace)
 * and systemd's stricter ones (printable ASCII only, not all digits).
 */
export function validateInterfaceName(value: unknown, what = 'interface name'): string {
  if (typeof value !== 'string') {
    throw invalidArgument(`${what} must be a string, got ${typeof value}`);
  }
  const shown = JSON.stringify(value);
  if (value.length === 0) throw invalidArgument(`${what} is empty`);
  if (Buffer.byteLength(value) > 15) {
    throw invalidArgument(`${what} ${shown} is longer than 15 bytes`);
  }
  if (value === '.' || value === '..') throw invalidArgument(`${what} ${shown} is not allowed`);
  for (const char of value) {
    const code = char.codePointAt(0) ?? 0;
    if (code <= 32 || code >= 127) {
      throw invalidArgument(
        `${what} ${shown} contains whitespace, control or non-ASCII characters`,
      );
    }
    if (char === '/' || char === ':') {
      throw invalidArgument(`${what} ${shown} contains ${JSON.stringify(char)}`);
    }
  }
  if (/^[0-9]+$/.test(value)) throw invalidArgument(`${what} ${shown} is all digits`);
  return value;
}

/** A compiled interface glob: `*` matches any run of characters, `?` one. */
export interface InterfaceGlob {
  readonly pattern: string;
  /** Characters before the first wildcard: every matching name starts with them. */
  readonly prefix: string;
  matches(name: string): boolean;
}

/**
 * Compiles an interface glob. Patterns that would match every interface
 * (empty, or only wildcards) are refused unless `allowAll`, and so is '/'.
 */
export function compileInterfaceGlob(pattern: unknown, allowAll = false): InterfaceGlob {
  if (typeof pattern !== 'string') {
    throw invalidArgument(`interface glob must be a string, got ${typeof pattern}`);
  }
  const shown = JSON.stringify(pattern);
  if (pattern.length === 0) throw invalidArgument('interface glob is empty');
  if (pattern.length > 64) throw invalidArgument(`interface glob ${shown} is too long`);
  if (/[/\s:]/.test(pattern)) {
    throw invalidArgument(`interface glob ${shown} contains '/', ':' or whitespace`);
  }
  if (!allowAll && /^[*?]+$/.test(pattern)) {
    throw invalidArgument(`interface glob ${shown} matches every interface`);
  }
  // A glob no interface name can satisfy is a mistake, not a wish.
  if (!/[*?]/.test(pattern)) {
    validateInterfaceName(pattern, 'interface glob');
  } else if (Buffer.byteLength(pattern.replaceAll('*', '')) > 15) {
    throw invalidArgument(
      `interface glob ${shown} can never match: it needs more than 15 bytes, the longest interface name`,
    );
  }
  const source = pattern
    .split('')
    .map((char) =>
      char === '*' ? '.*' : char === '?' ? '.' : char.replace(/[.+^${}()|[\]\\]/g, '\\$&'),
    )
    .join('');
  const regex = new RegExp(`^${source}$`);
  const wildcard = pattern.search(/[*?]/);
  return {
    pattern,
    prefix: wildcard < 0 ? pattern : pattern.slice(0, wildcard),
    matches: (name) => regex.test(name),
  };
}

/**
 * Resolves a network namespace given by name (as `ip netns` names them, under
 * /run/netns) or by absolute path (/proc/PID/ns/net, a bind mount).
 */
export function resolveNetnsPath(netns: string): string {
  if (typeof netns !== 'string' || netns.length === 0) {
    throw invalidArgument('network namespace must be a non-empty name or absolute path');
  }
  if (netns.startsWith('/')) return netns;
  if (netns === '.' || netns === '..' || netns.includes('/') || Buffer.byteLength(netns) > 255) {
    throw invalidArgument(`network namespace name ${JSON.stringify(netns)} is not valid`);
  }
  return `/run/netns/${netns}`;
}

/** A network namespace as given (`label`: an `ip netns` name or a path) and where it is. */
export interface NetnsTarget {
  readonly path: string;
  readonly label: string;
}

export function netnsTarget(netns: string): NetnsTarget;
export function netnsTarget(netns: string | undefined): NetnsTarget | null;
export function netnsTarget(netns: string | undefined): NetnsTarget | null {
  return netns === undefined
    ? null
    : Object.freeze({ path: resolveNetnsPath(netns), label: netns });
}

const IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/**
 * 4 or 6 for an IP address in the forms `ip` prints, 0 otherwise (node:net's isIP, without
 * loading node:net, which costs a CNI plugin's start-up several milliseconds).
 */
export function ipVersion(address: string): 0 | 4 | 6 {
  if (IPV4.test(address)) return 4;
  if (!/^[0-9a-f:.]+$/i.test(address) || address.length > 45) return 0;
  let body = address;
  let groups = 0;
  const lastColon = body.lastIndexOf(':');
  if (body.includes('.')) {
    if (!IPV4.test(body.slice(lastColon + 1))) return 0;
    body = `${body.slice(0, lastColon + 1)}0:0`;
  }
  const halves = body.split('::');
  if (halves.length > 2) return 0;
  for (const half of halves) {
    if (half === '') continue;
    for (const group of half.split(':')) {
      if (!/^[0-9a-f]{1,4}$/i.test(group)) return 0;
      groups += 1;
    }
  }
  return (halves.length === 2 ? groups < 8 : groups === 8) ? 6 : 0;
}
