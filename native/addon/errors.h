// JS errors in Node core's shape: `code` ('EPERM'), negative `errno`,
// `syscall`, plus the interface, the network namespace and the kernel's
// extended-ACK text; EPERM names the capability that is missing.
#pragma once

#include <napi.h>

#include <string>

#include "result.h"

namespace fg::addon {

Napi::Error MakeSysError(Napi::Env env, const SysError& error, const std::string& netnsLabel);

}  // namespace fg::addon
