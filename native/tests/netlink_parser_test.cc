// Unit tests for native/netlink_parser.cc on byte fixtures: datagrams assembled
// in code (nlmsghdr + ifinfomsg/ndmsg/nlmsgerr + attributes) and real datagrams
// captured from the kernel (test/fixtures/*.hex, shared with test/parser.test.ts).
// Every datagram is handed to the parser in a heap block of exactly its size, so
// under FG_SANITIZE=ON any read past its end is an ASan report.
//
// Coverage of docs/reliability.md:
//   N4  "parser: N4 ..."  Admit() rejects MSG_TRUNC before anything is parsed.
//   N5  "parser: N5 ..."  unaligned datagrams, a last message of 133 bytes, padding.
//   N6  "parser: N6 ..."  nlmsg_len < 16, == 0, > remaining, trailing bytes.
//   N7  "parser: N7 ..."  attribute lengths, nested LINKINFO/INFO_DATA, IFNAME, ADDRESS,
//       unknown attributes, attribute order, vxlan attributes.
//   N8  "parser: N8 ..."  NLMSG_ERROR / ext-ack TLVs (capped or not) / NLMSG_DONE.
//   N12 "parser: N12 ..." Admit() judges the sender by sockaddr nl_pid, not nlmsg_pid;
//       plus privileged checks that NetlinkSocket::Receive and MonitorCore really drop
//       such a datagram (S12: no item, no resync, only a counter).
//   N16 "parser: N16 ..." IFLA_LINK_NETNSID.
//   S12 = N12; S13 "parser: S13 ..." oversize IFLA_IFNAME / IFLA_IFALIAS.
//   and "parser: real ..." on fixtures captured from Linux 6.18.
#include "netlink_parser.h"

#include <linux/if_arp.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "monitor_core.h"
#include "netlink_socket.h"
#include "rtnl_bytes.h"
#include "test_harness.h"

namespace {

using fg::netlink::AckRecord;
using fg::netlink::Admission;
using fg::netlink::Admit;
using fg::netlink::DescribeMacProblem;
using fg::netlink::DoneRecord;
using fg::netlink::FormatMac;
using fg::netlink::LinkRecord;
using fg::netlink::MacField;
using fg::netlink::MalformedRecord;
using fg::netlink::MayNotifyLink;
using fg::netlink::Message;
using fg::netlink::NeighRecord;
using fg::netlink::ParseDatagram;
using fg::netlink::ParsedDatagram;

using namespace fg_test::rtnl;  // NOLINT: the byte builders

const Bytes kMac = {0x0e, 0x2a, 0x00, 0x00, 0x00, 0x01};

// Parses `bytes` from a heap block of exactly that size (ASan sees any overread).
ParsedDatagram Parse(const Bytes& bytes) {
  std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.empty() ? 1 : bytes.size()]);
  if (!bytes.empty()) std::memcpy(exact.get(), bytes.data(), bytes.size());
  return ParseDatagram(exact.get(), bytes.size());
}

// ---------------------------------------------------------------------------
// Result access

void Fail(const std::string& what, const char* file, int line) {
  throw fg_test::Failure(std::string(file) + ":" + std::to_string(line) + ": " + what);
}

const char* BodyName(const Message& message) {
  static const char* const kNames[] = {"nothing",   "LinkRecord", "NeighRecord",
                                       "AckRecord", "DoneRecord", "MalformedRecord"};
  return kNames[message.body.index()];
}

template <typename T>
const T& Body(const ParsedDatagram& parsed, size_t index, const char* file, int line) {
  if (index >= parsed.messages.size()) {
    Fail("message " + std::to_string(index) + " missing: only " +
             std::to_string(parsed.messages.size()) + " parsed",
         file, line);
  }
  const Message& message = parsed.messages[index];
  const T* body = std::get_if<T>(&message.body);
  if (!body) {
    std::string detail =
        std::string("message ") + std::to_string(index) + " is a " + BodyName(message);
    if (const auto* malformed = std::get_if<MalformedRecord>(&message.body)) {
      detail += " (" + malformed->reason + ")";
    }
    Fail(detail, file, line);
  }
  return *body;
}

#define BODY(T, parsed, index) Body<T>((parsed), (index), __FILE__, __LINE__)
#define EXPECT_MALFORMED(parsed, index) BODY(MalformedRecord, parsed, index)
#define EXPECT_NO_ERROR(parsed)                                                              \
  do {                                                                                       \
    if ((parsed).error) {                                                                    \
      Fail("unexpected datagram error at offset " + std::to_string((parsed).error->offset) + \
               ": " + (parsed).error->reason,                                                \
           __FILE__, __LINE__);                                                              \
    }                                                                                        \
  } while (0)

bool SameMac(const MacField& field, const Bytes& expected) {
  return field.state == MacField::State::kValid && expected.size() == 6 &&
         std::equal(field.bytes.begin(), field.bytes.end(), expected.begin());
}

// A real datagram from test/fixtures/NAME.hex (hex, '#' starts a comment).
Bytes Fixture(const std::string& name) {
  std::string path = __FILE__;
  path = path.substr(0, path.rfind('/')) + "/../../test/fixtures/" + name + ".hex";
  std::ifstream file(path);
  if (!file) throw fg_test::Failure("cannot open fixture " + path);
  Bytes bytes;
  std::string line;
  while (std::getline(file, line)) {
    line = line.substr(0, line.find('#'));
    std::string digits;
    for (char c : line) {
      if (!std::isspace(static_cast<unsigned char>(c))) digits.push_back(c);
    }
    if (digits.size() % 2 != 0) throw fg_test::Failure("odd hex line in " + path);
    for (size_t i = 0; i < digits.size(); i += 2) {
      bytes.push_back(static_cast<uint8_t>(std::stoul(digits.substr(i, 2), nullptr, 16)));
    }
  }
  return bytes;
}

// ---------------------------------------------------------------------------
// N5: alignment

TEST_CASE("parser: N5 unaligned datagram whose last message is 133 bytes") {
  // ifinfomsg (16) + 88 bytes of padded attributes + a 13-byte IFLA_IFNAME without
  // padding: nlmsg_len 133, and the datagram ends right there (mdlayher #280/#283).
  const Bytes attributes = Cat({
      Attr(IFLA_ADDRESS, kMac),                                    // 12
      Attr(IFLA_MTU, U32(1450)),                                   // 8
      Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr("vxlan")),  // 36
                             Nested(IFLA_INFO_DATA, {Attr(IFLA_VXLAN_ID, U32(1)),
                                                     Attr(IFLA_VXLAN_PORT, Be16(8472))})}),
      Attr(IFLA_IFALIAS, Fill(28, 'a')),            // 32
      AttrUnpadded(IFLA_IFNAME, Str("flannel.1")),  // 13
  });
  const Bytes last = MsgUnpadded(RTM_NEWLINK, Cat({IfInfo(7), attributes}));
  EXPECT_EQ(last.size(), 133u);
  const Bytes first = Link(1, Attr(IFLA_IFNAME, CStr("lo")));
  const Bytes datagram = Cat({first, last});
  EXPECT_TRUE(datagram.size() % 4 != 0);

  const ParsedDatagram parsed = Parse(datagram);
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 2u);
  EXPECT_EQ(BODY(LinkRecord, parsed, 0).name, "lo");
  const LinkRecord& link = BODY(LinkRecord, parsed, 1);
  EXPECT_EQ(link.ifindex, 7);
  EXPECT_EQ(link.name, "flannel.1");
  EXPECT_FALSE(link.nameTooLong);
  EXPECT_TRUE(SameMac(link.mac, kMac));
  EXPECT_EQ(link.mtu, 1450u);
  EXPECT_EQ(link.kind, "vxlan");
  EXPECT_TRUE(link.vxlan.has_value());
  EXPECT_EQ(link.vxlan->vni, 1u);
  EXPECT_EQ(link.vxlan->port, uint16_t{8472});
}

TEST_CASE("parser: N5 133-byte message followed by padding and another message") {
  const Bytes odd = MsgUnpadded(
      RTM_NEWLINK, Cat({IfInfo(9), Attr(IFLA_ADDRESS, kMac), Attr(IFLA_IFALIAS, Fill(72, 'b')),
                        AttrUnpadded(IFLA_IFNAME, Str("vxlan.100"))}));
  EXPECT_EQ(odd.size(), 133u);
  const Bytes datagram = Cat({odd, Fill(3, 0), Msg(NLMSG_DONE, U32(0), NLM_F_MULTI, 5)});
  EXPECT_EQ(datagram.size(), 156u);
  const ParsedDatagram parsed = Parse(datagram);
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 2u);
  EXPECT_EQ(BODY(LinkRecord, parsed, 0).name, "vxlan.100");
  EXPECT_EQ(BODY(DoneRecord, parsed, 1).error, 0);
  EXPECT_EQ(parsed.messages[1].seq, 5u);
}

TEST_CASE("parser: N5 several messages with NLMSG_ALIGN padding between them") {
  // Names of 1..7 bytes give every possible amount of attribute and message padding.
  Bytes datagram;
  for (int i = 1; i <= 7; ++i) {
    const std::string name(static_cast<size_t>(i), static_cast<char>('a' + i));
    datagram =
        Cat({datagram, Msg(RTM_NEWLINK, Cat({IfInfo(i), AttrUnpadded(IFLA_IFNAME, Str(name))}),
                           NLM_F_MULTI, static_cast<uint32_t>(100 + i))});
  }
  datagram = Cat({datagram, Msg(NLMSG_DONE, U32(0), NLM_F_MULTI, 200)});
  const ParsedDatagram parsed = Parse(datagram);
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 8u);
  for (int i = 1; i <= 7; ++i) {
    const LinkRecord& link = BODY(LinkRecord, parsed, static_cast<size_t>(i - 1));
    EXPECT_EQ(link.ifindex, i);
    EXPECT_EQ(link.name, std::string(static_cast<size_t>(i), static_cast<char>('a' + i)));
    EXPECT_EQ(parsed.messages[static_cast<size_t>(i - 1)].seq, static_cast<uint32_t>(100 + i));
    EXPECT_EQ(parsed.messages[static_cast<size_t>(i - 1)].flags, uint16_t{NLM_F_MULTI});
  }
  BODY(DoneRecord, parsed, 7);
}

