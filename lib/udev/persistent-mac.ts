/**
 * The MAC systemd-udevd's MACAddressPolicy=persistent gives a device, computed the way udev does
 * it (systemd.link(5); `net_get_unique_predictable_data` and `get_mac` in systemd's
 * `link-config.c`): SipHash-2-4 under udev's fixed key over the machine-id's 16 bytes followed by
 * the interface name (a virtual device has no `ID_NET_NAME_*`, so its own name is used); the
 * 64-bit result's first six bytes in little-endian order, multicast bit cleared, local bit set.
 * A rewrite to exactly this value is udev's, proven: no other writer produces it by chance.
 */

/** udev's hash key for persistent MACs ("d3 1e 48 fa 90 fe 4b 4c 9d af d5 d7 a1 b1 2e 8a"). */
const UDEV_MAC_HASH_KEY = Buffer.from('d31e48fa90fe4b4c9dafd5d7a1b12e8a', 'hex');

const MASK64 = (1n << 64n) - 1n;

function rotl(value: bigint, bits: bigint): bigint {
  return ((value << bits) | (value >> (64n - bits))) & MASK64;
}

/** SipHash-2-4 of `data` under the 16-byte `key`, as the little-endian 8 bytes it is stored as. */
export function siphash24(key: Uint8Array, data: Uint8Array): Buffer {
  if (key.length !== 16) throw new RangeError('a SipHash key has 16 bytes');
  const k = Buffer.from(key);
  const k0 = k.readBigUInt64LE(0);
  const k1 = k.readBigUInt64LE(8);
  let v0 = k0 ^ 0x736f6d6570736575n;
  let v1 = k1 ^ 0x646f72616e646f6dn;
  let v2 = k0 ^ 0x6c7967656e657261n;
  let v3 = k1 ^ 0x7465646279746573n;
  const round = (): void => {
    v0 = (v0 + v1) & MASK64;
    v1 = rotl(v1, 13n) ^ v0;
    v0 = rotl(v0, 32n);
    v2 = (v2 + v3) & MASK64;
    v3 = rotl(v3, 16n) ^ v2;
    v0 = (v0 + v3) & MASK64;
    v3 = rotl(v3, 21n) ^ v0;
    v2 = (v2 + v1) & MASK64;
    v1 = rotl(v1, 17n) ^ v2;
    v2 = rotl(v2, 32n);
  };
  const compress = (m: bigint): void => {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  };
  const whole = data.length - (data.length % 8);
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.length);
  for (let offset = 0; offset < whole; offset += 8) compress(bytes.readBigUInt64LE(offset));
  // The last block: the remaining bytes, and the length's low byte in the top byte.
  let last = BigInt(data.length & 0xff) << 56n;
  for (let i = whole; i < data.length; i += 1) {
    last |= BigInt(bytes[i] ?? 0) << BigInt(8 * (i - whole));
  }
  compress(last);
  v2 ^= 0xffn;
  for (let i = 0; i < 4; i += 1) round();
  const result = Buffer.alloc(8);
  result.writeBigUInt64LE(v0 ^ v1 ^ v2 ^ v3);
  return result;
}

/** A machine-id as /etc/machine-id holds it: 32 hex characters, not all zero; null otherwise. */
export function parseMachineId(text: string): string | null {
  const id = text.trim().toLowerCase();
  return /^[0-9a-f]{32}$/.test(id) && !/^0+$/.test(id) ? id : null;
}

/** The MAC udev's MACAddressPolicy=persistent gives interface `name` on machine `machineId`. */
export function udevPersistentMac(machineId: string, name: string): string {
  const id = parseMachineId(machineId);
  if (id === null) throw new RangeError(`not a machine-id: ${JSON.stringify(machineId)}`);
  const data = Buffer.concat([Buffer.from(id, 'hex'), Buffer.from(name, 'utf8')]);
  const mac = siphash24(UDEV_MAC_HASH_KEY, data).subarray(0, 6);
  mac[0] = ((mac[0] ?? 0) & 0xfe) | 0x02; // unicast, locally administered
  return [...mac].map((byte) => byte.toString(16).padStart(2, '0')).join(':');
}
