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

// Whether `fd` is what a claim gave: a unix stream socket, listening when
// `held`, else not (a watch takes no other descriptor, and closes it at the end).
bool IsClaimSocket(int fd, bool held);

// The next guard waiting on a held name's `listener` (a non-blocking,
// close-on-exec socket), or -1 with errno set: EAGAIN when none waits.
int AcceptClaimPeer(int listener);

// Whether the other end of a claim connection `fd` has gone: end of stream, a
// reset, or any error but "nothing yet". Guards send nothing; whatever came is
// read and dropped, in a bounded number of reads (the rest wakes the watch again).
bool ClaimPeerEnded(int fd);

}  // namespace fg
