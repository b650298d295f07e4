/**
 * The native rtnetlink parser as JavaScript sees it (`binding.parseDatagram`): real datagrams
 * captured from Linux 6.18 (test/fixtures/*.hex) and the malformed cases of
 * docs/reliability.md N5-N8, N16 and S13, built here byte by byte. No privileges needed.
 *
 * The C++ side of the same cases is native/tests/netlink_parser_test.cc; this file checks
 * what reaches JS: `mac: null` plus `macError` rather than a garbled address, `error`
 * with the offset and reason of a bad header, `malformed` for a bad body, and so on.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  binding,
  type RawLink,
  type RawNeighbour,
  type RawParsedMessage,
} from '../lib/core/binding';
import {
  IFLA_ADDRESS,
  IFLA_IFNAME,
  IFLA_INFO_DATA,
  IFLA_INFO_KIND,
  IFLA_LINK,
  IFLA_LINKINFO,
  IFLA_LINK_NETNSID,
  IFLA_MTU,
  IFLA_VXLAN_ID,
  IFLA_VXLAN_LEARNING,
  IFLA_VXLAN_LOCAL,
  IFLA_VXLAN_PORT,
  NDA_DST,
  NDA_LLADDR,
  NDA_VNI,
  NLA_F_NESTED,
  RTM_DELLINK,
  RTM_NEWLINK,
  RTM_NEWNEIGH,
  attr,
  attrDeclaring,
  attrUnpadded,
  be16,
  cstr,
  header,
  ifinfomsg,
  message,
  messageUnpadded,
  ndmsg,
  nested,
  u32,
} from './support/netlink-bytes';

// ---------------------------------------------------------------------------
// Fixtures

const fixtureDir = join(__dirname, '..', '..', 'test', 'fixtures');

/** A captured datagram: hex, with `#` comments and whitespace ignored. */
function fixture(name: string): Buffer {
  const text = readFileSync(join(fixtureDir, `${name}.hex`), 'utf8');
  const hex = text
    .split('\n')
    .map((line) => line.replace(/#.*/, '').replace(/\s+/g, ''))
    .join('');
  assert.match(hex, /^([0-9a-f]{2})*$/i, `${name}.hex is not hex`);
  return Buffer.from(hex, 'hex');
}

// Constants from <linux/netlink.h>, <linux/rtnetlink.h>, <linux/if_link.h>, <linux/neighbour.h>
// (those of support/netlink-bytes.ts are imported from it).
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLM_F_MULTI = 0x2;
const NLM_F_CAPPED = 0x100;
const NLM_F_ACK_TLVS = 0x200;
const IFLA_IFALIAS = 20;
const NLMSGERR_ATTR_MSG = 1;
const AF_INET = 2;
const AF_BRIDGE = 7;
const EINVAL = 22;
const ENODEV = 19;
const ERANGE = 34;

// ---------------------------------------------------------------------------
// Datagram assembly

function link(ifindex: number, ...attributes: Buffer[]): Buffer {
  return message(RTM_NEWLINK, Buffer.concat([ifinfomsg(ifindex), ...attributes]));
}

const MAC = Buffer.from([0x0e, 0x2a, 0x00, 0x00, 0x00, 0x01]);

const vxlanInfo = (...data: Buffer[]): Buffer =>
  nested(IFLA_LINKINFO, attr(IFLA_INFO_KIND, cstr('vxlan')), nested(IFLA_INFO_DATA, ...data));

// ---------------------------------------------------------------------------
// Result access

type Parsed = ReturnType<typeof binding.parseDatagram>;

function parse(bytes: Buffer): Parsed {
  return binding.parseDatagram(bytes);
}

function nth(parsed: Parsed, index: number): RawParsedMessage {
  const found = parsed.messages[index];
  assert.ok(found, `message ${index} missing: ${parsed.messages.length} parsed`);
  return found;
}

function linkOf(parsed: Parsed, index = 0): RawLink {
  const found = nth(parsed, index);
  assert.ok(found.link, `message ${index} is not a link: ${JSON.stringify(found)}`);
  return found.link;
}

function neighOf(parsed: Parsed, index = 0): RawNeighbour {
  const found = nth(parsed, index);
  assert.ok(found.neigh, `message ${index} is not a neighbour: ${JSON.stringify(found)}`);
  return found.neigh;
}

function malformedOf(parsed: Parsed, index = 0): string {
  const found = nth(parsed, index);
  assert.equal(typeof found.malformed, 'string', `message ${index}: ${JSON.stringify(found)}`);
  assert.equal(found.link, undefined);
  return found.malformed as string;
}

/** Offset of the first top-level attribute of `type` in a single link message. */
function linkAttributeOffset(datagram: Buffer, type: number): number {
  const end = datagram.readUInt32LE(0);
  for (let offset = 32; offset + 4 <= end;) {
    const length = datagram.readUInt16LE(offset);
    if ((datagram.readUInt16LE(offset + 2) & 0x3fff) === type) return offset;
    assert.ok(length >= 4, 'fixture attribute stream broken');
    offset += (length + 3) & ~3;
  }
  throw new Error(`attribute ${type} not in fixture`);
}

// ---------------------------------------------------------------------------

describe('parseDatagram: real datagrams captured from the kernel', () => {
  it('decodes a vxlan RTM_NEWLINK notification', () => {
    const parsed = parse(fixture('newlink-vxlan-event'));
    assert.equal(parsed.error, undefined);
    assert.equal(parsed.messages.length, 1);
    const only = nth(parsed, 0);
    assert.equal(only.type, RTM_NEWLINK);
    assert.equal(only.seq, 0);
    assert.equal(only.portid, 0);
    const vx0 = linkOf(parsed);
    assert.equal(vx0.deleted, false);
    assert.equal(vx0.ifindex, 4);
    assert.equal(vx0.name, 'vx0');
    assert.equal(vx0.nameTooLong, undefined);
    assert.equal(vx0.mac, '0e:2a:00:00:00:02');
    assert.equal(vx0.macError, undefined);
    assert.equal(vx0.deviceType, 1);
    assert.equal(vx0.mtu, 1450);
    assert.equal(vx0.kind, 'vxlan');
    assert.deepEqual(vx0.vxlan, {
      vni: 1,
      port: 8472,
      local: '10.0.0.1',
      underlayIfindex: 3,
      learning: false,
    });
  });

  it('decodes an RTM_DELLINK notification', () => {
    const gone = linkOf(parse(fixture('dellink-vxlan-event')));
    assert.equal(gone.deleted, true);
    assert.equal(gone.ifindex, 6);
    assert.equal(gone.name, 'vxtmp');
    assert.equal(gone.changeMask, 0xffffffff);
    assert.equal(gone.vxlan?.vni, 7);
  });

  it('decodes a link dump datagram and the NLMSG_DONE that ends it', () => {
    const parsed = parse(fixture('dump-links-vxlan'));
    assert.equal(parsed.error, undefined);
    assert.deepEqual(
      parsed.messages.map((m) => [m.seq, m.flags, m.link?.name, m.link?.vxlan?.vni]),
      [
        [101, NLM_F_MULTI, 'vx0', 1],
        [101, NLM_F_MULTI, 'vx6', 4097],
        [101, NLM_F_MULTI, 'vxtmp', 7],
      ],
    );
    assert.equal(linkOf(parsed, 1).vxlan?.local, 'fd00::1');
    assert.equal(linkOf(parsed, 1).vxlan?.port, 4789);
    const done = parse(fixture('dump-done'));
    assert.deepEqual(nth(done, 0).done, { error: 0 });
    assert.equal(nth(done, 0).type, NLMSG_DONE);
  });

  it('decodes neighbour and FDB dumps', () => {
    const neigh = parse(fixture('dump-neigh'));
    assert.equal(neigh.error, undefined);
    assert.equal(neigh.messages.length, 10);
    const first = neighOf(neigh, 0);
    assert.equal(first.family, AF_INET);
    assert.equal(first.destination, '10.244.1.0');
    assert.equal(first.lladdr, '0e:2a:00:00:01:01');
    const incomplete = neighOf(neigh, 1);
    assert.equal(incomplete.lladdr, null);
    assert.equal(incomplete.lladdrError, 'no link-layer address attribute');
    assert.deepEqual(nth(neigh, 9).done, { error: 0 });

    const fdb = parse(fixture('dump-fdb'));
    assert.equal(fdb.messages.length, 8);
    const route = neighOf(fdb, 7);
    assert.equal(route.family, AF_BRIDGE);
    assert.equal(route.ifindex, 4);
    assert.equal(route.lladdr, '00:00:00:00:00:00');
    assert.equal(route.destination, '10.0.0.2');
  });

  it('decodes error replies with extended ACK text, capped or not, and a plain ACK', () => {
    for (const name of ['error-extack', 'error-extack-capped']) {
      const reply = nth(parse(fixture(name)), 0);
      assert.equal(reply.type, NLMSG_ERROR);
      assert.ok(reply.flags & NLM_F_ACK_TLVS);
      assert.deepEqual(reply.ack, {
        error: -ERANGE,
        extack: 'VXLAN ID must be lower than 16777216',
      });
    }
    assert.deepEqual(nth(parse(fixture('ack')), 0).ack, { error: 0, extack: '' });
    assert.deepEqual(nth(parse(fixture('error-enodev')), 0).ack, { error: -ENODEV, extack: '' });
  });

  it('N7: the real vxlan link with a 5- or 7-byte IFLA_ADDRESS gives mac null and macError', () => {
    const original = fixture('newlink-vxlan-event');
    const at = linkAttributeOffset(original, IFLA_ADDRESS);
    assert.equal(original.readUInt16LE(at), 10);
    for (const [declared, payload] of [
      [9, 5],
      [11, 7],
    ] as const) {
      const mutated = Buffer.from(original);
      mutated.writeUInt16LE(declared, at); // same padded size: the stream stays aligned
      const vx0 = linkOf(parse(mutated));
      assert.equal(vx0.mac, null);
      assert.equal(vx0.macError, `link-layer address of ${payload} bytes, not 6`);
      // Everything else is still read.
      assert.equal(vx0.name, 'vx0');
      assert.equal(vx0.vxlan?.vni, 1);
    }
  });

  it('N6: the real datagram cut short is an error, never a partial link', () => {
    const original = fixture('newlink-vxlan-event');
    for (const length of [1, 15, 16, 17, 100, original.length - 1]) {
      const parsed = parse(original.subarray(0, length));
      assert.equal(parsed.messages.length, 0);
      assert.equal(parsed.error?.offset, 0);
      assert.equal(
        parsed.error?.reason,
        length < 16
          ? 'trailing bytes shorter than a netlink header'
          : 'nlmsg_len beyond the end of the datagram',
      );
    }
  });
});

describe('parseDatagram: N5 alignment', () => {
  it('parses an unaligned datagram whose last message is 133 bytes', () => {
    const last = messageUnpadded(
      RTM_NEWLINK,
      Buffer.concat([
        ifinfomsg(7),
        attr(IFLA_ADDRESS, MAC),
        attr(IFLA_MTU, u32(1450)),
        vxlanInfo(attr(IFLA_VXLAN_ID, u32(1)), attr(IFLA_VXLAN_PORT, be16(8472))),
        attr(IFLA_IFALIAS, Buffer.alloc(28, 'a')),
        attrUnpadded(IFLA_IFNAME, Buffer.from('flannel.1')),
      ]),
    );
    assert.equal(last.length, 133);
    const datagram = Buffer.concat([link(1, attr(IFLA_IFNAME, cstr('lo'))), last]);
    assert.notEqual(datagram.length % 4, 0);
    const parsed = parse(datagram);
    assert.equal(parsed.error, undefined);
    assert.equal(parsed.messages.length, 2);
    const flannel = linkOf(parsed, 1);
    assert.equal(flannel.name, 'flannel.1');
    assert.equal(flannel.mac, '0e:2a:00:00:00:01');
    assert.deepEqual(flannel.vxlan, { vni: 1, port: 8472 });
  });

  it('parses several messages with padding between them', () => {
    const parts: Buffer[] = [];
    for (let i = 1; i <= 5; i++) {
      parts.push(
        message(
          RTM_NEWLINK,
          Buffer.concat([ifinfomsg(i), attrUnpadded(IFLA_IFNAME, Buffer.from('x'.repeat(i)))]),
          NLM_F_MULTI,
          i,
        ),
      );
    }
    parts.push(message(NLMSG_DONE, u32(0), NLM_F_MULTI, 6));
    const parsed = parse(Buffer.concat(parts));
    assert.equal(parsed.error, undefined);
    assert.deepEqual(
      parsed.messages.map((m) => m.link?.name ?? m.done),
      ['x', 'xx', 'xxx', 'xxxx', 'xxxxx', { error: 0 }],
    );
  });
});

describe('parseDatagram: N6 bad message headers', () => {
  const good = link(2, attr(IFLA_IFNAME, cstr('vx0')));

  for (const length of [0, 1, 15]) {
    it(`nlmsg_len ${length}: error at its offset, earlier messages kept, no loop`, () => {
      const parsed = parse(Buffer.concat([good, header(length, RTM_NEWLINK), ifinfomsg(3)]));
      assert.equal(parsed.messages.length, 1);
      assert.equal(linkOf(parsed).name, 'vx0');
      assert.deepEqual(parsed.error, {
        offset: good.length,
        reason: 'nlmsg_len shorter than a netlink header',
      });
    });
  }

  it('nlmsg_len beyond the end of the datagram', () => {
    for (const length of [49, 4096, 0xffffffff]) {
      const parsed = parse(Buffer.concat([good, header(length, RTM_NEWLINK), ifinfomsg(3)]));
      assert.equal(parsed.messages.length, 1);
      assert.deepEqual(parsed.error, {
        offset: good.length,
        reason: 'nlmsg_len beyond the end of the datagram',
      });
    }
  });

  it('trailing bytes shorter than a header', () => {
    const parsed = parse(Buffer.concat([good, Buffer.alloc(12, 0x10)]));
    assert.equal(parsed.messages.length, 1);
    assert.deepEqual(parsed.error, {
      offset: good.length,
      reason: 'trailing bytes shorter than a netlink header',
    });
  });

  it('an empty datagram is no messages and no error', () => {
    assert.deepEqual(parse(Buffer.alloc(0)), { messages: [] });
  });

  it('rejects anything but a Buffer', () => {
    const untyped = binding.parseDatagram as unknown as (value: unknown) => unknown;
    assert.throws(() => untyped('not a buffer'), TypeError);
    assert.throws(() => untyped(undefined), TypeError);
  });
});

describe('parseDatagram: N7 attributes', () => {
  it('rta_len < 4 and rta_len beyond the message make the message malformed, not the datagram', () => {
    for (const declared of [0, 3, 12, 200]) {
      const parsed = parse(
        Buffer.concat([
          link(2, attr(IFLA_IFNAME, cstr('vx0')), attrDeclaring(declared, IFLA_MTU, u32(1500))),
          link(3, attr(IFLA_IFNAME, cstr('vx1'))),
        ]),
      );
      assert.equal(parsed.error, undefined);
      assert.equal(malformedOf(parsed, 0), 'bad attribute length in link message');
      assert.equal(linkOf(parsed, 1).name, 'vx1');
    }
  });

  it('truncated IFLA_LINKINFO and IFLA_INFO_DATA are malformed', () => {
    const badLinkinfo = link(
      4,
      attr(IFLA_LINKINFO | NLA_F_NESTED, attrDeclaring(40, IFLA_INFO_KIND, cstr('vxlan'))),
    );
    assert.equal(malformedOf(parse(badLinkinfo)), 'truncated IFLA_LINKINFO');
    const badData = link(
      4,
      vxlanInfo(attr(IFLA_VXLAN_ID, u32(1)), attrDeclaring(200, IFLA_VXLAN_PORT, be16(8472))),
    );
    assert.equal(malformedOf(parse(badData)), 'truncated IFLA_LINKINFO');
  });

  it('zero-length IFLA_IFNAME is an empty name', () => {
    const parsed = parse(link(5, attr(IFLA_IFNAME, Buffer.alloc(0)), attr(IFLA_ADDRESS, MAC)));
    assert.equal(linkOf(parsed).name, '');
    assert.equal(linkOf(parsed).mac, '0e:2a:00:00:00:01');
  });

  it('IFLA_IFNAME without NUL ends at the attribute end', () => {
    const parsed = parse(link(5, attr(IFLA_IFNAME, Buffer.from('vx0')), attr(IFLA_MTU, u32(1450))));
    assert.equal(linkOf(parsed).name, 'vx0');
    assert.equal(linkOf(parsed).mtu, 1450);
  });

  it('IFLA_IFNAME of 40 bytes is cut to 15 with nameTooLong', () => {
    const named = linkOf(parse(link(5, attr(IFLA_IFNAME, cstr('n'.repeat(40))))));
    assert.equal(named.name, 'n'.repeat(15));
    assert.equal(named.nameTooLong, true);
  });

  for (const length of [0, 4, 7, 20]) {
    it(`IFLA_ADDRESS of ${length} bytes: mac null plus macError, never a garbled MAC`, () => {
      const parsed = parse(
        link(6, attr(IFLA_IFNAME, cstr('vx0')), attr(IFLA_ADDRESS, Buffer.alloc(length, 0xab))),
      );
      const bad = linkOf(parsed);
      assert.equal(bad.mac, null);
      assert.equal(bad.macError, `link-layer address of ${length} bytes, not 6`);
      assert.equal(bad.name, 'vx0');
    });
  }

  it('a link without IFLA_ADDRESS says so', () => {
    const bare = linkOf(parse(link(6, attr(IFLA_IFNAME, cstr('vx0')))));
    assert.equal(bare.mac, null);
    assert.equal(bare.macError, 'no link-layer address attribute');
  });

  it('unknown attributes are ignored', () => {
    const parsed = parse(
      link(
        8,
        attr(0, Buffer.alloc(3, 1)),
        attr(999, Buffer.alloc(9, 2)),
        attr(0x7fff | NLA_F_NESTED, Buffer.alloc(5, 3)),
        attr(IFLA_IFNAME, cstr('vx0')),
        attr(IFLA_ADDRESS, MAC),
      ),
    );
    assert.equal(parsed.error, undefined);
    assert.equal(linkOf(parsed).name, 'vx0');
    assert.equal(linkOf(parsed).mac, '0e:2a:00:00:00:01');
  });

  it('IFLA_INFO_DATA before IFLA_INFO_KIND is still read as vxlan', () => {
    const parsed = parse(
      link(
        9,
        nested(
          IFLA_LINKINFO,
          nested(
            IFLA_INFO_DATA,
            attr(IFLA_VXLAN_ID, u32(7)),
            attr(IFLA_VXLAN_PORT, be16(4789)),
            attr(IFLA_VXLAN_LOCAL, Buffer.from([192, 168, 0, 9])),
            attr(IFLA_VXLAN_LEARNING, Buffer.from([1])),
          ),
          attr(IFLA_INFO_KIND, cstr('vxlan')),
        ),
      ),
    );
    const vx = linkOf(parsed);
    assert.equal(vx.kind, 'vxlan');
    assert.deepEqual(vx.vxlan, { vni: 7, port: 4789, local: '192.168.0.9', learning: true });
  });
});

describe('parseDatagram: N8 errors and dump ends', () => {
  it('NLMSG_ERROR shorter than nlmsgerr is malformed; the next message is read', () => {
    const parsed = parse(
      Buffer.concat([message(NLMSG_ERROR, Buffer.alloc(8)), message(NLMSG_DONE, u32(0))]),
    );
    assert.equal(parsed.error, undefined);
    assert.equal(malformedOf(parsed, 0), 'NLMSG_ERROR shorter than nlmsgerr');
    assert.deepEqual(nth(parsed, 1).done, { error: 0 });
  });

  it('an ext-ack TLV with a bad length keeps the errno and loses only the text', () => {
    const body = Buffer.concat([
      u32(-EINVAL),
      header(16, RTM_NEWLINK),
      attr(NLMSGERR_ATTR_MSG, cstr('first')),
      attrDeclaring(200, NLMSGERR_ATTR_MSG, cstr('second')),
    ]);
    const parsed = parse(message(NLMSG_ERROR, body, NLM_F_ACK_TLVS | NLM_F_CAPPED, 12));
    assert.equal(parsed.error, undefined);
    assert.deepEqual(nth(parsed, 0).ack, { error: -EINVAL, extack: '' });
  });

  it('an uncapped ext-ack after the echoed request is read', () => {
    const request = message(RTM_NEWLINK, Buffer.concat([ifinfomsg(4), attr(IFLA_ADDRESS, MAC)]));
    const body = Buffer.concat([
      u32(-EINVAL),
      request,
      attr(NLMSGERR_ATTR_MSG, cstr('Invalid address')),
    ]);
    assert.deepEqual(nth(parse(message(NLMSG_ERROR, body, NLM_F_ACK_TLVS)), 0).ack, {
      error: -EINVAL,
      extack: 'Invalid address',
    });
  });

  it('NLMSG_DONE with a 4-byte errno, and with no payload', () => {
    assert.deepEqual(nth(parse(message(NLMSG_DONE, u32(-4), NLM_F_MULTI)), 0).done, {
      error: -4,
    });
    assert.deepEqual(nth(parse(header(16, NLMSG_DONE, NLM_F_MULTI)), 0).done, { error: 0 });
  });
});

describe('parseDatagram: N16, neighbours, S13', () => {
  it('N16: IFLA_LINK_NETNSID is reported with IFLA_LINK', () => {
    const veth = linkOf(parse(link(4, attr(IFLA_LINK, u32(17)), attr(IFLA_LINK_NETNSID, u32(3)))));
    assert.equal(veth.lowerIfindex, 17);
    assert.equal(veth.linkNetnsid, 3);
  });

  it('a neighbour lladdr of the wrong length is null plus lladdrError', () => {
    const parsed = parse(
      message(
        RTM_NEWNEIGH,
        Buffer.concat([
          ndmsg(AF_BRIDGE, 4, 0x80, 2),
          attr(NDA_LLADDR, Buffer.alloc(7, 0xcd)),
          attr(NDA_DST, Buffer.from([10, 0, 0, 2])),
          attr(NDA_VNI, u32(4097)),
        ]),
      ),
    );
    const entry = neighOf(parsed);
    assert.equal(entry.lladdr, null);
    assert.equal(entry.lladdrError, 'link-layer address of 7 bytes, not 6');
    assert.equal(entry.destination, '10.0.0.2');
    assert.equal(entry.vni, 4097);
  });

  it('S13: a 64 KiB IFLA_IFNAME and a huge IFLA_IFALIAS stay bounded', () => {
    const started = process.hrtime.bigint();
    const parsed = parse(
      link(
        4,
        attr(IFLA_IFALIAS, Buffer.alloc(65000, 'A')),
        attr(IFLA_IFNAME, Buffer.alloc(65531, 'N')),
        attr(IFLA_ADDRESS, MAC),
      ),
    );
    const huge = linkOf(parsed);
    assert.equal(huge.name, 'N'.repeat(15));
    assert.equal(huge.nameTooLong, true);
    assert.equal(huge.mac, '0e:2a:00:00:00:01');
    assert.deepEqual(
      Object.keys(huge).filter((key) => /alias/i.test(key)),
      [],
    );
    assert.ok(Number(process.hrtime.bigint() - started) < 200e6, 'parsing took over 200 ms');
  });

  it('S13: a name with control characters and invalid UTF-8 becomes a bounded string', () => {
    const name = Buffer.concat([Buffer.from('a\nb\x1b[31m'), Buffer.from([0xff, 0xfe, 0x00])]);
    const odd = linkOf(parse(link(4, attr(IFLA_IFNAME, name))));
    assert.equal(typeof odd.name, 'string');
    assert.ok(odd.name.startsWith('a\nb\x1b[31m'));
    assert.ok(Buffer.byteLength(odd.name) <= 15 * 3); // at most 15 bytes, each at most U+FFFD
    assert.equal(odd.nameTooLong, undefined);
  });

  it('RTM_DELLINK is marked deleted and keeps portid', () => {
    const parsed = parse(
      message(
        RTM_DELLINK,
        Buffer.concat([ifinfomsg(9), attr(IFLA_IFNAME, cstr('vx9'))]),
        0,
        0,
        4242,
      ),
    );
    assert.equal(linkOf(parsed).deleted, true);
    assert.equal(nth(parsed, 0).portid, 4242);
  });
});