TEST_CASE("parser: N5 unaligned last attribute inside an aligned message") {
  // rta_len 5 (one payload byte) and nlmsg_len covering only those 5 bytes.
  const Bytes datagram = MsgUnpadded(RTM_NEWLINK, Cat({IfInfo(3), Attr(IFLA_IFNAME, CStr("vx0")),
                                                       AttrUnpadded(IFLA_OPERSTATE, U8(6))}));
  EXPECT_EQ(datagram.size() % 4, 1u);
  const ParsedDatagram parsed = Parse(datagram);
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_EQ(link.operstate, uint8_t{6});
}

// ---------------------------------------------------------------------------
// N6: bad message headers

TEST_CASE("parser: N6 empty datagram has no messages and no error") {
  const ParsedDatagram parsed = Parse(Bytes{});
  EXPECT_EQ(parsed.messages.size(), 0u);
  EXPECT_FALSE(parsed.error.has_value());
}

TEST_CASE("parser: N6 nlmsg_len shorter than a header stops with an error, earlier kept") {
  for (uint32_t length : {1u, 4u, 15u}) {
    const Bytes good = Link(2, Attr(IFLA_IFNAME, CStr("vx0")));
    const Bytes datagram = Cat({good, Header(length, RTM_NEWLINK), IfInfo(3)});
    const ParsedDatagram parsed = Parse(datagram);
    EXPECT_EQ(parsed.messages.size(), 1u);
    EXPECT_EQ(BODY(LinkRecord, parsed, 0).name, "vx0");
    EXPECT_TRUE(parsed.error.has_value());
    EXPECT_EQ(parsed.error->offset, good.size());
    EXPECT_EQ(parsed.error->reason, "nlmsg_len shorter than a netlink header");
  }
}

TEST_CASE("parser: N6 nlmsg_len 0 is an error, not an infinite loop") {
  // A second copy after the bad one: the parser must not step over it with length 0.
  const Bytes zero = Cat({Header(0, RTM_NEWLINK), IfInfo(3)});
  const Bytes datagram = Cat({Msg(NLMSG_DONE, U32(0)), zero, zero, zero});
  const ParsedDatagram parsed = Parse(datagram);
  EXPECT_EQ(parsed.messages.size(), 1u);
  BODY(DoneRecord, parsed, 0);
  EXPECT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->offset, 20u);
  EXPECT_EQ(parsed.error->reason, "nlmsg_len shorter than a netlink header");

  const ParsedDatagram alone = Parse(Header(0, NLMSG_NOOP));
  EXPECT_EQ(alone.messages.size(), 0u);
  EXPECT_TRUE(alone.error.has_value());
  EXPECT_EQ(alone.error->offset, 0u);
}

TEST_CASE("parser: N6 nlmsg_len beyond the end of the datagram") {
  const Bytes good = Link(2, Attr(IFLA_IFNAME, CStr("vx0")));
  const Bytes body = Cat({IfInfo(3), Attr(IFLA_IFNAME, CStr("vx1"))});
  for (uint32_t extra : {1u, 4u, 4096u, 0xffffffffu - 16u - 32u}) {
    const Bytes datagram =
        Cat({good, Header(static_cast<uint32_t>(16 + body.size() + extra), RTM_NEWLINK), body});
    const ParsedDatagram parsed = Parse(datagram);
    EXPECT_EQ(parsed.messages.size(), 1u);
    EXPECT_EQ(BODY(LinkRecord, parsed, 0).name, "vx0");
    EXPECT_TRUE(parsed.error.has_value());
    EXPECT_EQ(parsed.error->offset, good.size());
    EXPECT_EQ(parsed.error->reason, "nlmsg_len beyond the end of the datagram");
  }
  // nlmsg_len = 0xffffffff as the first message.
  const ParsedDatagram huge = Parse(Cat({Header(0xffffffffu, RTM_NEWLINK), body}));
  EXPECT_EQ(huge.messages.size(), 0u);
  EXPECT_TRUE(huge.error.has_value());
  EXPECT_EQ(huge.error->offset, 0u);
}

TEST_CASE("parser: N6 trailing bytes shorter than a header") {
  const Bytes good = Link(2, Attr(IFLA_IFNAME, CStr("vx0")));
  for (size_t trailing : {1u, 4u, 8u, 15u}) {
    const ParsedDatagram parsed = Parse(Cat({good, Fill(trailing, 0x10)}));
    EXPECT_EQ(parsed.messages.size(), 1u);
    EXPECT_EQ(BODY(LinkRecord, parsed, 0).name, "vx0");
    EXPECT_TRUE(parsed.error.has_value());
    EXPECT_EQ(parsed.error->offset, good.size());
    EXPECT_EQ(parsed.error->reason, "trailing bytes shorter than a netlink header");
  }
  // Fewer than 16 bytes in all.
  const ParsedDatagram tiny = Parse(Fill(15, 0xff));
  EXPECT_EQ(tiny.messages.size(), 0u);
  EXPECT_TRUE(tiny.error.has_value());
  EXPECT_EQ(tiny.error->offset, 0u);
}

TEST_CASE("parser: N6 a header-only message is kept, with a body that says why") {
  // nlmsg_len == 16 for a link: the header is sound, the body is not.
  const ParsedDatagram parsed =
      Parse(Cat({Header(16, RTM_NEWLINK, 0, 9), Header(16, RTM_NEWNEIGH, 0, 10),
                 Header(16, NLMSG_DONE, NLM_F_MULTI, 11)}));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 3u);
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "link message shorter than ifinfomsg");
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 1).reason, "neighbour message shorter than ndmsg");
  EXPECT_EQ(BODY(DoneRecord, parsed, 2).error, 0);
  EXPECT_EQ(parsed.messages[0].seq, 9u);
}

TEST_CASE("parser: N6 message types not decoded keep their header and no body") {
  const ParsedDatagram parsed =
      Parse(Cat({Msg(NLMSG_NOOP, Bytes{}, 0, 1, 2), Msg(RTM_NEWADDR, Fill(24, 0xee), 0, 3, 4),
                 Msg(NLMSG_OVERRUN, Fill(4, 0)), Msg(0xffff, Fill(7, 1))}));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 4u);
  for (const Message& message : parsed.messages) {
    EXPECT_TRUE(std::holds_alternative<std::monostate>(message.body));
  }
  EXPECT_EQ(parsed.messages[1].type, uint16_t{RTM_NEWADDR});
  EXPECT_EQ(parsed.messages[1].seq, 3u);
  EXPECT_EQ(parsed.messages[1].portid, 4u);
  EXPECT_EQ(parsed.messages[3].type, uint16_t{0xffff});
}

// ---------------------------------------------------------------------------
// N7: attributes

TEST_CASE("parser: N7 rta_len shorter than 4 is a MalformedRecord") {
  for (uint16_t declared : {uint16_t{0}, uint16_t{1}, uint16_t{3}}) {
    const Bytes datagram = Cat({Link(2, Cat({Attr(IFLA_IFNAME, CStr("vx0")),
                                             AttrDeclaring(declared, IFLA_MTU, U32(1500))})),
                                Link(3, Attr(IFLA_IFNAME, CStr("vx1")))});
    const ParsedDatagram parsed = Parse(datagram);
    EXPECT_NO_ERROR(parsed);  // the next message is still read
    EXPECT_EQ(parsed.messages.size(), 2u);
    EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "bad attribute length in link message");
    EXPECT_EQ(BODY(LinkRecord, parsed, 1).name, "vx1");
  }
}

TEST_CASE("parser: N7 rta_len beyond the message is a MalformedRecord") {
  // The attribute claims 12 bytes where 8 remain.
  const ParsedDatagram parsed =
      Parse(Link(2, Cat({Attr(IFLA_IFNAME, CStr("vx0")), AttrDeclaring(12, IFLA_MTU, U32(1500))})));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "bad attribute length in link message");
}

TEST_CASE("parser: N7 rta_len reaching into the next message is a MalformedRecord") {
  // The attribute's declared length fits in the datagram but not in its message: it is
  // bounded by nlmsg_len, so the next message's bytes are never read as its payload.
  const Bytes first = Link(2, AttrDeclaring(64, IFLA_IFNAME, CStr("vx0")));
  const Bytes second =
      Link(3, Cat({Attr(IFLA_IFNAME, CStr("vx1")), Attr(IFLA_IFALIAS, Fill(64, 'z'))}));
  const ParsedDatagram parsed = Parse(Cat({first, second}));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 2u);
  EXPECT_MALFORMED(parsed, 0);
  EXPECT_EQ(BODY(LinkRecord, parsed, 1).name, "vx1");
}

TEST_CASE("parser: N7 1 to 3 stray bytes after the last attribute are a MalformedRecord") {
  for (size_t stray : {1u, 2u, 3u}) {
    const Bytes datagram =
        MsgUnpadded(RTM_NEWLINK, Cat({IfInfo(2), Attr(IFLA_IFNAME, CStr("vx0")), Fill(stray, 0)}));
    const ParsedDatagram parsed = Parse(datagram);
    EXPECT_NO_ERROR(parsed);
    EXPECT_MALFORMED(parsed, 0);
  }
}

