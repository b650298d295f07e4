// A classic BPF program for the monitor's socket that keeps unrelated link
// notifications out of user space: under a flood of changes to other devices
// (MTU flips on hundreds of links) the kernel drops them before they are
// queued, so they can neither overrun the socket nor cost a wake-up.
// Pure: builds instructions; the socket attaches them.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fg {

struct LinkFilter {
  // Devices whose every notification must pass (the ones being managed).
  std::vector<int32_t> ifindexes;
  // RTM_NEWLINKs whose IFLA_IFNAME starts with one of these pass (the literal
  // part of each interface glob). An empty prefix would pass everything: then
  // no filter is built.
  std::vector<std::string> namePrefixes;
  // Non-zero: RTM_NEWNEIGH notifications of this port's requests are dropped.
  // The monitor's write socket re-adds a device's whole restore set after a
  // rewrite; what it wrote, it knows (they would only be read to be dropped).
  uint32_t ownRequests = 0;
};

// Drops RTM_NEWNEIGH of `ownRequests`. Then passes: every message that is not
// RTM_NEWLINK (deletions, neighbours, dump ends, errors), replies to requests
// (nlmsg_pid != 0: dumps, and the notifications of any request), announcements
// of new devices (ifi_change == ~0), the listed ifindexes, and names with a
// listed prefix. Drops the rest. Returns an empty program when the filter
// cannot narrow anything (an empty prefix).
std::vector<sock_filter> BuildLinkFilter(const LinkFilter& filter);

}  // namespace fg
