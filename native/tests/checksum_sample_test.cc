// Unit tests for the pure parts of native/checksum_sample.cc: the judging of
// UDP and TCP checksums over IPv4 and IPv6 (packets built here with an
// explicit pseudo-header, not through the sums under test), what is left
// unjudged, and the counting per sending MAC.
#include "checksum_sample.h"

#include <linux/if_ether.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "internet_checksum.h"
#include "test_harness.h"

namespace {

using fg::InternetChecksum;
using fg::csum::ChecksumSample;
using fg::csum::JudgeChecksum;
using fg::csum::Mac;
using fg::csum::Verdict;

void Put16(std::vector<uint8_t>& bytes, size_t at, size_t value) {
  bytes[at] = static_cast<uint8_t>(value >> 8);
  bytes[at + 1] = static_cast<uint8_t>(value);
}

// A UDP (8-byte header) or TCP (20-byte header) segment carrying `payload` bytes of pattern, its
// checksum zero.
std::vector<uint8_t> Segment(uint8_t protocol, size_t payload) {
  const size_t header = protocol == IPPROTO_UDP ? 8 : 20;
  std::vector<uint8_t> segment(header + payload, 0);
  Put16(segment, 0, 40000);  // source port
  Put16(segment, 2, 8080);   // destination port
  if (protocol == IPPROTO_UDP) {
    Put16(segment, 4, segment.size());
  } else {
    segment[12] = 5 << 4;  // data offset
    segment[13] = 0x02;    // SYN
  }
  for (size_t i = header; i < segment.size(); ++i) segment[i] = static_cast<uint8_t>(i * 7);
  return segment;
}

size_t ChecksumAt(uint8_t protocol) { return protocol == IPPROTO_UDP ? 6 : 16; }

// Fills in the segment's checksum from the pseudo-header's bytes, laid out as the RFCs draw it.
void Finish(std::vector<uint8_t>& segment, uint8_t protocol, const std::vector<uint8_t>& addresses,
            bool v6) {
  std::vector<uint8_t> pseudo(addresses);
  if (v6) {
    pseudo.insert(pseudo.end(), {0, 0, static_cast<uint8_t>(segment.size() >> 8),
                                 static_cast<uint8_t>(segment.size()), 0, 0, 0, protocol});
  } else {
    pseudo.insert(pseudo.end(), {0, protocol, static_cast<uint8_t>(segment.size() >> 8),
                                 static_cast<uint8_t>(segment.size())});
  }
  pseudo.insert(pseudo.end(), segment.begin(), segment.end());
  uint16_t checksum = InternetChecksum(pseudo.data(), pseudo.size());
  if (protocol == IPPROTO_UDP && checksum == 0) checksum = 0xffff;
  Put16(segment, ChecksumAt(protocol), checksum);
}

const std::vector<uint8_t> kV4Addresses = {192, 0, 2, 11, 198, 18, 2, 5};
const std::vector<uint8_t> kV6Addresses = {0x20, 0x01, 0x0d, 0xb8, 0, 0,    0,    0,    0,    0, 0,
                                           0,    0,    0,    0,    1, 0x20, 0x01, 0x0d, 0xb8, 0, 0,
                                           0,    0,    0,    0,    0, 0,    0,    0,    0,    2};

std::vector<uint8_t> Ipv4(const std::vector<uint8_t>& segment, uint8_t protocol) {
  std::vector<uint8_t> packet(20, 0);
  packet[0] = 0x45;
  Put16(packet, 2, 20 + segment.size());
  packet[8] = 64;
  packet[9] = protocol;
  std::copy(kV4Addresses.begin(), kV4Addresses.end(), packet.begin() + 12);
  packet.insert(packet.end(), segment.begin(), segment.end());
  return packet;
}

std::vector<uint8_t> Ipv6(const std::vector<uint8_t>& segment, uint8_t nextHeader) {
  std::vector<uint8_t> packet(40, 0);
  packet[0] = 0x60;
  Put16(packet, 4, segment.size());
  packet[6] = nextHeader;
  packet[7] = 64;
  std::copy(kV6Addresses.begin(), kV6Addresses.end(), packet.begin() + 8);
  packet.insert(packet.end(), segment.begin(), segment.end());
  return packet;
}

// A finished packet of `protocol` over IPv4 or IPv6 with an odd-sized payload.
std::vector<uint8_t> Finished(uint8_t protocol, bool v6) {
  std::vector<uint8_t> segment = Segment(protocol, 33);
  Finish(segment, protocol, v6 ? kV6Addresses : kV4Addresses, v6);
  return v6 ? Ipv6(segment, protocol) : Ipv4(segment, protocol);
}

Verdict Judge(const std::vector<uint8_t>& packet, bool v6) {
  return JudgeChecksum(v6 ? ETH_P_IPV6 : ETH_P_IP, packet.data(), packet.size());
}

}  // namespace

