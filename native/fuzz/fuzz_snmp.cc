// libFuzzer target for native/snmp_counters.cc: arbitrary texts as /proc/net/snmp
// and snmp6. The parser must refuse or accept without reading past either text.
#include <fuzzer/FuzzedDataProvider.h>

#include <string>

#include "snmp_counters.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const std::string snmp = input.ConsumeRandomLengthString(fg::SnmpFiles::kMaxBytes);
  const std::string snmp6 = input.ConsumeRemainingBytesAsString();
  (void)fg::ParseChecksumErrors(snmp, snmp6);
  return 0;
}
