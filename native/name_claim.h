// A claim on a name inside a network namespace, so that two guards of one
// device learn of each other: an abstract unix socket bound there. The kernel
// scopes abstract names to the namespace and frees one when its holder's last
// descriptor closes (also on SIGKILL), whatever the two processes' mounts,
// PID namespaces or state directories.
#pragma once

#include <string>

#include "netlink_socket.h"
#include "result.h"

namespace fg {

struct NameClaim {
  // held: a listening socket bound to the name (each other guard connects to
  // it and stays connected while it runs). Not held: a socket connected to
  // the holder (it ends when the holder goes), or -1 when the holder's queue
  // of connections is full.
  int fd = -1;
  bool held = false;
};

// The abstract address of `name` ("flannel-guard/..."): at most 107 bytes.
bool ValidClaimName(const std::string& name);

// Claims `name` inside `target` (non-blocking, close-on-exec sockets): binds it
// when no one holds it, else connects to whoever does. Fails on an invalid name
// or a namespace that cannot be entered.
Result<NameClaim> ClaimName(const NetnsTarget& target, const std::string& name);

}  // namespace fg
