#include "checksum_sample.h"

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "internet_checksum.h"
#include "owned_fds.h"

namespace fg::csum {
namespace {

constexpr size_t kIpv4Header = 20;
constexpr size_t kIpv6Header = 40;
constexpr size_t kUdpHeader = 8;
constexpr size_t kTcpHeader = 20;
// linux/if_packet.h names it only since 5.x: a GSO TCP frame, its checksum not final.
constexpr uint32_t kStatusGsoTcp = 1U << 8;
// Frames read per wakeup of the socket (the rest wait for the next poll).
constexpr int kReadsPerWake = 64;

static_assert(sizeof(tpacket_auxdata) == 20, "tpacket_auxdata layout");

uint16_t Be16(const uint8_t* at) { return static_cast<uint16_t>(at[0] << 8 | at[1]); }

// The transport segment, its protocol and the pseudo-header's sum.
struct Segment {
  uint8_t protocol;
  const uint8_t* data;
  size_t length;
  uint64_t pseudoSum;
};

std::optional<Segment> Ipv4Segment(const uint8_t* packet, size_t length) {
  if (length < kIpv4Header || packet[0] >> 4 != 4) return std::nullopt;
  const size_t header = static_cast<size_t>(packet[0] & 0x0f) * 4;
  const size_t total = Be16(packet + 2);
  if (header < kIpv4Header || total < header || total > length) return std::nullopt;
  // More fragments, or an offset: the checksum covers the whole datagram.
  if ((Be16(packet + 6) & 0x3fff) != 0) return std::nullopt;
  const uint8_t protocol = packet[9];
  const size_t segmentLength = total - header;
  uint64_t sum = OnesComplementAdd(0, packet + 12, 8);  // source and destination
  sum += protocol;
  sum += segmentLength;
  return Segment{protocol, packet + header, segmentLength, sum};
}

std::optional<Segment> Ipv6Segment(const uint8_t* packet, size_t length) {
  if (length < kIpv6Header || packet[0] >> 4 != 6) return std::nullopt;
  const size_t payload = Be16(packet + 4);
  if (kIpv6Header + payload > length) return std::nullopt;
  // Only a transport header right after the fixed one; extension headers are not walked.
  const uint8_t protocol = packet[6];
  uint64_t sum = OnesComplementAdd(0, packet + 8, 32);  // source and destination
  sum += protocol;
  sum += payload;
  return Segment{protocol, packet + kIpv6Header, payload, sum};
}

}  // namespace

Verdict JudgeChecksum(uint16_t protocol, const uint8_t* packet, size_t length) {
  std::optional<Segment> segment;
  if (protocol == ETH_P_IP) segment = Ipv4Segment(packet, length);
  if (protocol == ETH_P_IPV6) segment = Ipv6Segment(packet, length);
  if (!segment) return Verdict::kNotJudged;
  size_t covered = segment->length;
  if (segment->protocol == IPPROTO_UDP) {
    if (covered < kUdpHeader) return Verdict::kNotJudged;
    const size_t udpLength = Be16(segment->data + 4);
    // No checksum (0), or a length the packet does not hold.
    if (Be16(segment->data + 6) == 0 || udpLength < kUdpHeader || udpLength > covered) {
      return Verdict::kNotJudged;
    }
    covered = udpLength;
    // The pseudo-header carries the UDP length, which may be shorter than the IP payload.
    segment->pseudoSum += udpLength;
    segment->pseudoSum -= segment->length;
  } else if (segment->protocol == IPPROTO_TCP) {
    if (covered < kTcpHeader) return Verdict::kNotJudged;
  } else {
    return Verdict::kNotJudged;
  }
  const bool right =
      FoldChecksum(OnesComplementAdd(segment->pseudoSum, segment->data, covered)) == 0;
  if (right) return Verdict::kGood;
  return segment->protocol == IPPROTO_UDP ? Verdict::kBadUdp : Verdict::kBadTcp;
}

void ChecksumSample::Record(const Mac& source, Verdict verdict) {
  frames += 1;
  if (verdict == Verdict::kNotJudged) return;
  checked += 1;
  if (verdict == Verdict::kGood) return;
  bad += 1;
  auto sender = std::find_if(senders.begin(), senders.end(),
                             [&](const Sender& known) { return known.mac == source; });
  if (sender == senders.end()) {
    if (senders.size() >= kMaxSenders) return;
    sender = senders.insert(senders.end(), Sender{source, 0, 0});
  }
  (verdict == Verdict::kBadUdp ? sender->udp : sender->tcp) += 1;
}

Result<ChecksumSample> SampleChecksums(const NetnsTarget& target, const SampleOptions& options) {
  if (options.timeoutMs < 1 || options.timeoutMs > kMaxTimeoutMs) {
    return SysError(EINVAL, "sample", "timeout out of range");
  }
  if (options.maxFrames < 1 || options.maxFrames > kMaxFrames) {
    return SysError(EINVAL, "sample", "maxFrames out of range");
  }
  OwnedFds owned;
  int fd = -1;
  std::optional<SysError> failure;
  Result<Unit> entered = RunInNetns(target, [&] {
    // Protocol 0: nothing is queued before the socket is bound to the device.
    const int opened = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (opened < 0) {
      failure = SysError(errno, "socket(AF_PACKET)");
      return;
    }
    fd = owned.Add(opened);
    const unsigned ifindex = if_nametoindex(options.device.c_str());
    if (ifindex == 0) {
      failure = SysError(errno, "if_nametoindex");
      return;
    }
    sockaddr_ll address{};
    address.sll_family = AF_PACKET;
    address.sll_protocol = htons(ETH_P_ALL);
    address.sll_ifindex = static_cast<int>(ifindex);
    if (bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      failure = SysError(errno, "bind(AF_PACKET)");
    }
  });
  if (!entered.ok()) return entered.error();
  if (failure) {
    failure->interface = options.device;
    return *failure;
  }
  const int on = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &on, sizeof(on)) != 0) {
    return SysError(errno, "setsockopt(PACKET_AUXDATA)");
  }

  ChecksumSample sample;
  std::vector<uint8_t> frame(kMaxFrameBytes);
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(tpacket_auxdata))];
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeoutMs);
  while (sample.frames < options.maxFrames) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd wanted{fd, POLLIN, 0};
    const int ready = poll(&wanted, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) return SysError(errno, "poll");
    if (ready <= 0) continue;
    for (int reads = 0; reads < kReadsPerWake && sample.frames < options.maxFrames; ++reads) {
      sockaddr_ll from{};
      iovec part{frame.data(), frame.size()};
      msghdr message{};
      message.msg_name = &from;
      message.msg_namelen = sizeof(from);
      message.msg_iov = &part;
      message.msg_iovlen = 1;
      message.msg_control = control;
      message.msg_controllen = sizeof(control);
      const ssize_t got = recvmsg(fd, &message, MSG_TRUNC);
      if (got < 0) break;
      if (from.sll_pkttype == PACKET_OUTGOING) continue;  // what this host sends
      Mac source{};
      if (from.sll_halen == source.size()) std::memcpy(source.data(), from.sll_addr, source.size());
      std::optional<tpacket_auxdata> aux;
      // The one control message asked for (musl's CMSG_NXTHDR trips -Wsign-compare).
      const cmsghdr* c = CMSG_FIRSTHDR(&message);
      if (c != nullptr && c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_AUXDATA &&
          c->cmsg_len >= CMSG_LEN(sizeof(tpacket_auxdata))) {
        aux.emplace();
        std::memcpy(&*aux, CMSG_DATA(c), sizeof(*aux));
      }
      const bool cut = static_cast<size_t>(got) > frame.size() || (message.msg_flags & MSG_TRUNC) ||
                       (aux && aux->tp_len != aux->tp_snaplen);
      const bool unfinished =
          !aux || (aux->tp_status & (TP_STATUS_CSUMNOTREADY | kStatusGsoTcp)) != 0;
      sample.Record(source, cut || unfinished || from.sll_halen != source.size()
                                ? Verdict::kNotJudged
                                : JudgeChecksum(ntohs(from.sll_protocol), frame.data(),
                                                static_cast<size_t>(got)));
    }
  }
  return sample;
}

}  // namespace fg::csum
