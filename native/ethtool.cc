// SIOCETHTOOL feature and driver-info access (see ethtool.h).
//
// Every request is built in an 8-byte aligned byte buffer whose size is
// computed from the counts we put into it; replies are copied out with memcpy
// and never indexed past what we allocated, whatever the kernel (or a fake)
// writes into the count fields.
#include "ethtool.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>

namespace fg::ethtool {
namespace {

// ---- Kernel ABI. A layout mistake must fail the build, not turn into EFAULT/EINVAL (E15).
static_assert(ETH_GSTRING_LEN == 32, "feature names are 32-byte slots");
static_assert(sizeof(ethtool_sset_info) == 16, "ethtool_sset_info layout");
static_assert(offsetof(ethtool_sset_info, reserved) == 4, "ethtool_sset_info layout");
static_assert(offsetof(ethtool_sset_info, sset_mask) == 8, "ethtool_sset_info layout");
static_assert(offsetof(ethtool_sset_info, data) == 16, "ethtool_sset_info layout");
static_assert(sizeof(ethtool_gstrings) == 12, "ethtool_gstrings layout");
static_assert(offsetof(ethtool_gstrings, string_set) == 4, "ethtool_gstrings layout");
static_assert(offsetof(ethtool_gstrings, len) == 8, "ethtool_gstrings layout");
static_assert(offsetof(ethtool_gstrings, data) == 12, "ethtool_gstrings layout");
static_assert(sizeof(ethtool_get_features_block) == 16, "ethtool_get_features_block layout");
static_assert(offsetof(ethtool_get_features_block, available) == 0, "features block layout");
static_assert(offsetof(ethtool_get_features_block, requested) == 4, "features block layout");
static_assert(offsetof(ethtool_get_features_block, active) == 8, "features block layout");
static_assert(offsetof(ethtool_get_features_block, never_changed) == 12, "features block layout");
static_assert(sizeof(ethtool_set_features_block) == 8, "ethtool_set_features_block layout");
static_assert(offsetof(ethtool_set_features_block, valid) == 0, "set block layout");
static_assert(offsetof(ethtool_set_features_block, requested) == 4, "set block layout");
static_assert(sizeof(ethtool_gfeatures) == 8, "ethtool_gfeatures header");
static_assert(offsetof(ethtool_gfeatures, size) == 4, "ethtool_gfeatures header");
static_assert(offsetof(ethtool_gfeatures, features) == 8, "ethtool_gfeatures header");
static_assert(sizeof(ethtool_sfeatures) == 8, "ethtool_sfeatures header");
static_assert(offsetof(ethtool_sfeatures, size) == 4, "ethtool_sfeatures header");
static_assert(offsetof(ethtool_sfeatures, features) == 8, "ethtool_sfeatures header");
static_assert(sizeof(ethtool_value) == 8, "ethtool_value layout");
static_assert(offsetof(ethtool_value, data) == 4, "ethtool_value layout");
static_assert(sizeof(ethtool_drvinfo) == 196, "ethtool_drvinfo layout");
static_assert(offsetof(ethtool_drvinfo, driver) == 4, "ethtool_drvinfo layout");
static_assert(offsetof(ethtool_drvinfo, version) == 36, "ethtool_drvinfo layout");
static_assert(offsetof(ethtool_drvinfo, fw_version) == 68, "ethtool_drvinfo layout");
static_assert(offsetof(ethtool_drvinfo, bus_info) == 100, "ethtool_drvinfo layout");
static_assert(sizeof(ethtool_drvinfo::driver) == 32 && sizeof(ethtool_drvinfo::version) == 32 &&
                  sizeof(ethtool_drvinfo::fw_version) == 32 &&
                  sizeof(ethtool_drvinfo::bus_info) == 32,
              "ethtool_drvinfo string fields");
static_assert(ETH_SS_FEATURES == 4, "string set id");
static_assert(ETHTOOL_F_UNSUPPORTED == 1 && ETHTOOL_F_WISH == 2 && ETHTOOL_F_COMPAT == 4,
              "SFEATURES return flags");

// The kernel has ~65 features; anything far beyond that is garbage, not a table.
constexpr uint32_t kMaxFeatureCount = 2048;
constexpr size_t kNameSlot = ETH_GSTRING_LEN;
constexpr size_t kGetBlockSize = sizeof(ethtool_get_features_block);
constexpr size_t kSetBlockSize = sizeof(ethtool_set_features_block);
constexpr const char* kLegacyName = "tx-checksumming";

// Zeroed, 8-byte aligned scratch for one ethtool command.
class Buffer {
 public:
  explicit Buffer(size_t size) : words_((size + 7) / 8, 0) {}
  void* data() { return words_.data(); }
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(words_.data()); }
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(words_.data()); }

