// libFuzzer target for native/checksum_sample.cc: arbitrary bytes as an IPv4
// or IPv6 packet read from the device. The judge must not read past the packet,
// and must agree with itself on the same bytes followed by Ethernet padding
// (what lies past the IP length is never summed).
#include <fuzzer/FuzzedDataProvider.h>
#include <linux/if_ether.h>

#include <cstdlib>
#include <vector>

#include "checksum_sample.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const uint16_t protocol = input.ConsumeBool() ? ETH_P_IP : ETH_P_IPV6;
  const std::vector<uint8_t> packet = input.ConsumeRemainingBytes<uint8_t>();
  const fg::csum::Verdict verdict = fg::csum::JudgeChecksum(protocol, packet.data(), packet.size());
  std::vector<uint8_t> padded(packet);
  padded.insert(padded.end(), 8, 0x5a);
  const fg::csum::Verdict again = fg::csum::JudgeChecksum(protocol, padded.data(), padded.size());
  // Padding can only make a packet that was cut whole; a whole one keeps its verdict.
  if (verdict != fg::csum::Verdict::kNotJudged && again != verdict) std::abort();
  return 0;
}
