// The namespace as the monitor has seen it: links by ifindex, neighbour and
// FDB entries by identity, kept from notifications and dumps in compact
// structs, and the change each message makes, named as a consumer acts on it
// (added, changed, removed and why). The consumer (JS) gets those changes and
// queries the mirror for anything else, instead of keeping a copy of its own.
// Pure: no sockets, no Node, so every rule is unit-tested and fuzzed.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "netlink_builder.h"
#include "netlink_parser.h"

namespace fg {

enum class ChangeKind : uint8_t { kAdded, kChanged, kRemoved };

// Why an entry went away. kFlush: the kernel dropped it because its device's
// MAC changed or the device went down; kDeviceRemoved: its device was deleted;
// kResync: missing from a consistent re-dump; kDeleted: anything else.
enum class RemovalCause : uint8_t { kDeleted, kFlush, kDeviceRemoved, kResync };

// addr_assign_type as far as the mirror knows it: read lazily (sysfs, by the
// owner), and forgotten whenever the MAC changes.
constexpr int16_t kAddrAssignTypeUnread = -2;
constexpr int16_t kAddrAssignTypeUnknown = -1;

struct LinkChange {
  ChangeKind kind = ChangeKind::kAdded;
  netlink::LinkRecord link;                     // removed: as it was
  std::optional<netlink::LinkRecord> previous;  // changed only
  int16_t addrAssignType = kAddrAssignTypeUnread;
  int16_t previousAddrAssignType = kAddrAssignTypeUnread;
  bool fromDump = false;
  bool created = false;  // added by a notification announcing the device's creation
  // changed only: the notification of a correction's own MAC write (NoteCorrection),
  // differing from the previous state in the MAC alone
  bool correctionEcho = false;
};

struct NeighChange {
  ChangeKind kind = ChangeKind::kAdded;
  netlink::NeighRecord neigh;                    // removed: as it was
  std::optional<netlink::NeighRecord> previous;  // changed only
  bool fromDump = false;
  uint32_t portid = 0;
  RemovalCause cause = RemovalCause::kDeleted;  // removed only
};

using MirrorChange = std::variant<LinkChange, NeighChange>;

// Identity of an entry: ARP/NDP by (family, device, IP); FDB by (device, MAC,
// remote IP, VNI), since one MAC may have several remotes.
std::string MirrorKey(const netlink::NeighRecord& neigh);

// The start every key of a device's entries in one family shares.
std::string NeighKeyPrefix(uint8_t family, int32_t ifindex);

// Equal in every field a change reports (addr_assign_type follows the MAC).
bool SameLink(const netlink::LinkRecord& a, const netlink::LinkRecord& b);
bool SameLinkButMac(const netlink::LinkRecord& a, const netlink::LinkRecord& b);
bool SameNeigh(const netlink::NeighRecord& a, const netlink::NeighRecord& b);

class StateMirror {
 public:
  struct Link {
    netlink::LinkRecord record;
    int16_t addrAssignType = kAddrAssignTypeUnread;
    uint32_t generation = 0;  // the resync that last reported it
  };
  struct Neigh {
    netlink::NeighRecord record;
    uint32_t generation = 0;
  };

  // The first resync has ended: from then on changes are reported.
  bool ready() const { return ready_; }
  bool resyncing() const { return resyncing_; }
  size_t linkCount() const { return links_.size(); }
  size_t neighCount() const { return neighs_.size(); }

  // Each appends the changes the message makes (none before ready): a deleted
  // device takes its entries with it.
  void ApplyLink(netlink::LinkRecord link, bool fromDump, std::vector<MirrorChange>* out);
  void ApplyNeigh(netlink::NeighRecord neigh, bool fromDump, uint32_t portid,
                  std::vector<MirrorChange>* out);

  // A correction wrote `mac` back to the device: the RTM_NEWLINK of that
  // write flushes nothing (the rewrite did), so the DELNEIGHs after it are
  // not a flush.
  void NoteCorrection(int32_t ifindex, const std::array<uint8_t, 6>& mac);

  // Brackets a re-dump. At a consistent end, what it did not report is gone
  // (appended as removals, kResync). The first end makes the mirror ready.
  void BeginResync();
  void EndResync(bool consistent, std::vector<MirrorChange>* out);

  // Drops a device and its entries without reporting them (it left the view).
  void Forget(int32_t ifindex);

  // An FDB entry of a MAC the mirror holds at another remote (same device, MAC and VNI). A
  // VXLAN device notifies a `replace` that moves the remote and an `append` that adds one
  // alike (one RTM_NEWNEIGH, the new remote only), so the mirror cannot tell whether the
  // other remote is gone: only a dump can.
  bool HasOtherRemote(const netlink::NeighRecord& neigh) const;

  // Calls `visit` with each entry of one device in one family, in key order (one run of keys:
  // the family, then the ifindex), until it returns false.
  template <typename Visit>
  void VisitNeighsOf(uint8_t family, int32_t ifindex, Visit&& visit) const {
    const std::string prefix = NeighKeyPrefix(family, ifindex);
    for (auto it = neighs_.lower_bound(prefix);
         it != neighs_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (!visit(it->second.record)) return;
    }
  }

  const Link* FindLink(int32_t ifindex) const;
  const Link* FindLinkByName(const std::string& name) const;
  // Records the addr_assign_type read for the device at `mac` (ignored when the MAC moved on).
  void SetAddrAssignType(int32_t ifindex, const netlink::MacField& mac, int16_t value);

  // In index order, and entries in key order (family, device, address): queries,
  // removals and tests see one order, whatever the history.
  const std::map<int32_t, Link>& links() const { return links_; }
  const std::map<std::string, Neigh>& neighs() const { return neighs_; }
  // Changes whenever an entry is added to neighs() or taken out of it, and is never the same in
  // two mirrors (one count for the process, from 1): what was worked out from the keys at one
  // version holds while it stays.
  uint64_t keysVersion() const { return keysVersion_; }

 private:
  void RemoveNeighsOf(int32_t ifindex, RemovalCause cause, std::vector<MirrorChange>* out);
  static uint64_t NextKeysVersion();

  std::map<int32_t, Link> links_;
  std::map<std::string, Neigh> neighs_;
  // Devices whose last change flushes their neighbour entries: the DELNEIGHs that follow it.
  std::unordered_set<int32_t> flushing_;
  // The MACs corrections wrote whose RTM_NEWLINKs have not been read yet, oldest first (a
  // vector, as MonitorCore::unreadWrites_).
  std::unordered_map<int32_t, std::vector<std::array<uint8_t, 6>>> corrected_;
  uint32_t generation_ = 0;
  uint64_t keysVersion_ = NextKeysVersion();
  bool resyncing_ = false;
  bool ready_ = false;
};

}  // namespace fg
