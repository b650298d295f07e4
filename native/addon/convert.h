// Native records to plain JS objects, and JS arguments to native values.
// The shapes are typed once, in lib/binding.ts.
#pragma once

#include <napi.h>

#include <array>
#include <cstdint>
#include <vector>

#include "ethtool.h"
#include "netlink_parser.h"

namespace fg::addon {

Napi::Object LinkToJs(Napi::Env env, const netlink::LinkRecord& link);
Napi::Object NeighToJs(Napi::Env env, const netlink::NeighRecord& neigh);
Napi::Object MessageToJs(Napi::Env env, const netlink::Message& message);
Napi::Value FeatureTableToJs(Napi::Env env, const ethtool::FeatureTable& table);
Napi::Value SetFeaturesOutcomeToJs(Napi::Env env, const ethtool::SetFeaturesOutcome& outcome);
Napi::Value DriverInfoToJs(Napi::Env env, const ethtool::DriverInfo& info);

// A Buffer of exactly 6 bytes; throws a TypeError otherwise.
std::array<uint8_t, 6> MacFromJs(const Napi::Value& value, const char* what);
// An IPv4 or IPv6 address in text form (empty for null); throws a TypeError otherwise.
std::vector<uint8_t> AddressFromJs(const Napi::Value& value, const char* what);

}  // namespace fg::addon
