// JS class `ScriptedMonitor`: the real MonitorCore (mirror, restore sets,
// allowance, corrections) on the scripted side of its seam (scripted_io.h),
// for the guard's policy tests: JS feeds it the bytes a kernel would send,
// answers its dump requests, and is its kernel when it writes (`script`). It
// takes what the real Monitor takes and hands batches to the same onBatch,
// synchronously, from read(): no thread, no loop handle, no privileges.
#pragma once

#include <napi.h>

#include <memory>

#include "monitor_core.h"
#include "scripted_io.h"

namespace fg::addon {

class ScriptedMonitorWrap : public Napi::ObjectWrap<ScriptedMonitorWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ScriptedMonitorWrap(const Napi::CallbackInfo& info);

 private:
  // The real Monitor's methods.
  Napi::Value Start(const Napi::CallbackInfo& info);
  Napi::Value Resync(const Napi::CallbackInfo& info);
  Napi::Value SetFilter(const Napi::CallbackInfo& info);
  Napi::Value Arm(const Napi::CallbackInfo& info);
  Napi::Value Disarm(const Napi::CallbackInfo& info);
  Napi::Value Keep(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);
  Napi::Value RestoreSet(const Napi::CallbackInfo& info);
  Napi::Value Nothing(const Napi::CallbackInfo& info);  // ref, unref, flush
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Links(const Napi::CallbackInfo& info);
  Napi::Value GetLink(const Napi::CallbackInfo& info);
  Napi::Value Neighbours(const Napi::CallbackInfo& info);
  Napi::Value Resyncing(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  // The script's: feed(datagram), overrun(), read(), armed(ifindex).
  Napi::Value Feed(const Napi::CallbackInfo& info);
  Napi::Value Overrun(const Napi::CallbackInfo& info);
  Napi::Value Read(const Napi::CallbackInfo& info);
  Napi::Value Armed(const Napi::CallbackInfo& info);

  WriterScript ScriptFrom(Napi::Env env);

  ScriptedSource* source_ = nullptr;  // owned by core_
  std::unique_ptr<MonitorCore> core_;
  Napi::ObjectReference script_;
  Napi::FunctionReference onBatch_;
  Napi::FunctionReference clock_;
  bool corrections_ = true;
  bool closed_ = false;
};

}  // namespace fg::addon
