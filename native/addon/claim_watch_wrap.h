// JS class `ClaimWatch`: a name claim's socket (native/name_claim.h) watched on
// the environment's loop, reporting how many other guards of the name it
// knows of. Held: the listening socket, each guard that connects (at most
// kMaxPeers kept) and each one's end. Not held: the connection to the holder,
// whose end reports 0. The handles never keep the loop alive; the watch owns
// the descriptors and closes them. Closing is idempotent, and environment
// teardown (a worker exiting) closes the handles through an async cleanup hook.
#pragma once

#include <napi.h>
#include <uv.h>

#include <cstddef>
#include <vector>

namespace fg::addon {

class ClaimWatchWrap : public Napi::ObjectWrap<ClaimWatchWrap> {
 public:
  static Napi::Function Define(Napi::Env env);

  explicit ClaimWatchWrap(const Napi::CallbackInfo& info);
  ~ClaimWatchWrap() override;

 private:
  struct Handles;
  // One watched descriptor: the claim's own socket, or a connected guard's.
  struct Socket {
    uv_poll_t poll;
    int fd = -1;
    Handles* handles = nullptr;
  };
  // Outlives the JS object until libuv has closed every handle.
  struct Handles {
    ClaimWatchWrap* owner = nullptr;
    uv_loop_t* loop = nullptr;
    bool held = false;
    std::vector<Socket*> sockets;  // [0] is the claim's own socket while it is watched
    size_t open = 0;               // handles libuv has not closed yet
    bool closing = false;
    napi_async_cleanup_hook_handle teardownHook = nullptr;
  };

  Napi::Value Close(const Napi::CallbackInfo& info);

  // Watches `fd` from now on (false: libuv cannot; `fd` is left as it was).
  static bool Watch(Handles* handles, int fd, uv_poll_cb onEvent);
  static void Drop(Socket* socket);
  // Closes every handle; the handles go once libuv has closed the last (Free).
  static void CloseAll(Handles* handles);
  static void Free(Handles* handles);
  static void OnListener(uv_poll_t* poll, int status, int events);
  static void OnPeer(uv_poll_t* poll, int status, int events);
  static void OnSocketClosed(uv_handle_t* handle);
  static void OnTeardown(napi_async_cleanup_hook_handle hook, void* data);
  // The others now known, told to JS when it changed.
  static void Changed(Handles* handles);
  void Report(size_t others);
  void CloseFromJs();

  Handles* handles_ = nullptr;
  Napi::FunctionReference onOthers_;
  napi_async_context asyncContext_ = nullptr;
  size_t reported_ = 0;
  bool delivering_ = false;
  bool closed_ = false;
};

}  // namespace fg::addon
