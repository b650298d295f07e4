// Error values shared by the pure native code (parser, ethtool, sockets).
// Nothing here depends on Node, so these types can be used from unit tests
// and fuzzers as well as from the addon.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace fg {

// A failed system call, described the way Node core describes one:
// the errno, the call that failed, and what it was applied to.
struct SysError {
  SysError() = default;
  SysError(int errnumber, std::string call, std::string why = {})
      : errnum(errnumber), syscall(std::move(call)), detail(std::move(why)) {}

  int errnum = 0;         // positive errno value (EPERM, ENODEV, ...)
  std::string syscall;    // "ioctl(ETHTOOL_SFEATURES)", "setlink", "setns"
  std::string interface;  // interface name when known, else empty
  int ifindex = 0;        // interface index when known, else 0
  std::string detail;     // our own explanation, when there is one
  std::string extack;     // the kernel's extended-ACK message, when it sent one
};

// The errno's symbolic name ("EPERM"), as Node reports it in `error.code`;
// "E<number>" for a number Linux does not name (errno_name.cc).
std::string ErrnoName(int errnum);

// Either a value or the SysError that prevented it.
template <typename T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}         // NOLINT(runtime/explicit)
  Result(SysError error) : state_(std::move(error)) {}  // NOLINT(runtime/explicit)

  bool ok() const { return std::holds_alternative<T>(state_); }
  const T& value() const { return std::get<T>(state_); }
  T& value() { return std::get<T>(state_); }
  const SysError& error() const { return std::get<SysError>(state_); }

 private:
  std::variant<T, SysError> state_;
};

// For operations that produce nothing but can fail.
struct Unit {};

}  // namespace fg
