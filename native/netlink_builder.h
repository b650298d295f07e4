// Serialisation of the few rtnetlink requests flannel-guard sends. Pure
// functions: they only build bytes, so they can be round-tripped through the
// parser in unit tests and fuzzers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fg::netlink {

// A dump of every link (RTM_GETLINK) or neighbour table (RTM_GETNEIGH; family
// AF_UNSPEC for ARP/NDP, AF_BRIDGE for FDB). The family header is fully zeroed,
// as strict-checking kernels require of dumps.
std::vector<uint8_t> BuildDumpRequest(uint16_t type, uint8_t family, uint32_t seq);

// RTM_GETLINK for one interface index.
std::vector<uint8_t> BuildGetLinkRequest(int32_t ifindex, uint32_t seq);

// RTM_GETLINK for one interface name (IFLA_IFNAME, at most 15 bytes).
std::vector<uint8_t> BuildGetLinkByNameRequest(const std::string& name, uint32_t seq);

// RTM_NEWLINK addressed by ifindex carrying only IFLA_ADDRESS, ACK requested or not (then
// the kernel answers only a failure).
std::vector<uint8_t> BuildSetLinkAddressRequest(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                                uint32_t seq, bool ack = true);

// RTM_NEWLINK on ifindex 1 (loopback in every namespace) with no attributes:
// changes nothing, but the kernel checks CAP_NET_ADMIN before it looks.
std::vector<uint8_t> BuildNoopSetLinkRequest(uint32_t seq);

struct NeighbourEntry {
  uint8_t family = 0;  // AF_INET, AF_INET6 or AF_BRIDGE
  int32_t ifindex = 0;
  std::vector<uint8_t> destination;  // 4 or 16 bytes (FDB: remote VTEP IP), or empty
  std::array<uint8_t, 6> lladdr{};
  uint16_t state = 0;  // NUD_*
  uint8_t flags = 0;   // NTF_*
};

// RTM_NEWNEIGH with NLM_F_CREATE|NLM_F_REPLACE, ACK requested.
std::vector<uint8_t> BuildNeighbourReplaceRequest(const NeighbourEntry& entry, uint32_t seq);

// RTM_DELNEIGH of the entry (an FDB entry by MAC and remote, an ARP/NDP entry by address), ACK
// requested.
std::vector<uint8_t> BuildNeighbourDeleteRequest(const NeighbourEntry& entry, uint32_t seq);

// The replace request appended to `out` (a datagram of several), with or without
// NLM_F_ACK: the kernel answers a request without it only when it fails.
void AppendNeighbourReplaceRequest(std::vector<uint8_t>* out, const NeighbourEntry& entry,
                                   uint32_t seq, bool ack);

// Sets NLM_F_ACK on the request that starts at `offset` of `bytes` (its size does not change).
void RequestAck(std::vector<uint8_t>* bytes, size_t offset);

}  // namespace fg::netlink
