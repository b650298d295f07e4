// The monitor's items (and the mirror's changes) as the JS objects of
// lib/core/binding.ts's RawMonitorItem: one conversion for the Monitor and the
// Mirror classes.
#pragma once

#include <napi.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "delivered_view.h"
#include "js_writer.h"
#include "monitor_core.h"

namespace fg::addon {

// A mirrored link as JS reads it: the record with its addr_assign_type (null when unknown).
napi_value MirroredLinkToJs(JsWriter& js, const netlink::LinkRecord& record,
                            int16_t addrAssignType);

// Links as a DeliveredView gives them, each with the addr_assign_type `addrAssignType` gives.
napi_value ViewedLinksToJs(JsWriter& js, const std::vector<ViewedLink>& links,
                           const std::function<int16_t(const ViewedLink&)>& addrAssignType);
// Neighbour and FDB entries as columns: typed arrays of the numbers and arrays
// of the two strings, so that thousands of entries cost a few objects here (JS
// makes the records, as lib/core/records.ts neighbourInfos does) instead of a
// dozen property writes each.
napi_value NeighbourColumnsToJs(JsWriter& js,
                                const std::vector<const netlink::NeighRecord*>& entries);

// getLink()'s lookup: by index (a number) or by name (a string); a TypeError otherwise.
std::optional<ViewedLink> FindViewedLink(const DeliveredView& view, const Napi::Value& key);

napi_value ItemToJs(JsWriter& js, const MonitorItem& item, const std::string& netnsLabel);
// A batch of items as one array.
napi_value ItemsToJs(JsWriter& js, const std::vector<MonitorItem>& items,
                     const std::string& netnsLabel);

}  // namespace fg::addon
