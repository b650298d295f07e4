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

napi_value MirroredLinksToJs(JsWriter& js, const StateMirror& mirror,
                             const std::function<int16_t(int32_t)>& addrAssignType) {
  // Indexes first: reading addr_assign_type may update the mirror's entries.
  std::vector<int32_t> ifindexes;
  ifindexes.reserve(mirror.linkCount());
  for (const auto& [ifindex, link] : mirror.links()) ifindexes.push_back(ifindex);
  napi_value array = js.Array(ifindexes.size());
  for (size_t i = 0; i < ifindexes.size(); ++i) {
    const int16_t type = addrAssignType(ifindexes[i]);
    js.SetIndex(array, static_cast<uint32_t>(i),
                MirroredLinkToJs(js, mirror.FindLink(ifindexes[i])->record, type));
  }
  return array;
}

napi_value MirroredNeighboursToJs(JsWriter& js, const StateMirror& mirror,
                                  std::optional<int32_t> ifindex) {
  napi_value array = js.Array(0);
  uint32_t count = 0;
  for (const auto& [key, neigh] : mirror.neighs()) {
    if (!ifindex || neigh.record.ifindex == *ifindex) {
      js.SetIndex(array, count++, NeighToJs(js, neigh.record));
    }
  }
  return array;
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

}  // namespace fg::addon