TEST_CASE("parser: N7 truncated IFLA_LINKINFO is a MalformedRecord") {
  // IFLA_INFO_KIND inside LINKINFO claims more bytes than LINKINFO holds.
  const Bytes broken =
      Attr(IFLA_LINKINFO | NLA_F_NESTED, AttrDeclaring(40, IFLA_INFO_KIND, CStr("vxlan")));
  const ParsedDatagram parsed =
      Parse(Link(4, Cat({Attr(IFLA_IFNAME, CStr("vx0")), Attr(IFLA_ADDRESS, kMac), broken})));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "truncated IFLA_LINKINFO");

  // LINKINFO with 2 bytes of payload: too short for any nested attribute.
  const ParsedDatagram tiny = Parse(Link(4, Attr(IFLA_LINKINFO, Fill(2, 0))));
  EXPECT_EQ(EXPECT_MALFORMED(tiny, 0).reason, "truncated IFLA_LINKINFO");
}

TEST_CASE("parser: N7 truncated IFLA_INFO_DATA is a MalformedRecord") {
  const Bytes data =
      Attr(IFLA_INFO_DATA | NLA_F_NESTED,
           Cat({Attr(IFLA_VXLAN_ID, U32(1)), AttrDeclaring(200, IFLA_VXLAN_PORT, Be16(8472))}));
  const ParsedDatagram parsed = Parse(Link(
      4,
      Cat({Attr(IFLA_IFNAME, CStr("vx0")),
           Attr(IFLA_LINKINFO | NLA_F_NESTED, Cat({Attr(IFLA_INFO_KIND, CStr("vxlan")), data}))})));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "truncated IFLA_LINKINFO");

  // INFO_DATA with rta_len 2 inside.
  const Bytes data2 = Attr(IFLA_INFO_DATA, AttrDeclaring(2, IFLA_VXLAN_ID, U32(1)));
  const ParsedDatagram parsed2 =
      Parse(Link(4, Attr(IFLA_LINKINFO, Cat({data2, Attr(IFLA_INFO_KIND, CStr("vxlan"))}))));
  EXPECT_MALFORMED(parsed2, 0);
}

TEST_CASE("parser: N7 zero-length IFLA_IFNAME gives an empty name") {
  const ParsedDatagram parsed =
      Parse(Link(5, Cat({Attr(IFLA_IFNAME, Bytes{}), Attr(IFLA_ADDRESS, kMac)})));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "");
  EXPECT_FALSE(link.nameTooLong);
  EXPECT_TRUE(SameMac(link.mac, kMac));
  // An IFLA_IFNAME that is a lone NUL.
  EXPECT_EQ(BODY(LinkRecord, Parse(Link(5, Attr(IFLA_IFNAME, Bytes{0}))), 0).name, "");
}

TEST_CASE("parser: N7 IFLA_IFNAME without NUL ends at the attribute end") {
  // Followed by another attribute whose bytes must not leak into the name.
  const ParsedDatagram parsed = Parse(Link(
      5, Cat({AttrUnpadded(IFLA_IFNAME, Str("vx0")), Bytes{0x41}, Attr(IFLA_MTU, U32(1450))})));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_EQ(link.mtu, 1450u);
  // Exactly 15 bytes without NUL: kept whole.
  const ParsedDatagram fifteen = Parse(Link(5, Attr(IFLA_IFNAME, Str("abcdefghijklmno"))));
  EXPECT_EQ(BODY(LinkRecord, fifteen, 0).name, "abcdefghijklmno");
  EXPECT_FALSE(BODY(LinkRecord, fifteen, 0).nameTooLong);
}

TEST_CASE("parser: N7 IFLA_IFNAME stops at the first NUL") {
  const ParsedDatagram parsed =
      Parse(Link(5, Attr(IFLA_IFNAME, Cat({Str("vx0"), Bytes{0}, Str("garbage-after-nul")}))));
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_FALSE(link.nameTooLong);
}

TEST_CASE("parser: N7 IFLA_IFNAME of 40 bytes is cut to 15 with nameTooLong") {
  const std::string forty(40, 'n');
  const ParsedDatagram parsed = Parse(Link(5, Attr(IFLA_IFNAME, CStr(forty))));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, std::string(15, 'n'));
  EXPECT_EQ(link.name.size(), 15u);
  EXPECT_TRUE(link.nameTooLong);
  // 16 bytes without NUL is one too many; 15 + NUL is fine.
  const LinkRecord sixteen =
      BODY(LinkRecord, Parse(Link(5, Attr(IFLA_IFNAME, Str("abcdefghijklmnop")))), 0);
  EXPECT_EQ(sixteen.name, "abcdefghijklmno");
  EXPECT_TRUE(sixteen.nameTooLong);
  const LinkRecord ifnamsiz =
      BODY(LinkRecord, Parse(Link(5, Attr(IFLA_IFNAME, CStr("abcdefghijklmno")))), 0);
  EXPECT_EQ(ifnamsiz.name, "abcdefghijklmno");
  EXPECT_FALSE(ifnamsiz.nameTooLong);
}

TEST_CASE("parser: N7 IFLA_ADDRESS of length 0/4/7/20 is kBadLength, never a MAC") {
  for (size_t length : {0u, 1u, 4u, 5u, 7u, 8u, 16u, 20u, 32u}) {
    const Bytes address = Fill(length, 0xab);
    const ParsedDatagram parsed =
        Parse(Link(6, Cat({Attr(IFLA_IFNAME, CStr("vx0")), Attr(IFLA_ADDRESS, address),
                           Attr(IFLA_MTU, U32(1450))})));
    EXPECT_NO_ERROR(parsed);
    const LinkRecord& link = BODY(LinkRecord, parsed, 0);
    EXPECT_TRUE(link.mac.state == MacField::State::kBadLength);
    EXPECT_EQ(link.mac.length, static_cast<uint16_t>(length));
    // The bytes are left zeroed, not a prefix or a padded copy of the attribute.
    for (uint8_t byte : link.mac.bytes) EXPECT_EQ(byte, 0u);
    EXPECT_EQ(DescribeMacProblem(link.mac),
              "link-layer address of " + std::to_string(length) + " bytes, not 6");
    // The rest of the record is intact.
    EXPECT_EQ(link.name, "vx0");
    EXPECT_EQ(link.mtu, 1450u);
  }
}

TEST_CASE("parser: N7 IFLA_ADDRESS of 6 bytes is a valid MAC, absent is kAbsent") {
  const LinkRecord link = BODY(LinkRecord, Parse(Link(6, Attr(IFLA_ADDRESS, kMac))), 0);
  EXPECT_TRUE(link.mac.state == MacField::State::kValid);
  EXPECT_EQ(FormatMac(link.mac.bytes), "0e:2a:00:00:00:01");
  EXPECT_EQ(DescribeMacProblem(link.mac), "");

  const LinkRecord none = BODY(LinkRecord, Parse(Link(6, Attr(IFLA_IFNAME, CStr("x")))), 0);
  EXPECT_TRUE(none.mac.state == MacField::State::kAbsent);
  EXPECT_EQ(DescribeMacProblem(none.mac), "no link-layer address attribute");
}

TEST_CASE("parser: N7 FormatMac is lower-case, colon-separated, zero-padded") {
  EXPECT_EQ(FormatMac({0x00, 0x0a, 0xff, 0xAB, 0x10, 0x01}), "00:0a:ff:ab:10:01");
  EXPECT_EQ(FormatMac({0, 0, 0, 0, 0, 0}), "00:00:00:00:00:00");
}

TEST_CASE("parser: N7 unknown attributes are ignored") {
  const ParsedDatagram parsed = Parse(Link(
      8, Cat({Attr(0, Fill(3, 1)), Attr(999, Fill(9, 2)), Attr(0x7fff | NLA_F_NESTED, Fill(5, 3)),
              Attr(IFLA_IFNAME, CStr("vx0")), Attr(IFLA_STATS64, Fill(200, 4)),
              Attr(IFLA_AF_SPEC | NLA_F_NESTED, Attr(AF_INET, Fill(12, 5))),
              Attr(IFLA_ADDRESS, kMac), Attr(IFLA_BROADCAST, Fill(6, 0xff)), Attr(500, Bytes{})})));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_TRUE(SameMac(link.mac, kMac));
  EXPECT_FALSE(link.mtu.has_value());
  EXPECT_EQ(link.kind, "");
}

TEST_CASE("parser: N7 attribute type bits NLA_F_NESTED / NLA_F_NET_BYTEORDER are stripped") {
  const ParsedDatagram parsed = Parse(Link(
      8,
      Cat({Attr(IFLA_IFNAME | NLA_F_NET_BYTEORDER, CStr("vx0")),
           Attr(IFLA_LINKINFO, Cat({Attr(IFLA_INFO_KIND | NLA_F_NESTED, CStr("vxlan")),
                                    Attr(IFLA_INFO_DATA,
                                         Attr(IFLA_VXLAN_ID | NLA_F_NET_BYTEORDER, U32(42)))}))})));
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_EQ(link.kind, "vxlan");
  EXPECT_TRUE(link.vxlan.has_value());
  EXPECT_EQ(link.vxlan->vni, 42u);
}

