#include "monitor_wrap.h"

#include <algorithm>

#include "convert.h"
#include "errors.h"
#include "items.h"
#include "js_writer.h"
#include "monitor_args.h"

namespace fg::addon {
namespace {

// Datagrams read per wake before yielding to the loop; more data wakes it again.
constexpr size_t kDatagramsPerWake = 64;

// The longest a report of corrections may be held (see ReportQueue).
constexpr double kMaxReportIntervalMs = 1000;

std::string OptionalString(const Napi::Object& options, const char* key) {
  Napi::Value value = options.Get(key);
  return value.IsString() ? value.As<Napi::String>().Utf8Value() : std::string();
}

}  // namespace

Napi::Function MonitorWrap::Define(Napi::Env env) {
  return DefineClass(env, "Monitor",
                     {
                         InstanceMethod<&MonitorWrap::Start>("start"),
                         InstanceMethod<&MonitorWrap::Resync>("resync"),
                         InstanceMethod<&MonitorWrap::SetFilter>("setFilter"),
                         InstanceMethod<&MonitorWrap::Arm>("arm"),
                         InstanceMethod<&MonitorWrap::Disarm>("disarm"),
                         InstanceMethod<&MonitorWrap::Keep>("keep"),
                         InstanceMethod<&MonitorWrap::Release>("release"),
                         InstanceMethod<&MonitorWrap::RestoreSet>("restoreSet"),
                         InstanceMethod<&MonitorWrap::Ref>("ref"),
                         InstanceMethod<&MonitorWrap::Unref>("unref"),
                         InstanceMethod<&MonitorWrap::Stats>("stats"),
                         InstanceMethod<&MonitorWrap::Links>("links"),
                         InstanceMethod<&MonitorWrap::GetLink>("getLink"),
                         InstanceMethod<&MonitorWrap::Neighbours>("neighbours"),
                         InstanceMethod<&MonitorWrap::Resyncing>("resyncing"),
                         InstanceMethod<&MonitorWrap::Flush>("flush"),
                         InstanceMethod<&MonitorWrap::Close>("close"),
                     });
}

// new Monitor({ netns?, netnsLabel?, receiveBuffer?, neighbours?: boolean | "ip",
//               neighbourEvents?: "all" | "permanent", addrAssignType?: boolean,
//               reportIntervalMs?: 0..1000 }, onBatch)
MonitorWrap::MonitorWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MonitorWrap>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "Monitor(options, onBatch)");
  }
  const Napi::Object options = info[0].As<Napi::Object>();
  MonitorOptions monitorOptions;
  monitorOptions.netns.path = OptionalString(options, "netns");
  netnsLabel_ = OptionalString(options, "netnsLabel");
  if (netnsLabel_.empty()) {
    if (Result<uint64_t> inode = NetnsInode(monitorOptions.netns); inode.ok()) {
      netnsLabel_ = NetnsLabelForInode(inode.value());
    }
  }
  if (options.Get("receiveBuffer").IsNumber()) {
    monitorOptions.receiveBuffer = options.Get("receiveBuffer").As<Napi::Number>().Int32Value();
  }
  ReadNeighbourOptions(options, &monitorOptions);
  monitorOptions.addrAssignType = options.Get("addrAssignType").ToBoolean().Value();
  if (const Napi::Value interval = options.Get("reportIntervalMs"); !interval.IsUndefined()) {
    const double ms = interval.ToNumber().DoubleValue();
    if (!(ms >= 0 && ms <= kMaxReportIntervalMs)) {
      throw Napi::RangeError::New(env, "Monitor: reportIntervalMs must be 0..1000");
    }
    shared_.Lock()->reports = ReportQueue(static_cast<int64_t>(ms * 1e6));
  }

  Result<std::unique_ptr<MonitorCore>> core = MonitorCore::Open(monitorOptions);
  if (!core.ok()) ThrowSysError(env, core.error(), netnsLabel_);
  receiveBuffer_ = core.value()->receiveBuffer();

  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) {
    throw Napi::Error::New(env, "no event loop for this environment");
  }
  auto poll = std::make_unique<Poll>();
  poll->core = std::move(core.value());
  poll->owner = this;
  if (const int error = uv_async_init(loop, &poll->handedOver, &MonitorWrap::OnHandedOver);
      error != 0) {
    throw Napi::Error::New(env, std::string("uv_async_init: ") + uv_strerror(error));
  }
  poll->handedOver.data = poll.get();
  poll_ = poll.release();
  {
    auto shared = shared_.Lock();
    shared->core = poll_->core.get();
    // What opening had to settle for (a smaller receive buffer, no extended
    // ACKs) reaches JS with the first batch, as warnings.
    for (const std::string& warning : poll_->core->warnings()) {
      shared->pending.push_back(WarningItem{"EDEGRADED", warning});
    }
  }
  napi_add_async_cleanup_hook(env, &MonitorWrap::OnTeardown, poll_, &poll_->teardownHook);

  onBatch_ = Napi::Persistent(info[1].As<Napi::Function>());
  napi_value resourceName = Napi::String::New(env, "flannel-guard:Monitor");
  if (napi_async_init(env, info.This(), resourceName, &asyncContext_) != napi_ok) {
    throw Napi::Error::New(env);
  }
}

