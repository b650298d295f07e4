// Probes of the paths through a VXLAN device to its peers' VTEP addresses,
// made to tell a broken TX checksum offload from a broken path, with no
// responder on the peers: an ICMP echo (its checksum is always computed in
// software) is answered either way; a UDP datagram to a closed port draws an
// ICMP port-unreachable, and a TCP SYN a RST, only if the peer's stack found
// their checksums right. The packet building and parsing are pure functions;
// ProbePaths opens its sockets inside the namespace, bounded in count and
// time. No Node dependency.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "netlink_socket.h"
#include "result.h"

namespace fg::probe {

// At most this many addresses per call (the policy samples a few peers).
inline constexpr size_t kMaxTargets = 64;
// Bound of one call's wait for answers.
inline constexpr int kMaxTimeoutMs = 10'000;

// An ICMP echo request (type 8) with this identifier and sequence number and
// `payloadBytes` of pattern, its checksum filled in.
std::vector<uint8_t> EchoRequest(uint16_t id, uint16_t sequence, size_t payloadBytes);

struct EchoReply {
  uint32_t source;  // IPv4 source address, network byte order
  uint16_t id;
  uint16_t sequence;
};

// What a raw IPPROTO_ICMP socket reads: an IPv4 header, then ICMP. An echo
// reply (type 0, code 0) whose ICMP checksum is right; nullopt for anything
// else (short, another type, a bad header length or checksum).
std::optional<EchoReply> ParseEchoReply(const uint8_t* data, size_t length);

struct PathProbeOptions {
  std::string device;    // every probe leaves through it (SO_BINDTODEVICE)
  int timeoutMs = 1000;  // how long answers are waited for
  uint16_t udpPort = 0;  // closed ports on the peers
  uint16_t tcpPort = 0;
  uint16_t echoId = 0;  // identifies this call's echo replies
};

struct PathAnswer {
  uint32_t address = 0;  // network byte order
  bool echo = false;     // echo reply from it
  bool udp = false;      // port unreachable (or any reply) for the UDP datagram
  bool tcp = false;      // RST (or a connection) for the SYN
};

// One echo, one UDP datagram and one SYN to each address, then answers until
// all are in or the timeout. Fails (nothing sent) when a socket cannot be
// opened: EPERM for the raw socket means CAP_NET_RAW is missing.
Result<std::vector<PathAnswer>> ProbePaths(const NetnsTarget& target,
                                           const PathProbeOptions& options,
                                           const std::vector<uint32_t>& addresses);

}  // namespace fg::probe