TEST_CASE("parser: N7 IFLA_INFO_DATA before IFLA_INFO_KIND is still parsed as vxlan") {
  const Bytes linkinfo = Nested(
      IFLA_LINKINFO,
      {Nested(IFLA_INFO_DATA, {Attr(IFLA_VXLAN_ID, U32(7)), Attr(IFLA_VXLAN_PORT, Be16(4789)),
                               Attr(IFLA_VXLAN_LEARNING, U8(1))}),
       Attr(IFLA_INFO_KIND, CStr("vxlan"))});
  const LinkRecord link =
      BODY(LinkRecord, Parse(Link(9, Cat({Attr(IFLA_IFNAME, CStr("vx7")), linkinfo}))), 0);
  EXPECT_EQ(link.kind, "vxlan");
  EXPECT_TRUE(link.vxlan.has_value());
  EXPECT_EQ(link.vxlan->vni, 7u);
  EXPECT_EQ(link.vxlan->port, uint16_t{4789});
  EXPECT_EQ(link.vxlan->learning, true);
}

TEST_CASE("parser: N7 IFLA_INFO_DATA of another kind is not read as vxlan") {
  const Bytes linkinfo = Nested(
      IFLA_LINKINFO,
      {Attr(IFLA_INFO_KIND, CStr("veth")),
       // Bytes that would look like a VNI to a vxlan reader; and one broken
       // attribute, which is fine because the data of a kind we do not know
       // is never walked.
       Attr(IFLA_INFO_DATA, Cat({Attr(IFLA_VXLAN_ID, U32(5)), AttrDeclaring(99, 1, Bytes{})}))});
  const LinkRecord link = BODY(LinkRecord, Parse(Link(9, linkinfo)), 0);
  EXPECT_EQ(link.kind, "veth");
  EXPECT_FALSE(link.vxlan.has_value());
}

TEST_CASE("parser: N7 vxlan attributes: VNI, port to host order, local v4, link, learning") {
  const Bytes data = Nested(IFLA_INFO_DATA, {
                                                Attr(IFLA_VXLAN_ID, U32(0x00abcdef)),
                                                Attr(IFLA_VXLAN_LOCAL, Bytes{10, 0, 0, 1}),
                                                Attr(IFLA_VXLAN_LINK, U32(3)),
                                                Attr(IFLA_VXLAN_LEARNING, U8(0)),
                                                Attr(IFLA_VXLAN_TTL, U8(64)),
                                                Attr(IFLA_VXLAN_PORT, Be16(8472)),
                                            });
  const LinkRecord link = BODY(
      LinkRecord,
      Parse(Link(4, Cat({Attr(IFLA_IFNAME, CStr("flannel.1")),
                         Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr("vxlan")), data})}))),
      0);
  EXPECT_TRUE(link.vxlan.has_value());
  EXPECT_EQ(link.vxlan->vni, 0x00abcdefu);
  EXPECT_EQ(link.vxlan->port, uint16_t{8472});  // 0x2118 on the wire
  EXPECT_TRUE((link.vxlan->local == Bytes{10, 0, 0, 1}));
  EXPECT_EQ(link.vxlan->underlayIfindex, 3u);
  EXPECT_EQ(link.vxlan->learning, false);
}

TEST_CASE("parser: N7 vxlan local v6; short scalars and odd-sized addresses are absent") {
  const Bytes v6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Bytes data = Nested(IFLA_INFO_DATA, {
                                                Attr(IFLA_VXLAN_ID, U16(1)),         // short
                                                Attr(IFLA_VXLAN_PORT, U8(1)),        // short
                                                Attr(IFLA_VXLAN_LINK, Bytes{}),      // empty
                                                Attr(IFLA_VXLAN_LEARNING, Bytes{}),  // empty
                                                Attr(IFLA_VXLAN_LOCAL6, v6),
                                            });
  const LinkRecord link =
      BODY(LinkRecord,
           Parse(Link(4, Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr("vxlan")), data}))), 0);
  EXPECT_TRUE(link.vxlan.has_value());
  EXPECT_FALSE(link.vxlan->vni.has_value());
  EXPECT_FALSE(link.vxlan->port.has_value());
  EXPECT_FALSE(link.vxlan->underlayIfindex.has_value());
  EXPECT_FALSE(link.vxlan->learning.has_value());
  EXPECT_TRUE(link.vxlan->local == v6);

  const Bytes odd = Nested(IFLA_INFO_DATA, {Attr(IFLA_VXLAN_LOCAL, Bytes{10, 0, 0})});
  const LinkRecord oddLink =
      BODY(LinkRecord,
           Parse(Link(4, Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr("vxlan")), odd}))), 0);
  EXPECT_TRUE(oddLink.vxlan->local.empty());
}

TEST_CASE("parser: N7 link scalars shorter than their type are absent, not garbage") {
  const LinkRecord link =
      BODY(LinkRecord,
           Parse(Link(4, Cat({Attr(IFLA_MTU, U16(1500)), Attr(IFLA_MASTER, Bytes{1}),
                              Attr(IFLA_LINK, Bytes{}), Attr(IFLA_OPERSTATE, Bytes{}),
                              Attr(IFLA_EVENT, U16(1)), Attr(IFLA_LINK_NETNSID, Fill(3, 0))}))),
           0);
  EXPECT_FALSE(link.mtu.has_value());
  EXPECT_FALSE(link.master.has_value());
  EXPECT_FALSE(link.lowerIfindex.has_value());
  EXPECT_FALSE(link.operstate.has_value());
  EXPECT_FALSE(link.event.has_value());
  EXPECT_FALSE(link.linkNetnsid.has_value());
}

TEST_CASE("parser: N7 ifinfomsg fields and RTM_DELLINK") {
  const Bytes body = Cat({IfInfo(12, 0x11043, 0xffffffffu, ARPHRD_ETHER),
                          Attr(IFLA_IFNAME, CStr("vx0")), Attr(IFLA_MASTER, U32(2)),
                          Attr(IFLA_LINK, U32(3)), Attr(IFLA_EVENT, U32(IFLA_EVENT_FEATURES))});
  const ParsedDatagram parsed =
      Parse(Cat({Msg(RTM_NEWLINK, body, 0, 0, 0), Msg(RTM_DELLINK, body, 0, 0, 777)}));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& added = BODY(LinkRecord, parsed, 0);
  EXPECT_FALSE(added.deleted);
  EXPECT_EQ(added.ifindex, 12);
  EXPECT_EQ(added.flags, 0x11043u);
  EXPECT_EQ(added.changeMask, 0xffffffffu);
  EXPECT_EQ(added.deviceType, uint16_t{ARPHRD_ETHER});
  EXPECT_EQ(added.master, 2u);
  EXPECT_EQ(added.lowerIfindex, 3u);
  EXPECT_EQ(added.event, uint32_t{IFLA_EVENT_FEATURES});
  EXPECT_FALSE(added.linkNetnsid.has_value());
  EXPECT_TRUE(BODY(LinkRecord, parsed, 1).deleted);
  EXPECT_EQ(parsed.messages[1].portid, 777u);
}

TEST_CASE("parser: N7 link message shorter than ifinfomsg is a MalformedRecord") {
  const ParsedDatagram parsed =
      Parse(Cat({Msg(RTM_NEWLINK, Fill(15, 0)), Link(3, Attr(IFLA_IFNAME, CStr("vx1")))}));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "link message shorter than ifinfomsg");
  EXPECT_EQ(BODY(LinkRecord, parsed, 1).name, "vx1");
}

TEST_CASE("parser: N7 IFLA_INFO_KIND is bounded and stops at NUL") {
  const LinkRecord link = BODY(
      LinkRecord,
      Parse(Link(4, Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr(std::string(300, 'k')))}))),
      0);
  EXPECT_TRUE(link.kind.size() <= 32u);
  EXPECT_FALSE(link.vxlan.has_value());
  const LinkRecord nul =
      BODY(LinkRecord,
           Parse(Link(
               4, Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, Cat({CStr("vxlan"), Str("xx")}))}))),
           0);
  EXPECT_EQ(nul.kind, "vxlan");
}

// ---------------------------------------------------------------------------
// N8: errors, ACKs, dump ends

TEST_CASE("parser: N8 NLMSG_ERROR shorter than nlmsgerr is a MalformedRecord") {
  for (size_t body : {0u, 4u, 19u}) {
    const ParsedDatagram parsed =
        Parse(Cat({Msg(NLMSG_ERROR, Fill(body, 0)), Msg(NLMSG_DONE, U32(0))}));
    EXPECT_NO_ERROR(parsed);
    EXPECT_EQ(parsed.messages.size(), 2u);
    EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "NLMSG_ERROR shorter than nlmsgerr");
    BODY(DoneRecord, parsed, 1);
  }
}

TEST_CASE("parser: N8 ACK (error 0) and plain error without TLVs") {
  const Bytes echoed = Header(32, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 77, 0);
  const ParsedDatagram parsed =
      Parse(Cat({Msg(NLMSG_ERROR, NlmsgErr(0, echoed), NLM_F_CAPPED, 77, 4242),
                 Msg(NLMSG_ERROR, NlmsgErr(-EPERM, echoed), NLM_F_CAPPED, 78, 4242)}));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(BODY(AckRecord, parsed, 0).error, 0);
  EXPECT_EQ(BODY(AckRecord, parsed, 0).extackMessage, "");
  EXPECT_EQ(BODY(AckRecord, parsed, 1).error, -EPERM);
  EXPECT_EQ(parsed.messages[0].seq, 77u);
  EXPECT_EQ(parsed.messages[0].portid, 4242u);
}

