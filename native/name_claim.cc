#include "name_claim.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace fg {

namespace {

// A holder keeps this many other guards' connections waiting to be accepted.
constexpr int kBacklog = 16;

// Reads of what a peer sent (nothing, from a guard) per wake, and their size.
constexpr int kDrainReads = 4;
constexpr size_t kDrainBytes = 256;

socklen_t AbstractAddress(const std::string& name, sockaddr_un* address) {
  *address = {};
  address->sun_family = AF_UNIX;
  // sun_path[0] stays 0: the abstract namespace; the name is not 0-terminated.
  name.copy(address->sun_path + 1, name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

int StreamSocket() { return socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

// One attempt: bound and listening, connected to the holder, or an error.
Result<NameClaim> TryClaim(const sockaddr_un& address, socklen_t length) {
  const int listener = StreamSocket();
  if (listener < 0) return SysError(errno, "socket");
  if (bind(listener, reinterpret_cast<const sockaddr*>(&address), length) == 0) {
    if (listen(listener, kBacklog) != 0) {
      const int error = errno;
      close(listener);
      return SysError(error, "listen");
    }
    return NameClaim{listener, true};
  }
  const int bindError = errno;
  close(listener);
  if (bindError != EADDRINUSE) return SysError(bindError, "bind");
  const int peer = StreamSocket();
  if (peer < 0) return SysError(errno, "socket");
  if (connect(peer, reinterpret_cast<const sockaddr*>(&address), length) == 0) {
    return NameClaim{peer, false};
  }
  const int connectError = errno;
  close(peer);
  // The holder's queue is full: held by another all the same.
  if (connectError == EAGAIN) return NameClaim{-1, false};
  return SysError(connectError, "connect");
}

}  // namespace

bool ValidClaimName(const std::string& name) {
  return !name.empty() && name.size() < sizeof(sockaddr_un::sun_path) &&
         name.find('\0') == std::string::npos;
}

Result<NameClaim> ClaimName(const NetnsTarget& target, const std::string& name) {
  if (!ValidClaimName(name)) return SysError(EINVAL, "bind", "invalid claim name");
  sockaddr_un address{};
  const socklen_t length = AbstractAddress(name, &address);
  Result<NameClaim> claim = SysError(EINVAL, "bind");
  Result<Unit> entered = RunInNetns(target, [&] {
    claim = TryClaim(address, length);
    // The holder went between our bind and connect: the name is free now.
    if (!claim.ok() && claim.error().errnum == ECONNREFUSED) claim = TryClaim(address, length);
  });
  if (!entered.ok()) return entered.error();
  return claim;
}

bool IsClaimSocket(int fd, bool held) {
  const auto option = [fd](int name) {
    int value = -1;
    socklen_t length = sizeof(value);
    return getsockopt(fd, SOL_SOCKET, name, &value, &length) == 0 ? value : -1;
  };
  return option(SO_DOMAIN) == AF_UNIX && option(SO_TYPE) == SOCK_STREAM &&
         option(SO_ACCEPTCONN) == (held ? 1 : 0);
}

int AcceptClaimPeer(int listener) {
  int peer;
  do {
    peer = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  } while (peer < 0 && errno == EINTR);
  return peer;
}

bool ClaimPeerEnded(int fd) {
  char sink[kDrainBytes];
  for (int read = 0; read < kDrainReads; ++read) {
    const ssize_t got = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (got > 0) continue;
    if (got == 0) return true;
    if (errno == EINTR) continue;
    return errno != EAGAIN && errno != EWOULDBLOCK;
  }
  return false;
}

}  // namespace fg
