// Unit tests for native/netlink_builder.cc: every request is checked byte by byte
// where the kernel is strict (header, family struct, flags), and its attributes are
// read back, through ParseDatagram where the parser knows the message type (requests
// of a GET type are re-typed to the matching NEW type, whose body has the same layout).
//
// Coverage of docs/reliability.md:
//   N22 dump requests carry a fully zeroed family header apart from the family
//       ("builder: dump ...").
//   S15 the set-link request carries exactly one attribute, IFLA_ADDRESS of 6 bytes
//       ("builder: set link address ...").
//   N11 the sequence number is carried as given; nlmsg_pid is 0 (the kernel).
//   E1/S13 a name is bounded to 15 bytes + NUL ("builder: get link by name ...").
#include "netlink_builder.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "netlink_parser.h"
#include "test_harness.h"

namespace {

using fg::netlink::BuildDumpRequest;
using fg::netlink::BuildGetLinkByNameRequest;
using fg::netlink::BuildGetLinkRequest;
using fg::netlink::BuildNeighbourDeleteRequest;
using fg::netlink::BuildNeighbourReplaceRequest;
using fg::netlink::BuildNoopSetLinkRequest;
using fg::netlink::BuildSetLinkAddressRequest;
using fg::netlink::LinkRecord;
using fg::netlink::MacField;
using fg::netlink::NeighbourEntry;
using fg::netlink::NeighRecord;
using fg::netlink::ParseDatagram;
using fg::netlink::ParsedDatagram;

using Bytes = std::vector<uint8_t>;

constexpr std::array<uint8_t, 6> kMac = {0x0e, 0x2a, 0x00, 0x00, 0x00, 0x01};

template <typename T>
T Load(const Bytes& bytes, size_t offset) {
  if (offset + sizeof(T) > bytes.size()) {
    throw fg_test::Failure("read of " + std::to_string(sizeof(T)) + " bytes at " +
                           std::to_string(offset) + " past a " + std::to_string(bytes.size()) +
                           "-byte request");
  }
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

nlmsghdr HeaderOf(const Bytes& request) { return Load<nlmsghdr>(request, 0); }

// One attribute read back from a request, raw.
struct RawAttribute {
  uint16_t type;  // as written, flag bits included
  Bytes payload;
};

// The attributes after the family header (of `familySize` bytes, aligned), walked strictly:
// every length must be sound and the stream must end exactly at nlmsg_len.
std::vector<RawAttribute> AttributesOf(const Bytes& request, size_t familySize) {
  const nlmsghdr header = HeaderOf(request);
  std::vector<RawAttribute> attributes;
  size_t offset = NLMSG_HDRLEN + NLMSG_ALIGN(familySize);
  while (offset < header.nlmsg_len) {
    const auto length = Load<uint16_t>(request, offset);
    const auto type = Load<uint16_t>(request, offset + 2);
    if (length < 4 || offset + length > header.nlmsg_len) {
      throw fg_test::Failure("bad attribute length " + std::to_string(length) + " at " +
                             std::to_string(offset));
    }
    attributes.push_back({type, Bytes(request.begin() + static_cast<long>(offset + 4),
                                      request.begin() + static_cast<long>(offset + length))});
    // Padding bytes must be zero.
    for (size_t pad = offset + length; pad < offset + NLMSG_ALIGN(length); ++pad) {
      if (pad >= request.size() || request[pad] != 0) {
        throw fg_test::Failure("attribute padding at " + std::to_string(pad) + " not zero");
      }
    }
    offset += NLMSG_ALIGN(length);
  }
  if (offset != header.nlmsg_len) throw fg_test::Failure("attributes overrun nlmsg_len");
  return attributes;
}

// The request's bytes in an exact-size heap block, parsed; `retype` rewrites nlmsg_type first.
ParsedDatagram ParseRequest(const Bytes& request, uint16_t retype = 0) {
  std::unique_ptr<uint8_t[]> exact(new uint8_t[request.size()]);
  std::memcpy(exact.get(), request.data(), request.size());
  if (retype != 0) std::memcpy(exact.get() + 4, &retype, sizeof(retype));
  return ParseDatagram(exact.get(), request.size());
}

template <typename T>
T OnlyBody(const ParsedDatagram& parsed) {
  if (parsed.error) throw fg_test::Failure("datagram error: " + parsed.error->reason);
  if (parsed.messages.size() != 1) {
    throw fg_test::Failure(std::to_string(parsed.messages.size()) + " messages, not 1");
  }
  const T* body = std::get_if<T>(&parsed.messages[0].body);
  if (!body) throw fg_test::Failure("message body of the wrong kind");
  return *body;
}

// Header invariants every request shares.
void ExpectSoundHeader(const Bytes& request, uint16_t type, uint16_t flags, uint32_t seq) {
  EXPECT_TRUE(request.size() >= NLMSG_HDRLEN);
  const nlmsghdr header = HeaderOf(request);
  EXPECT_EQ(header.nlmsg_len, static_cast<uint32_t>(request.size()));
  EXPECT_EQ(request.size() % NLMSG_ALIGNTO, 0u);
  EXPECT_EQ(header.nlmsg_type, type);
  EXPECT_EQ(header.nlmsg_flags, flags);
  EXPECT_EQ(header.nlmsg_seq, seq);
  EXPECT_EQ(header.nlmsg_pid, 0u);
}

bool AllZero(const Bytes& bytes, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    if (bytes.at(i) != 0) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------

TEST_CASE("builder: N22 link dump request has a zeroed ifinfomsg and only IFLA_EXT_MASK") {
  const Bytes request = BuildDumpRequest(RTM_GETLINK, AF_UNSPEC, 0x1234);
  ExpectSoundHeader(request, RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, 0x1234);
  EXPECT_TRUE(AllZero(request, NLMSG_HDRLEN, NLMSG_HDRLEN + sizeof(ifinfomsg)));
  const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ifinfomsg));
  EXPECT_EQ(attributes.size(), 1u);
  EXPECT_EQ(attributes[0].type, uint16_t{IFLA_EXT_MASK});
  EXPECT_EQ(attributes[0].payload.size(), 4u);
  EXPECT_EQ(Load<uint32_t>(attributes[0].payload, 0), uint32_t{RTEXT_FILTER_SKIP_STATS});
  // The family is the one field that may be set.
  const Bytes bridge = BuildDumpRequest(RTM_GETLINK, AF_BRIDGE, 1);
  EXPECT_EQ(bridge[NLMSG_HDRLEN], uint8_t{AF_BRIDGE});
  EXPECT_TRUE(AllZero(bridge, NLMSG_HDRLEN + 1, NLMSG_HDRLEN + sizeof(ifinfomsg)));
}

TEST_CASE("builder: N22 neighbour dump requests have a zeroed ndmsg and no attributes") {
  for (uint8_t family : {uint8_t{AF_UNSPEC}, uint8_t{AF_INET}, uint8_t{AF_BRIDGE}}) {
    const Bytes request = BuildDumpRequest(RTM_GETNEIGH, family, 77);
    ExpectSoundHeader(request, RTM_GETNEIGH, NLM_F_REQUEST | NLM_F_DUMP, 77);
    EXPECT_EQ(request.size(), NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(ndmsg)));
    EXPECT_EQ(request[NLMSG_HDRLEN], family);
    EXPECT_TRUE(AllZero(request, NLMSG_HDRLEN + 1, request.size()));
  }
}

