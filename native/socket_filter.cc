#include "socket_filter.h"

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <algorithm>
#include <cstddef>

namespace fg {
namespace {

// Classic BPF loads are big-endian; netlink is in host order. Equality tests
// against a loaded value therefore compare with the byte-swapped constant.
constexpr uint32_t Swap32(uint32_t value) { return __builtin_bswap32(value); }
constexpr uint32_t Swap16(uint16_t value) { return __builtin_bswap16(value); }

constexpr uint32_t kAccept = 0xffffffff;  // keep the whole datagram
constexpr uint32_t kDrop = 0;

// Offsets in a notification: nlmsghdr (16 bytes), then ifinfomsg.
constexpr uint32_t kTypeOffset = offsetof(nlmsghdr, nlmsg_type);
constexpr uint32_t kPidOffset = offsetof(nlmsghdr, nlmsg_pid);
constexpr uint32_t kIndexOffset = sizeof(nlmsghdr) + offsetof(ifinfomsg, ifi_index);
constexpr uint32_t kChangeOffset = sizeof(nlmsghdr) + offsetof(ifinfomsg, ifi_change);
// rtnl_fill_ifinfo() puts IFLA_IFNAME first, right after ifinfomsg.
constexpr uint32_t kFirstAttributeType = sizeof(nlmsghdr) + sizeof(ifinfomsg) + 2;
constexpr uint32_t kNameOffset = sizeof(nlmsghdr) + sizeof(ifinfomsg) + 4;

static_assert(kIndexOffset == 20 && kChangeOffset == 28 && kNameOffset == 36,
              "rtnetlink notification layout");

class Program {
 public:
  void Load(uint16_t size, uint32_t offset) { Add(BPF_STMT(BPF_LD | size | BPF_ABS, offset)); }
  // Accepts when the loaded value equals `value`; else continues.
  void AcceptIfEqual(uint32_t value) {
    Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1));
    Add(BPF_STMT(BPF_RET | BPF_K, kAccept));
  }
  // Accepts when the loaded value differs from `value`; else continues.
  void AcceptUnlessEqual(uint32_t value) {
    Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 1, 0));
    Add(BPF_STMT(BPF_RET | BPF_K, kAccept));
  }
  // Skips `skip` instructions when the loaded value differs from `value`.
  void SkipUnlessEqual(uint32_t value, uint8_t skip) {
    Add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, skip));
  }
  void Return(uint32_t value) { Add(BPF_STMT(BPF_RET | BPF_K, value)); }
  std::vector<sock_filter> Take() { return std::move(instructions_); }

 private:
  void Add(sock_filter instruction) { instructions_.push_back(instruction); }
  std::vector<sock_filter> instructions_;
};

}  // namespace

std::vector<sock_filter> BuildLinkFilter(const LinkFilter& filter) {
  for (const std::string& prefix : filter.namePrefixes) {
    if (prefix.empty()) return {};
  }
  Program program;
  if (filter.ownRequests != 0) {
    program.Load(BPF_H, kTypeOffset);
    program.SkipUnlessEqual(Swap16(RTM_NEWNEIGH), 4);  // the next four
    program.Load(BPF_W, kPidOffset);
    program.AcceptUnlessEqual(Swap32(filter.ownRequests));
    program.Return(kDrop);
  }
  program.Load(BPF_H, kTypeOffset);
  program.AcceptUnlessEqual(Swap16(RTM_NEWLINK));  // deletions, neighbours, dump ends
  program.Load(BPF_W, kPidOffset);
  program.AcceptUnlessEqual(0);  // a reply to a request: dumps
  program.Load(BPF_W, kChangeOffset);
  program.AcceptIfEqual(0xffffffff);  // a new device
  program.Load(BPF_W, kIndexOffset);
  for (int32_t ifindex : filter.ifindexes) {
    program.AcceptIfEqual(Swap32(static_cast<uint32_t>(ifindex)));
  }
  if (!filter.namePrefixes.empty()) {
    program.Load(BPF_H, kFirstAttributeType);
    program.AcceptUnlessEqual(Swap16(IFLA_IFNAME));  // another layout: cannot tell, pass
    for (const std::string& prefix : filter.namePrefixes) {
      const size_t length = std::min<size_t>(prefix.size(), 15);  // IFNAMSIZ - 1
      for (size_t i = 0; i < length; ++i) {
        // On a mismatch, skip this prefix's remaining byte tests and its accept.
        const auto remaining = static_cast<uint8_t>((length - i - 1) * 2 + 1);
        program.Load(BPF_B, kNameOffset + static_cast<uint32_t>(i));
        program.SkipUnlessEqual(static_cast<uint8_t>(prefix[i]), remaining);
      }
      program.Return(kAccept);
    }
  }
  program.Return(kDrop);
  return program.Take();
}

}  // namespace fg
