#include "claim_watch_wrap.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "errors.h"
#include "name_claim.h"

namespace fg::addon {
namespace {

// Guards a holder keeps connected: those of one device are two or three, anything past is
// noise (closed at once, as net.Server's maxConnections does).
constexpr size_t kMaxPeers = 64;

size_t Others(size_t sockets, bool held) {
  // Held: the listener and each connected guard. Not held: the connection to the holder.
  return held ? (sockets > 0 ? sockets - 1 : 0) : sockets;
}

}  // namespace

Napi::Function ClaimWatchWrap::Define(Napi::Env env) {
  return DefineClass(env, "ClaimWatch", {InstanceMethod<&ClaimWatchWrap::Close>("close")});
}

// new ClaimWatch(fd, held, onOthers(others)): takes `fd` (claimName's) once constructed.
ClaimWatchWrap::ClaimWatchWrap(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<ClaimWatchWrap>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsBoolean() || !info[2].IsFunction()) {
    throw Napi::TypeError::New(env, "ClaimWatch(fd: number, held: boolean, onOthers)");
  }
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const bool held = info[1].As<Napi::Boolean>().Value();
  if (!IsClaimSocket(fd, held)) {
    ThrowSysError(env,
                  SysError{EINVAL, "getsockopt",
                           held ? "not a listening claim socket" : "not a connected claim socket"},
                  "");
  }
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) {
    throw Napi::Error::New(env, "no event loop for this environment");
  }
  napi_value resourceName = Napi::String::New(env, "flannel-guard:ClaimWatch");
  if (napi_async_init(env, info.This(), resourceName, &asyncContext_) != napi_ok) {
    throw Napi::Error::New(env);
  }
  onOthers_ = Napi::Persistent(info[2].As<Napi::Function>());
  auto* handles = new Handles();
  handles->owner = this;
  handles->loop = loop;
  handles->held = held;
  // Until it is watched the descriptor stays the caller's (it closes it on a throw).
  if (!Watch(handles, fd, held ? &ClaimWatchWrap::OnListener : &ClaimWatchWrap::OnPeer)) {
    delete handles;
    napi_async_destroy(env, asyncContext_);
    asyncContext_ = nullptr;
    throw Napi::Error::New(env, "uv_poll_init: cannot watch the claim's socket");
  }
  handles_ = handles;
  reported_ = Others(handles->sockets.size(), held);
  napi_add_async_cleanup_hook(env, &ClaimWatchWrap::OnTeardown, handles, &handles->teardownHook);
  // Kept from collection while it watches: close() lets it go.
  Napi::ObjectWrap<ClaimWatchWrap>::Ref();
}

ClaimWatchWrap::~ClaimWatchWrap() {
  if (handles_) {
    handles_->owner = nullptr;
    CloseAll(handles_);
  }
  if (asyncContext_) napi_async_destroy(Env(), asyncContext_);
}

Napi::Value ClaimWatchWrap::Close(const Napi::CallbackInfo& info) {
  CloseFromJs();
  return info.Env().Undefined();
}

void ClaimWatchWrap::CloseFromJs() {
  if (closed_) return;
  closed_ = true;
  if (handles_) {
    handles_->owner = nullptr;
    CloseAll(handles_);
    handles_ = nullptr;
  }
  if (!delivering_ && asyncContext_) {  // else once the callback has returned
    napi_async_destroy(Env(), asyncContext_);
    asyncContext_ = nullptr;
  }
  Napi::ObjectWrap<ClaimWatchWrap>::Unref();
}

bool ClaimWatchWrap::Watch(Handles* handles, int fd, uv_poll_cb onEvent) {
  auto* socket = new Socket();
  socket->fd = fd;
  socket->handles = handles;
  socket->poll.data = socket;
  if (uv_poll_init(handles->loop, &socket->poll, fd) != 0) {
    delete socket;
    return false;
  }
  ++handles->open;
  handles->sockets.push_back(socket);
  uv_unref(reinterpret_cast<uv_handle_t*>(&socket->poll));
  // UV_DISCONNECT: the peer's end wakes the watch even with its data unread.
  uv_poll_start(&socket->poll, UV_READABLE | UV_DISCONNECT, onEvent);
  return true;
}

