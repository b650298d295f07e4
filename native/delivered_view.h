// The mirror as the loop has been told it: the reader applies what it reads
// to the mirror at once, but the loop learns of it only when it takes the
// items (ReportQueue). A query the loop makes between two reports (a timer's
// correction) must not see a change it has not been handed yet, or it would
// act on a rewrite before reporting it. The view undoes the queued items'
// changes: each object as the first queued change found it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "monitor_core.h"
#include "state_mirror.h"

namespace fg {

struct ViewedLink {
  netlink::LinkRecord record;
  int16_t addrAssignType = kAddrAssignTypeUnread;
  // As a queued change found it (its addr_assign_type as read then), not as mirrored.
  bool beforeQueued = false;
};

class DeliveredView {
 public:
  // `queued`: the items read and not yet taken, in the order they are delivered.
  DeliveredView(const StateMirror& mirror, const std::vector<const MonitorItem*>& queued);

  std::optional<ViewedLink> Link(int32_t ifindex) const;
  std::optional<ViewedLink> LinkNamed(const std::string& name) const;
  // In index order.
  std::vector<ViewedLink> Links() const;
  // In key order; of one device when `ifindex` is given.
  std::vector<const netlink::NeighRecord*> Neighbours(std::optional<int32_t> ifindex) const;

 private:
  const StateMirror& mirror_;
  // Objects a queued item changed, as they were before it (nullopt: absent then).
  std::map<int32_t, std::optional<ViewedLink>> links_;
  std::map<std::string, std::optional<netlink::NeighRecord>> neighs_;
};

}  // namespace fg