  template <typename T>
  T Get(size_t offset) const {
    T value;
    std::memcpy(&value, bytes() + offset, sizeof(T));
    return value;
  }
  template <typename T>
  void Put(size_t offset, T value) {
    std::memcpy(bytes() + offset, &value, sizeof(T));
  }

 private:
  std::vector<uint64_t> words_;
};

const char* CommandName(uint32_t command) {
  switch (command) {
    case ETHTOOL_GSSET_INFO:
      return "ETHTOOL_GSSET_INFO";
    case ETHTOOL_GSTRINGS:
      return "ETHTOOL_GSTRINGS";
    case ETHTOOL_GFEATURES:
      return "ETHTOOL_GFEATURES";
    case ETHTOOL_SFEATURES:
      return "ETHTOOL_SFEATURES";
    case ETHTOOL_GTXCSUM:
      return "ETHTOOL_GTXCSUM";
    case ETHTOOL_STXCSUM:
      return "ETHTOOL_STXCSUM";
    case ETHTOOL_GDRVINFO:
      return "ETHTOOL_GDRVINFO";
    default:
      return "SIOCETHTOOL";
  }
}

std::string Syscall(uint32_t command) { return std::string("ioctl(") + CommandName(command) + ")"; }

SysError MakeError(int errnum, uint32_t command, const std::string& ifname, std::string detail) {
  SysError error;
  error.errnum = errnum;
  error.syscall = Syscall(command);
  error.interface = ifname;
  error.detail = std::move(detail);
  return error;
}

bool IsSet(uint32_t command) { return command == ETHTOOL_SFEATURES || command == ETHTOOL_STXCSUM; }

// Converts a negative ioctl result into a SysError with a reason a human can act on.
SysError IoctlError(int rc, uint32_t command, const std::string& ifname,
                    const std::string& context) {
  // Anything outside -1..-4095 is not an errno (and -INT_MIN would overflow).
  const bool plausible = rc < 0 && rc >= -4095;
  const int errnum = plausible ? -rc : EIO;
  std::string reason;
  if (!plausible) {
    reason = "implausible ioctl result " + std::to_string(rc);
  } else if (errnum == ENODEV) {
    reason =
        "no such device in the ioctl socket's network namespace (removed, renamed, or in "
        "another netns)";
  } else if ((errnum == EPERM || errnum == EACCES) && IsSet(command)) {
    reason = "CAP_NET_ADMIN required in the ioctl socket's network namespace";
  } else if (errnum == EOPNOTSUPP) {
    reason = "not supported by driver";
  } else if (errnum == EFAULT) {
    reason = "kernel could not access the request (struct layout or size bug?)";
  } else if (errnum == EINVAL) {
    reason = "kernel rejected the request as invalid (struct layout or size mismatch?)";
  } else {
    reason = std::string(CommandName(command)) + " failed";
  }
  if (!context.empty()) reason += "; " + context;
  return MakeError(errnum, command, ifname, std::move(reason));
}

// Interface names reach the kernel through a fixed 16-byte ifr_name: anything
// that would not fit terminated is refused here, never truncated (E1 defence in depth;
// the full kernel/systemd rules are checked on the TypeScript side).
bool ValidIfname(const std::string& ifname) {
  return !ifname.empty() && ifname.size() < IFNAMSIZ && ifname.find('\0') == std::string::npos;
}

