#include "scripted_monitor_wrap.h"

#include <sys/socket.h>

#include <vector>

#include "convert.h"
#include "errors.h"
#include "items.h"
#include "js_writer.h"
#include "monitor_args.h"

namespace fg::addon {
namespace {

// Datagrams read per batch, as the real monitor reads per wake.
constexpr size_t kDatagramsPerRead = 64;
// Reads of one read() call: a script whose writes echo forever is a bug to report.
constexpr int kMaxReads = 10'000;

// A JS exception thrown by the script, as the write's failure (a SystemError
// carries a negative errno and its syscall; anything else is EIO).
SysError ScriptFailure(const Napi::Error& error, const char* syscall) {
  const Napi::Object object = error.Value();
  const Napi::Value errnum = object.Get("errno");
  const int number = errnum.IsNumber() ? -errnum.As<Napi::Number>().Int32Value() : EIO;
  return SysError(number > 0 ? number : EIO, syscall, error.Message());
}

}  // namespace

Napi::Function ScriptedMonitorWrap::Define(Napi::Env env) {
  return DefineClass(env, "ScriptedMonitor",
                     {
                         InstanceMethod<&ScriptedMonitorWrap::Start>("start"),
                         InstanceMethod<&ScriptedMonitorWrap::Resync>("resync"),
                         InstanceMethod<&ScriptedMonitorWrap::SetFilter>("setFilter"),
                         InstanceMethod<&ScriptedMonitorWrap::Arm>("arm"),
                         InstanceMethod<&ScriptedMonitorWrap::Disarm>("disarm"),
                         InstanceMethod<&ScriptedMonitorWrap::Keep>("keep"),
                         InstanceMethod<&ScriptedMonitorWrap::Release>("release"),
                         InstanceMethod<&ScriptedMonitorWrap::RestoreSet>("restoreSet"),
                         InstanceMethod<&ScriptedMonitorWrap::Nothing>("ref"),
                         InstanceMethod<&ScriptedMonitorWrap::Nothing>("unref"),
                         InstanceMethod<&ScriptedMonitorWrap::Nothing>("flush"),
                         InstanceMethod<&ScriptedMonitorWrap::Stats>("stats"),
                         InstanceMethod<&ScriptedMonitorWrap::Links>("links"),
                         InstanceMethod<&ScriptedMonitorWrap::GetLink>("getLink"),
                         InstanceMethod<&ScriptedMonitorWrap::Neighbours>("neighbours"),
                         InstanceMethod<&ScriptedMonitorWrap::Resyncing>("resyncing"),
                         InstanceMethod<&ScriptedMonitorWrap::Close>("close"),
                         InstanceMethod<&ScriptedMonitorWrap::Feed>("feed"),
                         InstanceMethod<&ScriptedMonitorWrap::Overrun>("overrun"),
                         InstanceMethod<&ScriptedMonitorWrap::Read>("read"),
                         InstanceMethod<&ScriptedMonitorWrap::Armed>("armed"),
                     });
}

// new ScriptedMonitor({ neighbours?, neighbourEvents?, portid, writerPortid, corrections?,
//                       clock?: () => ms (the core's time: arrivals, timings) },
//                     script: { getLink(ifindex): Buffer | null, setLinkAddress(ifindex, mac),
//                               replaceNeighbour(entry), answer?(request),
//                               unfed?(): notifications queued but not fed yet }, onBatch)
ScriptedMonitorWrap::ScriptedMonitorWrap(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<ScriptedMonitorWrap>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsObject() || !info[2].IsFunction()) {
    throw Napi::TypeError::New(env, "ScriptedMonitor(options, script, onBatch)");
  }
  const Napi::Object options = info[0].As<Napi::Object>();
  MonitorOptions monitorOptions;
  ReadNeighbourOptions(options, &monitorOptions);
  corrections_ = !options.Get("corrections").IsBoolean() ||
                 options.Get("corrections").As<Napi::Boolean>().Value();
  const uint32_t portid = options.Get("portid").ToNumber().Uint32Value();
  const uint32_t writerPortid = options.Get("writerPortid").ToNumber().Uint32Value();
  script_ = Napi::Persistent(info[1].As<Napi::Object>());
  onBatch_ = Napi::Persistent(info[2].As<Napi::Function>());
  ScriptedSource::Answer answer;
  if (script_.Get("answer").IsFunction()) {
    answer = [this, env](const std::vector<uint8_t>& request) {
      script_.Get("answer").As<Napi::Function>().Call(
          script_.Value(), {Napi::Buffer<uint8_t>::Copy(env, request.data(), request.size())});
    };
  }
  ScriptedSource::Unfed unfed;
  if (script_.Get("unfed").IsFunction()) {
    unfed = [this] {
      return script_.Get("unfed").As<Napi::Function>().Call(script_.Value(), {}).ToBoolean();
    };
  }
  auto source = std::make_unique<ScriptedSource>(portid, std::move(answer), std::move(unfed));
  source_ = source.get();
  WriterScript script = ScriptFrom(env);
  core_ = std::make_unique<MonitorCore>(
      std::move(source),
      [writerPortid, script]() -> Result<std::unique_ptr<CorrectionWriter>> {
        return std::unique_ptr<CorrectionWriter>(new ScriptedWriter(writerPortid, script));
      },
      monitorOptions);
  if (const Napi::Value clock = options.Get("clock"); clock.IsFunction()) {
    clock_ = Napi::Persistent(clock.As<Napi::Function>());
    core_->SetClock(
        [this] { return static_cast<int64_t>(clock_.Call({}).ToNumber().DoubleValue() * 1e6); });
  }
}