void ClaimWatchWrap::Drop(Socket* socket) {
  std::vector<Socket*>& sockets = socket->handles->sockets;
  sockets.erase(std::remove(sockets.begin(), sockets.end(), socket), sockets.end());
  uv_close(reinterpret_cast<uv_handle_t*>(&socket->poll), &ClaimWatchWrap::OnSocketClosed);
}

void ClaimWatchWrap::CloseAll(Handles* handles) {
  handles->closing = true;
  while (!handles->sockets.empty()) Drop(handles->sockets.back());
  if (handles->open == 0) Free(handles);
}

void ClaimWatchWrap::Free(Handles* handles) {
  if (handles->teardownHook) napi_remove_async_cleanup_hook(handles->teardownHook);
  delete handles;
}

void ClaimWatchWrap::OnSocketClosed(uv_handle_t* handle) {
  auto* socket = static_cast<Socket*>(handle->data);
  Handles* handles = socket->handles;
  close(socket->fd);  // libuv no longer watches it
  delete socket;
  // Closing: its owner has let it go already (close(), collection or teardown).
  if (--handles->open == 0 && handles->closing) Free(handles);
}

void ClaimWatchWrap::OnTeardown(napi_async_cleanup_hook_handle, void* data) {
  // The environment is going away: JS may no longer run; OnSocketClosed ends the hook.
  auto* handles = static_cast<Handles*>(data);
  if (handles->owner) handles->owner->handles_ = nullptr;
  handles->owner = nullptr;
  CloseAll(handles);
}

void ClaimWatchWrap::OnListener(uv_poll_t* poll, int, int) {
  const auto* listener = static_cast<Socket*>(poll->data);
  Handles* handles = listener->handles;
  // Bounded per wake: what is left in the queue wakes the watch again.
  for (size_t accepted = 0; accepted < kMaxPeers; ++accepted) {
    const int peer = AcceptClaimPeer(listener->fd);
    if (peer < 0) {
      // Out of descriptors or memory: the queue would wake the loop at once, again and
      // again. The name stays held; guards that come later are not counted.
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED) uv_poll_stop(poll);
      break;
    }
    if (handles->sockets.size() > kMaxPeers) {
      close(peer);
    } else {
      if (!Watch(handles, peer, &ClaimWatchWrap::OnPeer)) close(peer);
    }
  }
  Changed(handles);
}

void ClaimWatchWrap::OnPeer(uv_poll_t* poll, int status, int) {
  auto* socket = static_cast<Socket*>(poll->data);
  Handles* handles = socket->handles;
  if (status < 0 || ClaimPeerEnded(socket->fd)) {
    Drop(socket);
    Changed(handles);
  }
}

void ClaimWatchWrap::Changed(Handles* handles) {
  const size_t others = Others(handles->sockets.size(), handles->held);
  if (handles->owner && others != handles->owner->reported_) handles->owner->Report(others);
}

void ClaimWatchWrap::Report(size_t others) {
  reported_ = others;
  // Raw Node-API from here on: this runs from libuv, possibly while a worker
  // is being terminated, when nothing may throw.
  napi_env env = Env();
  Napi::HandleScope scope(Env());
  napi_value receiver = nullptr;
  napi_value callback = nullptr;
  napi_value count = nullptr;
  napi_callback_scope callbackScope = nullptr;
  const napi_ref self = static_cast<const Napi::Reference<Napi::Object>&>(*this);
  if (napi_get_reference_value(env, self, &receiver) != napi_ok ||
      napi_get_reference_value(env, onOthers_, &callback) != napi_ok ||
      napi_create_uint32(env, static_cast<uint32_t>(others), &count) != napi_ok ||
      napi_open_callback_scope(env, receiver, asyncContext_, &callbackScope) != napi_ok) {
    return;
  }
  delivering_ = true;
  napi_value result = nullptr;
  if (napi_call_function(env, receiver, callback, 1, &count, &result) != napi_ok) {
    ReportCallbackFailure(env);
  }
  delivering_ = false;
  napi_close_callback_scope(env, callbackScope);
  if (closed_ && asyncContext_) {
    napi_async_destroy(env, asyncContext_);
    asyncContext_ = nullptr;
  }
}

}  // namespace fg::addon
