// Who sends the packets with bad checksums. The namespace's InCsumErrors
// counters (snmp_counters.h) say that they arrive, not from whom; the
// kernel's "UDP: bad checksum. From ..." line is a rate-limited debug print
// that most kernels compile out. So for a bounded time a packet socket on the
// VXLAN device reads what arrives (decapsulated: the inner frame, its source
// MAC the sending node's VTEP MAC) and judges each UDP and TCP checksum from
// the bytes alone. The judging and counting are pure; SampleChecksums opens
// its socket inside the namespace, bounded in frames and time. No Node
// dependency.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "netlink_socket.h"
#include "result.h"

namespace fg::csum {

// Distinct source MACs counted per sample; past it a bad frame is counted but not attributed.
inline constexpr size_t kMaxSenders = 256;
inline constexpr int kMaxTimeoutMs = 10'000;
inline constexpr uint32_t kMaxFrames = 10'000;
// The longest frame read whole; a longer one is read cut and not judged.
inline constexpr size_t kMaxFrameBytes = 65'535;

enum class Verdict {
  kNotJudged,  // not IPv4/IPv6 UDP or TCP, a fragment, an extension header, cut, no UDP checksum
  kGood,
  kBadUdp,
  kBadTcp,
};

// Pure: the transport checksum of one network-layer packet (what a
// SOCK_DGRAM packet socket reads) whose EtherType is `protocol` (host order).
Verdict JudgeChecksum(uint16_t protocol, const uint8_t* packet, size_t length);

using Mac = std::array<uint8_t, 6>;

struct Sender {
  Mac mac{};
  uint32_t udp = 0;  // bad UDP checksums from it
  uint32_t tcp = 0;  // bad TCP checksums from it
};

struct ChecksumSample {
  uint32_t frames = 0;   // frames received on the device
  uint32_t checked = 0;  // of which judged
  uint32_t bad = 0;      // of which with a bad checksum
  std::vector<Sender> senders;

  // Counts one received frame and its verdict, a bad one against `source`.
  void Record(const Mac& source, Verdict verdict);
};

struct SampleOptions {
  std::string device;
  int timeoutMs = 1000;      // how long frames are read
  uint32_t maxFrames = 500;  // or until this many were received
};

// Reads what arrives on `device` until the timeout or maxFrames. Frames the
// kernel has not finished (CHECKSUM_PARTIAL: local traffic, GRO-merged
// segments) and GSO frames are counted but not judged; the kernel's own
// TP_STATUS_CSUM_VALID is not trusted (it may speak for a VXLAN frame's outer
// datagram only). Fails, nothing read, when the socket cannot be opened:
// EPERM for socket(AF_PACKET) means CAP_NET_RAW is missing.
Result<ChecksumSample> SampleChecksums(const NetnsTarget& target, const SampleOptions& options);

}  // namespace fg::csum
