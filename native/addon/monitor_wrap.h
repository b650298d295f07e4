// JS class `Monitor`: a MonitorCore read by a thread of its own (ReadThread),
// so that an armed correction is made the moment the kernel's notification
// arrives, whatever the environment's loop (main thread or worker) is doing.
// Each wake reads a bounded batch; what JS must see is handed to the loop
// (uv_async) in one call, and the thread waits until JS has handled it, so
// that JS queries the mirror as of what it was handed (corrections alone
// need no wait: the mirror is back where it was). A batch of corrections
// already made (see Holdable) is not handed over at once: during a storm those
// are reported together, at most once per report interval, so that the
// kernel's pace of rewrites is not a JS call - nor a loop wake - each.
// Closing is idempotent, and environment teardown (a worker exiting) stops the
// thread and closes the handle through an async cleanup hook.
#pragma once

#include <napi.h>
#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "delivered_view.h"
#include "guarded.h"
#include "monitor_args.h"
#include "monitor_core.h"
#include "read_thread.h"
#include "report_queue.h"

namespace fg::addon {

class MonitorWrap : public Napi::ObjectWrap<MonitorWrap> {
 public:
  static Napi::Function Define(Napi::Env env);

  explicit MonitorWrap(const Napi::CallbackInfo& info);
  ~MonitorWrap() override;

 private:
  // Owns the socket, its reader and the handle that wakes the loop; outlives
  // the JS object until libuv has closed the handle.
  struct Poll {
    uv_async_t handedOver;  // the reader handed a batch over (ReportQueue::Read)
    MonitorWrap* owner = nullptr;
    std::unique_ptr<MonitorCore> core;
    std::unique_ptr<ReadThread> reader;  // stopped before the core goes
    napi_async_cleanup_hook_handle teardownHook = nullptr;
  };

  Napi::Value Start(const Napi::CallbackInfo& info);
  Napi::Value Resync(const Napi::CallbackInfo& info);
  Napi::Value SetFilter(const Napi::CallbackInfo& info);
  Napi::Value Arm(const Napi::CallbackInfo& info);
  Napi::Value Disarm(const Napi::CallbackInfo& info);
  Napi::Value Keep(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);
  Napi::Value RestoreSet(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Links(const Napi::CallbackInfo& info);
  Napi::Value GetLink(const Napi::CallbackInfo& info);
  Napi::Value Neighbours(const Napi::CallbackInfo& info);
  Napi::Value Resyncing(const Napi::CallbackInfo& info);
  Napi::Value Flush(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  // The reader's turn (its thread): reads a batch, then holds it or hands it over.
  ReadThread::Next Turn(int64_t arrivalNs);
  // The loop's side: reports what was handed over (`suspended`: by Flush, with
  // the reader suspended, and the held ones too), then resumes the reader.
  void DeliverHandedOver(bool suspended);
  static void OnHandedOver(uv_async_t* async);
  // Hands `items` to JS: `arrivalNs` is when they were read; `failed`: reading is over.
  // The reader is resumed `resumes` times once the listeners have returned.
  void Report(std::vector<MonitorItem> items, int64_t arrivalNs, bool failed, int resumes);
  void ResumeReader(int times);
  void CloseFromJs();
  void DestroyAsyncContext();
  static void BeginClose(Poll* poll);
  static void OnHandleClosed(uv_handle_t* handle);
  static void OnTeardown(napi_async_cleanup_hook_handle hook, void* data);

  Poll* poll_ = nullptr;
  Napi::FunctionReference onBatch_;
  napi_async_context asyncContext_ = nullptr;
  // What the reader thread and the loop share, reached only under its lock.
  struct ReaderShared {
    MonitorCore* core = nullptr;  // poll_'s while open
    ReportQueue reports;
    std::vector<MonitorItem> pending;  // for the next turn (warnings from opening)
  };
  Guarded<ReaderShared> shared_;
  std::string netnsLabel_;
  bool started_ = false;
  bool delivering_ = false;
  bool closed_ = false;
  int receiveBuffer_ = 0;
  MonitorStats finalStats_;
  // What the mirror held at close(): still read by links() and neighbours().
  StateMirror finalMirror_;
  const StateMirror& MirrorOf(const ReaderShared& shared) const {
    return shared.core ? shared.core->mirror() : finalMirror_;
  }
  // The mirror as the loop has been told it: the items read and not yet taken undone.
  DeliveredView ViewOf(const ReaderShared& shared) const {
    return DeliveredView(MirrorOf(shared), shared.reports.Queued());
  }
  // addr_assign_type of a device in the view (read lazily while open).
  int16_t AddrAssignTypeOf(ReaderShared& shared, const ViewedLink& link);
};

}  // namespace fg::addon