TEST_CASE("parser: N8 error with ext-ack TLV and the whole request echoed (not capped)") {
  // The echoed request: header + ifinfomsg + one attribute (40 bytes); TLVs follow it.
  const Bytes request =
      Msg(RTM_NEWLINK, Cat({IfInfo(4), Attr(IFLA_ADDRESS, kMac)}), NLM_F_REQUEST | NLM_F_ACK, 12);
  EXPECT_EQ(request.size(), 44u);
  const Bytes body = Cat({U32(static_cast<uint32_t>(-EINVAL)), request,
                          Attr(NLMSGERR_ATTR_MSG, CStr("Invalid address length")),
                          Attr(NLMSGERR_ATTR_OFFS, U32(32))});
  const ParsedDatagram parsed = Parse(Msg(NLMSG_ERROR, body, NLM_F_ACK_TLVS, 12, 99));
  EXPECT_NO_ERROR(parsed);
  const AckRecord& ack = BODY(AckRecord, parsed, 0);
  EXPECT_EQ(ack.error, -EINVAL);
  EXPECT_EQ(ack.extackMessage, "Invalid address length");
}

TEST_CASE("parser: N8 ext-ack TLVs follow an unaligned echoed request at its aligned end") {
  // The request echoed back had nlmsg_len 42 (not a multiple of 4): the kernel pads the
  // copy to 44 before the TLVs, so the text starts at 4 + NLMSG_ALIGN(42).
  const Bytes request = MsgUnpadded(RTM_NEWLINK, Cat({IfInfo(4), AttrUnpadded(IFLA_ADDRESS, kMac)}),
                                    NLM_F_REQUEST | NLM_F_ACK, 12);
  EXPECT_EQ(request.size(), 42u);
  const Bytes body = Cat({U32(static_cast<uint32_t>(-EINVAL)), Pad(request),
                          Attr(NLMSGERR_ATTR_MSG, CStr("aligned text"))});
  const ParsedDatagram parsed = Parse(Msg(NLMSG_ERROR, body, NLM_F_ACK_TLVS, 12));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(BODY(AckRecord, parsed, 0).error, -EINVAL);
  EXPECT_EQ(BODY(AckRecord, parsed, 0).extackMessage, "aligned text");
}

TEST_CASE("parser: N8 error with ext-ack TLV and NLM_F_CAPPED") {
  const Bytes echoed = Header(44, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 12, 0);
  const Bytes body =
      Cat({NlmsgErr(-ENODEV, echoed), Attr(NLMSGERR_ATTR_MSG, CStr("no such device"))});
  const ParsedDatagram parsed = Parse(Msg(NLMSG_ERROR, body, NLM_F_ACK_TLVS | NLM_F_CAPPED, 12));
  const AckRecord& ack = BODY(AckRecord, parsed, 0);
  EXPECT_EQ(ack.error, -ENODEV);
  EXPECT_EQ(ack.extackMessage, "no such device");
}

TEST_CASE("parser: N8 ext-ack TLV with a bad length keeps the error, loses the text") {
  const Bytes echoed = Header(16, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 12, 0);
  for (uint16_t declared : {uint16_t{0}, uint16_t{2}, uint16_t{200}}) {
    const Bytes body = Cat({NlmsgErr(-EINVAL, echoed), Attr(NLMSGERR_ATTR_MSG, CStr("first")),
                            AttrDeclaring(declared, NLMSGERR_ATTR_MSG, CStr("second"))});
    const ParsedDatagram parsed = Parse(
        Cat({Msg(NLMSG_ERROR, body, NLM_F_ACK_TLVS | NLM_F_CAPPED, 12), Msg(NLMSG_DONE, U32(0))}));
    EXPECT_NO_ERROR(parsed);
    EXPECT_EQ(parsed.messages.size(), 2u);
    const AckRecord& ack = BODY(AckRecord, parsed, 0);
    EXPECT_EQ(ack.error, -EINVAL);
    EXPECT_EQ(ack.extackMessage, "");
  }
  // Uncapped, with an echoed nlmsg_len that points past the message: the text is lost too.
  for (uint32_t echoedLength : {0u, 8u, 4096u, 0xffffffffu}) {
    const Bytes body = Cat({NlmsgErr(-EINVAL, Header(echoedLength, RTM_NEWLINK)),
                            Attr(NLMSGERR_ATTR_MSG, CStr("text"))});
    const ParsedDatagram parsed = Parse(Msg(NLMSG_ERROR, body, NLM_F_ACK_TLVS, 12));
    EXPECT_NO_ERROR(parsed);
    const AckRecord& ack = BODY(AckRecord, parsed, 0);
    EXPECT_EQ(ack.error, -EINVAL);
    EXPECT_EQ(ack.extackMessage, "");
  }
}

TEST_CASE("parser: N8 ext-ack flag without TLVs, and TLVs without the flag") {
  const Bytes echoed = Header(16, RTM_NEWLINK);
  const ParsedDatagram bare =
      Parse(Msg(NLMSG_ERROR, NlmsgErr(-EBUSY, echoed), NLM_F_ACK_TLVS | NLM_F_CAPPED));
  EXPECT_EQ(BODY(AckRecord, bare, 0).error, -EBUSY);
  EXPECT_EQ(BODY(AckRecord, bare, 0).extackMessage, "");
  // Without NLM_F_ACK_TLVS the bytes after nlmsgerr are not TLVs.
  const ParsedDatagram unflagged = Parse(
      Msg(NLMSG_ERROR, Cat({NlmsgErr(-EBUSY, echoed), Attr(NLMSGERR_ATTR_MSG, CStr("ignored"))}),
          NLM_F_CAPPED));
  EXPECT_EQ(BODY(AckRecord, unflagged, 0).extackMessage, "");
}

TEST_CASE("parser: N8 ext-ack text without NUL, and an overlong text, are bounded") {
  const Bytes echoed = Header(16, RTM_NEWLINK);
  const ParsedDatagram plain = Parse(Msg(
      NLMSG_ERROR, Cat({NlmsgErr(-EINVAL, echoed), Attr(NLMSGERR_ATTR_MSG, Str("no terminator"))}),
      NLM_F_ACK_TLVS | NLM_F_CAPPED));
  EXPECT_EQ(BODY(AckRecord, plain, 0).extackMessage, "no terminator");
  const ParsedDatagram longText = Parse(
      Msg(NLMSG_ERROR,
          Cat({NlmsgErr(-EINVAL, echoed), Attr(NLMSGERR_ATTR_MSG, CStr(std::string(5000, 'x')))}),
          NLM_F_ACK_TLVS | NLM_F_CAPPED));
  const AckRecord& ack = BODY(AckRecord, longText, 0);
  EXPECT_EQ(ack.error, -EINVAL);
  EXPECT_TRUE(ack.extackMessage.size() <= 256u);
  EXPECT_TRUE(ack.extackMessage.size() > 0u);
}

TEST_CASE("parser: N8 NLMSG_DONE with a 4-byte errno") {
  const ParsedDatagram parsed =
      Parse(Msg(NLMSG_DONE, U32(static_cast<uint32_t>(-EINTR)), NLM_F_MULTI, 3));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(BODY(DoneRecord, parsed, 0).error, -EINTR);
  EXPECT_EQ(parsed.messages[0].flags, uint16_t{NLM_F_MULTI});
}

TEST_CASE("parser: N8 NLMSG_DONE with no payload, or fewer than 4 bytes, is success") {
  const ParsedDatagram parsed = Parse(Cat(
      {Header(16, NLMSG_DONE, NLM_F_MULTI, 1), Msg(NLMSG_DONE, Fill(3, 0xff), NLM_F_MULTI, 2)}));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 2u);
  EXPECT_EQ(BODY(DoneRecord, parsed, 0).error, 0);
  EXPECT_EQ(BODY(DoneRecord, parsed, 1).error, 0);
}

// ---------------------------------------------------------------------------
// N16

TEST_CASE("parser: N16 IFLA_LINK_NETNSID is recorded with IFLA_LINK") {
  const LinkRecord link =
      BODY(LinkRecord,
           Parse(Link(4, Cat({Attr(IFLA_IFNAME, CStr("veth0")), Attr(IFLA_LINK, U32(17)),
                              Attr(IFLA_LINK_NETNSID, U32(3))}))),
           0);
  EXPECT_EQ(link.lowerIfindex, 17u);
  EXPECT_EQ(link.linkNetnsid, 3);
  const LinkRecord negative =
      BODY(LinkRecord, Parse(Link(4, Attr(IFLA_LINK_NETNSID, U32(static_cast<uint32_t>(-1))))), 0);
  EXPECT_EQ(negative.linkNetnsid, -1);
}

// ---------------------------------------------------------------------------
// N12 / N4: admission from socket metadata

TEST_CASE("parser: N12 Admit drops a user-space sender even if its nlmsg_pid says 0") {
  // The datagram claims to come from the kernel in its header...
  const ParsedDatagram spoofed = Parse(Link(4, Attr(IFLA_ADDRESS, kMac)));
  EXPECT_EQ(spoofed.messages[0].portid, 0u);
  // ...but the sockaddr names port 4242: dropped before parsing.
  EXPECT_TRUE(Admit(4242, 0) == Admission::kForeignSender);
  EXPECT_TRUE(Admit(1, 0) == Admission::kForeignSender);
  EXPECT_TRUE(Admit(0xffffffffu, MSG_DONTWAIT) == Admission::kForeignSender);
  EXPECT_TRUE(Admit(0x80000000u, 0) == Admission::kForeignSender);
}

