#include "convert.h"

#include <arpa/inet.h>
#include <sys/socket.h>

namespace fg::addon {
namespace {

using netlink::MacField;

Napi::Value AddressToJs(Napi::Env env, const std::vector<uint8_t>& address) {
  char text[INET6_ADDRSTRLEN] = {};
  const int family = address.size() == 4 ? AF_INET : AF_INET6;
  if ((address.size() != 4 && address.size() != 16) ||
      !inet_ntop(family, address.data(), text, sizeof(text))) {
    return env.Null();
  }
  return Napi::String::New(env, text);
}

// Sets `key` to the canonical MAC, or to null plus `errorKey` with the reason.
void SetMac(Napi::Object object, const char* key, const char* errorKey, const MacField& field) {
  if (field.state == MacField::State::kValid) {
    object.Set(key, netlink::FormatMac(field.bytes));
  } else {
    object.Set(key, object.Env().Null());
    object.Set(errorKey, netlink::DescribeMacProblem(field));
  }
}

template <typename T>
void SetOptional(Napi::Object object, const char* key, const std::optional<T>& value) {
  if (value) object.Set(key, Napi::Number::New(object.Env(), static_cast<double>(*value)));
}

Napi::Array FeatureRequestsToJs(Napi::Env env, const std::vector<ethtool::FeatureRequest>& list) {
  Napi::Array array = Napi::Array::New(env, list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("name", list[i].name);
    entry.Set("enable", list[i].enable);
    array.Set(static_cast<uint32_t>(i), entry);
  }
  return array;
}

}  // namespace

Napi::Object LinkToJs(Napi::Env env, const netlink::LinkRecord& link) {
  Napi::Object object = Napi::Object::New(env);
  object.Set("deleted", link.deleted);
  object.Set("ifindex", link.ifindex);
  object.Set("name", link.name);
  if (link.nameTooLong) object.Set("nameTooLong", true);
  SetMac(object, "mac", "macError", link.mac);
  object.Set("flags", link.flags);
  object.Set("deviceType", link.deviceType);
  object.Set("changeMask", link.changeMask);
  SetOptional(object, "mtu", link.mtu);
  SetOptional(object, "operstate", link.operstate);
  SetOptional(object, "master", link.master);
  SetOptional(object, "lowerIfindex", link.lowerIfindex);
  SetOptional(object, "linkNetnsid", link.linkNetnsid);
  SetOptional(object, "event", link.event);
  object.Set("kind", link.kind);
  if (link.vxlan) {
    Napi::Object vxlan = Napi::Object::New(env);
    SetOptional(vxlan, "vni", link.vxlan->vni);
    SetOptional(vxlan, "port", link.vxlan->port);
    if (!link.vxlan->local.empty()) vxlan.Set("local", AddressToJs(env, link.vxlan->local));
    SetOptional(vxlan, "underlayIfindex", link.vxlan->underlayIfindex);
    if (link.vxlan->learning) vxlan.Set("learning", *link.vxlan->learning);
    object.Set("vxlan", vxlan);
  }
  return object;
}

Napi::Object NeighToJs(Napi::Env env, const netlink::NeighRecord& neigh) {
  Napi::Object object = Napi::Object::New(env);
  object.Set("deleted", neigh.deleted);
  object.Set("family", neigh.family);
  object.Set("ifindex", neigh.ifindex);
  object.Set("state", neigh.state);
  object.Set("flags", neigh.flags);
  object.Set("type", neigh.type);
  object.Set("destination",
             neigh.destination.empty() ? env.Null() : AddressToJs(env, neigh.destination));
  SetMac(object, "lladdr", "lladdrError", neigh.lladdr);
  SetOptional(object, "vni", neigh.vni);
  SetOptional(object, "master", neigh.master);
  return object;
}

Napi::Object MessageToJs(Napi::Env env, const netlink::Message& message) {
  Napi::Object object = Napi::Object::New(env);
  object.Set("type", message.type);
  object.Set("flags", message.flags);
  object.Set("seq", message.seq);
  object.Set("portid", message.portid);
  if (const auto* link = std::get_if<netlink::LinkRecord>(&message.body)) {
    object.Set("link", LinkToJs(env, *link));
  } else if (const auto* neigh = std::get_if<netlink::NeighRecord>(&message.body)) {
    object.Set("neigh", NeighToJs(env, *neigh));
  } else if (const auto* ack = std::get_if<netlink::AckRecord>(&message.body)) {
    Napi::Object value = Napi::Object::New(env);
    value.Set("error", ack->error);
    value.Set("extack", ack->extackMessage);
    object.Set("ack", value);
  } else if (const auto* done = std::get_if<netlink::DoneRecord>(&message.body)) {
    Napi::Object value = Napi::Object::New(env);
    value.Set("error", done->error);
    object.Set("done", value);
  } else if (const auto* malformed = std::get_if<netlink::MalformedRecord>(&message.body)) {
    object.Set("malformed", malformed->reason);
  }
  return object;
}

Napi::Value FeatureTableToJs(Napi::Env env, const ethtool::FeatureTable& table) {
  Napi::Object object = Napi::Object::New(env);
  Napi::Array features = Napi::Array::New(env, table.features.size());
  for (size_t i = 0; i < table.features.size(); ++i) {
    const ethtool::Feature& feature = table.features[i];
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("name", feature.name);
    entry.Set("available", feature.available);
    entry.Set("requested", feature.requested);
    entry.Set("active", feature.active);
    entry.Set("fixed", feature.fixed);
    features.Set(static_cast<uint32_t>(i), entry);
  }
  object.Set("features", features);
  object.Set("legacy", table.legacy);
  return object;
}

Napi::Value SetFeaturesOutcomeToJs(Napi::Env env, const ethtool::SetFeaturesOutcome& outcome) {
  Napi::Object object = Napi::Object::New(env);
  object.Set("written", outcome.written);
  object.Set("legacy", outcome.legacy);
  object.Set("requested", FeatureRequestsToJs(env, outcome.requested));
  object.Set("active", FeatureRequestsToJs(env, outcome.active));
  Napi::Array sideEffects = Napi::Array::New(env, outcome.sideEffects.size());
  for (size_t i = 0; i < outcome.sideEffects.size(); ++i) {
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("name", outcome.sideEffects[i].name);
    entry.Set("before", outcome.sideEffects[i].before);
    entry.Set("after", outcome.sideEffects[i].after);
    sideEffects.Set(static_cast<uint32_t>(i), entry);
  }
  object.Set("sideEffects", sideEffects);
  Napi::Array notApplied = Napi::Array::New(env, outcome.notApplied.size());
  for (size_t i = 0; i < outcome.notApplied.size(); ++i) {
    notApplied.Set(static_cast<uint32_t>(i), outcome.notApplied[i]);
  }
  object.Set("notApplied", notApplied);
  return object;
}

Napi::Value DriverInfoToJs(Napi::Env env, const ethtool::DriverInfo& info) {
  Napi::Object object = Napi::Object::New(env);
  object.Set("driver", info.driver);
  object.Set("version", info.version);
  object.Set("firmwareVersion", info.firmwareVersion);
  object.Set("busInfo", info.busInfo);
  return object;
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

}  // namespace fg::addon