TEST_CASE("builder: dump request round-trips as one well-formed message") {
  // Re-typed to RTM_NEWLINK the body parses cleanly: an empty link record.
  const LinkRecord link =
      OnlyBody<LinkRecord>(ParseRequest(BuildDumpRequest(RTM_GETLINK, AF_UNSPEC, 5), RTM_NEWLINK));
  EXPECT_EQ(link.ifindex, 0);
  EXPECT_EQ(link.flags, 0u);
  EXPECT_EQ(link.changeMask, 0u);
  EXPECT_EQ(link.name, "");
  EXPECT_TRUE(link.mac.state == MacField::State::kAbsent);
  const NeighRecord neigh = OnlyBody<NeighRecord>(
      ParseRequest(BuildDumpRequest(RTM_GETNEIGH, AF_BRIDGE, 6), RTM_NEWNEIGH));
  EXPECT_EQ(neigh.family, uint8_t{AF_BRIDGE});
  EXPECT_EQ(neigh.ifindex, 0);
  EXPECT_EQ(neigh.state, 0u);
  // As sent, the parser sees a message it does not decode, with the header intact.
  const ParsedDatagram raw = ParseRequest(BuildDumpRequest(RTM_GETLINK, AF_UNSPEC, 9));
  EXPECT_FALSE(raw.error.has_value());
  EXPECT_EQ(raw.messages.size(), 1u);
  EXPECT_EQ(raw.messages[0].type, uint16_t{RTM_GETLINK});
  EXPECT_EQ(raw.messages[0].seq, 9u);
  EXPECT_EQ(raw.messages[0].flags, uint16_t{NLM_F_REQUEST | NLM_F_DUMP});
}

