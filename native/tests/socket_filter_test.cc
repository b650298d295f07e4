// The monitor's socket filter, run by a small classic-BPF interpreter over
// notifications laid out as the kernel sends them.
#include "socket_filter.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_harness.h"

namespace {

using fg::BuildLinkFilter;
using fg::LinkFilter;

// Interprets the subset of classic BPF the filter uses, as the kernel does:
// big-endian loads, a load past the end returns 0 (drop).
uint32_t Run(const std::vector<sock_filter>& program, const std::vector<uint8_t>& packet) {
  uint32_t accumulator = 0;
  for (size_t pc = 0; pc < program.size(); ++pc) {
    const sock_filter& op = program[pc];
    switch (op.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        if (op.k + 4 > packet.size()) return 0;
        accumulator = (uint32_t{packet[op.k]} << 24) | (uint32_t{packet[op.k + 1]} << 16) |
                      (uint32_t{packet[op.k + 2]} << 8) | packet[op.k + 3];
        break;
      case BPF_LD | BPF_H | BPF_ABS:
        if (op.k + 2 > packet.size()) return 0;
        accumulator = (uint32_t{packet[op.k]} << 8) | packet[op.k + 1];
        break;
      case BPF_LD | BPF_B | BPF_ABS:
        if (op.k + 1 > packet.size()) return 0;
        accumulator = packet[op.k];
        break;
      case BPF_JMP | BPF_JEQ | BPF_K:
        pc += accumulator == op.k ? op.jt : op.jf;
        break;
      case BPF_RET | BPF_K:
        return op.k;
      default:
        throw fg_test::Failure("unexpected instruction " + std::to_string(op.code));
    }
  }
  throw fg_test::Failure("fell off the end of the program");
}

// An RTM_NEWLINK notification: header, ifinfomsg, IFLA_IFNAME first, IFLA_MTU.
std::vector<uint8_t> NewLink(int32_t ifindex, const std::string& name, uint32_t change = 0,
                             uint32_t pid = 0, uint16_t type = RTM_NEWLINK) {
  ifinfomsg info{};
  info.ifi_index = ifindex;
  info.ifi_change = change;
  std::vector<uint8_t> packet(sizeof(nlmsghdr));
  const auto append = [&packet](const void* data, size_t length) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    packet.insert(packet.end(), bytes, bytes + length);
  };
  append(&info, sizeof(info));
  const uint16_t nameAttribute[2] = {static_cast<uint16_t>(4 + name.size() + 1), IFLA_IFNAME};
  append(nameAttribute, sizeof(nameAttribute));
  append(name.c_str(), name.size() + 1);
  packet.resize((packet.size() + 3) & ~size_t{3}, 0);
  const uint8_t mtu[] = {8, 0, IFLA_MTU, 0, 0xdc, 0x05, 0, 0};
  append(mtu, sizeof(mtu));
  nlmsghdr header{};
  header.nlmsg_len = static_cast<uint32_t>(packet.size());
  header.nlmsg_type = type;
  header.nlmsg_pid = pid;
  std::memcpy(packet.data(), &header, sizeof(header));
  return packet;
}

const LinkFilter kFlannel{{7}, {"flannel.", "flannel-v6."}};

}  // namespace

TEST_CASE("filter: drops an MTU change of an unrelated device") {
  EXPECT_EQ(Run(BuildLinkFilter(kFlannel), NewLink(42, "ifb17")), 0u);
  EXPECT_EQ(Run(BuildLinkFilter(kFlannel), NewLink(42, "flannel")), 0u);  // prefix is "flannel."
  EXPECT_EQ(Run(BuildLinkFilter(kFlannel), NewLink(42, "flannex.1")), 0u);
}

TEST_CASE("filter: passes names with a managed prefix, whatever their index") {
  EXPECT_TRUE(Run(BuildLinkFilter(kFlannel), NewLink(42, "flannel.1")) != 0);
  EXPECT_TRUE(Run(BuildLinkFilter(kFlannel), NewLink(43, "flannel-v6.1")) != 0);
}

