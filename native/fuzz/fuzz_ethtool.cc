// libFuzzer target for native/ethtool.cc: a fake SIOCETHTOOL whose every reply
// (return code, sset mask and count, string table bytes, returned len/size fields,
// feature blocks, drvinfo bytes) is drawn from the input, driving GetFeatures,
// SetFeatures (with requests derived from the input) and GetDriverInfo.
//
// The fake honours the buffer the code under test allocated, exactly as the kernel
// would: it reads the counts the caller put in (GSTRINGS len, GFEATURES size) and
// never writes past them; everything else (the len/size it writes back, the bytes
// of each slot) is arbitrary. ASan catches any read past the allocation.
#include <fuzzer/FuzzedDataProvider.h>
#include <linux/ethtool.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ethtool.h"

namespace {

// Keep the fake inside what the code can legitimately have allocated.
constexpr uint32_t kMaxStrings = 2048;
constexpr uint32_t kMaxBlocks = (kMaxStrings + 31) / 32;

template <typename T>
T Load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
void Store(uint8_t* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}

// A small set of plausible names so that requests can hit real table entries.
const char* const kNames[] = {"tx-checksum-ip-generic",
                              "tx-tcp-segmentation",
                              "rx-gro",
                              "tx-checksumming",
                              "tx-checksum-ipv4",
                              "",
                              "tx-lockless",
                              "highdma"};
constexpr size_t kNameCount = sizeof(kNames) / sizeof(kNames[0]);

class FuzzIoctl {
 public:
  explicit FuzzIoctl(FuzzedDataProvider& input) : input_(input) {}

  int operator()(const std::string& ifname, void* command) {
    if (ifname.empty() || ifname.size() >= 16 || ifname.find('\0') != std::string::npos) {
      __builtin_trap();  // names must be validated before any ioctl
    }
    if (++calls_ > 64) return -EIO;  // no path should loop; stop feeding it
    auto* bytes = static_cast<uint8_t*>(command);
    const uint32_t cmd = Load<uint32_t>(bytes);
    const int rc = ReturnCode(cmd);
    switch (cmd) {
      case ETHTOOL_GSSET_INFO:
        if (Load<uint64_t>(bytes + 8) != (uint64_t{1} << ETH_SS_FEATURES)) __builtin_trap();
        Store<uint64_t>(bytes + 8, Mask());
        Store<uint32_t>(bytes + 16, Count());
        break;
      case ETHTOOL_GSTRINGS: {
        const uint32_t allocated = Load<uint32_t>(bytes + 8);
        if (allocated == 0 || allocated > kMaxStrings) __builtin_trap();  // E2 / the cap
        FillStrings(bytes + 12, allocated);
        const uint32_t returned =
            input_.ConsumeBool() ? allocated : input_.ConsumeIntegral<uint32_t>();
        Store<uint32_t>(bytes + 8, returned);
        break;
      }
      case ETHTOOL_GFEATURES: {
        const uint32_t size = Load<uint32_t>(bytes + 4);
        if (size == 0 || size > kMaxBlocks) __builtin_trap();
        const uint32_t filled = input_.ConsumeIntegralInRange<uint32_t>(0, size);
        for (uint32_t i = 0; i < filled * 4; ++i) {
          Store<uint32_t>(bytes + 8 + i * 4, input_.ConsumeIntegral<uint32_t>());
        }
        Store<uint32_t>(bytes + 4,
                        input_.ConsumeBool() ? size : input_.ConsumeIntegral<uint32_t>());
        break;
      }
      case ETHTOOL_SFEATURES: {
        const uint32_t size = Load<uint32_t>(bytes + 4);
        if (size == 0 || size > kMaxBlocks) __builtin_trap();
        uint32_t valid = 0;
        for (uint32_t i = 0; i < size; ++i) valid |= Load<uint32_t>(bytes + 8 + i * 8);
        if (valid == 0) __builtin_trap();  // a write must change something
        break;
      }
      case ETHTOOL_GTXCSUM:
        Store<uint32_t>(bytes + 4, input_.ConsumeIntegral<uint32_t>());
        break;
      case ETHTOOL_STXCSUM:
        break;
      case ETHTOOL_GDRVINFO: {
        // Arbitrary bytes in all 192 bytes after cmd, often with no NUL at all.
        const std::vector<uint8_t> fill = input_.ConsumeBytes<uint8_t>(192);
        std::memset(bytes + 4, input_.ConsumeIntegral<uint8_t>(), 192);
        if (!fill.empty()) std::memcpy(bytes + 4, fill.data(), fill.size());
        break;
      }
      default:
        __builtin_trap();  // the code under test only sends the commands above
    }
    return rc;
  }