TEST_CASE("builder: get link by index") {
  const Bytes request = BuildGetLinkRequest(42, 0xdeadbeef);
  ExpectSoundHeader(request, RTM_GETLINK, NLM_F_REQUEST, 0xdeadbeef);
  const auto info = Load<ifinfomsg>(request, NLMSG_HDRLEN);
  EXPECT_EQ(info.ifi_index, 42);
  EXPECT_EQ(info.ifi_family, 0u);
  EXPECT_EQ(info.ifi_type, 0u);
  EXPECT_EQ(info.ifi_flags, 0u);
  EXPECT_EQ(info.ifi_change, 0u);
  const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ifinfomsg));
  EXPECT_EQ(attributes.size(), 1u);
  EXPECT_EQ(attributes[0].type, uint16_t{IFLA_EXT_MASK});
  const LinkRecord link = OnlyBody<LinkRecord>(ParseRequest(request, RTM_NEWLINK));
  EXPECT_EQ(link.ifindex, 42);
}

TEST_CASE("builder: get link by name round-trips the name with its NUL") {
  for (const char* text : {"flannel.1", "a", "abcdefghijklmn", "abcdefghijklmno"}) {
    const std::string name = text;
    const Bytes request = BuildGetLinkByNameRequest(name, 3);
    ExpectSoundHeader(request, RTM_GETLINK, NLM_F_REQUEST, 3);
    EXPECT_EQ(Load<ifinfomsg>(request, NLMSG_HDRLEN).ifi_index, 0);
    const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ifinfomsg));
    EXPECT_EQ(attributes.size(), 2u);
    EXPECT_EQ(attributes[0].type, uint16_t{IFLA_EXT_MASK});
    EXPECT_EQ(attributes[1].type, uint16_t{IFLA_IFNAME});
    EXPECT_EQ(attributes[1].payload.size(), name.size() + 1);
    EXPECT_EQ(attributes[1].payload.back(), 0u);
    const LinkRecord link = OnlyBody<LinkRecord>(ParseRequest(request, RTM_NEWLINK));
    EXPECT_EQ(link.name, name);
    EXPECT_FALSE(link.nameTooLong);
  }
}

TEST_CASE("builder: get link by name bounds the name to 15 bytes + NUL") {
  for (const std::string& name :
       {std::string("abcdefghijklmnop"), std::string(40, 'x'), std::string(70000, 'y')}) {
    const Bytes request = BuildGetLinkByNameRequest(name, 4);
    ExpectSoundHeader(request, RTM_GETLINK, NLM_F_REQUEST, 4);
    const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ifinfomsg));
    EXPECT_EQ(attributes.size(), 2u);
    EXPECT_EQ(attributes[1].payload.size(), size_t{IFNAMSIZ});
    EXPECT_EQ(attributes[1].payload[IFNAMSIZ - 1], 0u);
    const LinkRecord link = OnlyBody<LinkRecord>(ParseRequest(request, RTM_NEWLINK));
    EXPECT_EQ(link.name, name.substr(0, 15));
    EXPECT_FALSE(link.nameTooLong);
  }
}

TEST_CASE("builder: S15 set link address carries exactly one attribute, IFLA_ADDRESS of 6") {
  const Bytes request = BuildSetLinkAddressRequest(7, kMac, 0x55);
  ExpectSoundHeader(request, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 0x55);
  // No NLM_F_CREATE / EXCL / REPLACE: only an existing device is ever changed.
  EXPECT_EQ(HeaderOf(request).nlmsg_flags & (NLM_F_CREATE | NLM_F_EXCL | NLM_F_REPLACE), 0);
  const auto info = Load<ifinfomsg>(request, NLMSG_HDRLEN);
  EXPECT_EQ(info.ifi_index, 7);
  EXPECT_EQ(info.ifi_family, 0u);
  EXPECT_EQ(info.ifi_flags, 0u);   // no IFF_UP or other flag changes
  EXPECT_EQ(info.ifi_change, 0u);  // ...and none announced
  const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ifinfomsg));
  EXPECT_EQ(attributes.size(), 1u);
  EXPECT_EQ(attributes[0].type, uint16_t{IFLA_ADDRESS});
  EXPECT_TRUE((attributes[0].payload == Bytes(kMac.begin(), kMac.end())));
  EXPECT_EQ(request.size(), 16u + 16u + 12u);
}

