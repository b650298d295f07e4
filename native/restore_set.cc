#include "restore_set.h"

#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
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
  Changed();
  entries_.clear();
  index_.clear();
  entries_.reserve(entries.size());
  for (netlink::NeighbourEntry& entry : entries) Upsert(std::move(entry));
}

void RestoreSet::Upsert(netlink::NeighbourEntry entry) {
  Changed();
  std::string key = NeighbourKey(entry.family, entry.destination);
  auto found = index_.find(key);
  if (found != index_.end()) {
    entries_[found->second] = std::move(entry);
    return;
  }
  index_.emplace(std::move(key), entries_.size());
  entries_.push_back(std::move(entry));
}

std::optional<size_t> RestoreSet::PositionOf(uint8_t family,
                                             const std::vector<uint8_t>& destination) const {
  auto found = index_.find(NeighbourKey(family, destination));
  if (found == index_.end()) return std::nullopt;
  return found->second;
}

bool RestoreSet::Remove(const netlink::NeighbourEntry& entry) {
  auto found = index_.find(NeighbourKey(entry.family, entry.destination));
  if (found == index_.end()) return false;
  Changed();
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

const std::vector<bool>& RestoreSet::Held(const StateMirror& mirror, int32_t ifindex) const {
  if (heldKeysVersion_ != mirror.keysVersion() || heldIfindex_ != ifindex) {
    held_ = HeldBy(mirror, ifindex, *this);
    heldKeysVersion_ = mirror.keysVersion();
    heldIfindex_ = ifindex;
  }
  return held_;
}

// One walk of the device's run of keys in the mirror per family, with a hash lookup each, rather
// than a lookup in the mirror's ordered map per entry: at a few hundred peers, thousands of
// string comparisons a correction.
std::vector<bool> HeldBy(const StateMirror& mirror, int32_t ifindex, const RestoreSet& set) {
  std::vector<bool> held(set.size(), false);
  std::vector<uint8_t> walked;  // the families, one or two
  for (const netlink::NeighbourEntry& entry : set.entries()) {
    if (std::find(walked.begin(), walked.end(), entry.family) != walked.end()) continue;
    walked.push_back(entry.family);
    mirror.VisitNeighsOf(entry.family, ifindex, [&set, &held](const netlink::NeighRecord& neigh) {
      const std::optional<size_t> at = set.PositionOf(neigh.family, neigh.destination);
      // An FDB entry is also its MAC, with no VNI, as RecordOf makes it.
      if (at && (neigh.family != AF_BRIDGE ||
                 (!neigh.vni && neigh.lladdr.state == netlink::MacField::State::kValid &&
                  neigh.lladdr.bytes == set.entries()[*at].lladdr))) {
        held[*at] = true;
      }
      return true;
    });
  }
  return held;
}

}  // namespace fg
