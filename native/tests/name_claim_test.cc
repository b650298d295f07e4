// Claims on a name: one holder, the others connected to it, each learning of
// the other's going. Run in the test process's own namespace under names of
// its own (the pid), so nothing else's names are touched.
#include "name_claim.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "test_harness.h"

namespace {

using fg::ClaimName;
using fg::NameClaim;
using fg::NetnsTarget;

std::string UniqueName(const char* what) {
  return "flannel-guard-test/" + std::to_string(getpid()) + "/" + what;
}

NameClaim Claim(const std::string& name) {
  auto claim = ClaimName(NetnsTarget{}, name);
  EXPECT_TRUE(claim.ok());
  return claim.value();
}

// Whether the peer of `fd` has gone: end of stream, or a reset (a holder that
// closes before accepting resets the connections waiting in its queue).
bool PeerGone(int fd) {
  char byte = 0;
  const ssize_t got = recv(fd, &byte, 1, MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

}  // namespace

TEST_CASE("name claim: the first holds it, the next connects, and each learns of the other") {
  const std::string name = UniqueName("pair");
  const NameClaim first = Claim(name);
  EXPECT_TRUE(first.held);
  const NameClaim second = Claim(name);
  EXPECT_TRUE(!second.held);
  EXPECT_TRUE(second.fd >= 0);
  const int accepted = accept4(first.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  EXPECT_TRUE(accepted >= 0);
  EXPECT_TRUE(!PeerGone(accepted));
  EXPECT_TRUE(!PeerGone(second.fd));
  close(second.fd);  // the second guard stops: its holder sees the end
  EXPECT_TRUE(PeerGone(accepted));
  close(accepted);
  const NameClaim third = Claim(name);
  EXPECT_TRUE(!third.held);
  close(first.fd);  // the holder stops: the one connected sees the end, and may hold it now
  EXPECT_TRUE(PeerGone(third.fd));
  close(third.fd);
  const NameClaim fourth = Claim(name);
  EXPECT_TRUE(fourth.held);
  close(fourth.fd);
}

TEST_CASE("name claim: a full queue of waiting guards still says held by another") {
  const std::string name = UniqueName("queue");
  const NameClaim holder = Claim(name);
  EXPECT_TRUE(holder.held);
  std::vector<int> peers;
  bool full = false;
  for (int i = 0; i < 64 && !full; ++i) {
    const NameClaim other = Claim(name);
    EXPECT_TRUE(!other.held);
    if (other.fd < 0)
      full = true;
    else
      peers.push_back(other.fd);
  }
  EXPECT_TRUE(full);
  for (const int fd : peers) close(fd);
  close(holder.fd);
}

TEST_CASE("name claim: an empty, too long or NUL-carrying name is EINVAL") {
  for (const std::string& name : {std::string(), std::string(108, 'x'), std::string("a\0b", 3)}) {
    auto claim = ClaimName(NetnsTarget{}, name);
    EXPECT_TRUE(!claim.ok());
    EXPECT_EQ(claim.error().errnum, EINVAL);
  }
  auto longest = ClaimName(NetnsTarget{}, std::string(107, 'y'));
  EXPECT_TRUE(longest.ok());
  close(longest.value().fd);
}

TEST_CASE("name claim: a namespace path that is not one is refused, nothing bound") {
  auto claim = ClaimName(NetnsTarget{"/proc/self/status"}, UniqueName("notns"));
  EXPECT_TRUE(!claim.ok());
  EXPECT_EQ(claim.error().errnum, EINVAL);
}