// The writer's calls go to the script, on the JS thread (they run inside read()).
WriterScript ScriptedMonitorWrap::ScriptFrom(Napi::Env env) {
  WriterScript script;
  script.getLink = [this, env](int32_t ifindex) -> Result<netlink::LinkRecord> {
    try {
      const Napi::Value bytes = script_.Get("getLink").As<Napi::Function>().Call(
          script_.Value(), {Napi::Number::New(env, ifindex)});
      if (!bytes.IsBuffer()) return SysError(ENODEV, "getlink", "no such device");
      const auto buffer = bytes.As<Napi::Buffer<uint8_t>>();
      netlink::ParsedDatagram parsed = netlink::ParseDatagram(buffer.Data(), buffer.Length());
      for (netlink::Message& message : parsed.messages) {
        if (auto* link = std::get_if<netlink::LinkRecord>(&message.body)) return std::move(*link);
      }
      return SysError(EBADMSG, "getlink", "the script's answer holds no RTM_NEWLINK");
    } catch (const Napi::Error& error) {
      return ScriptFailure(error, "getlink");
    }
  };
  script.setLinkAddress = [this, env](int32_t ifindex,
                                      const std::array<uint8_t, 6>& mac) -> Result<Unit> {
    try {
      script_.Get("setLinkAddress")
          .As<Napi::Function>()
          .Call(script_.Value(), {Napi::Number::New(env, ifindex),
                                  Napi::Buffer<uint8_t>::Copy(env, mac.data(), mac.size())});
      return Unit{};
    } catch (const Napi::Error& error) {
      return ScriptFailure(error, "setlink");
    }
  };
  script.replaceNeighbours = [this, env](const std::vector<netlink::NeighbourEntry>& entries) {
    NeighbourWrites writes;
    for (const netlink::NeighbourEntry& entry : entries) {
      Napi::Object object = Napi::Object::New(env);
      object.Set("family", entry.family);
      object.Set("ifindex", entry.ifindex);
      object.Set("destination", Napi::Buffer<uint8_t>::Copy(env, entry.destination.data(),
                                                            entry.destination.size()));
      object.Set("lladdr", Napi::Buffer<uint8_t>::Copy(env, entry.lladdr.data(), 6));
      object.Set("state", entry.state);
      object.Set("flags", entry.flags);
      try {
        script_.Get("replaceNeighbour").As<Napi::Function>().Call(script_.Value(), {object});
        ++writes.written;
        ++writes.datagrams;
      } catch (const Napi::Error& error) {
        writes.error = ScriptFailure(error, "setneigh");
        break;
      }
    }
    return writes;
  };
  return script;
}

Napi::Value ScriptedMonitorWrap::Start(const Napi::CallbackInfo& info) {
  core_->RequestResync("initial");
  return info.Env().Undefined();
}

Napi::Value ScriptedMonitorWrap::Resync(const Napi::CallbackInfo& info) {
  if (!closed_) core_->RequestResync("requested");
  return info.Env().Undefined();
}

Napi::Value ScriptedMonitorWrap::SetFilter(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Result<Unit> set = core_->SetFilter(LinkFilterFromJs(env, info[0]));
  if (!set.ok()) ThrowSysError(env, set.error(), "");
  return env.Undefined();
}

Napi::Value ScriptedMonitorWrap::Arm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ArmRequest request = ArmFromJs(info);
  if (closed_) throw Napi::Error::New(env, "monitor is closed");
  if (corrections_) ArmCore(env, *core_, std::move(request), "");
  return env.Undefined();
}

Napi::Value ScriptedMonitorWrap::Keep(const Napi::CallbackInfo& info) {
  KeepRequest request = KeepFromJs(info);
  core_->Keep(request.ifindex, std::move(request.recovered));
  return info.Env().Undefined();
}