TEST_CASE("parser: N12 Admit accepts the kernel whatever nlmsg_pid the messages carry") {
  // Notifications caused by a request carry the requester's port id in nlmsg_pid.
  const ParsedDatagram parsed =
      Parse(Msg(RTM_NEWNEIGH, NdMsg(AF_INET, 4, NUD_PERMANENT), 0, 0, 31337));
  EXPECT_EQ(parsed.messages[0].portid, 31337u);
  EXPECT_TRUE(Admit(0, 0) == Admission::kAccept);
  EXPECT_TRUE(Admit(0, MSG_EOR | MSG_CMSG_CLOEXEC) == Admission::kAccept);
}

TEST_CASE("parser: N4 Admit refuses a datagram flagged MSG_TRUNC") {
  EXPECT_TRUE(Admit(0, MSG_TRUNC) == Admission::kTruncated);
  EXPECT_TRUE(Admit(0, MSG_TRUNC | MSG_EOR) == Admission::kTruncated);
  // Either way it is never accepted.
  EXPECT_FALSE(Admit(77, MSG_TRUNC) == Admission::kAccept);
}

TEST_CASE("parser: N12 NetlinkSocket::Receive drops a datagram from a user-space sender") {
  // Needs CAP_NET_ADMIN (a NETLINK_ROUTE unicast between user sockets); the test suite
  // runs as root. Sockets only: no interface is created or changed.
  fg::Result<fg::NetlinkSocket> receiver = fg::NetlinkSocket::Open(fg::NetnsTarget{}, {});
  EXPECT_TRUE(receiver.ok());
  const int sender = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  EXPECT_TRUE(sender >= 0);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closeSender{sender};
  sockaddr_nl self{};
  self.nl_family = AF_NETLINK;
  EXPECT_EQ(bind(sender, reinterpret_cast<sockaddr*>(&self), sizeof(self)), 0);

  // A datagram that looks like a kernel notification (nlmsg_pid 0), larger than 64 KiB
  // so that Receive has to size its buffer from the peek.
  const Bytes spoof =
      Link(4, Cat({Attr(IFLA_IFNAME, CStr("flannel.1")), Attr(IFLA_ADDRESS, kMac)}));
  const Bytes big =
      Cat({spoof, Msg(RTM_NEWLINK, Cat({IfInfo(5), Attr(IFLA_IFALIAS, Fill(60000, 'q')),
                                        Attr(IFLA_IFALIAS, Fill(20000, 'r'))}))});
  sockaddr_nl to{};
  to.nl_family = AF_NETLINK;
  to.nl_pid = receiver.value().portid();
  for (const Bytes* datagram : {&spoof, &big}) {
    const ssize_t sent = sendto(sender, datagram->data(), datagram->size(), 0,
                                reinterpret_cast<sockaddr*>(&to), sizeof(to));
    if (sent < 0) {
      throw fg_test::Failure(std::string("sendto between netlink sockets failed (") +
                             std::strerror(errno) + "): this test needs CAP_NET_ADMIN");
    }
  }
  EXPECT_TRUE(receiver.value().WaitReadable(1000).value());
  std::vector<uint8_t> buffer;
  for (int i = 0; i < 2; ++i) {
    size_t length = 12345;
    fg::Result<fg::NetlinkSocket::Received> received = receiver.value().Receive(&buffer, &length);
    EXPECT_TRUE(received.ok());
    EXPECT_TRUE(received.value() == fg::NetlinkSocket::Received::kForeignSender);
    EXPECT_EQ(length, 12345u);  // nothing handed out
  }
  size_t length = 0;
  fg::Result<fg::NetlinkSocket::Received> empty = receiver.value().Receive(&buffer, &length);
  EXPECT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value() == fg::NetlinkSocket::Received::kWouldBlock);
}

TEST_CASE("parser: S12 MonitorCore drops a spoofed RTM_NEWLINK: no item, counted") {
  // A privileged user-space process unicasts a fake "MAC changed" notification to the
  // monitor's socket. It must not become a LinkItem (which could trigger a MAC write).
  fg::MonitorOptions options;
  options.neighbours = fg::NeighbourScope::kNone;
  fg::Result<std::unique_ptr<fg::MonitorCore>> opened = fg::MonitorCore::Open(options);
  EXPECT_TRUE(opened.ok());
  fg::MonitorCore& monitor = *opened.value();
  sockaddr_nl bound{};
  socklen_t boundLength = sizeof(bound);
  EXPECT_EQ(getsockname(monitor.fd(), reinterpret_cast<sockaddr*>(&bound), &boundLength), 0);

  const int sender = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  EXPECT_TRUE(sender >= 0);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closeSender{sender};
  const Bytes spoof = Link(4242, Cat({Attr(IFLA_IFNAME, CStr("flannel.1")),
                                      Attr(IFLA_ADDRESS, Bytes{0x02, 0xba, 0xdb, 0xad, 0, 1})}));
  sockaddr_nl to{};
  to.nl_family = AF_NETLINK;
  to.nl_pid = bound.nl_pid;
  if (sendto(sender, spoof.data(), spoof.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) <
      0) {
    throw fg_test::Failure(std::string("sendto between netlink sockets failed (") +
                           std::strerror(errno) + "): this test needs CAP_NET_ADMIN");
  }
  std::vector<fg::MonitorItem> items;
  for (int round = 0; round < 20 && monitor.stats().foreignSenderDrops == 0; ++round) {
    monitor.ReadAvailable(64, 0, &items);
    if (monitor.stats().foreignSenderDrops == 0) usleep(10 * 1000);
  }
  EXPECT_EQ(monitor.stats().foreignSenderDrops, 1u);
  EXPECT_FALSE(monitor.failed());
  // Real notifications from this namespace may arrive meanwhile; none may be the spoof.
  for (const fg::MonitorItem& item : items) {
    if (const auto* link = std::get_if<fg::LinkItem>(&item)) {
      EXPECT_FALSE(link->ifindex == 4242);
      EXPECT_FALSE(link->change && link->change->link.name == "flannel.1" &&
                   link->change->link.mac.bytes[1] == 0xba);
    }
  }
}

// ---------------------------------------------------------------------------
// Neighbours

TEST_CASE("parser: neighbour NDA_DST v4 and NDA_LLADDR") {
  const ParsedDatagram parsed =
      Parse(Neigh(NdMsg(AF_INET, 4, NUD_PERMANENT, 0, RTN_UNICAST),
                  Cat({Attr(NDA_DST, Bytes{10, 244, 1, 0}), Attr(NDA_LLADDR, kMac),
                       Attr(NDA_PROBES, U32(0)), Attr(NDA_CACHEINFO, Fill(16, 0))})));
  EXPECT_NO_ERROR(parsed);
  const NeighRecord& neigh = BODY(NeighRecord, parsed, 0);
  EXPECT_FALSE(neigh.deleted);
  EXPECT_EQ(neigh.family, uint8_t{AF_INET});
  EXPECT_EQ(neigh.ifindex, 4);
  EXPECT_EQ(neigh.state, uint16_t{NUD_PERMANENT});
  EXPECT_EQ(neigh.type, uint8_t{RTN_UNICAST});
  EXPECT_TRUE((neigh.destination == Bytes{10, 244, 1, 0}));
  EXPECT_TRUE(SameMac(neigh.lladdr, kMac));
  EXPECT_FALSE(neigh.vni.has_value());
  EXPECT_FALSE(neigh.master.has_value());
}

TEST_CASE("parser: neighbour NDA_DST v6 and RTM_DELNEIGH") {
  const Bytes v6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  const ParsedDatagram parsed =
      Parse(Neigh(NdMsg(AF_INET6, 3, NUD_REACHABLE, NTF_ROUTER),
                  Cat({Attr(NDA_DST, v6), Attr(NDA_LLADDR, kMac)}), RTM_DELNEIGH));
  const NeighRecord& neigh = BODY(NeighRecord, parsed, 0);
  EXPECT_TRUE(neigh.deleted);
  EXPECT_EQ(neigh.family, uint8_t{AF_INET6});
  EXPECT_EQ(neigh.flags, uint8_t{NTF_ROUTER});
  EXPECT_EQ(neigh.state, uint16_t{NUD_REACHABLE});
  EXPECT_TRUE(neigh.destination == v6);
}

TEST_CASE("parser: neighbour NDA_DST of another length is empty") {
  for (size_t length : {0u, 3u, 5u, 6u, 15u, 17u}) {
    const NeighRecord neigh =
        BODY(NeighRecord,
             Parse(Neigh(NdMsg(AF_INET, 4, NUD_PERMANENT), Attr(NDA_DST, Fill(length, 9)))), 0);
    EXPECT_TRUE(neigh.destination.empty());
  }
}

TEST_CASE("parser: neighbour NDA_LLADDR of a bad length is kBadLength, absent is kAbsent") {
  for (size_t length : {0u, 4u, 7u, 20u}) {
    const NeighRecord neigh = BODY(
        NeighRecord,
        Parse(Neigh(NdMsg(AF_INET, 4, NUD_PERMANENT), Cat({Attr(NDA_LLADDR, Fill(length, 0xcd)),
                                                           Attr(NDA_DST, Bytes{10, 0, 0, 2})}))),
        0);
    EXPECT_TRUE(neigh.lladdr.state == MacField::State::kBadLength);
    EXPECT_EQ(neigh.lladdr.length, static_cast<uint16_t>(length));
    EXPECT_EQ(DescribeMacProblem(neigh.lladdr),
              "link-layer address of " + std::to_string(length) + " bytes, not 6");
    EXPECT_TRUE((neigh.destination == Bytes{10, 0, 0, 2}));
  }
  const NeighRecord incomplete =
      BODY(NeighRecord,
           Parse(Neigh(NdMsg(AF_INET, 4, NUD_INCOMPLETE), Attr(NDA_DST, Bytes{10, 0, 0, 2}))), 0);
  EXPECT_TRUE(incomplete.lladdr.state == MacField::State::kAbsent);
}

