/**
 * rtnetlink datagrams assembled byte by byte, as the kernel sends them: for the parser's
 * fixtures (test/parser.test.ts) and for feeding the real native mirror the messages a
 * scripted kernel produces (test/support/scripted-monitor.ts), the seam at the message
 * boundary.
 */
import { isIP } from 'node:net';

import { AF_BRIDGE, AF_INET6, CHANGE_MASK_NEW_DEVICE, OPERSTATES } from '../../lib/core/constants';
import type { LinkInfo, NeighbourInfo } from '../../lib/core/types';

export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_NEWNEIGH = 28;
export const RTM_DELNEIGH = 29;
export const NLA_F_NESTED = 0x8000;
export const IFLA_ADDRESS = 1;
export const IFLA_IFNAME = 3;
export const IFLA_MTU = 4;
export const IFLA_LINK = 5;
export const IFLA_MASTER = 10;
export const IFLA_OPERSTATE = 16;
export const IFLA_LINKINFO = 18;
export const IFLA_LINK_NETNSID = 37;
export const IFLA_EVENT = 44;
export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;
export const IFLA_VXLAN_ID = 1;
export const IFLA_VXLAN_LINK = 3;
export const IFLA_VXLAN_LOCAL = 4;
export const IFLA_VXLAN_LEARNING = 7;
export const IFLA_VXLAN_PORT = 15;
export const IFLA_VXLAN_LOCAL6 = 17;
export const NDA_DST = 1;
export const NDA_LLADDR = 2;
export const NDA_VNI = 7;
export const NDA_MASTER = 9;

export function u16(value: number): Buffer {
  const bytes = Buffer.alloc(2);
  bytes.writeUInt16LE(value);
  return bytes;
}

export function u32(value: number): Buffer {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32LE(value >>> 0);
  return bytes;
}

export function be16(value: number): Buffer {
  const bytes = Buffer.alloc(2);
  bytes.writeUInt16BE(value);
  return bytes;
}

export function cstr(text: string): Buffer {
  return Buffer.from(`${text}\0`, 'latin1');
}

export function pad(bytes: Buffer): Buffer {
  return Buffer.concat([bytes, Buffer.alloc((4 - (bytes.length % 4)) % 4)]);
}

/** An attribute whose header declares `declared` bytes, followed by `payload` as is. */
export function attrDeclaring(declared: number, type: number, payload: Buffer): Buffer {
  return Buffer.concat([u16(declared), u16(type), payload]);
}

export function attrUnpadded(type: number, payload: Buffer): Buffer {
  return attrDeclaring(4 + payload.length, type, payload);
}

export function attr(type: number, payload: Buffer): Buffer {
  return pad(attrUnpadded(type, payload));
}

export function nested(type: number, ...children: Buffer[]): Buffer {
  return attr(type | NLA_F_NESTED, Buffer.concat(children));
}

export function header(length: number, type: number, flags = 0, seq = 0, portid = 0): Buffer {
  return Buffer.concat([u32(length), u16(type), u16(flags), u32(seq), u32(portid)]);
}

export function messageUnpadded(
  type: number,
  body: Buffer,
  flags = 0,
  seq = 0,
  portid = 0,
): Buffer {
  return Buffer.concat([header(16 + body.length, type, flags, seq, portid), body]);
}

export function message(type: number, body: Buffer, flags = 0, seq = 0, portid = 0): Buffer {
  return pad(messageUnpadded(type, body, flags, seq, portid));
}

/** struct ifinfomsg of an Ethernet device. */
export function ifinfomsg(ifindex: number, flags = 0, change = 0): Buffer {
  const bytes = Buffer.alloc(16);
  bytes.writeUInt16LE(1, 2); // ARPHRD_ETHER
  bytes.writeInt32LE(ifindex, 4);
  bytes.writeUInt32LE(flags >>> 0, 8);
  bytes.writeUInt32LE(change >>> 0, 12);
  return bytes;
}

/** struct ndmsg of a unicast entry. */
export function ndmsg(family: number, ifindex: number, state: number, flags = 0): Buffer {
  const bytes = Buffer.alloc(12);
  bytes[0] = family;
  bytes.writeInt32LE(ifindex, 4);
  bytes.writeUInt16LE(state, 8);
  bytes[10] = flags;
  bytes[11] = 1; // RTN_UNICAST
  return bytes;
}

function macBytes(mac: string): Buffer {
  return Buffer.from(mac.replaceAll(':', ''), 'hex');
}

