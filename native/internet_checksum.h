// RFC 1071's one's-complement arithmetic, shared by the path probes (which
// build ICMP echoes) and the checksum sample (which judges what arrives).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fg {

// Adds `length` bytes to `sum` as big-endian 16-bit words (an odd last byte
// padded with zero). 64 bits: no carry is lost before the fold, whatever the size.
inline uint64_t OnesComplementAdd(uint64_t sum, const uint8_t* data, size_t length) {
  for (size_t i = 0; i + 1 < length; i += 2)
    sum += static_cast<uint64_t>(data[i] << 8 | data[i + 1]);
  if (length % 2 == 1) sum += static_cast<uint64_t>(data[length - 1] << 8);
  return sum;
}

// The sum folded to 16 bits and complemented: the checksum to write, or 0
// when the sum already covers a right checksum.
inline uint16_t FoldChecksum(uint64_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

inline uint16_t InternetChecksum(const uint8_t* data, size_t length) {
  return FoldChecksum(OnesComplementAdd(0, data, length));
}

}  // namespace fg