TEST_CASE("parser: neighbour NDA_VNI and NDA_MASTER") {
  const NeighRecord neigh =
      BODY(NeighRecord,
           Parse(Neigh(
               NdMsg(AF_BRIDGE, 4, NUD_PERMANENT, NTF_SELF),
               Cat({Attr(NDA_LLADDR, kMac), Attr(NDA_VNI, U32(4097)), Attr(NDA_MASTER, U32(9))}))),
           0);
  EXPECT_EQ(neigh.vni, 4097u);
  EXPECT_EQ(neigh.master, 9u);
  // Short scalars are absent.
  const NeighRecord shortOnes =
      BODY(NeighRecord,
           Parse(Neigh(NdMsg(AF_BRIDGE, 4, NUD_PERMANENT),
                       Cat({Attr(NDA_VNI, U16(1)), Attr(NDA_MASTER, Bytes{})}))),
           0);
  EXPECT_FALSE(shortOnes.vni.has_value());
  EXPECT_FALSE(shortOnes.master.has_value());
}

TEST_CASE("parser: neighbour AF_BRIDGE FDB entry (flannel's all-zero default route)") {
  // bridge fdb append 00:00:00:00:00:00 dev flannel.1 dst 10.0.0.2 self permanent
  const NeighRecord fdb =
      BODY(NeighRecord,
           Parse(Neigh(NdMsg(AF_BRIDGE, 4, NUD_PERMANENT | NUD_NOARP, NTF_SELF, RTN_UNICAST),
                       Cat({Attr(NDA_LLADDR, Fill(6, 0)), Attr(NDA_DST, Bytes{10, 0, 0, 2}),
                            Attr(NDA_CACHEINFO, Fill(16, 0))}))),
           0);
  EXPECT_EQ(fdb.family, uint8_t{AF_BRIDGE});
  EXPECT_EQ(fdb.flags, uint8_t{NTF_SELF});
  EXPECT_EQ(fdb.state, uint16_t{NUD_PERMANENT | NUD_NOARP});
  EXPECT_TRUE(fdb.lladdr.state == MacField::State::kValid);
  EXPECT_EQ(FormatMac(fdb.lladdr.bytes), "00:00:00:00:00:00");
  EXPECT_TRUE((fdb.destination == Bytes{10, 0, 0, 2}));
}

TEST_CASE("parser: neighbour shorter than ndmsg or with a bad attribute is a MalformedRecord") {
  const ParsedDatagram parsed = Parse(Cat({
      Msg(RTM_NEWNEIGH, Fill(11, 0)),
      Neigh(NdMsg(AF_INET, 4, NUD_PERMANENT),
            Cat({Attr(NDA_LLADDR, kMac), AttrDeclaring(3, NDA_DST, Fill(4, 0))})),
      Neigh(NdMsg(AF_INET, 4, NUD_PERMANENT), AttrDeclaring(80, NDA_LLADDR, kMac)),
      Neigh(NdMsg(AF_INET, 5, NUD_PERMANENT), Attr(NDA_LLADDR, kMac)),
  }));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 4u);
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 0).reason, "neighbour message shorter than ndmsg");
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 1).reason, "bad attribute length in neighbour message");
  EXPECT_EQ(EXPECT_MALFORMED(parsed, 2).reason, "bad attribute length in neighbour message");
  EXPECT_EQ(BODY(NeighRecord, parsed, 3).ifindex, 5);
}

// ---------------------------------------------------------------------------
// S13: oversize strings

TEST_CASE("parser: S13 oversize IFLA_IFNAME is bounded to 15 bytes") {
  // The largest attribute a message can carry (rta_len is 16 bits), without a NUL.
  const Bytes huge = Fill(65531, 'N');
  const ParsedDatagram parsed =
      Parse(Link(4, Cat({Attr(IFLA_IFNAME, huge), Attr(IFLA_ADDRESS, kMac)})));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, std::string(15, 'N'));
  EXPECT_TRUE(link.nameTooLong);
  EXPECT_TRUE(SameMac(link.mac, kMac));
  // Control characters are kept as bytes (escaping is the logger's job), still bounded.
  const LinkRecord control = BODY(
      LinkRecord, Parse(Link(4, Attr(IFLA_IFNAME, CStr("a\nb\x1b[31m\xff\xfe-overlong-name")))), 0);
  EXPECT_EQ(control.name.size(), 15u);
  EXPECT_TRUE(control.nameTooLong);
}

TEST_CASE("parser: S13 huge IFLA_IFALIAS is not copied and does not hide later attributes") {
  const ParsedDatagram parsed =
      Parse(Link(4, Cat({Attr(IFLA_IFALIAS, Fill(65000, 'A')), Attr(IFLA_IFALIAS, Fill(30000, 'B')),
                         Attr(IFLA_IFNAME, CStr("flannel.1")), Attr(IFLA_ADDRESS, kMac)})));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "flannel.1");
  EXPECT_TRUE(SameMac(link.mac, kMac));
  EXPECT_TRUE(link.kind.empty());
  // An alias whose rta_len overflows 16 bits wraps to a small value: that is a broken
  // attribute stream (stray bytes), never a read past the message.
  const ParsedDatagram wrapped = Parse(
      Link(4, Cat({AttrDeclaring(static_cast<uint16_t>(70000 + 4), IFLA_IFALIAS, Fill(70000, 'C')),
                   Attr(IFLA_IFNAME, CStr("x"))})));
  EXPECT_NO_ERROR(wrapped);
  EXPECT_EQ(wrapped.messages.size(), 1u);
}

// ---------------------------------------------------------------------------
// 4.1: real datagrams captured from Linux 6.18 (see the .hex headers)

TEST_CASE("parser: real vxlan RTM_NEWLINK notification") {
  const ParsedDatagram parsed = Parse(Fixture("newlink-vxlan-event"));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 1u);
  EXPECT_EQ(parsed.messages[0].type, uint16_t{RTM_NEWLINK});
  EXPECT_EQ(parsed.messages[0].seq, 0u);
  EXPECT_EQ(parsed.messages[0].portid, 0u);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_FALSE(link.deleted);
  EXPECT_EQ(link.ifindex, 4);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_FALSE(link.nameTooLong);
  EXPECT_TRUE(link.mac.state == MacField::State::kValid);
  EXPECT_EQ(FormatMac(link.mac.bytes), "0e:2a:00:00:00:02");
  EXPECT_EQ(link.deviceType, uint16_t{ARPHRD_ETHER});
  EXPECT_EQ(link.mtu, 1450u);
  EXPECT_EQ(link.lowerIfindex, std::nullopt);
  EXPECT_EQ(link.kind, "vxlan");
  EXPECT_TRUE(link.vxlan.has_value());
  EXPECT_EQ(link.vxlan->vni, 1u);
  EXPECT_EQ(link.vxlan->port, uint16_t{8472});
  EXPECT_TRUE((link.vxlan->local == Bytes{10, 0, 0, 1}));
  EXPECT_EQ(link.vxlan->underlayIfindex, 3u);
  EXPECT_EQ(link.vxlan->learning, false);
}

TEST_CASE("parser: real RTM_DELLINK notification") {
  const ParsedDatagram parsed = Parse(Fixture("dellink-vxlan-event"));
  EXPECT_NO_ERROR(parsed);
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_TRUE(link.deleted);
  EXPECT_EQ(link.ifindex, 6);
  EXPECT_EQ(link.name, "vxtmp");
  EXPECT_EQ(link.changeMask, 0xffffffffu);
  EXPECT_EQ(link.vxlan->vni, 7u);
}

TEST_CASE("parser: real link dump datagram and its NLMSG_DONE") {
  const ParsedDatagram parsed = Parse(Fixture("dump-links-vxlan"));
  EXPECT_NO_ERROR(parsed);
  EXPECT_EQ(parsed.messages.size(), 3u);
  const char* const names[] = {"vx0", "vx6", "vxtmp"};
  const uint32_t vnis[] = {1, 4097, 7};
  const uint16_t ports[] = {8472, 4789, 8472};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(parsed.messages[i].seq, 101u);
    EXPECT_EQ(parsed.messages[i].flags, uint16_t{NLM_F_MULTI});
    const LinkRecord& link = BODY(LinkRecord, parsed, i);
    EXPECT_EQ(link.name, names[i]);
    EXPECT_TRUE(link.mac.state == MacField::State::kValid);
    EXPECT_EQ(link.vxlan->vni, vnis[i]);
    EXPECT_EQ(link.vxlan->port, ports[i]);
  }
  const LinkRecord& v6 = BODY(LinkRecord, parsed, 1);
  EXPECT_EQ(v6.vxlan->local.size(), 16u);
  EXPECT_EQ(v6.vxlan->learning, true);

  const ParsedDatagram done = Parse(Fixture("dump-done"));
  EXPECT_NO_ERROR(done);
  EXPECT_EQ(BODY(DoneRecord, done, 0).error, 0);
  EXPECT_EQ(done.messages[0].seq, 101u);
}

