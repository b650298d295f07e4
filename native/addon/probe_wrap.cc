#include "probe_wrap.h"

#include <arpa/inet.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checksum_sample.h"
#include "errors.h"
#include "js_writer.h"
#include "netlink_parser.h"
#include "path_probe.h"

namespace fg::addon {
namespace {

using probe::PathAnswer;
using probe::PathProbeOptions;

// Where a job runs: the namespace, its label for errors, the device.
struct JobTarget {
  NetnsTarget netns;
  std::string netnsLabel;
  std::string device;
};

// Runs `work` on the thread pool and settles a promise: with `toJs` of its
// value, or with the SysError (naming the device) it failed with.
template <typename T>
class PromiseJob final : public Napi::AsyncWorker {
 public:
  using Work = std::function<Result<T>(const JobTarget&)>;
  using ToJs = napi_value (*)(JsWriter&, const T&);

  PromiseJob(Napi::Env env, const char* name, JobTarget target, Work work, ToJs toJs)
      : Napi::AsyncWorker(env, name),
        target_(std::move(target)),
        work_(std::move(work)),
        toJs_(toJs) {
    if (napi_create_promise(env, &deferred_, &promise_) != napi_ok) throw Napi::Error::New(env);
  }

  Napi::Value Promise() const { return Napi::Value(Env(), promise_); }

  void Execute() override { result_.emplace(work_(target_)); }

  // Raw Node-API: this runs from libuv, maybe while a worker is terminated.
  void OnOK() override {
    JsWriter js(Env());
    if (!result_->ok()) {
      SysError error = result_->error();
      if (error.interface.empty()) error.interface = target_.device;
      napi_value value = SysErrorToJs(js, error, target_.netnsLabel);
      if (js.ok() && value) napi_reject_deferred(Env(), deferred_, value);
      return;
    }
    napi_value value = toJs_(js, result_->value());
    if (js.ok() && value) napi_resolve_deferred(Env(), deferred_, value);
  }

 private:
  JobTarget target_;
  Work work_;
  ToJs toJs_;
  napi_deferred deferred_ = nullptr;
  napi_value promise_ = nullptr;
  std::optional<Result<T>> result_;
};

template <typename T>
Napi::Value Queue(Napi::Env env, const char* name, JobTarget target,
                  typename PromiseJob<T>::Work work, typename PromiseJob<T>::ToJs toJs) {
  auto* job = new PromiseJob<T>(env, name, std::move(target), std::move(work), toJs);
  Napi::Value promise = job->Promise();
  job->Queue();
  return promise;
}

JobTarget TargetOption(const Napi::Object& options) {
  JobTarget target;
  if (options.Get("netns").IsString()) target.netns.path = options.Get("netns").As<Napi::String>();
  if (options.Get("netnsLabel").IsString())
    target.netnsLabel = options.Get("netnsLabel").As<Napi::String>();
  if (!options.Get("device").IsString())
    throw Napi::TypeError::New(options.Env(), "device must be a string");
  target.device = options.Get("device").As<Napi::String>().Utf8Value();
  if (target.device.empty() || target.device.size() >= 16) {
    throw Napi::RangeError::New(options.Env(), "device must be an interface name");
  }
  return target;
}

int64_t NumberOption(const Napi::Object& options, const char* name) {
  const Napi::Value value = options.Get(name);
  if (!value.IsNumber())
    throw Napi::TypeError::New(options.Env(), std::string(name) + " must be a number");
  return value.As<Napi::Number>().Int64Value();
}

uint16_t PortOption(const Napi::Object& options, const char* name) {
  const int64_t port = NumberOption(options, name);
  if (port < 0 || port > 65535)
    throw Napi::RangeError::New(options.Env(), std::string(name) + " out of range");
  return static_cast<uint16_t>(port);
}

napi_value AnswersToJs(JsWriter& js, const std::vector<PathAnswer>& answers) {
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
  return list;
}

napi_value SampleToJs(JsWriter& js, const csum::ChecksumSample& sample) {
  napi_value object = js.Object();
  js.Set(object, "frames", sample.frames);
  js.Set(object, "checked", sample.checked);
  js.Set(object, "bad", sample.bad);
  napi_value senders = js.Array(sample.senders.size());
  for (size_t i = 0; i < sample.senders.size(); ++i) {
    const csum::Sender& sender = sample.senders[i];
    napi_value item = js.Object();
    js.Set(item, "mac", netlink::FormatMac(sender.mac));
    js.Set(item, "udp", sender.udp);
    js.Set(item, "tcp", sender.tcp);
    js.SetIndex(senders, static_cast<uint32_t>(i), item);
  }
  js.Set(object, "senders", senders);
  return object;
}

}  // namespace

Napi::Value ProbePaths(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsArray()) {
    throw Napi::TypeError::New(env, "probePaths(options: object, addresses: string[])");
  }
  const Napi::Object options = info[0].As<Napi::Object>();
  JobTarget target = TargetOption(options);
  PathProbeOptions probe;
  probe.device = target.device;
  probe.timeoutMs = static_cast<int>(
      std::clamp<int64_t>(NumberOption(options, "timeoutMs"), 0, probe::kMaxTimeoutMs + 1));
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
  return Queue<std::vector<PathAnswer>>(
      env, "flannel-guard:probePaths", std::move(target),
      [probe, addresses](const JobTarget& where) {
        return probe::ProbePaths(where.netns, probe, addresses);
      },
      AnswersToJs);
}

Napi::Value SampleChecksums(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw Napi::TypeError::New(env, "sampleChecksums(options: object)");
  const Napi::Object options = info[0].As<Napi::Object>();
  JobTarget target = TargetOption(options);
  csum::SampleOptions sample;
  sample.device = target.device;
  // Out-of-range values stay out of range after the clamp: SampleChecksums refuses them.
  sample.timeoutMs = static_cast<int>(
      std::clamp<int64_t>(NumberOption(options, "timeoutMs"), 0, csum::kMaxTimeoutMs + 1));
  sample.maxFrames = static_cast<uint32_t>(
      std::clamp<int64_t>(NumberOption(options, "maxFrames"), 0, csum::kMaxFrames + 1));
  return Queue<csum::ChecksumSample>(
      env, "flannel-guard:sampleChecksums", std::move(target),
      [sample](const JobTarget& where) { return csum::SampleChecksums(where.netns, sample); },
      SampleToJs);
}

}  // namespace fg::addon
