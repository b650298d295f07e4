// JS class `Mirror`: the monitor's StateMirror on its own, fed datagrams
// instead of a socket. The guard's policy tests drive it with the messages a
// scripted kernel sends (test/support/scripted-monitor.ts), so the rules they
// see are the product's, not a copy (the seam at the message boundary).
#pragma once

#include <napi.h>

#include "state_mirror.h"

namespace fg::addon {

class MirrorWrap : public Napi::ObjectWrap<MirrorWrap> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit MirrorWrap(const Napi::CallbackInfo& info);

 private:
  Napi::Value Apply(const Napi::CallbackInfo& info);
  Napi::Value BeginResync(const Napi::CallbackInfo& info);
  Napi::Value EndResync(const Napi::CallbackInfo& info);
  Napi::Value NoteCorrection(const Napi::CallbackInfo& info);
  Napi::Value Links(const Napi::CallbackInfo& info);
  Napi::Value GetLink(const Napi::CallbackInfo& info);
  Napi::Value Neighbours(const Napi::CallbackInfo& info);

  StateMirror mirror_;
};

}  // namespace fg::addon