SysError BadIfname(const std::string& ifname) {
  SysError error;
  error.errnum = EINVAL;
  error.syscall = "ioctl(SIOCETHTOOL)";
  error.interface = ifname.substr(0, 64);
  error.detail = "invalid interface name: must be 1.." + std::to_string(IFNAMSIZ - 1) +
                 " bytes without NUL (got " + std::to_string(ifname.size()) + " bytes)";
  return error;
}

// A fixed-size char field with no guaranteed NUL: the last byte is treated as
// a terminator, so at most size-1 bytes are taken.
std::string BoundedString(const uint8_t* field, size_t size) {
  const size_t limit = size - 1;
  size_t length = 0;
  while (length < limit && field[length] != 0) ++length;
  return std::string(reinterpret_cast<const char*>(field), length);
}

bool TestBit(const std::vector<ethtool_get_features_block>& blocks, size_t index,
             uint32_t ethtool_get_features_block::*mask) {
  return (blocks[index / 32].*mask >> (index % 32)) & 1u;
}

// The named table as the kernel has it: one name per bit index ("" = undefined bit).
struct RawTable {
  bool legacy = false;
  bool legacyTxCsum = false;
  uint32_t count = 0;   // GSSET_INFO's string count: the number of feature bits
  uint32_t blocks = 0;  // ceil(count / 32): the size of GFEATURES/SFEATURES arrays
  std::vector<std::string> names;
  std::vector<ethtool_get_features_block> state;
};

bool Available(const RawTable& table, size_t index) {
  return TestBit(table.state, index, &ethtool_get_features_block::available);
}
bool NeverChanged(const RawTable& table, size_t index) {
  return TestBit(table.state, index, &ethtool_get_features_block::never_changed);
}
bool Requested(const RawTable& table, size_t index) {
  return TestBit(table.state, index, &ethtool_get_features_block::requested);
}
bool Active(const std::vector<ethtool_get_features_block>& state, size_t index) {
  return TestBit(state, index, &ethtool_get_features_block::active);
}

Result<bool> ReadTxCsum(const Ioctl& ioctl, const std::string& ifname, const std::string& context) {
  Buffer buffer(sizeof(ethtool_value));
  buffer.Put<uint32_t>(offsetof(ethtool_value, cmd), ETHTOOL_GTXCSUM);
  const int rc = ioctl(ifname, buffer.data());
  if (rc < 0) return IoctlError(rc, ETHTOOL_GTXCSUM, ifname, context);
  return buffer.Get<uint32_t>(offsetof(ethtool_value, data)) != 0;
}

Result<std::vector<ethtool_get_features_block>> ReadBlocks(const Ioctl& ioctl,
                                                           const std::string& ifname,
                                                           uint32_t blocks,
                                                           const std::string& context) {
  Buffer buffer(sizeof(ethtool_gfeatures) + size_t{blocks} * kGetBlockSize);
  buffer.Put<uint32_t>(offsetof(ethtool_gfeatures, cmd), ETHTOOL_GFEATURES);
  buffer.Put<uint32_t>(offsetof(ethtool_gfeatures, size), blocks);
  const int rc = ioctl(ifname, buffer.data());
  if (rc < 0) return IoctlError(rc, ETHTOOL_GFEATURES, ifname, context);
  // The kernel answers `size` = its own word count but copies at most the
  // `blocks` we offered; only those are read. A smaller answer leaves the
  // remaining (zeroed) blocks as "no such feature".
  std::vector<ethtool_get_features_block> state(blocks);
  if (blocks > 0) {
    std::memcpy(state.data(), buffer.bytes() + sizeof(ethtool_gfeatures), blocks * kGetBlockSize);
  }
  return state;
}