TEST_CASE(
    "checksum_sample: right UDP and TCP checksums over IPv4 and IPv6 are good, any flipped byte is "
    "bad") {
  for (const bool v6 : {false, true}) {
    for (const uint8_t protocol : {uint8_t{IPPROTO_UDP}, uint8_t{IPPROTO_TCP}}) {
      const std::vector<uint8_t> packet = Finished(protocol, v6);
      EXPECT_EQ(Judge(packet, v6), Verdict::kGood);
      const Verdict bad = protocol == IPPROTO_UDP ? Verdict::kBadUdp : Verdict::kBadTcp;
      // Every byte the checksum covers: the segment, and the addresses of the pseudo-header.
      for (size_t at = v6 ? 8 : 12; at < packet.size(); ++at) {
        // Not the UDP length: a changed one makes the packet malformed, which is not judged.
        const size_t udpLength = (v6 ? 40U : 20U) + 4;
        if (protocol == IPPROTO_UDP && (at == udpLength || at == udpLength + 1)) continue;
        std::vector<uint8_t> flipped(packet);
        flipped[at] ^= 0x10;
        EXPECT_EQ(Judge(flipped, v6), bad);
      }
    }
  }
}

TEST_CASE("checksum_sample: a checksum left to the NIC (the pseudo-header's sum only) is bad") {
  // CHECKSUM_PARTIAL leaves the folded pseudo-header sum in the field, uncomplemented.
  for (const bool v6 : {false, true}) {
    for (const uint8_t protocol : {uint8_t{IPPROTO_UDP}, uint8_t{IPPROTO_TCP}}) {
      std::vector<uint8_t> segment = Segment(protocol, 100);
      std::vector<uint8_t> pseudoOnly = Segment(protocol, 0);
      Finish(pseudoOnly, protocol, v6 ? kV6Addresses : kV4Addresses, v6);
      const size_t at = ChecksumAt(protocol);
      Put16(segment, at, static_cast<uint16_t>(~(pseudoOnly[at] << 8 | pseudoOnly[at + 1])));
      const std::vector<uint8_t> packet = v6 ? Ipv6(segment, protocol) : Ipv4(segment, protocol);
      EXPECT_EQ(Judge(packet, v6), protocol == IPPROTO_UDP ? Verdict::kBadUdp : Verdict::kBadTcp);
    }
  }
}

TEST_CASE("checksum_sample: Ethernet padding past the IP length is not summed") {
  std::vector<uint8_t> packet = Finished(IPPROTO_UDP, false);
  packet.insert(packet.end(), 6, 0xaa);
  EXPECT_EQ(Judge(packet, false), Verdict::kGood);
  packet = Finished(IPPROTO_TCP, true);
  packet.insert(packet.end(), 6, 0xaa);
  EXPECT_EQ(Judge(packet, true), Verdict::kGood);
}