TEST_CASE("parser: real neighbour and FDB dumps") {
  const ParsedDatagram neigh = Parse(Fixture("dump-neigh"));
  EXPECT_NO_ERROR(neigh);
  EXPECT_EQ(neigh.messages.size(), 10u);
  const NeighRecord& first = BODY(NeighRecord, neigh, 0);
  EXPECT_EQ(first.family, uint8_t{AF_INET});
  EXPECT_TRUE((first.destination == Bytes{10, 244, 1, 0}));
  EXPECT_EQ(FormatMac(first.lladdr.bytes), "0e:2a:00:00:01:01");
  // An INCOMPLETE entry carries no NDA_LLADDR.
  EXPECT_TRUE(BODY(NeighRecord, neigh, 1).lladdr.state == MacField::State::kAbsent);
  BODY(DoneRecord, neigh, 9);

  const ParsedDatagram fdb = Parse(Fixture("dump-fdb"));
  EXPECT_NO_ERROR(fdb);
  EXPECT_EQ(fdb.messages.size(), 8u);
  const NeighRecord& last = BODY(NeighRecord, fdb, 7);
  EXPECT_EQ(last.family, uint8_t{AF_BRIDGE});
  EXPECT_EQ(last.ifindex, 4);
  EXPECT_EQ(FormatMac(last.lladdr.bytes), "00:00:00:00:00:00");
  EXPECT_TRUE((last.destination == Bytes{10, 0, 0, 2}));
}

TEST_CASE("parser: real ext-ack errors, capped and not, an ACK and ENODEV") {
  for (const char* name : {"error-extack", "error-extack-capped"}) {
    const ParsedDatagram parsed = Parse(Fixture(name));
    EXPECT_NO_ERROR(parsed);
    const AckRecord& ack = BODY(AckRecord, parsed, 0);
    EXPECT_EQ(ack.error, -ERANGE);
    EXPECT_EQ(ack.extackMessage, "VXLAN ID must be lower than 16777216");
    EXPECT_TRUE((parsed.messages[0].flags & NLM_F_ACK_TLVS) != 0);
  }
  EXPECT_TRUE((Parse(Fixture("error-extack-capped")).messages[0].flags & NLM_F_CAPPED) != 0);
  EXPECT_TRUE((Parse(Fixture("error-extack")).messages[0].flags & NLM_F_CAPPED) == 0);
  EXPECT_EQ(BODY(AckRecord, Parse(Fixture("ack")), 0).error, 0);
  EXPECT_EQ(BODY(AckRecord, Parse(Fixture("error-enodev")), 0).error, -ENODEV);
}

TEST_CASE("parser: real datagrams cut short at every length never read past the end") {
  // Each prefix is a truncated datagram: complete messages are kept, the rest is an error
  // (or a MalformedRecord when the cut falls inside a message the header still covers).
  for (const char* name : {"newlink-vxlan-event", "dump-neigh", "error-extack"}) {
    const Bytes full = Fixture(name);
    for (size_t length = 0; length < full.size(); ++length) {
      const ParsedDatagram parsed =
          Parse(Bytes(full.begin(), full.begin() + static_cast<long>(length)));
      if (length > 0) EXPECT_TRUE(parsed.error.has_value() || !parsed.messages.empty());
      EXPECT_TRUE(parsed.messages.size() <= length / 16);
    }
  }
}

}  // namespace

TEST_CASE("parser: a later IFLA_LINKINFO replaces an earlier one, vxlan data included") {
  const Bytes bytes =
      Msg(RTM_NEWLINK,
          Cat({IfInfo(4),
               Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr("vxlan")),
                                      Nested(IFLA_INFO_DATA, {Attr(IFLA_VXLAN_ID, U32(42))})}),
               Nested(IFLA_LINKINFO, {Attr(IFLA_INFO_KIND, CStr("veth"))})}));
  const ParsedDatagram parsed = ParseDatagram(bytes.data(), bytes.size());
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.kind, "veth");
  EXPECT_FALSE(link.vxlan.has_value());
}

TEST_CASE("parser: a later IFLA_IFNAME replaces an earlier one, nameTooLong included") {
  const Bytes bytes =
      Msg(RTM_NEWLINK, Cat({IfInfo(4), Attr(IFLA_IFNAME, CStr(std::string(40, 'x'))),
                            Attr(IFLA_IFNAME, CStr("vx0"))}));
  const ParsedDatagram parsed = ParseDatagram(bytes.data(), bytes.size());
  const LinkRecord& link = BODY(LinkRecord, parsed, 0);
  EXPECT_EQ(link.name, "vx0");
  EXPECT_FALSE(link.nameTooLong);
}

TEST_CASE("parser: N12 Admit judges the sender before truncation") {
  // A truncated datagram from another process is foreign, never lost kernel data.
  EXPECT_TRUE(Admit(77, MSG_TRUNC) == Admission::kForeignSender);
  EXPECT_TRUE(Admit(0, MSG_TRUNC) == Admission::kTruncated);
}

TEST_CASE("parser: MayNotifyLink finds a link message of the device from its headers") {
  const Bytes neigh = Msg(RTM_NEWNEIGH, NdMsg(AF_INET, 4, NUD_PERMANENT));
  const Bytes other = Msg(RTM_NEWLINK, IfInfo(5));
  const Bytes mine = Msg(RTM_DELLINK, IfInfo(4));
  const Bytes datagram = Cat({neigh, other, mine});
  EXPECT_TRUE(MayNotifyLink(datagram.data(), datagram.size(), 4));
  EXPECT_TRUE(MayNotifyLink(datagram.data(), datagram.size(), 5));
  EXPECT_FALSE(MayNotifyLink(datagram.data(), datagram.size(), 6));
  EXPECT_FALSE(MayNotifyLink(neigh.data(), neigh.size(), 4));
  // Too short to tell which device, or to tell what follows: counted as the device's.
  const Bytes headerOnly = Msg(RTM_NEWLINK, Bytes{});
  EXPECT_TRUE(MayNotifyLink(headerOnly.data(), headerOnly.size(), 4));
  const Bytes cut(datagram.begin(), datagram.end() - 3);
  EXPECT_TRUE(MayNotifyLink(cut.data(), cut.size(), 6));
}

TEST_CASE("parser: seeded datagrams: MayNotifyLink agrees with the parser's link records") {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 random(seed);
    Bytes datagram;
    std::vector<int32_t> links;
    const int messages = 1 + static_cast<int>(random() % 8);
    for (int i = 0; i < messages; ++i) {
      const auto ifindex = static_cast<int32_t>(1 + random() % 6);
      switch (random() % 3) {
        case 0:
          datagram =
              Cat({datagram, Msg(RTM_NEWLINK, Cat({IfInfo(ifindex), Attr(IFLA_IFNAME, CStr("vx")),
                                                   Attr(IFLA_ADDRESS, Fill(6, 2))}))});
          break;
        case 1:
          datagram = Cat({datagram, Msg(RTM_DELLINK, IfInfo(ifindex))});
          break;
        default:
          datagram = Cat({datagram, Msg(random() % 2 ? RTM_NEWNEIGH : RTM_DELNEIGH,
                                        NdMsg(AF_INET, ifindex, NUD_PERMANENT))});
          break;
      }
    }
    const ParsedDatagram parsed = ParseDatagram(datagram.data(), datagram.size());
    EXPECT_FALSE(parsed.error.has_value());
    for (const Message& message : parsed.messages) {
      if (const auto* link = std::get_if<LinkRecord>(&message.body)) links.push_back(link->ifindex);
    }
    for (int32_t ifindex = 0; ifindex <= 7; ++ifindex) {
      const bool parsedOne = std::find(links.begin(), links.end(), ifindex) != links.end();
      EXPECT_EQ(MayNotifyLink(datagram.data(), datagram.size(), ifindex), parsedOne);
    }
  }
}

TEST_CASE("parser: seeded datagrams parsed into one reused ParsedDatagram read as parsed fresh") {
  // The reused storage never shows through: no message of an earlier datagram, no earlier
  // error; a datagram of many messages (more than the storage kept) included.
  std::mt19937 random(20261207);
  ParsedDatagram reused;
  for (int round = 0; round < 400; ++round) {
    Bytes datagram;
    const int messages = 1 + static_cast<int>(random() % (round % 10 == 0 ? 40 : 4));
    for (int i = 0; i < messages; ++i) {
      const auto ifindex = static_cast<int32_t>(1 + random() % 6);
      datagram =
          Cat({datagram, random() % 2 ? Msg(RTM_NEWLINK,
                                            Cat({IfInfo(ifindex), Attr(IFLA_IFNAME, CStr("vx"))}))
                                      : Msg(RTM_DELNEIGH, NdMsg(AF_INET, ifindex, 0))});
    }
    // One in four is cut short: parsing stops with an error.
    if (random() % 4 == 0) datagram.resize(datagram.size() - 1 - random() % 8);
    ParseDatagramInto(datagram.data(), datagram.size(), &reused);
    const ParsedDatagram fresh = ParseDatagram(datagram.data(), datagram.size());
    EXPECT_EQ(reused.messages.size(), fresh.messages.size());
    EXPECT_EQ(reused.error.has_value(), fresh.error.has_value());
    if (reused.error && fresh.error) {
      EXPECT_EQ(reused.error->offset, fresh.error->offset);
      EXPECT_EQ(reused.error->reason, fresh.error->reason);
    }
    for (size_t i = 0; i < std::min(reused.messages.size(), fresh.messages.size()); ++i) {
      EXPECT_EQ(reused.messages[i].type, fresh.messages[i].type);
      EXPECT_EQ(reused.messages[i].body.index(), fresh.messages[i].body.index());
      const auto* link = std::get_if<LinkRecord>(&reused.messages[i].body);
      const auto* freshLink = std::get_if<LinkRecord>(&fresh.messages[i].body);
      if (link && freshLink) {
        EXPECT_EQ(link->ifindex, freshLink->ifindex);
        EXPECT_EQ(link->name, freshLink->name);
      }
    }
  }
}
