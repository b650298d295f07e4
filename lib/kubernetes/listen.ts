/**
 * The metrics server's listen address, parsed apart from the server so that
 * the CLI checks the flag without loading node:http.
 */
import { isIP } from 'node:net';

export interface ListenAddress {
  host: string;
  port: number;
}

/**
 * `HOST:PORT`: an IPv4 address, a bracketed or bare IPv6 address, or a
 * host name; port 0 picks a free one. Throws a RangeError with the reason.
 */
export function parseListenAddress(value: string): ListenAddress {
  const match = /^(?:\[([^\]]+)\]|(.*)):(\d+)$/.exec(value);
  const host = match?.[1] ?? match?.[2];
  const portText = match?.[3];
  if (!host || !portText) throw new RangeError(`${value}: expected HOST:PORT or off`);
  const port = Number(portText);
  if (!Number.isInteger(port) || port > 65535) {
    throw new RangeError(`${value}: port ${portText} is not 0..65535`);
  }
  if (host.includes(':') && isIP(host) !== 6) {
    throw new RangeError(`${value}: ${host} is not an IPv6 address`);
  }
  if (!host.includes(':') && isIP(host) === 0 && !/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/i.test(host)) {
    throw new RangeError(`${value}: ${host} is not an address or host name`);
  }
  // All digits and dots: meant as an IPv4 address, never a name to look up.
  if (/^[0-9.]+$/.test(host) && isIP(host) !== 4) {
    throw new RangeError(`${value}: ${host} is not a valid IPv4 address`);
  }
  return { host, port };
}