MonitorWrap::~MonitorWrap() {
  // Garbage-collected without close(): it was never started (a started
  // monitor holds a strong reference to itself until closed).
  if (poll_) {
    poll_->owner = nullptr;
    BeginClose(poll_);
  }
  DestroyAsyncContext();
}

void MonitorWrap::DestroyAsyncContext() {
  if (asyncContext_) napi_async_destroy(Env(), asyncContext_);
  asyncContext_ = nullptr;
}

Napi::Value MonitorWrap::Start(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closed_) throw Napi::Error::New(env, "monitor is closed");
  if (started_) return env.Undefined();
  poll_->core->RequestResync("initial");  // no reader yet: nothing else touches the core
  Result<std::unique_ptr<ReadThread>> reader =
      ReadThread::Start(poll_->core->fd(), [this](int64_t arrivalNs) { return Turn(arrivalNs); });
  if (!reader.ok()) ThrowSysError(env, reader.error(), netnsLabel_);
  poll_->reader = std::move(reader.value());
  started_ = true;
  Napi::ObjectWrap<MonitorWrap>::Ref();  // alive while reading, whatever JS holds
  return env.Undefined();
}

Napi::Value MonitorWrap::Resync(const Napi::CallbackInfo& info) {
  if (started_ && !closed_ && poll_ && poll_->reader) {
    shared_.Lock()->core->RequestResync("requested");
    poll_->reader->Kick();
  }
  return info.Env().Undefined();
}

// setFilter({ ifindexes: number[], namePrefixes: string[] } | null)
Napi::Value MonitorWrap::SetFilter(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::optional<LinkFilter> filter = LinkFilterFromJs(env, info[0]);
  auto shared = shared_.Lock();
  if (!shared->core) throw Napi::Error::New(env, "monitor is closed");
  Result<Unit> set = shared->core->SetFilter(filter);
  if (!set.ok()) ThrowSysError(env, set.error(), netnsLabel_);
  return env.Undefined();
}

// arm(ifindex, target): see ArmFromJs.
Napi::Value MonitorWrap::Arm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ArmRequest request = ArmFromJs(info);
  auto shared = shared_.Lock();
  if (!shared->core) throw Napi::Error::New(env, "monitor is closed");
  ArmCore(env, *shared->core, std::move(request), netnsLabel_);
  return env.Undefined();
}

// keep(ifindex, recovered?): see MonitorCore::Keep.
Napi::Value MonitorWrap::Keep(const Napi::CallbackInfo& info) {
  KeepRequest request = KeepFromJs(info);
  auto shared = shared_.Lock();
  if (!shared->core) throw Napi::Error::New(info.Env(), "monitor is closed");
  shared->core->Keep(request.ifindex, std::move(request.recovered));
  return info.Env().Undefined();
}

Napi::Value MonitorWrap::Release(const Napi::CallbackInfo& info) {
  auto shared = shared_.Lock();
  if (shared->core && info[0].IsNumber()) {
    shared->core->Release(info[0].As<Napi::Number>().Int32Value());
  }
  return info.Env().Undefined();
}

// restoreSet(ifindex): the device's restore set as neighbour columns (empty once closed).
Napi::Value MonitorWrap::RestoreSet(const Napi::CallbackInfo& info) {
  JsWriter js(info.Env());
  auto shared = shared_.Lock();
  if (!shared->core) return Finish(js, NeighbourColumnsToJs(js, {}));
  return Finish(js, RestoreSetToJs(js, *shared->core, info[0].ToNumber().Int32Value()));
}

