// Bounded parsing of rtnetlink datagrams (links, neighbours, acks, dump ends).
// Pure functions over byte ranges: no sockets, no Node, so every branch can be
// unit-tested on fixtures and fuzzed. Nothing here reads past `length`, and a
// malformed message never yields a garbled value: fields that cannot be read
// are reported as absent or with a reason.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace fg::netlink {

// A link-layer address attribute (IFLA_ADDRESS, NDA_LLADDR). Only a 6-byte
// payload is an Ethernet MAC; any other length is reported, never truncated
// or padded into one.
struct MacField {
  enum class State : uint8_t { kAbsent, kValid, kBadLength };
  State state = State::kAbsent;
  std::array<uint8_t, 6> bytes{};
  uint16_t length = 0;  // payload length, meaningful when kBadLength
};

struct VxlanInfo {
  std::optional<uint32_t> vni;
  std::optional<uint16_t> port;             // host byte order
  std::vector<uint8_t> local;               // 4 or 16 bytes, empty when unset
  std::optional<uint32_t> underlayIfindex;  // IFLA_VXLAN_LINK
  std::optional<bool> learning;
};

struct LinkRecord {
  bool deleted = false;  // RTM_DELLINK
  int32_t ifindex = 0;
  uint16_t deviceType = 0;   // ifi_type (ARPHRD_*)
  uint32_t flags = 0;        // ifi_flags (IFF_*)
  uint32_t changeMask = 0;   // ifi_change: ~0u when the kernel announces a new device
  std::string name;          // at most 15 bytes, up to NUL or attribute end
  bool nameTooLong = false;  // the attribute carried more than 15 name bytes
  MacField mac;
  std::optional<uint32_t> mtu;
  std::optional<uint8_t> operstate;
  std::optional<uint32_t> master;        // IFLA_MASTER
  std::optional<uint32_t> lowerIfindex;  // IFLA_LINK
  std::optional<int32_t> linkNetnsid;    // IFLA_LINK_NETNSID: IFLA_LINK is in another netns
  std::optional<uint32_t> event;         // IFLA_EVENT
  std::string kind;                      // IFLA_LINKINFO / IFLA_INFO_KIND
  std::optional<VxlanInfo> vxlan;        // when kind == "vxlan"
};

struct NeighRecord {
  bool deleted = false;  // RTM_DELNEIGH
  uint8_t family = 0;    // AF_INET, AF_INET6, AF_BRIDGE (FDB)
  int32_t ifindex = 0;
  uint16_t state = 0;                // NUD_*
  uint8_t flags = 0;                 // NTF_*
  uint8_t type = 0;                  // RTN_*
  std::vector<uint8_t> destination;  // NDA_DST: 4 or 16 bytes (FDB: remote VTEP IP), may be empty
  MacField lladdr;
  std::optional<uint32_t> vni;     // NDA_VNI
  std::optional<uint32_t> master;  // NDA_MASTER
};

// NLMSG_ERROR: error 0 is an ACK.
struct AckRecord {
  int32_t error = 0;          // 0 or -errno
  std::string extackMessage;  // NLMSGERR_ATTR_MSG, empty when absent or malformed
};

// NLMSG_DONE ends a dump; a kernel may append an errno.
struct DoneRecord {
  int32_t error = 0;  // 0 or -errno
};

// A message whose header was sound but whose body could not be decoded.
struct MalformedRecord {
  std::string reason;
};

using MessageBody =
    std::variant<std::monostate, LinkRecord, NeighRecord, AckRecord, DoneRecord, MalformedRecord>;

struct Message {
  uint16_t type = 0;
  uint16_t flags = 0;  // NLM_F_*; NLM_F_DUMP_INTR marks an inconsistent dump
  uint32_t seq = 0;
  uint32_t portid = 0;  // nlmsg_pid: the requester for replies and some notifications
  MessageBody body;
};

// Where and why parsing of a datagram's remainder stopped.
struct DatagramError {
  size_t offset = 0;
  std::string reason;
};

struct ParsedDatagram {
  std::vector<Message> messages;
  std::optional<DatagramError> error;
};

// Parses every netlink message in one datagram. A bad header (length shorter
// than a header, longer than the bytes left) stops parsing at that message and
// is reported in `error`; what was parsed before it is kept.
ParsedDatagram ParseDatagram(const uint8_t* data, size_t length);

// The same into `out`, cleared first: a reader parsing datagram after datagram keeps the
// messages' storage (one allocation less per datagram).
void ParseDatagramInto(const uint8_t* data, size_t length, ParsedDatagram* out);

// Whether a datagram may hold an RTM_NEWLINK or RTM_DELLINK of `ifindex`: from the headers
// alone, without parsing attributes. A message too short or malformed to tell counts as one.
bool MayNotifyLink(const uint8_t* data, size_t length, int32_t ifindex);

// How a received datagram should be treated, from the socket metadata alone.
enum class Admission : uint8_t { kAccept, kForeignSender, kTruncated };

// `senderPortid` is the sockaddr_nl nl_pid of the datagram (0 is the kernel);
// `msgFlags` are recvmsg's msg_flags. Checked before any parsing.
Admission Admit(uint32_t senderPortid, int msgFlags);

// Canonical lower-case colon-separated form ("0e:2a:00:00:00:01").
std::string FormatMac(const std::array<uint8_t, 6>& mac);

// Human-readable reason for a MacField that is not kValid.
std::string DescribeMacProblem(const MacField& field);

}  // namespace fg::netlink
