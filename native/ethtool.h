// SIOCETHTOOL feature and driver-info access, written against an injectable
// ioctl so the decoding can be unit-tested with scripted kernel replies and
// fuzzed. No Node dependency.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "result.h"

namespace fg::ethtool {

// Performs one SIOCETHTOOL request on `ifname` with `command` pointing at the
// ethtool command struct (its first u32 is the ETHTOOL_* command number).
// Returns the ioctl's non-negative result, or -errno.
// `ifname` is already validated (1..15 bytes, no NUL) by the functions below.
using Ioctl = std::function<int(const std::string& ifname, void* command)>;

// An Ioctl that issues the real ioctl on `fd` (any socket in the target netns).
// Refuses (-EINVAL, no syscall) a name that is empty, >= IFNAMSIZ bytes or has
// an embedded NUL; retries on EINTR. `fd` is not owned.
Ioctl SocketIoctl(int fd);

struct Feature {
  std::string name;
  bool available = false;  // the driver lets it be changed (hw_features)
  bool requested = false;  // what userspace last asked for (wanted)
  bool active = false;     // what is in effect now
  bool fixed = false;      // shown as [fixed] by ethtool -k: !available || never_changed
};

struct FeatureTable {
  std::vector<Feature> features;
  // True when named features are unavailable (GSSET_INFO failed with
  // EOPNOTSUPP/EPERM/EINVAL) and the table holds only "tx-checksumming" read
  // with ETHTOOL_GTXCSUM. Changeability is unknown there: available = true,
  // fixed = false, requested = active = the GTXCSUM value.
  bool legacy = false;
};

struct FeatureRequest {
  std::string name;
  bool enable = false;
};

struct FeatureChange {
  std::string name;
  bool before = false;
  bool after = false;
};

// What SetFeatures did, as ethtool(8) reports it after re-reading.
struct SetFeaturesOutcome {
  bool written = false;                    // false: state already matched, no write sent
  std::vector<FeatureRequest> requested;   // what was asked for, in request order
  std::vector<FeatureRequest> active;      // active state of each requested feature after the write
  std::vector<FeatureChange> sideEffects;  // features not requested whose active state changed
  // Requested features whose active state differs from the request.
  std::vector<std::string> notApplied;
  bool legacy = false;  // done with ETHTOOL_STXCSUM
  // ETHTOOL_F_* bits returned by SFEATURES, decoded (none is an error; the
  // re-read above is the truth). unsupported: the kernel ignored bits that were
  // not changeable any more (hw_features changed after our read); wish: some
  // requested state was recorded but a device constraint kept it from taking
  // effect; compat: applied through legacy driver hooks.
  bool kernelUnsupported = false;
  bool kernelWish = false;
  bool kernelCompat = false;
};

struct DriverInfo {
  std::string driver;
  std::string version;
  std::string firmwareVersion;
  std::string busInfo;
};

// Reads the named feature table (GSSET_INFO, GSTRINGS, GFEATURES), or the
// legacy one-entry table. No named features at all (empty string set) is
// EOPNOTSUPP. Features are in bit order; empty (undefined) names are skipped.
Result<FeatureTable> GetFeatures(const Ioctl& ioctl, const std::string& ifname);

// Reads the table, validates every request (unknown name: ENODATA; duplicate
// request: EINVAL; not changeable or [fixed]: EOPNOTSUPP) before any write,
// sends nothing when every requested feature is already requested and active
// in the wanted state, else one ETHTOOL_SFEATURES and a GFEATURES re-read.
// Legacy tables: "tx-checksumming" and "tx-checksum-*" map to ETHTOOL_STXCSUM.
Result<SetFeaturesOutcome> SetFeatures(const Ioctl& ioctl, const std::string& ifname,
                                       const std::vector<FeatureRequest>& requests);

Result<DriverInfo> GetDriverInfo(const Ioctl& ioctl, const std::string& ifname);

}  // namespace fg::ethtool