TEST_CASE("builder: set link address round-trips through ParseDatagram") {
  const std::array<uint8_t, 6> macs[] = {kMac,
                                         {0, 0, 0, 0, 0, 0},
                                         {0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
                                         {0x02, 0x42, 0xac, 0x11, 0x00, 0x02}};
  for (const auto& mac : macs) {
    for (int32_t ifindex : {1, 4, 0x7fffffff, -1}) {
      const Bytes request = BuildSetLinkAddressRequest(ifindex, mac, 0xffffffffu);
      const ParsedDatagram parsed = ParseRequest(request);
      EXPECT_EQ(parsed.messages[0].type, uint16_t{RTM_NEWLINK});
      EXPECT_EQ(parsed.messages[0].seq, 0xffffffffu);
      const LinkRecord link = OnlyBody<LinkRecord>(parsed);
      EXPECT_FALSE(link.deleted);
      EXPECT_EQ(link.ifindex, ifindex);
      EXPECT_TRUE(link.mac.state == MacField::State::kValid);
      EXPECT_TRUE(link.mac.bytes == mac);
      EXPECT_EQ(link.name, "");
      EXPECT_FALSE(link.mtu.has_value());
      EXPECT_FALSE(link.master.has_value());
      EXPECT_EQ(link.kind, "");
    }
  }
}

TEST_CASE("builder: no-op set link is RTM_NEWLINK on ifindex 1 with no attributes") {
  const Bytes request = BuildNoopSetLinkRequest(11);
  ExpectSoundHeader(request, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, 11);
  EXPECT_EQ(request.size(), 32u);
  const auto info = Load<ifinfomsg>(request, NLMSG_HDRLEN);
  EXPECT_EQ(info.ifi_index, 1);
  EXPECT_EQ(info.ifi_flags, 0u);
  EXPECT_EQ(info.ifi_change, 0u);
  EXPECT_TRUE(AttributesOf(request, sizeof(ifinfomsg)).empty());
  const LinkRecord link = OnlyBody<LinkRecord>(ParseRequest(request));
  EXPECT_EQ(link.ifindex, 1);
  EXPECT_TRUE(link.mac.state == MacField::State::kAbsent);
}

TEST_CASE("builder: neighbour replace round-trips (IPv4, IPv6, FDB)") {
  NeighbourEntry v4;
  v4.family = AF_INET;
  v4.ifindex = 4;
  v4.destination = {10, 244, 1, 0};
  v4.lladdr = kMac;
  v4.state = NUD_PERMANENT;
  NeighbourEntry v6 = v4;
  v6.family = AF_INET6;
  v6.destination = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  NeighbourEntry fdb = v4;
  fdb.family = AF_BRIDGE;
  fdb.destination = {10, 0, 0, 2};
  fdb.lladdr = {0, 0, 0, 0, 0, 0};
  fdb.flags = NTF_SELF;
  fdb.state = NUD_PERMANENT | NUD_NOARP;

  for (const NeighbourEntry& entry : {v4, v6, fdb}) {
    const Bytes request = BuildNeighbourReplaceRequest(entry, 900);
    ExpectSoundHeader(request, RTM_NEWNEIGH,
                      NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, 900);
    const auto header = Load<ndmsg>(request, NLMSG_HDRLEN);
    EXPECT_EQ(header.ndm_pad1, 0u);
    EXPECT_EQ(header.ndm_pad2, 0u);
    const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ndmsg));
    EXPECT_EQ(attributes.size(), 2u);
    EXPECT_EQ(attributes[0].type, uint16_t{NDA_DST});
    EXPECT_EQ(attributes[1].type, uint16_t{NDA_LLADDR});

    const NeighRecord neigh = OnlyBody<NeighRecord>(ParseRequest(request));
    EXPECT_FALSE(neigh.deleted);
    EXPECT_EQ(neigh.family, entry.family);
    EXPECT_EQ(neigh.ifindex, entry.ifindex);
    EXPECT_EQ(neigh.state, entry.state);
    EXPECT_EQ(neigh.flags, entry.flags);
    EXPECT_TRUE(neigh.destination == entry.destination);
    EXPECT_TRUE(neigh.lladdr.state == MacField::State::kValid);
    EXPECT_TRUE(neigh.lladdr.bytes == entry.lladdr);
    EXPECT_FALSE(neigh.vni.has_value());
  }
}

