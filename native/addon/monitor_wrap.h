// JS class `Monitor`: a MonitorCore polled on the environment's own libuv loop
// (main thread or worker). Each wake reads a bounded batch and hands it to JS
// in one call. Closing is idempotent, and environment teardown (a worker
// exiting) closes the handle through an async cleanup hook.
#pragma once

#include <napi.h>
#include <uv.h>

#include <memory>
#include <string>
#include <vector>

#include "monitor_core.h"

namespace fg::addon {

class MonitorWrap : public Napi::ObjectWrap<MonitorWrap> {
 public:
  static Napi::Function Define(Napi::Env env);

  explicit MonitorWrap(const Napi::CallbackInfo& info);
  ~MonitorWrap() override;

 private:
  // Owns the poll handle and the socket; outlives the JS object until libuv
  // has closed the handle.
  struct Poll {
    uv_poll_t handle;
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
  Napi::Value Close(const Napi::CallbackInfo& info);

  void Deliver();
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
