// The checksum-error counters of one network namespace, from /proc/net/snmp
// and /proc/net/snmp6. A datagram or segment whose checksum fails is counted
// by the receiver and dropped: the passive sign that a peer sends with broken
// TX checksum offload (the peer's node, not this one, is the one to fix).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "netlink_socket.h"
#include "result.h"

namespace fg {

// Each counter is absent when the kernel does not keep it (InCsumErrors since
// Linux 3.10; snmp6 only with IPv6).
struct ChecksumErrors {
  std::optional<uint64_t> udp;   // "Udp: InCsumErrors": IPv4 UDP, VXLAN's outer datagram included
  std::optional<uint64_t> tcp;   // "Tcp: InCsumErrors": TCP over IPv4 and IPv6
  std::optional<uint64_t> udp6;  // "Udp6InCsumErrors"
};

// Pure: the counters in the texts of /proc/net/snmp (a header line and a
// value line per protocol) and /proc/net/snmp6 (a name and a value per line;
// empty when there is none). A text that names a counter without a readable
// value is refused (EBADMSG, the reason in the detail).
Result<ChecksumErrors> ParseChecksumErrors(std::string_view snmp, std::string_view snmp6);

// The two files of one namespace, opened inside it (a /proc/net file shows
// the namespace of the thread that opened it, for as long as it is open) and
// read again from the start on each Read(), at most kMaxBytes each.
class SnmpFiles {
 public:
  static constexpr size_t kMaxBytes = 64 * 1024;

  static Result<SnmpFiles> Open(const NetnsTarget& target);

  SnmpFiles(SnmpFiles&& other) noexcept;
  SnmpFiles& operator=(SnmpFiles&& other) noexcept;
  SnmpFiles(const SnmpFiles&) = delete;
  SnmpFiles& operator=(const SnmpFiles&) = delete;
  ~SnmpFiles();

  Result<ChecksumErrors> Read() const;

 private:
  SnmpFiles(int snmp, int snmp6) : snmp_(snmp), snmp6_(snmp6) {}
  void Close();

  int snmp_ = -1;
  int snmp6_ = -1;  // -1: the namespace has no IPv6
};

}  // namespace fg