TEST_CASE("builder: neighbour delete names the entry as the replace writes it") {
  NeighbourEntry fdb;
  fdb.family = AF_BRIDGE;
  fdb.ifindex = 4;
  fdb.destination = {192, 0, 2, 12};
  fdb.lladdr = kMac;
  fdb.state = NUD_PERMANENT;
  fdb.flags = NTF_SELF;
  const Bytes request = BuildNeighbourDeleteRequest(fdb, 77);
  ExpectSoundHeader(request, RTM_DELNEIGH, NLM_F_REQUEST | NLM_F_ACK, 77);
  const Bytes replace = BuildNeighbourReplaceRequest(fdb, 77);
  // Everything after the header's type and flags is the same: the ndmsg and both attributes.
  EXPECT_EQ(request.size(), replace.size());
  EXPECT_TRUE(std::equal(request.begin() + 8, request.end(), replace.begin() + 8));
  const NeighRecord neigh = OnlyBody<NeighRecord>(ParseRequest(request));
  EXPECT_TRUE(neigh.deleted);
  EXPECT_TRUE(neigh.destination == fdb.destination);
  EXPECT_EQ(neigh.flags, fdb.flags);
}

TEST_CASE("builder: neighbour replace without a destination carries only NDA_LLADDR") {
  NeighbourEntry entry;
  entry.family = AF_BRIDGE;
  entry.ifindex = 4;
  entry.lladdr = kMac;
  entry.state = NUD_PERMANENT;
  entry.flags = NTF_SELF;
  const Bytes request = BuildNeighbourReplaceRequest(entry, 1);
  const std::vector<RawAttribute> attributes = AttributesOf(request, sizeof(ndmsg));
  EXPECT_EQ(attributes.size(), 1u);
  EXPECT_EQ(attributes[0].type, uint16_t{NDA_LLADDR});
  const NeighRecord neigh = OnlyBody<NeighRecord>(ParseRequest(request));
  EXPECT_TRUE(neigh.destination.empty());
  EXPECT_TRUE(neigh.lladdr.bytes == kMac);
}

TEST_CASE("builder: sequence numbers are carried unchanged, including 0 and 0xffffffff") {
  for (uint32_t seq : {0u, 1u, 0x7fffffffu, 0x80000000u, 0xffffffffu}) {
    EXPECT_EQ(HeaderOf(BuildDumpRequest(RTM_GETLINK, AF_UNSPEC, seq)).nlmsg_seq, seq);
    EXPECT_EQ(HeaderOf(BuildGetLinkRequest(1, seq)).nlmsg_seq, seq);
    EXPECT_EQ(HeaderOf(BuildGetLinkByNameRequest("x", seq)).nlmsg_seq, seq);
    EXPECT_EQ(HeaderOf(BuildSetLinkAddressRequest(1, kMac, seq)).nlmsg_seq, seq);
    EXPECT_EQ(HeaderOf(BuildNoopSetLinkRequest(seq)).nlmsg_seq, seq);
    EXPECT_EQ(HeaderOf(BuildNeighbourReplaceRequest(NeighbourEntry{}, seq)).nlmsg_seq, seq);
  }
}

TEST_CASE("builder: two requests concatenated parse as two messages") {
  // Every request is padded to NLMSG_ALIGNTO, so requests can share a datagram.
  Bytes both = BuildGetLinkByNameRequest("flannel.1", 1);
  const Bytes second = BuildSetLinkAddressRequest(4, kMac, 2);
  both.insert(both.end(), second.begin(), second.end());
  const ParsedDatagram parsed = ParseRequest(both);
  EXPECT_FALSE(parsed.error.has_value());
  EXPECT_EQ(parsed.messages.size(), 2u);
  EXPECT_EQ(parsed.messages[1].seq, 2u);
  EXPECT_TRUE(std::holds_alternative<LinkRecord>(parsed.messages[1].body));
}

}  // namespace
