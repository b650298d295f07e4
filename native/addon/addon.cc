// Module entry: a context-aware addon (one instance per Node environment, so
// it loads in worker_threads) exposing the Monitor and Control classes, and
// the pure parser and state mirror for tests.
#include <linux/fs.h>
#include <napi.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "claim_watch_wrap.h"
#include "control_wrap.h"
#include "convert.h"
#include "errors.h"
#include "monitor_wrap.h"
#include "name_claim.h"
#include "netlink_parser.h"
#include "netlink_socket.h"
#include "probe_wrap.h"
#include "scripted_monitor_wrap.h"

namespace fg::addon {

class FlannelGuardAddon : public Napi::Addon<FlannelGuardAddon> {
 public:
  FlannelGuardAddon(Napi::Env env, Napi::Object exports) {
    DefineAddon(exports, {
                             InstanceValue("Monitor", MonitorWrap::Define(env)),
                             InstanceValue("Control", ControlWrap::Define(env)),
                             InstanceValue("ScriptedMonitor", ScriptedMonitorWrap::Define(env)),
                             InstanceValue("ClaimWatch", ClaimWatchWrap::Define(env)),
                             InstanceMethod<&FlannelGuardAddon::ParseDatagram>("parseDatagram"),
                             InstanceMethod<&FlannelGuardAddon::NetnsInode>("netnsInode"),
                             InstanceMethod<&FlannelGuardAddon::WriteNoWait>("writeNoWait"),
                             InstanceMethod<&FlannelGuardAddon::ProbePaths>("probePaths"),
                             InstanceMethod<&FlannelGuardAddon::SampleChecksums>("sampleChecksums"),
                             InstanceMethod<&FlannelGuardAddon::ClaimName>("claimName"),
                             InstanceMethod<&FlannelGuardAddon::PeerCredentials>("peerCredentials"),
                         });
  }

 private:
  // parseDatagram(bytes: Buffer) -> { messages, error? }: the parser the
  // monitor uses, exposed so fixtures can be checked from JS.
  Napi::Value ParseDatagram(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsBuffer()) throw Napi::TypeError::New(env, "parseDatagram(bytes: Buffer)");
    auto bytes = info[0].As<Napi::Buffer<uint8_t>>();
    const netlink::ParsedDatagram parsed = netlink::ParseDatagram(bytes.Data(), bytes.Length());
    JsWriter js(env);
    napi_value result = js.Object();
    js.Set(result, "messages", ListToJs(js, parsed.messages, MessageToJs));
    if (parsed.error) {
      napi_value error = js.Object();
      js.Set(error, "offset", static_cast<uint64_t>(parsed.error->offset));
      js.Set(error, "reason", parsed.error->reason);
      js.Set(result, "error", error);
    }
    return Finish(js, result);
  }

  // writeNoWait(fd, bytes: Buffer) -> bytes written, or a negative errno: a
  // write that never blocks, whatever the file's O_NONBLOCK flag (RWF_NOWAIT:
  // EAGAIN where it would wait). stdout is shared with the process that gave
  // it, so its flags are not ours to change. -EOPNOTSUPP where the kernel
  // cannot (pipes on older kernels, some file systems): the caller falls back.
  // The system call itself: glibc has pwritev2 from 2.26, musl only from 1.2.5.
  Napi::Value WriteNoWait(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsNumber() || !info[1].IsBuffer()) {
      throw Napi::TypeError::New(env, "writeNoWait(fd: number, bytes: Buffer)");
    }
    auto bytes = info[1].As<Napi::Buffer<uint8_t>>();
    iovec chunk{bytes.Data(), bytes.Length()};
    ssize_t written;
    do {
      // Offset -1 (the file's own position) as the kernel's low and high halves.
      written = syscall(SYS_pwritev2, info[0].As<Napi::Number>().Int32Value(), &chunk, 1, -1L, -1L,
                        RWF_NOWAIT);
    } while (written < 0 && errno == EINTR);
    return Napi::Number::New(env, written < 0 ? -errno : static_cast<double>(written));
  }

  Napi::Value ProbePaths(const Napi::CallbackInfo& info) { return addon::ProbePaths(info); }
  Napi::Value SampleChecksums(const Napi::CallbackInfo& info) {
    return addon::SampleChecksums(info);
  }

  // claimName(name: string, netns?: string, netnsLabel?: string) -> { fd, held }: see
  // name_claim.h. The descriptor is the caller's: a ClaimWatch takes it, or it is closed.
  Napi::Value ClaimName(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsString()) {
      throw Napi::TypeError::New(env, "claimName(name: string, netns?: string, label?: string)");
    }
    NetnsTarget target;
    if (info[1].IsString()) target.path = info[1].As<Napi::String>().Utf8Value();
    const std::string label = info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : "";
    Result<NameClaim> claim = fg::ClaimName(target, info[0].As<Napi::String>().Utf8Value());
    if (!claim.ok()) ThrowSysError(env, claim.error(), label);
    Napi::Object result = Napi::Object::New(env);
    result.Set("fd", claim.value().fd);
    result.Set("held", claim.value().held);
    return result;
  }

  // peerCredentials(fd) -> { pid, uid, gid }: who is at the other end of a connected unix
  // socket, as the kernel recorded it at connect() (SO_PEERCRED): Node's net.Socket has no way.
  Napi::Value PeerCredentials(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsNumber()) throw Napi::TypeError::New(env, "peerCredentials(fd: number)");
    ucred peer{};
    socklen_t length = sizeof(peer);
    if (getsockopt(info[0].As<Napi::Number>().Int32Value(), SOL_SOCKET, SO_PEERCRED, &peer,
                   &length) != 0) {
      ThrowSysError(env, SysError{errno, "getsockopt"}, "");
    }
    Napi::Object result = Napi::Object::New(env);
    result.Set("pid", static_cast<double>(peer.pid));
    result.Set("uid", static_cast<double>(peer.uid));
    result.Set("gid", static_cast<double>(peer.gid));
    return result;
  }

  // netnsInode(path?: string) -> number: the namespace's inode (own when omitted).
  Napi::Value NetnsInode(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    NetnsTarget target;
    if (info[0].IsString()) target.path = info[0].As<Napi::String>().Utf8Value();
    Result<uint64_t> inode = fg::NetnsInode(target);
    if (!inode.ok()) ThrowSysError(env, inode.error(), target.path);
    return Napi::Number::New(env, static_cast<double>(inode.value()));
  }
};

}  // namespace fg::addon

using fg::addon::FlannelGuardAddon;
NODE_API_ADDON(FlannelGuardAddon)
