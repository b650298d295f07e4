#include "state_mirror.h"

#include <linux/if.h>
#include <linux/neighbour.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <utility>

namespace fg {
namespace {

using netlink::LinkRecord;
using netlink::MacField;
using netlink::NeighRecord;

// As JS sees them: any address that is not a valid MAC is null, and nulls are equal.
bool SameMac(const MacField& a, const MacField& b) {
  const bool aValid = a.state == MacField::State::kValid;
  const bool bValid = b.state == MacField::State::kValid;
  return aValid == bValid && (!aValid || a.bytes == b.bytes);
}

bool SameVxlan(const std::optional<netlink::VxlanInfo>& a,
               const std::optional<netlink::VxlanInfo>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return a->vni == b->vni && a->port == b->port && a->local == b->local &&
         a->underlayIfindex == b->underlayIfindex && a->learning == b->learning;
}

// IFLA_EVENT values a consumer is told about (IFLA_EVENT_REBOOT .. IFLA_EVENT_BONDING_OPTIONS).
bool NamedKernelEvent(const std::optional<uint32_t>& event) {
  return event && *event >= 1 && *event <= 6;
}

// Big-endian, so that keys sort as the numbers do.
void StoreU32(char* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(value >> (24 - 8 * i));
}

void AppendU32(std::string* key, uint32_t value) {
  const size_t at = key->size();
  key->resize(at + 4);
  StoreU32(&(*key)[at], value);
}

// Family, device and IP: the whole key of an ARP/NDP entry (10 bytes for IPv4, within the
// string's own storage: no allocation), the start of an FDB entry's. Sized once and written in
// place: every notification builds one.
std::string KeyStart(uint8_t family, int32_t ifindex, const std::vector<uint8_t>& destination) {
  std::string key(6 + destination.size(), '\0');
  key[0] = static_cast<char>(family);
  StoreU32(&key[1], static_cast<uint32_t>(ifindex));
  key[5] = static_cast<char>(destination.size());
  if (!destination.empty()) std::memcpy(&key[6], destination.data(), destination.size());
  return key;
}

}  // namespace

uint64_t StateMirror::NextKeysVersion() {
  static std::atomic<uint64_t> last{0};  // mirrors live in any thread (workers)
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::string NeighKeyPrefix(uint8_t family, int32_t ifindex) {
  std::string prefix(1, static_cast<char>(family));
  AppendU32(&prefix, static_cast<uint32_t>(ifindex));
  return prefix;
}

std::string MirrorKey(const NeighRecord& neigh) {
  std::string key = KeyStart(neigh.family, neigh.ifindex, neigh.destination);
  if (neigh.family == AF_BRIDGE) {
    const bool valid = neigh.lladdr.state == MacField::State::kValid;
    key.push_back(valid ? 1 : 0);
    if (valid) key.append(neigh.lladdr.bytes.begin(), neigh.lladdr.bytes.end());
    key.push_back(neigh.vni ? 1 : 0);
    if (neigh.vni) AppendU32(&key, *neigh.vni);
  }
  return key;
}

bool SameLink(const LinkRecord& a, const LinkRecord& b) {
  return SameMac(a.mac, b.mac) && SameLinkButMac(a, b);
}

bool SameLinkButMac(const LinkRecord& a, const LinkRecord& b) {
  return a.name == b.name && a.flags == b.flags &&
         a.operstate.value_or(0) == b.operstate.value_or(0) && a.mtu == b.mtu && a.kind == b.kind &&
         a.master == b.master && a.lowerIfindex == b.lowerIfindex &&
         a.linkNetnsid == b.linkNetnsid && SameVxlan(a.vxlan, b.vxlan);
}

bool SameNeigh(const NeighRecord& a, const NeighRecord& b) {
  return SameMac(a.lladdr, b.lladdr) && a.state == b.state && a.flags == b.flags &&
         a.master == b.master;
}

void StateMirror::ApplyLink(LinkRecord link, bool fromDump, std::vector<MirrorChange>* out) {
  const int32_t ifindex = link.ifindex;
  auto found = links_.find(ifindex);
  if (link.deleted) {
    flushing_.erase(ifindex);
    corrected_.erase(ifindex);
    if (found == links_.end()) return;
    LinkChange removed;
    removed.kind = ChangeKind::kRemoved;
    removed.link = std::move(found->second.record);
    removed.addrAssignType = found->second.addrAssignType;
    removed.fromDump = fromDump;
    links_.erase(found);
    // A device's entries go with it, reported before the device itself.
    RemoveNeighsOf(ifindex, RemovalCause::kDeviceRemoved, out);
    if (ready_) out->push_back(std::move(removed));
    return;
  }
  const Link* previous = found == links_.end() ? nullptr : &found->second;
  bool correctionEcho = false;
  if (!fromDump) {
    // The DELNEIGHs a MAC change or a down causes follow its RTM_NEWLINK directly.
    const bool wentDown =
        previous && (previous->record.flags & IFF_UP) != 0 && (link.flags & IFF_UP) == 0;
    auto corrected = corrected_.find(ifindex);
    const bool showsWrite = corrected != corrected_.end() &&
                            link.mac.state == MacField::State::kValid &&
                            link.mac.bytes == corrected->second.front();
    const bool echo = showsWrite && !wentDown;
    // Rewrites queued before the write keep the mark: the first record with its MAC ends it.
    if (showsWrite) {
      corrected->second.erase(corrected->second.begin());
      if (corrected->second.empty()) corrected_.erase(corrected);
    }
    correctionEcho =
        echo && previous && !NamedKernelEvent(link.event) && SameLinkButMac(previous->record, link);
    if (!echo && ((previous && !SameMac(previous->record.mac, link.mac)) || wentDown)) {
      flushing_.insert(ifindex);
    } else {
      flushing_.erase(ifindex);
    }
  }
  Link next;
  next.generation = generation_;
  // The kernel changes addr_assign_type only with the address itself.
  if (previous && SameMac(previous->record.mac, link.mac)) {
    next.addrAssignType = previous->addrAssignType;
  }
  std::optional<MirrorChange> change;
  if (ready_) {
    if (!previous) {
      LinkChange added;
      added.kind = ChangeKind::kAdded;
      added.link = link;
      added.fromDump = fromDump;
      added.created = !fromDump && link.changeMask == 0xffffffffu;
      change = std::move(added);
    } else if (NamedKernelEvent(link.event) || !SameLink(previous->record, link)) {
      LinkChange changed;
      changed.kind = ChangeKind::kChanged;
      changed.link = link;
      changed.previous = previous->record;
      changed.addrAssignType = next.addrAssignType;
      changed.previousAddrAssignType = previous->addrAssignType;
      changed.fromDump = fromDump;
      changed.correctionEcho = correctionEcho;
      change = std::move(changed);
    }
  }
  next.record = std::move(link);
  links_[ifindex] = std::move(next);
  if (change) out->push_back(std::move(*change));
}

void StateMirror::ApplyNeigh(NeighRecord neigh, bool fromDump, uint32_t portid,
                             std::vector<MirrorChange>* out) {
  std::string key = MirrorKey(neigh);
  auto found = neighs_.find(key);
  if (neigh.deleted) {
    // The kernel's own removal of a permanent entry (portid 0) is a flush: a
    // process that deletes one makes it FAILED first, under its own port id.
    // A write of the MAC the device already has flushes too, with no MAC change.
    const bool flushed =
        neigh.family != AF_BRIDGE &&
        (flushing_.count(neigh.ifindex) > 0 || (portid == 0 && (neigh.state & NUD_PERMANENT) != 0));
    if (found == neighs_.end()) return;
    NeighChange removed;
    removed.kind = ChangeKind::kRemoved;
    removed.neigh = std::move(found->second.record);
    removed.fromDump = fromDump;
    removed.portid = portid;
    removed.cause = flushed ? RemovalCause::kFlush : RemovalCause::kDeleted;
    neighs_.erase(found);
    keysVersion_ = NextKeysVersion();
    if (ready_) out->push_back(std::move(removed));
    return;
  }
  if (!fromDump) flushing_.erase(neigh.ifindex);
  std::optional<MirrorChange> change;
  if (ready_) {
    if (found == neighs_.end()) {
      NeighChange added;
      added.neigh = neigh;
      added.fromDump = fromDump;
      added.portid = portid;
      change = std::move(added);
    } else if (!SameNeigh(found->second.record, neigh)) {
      NeighChange changed;
      changed.kind = ChangeKind::kChanged;
      changed.neigh = neigh;
      changed.previous = found->second.record;
      changed.fromDump = fromDump;
      changed.portid = portid;
      change = std::move(changed);
    }
  }
  if (found == neighs_.end()) {
    neighs_.emplace(std::move(key), Neigh{std::move(neigh), generation_});
    keysVersion_ = NextKeysVersion();
  } else {
    found->second = Neigh{std::move(neigh), generation_};
  }
  if (change) out->push_back(std::move(*change));
}

bool StateMirror::HasOtherRemote(const NeighRecord& neigh) const {
  if (neigh.family != AF_BRIDGE || neigh.destination.empty() ||
      neigh.lladdr.state != MacField::State::kValid) {
    return false;
  }
  bool found = false;
  VisitNeighsOf(AF_BRIDGE, neigh.ifindex, [&neigh, &found](const NeighRecord& other) {
    found = other.lladdr.state == MacField::State::kValid &&
            other.lladdr.bytes == neigh.lladdr.bytes && other.vni == neigh.vni &&
            other.destination != neigh.destination;
    return !found;
  });
  return found;
}

void StateMirror::NoteCorrection(int32_t ifindex, const std::array<uint8_t, 6>& mac) {
  corrected_[ifindex].push_back(mac);
}

void StateMirror::BeginResync() {
  corrected_.clear();  // notifications were lost: an echo may be among them
  ++generation_;
  resyncing_ = true;
}

void StateMirror::EndResync(bool consistent, std::vector<MirrorChange>* out) {
  resyncing_ = false;
  if (consistent) {
    for (auto link = links_.begin(); link != links_.end();) {
      if (link->second.generation == generation_) {
        ++link;
        continue;
      }
      if (ready_) {
        LinkChange removed;
        removed.kind = ChangeKind::kRemoved;
        removed.link = std::move(link->second.record);
        removed.addrAssignType = link->second.addrAssignType;
        removed.fromDump = true;
        out->push_back(std::move(removed));
      }
      flushing_.erase(link->first);
      corrected_.erase(link->first);
      link = links_.erase(link);
    }
    const size_t neighsBefore = neighs_.size();
    for (auto neigh = neighs_.begin(); neigh != neighs_.end();) {
      if (neigh->second.generation == generation_) {
        ++neigh;
        continue;
      }
      if (ready_) {
        NeighChange removed;
        removed.kind = ChangeKind::kRemoved;
        removed.neigh = std::move(neigh->second.record);
        removed.fromDump = true;
        removed.cause = RemovalCause::kResync;
        out->push_back(std::move(removed));
      }
      neigh = neighs_.erase(neigh);
    }
    if (neighs_.size() != neighsBefore) keysVersion_ = NextKeysVersion();
  }
  ready_ = true;
}

void StateMirror::Forget(int32_t ifindex) {
  links_.erase(ifindex);
  flushing_.erase(ifindex);
  corrected_.erase(ifindex);
  RemoveNeighsOf(ifindex, RemovalCause::kDeviceRemoved, nullptr);
}

void StateMirror::RemoveNeighsOf(int32_t ifindex, RemovalCause cause,
                                 std::vector<MirrorChange>* out) {
  const size_t neighsBefore = neighs_.size();
  for (auto neigh = neighs_.begin(); neigh != neighs_.end();) {
    if (neigh->second.record.ifindex != ifindex) {
      ++neigh;
      continue;
    }
    if (out && ready_) {
      NeighChange removed;
      removed.kind = ChangeKind::kRemoved;
      removed.neigh = std::move(neigh->second.record);
      removed.cause = cause;
      out->push_back(std::move(removed));
    }
    neigh = neighs_.erase(neigh);
  }
  if (neighs_.size() != neighsBefore) keysVersion_ = NextKeysVersion();
}

const StateMirror::Link* StateMirror::FindLink(int32_t ifindex) const {
  auto found = links_.find(ifindex);
  return found == links_.end() ? nullptr : &found->second;
}

const StateMirror::Link* StateMirror::FindLinkByName(const std::string& name) const {
  for (const auto& [ifindex, link] : links_) {
    if (link.record.name == name) return &link;
  }
  return nullptr;
}

void StateMirror::SetAddrAssignType(int32_t ifindex, const MacField& mac, int16_t value) {
  auto found = links_.find(ifindex);
  if (found != links_.end() && SameMac(found->second.record.mac, mac)) {
    found->second.addrAssignType = value;
  }
}

}  // namespace fg