Napi::Value ScriptedMonitorWrap::Release(const Napi::CallbackInfo& info) {
  if (info[0].IsNumber()) core_->Release(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

Napi::Value ScriptedMonitorWrap::RestoreSet(const Napi::CallbackInfo& info) {
  JsWriter js(info.Env());
  return Finish(js, RestoreSetToJs(js, *core_, info[0].ToNumber().Int32Value()));
}

Napi::Value ScriptedMonitorWrap::Disarm(const Napi::CallbackInfo& info) {
  if (info[0].IsNumber()) core_->Disarm(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

Napi::Value ScriptedMonitorWrap::Nothing(const Napi::CallbackInfo& info) {
  return info.Env().Undefined();
}

Napi::Value ScriptedMonitorWrap::Stats(const Napi::CallbackInfo& info) {
  return StatsToJs(info.Env(), core_->stats(), ReportStats{}, core_->receiveBuffer(),
                   core_->mirror());
}

// Items are delivered as they are read: the view is the mirror's (through the same code).
Napi::Value ScriptedMonitorWrap::Links(const Napi::CallbackInfo& info) {
  JsWriter js(info.Env());
  const DeliveredView view(core_->mirror(), {});
  return Finish(js, ViewedLinksToJs(js, view.Links(),
                                    [](const ViewedLink& link) { return link.addrAssignType; }));
}

Napi::Value ScriptedMonitorWrap::GetLink(const Napi::CallbackInfo& info) {
  const std::optional<ViewedLink> link =
      FindViewedLink(DeliveredView(core_->mirror(), {}), info[0]);
  if (!link) return info.Env().Undefined();
  JsWriter js(info.Env());
  return Finish(js, MirroredLinkToJs(js, link->record, link->addrAssignType));
}

Napi::Value ScriptedMonitorWrap::Neighbours(const Napi::CallbackInfo& info) {
  JsWriter js(info.Env());
  std::optional<int32_t> ifindex;
  if (info[0].IsNumber()) ifindex = info[0].As<Napi::Number>().Int32Value();
  const DeliveredView view(core_->mirror(), {});
  return Finish(js, NeighbourColumnsToJs(js, view.Neighbours(ifindex)));
}

Napi::Value ScriptedMonitorWrap::Resyncing(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), core_->mirror().resyncing());
}

Napi::Value ScriptedMonitorWrap::Close(const Napi::CallbackInfo& info) {
  closed_ = true;
  return info.Env().Undefined();
}

// feed(datagram: Buffer): queued as the kernel would send it.
Napi::Value ScriptedMonitorWrap::Feed(const Napi::CallbackInfo& info) {
  if (!info[0].IsBuffer()) throw Napi::TypeError::New(info.Env(), "feed(datagram: Buffer)");
  const auto bytes = info[0].As<Napi::Buffer<uint8_t>>();
  source_->Feed(std::vector<uint8_t>(bytes.Data(), bytes.Data() + bytes.Length()));
  return info.Env().Undefined();
}

// overrun(): the kernel dropped notifications here (ENOBUFS).
Napi::Value ScriptedMonitorWrap::Overrun(const Napi::CallbackInfo& info) {
  source_->FeedOverrun();
  return info.Env().Undefined();
}

// read(): reads what is queued, a batch at a time, each handed to onBatch at once; the number
// of batches. Stops when nothing is queued (requests may be waiting for their answers).
Napi::Value ScriptedMonitorWrap::Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int batches = 0;
  for (int reads = 0; !closed_ && !core_->failed(); ++reads) {
    if (reads == kMaxReads) throw Napi::Error::New(env, "read: the script never stops echoing");
    std::vector<MonitorItem> items;
    core_->ReadAvailable(kDatagramsPerRead, 0, &items);
    if (!items.empty()) {
      ++batches;
      JsWriter js(env);
      napi_value batch = ItemsToJs(js, items, "");
      Finish(js, batch);
      const double arrivalMs = static_cast<double>(core_->batchArrivalNs()) / 1e6;
      onBatch_.Call(Value(), {Napi::Value(env, batch), Napi::Number::New(env, arrivalMs)});
    }
    if (source_->queued() == 0) break;
  }
  return Napi::Number::New(env, batches);
}

// armed(ifindex): { name, mac: "aa:bb:..", neighbours: ["198.18.2.0", ...] } while the device
// is armed (its restore set, as the core keeps it), else undefined.
Napi::Value ScriptedMonitorWrap::Armed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int32_t ifindex = info[0].ToNumber().Int32Value();
  const ArmedCorrection* armed = core_->ArmedFor(ifindex);
  if (!armed) return env.Undefined();
  Napi::Object object = Napi::Object::New(env);
  object.Set("name", armed->name);
  object.Set("mac", netlink::FormatMac(armed->mac));
  Napi::Array neighbours = Napi::Array::New(env);
  if (const fg::RestoreSet* set = core_->RestoreSetOf(ifindex)) {
    JsWriter js(env);
    for (const netlink::NeighbourEntry& entry : set->entries()) {
      neighbours.Set(neighbours.Length(), Napi::Value(env, AddressToJs(js, entry.destination)));
    }
  }
  object.Set("neighbours", neighbours);
  return object;
}

}  // namespace fg::addon