// GSSET_INFO, GSTRINGS, GFEATURES, or the legacy GTXCSUM fallback.
Result<RawTable> ReadTable(const Ioctl& ioctl, const std::string& ifname) {
  RawTable table;

  // 1. How many feature bits? One u32 follows the header for the one set we ask about.
  Buffer info(sizeof(ethtool_sset_info) + sizeof(uint32_t));
  info.Put<uint32_t>(offsetof(ethtool_sset_info, cmd), ETHTOOL_GSSET_INFO);
  info.Put<uint64_t>(offsetof(ethtool_sset_info, sset_mask), uint64_t{1} << ETH_SS_FEATURES);
  int rc = ioctl(ifname, info.data());
  if (rc < 0) {
    const int errnum = rc >= -4095 ? -rc : 0;
    if (errnum == EOPNOTSUPP || errnum == EPERM || errnum == EINVAL) {
      // E3: old kernels/drivers. Same fallback as ethtool(8): the one legacy toggle.
      const std::string context = std::string("named features unavailable (ETHTOOL_GSSET_INFO: ") +
                                  (errnum == EPERM    ? "EPERM"
                                   : errnum == EINVAL ? "EINVAL"
                                                      : "EOPNOTSUPP") +
                                  "), legacy fallback failed";
      Result<bool> txcsum = ReadTxCsum(ioctl, ifname, context);
      if (!txcsum.ok()) return txcsum.error();
      table.legacy = true;
      table.legacyTxCsum = txcsum.value();
      return table;
    }
    return IoctlError(rc, ETHTOOL_GSSET_INFO, ifname, "");
  }
  const uint64_t mask = info.Get<uint64_t>(offsetof(ethtool_sset_info, sset_mask));
  const uint32_t count = info.Get<uint32_t>(offsetof(ethtool_sset_info, data));
  if ((mask & (uint64_t{1} << ETH_SS_FEATURES)) == 0 || count == 0) {
    // E2: nothing to name, so nothing to allocate or ask for.
    return MakeError(EOPNOTSUPP, ETHTOOL_GSSET_INFO, ifname,
                     "no named features (string set " +
                         std::string(mask == 0 ? "not supported" : "empty") + ")");
  }
  if ((mask & ((uint64_t{1} << ETH_SS_FEATURES) - 1)) != 0) {
    // A lower set bit would move our count out of data[0]; we only asked for one set.
    return MakeError(EPROTO, ETHTOOL_GSSET_INFO, ifname,
                     "reply mask has string sets that were not asked for");
  }
  if (count > kMaxFeatureCount) {
    return MakeError(EPROTO, ETHTOOL_GSSET_INFO, ifname,
                     "implausible feature count " + std::to_string(count) + " (max " +
                         std::to_string(kMaxFeatureCount) + ")");
  }
  table.count = count;
  table.blocks = (count + 31) / 32;

  // 2. The names, one 32-byte slot per bit.
  Buffer strings(sizeof(ethtool_gstrings) + size_t{count} * kNameSlot);
  strings.Put<uint32_t>(offsetof(ethtool_gstrings, cmd), ETHTOOL_GSTRINGS);
  strings.Put<uint32_t>(offsetof(ethtool_gstrings, string_set), ETH_SS_FEATURES);
  strings.Put<uint32_t>(offsetof(ethtool_gstrings, len), count);
  rc = ioctl(ifname, strings.data());
  if (rc < 0) return IoctlError(rc, ETHTOOL_GSTRINGS, ifname, "");
  const uint32_t returned = strings.Get<uint32_t>(offsetof(ethtool_gstrings, len));
  if (returned != count) {
    return MakeError(EPROTO, ETHTOOL_GSTRINGS, ifname,
                     "returned " + std::to_string(returned) + " feature names, GSSET_INFO said " +
                         std::to_string(count));
  }
  table.names.resize(count);
  std::unordered_map<std::string, uint32_t> seen;
  for (uint32_t index = 0; index < count; ++index) {
    const uint8_t* slot = strings.bytes() + sizeof(ethtool_gstrings) + size_t{index} * kNameSlot;
    std::string name = BoundedString(slot, kNameSlot);
    if (name.empty()) continue;  // undefined bit: skipped, index kept
    auto [where, inserted] = seen.emplace(name, index);
    if (!inserted) {
      return MakeError(EINVAL, ETHTOOL_GSTRINGS, ifname,
                       "duplicate feature name \"" + name + "\" at bits " +
                           std::to_string(where->second) + " and " + std::to_string(index));
    }
    table.names[index] = std::move(name);
  }

  // 3. Their state, in ceil(count / 32) blocks.
  Result<std::vector<ethtool_get_features_block>> state =
      ReadBlocks(ioctl, ifname, table.blocks, "");
  if (!state.ok()) return state.error();
  table.state = std::move(state.value());
  return table;
}