TEST_CASE("filter: passes a managed index under any name (renamed out of the glob)") {
  EXPECT_TRUE(Run(BuildLinkFilter(kFlannel), NewLink(7, "eth9")) != 0);
}

TEST_CASE("filter: passes new devices, deletions, dump replies and other messages") {
  const auto program = BuildLinkFilter(kFlannel);
  EXPECT_TRUE(Run(program, NewLink(42, "ifb17", 0xffffffff)) != 0);
  EXPECT_TRUE(Run(program, NewLink(42, "ifb17", 0, 0, RTM_DELLINK)) != 0);
  EXPECT_TRUE(Run(program, NewLink(42, "ifb17", 0, 4242)) != 0);
  EXPECT_TRUE(Run(program, NewLink(42, "ifb17", 0, 0, RTM_NEWNEIGH)) != 0);
  // NLMSG_DONE is 20 bytes: every load it reaches is in bounds.
  std::vector<uint8_t> done(20, 0);
  reinterpret_cast<nlmsghdr*>(done.data())->nlmsg_type = NLMSG_DONE;
  EXPECT_TRUE(Run(program, done) != 0);
}

TEST_CASE("filter: passes a link message whose first attribute is not IFLA_IFNAME") {
  auto packet = NewLink(42, "ifb17");
  packet[sizeof(nlmsghdr) + sizeof(ifinfomsg) + 2] = IFLA_MTU;
  EXPECT_TRUE(Run(BuildLinkFilter(kFlannel), packet) != 0);
}

TEST_CASE("filter: an empty prefix cannot narrow anything, so no program") {
  EXPECT_TRUE(BuildLinkFilter(LinkFilter{{1}, {"flannel.", ""}}).empty());
}

TEST_CASE("filter: many indexes and long prefixes keep every jump in range") {
  LinkFilter filter;
  for (int32_t i = 1; i <= 1000; ++i) filter.ifindexes.push_back(i);
  filter.namePrefixes = {"abcdefghijklmno", "abcdefghijklmnz", "x"};
  const auto program = BuildLinkFilter(filter);
  EXPECT_TRUE(program.size() < BPF_MAXINSNS);
  EXPECT_TRUE(Run(program, NewLink(1000, "other")) != 0);
  EXPECT_EQ(Run(program, NewLink(1001, "other")), 0u);
  EXPECT_TRUE(Run(program, NewLink(1001, "abcdefghijklmnz")) != 0);
  EXPECT_EQ(Run(program, NewLink(1001, "abcdefghijklmny")), 0u);
  EXPECT_TRUE(Run(program, NewLink(1001, "xy")) != 0);
}

TEST_CASE("filter: drops the RTM_NEWNEIGHs of its own write socket's requests, nothing else") {
  LinkFilter filter = kFlannel;
  filter.ownRequests = 0x80001234;
  const auto program = BuildLinkFilter(filter);
  // The re-adds of a correction (the write socket's port id): dropped.
  EXPECT_EQ(Run(program, NewLink(7, "flannel.1", 0, 0x80001234, RTM_NEWNEIGH)), 0u);
  // Anyone else's re-adds, the flush (no port id), a delete of ours, our MAC write's echo.
  EXPECT_TRUE(Run(program, NewLink(7, "flannel.1", 0, 0x80001235, RTM_NEWNEIGH)) != 0);
  EXPECT_TRUE(Run(program, NewLink(7, "flannel.1", 0, 0, RTM_NEWNEIGH)) != 0);
  EXPECT_TRUE(Run(program, NewLink(7, "flannel.1", 0, 0x80001234, RTM_DELNEIGH)) != 0);
  EXPECT_TRUE(Run(program, NewLink(7, "flannel.1", 0, 0x80001234, RTM_NEWLINK)) != 0);
  // The rest of the program is unchanged.
  EXPECT_EQ(Run(program, NewLink(42, "ifb17")), 0u);
  EXPECT_TRUE(Run(program, NewLink(42, "flannel.9")) != 0);
}