Napi::Value MonitorWrap::Disarm(const Napi::CallbackInfo& info) {
  auto shared = shared_.Lock();
  if (shared->core && info[0].IsNumber()) {
    shared->core->Disarm(info[0].As<Napi::Number>().Int32Value());
  }
  return info.Env().Undefined();
}

// The loop stays alive for the monitor (the reader's thread never keeps it so).
Napi::Value MonitorWrap::Ref(const Napi::CallbackInfo& info) {
  if (poll_) uv_ref(reinterpret_cast<uv_handle_t*>(&poll_->handedOver));
  return info.Env().Undefined();
}

Napi::Value MonitorWrap::Unref(const Napi::CallbackInfo& info) {
  if (poll_) uv_unref(reinterpret_cast<uv_handle_t*>(&poll_->handedOver));
  return info.Env().Undefined();
}

Napi::Value MonitorWrap::Stats(const Napi::CallbackInfo& info) {
  auto shared = shared_.Lock();
  return StatsToJs(info.Env(), shared->core ? shared->core->stats() : finalStats_,
                   shared->reports.stats(), receiveBuffer_, MirrorOf(*shared));
}

int16_t MonitorWrap::AddrAssignTypeOf(ReaderShared& shared, const ViewedLink& link) {
  // A device as a queued change found it: the type read with that change, if any was.
  if (link.beforeQueued) return link.addrAssignType;
  if (shared.core) return shared.core->AddrAssignTypeOf(link.record.ifindex);
  return link.addrAssignType;
}

// links(): every mirrored link, as the items taken so far tell it (as at close() once closed).
Napi::Value MonitorWrap::Links(const Napi::CallbackInfo& info) {
  auto shared = shared_.Lock();
  const DeliveredView view = ViewOf(*shared);
  JsWriter js(info.Env());
  return Napi::Value(info.Env(),
                     ViewedLinksToJs(js, view.Links(), [this, &shared](const ViewedLink& link) {
                       return AddrAssignTypeOf(*shared, link);
                     }));
}

// getLink(ifindex | name): the mirrored link as the items taken so far tell it, or undefined.
Napi::Value MonitorWrap::GetLink(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto shared = shared_.Lock();
  const std::optional<ViewedLink> link = FindViewedLink(ViewOf(*shared), info[0]);
  if (!link) return env.Undefined();
  JsWriter js(env);
  return Napi::Value(env, MirroredLinkToJs(js, link->record, AddrAssignTypeOf(*shared, *link)));
}

// neighbours(ifindex?): the mirrored neighbour and FDB entries as the items taken so far tell
// them, of one device when given.
Napi::Value MonitorWrap::Neighbours(const Napi::CallbackInfo& info) {
  auto shared = shared_.Lock();
  const DeliveredView view = ViewOf(*shared);
  JsWriter js(info.Env());
  std::optional<int32_t> ifindex;
  if (info[0].IsNumber()) ifindex = info[0].As<Napi::Number>().Int32Value();
  return Napi::Value(info.Env(), NeighbourColumnsToJs(js, view.Neighbours(ifindex)));
}

Napi::Value MonitorWrap::Resyncing(const Napi::CallbackInfo& info) {
  auto shared = shared_.Lock();
  return Napi::Boolean::New(info.Env(), shared->core && shared->core->mirror().resyncing());
}

// flush(): reports the held corrections now, with anything handed over and not yet
// reported (before a close, so that none go unreported).
Napi::Value MonitorWrap::Flush(const Napi::CallbackInfo& info) {
  if (!poll_ || !poll_->reader || delivering_) return info.Env().Undefined();
  poll_->reader->Suspend();
  DeliverHandedOver(true);
  return info.Env().Undefined();
}

Napi::Value MonitorWrap::Close(const Napi::CallbackInfo& info) {
  CloseFromJs();
  return info.Env().Undefined();
}

void MonitorWrap::CloseFromJs() {
  if (closed_) return;
  closed_ = true;
  if (poll_) poll_->reader.reset();  // after the turn it is in
  {
    auto shared = shared_.Lock();
    if (shared->core) {
      finalStats_ = shared->core->stats();
      finalMirror_ = shared->core->ReleaseMirror();
      shared->core = nullptr;
    }
    shared->pending.clear();
    shared->reports.Clear();
  }
  if (poll_) {
    poll_->owner = nullptr;
    BeginClose(poll_);
    poll_ = nullptr;
  }
  if (!delivering_) DestroyAsyncContext();  // else once the callback has returned
  if (started_) Napi::ObjectWrap<MonitorWrap>::Unref();
}

