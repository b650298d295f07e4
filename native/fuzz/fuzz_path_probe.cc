// libFuzzer target for native/path_probe.cc's parsing: arbitrary bytes as a raw
// ICMP socket's read never read out of bounds, and an accepted reply really is
// an IPv4 ICMP echo reply whose checksum verifies; an echo request built from
// the input, turned into a reply behind an IPv4 header, always parses back.
#include <fuzzer/FuzzedDataProvider.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "internet_checksum.h"
#include "path_probe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fg::InternetChecksum;
  std::vector<uint8_t> copy(data, data + size);  // exact size: ASan sees any overread
  const auto parsed = fg::probe::ParseEchoReply(copy.data(), copy.size());
  if (parsed) {
    const size_t header = static_cast<size_t>(copy[0] & 0x0f) * 4;
    if ((copy[0] >> 4) != 4 || copy[9] != IPPROTO_ICMP || copy[header] != 0) std::abort();
    if (InternetChecksum(copy.data() + header, copy.size() - header) != 0) std::abort();
  }

  FuzzedDataProvider input(data, size);
  const auto id = input.ConsumeIntegral<uint16_t>();
  const auto sequence = input.ConsumeIntegral<uint16_t>();
  const auto ihl = input.ConsumeIntegralInRange<int>(5, 15);
  std::vector<uint8_t> icmp =
      fg::probe::EchoRequest(id, sequence, input.ConsumeIntegralInRange<size_t>(0, 1400));
  icmp[0] = 0;
  icmp[2] = icmp[3] = 0;
  const uint16_t checksum = InternetChecksum(icmp.data(), icmp.size());
  icmp[2] = static_cast<uint8_t>(checksum >> 8);
  icmp[3] = static_cast<uint8_t>(checksum);
  std::vector<uint8_t> datagram(static_cast<size_t>(ihl) * 4, 0);
  datagram[0] = static_cast<uint8_t>(0x40 | ihl);
  datagram[9] = IPPROTO_ICMP;
  datagram.insert(datagram.end(), icmp.begin(), icmp.end());
  const auto reply = fg::probe::ParseEchoReply(datagram.data(), datagram.size());
  if (!reply || reply->id != id || reply->sequence != sequence) std::abort();
  return 0;
}
