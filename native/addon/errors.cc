#include "errors.h"

#include <cerrno>
#include <cstring>

namespace fg::addon {
namespace {

// What an EPERM from `syscall` means in practice.
const char* PermissionHint(const std::string& syscall) {
  if (syscall == "setns") return "CAP_SYS_ADMIN is required to enter another network namespace";
  if (syscall == "getlink" || syscall == "getneigh" || syscall.rfind("ioctl(ETHTOOL_G", 0) == 0) {
    return nullptr;
  }
  return "CAP_NET_ADMIN is required";
}

}  // namespace

Napi::Error MakeSysError(Napi::Env env, const SysError& error, const std::string& netnsLabel) {
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
  const char* hint = error.errnum == EPERM ? PermissionHint(error.syscall) : nullptr;
  if (hint) message += std::string(" - ") + hint;

  Napi::Error jsError = Napi::Error::New(env, message);
  Napi::Object object = jsError.Value();
  object.Set("code", code);
  object.Set("errno", -error.errnum);
  object.Set("syscall", error.syscall);
  if (!error.interface.empty()) object.Set("interface", error.interface);
  if (error.ifindex > 0) object.Set("ifindex", error.ifindex);
  if (!netnsLabel.empty()) object.Set("netns", netnsLabel);
  if (!error.extack.empty()) object.Set("extack", error.extack);
  if (!error.detail.empty()) object.Set("detail", error.detail);
  if (hint) object.Set("capability", error.syscall == "setns" ? "CAP_SYS_ADMIN" : "CAP_NET_ADMIN");
  return jsError;
}

}  // namespace fg::addon
