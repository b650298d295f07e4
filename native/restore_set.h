// A device's permanent neighbour entries, as the native layer keeps them to put
// back after a MAC change: a list (what ReplaceNeighbours writes) indexed by
// identity (family, destination), so that a change of one entry costs O(1)
// rather than a new list of thousands. Pure: no sockets, no Node.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "netlink_builder.h"
#include "netlink_parser.h"
#include "state_mirror.h"

namespace fg {

// The entry that puts `neigh` back as it is: family, device, destination,
// MAC, state and flags.
netlink::NeighbourEntry RestoreEntryOf(const netlink::NeighRecord& neigh);
// The entry as the kernel reports it once written (the inverse of RestoreEntryOf).
netlink::NeighRecord RecordOf(const netlink::NeighbourEntry& entry);
// Whether a restore set keeps it: a permanent ARP or NDP entry with a MAC.
bool Restorable(const netlink::NeighRecord& neigh);

// The identity of an ARP/NDP entry: family, then destination bytes.
std::string NeighbourKey(uint8_t family, const std::vector<uint8_t>& destination);

class RestoreSet {
 public:
  // Everything replaced (a later entry with the key of an earlier one wins).
  void Assign(std::vector<netlink::NeighbourEntry> entries);
  // Adds the entry, or replaces the one with its key.
  void Upsert(netlink::NeighbourEntry entry);
  // Removes the entry with this one's key; false when there was none.
  bool Remove(const netlink::NeighbourEntry& entry);

  // Where the entry with this identity is in entries(), if it is there.
  std::optional<size_t> PositionOf(uint8_t family, const std::vector<uint8_t>& destination) const;

  const std::vector<netlink::NeighbourEntry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

  // HeldBy(mirror, ifindex, *this), worked out again only when the mirror's keys or this set
  // changed since the last call: a correction in a table that stays walks nothing.
  const std::vector<bool>& Held(const StateMirror& mirror, int32_t ifindex) const;

 private:
  void Changed() { heldKeysVersion_ = 0; }

  std::vector<netlink::NeighbourEntry> entries_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in entries_
  mutable std::vector<bool> held_;
  mutable uint64_t heldKeysVersion_ = 0;  // the mirror's keysVersion() held_ is of; 0: none
  mutable int32_t heldIfindex_ = 0;
};

// Per entry of `set` (a restore set of device `ifindex`), in entries() order: whether `mirror`
// holds it, as MirrorKey(RecordOf(entry)) says.
std::vector<bool> HeldBy(const StateMirror& mirror, int32_t ifindex, const RestoreSet& set);

}  // namespace fg
