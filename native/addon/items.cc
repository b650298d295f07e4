#include "items.h"

#include "convert.h"
#include "errors.h"

namespace fg::addon {
namespace {

const char* ChangeName(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::kAdded:
      return "added";
    case ChangeKind::kChanged:
      return "changed";
    case ChangeKind::kRemoved:
      return "removed";
  }
  return "changed";
}

const char* CauseName(RemovalCause cause) {
  switch (cause) {
    case RemovalCause::kDeleted:
      return "deleted";
    case RemovalCause::kFlush:
      return "flush";
    case RemovalCause::kDeviceRemoved:
      return "device-removed";
    case RemovalCause::kResync:
      return "resync";
  }
  return "deleted";
}

napi_value AddrAssignTypeToJs(JsWriter& js, int16_t value) {
  return value >= 0 ? js.Number(value) : js.Null();
}

}  // namespace

napi_value MirroredLinkToJs(JsWriter& js, const netlink::LinkRecord& record,
                            int16_t addrAssignType) {
  napi_value link = LinkToJs(js, record);
  js.Set(link, "addrAssignType", AddrAssignTypeToJs(js, addrAssignType));
  return link;
}

std::optional<ViewedLink> FindViewedLink(const DeliveredView& view, const Napi::Value& key) {
  if (key.IsNumber()) return view.Link(key.As<Napi::Number>().Int32Value());
  if (key.IsString()) return view.LinkNamed(key.As<Napi::String>().Utf8Value());
  throw Napi::TypeError::New(key.Env(), "getLink(ifindex | name)");
}

napi_value ViewedLinksToJs(JsWriter& js, const std::vector<ViewedLink>& links,
                           const std::function<int16_t(const ViewedLink&)>& addrAssignType) {
  napi_value array = js.Array(links.size());
  for (size_t i = 0; i < links.size(); ++i) {
    js.SetIndex(array, static_cast<uint32_t>(i),
                MirroredLinkToJs(js, links[i].record, addrAssignType(links[i])));
  }
  return array;
}

namespace {

// A typed array of `count` elements of T, whose storage `data` points at (nullptr on failure).
template <typename T>
napi_value TypedArray(JsWriter& js, napi_typedarray_type type, size_t count, T** data) {
  napi_value buffer = nullptr;
  napi_value array = nullptr;
  void* bytes = nullptr;
  *data = nullptr;
  if (!js.ok() ||
      napi_create_arraybuffer(js.env(), count * sizeof(T), &bytes, &buffer) != napi_ok ||
      napi_create_typedarray(js.env(), type, count, buffer, 0, &array) != napi_ok) {
    return nullptr;
  }
  *data = static_cast<T*>(bytes);
  return array;
}

}  // namespace

napi_value NeighbourColumnsToJs(JsWriter& js,
                                const std::vector<const netlink::NeighRecord*>& entries) {
  const size_t count = entries.size();
  uint8_t* family = nullptr;
  int32_t* index = nullptr;
  uint16_t* state = nullptr;
  uint8_t* flags = nullptr;
  uint8_t* type = nullptr;
  int32_t* vni = nullptr;
  int32_t* master = nullptr;
  napi_value columns = js.Object();
  js.Set(columns, "family", TypedArray(js, napi_uint8_array, count, &family));
  js.Set(columns, "ifindex", TypedArray(js, napi_int32_array, count, &index));
  js.Set(columns, "state", TypedArray(js, napi_uint16_array, count, &state));
  js.Set(columns, "flags", TypedArray(js, napi_uint8_array, count, &flags));
  js.Set(columns, "type", TypedArray(js, napi_uint8_array, count, &type));
  js.Set(columns, "vni", TypedArray(js, napi_int32_array, count, &vni));
  js.Set(columns, "master", TypedArray(js, napi_int32_array, count, &master));
  napi_value destination = js.Array(count);
  napi_value lladdr = js.Array(count);
  js.Set(columns, "destination", destination);
  js.Set(columns, "lladdr", lladdr);
  if (!family || !index || !state || !flags || !type || !vni || !master) return columns;
  for (size_t i = 0; i < count; ++i) {
    const netlink::NeighRecord& entry = *entries[i];
    family[i] = entry.family;
    index[i] = entry.ifindex;
    state[i] = entry.state;
    flags[i] = entry.flags;
    type[i] = entry.type;
    vni[i] = entry.vni ? static_cast<int32_t>(*entry.vni) : -1;
    master[i] = entry.master ? static_cast<int32_t>(*entry.master) : -1;
    const uint32_t at = static_cast<uint32_t>(i);
    js.SetIndex(destination, at,
                entry.destination.empty() ? js.Null() : AddressToJs(js, entry.destination));
    js.SetIndex(lladdr, at,
                entry.lladdr.state == netlink::MacField::State::kValid
                    ? js.String(netlink::FormatMac(entry.lladdr.bytes))
                    : js.Null());
  }
  return columns;
}

