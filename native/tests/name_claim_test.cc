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

using fg::AcceptClaimPeer;
using fg::ClaimName;
using fg::ClaimPeerEnded;
using fg::IsClaimSocket;
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

}  // namespace

TEST_CASE("name claim: the first holds it, the next connects, and each learns of the other") {
  const std::string name = UniqueName("pair");
  const NameClaim first = Claim(name);
  EXPECT_TRUE(first.held);
  const NameClaim second = Claim(name);
  EXPECT_TRUE(!second.held);
  EXPECT_TRUE(second.fd >= 0);
  const int accepted = AcceptClaimPeer(first.fd);
  EXPECT_TRUE(accepted >= 0);
  EXPECT_EQ(AcceptClaimPeer(first.fd), -1);  // no one else waits
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_TRUE(!ClaimPeerEnded(accepted));
  EXPECT_TRUE(!ClaimPeerEnded(second.fd));
  close(second.fd);  // the second guard stops: its holder sees the end
  EXPECT_TRUE(ClaimPeerEnded(accepted));
  close(accepted);
  const NameClaim third = Claim(name);
  EXPECT_TRUE(!third.held);
  close(first.fd);  // the holder stops: the one connected sees the end, and may hold it now
  EXPECT_TRUE(ClaimPeerEnded(third.fd));
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

TEST_CASE("name claim: what a peer sends is dropped in bounded reads, and is not its end") {
  const std::string name = UniqueName("chatty");
  const NameClaim holder = Claim(name);
  const NameClaim other = Claim(name);
  const int accepted = AcceptClaimPeer(holder.fd);
  EXPECT_TRUE(accepted >= 0);
  // More than one wake's reads: each call reads a bounded part, none sees an end.
  const std::string burst(8192, 'x');
  EXPECT_EQ(send(other.fd, burst.data(), burst.size(), MSG_DONTWAIT),
            static_cast<ssize_t>(burst.size()));
  int calls = 0;
  char byte = 0;
  for (; calls < 64 && recv(accepted, &byte, 1, MSG_DONTWAIT | MSG_PEEK) == 1; ++calls) {
    EXPECT_TRUE(!ClaimPeerEnded(accepted));
  }
  EXPECT_TRUE(calls > 1);
  EXPECT_TRUE(calls < 64);
  EXPECT_TRUE(!ClaimPeerEnded(accepted));
  // Data then the end: the end is seen once the data is read.
  EXPECT_EQ(send(other.fd, "y", 1, MSG_DONTWAIT), 1);
  close(other.fd);
  EXPECT_TRUE(ClaimPeerEnded(accepted));
  close(accepted);
  close(holder.fd);
}

TEST_CASE("name claim: a connection the holder never accepted is reset when it stops") {
  const std::string name = UniqueName("unaccepted");
  const NameClaim holder = Claim(name);
  const NameClaim other = Claim(name);
  EXPECT_TRUE(!ClaimPeerEnded(other.fd));
  close(holder.fd);
  EXPECT_TRUE(ClaimPeerEnded(other.fd));
  close(other.fd);
}

TEST_CASE("name claim: only a claim's own kind of socket is taken as one") {
  const std::string name = UniqueName("kinds");
  const NameClaim holder = Claim(name);
  const NameClaim other = Claim(name);
  EXPECT_TRUE(IsClaimSocket(holder.fd, true));
  EXPECT_TRUE(!IsClaimSocket(holder.fd, false));
  EXPECT_TRUE(IsClaimSocket(other.fd, false));
  EXPECT_TRUE(!IsClaimSocket(other.fd, true));
  int pipeEnds[2];
  EXPECT_EQ(pipe(pipeEnds), 0);
  const int datagram = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int inet = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  for (const int fd : {pipeEnds[0], datagram, inet, -1}) {
    EXPECT_TRUE(!IsClaimSocket(fd, false));
    EXPECT_TRUE(!IsClaimSocket(fd, true));
  }
  for (const int fd : {pipeEnds[0], pipeEnds[1], datagram, inet, other.fd, holder.fd}) close(fd);
}