FeatureTable ToFeatureTable(const RawTable& raw) {
  FeatureTable table;
  table.legacy = raw.legacy;
  if (raw.legacy) {
    Feature feature;
    feature.name = kLegacyName;
    feature.available = true;
    feature.requested = raw.legacyTxCsum;
    feature.active = raw.legacyTxCsum;
    table.features.push_back(std::move(feature));
    return table;
  }
  for (size_t index = 0; index < raw.names.size(); ++index) {
    if (raw.names[index].empty()) continue;
    Feature feature;
    feature.name = raw.names[index];
    feature.available = Available(raw, index);
    feature.requested = Requested(raw, index);
    feature.active = Active(raw.state, index);
    feature.fixed = !feature.available || NeverChanged(raw, index);
    table.features.push_back(std::move(feature));
  }
  return table;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string joined;
  for (const auto& name : names) {
    if (!joined.empty()) joined += ", ";
    joined += name;
  }
  return joined;
}

bool IsLegacyTxCsumName(const std::string& name) {
  return name == kLegacyName || name.rfind("tx-checksum-", 0) == 0;
}

Result<SetFeaturesOutcome> SetLegacy(const Ioctl& ioctl, const std::string& ifname,
                                     const std::vector<FeatureRequest>& requests, bool current) {
  SetFeaturesOutcome outcome;
  outcome.legacy = true;
  outcome.requested = requests;
  std::vector<std::string> refused;
  for (const auto& request : requests) {
    if (!IsLegacyTxCsumName(request.name)) refused.push_back(request.name);
  }
  if (!refused.empty()) {
    return MakeError(EOPNOTSUPP, ETHTOOL_STXCSUM, ifname,
                     "named features unavailable (legacy ethtool only): cannot set " +
                         JoinNames(refused) + "; nothing written");
  }
  const bool wanted = requests.front().enable;
  for (const auto& request : requests) {
    if (request.enable != wanted) {
      return MakeError(EINVAL, ETHTOOL_STXCSUM, ifname,
                       "conflicting requests: legacy tx-checksumming is a single toggle; "
                       "nothing written");
    }
  }
  bool after = current;
  if (current != wanted) {
    Buffer buffer(sizeof(ethtool_value));
    buffer.Put<uint32_t>(offsetof(ethtool_value, cmd), ETHTOOL_STXCSUM);
    buffer.Put<uint32_t>(offsetof(ethtool_value, data), wanted ? 1u : 0u);
    const int rc = ioctl(ifname, buffer.data());
    if (rc < 0) {
      // E11: EOPNOTSUPP here means hw_features has no checksum bit at all. Not retried.
      return IoctlError(rc, ETHTOOL_STXCSUM, ifname, "tx-checksumming (legacy)");
    }
    outcome.written = true;
    Result<bool> reread = ReadTxCsum(ioctl, ifname, "re-read after ETHTOOL_STXCSUM was applied");
    if (!reread.ok()) return reread.error();
    after = reread.value();
  }
  for (const auto& request : requests) {
    outcome.active.push_back(FeatureRequest{request.name, after});
    if (after != request.enable) outcome.notApplied.push_back(request.name);
  }
  return outcome;
}

}  // namespace