namespace {

napi_value CorrectionToJs(JsWriter& js, const Correction& done, const std::string& netnsLabel) {
  napi_value correction = js.Object();
  js.Set(correction, "mac", netlink::FormatMac(done.mac));
  js.Set(correction, "neighbours", static_cast<uint64_t>(done.neighbours));
  js.Set(correction, "queuedNs", done.queuedNs);
  js.Set(correction, "macNs", done.macNs);
  js.Set(correction, "doneNs", done.doneNs);
  if (done.error) js.Set(correction, "error", SysErrorToJs(js, *done.error, netnsLabel));
  if (done.echoed) js.Set(correction, "echoed", true);
  js.Set(correction, "afterName", done.afterName);
  js.Set(correction, "afterMac",
         done.afterMac.state == netlink::MacField::State::kValid
             ? js.String(netlink::FormatMac(done.afterMac.bytes))
             : js.Null());
  return correction;
}

}  // namespace

napi_value ItemToJs(JsWriter& js, const MonitorItem& item, const std::string& netnsLabel) {
  napi_value object = js.Object();
  if (const auto* link = std::get_if<LinkItem>(&item)) {
    js.Set(object, "kind", "link");
    js.Set(object, "ifindex", link->ifindex);
    if (link->arrivalNs > 0) {
      js.Set(object, "arrivalMs", js.Number(static_cast<double>(link->arrivalNs) / 1e6));
    }
    if (link->change) {
      const LinkChange& change = *link->change;
      js.Set(object, "change", ChangeName(change.kind));
      js.Set(object, "fromDump", change.fromDump);
      js.Set(object, "record", MirroredLinkToJs(js, change.link, change.addrAssignType));
      if (change.previous) {
        js.Set(object, "previous",
               MirroredLinkToJs(js, *change.previous, change.previousAddrAssignType));
      }
      if (change.created) js.Set(object, "created", true);
    }
    if (link->correction)
      js.Set(object, "correction", CorrectionToJs(js, *link->correction, netnsLabel));
    if (link->disarmed) js.Set(object, "disarmed", true);
  } else if (const auto* neigh = std::get_if<NeighItem>(&item)) {
    const NeighChange& change = neigh->change;
    js.Set(object, "kind", "neigh");
    js.Set(object, "change", ChangeName(change.kind));
    js.Set(object, "fromDump", change.fromDump);
    js.Set(object, "portid", change.portid);
    js.Set(object, "record", NeighToJs(js, change.neigh));
    if (change.previous) js.Set(object, "previous", NeighToJs(js, *change.previous));
    if (change.kind == ChangeKind::kRemoved) js.Set(object, "cause", CauseName(change.cause));
  } else if (std::holds_alternative<ReadyItem>(item)) {
    js.Set(object, "kind", "ready");
  } else if (const auto* resync = std::get_if<ResyncItem>(&item)) {
    js.Set(object, "kind", "resync");
    js.Set(object, "phase", resync->begin ? "begin" : "end");
    if (resync->begin) {
      js.Set(object, "reason", resync->reason);
    } else {
      js.Set(object, "consistent", resync->consistent);
    }
  } else if (const auto* overrun = std::get_if<OverrunItem>(&item)) {
    js.Set(object, "kind", "overrun");
    js.Set(object, "cause", overrun->cause);
  } else if (const auto* warning = std::get_if<WarningItem>(&item)) {
    js.Set(object, "kind", "warning");
    js.Set(object, "code", warning->code);
    js.Set(object, "message", warning->message);
  } else if (const auto* fatal = std::get_if<FatalItem>(&item)) {
    js.Set(object, "kind", "fatal");
    js.Set(object, "error", SysErrorToJs(js, fatal->error, netnsLabel));
  }
  return object;
}

napi_value ItemsToJs(JsWriter& js, const std::vector<MonitorItem>& items,
                     const std::string& netnsLabel) {
  napi_value array = js.Array(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    js.SetIndex(array, static_cast<uint32_t>(i), ItemToJs(js, items[i], netnsLabel));
  }
  return array;
}

}  // namespace fg::addon
