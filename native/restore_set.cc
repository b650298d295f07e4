#include "restore_set.h"

#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstring>
#include <utility>

namespace fg {

netlink::NeighbourEntry RestoreEntryOf(const netlink::NeighRecord& neigh) {
  netlink::NeighbourEntry entry;
  entry.family = neigh.family;
  entry.ifindex = neigh.ifindex;
  entry.destination = neigh.destination;
  entry.lladdr = neigh.lladdr.bytes;
  entry.state = neigh.state;
  entry.flags = neigh.flags;
  return entry;
}

netlink::NeighRecord RecordOf(const netlink::NeighbourEntry& entry) {
  netlink::NeighRecord neigh;
  neigh.family = entry.family;
  neigh.ifindex = entry.ifindex;
  neigh.state = entry.state;
  neigh.flags = entry.flags;
  neigh.type = RTN_UNICAST;
  neigh.destination = entry.destination;
  neigh.lladdr.state = netlink::MacField::State::kValid;
  neigh.lladdr.bytes = entry.lladdr;
  return neigh;
}

bool Restorable(const netlink::NeighRecord& neigh) {
  return neigh.family != AF_BRIDGE && (neigh.state & NUD_PERMANENT) != 0 &&
         neigh.lladdr.state == netlink::MacField::State::kValid;
}

std::string NeighbourKey(uint8_t family, const std::vector<uint8_t>& destination) {
  std::string key(1 + destination.size(), static_cast<char>(family));
  if (!destination.empty()) std::memcpy(&key[1], destination.data(), destination.size());
  return key;
}

void RestoreSet::Assign(std::vector<netlink::NeighbourEntry> entries) {
  entries_.clear();
  index_.clear();
  entries_.reserve(entries.size());
  for (netlink::NeighbourEntry& entry : entries) Upsert(std::move(entry));
}

void RestoreSet::Upsert(netlink::NeighbourEntry entry) {
  std::string key = NeighbourKey(entry.family, entry.destination);
  auto found = index_.find(key);
  if (found != index_.end()) {
    entries_[found->second] = std::move(entry);
    return;
  }
  index_.emplace(std::move(key), entries_.size());
  entries_.push_back(std::move(entry));
}

bool RestoreSet::Remove(const netlink::NeighbourEntry& entry) {
  auto found = index_.find(NeighbourKey(entry.family, entry.destination));
  if (found == index_.end()) return false;
  const size_t position = found->second;
  index_.erase(found);
  // The last entry takes the removed one's place.
  if (position + 1 != entries_.size()) {
    entries_[position] = std::move(entries_.back());
    index_[NeighbourKey(entries_[position].family, entries_[position].destination)] = position;
  }
  entries_.pop_back();
  return true;
}

}  // namespace fg