void MonitorWrap::BeginClose(Poll* poll) {
  uv_handle_t* handle = reinterpret_cast<uv_handle_t*>(&poll->handedOver);
  if (uv_is_closing(handle)) return;
  poll->reader.reset();  // no uv_async_send after the close
  uv_close(handle, &MonitorWrap::OnHandleClosed);
}

void MonitorWrap::OnHandleClosed(uv_handle_t* handle) {
  auto* poll = static_cast<Poll*>(handle->data);
  if (poll->owner) poll->owner->poll_ = nullptr;
  if (poll->teardownHook) napi_remove_async_cleanup_hook(poll->teardownHook);
  delete poll;  // closes the socket, now that libuv no longer watches it
}

void MonitorWrap::OnTeardown(napi_async_cleanup_hook_handle, void* data) {
  // The environment is going away (worker exit, process exit): JS may no
  // longer run, so only the reader is stopped and the handle closed;
  // OnHandleClosed ends the hook.
  BeginClose(static_cast<Poll*>(data));
}

ReadThread::Next MonitorWrap::Turn(int64_t arrivalNs) {
  auto shared = shared_.Lock();
  MonitorCore& core = *shared->core;
  std::vector<MonitorItem> items;
  items.swap(shared->pending);
  core.ReadAvailable(kDatagramsPerWake, arrivalNs, &items);
  const ReportQueue::Decision decision =
      shared->reports.Read(std::move(items), core.batchArrivalNs(), SteadyNowNs(), core.failed());
  if (!decision.handOver) return {decision.dueNs, false, false};
  uv_async_send(&poll_->handedOver);
  return {0, decision.pause, core.failed()};
}

void MonitorWrap::DeliverHandedOver(bool suspended) {
  ReportQueue::Taken taken;
  bool failed = false;
  {
    auto shared = shared_.Lock();
    taken = shared->reports.Take(suspended, SteadyNowNs());
    // A read that failed handed its FatalItem over with this: the reader has stopped.
    failed = shared->core != nullptr && shared->core->failed();
  }
  Report(std::move(taken.items), taken.arrivalNs, failed,
         (suspended ? 1 : 0) + (taken.paused ? 1 : 0));
}

void MonitorWrap::ResumeReader(int times) {
  // None once closed (or torn down): the reader is gone.
  for (; times > 0 && poll_ && poll_->reader; --times) poll_->reader->Resume();
}

void MonitorWrap::OnHandedOver(uv_async_t* async) {
  auto* poll = static_cast<Poll*>(async->data);
  if (poll->owner) poll->owner->DeliverHandedOver(false);
}

void MonitorWrap::Report(std::vector<MonitorItem> items, int64_t arrivalNs, bool failed,
                         int resumes) {
  napi_env env = Env();
  Napi::HandleScope scope(Env());
  if (!items.empty()) {
    // Raw Node-API from here on: this runs from libuv, possibly while a
    // worker is being terminated, when nothing may throw.
    JsWriter js(env);
    napi_value batch = ItemsToJs(js, items, netnsLabel_);
    napi_value receiver = nullptr;
    napi_value callback = nullptr;
    const napi_ref self = static_cast<const Napi::Reference<Napi::Object>&>(*this);
    const napi_ref onBatch = onBatch_;
    napi_callback_scope callbackScope = nullptr;
    if (js.ok() && napi_get_reference_value(env, self, &receiver) == napi_ok &&
        napi_get_reference_value(env, onBatch, &callback) == napi_ok &&
        napi_open_callback_scope(env, receiver, asyncContext_, &callbackScope) == napi_ok) {
      delivering_ = true;
      napi_value result = nullptr;
      // The arrival, in ms of the monotonic clock (process.hrtime's): the origin of latencies.
      napi_value arguments[2] = {batch, js.Number(static_cast<double>(arrivalNs) / 1e6)};
      if (napi_call_function(env, receiver, callback, 2, arguments, &result) != napi_ok) {
        ReportCallbackFailure(env);
      }
      delivering_ = false;
      // The listeners have returned: the reader goes on before the promise jobs and ticks the
      // scope's close runs (what awaits an event runs there, and must not hold it up).
      ResumeReader(resumes);
      resumes = 0;
      napi_close_callback_scope(env, callbackScope);
    }
  }
  ResumeReader(resumes);
  if (failed) CloseFromJs();
  if (closed_) DestroyAsyncContext();
}

}  // namespace fg::addon
