#include "delivered_view.h"

#include <variant>

namespace fg {

namespace {

std::optional<ViewedLink> LinkBefore(const LinkChange& change) {
  switch (change.kind) {
    case ChangeKind::kAdded:
      return std::nullopt;
    case ChangeKind::kRemoved:
      return ViewedLink{change.link, change.addrAssignType, true};
    case ChangeKind::kChanged:
      if (change.previous) return ViewedLink{*change.previous, change.previousAddrAssignType, true};
      return ViewedLink{change.link, change.addrAssignType, true};
  }
  return std::nullopt;
}

std::optional<netlink::NeighRecord> NeighBefore(const NeighChange& change) {
  switch (change.kind) {
    case ChangeKind::kAdded:
      return std::nullopt;
    case ChangeKind::kRemoved:
      return change.neigh;
    case ChangeKind::kChanged:
      return change.previous ? *change.previous : change.neigh;
  }
  return std::nullopt;
}

}  // namespace

DeliveredView::DeliveredView(const StateMirror& mirror,
                             const std::vector<const MonitorItem*>& queued)
    : mirror_(mirror) {
  // The first queued change of an object found it as the loop last saw it.
  for (const MonitorItem* item : queued) {
    if (const auto* link = std::get_if<LinkItem>(item); link && link->change) {
      links_.try_emplace(link->change->link.ifindex, LinkBefore(*link->change));
    } else if (const auto* neigh = std::get_if<NeighItem>(item)) {
      neighs_.try_emplace(MirrorKey(neigh->change.neigh), NeighBefore(neigh->change));
    }
  }
}

std::optional<ViewedLink> DeliveredView::Link(int32_t ifindex) const {
  if (auto before = links_.find(ifindex); before != links_.end()) return before->second;
  const StateMirror::Link* link = mirror_.FindLink(ifindex);
  if (!link) return std::nullopt;
  return ViewedLink{link->record, link->addrAssignType};
}

std::optional<ViewedLink> DeliveredView::LinkNamed(const std::string& name) const {
  for (const auto& [ifindex, before] : links_) {
    if (before && before->record.name == name) return before;
  }
  const StateMirror::Link* link = mirror_.FindLinkByName(name);
  // A device a queued item changed had another name, or none, before it (checked above).
  if (!link || links_.count(link->record.ifindex) > 0) return std::nullopt;
  return ViewedLink{link->record, link->addrAssignType};
}

std::vector<ViewedLink> DeliveredView::Links() const {
  std::map<int32_t, ViewedLink> viewed;
  for (const auto& [ifindex, link] : mirror_.links()) {
    if (links_.count(ifindex) == 0)
      viewed.emplace(ifindex, ViewedLink{link.record, link.addrAssignType});
  }
  for (const auto& [ifindex, before] : links_) {
    if (before) viewed.emplace(ifindex, *before);
  }
  std::vector<ViewedLink> out;
  out.reserve(viewed.size());
  for (auto& [ifindex, link] : viewed) out.push_back(std::move(link));
  return out;
}

std::vector<const netlink::NeighRecord*> DeliveredView::Neighbours(
    std::optional<int32_t> ifindex) const {
  // Both maps are in key order: one merge walk, no copy of the mirror's keys (a query for a
  // table of thousands is made after every correction, mostly with nothing queued).
  std::vector<const netlink::NeighRecord*> out;
  const auto keep = [&out, ifindex](const netlink::NeighRecord* record) {
    if (record && (!ifindex || record->ifindex == *ifindex)) out.push_back(record);
  };
  const auto viewed = [](const std::optional<netlink::NeighRecord>& before) {
    return before ? &*before : nullptr;
  };
  auto before = neighs_.begin();
  for (const auto& [key, neigh] : mirror_.neighs()) {
    for (; before != neighs_.end() && before->first < key; ++before) keep(viewed(before->second));
    if (before != neighs_.end() && before->first == key) {
      keep(viewed((before++)->second));
    } else {
      keep(&neigh.record);
    }
  }
  for (; before != neighs_.end(); ++before) keep(viewed(before->second));
  return out;
}

}  // namespace fg
