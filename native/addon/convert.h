// Native records to plain JS objects (built with JsWriter, so they can be made
// from libuv callbacks safely), and JS arguments to native values. The shapes
// are typed once, in lib/core/binding.ts.
#pragma once

#include <napi.h>

#include <array>
#include <cstdint>
#include <vector>

#include "ethtool.h"
#include "js_writer.h"
#include "netlink_builder.h"
#include "netlink_parser.h"

namespace fg::addon {

// An IPv4 or IPv6 address in its text form; null for any other length.
napi_value AddressToJs(JsWriter& js, const std::vector<uint8_t>& address);
napi_value LinkToJs(JsWriter& js, const netlink::LinkRecord& link);
napi_value NeighToJs(JsWriter& js, const netlink::NeighRecord& neigh);
napi_value MessageToJs(JsWriter& js, const netlink::Message& message);
napi_value FeatureTableToJs(JsWriter& js, const ethtool::FeatureTable& table);
napi_value SetFeaturesOutcomeToJs(JsWriter& js, const ethtool::SetFeaturesOutcome& outcome);
napi_value DriverInfoToJs(JsWriter& js, const ethtool::DriverInfo& info);

template <typename Record>
napi_value ListToJs(JsWriter& js, const std::vector<Record>& records,
                    napi_value (*convert)(JsWriter&, const Record&)) {
  napi_value array = js.Array(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    js.SetIndex(array, static_cast<uint32_t>(i), convert(js, records[i]));
  }
  return array;
}

// For calls made from JS (where exceptions are fine): the value, or a throw.
Napi::Value Finish(const JsWriter& js, napi_value value);

// A Buffer of exactly 6 bytes; throws a TypeError otherwise.
std::array<uint8_t, 6> MacFromJs(const Napi::Value& value, const char* what);
// An IPv4 or IPv6 address in text form (empty for null); throws a TypeError otherwise.
std::vector<uint8_t> AddressFromJs(const Napi::Value& value, const char* what);

// { family, ifindex, destination, lladdr: Buffer(6), state, flags }; throws a TypeError otherwise.
netlink::NeighbourEntry NeighbourEntryFromJs(const Napi::Value& value);
// Entries handed over as columns (lib/core/binding.ts RawNeighbourEntries).
std::vector<netlink::NeighbourEntry> NeighbourEntriesFromJs(const Napi::Value& value);

}  // namespace fg::addon