function ipBytes(ip: string): Buffer {
  if (isIP(ip) === 4) return Buffer.from(ip.split('.').map(Number));
  const [head = '', tail = ''] = ip.split('::');
  const groups = (part: string): string[] => (part === '' ? [] : part.split(':'));
  const left = groups(head);
  const right = groups(tail);
  const all = ip.includes('::')
    ? [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right]
    : left;
  return Buffer.concat(all.map((group) => be16(parseInt(group, 16))));
}

const KERNEL_EVENT_CODES: Record<string, number> = {
  reboot: 1,
  features: 2,
  'bonding-failover': 3,
  'notify-peers': 4,
  'igmp-resend': 5,
  'bonding-options': 6,
};

/** The RTM_NEWLINK the kernel sends for `link` (its creation when `created`). */
export function linkMessage(
  link: LinkInfo,
  options: { created?: boolean; kernelEvent?: string | null } = {},
): Buffer {
  const attributes = [attr(IFLA_IFNAME, cstr(link.name))];
  if (link.mac !== null) attributes.push(attr(IFLA_ADDRESS, macBytes(link.mac)));
  if (link.mtu !== null) attributes.push(attr(IFLA_MTU, u32(link.mtu)));
  attributes.push(
    attr(IFLA_OPERSTATE, Buffer.from([Math.max(0, OPERSTATES.indexOf(link.operstate))])),
  );
  if (link.master !== null) attributes.push(attr(IFLA_MASTER, u32(link.master)));
  if (link.lowerIfindex !== null) attributes.push(attr(IFLA_LINK, u32(link.lowerIfindex)));
  if (link.linkNetnsid !== null) attributes.push(attr(IFLA_LINK_NETNSID, u32(link.linkNetnsid)));
  const event = options.kernelEvent ? KERNEL_EVENT_CODES[options.kernelEvent] : undefined;
  if (event !== undefined) attributes.push(attr(IFLA_EVENT, u32(event)));
  if (link.kind !== '') {
    const data: Buffer[] = [];
    const vxlan = link.vxlan;
    if (vxlan) {
      if (vxlan.vni !== null) data.push(attr(IFLA_VXLAN_ID, u32(vxlan.vni)));
      if (vxlan.underlayIfindex !== null)
        data.push(attr(IFLA_VXLAN_LINK, u32(vxlan.underlayIfindex)));
      if (vxlan.local !== null) {
        const local = ipBytes(vxlan.local);
        data.push(attr(local.length === 4 ? IFLA_VXLAN_LOCAL : IFLA_VXLAN_LOCAL6, local));
      }
      if (vxlan.learning !== null)
        data.push(attr(IFLA_VXLAN_LEARNING, Buffer.from([vxlan.learning ? 1 : 0])));
      if (vxlan.port !== null) data.push(attr(IFLA_VXLAN_PORT, be16(vxlan.port)));
    }
    attributes.push(
      nested(
        IFLA_LINKINFO,
        attr(IFLA_INFO_KIND, cstr(link.kind)),
        ...(data.length > 0 ? [nested(IFLA_INFO_DATA, ...data)] : []),
      ),
    );
  }
  const change = options.created === true ? CHANGE_MASK_NEW_DEVICE : 0;
  return message(
    RTM_NEWLINK,
    Buffer.concat([ifinfomsg(link.ifindex, link.flags, change), ...attributes]),
  );
}

/** The RTM_DELLINK of a device. */
export function delLinkMessage(ifindex: number, name: string): Buffer {
  return message(RTM_DELLINK, Buffer.concat([ifinfomsg(ifindex), attr(IFLA_IFNAME, cstr(name))]));
}

/** The RTM_NEWNEIGH (or RTM_DELNEIGH) of an entry, from the process with `portid`. */
export function neighMessage(entry: NeighbourInfo, deleted = false, portid = 0): Buffer {
  const family = entry.family === 'bridge' ? AF_BRIDGE : entry.family === 'inet6' ? AF_INET6 : 2;
  const attributes: Buffer[] = [];
  if (entry.destination !== null) attributes.push(attr(NDA_DST, ipBytes(entry.destination)));
  if (entry.lladdr !== null) attributes.push(attr(NDA_LLADDR, macBytes(entry.lladdr)));
  if (entry.vni !== null) attributes.push(attr(NDA_VNI, u32(entry.vni)));
  if (entry.master !== null) attributes.push(attr(NDA_MASTER, u32(entry.master)));
  return message(
    deleted ? RTM_DELNEIGH : RTM_NEWNEIGH,
    Buffer.concat([ndmsg(family, entry.ifindex, entry.state, entry.flags), ...attributes]),
    0,
    0,
    portid,
  );
}