 private:
  int ReturnCode(uint32_t cmd) {
    switch (input_.ConsumeIntegralInRange<int>(0, 15)) {
      case 1:
        return -EOPNOTSUPP;
      case 2:
        return -EPERM;
      case 3:
        return -EINVAL;
      case 4:
        return -ENODEV;
      case 5:
        return -EFAULT;
      case 6:
        return input_.ConsumeIntegral<int>();  // anything, including INT_MIN
      case 7:
        return cmd == ETHTOOL_SFEATURES ? input_.ConsumeIntegralInRange<int>(1, 7) : 0;
      default:
        return 0;
    }
  }

  uint64_t Mask() {
    switch (input_.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        return 0;
      case 1:
        return input_.ConsumeIntegral<uint64_t>();
      default:
        return uint64_t{1} << ETH_SS_FEATURES;
    }
  }

  uint32_t Count() {
    switch (input_.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        return 0;
      case 1:
        return input_.ConsumeIntegral<uint32_t>();  // garbage, usually over the cap
      default:
        return input_.ConsumeIntegralInRange<uint32_t>(1, 100);
    }
  }

  void FillStrings(uint8_t* slots, uint32_t allocated) {
    const uint32_t filled = input_.ConsumeIntegralInRange<uint32_t>(0, allocated);
    for (uint32_t i = 0; i < filled; ++i) {
      uint8_t* slot = slots + size_t{i} * ETH_GSTRING_LEN;
      if (input_.ConsumeBool()) {
        const char* name = kNames[input_.ConsumeIntegralInRange<size_t>(0, kNameCount - 1)];
        std::memcpy(slot, name, std::strlen(name));
      } else {
        const std::vector<uint8_t> raw = input_.ConsumeBytes<uint8_t>(ETH_GSTRING_LEN);
        if (!raw.empty()) std::memcpy(slot, raw.data(), raw.size());
      }
    }
  }

  FuzzedDataProvider& input_;
  int calls_ = 0;
};

std::vector<fg::ethtool::FeatureRequest> Requests(FuzzedDataProvider& input) {
  std::vector<fg::ethtool::FeatureRequest> requests;
  const size_t n = input.ConsumeIntegralInRange<size_t>(0, 4);
  for (size_t i = 0; i < n; ++i) {
    fg::ethtool::FeatureRequest request;
    request.name = input.ConsumeBool()
                       ? kNames[input.ConsumeIntegralInRange<size_t>(0, kNameCount - 1)]
                       : input.ConsumeRandomLengthString(40);
    request.enable = input.ConsumeBool();
    requests.push_back(std::move(request));
  }
  return requests;
}

void CheckError(const fg::SysError& error) {
  if (error.errnum <= 0 || error.syscall.empty() || error.detail.empty()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const std::string ifname =
      input.ConsumeBool() ? "flannel.1" : input.ConsumeRandomLengthString(20);
  const int which = input.ConsumeIntegralInRange<int>(0, 2);
  FuzzIoctl fake(input);
  const fg::ethtool::Ioctl ioctl = [&fake](const std::string& name, void* command) {
    return fake(name, command);
  };

  if (which == 0) {
    auto result = fg::ethtool::GetFeatures(ioctl, ifname);
    if (!result.ok()) {
      CheckError(result.error());
    } else {
      for (const auto& feature : result.value().features) {
        if (feature.name.empty() || feature.name.size() > 31) __builtin_trap();
        if (!feature.available && !feature.fixed) __builtin_trap();
      }
    }
  } else if (which == 1) {
    const auto requests = Requests(input);
    auto result = fg::ethtool::SetFeatures(ioctl, ifname, requests);
    if (!result.ok()) {
      CheckError(result.error());
    } else {
      const auto& outcome = result.value();
      if (outcome.requested.size() != requests.size()) __builtin_trap();
      if (outcome.active.size() != requests.size()) __builtin_trap();
      if (!outcome.written && (!outcome.notApplied.empty() || !outcome.sideEffects.empty())) {
        __builtin_trap();
      }
      for (const auto& change : outcome.sideEffects) {
        if (change.before == change.after) __builtin_trap();
      }
    }
  } else {
    auto result = fg::ethtool::GetDriverInfo(ioctl, ifname);
    if (!result.ok()) {
      CheckError(result.error());
    } else if (result.value().driver.size() > 31 || result.value().busInfo.size() > 31) {
      __builtin_trap();
    }
  }
  return 0;
}
