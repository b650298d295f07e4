// Unit tests for the pure parts of native/path_probe.cc: the Internet checksum
// (RFC 1071's example), echo requests that verify, and the parsing of what a
// raw ICMP socket reads (an IPv4 header with or without options, then ICMP):
// an echo reply with a right checksum, and nothing else.
#include "path_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <vector>

#include "internet_checksum.h"
#include "test_harness.h"

namespace {

using fg::InternetChecksum;
using fg::probe::EchoRequest;
using fg::probe::ParseEchoReply;

// An IPv4 header of `ihl` words (options zero) from `source`, then `icmp`.
std::vector<uint8_t> Datagram(const std::vector<uint8_t>& icmp, uint32_t source, int ihl = 5,
                              uint8_t protocol = IPPROTO_ICMP) {
  std::vector<uint8_t> bytes(static_cast<size_t>(ihl) * 4, 0);
  bytes[0] = static_cast<uint8_t>(0x40 | ihl);
  bytes[9] = protocol;
  const uint32_t network = htonl(source);
  bytes[12] = static_cast<uint8_t>(network);
  bytes[13] = static_cast<uint8_t>(network >> 8);
  bytes[14] = static_cast<uint8_t>(network >> 16);
  bytes[15] = static_cast<uint8_t>(network >> 24);
  bytes.insert(bytes.end(), icmp.begin(), icmp.end());
  return bytes;
}

// The request turned into the reply a peer's kernel sends: type 0, checksum redone.
std::vector<uint8_t> ReplyTo(std::vector<uint8_t> request) {
  request[0] = 0;
  request[2] = request[3] = 0;
  const uint16_t checksum = InternetChecksum(request.data(), request.size());
  request[2] = static_cast<uint8_t>(checksum >> 8);
  request[3] = static_cast<uint8_t>(checksum);
  return request;
}

}  // namespace

TEST_CASE("path_probe: RFC 1071's example sums to ~0xddf2") {
  const uint8_t data[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  EXPECT_EQ(InternetChecksum(data, sizeof(data)), static_cast<uint16_t>(~0xddf2 & 0xffff));
  const uint8_t odd[] = {0x01};
  EXPECT_EQ(InternetChecksum(odd, 1), static_cast<uint16_t>(~0x0100 & 0xffff));
}

TEST_CASE("path_probe: an echo request carries its id and sequence and verifies") {
  const std::vector<uint8_t> request = EchoRequest(0xbeef, 7, 24);
  EXPECT_EQ(request.size(), 32U);
  EXPECT_EQ(request[0], 8);
  EXPECT_EQ(request[4] << 8 | request[5], 0xbeef);
  EXPECT_EQ(request[6] << 8 | request[7], 7);
  EXPECT_EQ(InternetChecksum(request.data(), request.size()), 0);
}

TEST_CASE("path_probe: an echo reply parses, with or without IP options") {
  const uint32_t source = 0xc6120200;  // 198.18.2.0
  for (int ihl : {5, 6, 15}) {
    const std::vector<uint8_t> bytes = Datagram(ReplyTo(EchoRequest(42, 3, 24)), source, ihl);
    const auto reply = ParseEchoReply(bytes.data(), bytes.size());
    EXPECT_TRUE(reply.has_value());
    EXPECT_EQ(reply->id, 42);
    EXPECT_EQ(reply->sequence, 3);
    EXPECT_EQ(ntohl(reply->source), source);
  }
}

TEST_CASE("path_probe: anything but a right echo reply is refused") {
  const std::vector<uint8_t> good = Datagram(ReplyTo(EchoRequest(42, 3, 24)), 0xc6120200);
  EXPECT_TRUE(!ParseEchoReply(good.data(), 19).has_value());
  EXPECT_TRUE(!ParseEchoReply(good.data(), 27).has_value());
  std::vector<uint8_t> bad = good;
  bad[30] ^= 0x01;  // a payload bit: the checksum no longer holds
  EXPECT_TRUE(!ParseEchoReply(bad.data(), bad.size()).has_value());
  const std::vector<uint8_t> request = Datagram(EchoRequest(42, 3, 24), 0xc6120200);
  EXPECT_TRUE(!ParseEchoReply(request.data(), request.size()).has_value());
  std::vector<uint8_t> shortHeader = good;
  shortHeader[0] = 0x44;  // ihl 4 words
  EXPECT_TRUE(!ParseEchoReply(shortHeader.data(), shortHeader.size()).has_value());
  std::vector<uint8_t> ipv6 = good;
  ipv6[0] = 0x65;
  EXPECT_TRUE(!ParseEchoReply(ipv6.data(), ipv6.size()).has_value());
  const std::vector<uint8_t> udp = Datagram(ReplyTo(EchoRequest(42, 3, 24)), 0xc6120200, 5, 17);
  EXPECT_TRUE(!ParseEchoReply(udp.data(), udp.size()).has_value());
  // A header longer than the datagram.
  std::vector<uint8_t> longHeader = good;
  longHeader[0] = 0x4f;
  EXPECT_TRUE(!ParseEchoReply(longHeader.data(), 40).has_value());
}
