#include "mirror_wrap.h"

#include <vector>

#include "convert.h"
#include "items.h"
#include "js_writer.h"

namespace fg::addon {
namespace {

napi_value ItemsToJs(Napi::Env env, const std::vector<MonitorItem>& items) {
  JsWriter js(env);
  napi_value array = js.Array(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    js.SetIndex(array, static_cast<uint32_t>(i), ItemToJs(js, items[i], ""));
  }
  return array;
}

}  // namespace

Napi::Function MirrorWrap::Define(Napi::Env env) {
  return DefineClass(env, "Mirror",
                     {
                         InstanceMethod<&MirrorWrap::Apply>("apply"),
                         InstanceMethod<&MirrorWrap::BeginResync>("beginResync"),
                         InstanceMethod<&MirrorWrap::EndResync>("endResync"),
                         InstanceMethod<&MirrorWrap::NoteCorrection>("noteCorrection"),
                         InstanceMethod<&MirrorWrap::Links>("links"),
                         InstanceMethod<&MirrorWrap::GetLink>("getLink"),
                         InstanceMethod<&MirrorWrap::Neighbours>("neighbours"),
                     });
}

MirrorWrap::MirrorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MirrorWrap>(info) {}

// apply(datagram: Buffer, fromDump: boolean): the changes its link and neighbour messages make.
Napi::Value MirrorWrap::Apply(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsBuffer()) throw Napi::TypeError::New(env, "apply(datagram, fromDump)");
  const auto bytes = info[0].As<Napi::Buffer<uint8_t>>();
  const bool fromDump = info[1].ToBoolean().Value();
  netlink::ParsedDatagram parsed = netlink::ParseDatagram(bytes.Data(), bytes.Length());
  if (parsed.error) throw Napi::TypeError::New(env, "apply: " + parsed.error->reason);
  std::vector<MirrorChange> changes;
  std::vector<MonitorItem> items;
  for (netlink::Message& message : parsed.messages) {
    if (auto* link = std::get_if<netlink::LinkRecord>(&message.body)) {
      mirror_.ApplyLink(std::move(*link), fromDump, &changes);
    } else if (auto* neigh = std::get_if<netlink::NeighRecord>(&message.body)) {
      mirror_.ApplyNeigh(std::move(*neigh), fromDump, message.portid, &changes);
    } else if (auto* malformed = std::get_if<netlink::MalformedRecord>(&message.body)) {
      throw Napi::TypeError::New(env, "apply: " + malformed->reason);
    }
    AppendChangeItems(changes, NeighbourEvents::kAll, &items);
  }
  return Napi::Value(env, ItemsToJs(env, items));
}

Napi::Value MirrorWrap::BeginResync(const Napi::CallbackInfo& info) {
  mirror_.BeginResync();
  return info.Env().Undefined();
}

// endResync(consistent): the removals of a consistent end, then { kind: 'ready' } the first time.
Napi::Value MirrorWrap::EndResync(const Napi::CallbackInfo& info) {
  const bool wasReady = mirror_.ready();
  std::vector<MirrorChange> changes;
  mirror_.EndResync(info[0].ToBoolean().Value(), &changes);
  std::vector<MonitorItem> items;
  AppendChangeItems(changes, NeighbourEvents::kAll, &items);
  if (!wasReady) items.push_back(ReadyItem{});
  return Napi::Value(info.Env(), ItemsToJs(info.Env(), items));
}

// noteCorrection(ifindex, mac: Buffer(6)): a correction wrote `mac` back (see StateMirror).
Napi::Value MirrorWrap::NoteCorrection(const Napi::CallbackInfo& info) {
  mirror_.NoteCorrection(info[0].ToNumber().Int32Value(), MacFromJs(info[1], "mac"));
  return info.Env().Undefined();
}

Napi::Value MirrorWrap::Links(const Napi::CallbackInfo& info) {
  JsWriter js(info.Env());
  return Napi::Value(info.Env(), MirroredLinksToJs(js, mirror_, [this](int32_t ifindex) {
                       return mirror_.FindLink(ifindex)->addrAssignType;
                     }));
}

Napi::Value MirrorWrap::GetLink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const StateMirror::Link* link = FindMirroredLink(mirror_, info[0]);
  if (!link) return env.Undefined();
  JsWriter js(env);
  return Napi::Value(env, MirroredLinkToJs(js, link->record, link->addrAssignType));
}

Napi::Value MirrorWrap::Neighbours(const Napi::CallbackInfo& info) {
  JsWriter js(info.Env());
  std::optional<int32_t> ifindex;
  if (info[0].IsNumber()) ifindex = info[0].As<Napi::Number>().Int32Value();
  return Napi::Value(info.Env(), MirroredNeighboursToJs(js, mirror_, ifindex));
}

}  // namespace fg::addon
