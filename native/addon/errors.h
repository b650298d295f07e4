// JS errors in Node core's shape: `code` ('EPERM'), negative `errno`,
// `syscall`, plus the interface, the network namespace and the kernel's
// extended-ACK text; EPERM names the capability that is missing.
#pragma once

#include <napi.h>

#include <string>

#include "js_writer.h"
#include "result.h"

namespace fg::addon {

// The Error object (null when the environment can no longer run JS).
napi_value SysErrorToJs(JsWriter& js, const SysError& error, const std::string& netnsLabel);

// For calls made from JS: throws the error as a Napi::Error.
[[noreturn]] void ThrowSysError(Napi::Env env, const SysError& error,
                                const std::string& netnsLabel);

// After a call into JS from libuv failed: a listener threw (reported as the
// application's uncaught exception, as for any event source), or the
// environment is shutting down (nothing can be reported, nothing must throw).
void ReportCallbackFailure(napi_env env);

// How errors name a namespace that was not given a name: "net:[INODE]", as /proc shows it.
std::string NetnsLabelForInode(uint64_t inode);

}  // namespace fg::addon
