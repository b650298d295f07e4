// JS class `Monitor`: a MonitorCore polled on the environment's own libuv loop
// (main thread or worker). Each wake reads a bounded batch and hands it to JS
// in one call - except a batch of corrections already made (see Holdable):
// during a storm those are reported together, at most once per report
// interval, so that the kernel's pace of rewrites is not a JS call each.
// Closing is idempotent, and environment teardown (a worker exiting) closes
// the handles through an async cleanup hook.
#pragma once

#include <napi.h>
#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "monitor_core.h"

namespace fg::addon {

struct ReportStats {
  uint64_t reports = 0;          // batches handed to JS
  uint64_t heldCorrections = 0;  // corrections whose report waited for a later batch
};

class MonitorWrap : public Napi::ObjectWrap<MonitorWrap> {
 public:
  static Napi::Function Define(Napi::Env env);

  explicit MonitorWrap(const Napi::CallbackInfo& info);
  ~MonitorWrap() override;

 private:
  // Owns the poll and timer handles and the socket; outlives the JS object
  // until libuv has closed both handles.
  struct Poll {
    uv_poll_t handle;
    uv_timer_t reportTimer;  // a held report is due
    // Around the loop's own poll: the arrival watch sleeps while the loop does
    // (see ArrivalWatch::Pause). Never keep the loop alive.
    uv_prepare_t beforeSleep;
    uv_check_t afterSleep;
    int openHandles = 4;
    MonitorWrap* owner = nullptr;
    std::unique_ptr<MonitorCore> core;
    napi_async_cleanup_hook_handle teardownHook = nullptr;
  };

  Napi::Value Start(const Napi::CallbackInfo& info);
  Napi::Value Resync(const Napi::CallbackInfo& info);
  Napi::Value SetFilter(const Napi::CallbackInfo& info);
  Napi::Value Arm(const Napi::CallbackInfo& info);
  Napi::Value Disarm(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Links(const Napi::CallbackInfo& info);
  Napi::Value GetLink(const Napi::CallbackInfo& info);
  Napi::Value Neighbours(const Napi::CallbackInfo& info);
  Napi::Value Resyncing(const Napi::CallbackInfo& info);
  Napi::Value Flush(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  void Deliver();
  // Hands `items` to JS, after the held ones: `arrivalNs` is when they were read.
  void Report(std::vector<MonitorItem> items, int64_t arrivalNs);
  // Keeps a batch of corrections for the next report; true when it was kept.
  bool Hold(std::vector<MonitorItem>& items);
  static void OnReportDue(uv_timer_t* timer);
  static void OnBeforeSleep(uv_prepare_t* prepare);
  static void OnAfterSleep(uv_check_t* check);
  void CloseFromJs();
  void DestroyAsyncContext();
  static void BeginClose(Poll* poll);
  static void OnReadable(uv_poll_t* handle, int status, int events);
  static void OnHandleClosed(uv_handle_t* handle);
  static void OnTeardown(napi_async_cleanup_hook_handle hook, void* data);

  Poll* poll_ = nullptr;
  Napi::FunctionReference onBatch_;
  napi_async_context asyncContext_ = nullptr;
  std::vector<MonitorItem> pending_;
  // Corrections made since the last report, waiting for the next (see Hold).
  std::vector<MonitorItem> held_;
  int64_t reportIntervalNs_ = 0;  // 0: every batch is reported at once
  int64_t lastReportNs_ = 0;
  ReportStats reportStats_;
  std::string netnsLabel_;
  bool started_ = false;
  bool delivering_ = false;
  bool closed_ = false;
  int receiveBuffer_ = 0;
  MonitorStats finalStats_;
  // What the mirror held at close(): still read by links() and neighbours().
  StateMirror finalMirror_;
  const StateMirror& mirror() const { return poll_ ? poll_->core->mirror() : finalMirror_; }
  // addr_assign_type of a mirrored device (read lazily while open).
  int16_t AddrAssignTypeOf(int32_t ifindex);
};

}  // namespace fg::addon
