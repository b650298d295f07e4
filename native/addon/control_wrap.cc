#include "control_wrap.h"

#include <functional>

#include "convert.h"
#include "errors.h"
#include "ethtool.h"
#include "js_writer.h"
#include "sysfs.h"

namespace fg::addon {
namespace {

using Core = ControlWrap::Core;

template <typename T>
using Work = std::function<Result<T>(NetlinkRequester&)>;
template <typename T>
using ToJs = std::function<napi_value(JsWriter&, const T&)>;

template <typename T>
Result<T> RunLocked(Core& core, const Work<T>& work) {
  std::lock_guard<std::mutex> lock(core.mutex);
  if (!core.requester) return SysError(EBADF, "control", "closed");
  return work(*core.requester);
}

// Runs one operation on the thread pool and settles a promise with it. The
// settling uses raw Node-API: it runs from libuv, possibly while a worker is
// being terminated, when nothing may throw (the promise is then simply left).
template <typename T>
class Job final : public Napi::AsyncWorker {
 public:
  Job(Napi::Env env, std::shared_ptr<Core> core, Work<T> work, ToJs<T> toJs, std::string netnsLabel)
      : Napi::AsyncWorker(env, "flannel-guard:Control"),
        core_(std::move(core)),
        work_(std::move(work)),
        toJs_(std::move(toJs)),
        netnsLabel_(std::move(netnsLabel)) {
    if (napi_create_promise(env, &deferred_, &promise_) != napi_ok) throw Napi::Error::New(env);
  }

  Napi::Value Promise() const { return Napi::Value(Env(), promise_); }

  void Execute() override { result_.emplace(RunLocked(*core_, work_)); }

  void OnOK() override {
    JsWriter js(Env());
    const bool ok = result_->ok();
    napi_value value =
        ok ? toJs_(js, result_->value()) : SysErrorToJs(js, result_->error(), netnsLabel_);
    if (!js.ok() || !value) return;
    if (ok) {
      napi_resolve_deferred(Env(), deferred_, value);
    } else {
      napi_reject_deferred(Env(), deferred_, value);
    }
  }

