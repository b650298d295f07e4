// Unit tests for native/snmp_counters.cc: the counters in /proc/net/snmp and
// snmp6 as kernels since 3.10 print them, as older ones (no InCsumErrors), and
// texts that must be refused; then the real files of this process's namespace.
#include "snmp_counters.h"

#include <cerrno>
#include <string>

#include "test_harness.h"

namespace {

using fg::ChecksumErrors;
using fg::ParseChecksumErrors;
using fg::Result;

// Linux 6.x, as read on the test machine (some lines left out).
constexpr const char* kSnmp =
    "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n"
    "Ip: 1 64 613069 0\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets "
    "CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 24171 19570 379 18196 15 584773 499663 25 0 19730 7\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors "
    "IgnoredMulti MemErrors\n"
    "Udp: 8121 0 3 8222 0 0 3 0 0\n"
    "UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors "
    "IgnoredMulti MemErrors\n"
    "UdpLite: 0 0 0 0 0 0 99 0 0\n";

constexpr const char* kSnmp6 =
    "Ip6InReceives                   \t120\n"
    "Udp6InDatagrams                 \t4\n"
    "Udp6InCsumErrors                \t18446744073709551615\n"
    "UdpLite6InCsumErrors            \t5\n";

ChecksumErrors Parsed(const std::string& snmp, const std::string& snmp6 = "") {
  Result<ChecksumErrors> result = ParseChecksumErrors(snmp, snmp6);
  if (!result.ok()) throw fg_test::Failure("refused: " + result.error().detail);
  return result.value();
}

std::string Refused(const std::string& snmp, const std::string& snmp6 = "") {
  Result<ChecksumErrors> result = ParseChecksumErrors(snmp, snmp6);
  if (result.ok()) throw fg_test::Failure("accepted: " + snmp + " / " + snmp6);
  EXPECT_EQ(result.error().errnum, EBADMSG);
  return result.error().detail;
}

TEST_CASE("snmp: Udp and Tcp InCsumErrors by column, UdpLite's not taken for Udp's") {
  const ChecksumErrors counters = Parsed(kSnmp, kSnmp6);
  EXPECT_TRUE(counters.udp == 3u);
  EXPECT_TRUE(counters.tcp == 7u);
  EXPECT_TRUE(counters.udp6 == UINT64_MAX);
}

TEST_CASE("snmp: a kernel before 3.10 (no InCsumErrors) and no IPv6: the counters are absent") {
  const ChecksumErrors counters = Parsed(
      "Tcp: RtoAlgorithm InErrs OutRsts\nTcp: 1 0 5\n"
      "Udp: InDatagrams NoPorts InErrors\nUdp: 1 2 3\n");
  EXPECT_FALSE(counters.udp.has_value());
  EXPECT_FALSE(counters.tcp.has_value());
  EXPECT_FALSE(counters.udp6.has_value());
  EXPECT_FALSE(Parsed("").udp.has_value());
}

TEST_CASE("snmp: a value line that does not match its header is refused") {
  EXPECT_EQ(Refused("Udp: InDatagrams InCsumErrors\nUdp: 1\n"),
            std::string("Udp: InCsumErrors: the value line does not match the header"));
  EXPECT_EQ(Refused("Udp: InDatagrams InCsumErrors\nTcp: 1 2\n"),
            std::string("Udp: InCsumErrors: the value line does not match the header"));
  EXPECT_EQ(Refused("Udp: InDatagrams InCsumErrors\n"),
            std::string("Udp: InCsumErrors: no value line"));
}

TEST_CASE("snmp: a counter that is not a 64-bit decimal is refused") {
  EXPECT_EQ(Refused("Udp: InCsumErrors\nUdp: -1\n"),
            std::string("Udp: InCsumErrors: not a counter"));
  EXPECT_EQ(Refused("Tcp: InCsumErrors\nTcp: 18446744073709551616\n"),
            std::string("Tcp: InCsumErrors: not a counter"));
  EXPECT_EQ(Refused("", "Udp6InCsumErrors\t1x\n"), std::string("Udp6InCsumErrors: not a counter"));
  EXPECT_EQ(Refused("", "Udp6InCsumErrors\t1 2\n"), std::string("Udp6InCsumErrors: not a counter"));
  EXPECT_EQ(Refused("", "Udp6InCsumErrors\n"), std::string("Udp6InCsumErrors: not a counter"));
}

TEST_CASE("snmp: this namespace's files are read, again from the start on each read") {
  Result<fg::SnmpFiles> files = fg::SnmpFiles::Open(fg::NetnsTarget{});
  EXPECT_TRUE(files.ok());
  for (int i = 0; i < 3; ++i) {
    Result<ChecksumErrors> counters = files.value().Read();
    EXPECT_TRUE(counters.ok());
    EXPECT_TRUE(counters.value().udp.has_value());
    EXPECT_TRUE(counters.value().tcp.has_value());
  }
}

TEST_CASE("snmp: a namespace path that is not one fails to open, naming it") {
  Result<fg::SnmpFiles> files = fg::SnmpFiles::Open(fg::NetnsTarget{"/proc/self/ns/uts"});
  EXPECT_FALSE(files.ok());
  EXPECT_EQ(files.error().errnum, EINVAL);
}

}  // namespace