Ioctl SocketIoctl(int fd) {
  return [fd](const std::string& ifname, void* command) -> int {
    if (!ValidIfname(ifname)) return -EINVAL;
    struct ifreq request;
    std::memset(&request, 0, sizeof(request));
    std::memcpy(request.ifr_name, ifname.data(), ifname.size());  // < IFNAMSIZ: stays terminated
    request.ifr_data = static_cast<char*>(command);
    for (;;) {
      const int rc = ::ioctl(fd, SIOCETHTOOL, &request);
      if (rc >= 0) return rc;
      if (errno != EINTR) return -errno;
    }
  };
}

Result<FeatureTable> GetFeatures(const Ioctl& ioctl, const std::string& ifname) {
  if (!ValidIfname(ifname)) return BadIfname(ifname);
  Result<RawTable> raw = ReadTable(ioctl, ifname);
  if (!raw.ok()) return raw.error();
  return ToFeatureTable(raw.value());
}

Result<SetFeaturesOutcome> SetFeatures(const Ioctl& ioctl, const std::string& ifname,
                                       const std::vector<FeatureRequest>& requests) {
  if (!ValidIfname(ifname)) return BadIfname(ifname);
  {
    std::unordered_map<std::string, bool> names;
    for (const auto& request : requests) {
      if (!names.emplace(request.name, request.enable).second) {
        return MakeError(EINVAL, ETHTOOL_SFEATURES, ifname,
                         "feature \"" + request.name + "\" requested twice; nothing written");
      }
    }
  }
  if (requests.empty()) return SetFeaturesOutcome{};  // nothing asked, nothing sent

  Result<RawTable> read = ReadTable(ioctl, ifname);
  if (!read.ok()) return read.error();
  const RawTable& table = read.value();
  if (table.legacy) return SetLegacy(ioctl, ifname, requests, table.legacyTxCsum);

  std::unordered_map<std::string, uint32_t> indexOf;
  for (uint32_t index = 0; index < table.count; ++index) {
    if (!table.names[index].empty()) indexOf.emplace(table.names[index], index);
  }
  // Validate everything before anything is written (E5, E6).
  std::vector<uint32_t> indexes;
  std::vector<std::string> unknown;
  for (const auto& request : requests) {
    auto found = indexOf.find(request.name);
    if (found == indexOf.end()) {
      unknown.push_back(request.name);
    } else {
      indexes.push_back(found->second);
    }
  }
  if (!unknown.empty()) {
    return MakeError(ENODATA, ETHTOOL_SFEATURES, ifname,
                     "unknown feature " + JoinNames(unknown) + "; nothing written");
  }
  std::vector<std::string> fixed;
  for (size_t i = 0; i < requests.size(); ++i) {
    const uint32_t index = indexes[i];
    if (NeverChanged(table, index)) {
      fixed.push_back(requests[i].name + " is fixed");
    } else if (!Available(table, index)) {
      fixed.push_back(requests[i].name + " is not changeable on this device [fixed]");
    }
  }
  if (!fixed.empty()) {
    return MakeError(EOPNOTSUPP, ETHTOOL_SFEATURES, ifname, JoinNames(fixed) + "; nothing written");
  }

  SetFeaturesOutcome outcome;
  outcome.requested = requests;

  bool matches = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    const uint32_t index = indexes[i];
    if (Requested(table, index) != requests[i].enable ||
        Active(table.state, index) != requests[i].enable) {
      matches = false;
    }
  }
  if (matches) {
    // E10: the state is already what was asked for. No SFEATURES, so no RTM_NEWLINK either.
    for (const auto& request : requests) outcome.active.push_back(request);
    return outcome;
  }

  // E7: the array size is the GSSET_INFO word count, never a constant.
  Buffer buffer(sizeof(ethtool_sfeatures) + size_t{table.blocks} * kSetBlockSize);
  buffer.Put<uint32_t>(offsetof(ethtool_sfeatures, cmd), ETHTOOL_SFEATURES);
  buffer.Put<uint32_t>(offsetof(ethtool_sfeatures, size), table.blocks);
  for (size_t i = 0; i < requests.size(); ++i) {
    const uint32_t index = indexes[i];
    const size_t block = sizeof(ethtool_sfeatures) + size_t{index / 32} * kSetBlockSize;
    const uint32_t bit = 1u << (index % 32);
    const size_t validAt = block + offsetof(ethtool_set_features_block, valid);
    const size_t requestedAt = block + offsetof(ethtool_set_features_block, requested);
    buffer.Put<uint32_t>(validAt, buffer.Get<uint32_t>(validAt) | bit);
    if (requests[i].enable) {
      buffer.Put<uint32_t>(requestedAt, buffer.Get<uint32_t>(requestedAt) | bit);
    }
  }
  const int rc = ioctl(ifname, buffer.data());
  if (rc < 0) {
    // For a rejected request, say what was sent: the kernel wants size == its word count.
    const bool rejected = rc == -EINVAL || rc == -EFAULT;
    return IoctlError(rc, ETHTOOL_SFEATURES, ifname,
                      rejected ? "size " + std::to_string(table.blocks) + " blocks for " +
                                     std::to_string(table.count) + " features"
                               : std::string());
  }
  // E8: positive flags are information, not failure; the re-read tells what happened.
  outcome.written = true;
  outcome.kernelUnsupported = (rc & ETHTOOL_F_UNSUPPORTED) != 0;
  outcome.kernelWish = (rc & ETHTOOL_F_WISH) != 0;
  outcome.kernelCompat = (rc & ETHTOOL_F_COMPAT) != 0;

  // Like ethtool(8): re-read and report what is in effect now (E9, E14).
  Result<std::vector<ethtool_get_features_block>> reread =
      ReadBlocks(ioctl, ifname, table.blocks, "re-read after ETHTOOL_SFEATURES was applied");
  if (!reread.ok()) return reread.error();
  const auto& after = reread.value();

  std::vector<bool> isRequested(table.count, false);
  for (size_t i = 0; i < requests.size(); ++i) {
    const uint32_t index = indexes[i];
    isRequested[index] = true;
    const bool active = Active(after, index);
    outcome.active.push_back(FeatureRequest{requests[i].name, active});
    if (active != requests[i].enable) outcome.notApplied.push_back(requests[i].name);
  }
  for (uint32_t index = 0; index < table.count; ++index) {
    if (table.names[index].empty() || isRequested[index]) continue;
    const bool before = Active(table.state, index);
    const bool now = Active(after, index);
    if (before != now)
      outcome.sideEffects.push_back(FeatureChange{table.names[index], before, now});
  }
  return outcome;
}

Result<DriverInfo> GetDriverInfo(const Ioctl& ioctl, const std::string& ifname) {
  if (!ValidIfname(ifname)) return BadIfname(ifname);
  Buffer buffer(sizeof(ethtool_drvinfo));
  buffer.Put<uint32_t>(offsetof(ethtool_drvinfo, cmd), ETHTOOL_GDRVINFO);
  const int rc = ioctl(ifname, buffer.data());
  if (rc < 0) return IoctlError(rc, ETHTOOL_GDRVINFO, ifname, "");
  DriverInfo info;
  info.driver = BoundedString(buffer.bytes() + offsetof(ethtool_drvinfo, driver),
                              sizeof(ethtool_drvinfo::driver));
  info.version = BoundedString(buffer.bytes() + offsetof(ethtool_drvinfo, version),
                               sizeof(ethtool_drvinfo::version));
  info.firmwareVersion = BoundedString(buffer.bytes() + offsetof(ethtool_drvinfo, fw_version),
                                       sizeof(ethtool_drvinfo::fw_version));
  info.busInfo = BoundedString(buffer.bytes() + offsetof(ethtool_drvinfo, bus_info),
                               sizeof(ethtool_drvinfo::bus_info));
  return info;
}

}  // namespace fg::ethtool
