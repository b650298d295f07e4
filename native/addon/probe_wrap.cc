#include "probe_wrap.h"

#include <arpa/inet.h>

#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "js_writer.h"
#include "path_probe.h"

namespace fg::addon {
namespace {

using probe::PathAnswer;
using probe::PathProbeOptions;

class ProbeJob final : public Napi::AsyncWorker {
 public:
  ProbeJob(Napi::Env env, NetnsTarget target, std::string netnsLabel, PathProbeOptions options,
           std::vector<uint32_t> addresses)
      : Napi::AsyncWorker(env, "flannel-guard:probePaths"),
        target_(std::move(target)),
        netnsLabel_(std::move(netnsLabel)),
        options_(std::move(options)),
        addresses_(std::move(addresses)) {
    if (napi_create_promise(env, &deferred_, &promise_) != napi_ok) throw Napi::Error::New(env);
  }

  Napi::Value Promise() const { return Napi::Value(Env(), promise_); }

  void Execute() override { result_.emplace(probe::ProbePaths(target_, options_, addresses_)); }

  // Raw Node-API: this runs from libuv, maybe while a worker is terminated.
  void OnOK() override {
    JsWriter js(Env());
    if (!result_->ok()) {
      SysError error = result_->error();
      if (error.interface.empty()) error.interface = options_.device;
      napi_value value = SysErrorToJs(js, error, netnsLabel_);
      if (js.ok() && value) napi_reject_deferred(Env(), deferred_, value);
      return;
    }
    const std::vector<PathAnswer>& answers = result_->value();
    napi_value list = js.Array(answers.size());
    for (size_t i = 0; i < answers.size(); ++i) {
      char text[INET_ADDRSTRLEN] = {};
      in_addr address{answers[i].address};
      inet_ntop(AF_INET, &address, text, sizeof(text));
      napi_value item = js.Object();
      js.Set(item, "address", std::string(text));
      js.Set(item, "echo", answers[i].echo);
      js.Set(item, "udp", answers[i].udp);
      js.Set(item, "tcp", answers[i].tcp);
      js.SetIndex(list, static_cast<uint32_t>(i), item);
    }
    if (js.ok() && list) napi_resolve_deferred(Env(), deferred_, list);
  }

 private:
  NetnsTarget target_;
  std::string netnsLabel_;
  PathProbeOptions options_;
  std::vector<uint32_t> addresses_;
  napi_deferred deferred_ = nullptr;
  napi_value promise_ = nullptr;
  std::optional<Result<std::vector<PathAnswer>>> result_;
};

uint16_t PortOption(const Napi::Object& options, const char* name) {
  const Napi::Value value = options.Get(name);
  if (!value.IsNumber())
    throw Napi::TypeError::New(options.Env(), std::string(name) + " must be a number");
  const int64_t port = value.As<Napi::Number>().Int64Value();
  if (port < 0 || port > 65535)
    throw Napi::RangeError::New(options.Env(), std::string(name) + " out of range");
  return static_cast<uint16_t>(port);
}

}  // namespace

Napi::Value ProbePaths(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsArray()) {
    throw Napi::TypeError::New(env, "probePaths(options: object, addresses: string[])");
  }
  const Napi::Object options = info[0].As<Napi::Object>();
  NetnsTarget target;
  std::string netnsLabel;
  if (options.Get("netns").IsString()) target.path = options.Get("netns").As<Napi::String>();
  if (options.Get("netnsLabel").IsString())
    netnsLabel = options.Get("netnsLabel").As<Napi::String>();
  PathProbeOptions probe;
  if (!options.Get("device").IsString()) throw Napi::TypeError::New(env, "device must be a string");
  probe.device = options.Get("device").As<Napi::String>().Utf8Value();
  if (probe.device.empty() || probe.device.size() >= 16) {
    throw Napi::RangeError::New(env, "device must be an interface name");
  }
  if (!options.Get("timeoutMs").IsNumber())
    throw Napi::TypeError::New(env, "timeoutMs must be a number");
  probe.timeoutMs = options.Get("timeoutMs").As<Napi::Number>().Int32Value();
  probe.udpPort = PortOption(options, "udpPort");
  probe.tcpPort = PortOption(options, "tcpPort");
  probe.echoId = PortOption(options, "echoId");
  const Napi::Array list = info[1].As<Napi::Array>();
  if (list.Length() > probe::kMaxTargets) throw Napi::RangeError::New(env, "too many addresses");
  std::vector<uint32_t> addresses;
  for (uint32_t i = 0; i < list.Length(); ++i) {
    const Napi::Value item = list.Get(i);
    in_addr address{};
    if (!item.IsString() ||
        inet_pton(AF_INET, item.As<Napi::String>().Utf8Value().c_str(), &address) != 1) {
      throw Napi::TypeError::New(env, "addresses must be IPv4 addresses");
    }
    addresses.push_back(address.s_addr);
  }
  auto* job = new ProbeJob(env, std::move(target), std::move(netnsLabel), std::move(probe),
                           std::move(addresses));
  Napi::Value promise = job->Promise();
  job->Queue();
  return promise;
}

}  // namespace fg::addon
