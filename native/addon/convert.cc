#include "convert.h"

#include <arpa/inet.h>
#include <sys/socket.h>

namespace fg::addon {
napi_value AddressToJs(JsWriter& js, const std::vector<uint8_t>& address) {
  char text[INET6_ADDRSTRLEN] = {};
  const int family = address.size() == 4 ? AF_INET : AF_INET6;
  if ((address.size() != 4 && address.size() != 16) ||
      !inet_ntop(family, address.data(), text, sizeof(text))) {
    return js.Null();
  }
  return js.String(text);
}

namespace {

using netlink::MacField;

// Sets `key` to the canonical MAC, or to null plus `errorKey` with the reason.
void SetMac(JsWriter& js, napi_value object, const char* key, const char* errorKey,
            const MacField& field) {
  if (field.state == MacField::State::kValid) {
    js.Set(object, key, netlink::FormatMac(field.bytes));
  } else {
    js.Set(object, key, js.Null());
    js.Set(object, errorKey, netlink::DescribeMacProblem(field));
  }
}

template <typename T>
void SetOptional(JsWriter& js, napi_value object, const char* key, const std::optional<T>& value) {
  if (value) js.Set(object, key, static_cast<double>(*value));
}

napi_value FeatureRequestToJs(JsWriter& js, const ethtool::FeatureRequest& request) {
  napi_value entry = js.Object();
  js.Set(entry, "name", request.name);
  js.Set(entry, "enable", request.enable);
  return entry;
}

napi_value FeatureToJs(JsWriter& js, const ethtool::Feature& feature) {
  napi_value entry = js.Object();
  js.Set(entry, "name", feature.name);
  js.Set(entry, "available", feature.available);
  js.Set(entry, "requested", feature.requested);
  js.Set(entry, "active", feature.active);
  js.Set(entry, "fixed", feature.fixed);
  return entry;
}

napi_value FeatureChangeToJs(JsWriter& js, const ethtool::FeatureChange& change) {
  napi_value entry = js.Object();
  js.Set(entry, "name", change.name);
  js.Set(entry, "before", change.before);
  js.Set(entry, "after", change.after);
  return entry;
}

napi_value TextToJs(JsWriter& js, const std::string& text) { return js.String(text); }

}  // namespace

napi_value LinkToJs(JsWriter& js, const netlink::LinkRecord& link) {
  napi_value object = js.Object();
  js.Set(object, "deleted", link.deleted);
  js.Set(object, "ifindex", link.ifindex);
  js.Set(object, "name", link.name);
  if (link.nameTooLong) js.Set(object, "nameTooLong", true);
  SetMac(js, object, "mac", "macError", link.mac);
  js.Set(object, "flags", link.flags);
  js.Set(object, "deviceType", link.deviceType);
  js.Set(object, "changeMask", link.changeMask);
  SetOptional(js, object, "mtu", link.mtu);
  SetOptional(js, object, "operstate", link.operstate);
  SetOptional(js, object, "master", link.master);
  SetOptional(js, object, "lowerIfindex", link.lowerIfindex);
  SetOptional(js, object, "linkNetnsid", link.linkNetnsid);
  SetOptional(js, object, "event", link.event);
  js.Set(object, "kind", link.kind);
  if (link.vxlan) {
    napi_value vxlan = js.Object();
    SetOptional(js, vxlan, "vni", link.vxlan->vni);
    SetOptional(js, vxlan, "port", link.vxlan->port);
    if (!link.vxlan->local.empty()) js.Set(vxlan, "local", AddressToJs(js, link.vxlan->local));
    SetOptional(js, vxlan, "underlayIfindex", link.vxlan->underlayIfindex);
    if (link.vxlan->learning) js.Set(vxlan, "learning", *link.vxlan->learning);
    js.Set(object, "vxlan", vxlan);
  }
  return object;
}

napi_value NeighToJs(JsWriter& js, const netlink::NeighRecord& neigh) {
  napi_value object = js.Object();
  js.Set(object, "deleted", neigh.deleted);
  js.Set(object, "family", neigh.family);
  js.Set(object, "ifindex", neigh.ifindex);
  js.Set(object, "state", neigh.state);
  js.Set(object, "flags", neigh.flags);
  js.Set(object, "type", neigh.type);
  js.Set(object, "destination",
         neigh.destination.empty() ? js.Null() : AddressToJs(js, neigh.destination));
  SetMac(js, object, "lladdr", "lladdrError", neigh.lladdr);
  SetOptional(js, object, "vni", neigh.vni);
  SetOptional(js, object, "master", neigh.master);
  return object;
}

napi_value MessageToJs(JsWriter& js, const netlink::Message& message) {
  napi_value object = js.Object();
  js.Set(object, "type", message.type);
  js.Set(object, "flags", message.flags);
  js.Set(object, "seq", message.seq);
  js.Set(object, "portid", message.portid);
  if (const auto* link = std::get_if<netlink::LinkRecord>(&message.body)) {
    js.Set(object, "link", LinkToJs(js, *link));
  } else if (const auto* neigh = std::get_if<netlink::NeighRecord>(&message.body)) {
    js.Set(object, "neigh", NeighToJs(js, *neigh));
  } else if (const auto* ack = std::get_if<netlink::AckRecord>(&message.body)) {
    napi_value value = js.Object();
    js.Set(value, "error", ack->error);
    js.Set(value, "extack", ack->extackMessage);
    js.Set(object, "ack", value);
  } else if (const auto* done = std::get_if<netlink::DoneRecord>(&message.body)) {
    napi_value value = js.Object();
    js.Set(value, "error", done->error);
    js.Set(object, "done", value);
  } else if (const auto* malformed = std::get_if<netlink::MalformedRecord>(&message.body)) {
    js.Set(object, "malformed", malformed->reason);
  }
  return object;
}

napi_value FeatureTableToJs(JsWriter& js, const ethtool::FeatureTable& table) {
  napi_value object = js.Object();
  js.Set(object, "features", ListToJs(js, table.features, FeatureToJs));
  js.Set(object, "legacy", table.legacy);
  return object;
}

napi_value SetFeaturesOutcomeToJs(JsWriter& js, const ethtool::SetFeaturesOutcome& outcome) {
  napi_value object = js.Object();
  js.Set(object, "written", outcome.written);
  js.Set(object, "legacy", outcome.legacy);
  js.Set(object, "requested", ListToJs(js, outcome.requested, FeatureRequestToJs));
  js.Set(object, "active", ListToJs(js, outcome.active, FeatureRequestToJs));
  js.Set(object, "sideEffects", ListToJs(js, outcome.sideEffects, FeatureChangeToJs));
  js.Set(object, "notApplied", ListToJs(js, outcome.notApplied, TextToJs));
  return object;
}

napi_value DriverInfoToJs(JsWriter& js, const ethtool::DriverInfo& info) {
  napi_value object = js.Object();
  js.Set(object, "driver", info.driver);
  js.Set(object, "version", info.version);
  js.Set(object, "firmwareVersion", info.firmwareVersion);
  js.Set(object, "busInfo", info.busInfo);
  return object;
}

Napi::Value Finish(const JsWriter& js, napi_value value) {
  if (!js.ok()) throw Napi::Error::New(js.env());
  return Napi::Value(js.env(), value);
}

std::array<uint8_t, 6> MacFromJs(const Napi::Value& value, const char* what) {
  if (!value.IsBuffer() || value.As<Napi::Buffer<uint8_t>>().Length() != 6) {
    throw Napi::TypeError::New(value.Env(), std::string(what) + " must be a 6-byte Buffer");
  }
  std::array<uint8_t, 6> mac{};
  auto buffer = value.As<Napi::Buffer<uint8_t>>();
  std::copy(buffer.Data(), buffer.Data() + 6, mac.begin());
  return mac;
}

std::vector<uint8_t> AddressFromJs(const Napi::Value& value, const char* what) {
  if (value.IsNull() || value.IsUndefined()) return {};
  if (value.IsString()) {
    const std::string text = value.As<Napi::String>().Utf8Value();
    std::vector<uint8_t> address(text.find(':') == std::string::npos ? 4 : 16);
    const int family = address.size() == 4 ? AF_INET : AF_INET6;
    if (inet_pton(family, text.c_str(), address.data()) == 1) return address;
  }
  throw Napi::TypeError::New(value.Env(), std::string(what) + " must be an IPv4 or IPv6 address");
}

netlink::NeighbourEntry NeighbourEntryFromJs(const Napi::Value& value) {
  Napi::Env env = value.Env();
  if (!value.IsObject()) throw Napi::TypeError::New(env, "a neighbour entry must be an object");
  const Napi::Object object = value.As<Napi::Object>();
  netlink::NeighbourEntry entry;
  entry.family = static_cast<uint8_t>(object.Get("family").ToNumber().Uint32Value());
  entry.ifindex = object.Get("ifindex").ToNumber().Int32Value();
  if (entry.ifindex <= 0) throw Napi::RangeError::New(env, "ifindex must be positive");
  entry.destination = AddressFromJs(object.Get("destination"), "destination");
  entry.lladdr = MacFromJs(object.Get("lladdr"), "lladdr");
  entry.state = static_cast<uint16_t>(object.Get("state").ToNumber().Uint32Value());
  entry.flags = static_cast<uint8_t>(object.Get("flags").ToNumber().Uint32Value());
  return entry;
}

namespace {

// Column `key` of `columns`: a typed array of `type`, of `count` elements.
template <typename T>
Napi::TypedArrayOf<T> TypedColumn(const Napi::Object& columns, const char* key,
                                  napi_typedarray_type type, size_t count) {
  const Napi::Value value = columns.Get(key);
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != type ||
      value.As<Napi::TypedArray>().ElementLength() != count) {
    throw Napi::TypeError::New(columns.Env(), std::string("neighbour entries: ") + key +
                                                  " must be a typed array of every entry");
  }
  return value.As<Napi::TypedArrayOf<T>>();
}

Napi::Array ArrayColumn(const Napi::Object& columns, const char* key, size_t count) {
  const Napi::Value value = columns.Get(key);
  if (!value.IsArray() || value.As<Napi::Array>().Length() != count) {
    throw Napi::TypeError::New(columns.Env(), std::string("neighbour entries: ") + key +
                                                  " must be an array of every entry");
  }
  return value.As<Napi::Array>();
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "0e:2a:00:00:00:01" (exactly six colon-separated hex pairs).
std::array<uint8_t, 6> MacTextFromJs(const Napi::Value& value) {
  std::array<uint8_t, 6> mac{};
  const std::string text = value.IsString() ? value.As<Napi::String>().Utf8Value() : "";
  bool valid = text.size() == 17;
  for (size_t i = 0; valid && i < 6; ++i) {
    const int high = HexDigit(text[3 * i]);
    const int low = HexDigit(text[3 * i + 1]);
    valid = high >= 0 && low >= 0 && (i == 5 || text[3 * i + 2] == ':');
    mac[i] = static_cast<uint8_t>((high << 4) | (low & 0xf));
  }
  if (!valid) throw Napi::TypeError::New(value.Env(), "lladdr must be a MAC (aa:bb:cc:dd:ee:ff)");
  return mac;
}

}  // namespace

std::vector<netlink::NeighbourEntry> NeighbourEntriesFromJs(const Napi::Value& value) {
  Napi::Env env = value.Env();
  if (!value.IsObject()) {
    throw Napi::TypeError::New(
        env,
        "neighbour entries must be columns { family, ifindex, state, flags, destination, lladdr }");
  }
  const Napi::Object columns = value.As<Napi::Object>();
  const Napi::Value families = columns.Get("family");
  if (!families.IsTypedArray()) {
    throw Napi::TypeError::New(env, "neighbour entries: family must be a Uint8Array");
  }
  const size_t count = families.As<Napi::TypedArray>().ElementLength();
  const auto family = TypedColumn<uint8_t>(columns, "family", napi_uint8_array, count);
  const auto ifindex = TypedColumn<int32_t>(columns, "ifindex", napi_int32_array, count);
  const auto state = TypedColumn<uint16_t>(columns, "state", napi_uint16_array, count);
  const auto flags = TypedColumn<uint8_t>(columns, "flags", napi_uint8_array, count);
  const Napi::Array destination = ArrayColumn(columns, "destination", count);
  const Napi::Array lladdr = ArrayColumn(columns, "lladdr", count);
  std::vector<netlink::NeighbourEntry> entries(count);
  for (size_t i = 0; i < count; ++i) {
    netlink::NeighbourEntry& entry = entries[i];
    const uint32_t at = static_cast<uint32_t>(i);
    entry.family = family[i];
    entry.ifindex = ifindex[i];
    if (entry.ifindex <= 0) throw Napi::RangeError::New(env, "ifindex must be positive");
    entry.destination = AddressFromJs(destination.Get(at), "destination");
    entry.lladdr = MacTextFromJs(lladdr.Get(at));
    entry.state = state[i];
    entry.flags = flags[i];
  }
  return entries;
}

}  // namespace fg::addon
