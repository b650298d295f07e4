// The clock latencies are measured on. No Node dependency.
#pragma once

#include <chrono>
#include <cstdint>

namespace fg {

// steady_clock (CLOCK_MONOTONIC, as process.hrtime) in nanoseconds.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace fg
