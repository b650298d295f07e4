#include "errors.h"

#include <cerrno>
#include <cstring>

namespace fg::addon {
namespace {

// What an EPERM from `syscall` means in practice; null for calls that need no capability.
const char* MissingCapability(const std::string& syscall) {
  if (syscall == "setns") return "CAP_SYS_ADMIN";
  // The path probe's raw ICMP socket, the checksum sample's packet socket, and binding any
  // socket to a device.
  if (syscall == "socket(SOCK_RAW)" || syscall == "socket(AF_PACKET)" ||
      syscall == "setsockopt(SO_BINDTODEVICE)") {
    return "CAP_NET_RAW";
  }
  if (syscall == "getlink" || syscall == "getneigh" || syscall.rfind("ioctl(ETHTOOL_G", 0) == 0) {
    return nullptr;
  }
  return "CAP_NET_ADMIN";
}

}  // namespace

napi_value SysErrorToJs(JsWriter& js, const SysError& error, const std::string& netnsLabel) {
  const std::string code = ErrnoName(error.errnum);
  std::string message = code + ": " + std::strerror(error.errnum) + ", " + error.syscall;
  if (!error.interface.empty()) {
    message += " '" + error.interface + "'";
  } else if (error.ifindex > 0) {
    message += " ifindex " + std::to_string(error.ifindex);
  }
  if (!netnsLabel.empty()) message += " in netns " + netnsLabel;
  if (!error.extack.empty()) message += ": " + error.extack;
  if (!error.detail.empty()) message += " (" + error.detail + ")";
  const char* capability = error.errnum == EPERM ? MissingCapability(error.syscall) : nullptr;
  if (capability) {
    message += std::string(" - ") + capability +
               (error.syscall == "setns" ? " is required to enter another network namespace"
                                         : " is required");
  }

  napi_value object = nullptr;
  napi_value text = js.String(message);
  if (!js.ok() || napi_create_error(js.env(), nullptr, text, &object) != napi_ok) return nullptr;
  js.Set(object, "code", code);
  js.Set(object, "errno", -error.errnum);
  js.Set(object, "syscall", error.syscall);
  if (!error.interface.empty()) js.Set(object, "interface", error.interface);
  if (error.ifindex > 0) js.Set(object, "ifindex", error.ifindex);
  if (!netnsLabel.empty()) js.Set(object, "netns", netnsLabel);
  if (!error.extack.empty()) js.Set(object, "extack", error.extack);
  if (!error.detail.empty()) js.Set(object, "detail", error.detail);
  if (capability) js.Set(object, "capability", capability);
  return js.ok() ? object : nullptr;
}

void ThrowSysError(Napi::Env env, const SysError& error, const std::string& netnsLabel) {
  JsWriter js(env);
  napi_value object = SysErrorToJs(js, error, netnsLabel);
  if (!object) throw Napi::Error::New(env);
  throw Napi::Error(env, object);
}

std::string NetnsLabelForInode(uint64_t inode) { return "net:[" + std::to_string(inode) + "]"; }

void ReportCallbackFailure(napi_env env) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) != napi_ok || !pending) return;
  napi_value exception = nullptr;
  if (napi_get_and_clear_last_exception(env, &exception) == napi_ok) {
    napi_fatal_exception(env, exception);
  }
}

}  // namespace fg::addon