 private:
  napi_deferred deferred_ = nullptr;
  napi_value promise_ = nullptr;
  std::shared_ptr<Core> core_;
  Work<T> work_;
  ToJs<T> toJs_;
  std::string netnsLabel_;
  std::optional<Result<T>> result_;
};

// Synchronous unless argument `asyncIndex` is true.
template <typename T>
Napi::Value Run(const Napi::CallbackInfo& info, size_t asyncIndex,
                const std::shared_ptr<Core>& core, const std::string& netnsLabel, Work<T> work,
                ToJs<T> toJs) {
  Napi::Env env = info.Env();
  if (info.Length() > asyncIndex && info[asyncIndex].ToBoolean().Value()) {
    auto* job = new Job<T>(env, core, std::move(work), std::move(toJs), netnsLabel);
    Napi::Value promise = job->Promise();
    job->Queue();
    return promise;
  }
  Result<T> result = RunLocked(*core, work);
  if (!result.ok()) ThrowSysError(env, result.error(), netnsLabel);
  JsWriter js(env);
  return Finish(js, toJs(js, result.value()));
}

std::string StringArgument(const Napi::CallbackInfo& info, size_t index, const char* what) {
  if (!info[index].IsString())
    throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string");
  return info[index].As<Napi::String>().Utf8Value();
}

int32_t IfindexArgument(const Napi::CallbackInfo& info, size_t index) {
  if (!info[index].IsNumber()) throw Napi::TypeError::New(info.Env(), "ifindex must be a number");
  const int32_t ifindex = info[index].As<Napi::Number>().Int32Value();
  if (ifindex <= 0) throw Napi::RangeError::New(info.Env(), "ifindex must be positive");
  return ifindex;
}

// Names the interface in an error the kernel reported against an index.
template <typename T>
Result<T> Named(Result<T> result, const std::string& interface) {
  if (!result.ok() && !interface.empty()) {
    SysError error = result.error();
    error.interface = interface;
    return error;
  }
  return result;
}

napi_value Nothing(JsWriter& js, const Unit&) {
  napi_value undefined = nullptr;
  napi_get_undefined(js.env(), &undefined);
  return undefined;
}

}  // namespace

Napi::Function ControlWrap::Define(Napi::Env env) {
  return DefineClass(env, "Control",
                     {
                         InstanceMethod<&ControlWrap::DumpLinks>("dumpLinks"),
                         InstanceMethod<&ControlWrap::DumpNeighbours>("dumpNeighbours"),
                         InstanceMethod<&ControlWrap::GetLink>("getLink"),
                         InstanceMethod<&ControlWrap::GetLinkByName>("getLinkByName"),
                         InstanceMethod<&ControlWrap::SetLinkAddress>("setLinkAddress"),
                         InstanceMethod<&ControlWrap::ReplaceNeighbour>("replaceNeighbour"),
                         InstanceMethod<&ControlWrap::ReplaceNeighbours>("replaceNeighbours"),
                         InstanceMethod<&ControlWrap::DeleteNeighbour>("deleteNeighbour"),
                         InstanceMethod<&ControlWrap::ProbeWriteAccess>("probeWriteAccess"),
                         InstanceMethod<&ControlWrap::GetFeatures>("getFeatures"),
                         InstanceMethod<&ControlWrap::SetFeatures>("setFeatures"),
                         InstanceMethod<&ControlWrap::GetDriverInfo>("getDriverInfo"),
                         InstanceMethod<&ControlWrap::ReadAddrAssignType>("readAddrAssignType"),
                         InstanceMethod<&ControlWrap::ReadChecksumErrors>("readChecksumErrors"),
                         InstanceMethod<&ControlWrap::Close>("close"),
                         InstanceAccessor<&ControlWrap::NetnsInodeGetter>("netnsInode"),
                         InstanceAccessor<&ControlWrap::OwnNetnsGetter>("ownNetns"),
                         InstanceAccessor<&ControlWrap::NetnsCookieGetter>("netnsCookie"),
                     });
}

// new Control({ netns?, netnsLabel? })
ControlWrap::ControlWrap(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<ControlWrap>(info), core_(std::make_shared<Core>()) {
  Napi::Env env = info.Env();
  NetnsTarget target;
  if (info[0].IsObject()) {
    const Napi::Object options = info[0].As<Napi::Object>();
    if (options.Get("netns").IsString()) target.path = options.Get("netns").As<Napi::String>();
    if (options.Get("netnsLabel").IsString()) {
      netnsLabel_ = options.Get("netnsLabel").As<Napi::String>();
    }
  }
  Result<NetlinkRequester> requester = NetlinkRequester::Open(target);
  if (!requester.ok()) ThrowSysError(env, requester.error(), netnsLabel_);
  core_->requester.emplace(std::move(requester.value()));
  core_->target = target;

  Result<uint64_t> inode = NetnsInode(target);
  Result<uint64_t> ownInode = NetnsInode(NetnsTarget{});
  if (inode.ok()) netnsInode_ = inode.value();
  ownNetns_ = inode.ok() && ownInode.ok() && inode.value() == ownInode.value();
  if (netnsLabel_.empty() && inode.ok()) netnsLabel_ = NetnsLabelForInode(inode.value());
  Result<uint64_t> cookie = NetnsCookie(core_->requester->fd());
  if (cookie.ok()) netnsCookie_ = std::to_string(cookie.value());
}

Napi::Value ControlWrap::DumpLinks(const Napi::CallbackInfo& info) {
  return Run<std::vector<netlink::LinkRecord>>(
      info, 0, core_, netnsLabel_,
      [](NetlinkRequester& requester) { return requester.DumpLinks(); },
      [](JsWriter& js, const std::vector<netlink::LinkRecord>& links) {
        return ListToJs(js, links, LinkToJs);
      });
}

Napi::Value ControlWrap::DumpNeighbours(const Napi::CallbackInfo& info) {
  if (!info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "family must be a number");
  const auto family = static_cast<uint8_t>(info[0].As<Napi::Number>().Uint32Value());
  return Run<std::vector<netlink::NeighRecord>>(
      info, 1, core_, netnsLabel_,
      [family](NetlinkRequester& requester) { return requester.DumpNeighbours(family); },
      [](JsWriter& js, const std::vector<netlink::NeighRecord>& entries) {
        return ListToJs(js, entries, NeighToJs);
      });
}

Napi::Value ControlWrap::GetLink(const Napi::CallbackInfo& info) {
  const int32_t ifindex = IfindexArgument(info, 0);
  return Run<netlink::LinkRecord>(
      info, 1, core_, netnsLabel_,
      [ifindex](NetlinkRequester& requester) { return requester.GetLink(ifindex); }, LinkToJs);
}

Napi::Value ControlWrap::GetLinkByName(const Napi::CallbackInfo& info) {
  const std::string name = StringArgument(info, 0, "interface");
  return Run<netlink::LinkRecord>(
      info, 1, core_, netnsLabel_,
      [name](NetlinkRequester& requester) { return requester.GetLinkByName(name); }, LinkToJs);
}

// setLinkAddress(ifindex, mac: Buffer(6), interfaceForErrors?: string, async?)
Napi::Value ControlWrap::SetLinkAddress(const Napi::CallbackInfo& info) {
  const int32_t ifindex = IfindexArgument(info, 0);
  const std::array<uint8_t, 6> mac = MacFromJs(info[1], "mac");
  const std::string interface = info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : "";
  return Run<Unit>(
      info, 3, core_, netnsLabel_,
      [ifindex, mac, interface](NetlinkRequester& requester) {
        return Named(requester.SetLinkAddress(ifindex, mac), interface);
      },
      Nothing);
}

// One entry ({ family, ifindex, destination, lladdr, state, flags }, interfaceForErrors?, async?)
// through `request`: replaceNeighbour, deleteNeighbour.
Napi::Value ControlWrap::NeighbourRequest(const Napi::CallbackInfo& info,
                                          NeighbourRequestMethod request) {
  const netlink::NeighbourEntry entry = NeighbourEntryFromJs(info[0]);
  const std::string interface = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  return Run<Unit>(
      info, 2, core_, netnsLabel_,
      [entry, interface, request](NetlinkRequester& requester) {
        return Named((requester.*request)(entry), interface);
      },
      Nothing);
}

Napi::Value ControlWrap::ReplaceNeighbour(const Napi::CallbackInfo& info) {
  return NeighbourRequest(info, &NetlinkRequester::ReplaceNeighbour);
}

Napi::Value ControlWrap::DeleteNeighbour(const Napi::CallbackInfo& info) {
  return NeighbourRequest(info, &NetlinkRequester::DeleteNeighbour);
}

// replaceNeighbours({ family, ifindex, state, flags, destination, lladdr } columns,
//                   interfaceForErrors?, async?): in batches (neighbour_batch.h); returns the
//                   count, or throws the first failure (its detail says how many were not written).
Napi::Value ControlWrap::ReplaceNeighbours(const Napi::CallbackInfo& info) {
  const std::vector<netlink::NeighbourEntry> entries = NeighbourEntriesFromJs(info[0]);
  const std::string interface = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  return Run<size_t>(
      info, 2, core_, netnsLabel_,
      [entries, interface](NetlinkRequester& requester) -> Result<size_t> {
        NeighbourWrites writes = requester.ReplaceNeighbours(entries);
        if (writes.error) return Named(Result<size_t>(std::move(*writes.error)), interface);
        return writes.written;
      },
      [](JsWriter& js, const size_t& count) { return js.Number(static_cast<double>(count)); });
}

Napi::Value ControlWrap::ProbeWriteAccess(const Napi::CallbackInfo& info) {
  return Run<Unit>(
      info, 0, core_, netnsLabel_,
      [](NetlinkRequester& requester) { return requester.ProbeWriteAccess(); }, Nothing);
}

Napi::Value ControlWrap::GetFeatures(const Napi::CallbackInfo& info) {
  const std::string name = StringArgument(info, 0, "interface");
  return Run<ethtool::FeatureTable>(
      info, 1, core_, netnsLabel_,
      [name](NetlinkRequester& requester) {
        return ethtool::GetFeatures(ethtool::SocketIoctl(requester.fd()), name);
      },
      FeatureTableToJs);
}

// setFeatures(interface, { name: enable, ... }, async?)
Napi::Value ControlWrap::SetFeatures(const Napi::CallbackInfo& info) {
  const std::string name = StringArgument(info, 0, "interface");
  if (!info[1].IsObject()) throw Napi::TypeError::New(info.Env(), "features must be an object");
  const Napi::Object wanted = info[1].As<Napi::Object>();
  napi_value ownKeys = nullptr;
  if (napi_get_all_property_names(
          info.Env(), wanted, napi_key_own_only,
          static_cast<napi_key_filter>(napi_key_enumerable | napi_key_skip_symbols),
          napi_key_numbers_to_strings, &ownKeys) != napi_ok) {
    throw Napi::Error::New(info.Env());
  }
  const Napi::Array keys(info.Env(), ownKeys);
  std::vector<ethtool::FeatureRequest> requests;
  for (uint32_t i = 0; i < keys.Length(); ++i) {
    const std::string feature = keys.Get(i).As<Napi::String>().Utf8Value();
    const Napi::Value enable = wanted.Get(feature);
    if (!enable.IsBoolean()) {
      throw Napi::TypeError::New(info.Env(), "the value for " + feature + " must be a boolean");
    }
    requests.push_back(ethtool::FeatureRequest{feature, enable.As<Napi::Boolean>().Value()});
  }
  return Run<ethtool::SetFeaturesOutcome>(
      info, 2, core_, netnsLabel_,
      [name, requests](NetlinkRequester& requester) {
        return ethtool::SetFeatures(ethtool::SocketIoctl(requester.fd()), name, requests);
      },
      SetFeaturesOutcomeToJs);
}

Napi::Value ControlWrap::GetDriverInfo(const Napi::CallbackInfo& info) {
  const std::string name = StringArgument(info, 0, "interface");
  return Run<ethtool::DriverInfo>(
      info, 1, core_, netnsLabel_,
      [name](NetlinkRequester& requester) {
        return ethtool::GetDriverInfo(ethtool::SocketIoctl(requester.fd()), name);
      },
      DriverInfoToJs);
}

// readAddrAssignType(interface, ifindex, mac): the sysfs value, or null when the
// device is not in this process's namespace or sysfs shows another device.
Napi::Value ControlWrap::ReadAddrAssignType(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string name = StringArgument(info, 0, "interface");
  const int32_t ifindex = IfindexArgument(info, 1);
  const std::string mac = StringArgument(info, 2, "mac");
  if (!ownNetns_) return env.Null();
  const std::optional<int> value = fg::ReadAddrAssignType(name, ifindex, mac);
  return value ? Napi::Number::New(env, *value) : env.Null();
}

// readChecksumErrors(): { udp, tcp, udp6 } of the namespace, each a number or null when the
// kernel keeps no such counter.
Napi::Value ControlWrap::ReadChecksumErrors(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Result<ChecksumErrors> counters = [this]() -> Result<ChecksumErrors> {
    std::lock_guard<std::mutex> lock(core_->mutex);
    if (!core_->requester) return SysError(EBADF, "control", "closed");
    if (!core_->snmp) {
      Result<SnmpFiles> files = SnmpFiles::Open(core_->target);
      if (!files.ok()) return files.error();
      core_->snmp.emplace(std::move(files.value()));
    }
    return core_->snmp->Read();
  }();
  if (!counters.ok()) ThrowSysError(env, counters.error(), netnsLabel_);
  const auto counter = [&env](const std::optional<uint64_t>& value) -> Napi::Value {
    return value ? Napi::Number::New(env, static_cast<double>(*value)) : env.Null();
  };
  Napi::Object result = Napi::Object::New(env);
  result.Set("udp", counter(counters.value().udp));
  result.Set("tcp", counter(counters.value().tcp));
  result.Set("udp6", counter(counters.value().udp6));
  return result;
}

Napi::Value ControlWrap::Close(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(core_->mutex);
  core_->requester.reset();
  core_->snmp.reset();
  return info.Env().Undefined();
}

Napi::Value ControlWrap::NetnsInodeGetter(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(netnsInode_));
}

Napi::Value ControlWrap::OwnNetnsGetter(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), ownNetns_);
}

Napi::Value ControlWrap::NetnsCookieGetter(const Napi::CallbackInfo& info) {
  if (netnsCookie_.empty()) return info.Env().Null();
  return Napi::String::New(info.Env(), netnsCookie_);
}

}  // namespace fg::addon