TEST_CASE("checksum_sample: what cannot be judged from the bytes is left alone") {
  const std::vector<uint8_t> udp4 = Finished(IPPROTO_UDP, false);
  // Another EtherType, and a version that does not match it.
  EXPECT_EQ(JudgeChecksum(ETH_P_ARP, udp4.data(), udp4.size()), Verdict::kNotJudged);
  EXPECT_EQ(JudgeChecksum(ETH_P_IPV6, udp4.data(), udp4.size()), Verdict::kNotJudged);
  // Cut: the IP length says more than was read.
  EXPECT_EQ(JudgeChecksum(ETH_P_IP, udp4.data(), udp4.size() - 1), Verdict::kNotJudged);
  EXPECT_EQ(JudgeChecksum(ETH_P_IP, udp4.data(), 19), Verdict::kNotJudged);
  // A fragment (more fragments; an offset).
  std::vector<uint8_t> fragment(udp4);
  fragment[6] = 0x20;
  EXPECT_EQ(Judge(fragment, false), Verdict::kNotJudged);
  fragment[6] = 0x00;
  fragment[7] = 0x01;
  EXPECT_EQ(Judge(fragment, false), Verdict::kNotJudged);
  // A header length under 5 words, or past the total length.
  std::vector<uint8_t> header(udp4);
  header[0] = 0x44;
  EXPECT_EQ(Judge(header, false), Verdict::kNotJudged);
  header[0] = 0x4f;
  Put16(header, 2, 40);
  EXPECT_EQ(Judge(header, false), Verdict::kNotJudged);
  // UDP without a checksum, or with a length the packet does not hold.
  std::vector<uint8_t> none(udp4);
  none[26] = none[27] = 0;
  EXPECT_EQ(Judge(none, false), Verdict::kNotJudged);
  std::vector<uint8_t> longer(udp4);
  Put16(longer, 24, udp4.size());
  EXPECT_EQ(Judge(longer, false), Verdict::kNotJudged);
  Put16(longer, 24, 7);
  EXPECT_EQ(Judge(longer, false), Verdict::kNotJudged);
  // A TCP segment shorter than its header; another transport (ICMP).
  const std::vector<uint8_t> shortTcp = Ipv4(std::vector<uint8_t>(19, 0), IPPROTO_TCP);
  EXPECT_EQ(Judge(shortTcp, false), Verdict::kNotJudged);
  const std::vector<uint8_t> icmp = Ipv4(std::vector<uint8_t>(16, 0), IPPROTO_ICMP);
  EXPECT_EQ(Judge(icmp, false), Verdict::kNotJudged);
  // IPv6: an extension header first (hop-by-hop), or a payload length past what was read.
  std::vector<uint8_t> udp6 = Finished(IPPROTO_UDP, true);
  std::vector<uint8_t> extension(udp6);
  extension[6] = 0;
  EXPECT_EQ(Judge(extension, true), Verdict::kNotJudged);
  EXPECT_EQ(JudgeChecksum(ETH_P_IPV6, udp6.data(), udp6.size() - 1), Verdict::kNotJudged);
  EXPECT_EQ(JudgeChecksum(ETH_P_IPV6, udp6.data(), 39), Verdict::kNotJudged);
}

TEST_CASE("checksum_sample: bad frames are counted per sending MAC, at most kMaxSenders of them") {
  ChecksumSample sample;
  const Mac n1 = {0x0e, 0, 0, 0, 0, 1};
  const Mac n2 = {0x0e, 0, 0, 0, 0, 2};
  sample.Record(n1, Verdict::kBadUdp);
  sample.Record(n1, Verdict::kBadTcp);
  sample.Record(n1, Verdict::kBadUdp);
  sample.Record(n2, Verdict::kGood);
  sample.Record(n2, Verdict::kNotJudged);
  sample.Record(n2, Verdict::kBadTcp);
  EXPECT_EQ(sample.frames, 6U);
  EXPECT_EQ(sample.checked, 5U);
  EXPECT_EQ(sample.bad, 4U);
  EXPECT_EQ(sample.senders.size(), 2U);
  EXPECT_TRUE(sample.senders[0].mac == n1);
  EXPECT_EQ(sample.senders[0].udp, 2U);
  EXPECT_EQ(sample.senders[0].tcp, 1U);
  EXPECT_EQ(sample.senders[1].udp, 0U);
  EXPECT_EQ(sample.senders[1].tcp, 1U);

  ChecksumSample many;
  for (size_t i = 0; i < fg::csum::kMaxSenders + 10; ++i) {
    many.Record(Mac{0x0e, 0, 0, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)},
                Verdict::kBadUdp);
  }
  EXPECT_EQ(many.bad, fg::csum::kMaxSenders + 10);
  EXPECT_EQ(many.senders.size(), fg::csum::kMaxSenders);
}

TEST_CASE("checksum_sample: SampleChecksums refuses out-of-range bounds before opening anything") {
  fg::csum::SampleOptions options;
  options.device = "flannel.1";
  options.timeoutMs = 0;
  auto result = fg::csum::SampleChecksums(fg::NetnsTarget{}, options);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
  options.timeoutMs = 100;
  options.maxFrames = fg::csum::kMaxFrames + 1;
  result = fg::csum::SampleChecksums(fg::NetnsTarget{}, options);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.error().errnum, EINVAL);
}
