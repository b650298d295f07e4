// Unit tests for native/state_mirror.cc: what each message changes and how
// it is named (flush, device removal, resync), and a seeded random run in
// which a replica built only from the reported changes must match the mirror,
// and the mirror the model of the kernel, after every step.
#include "state_mirror.h"

#include <linux/if.h>
#include <linux/neighbour.h>
#include <sys/socket.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mirror_records.h"
#include "restore_set.h"
#include "test_harness.h"

namespace {

using fg::ChangeKind;
using fg::LinkChange;
using fg::MirrorChange;
using fg::NeighChange;
using fg::RemovalCause;
using fg::StateMirror;
using fg::netlink::LinkRecord;
using fg::netlink::MacField;
using fg::netlink::NeighRecord;
using fg_test::records::Arp;
using fg_test::records::Deleted;
using fg_test::records::Link;
using fg_test::records::Mac;

NeighRecord Fdb(int32_t ifindex, uint8_t mac, uint8_t remote) {
  NeighRecord neigh;
  neigh.family = AF_BRIDGE;
  neigh.ifindex = ifindex;
  neigh.state = NUD_PERMANENT;
  neigh.destination = {192, 0, 2, remote};
  neigh.lladdr = Mac(mac);
  return neigh;
}

NeighRecord DeletedOf(NeighRecord neigh) {
  neigh.deleted = true;
  return neigh;
}

// A mirror holding `links` and `neighs`, ready (the first resync ended).
StateMirror ReadyMirror(const std::vector<LinkRecord>& links,
                        const std::vector<NeighRecord>& neighs) {
  StateMirror mirror;
  std::vector<MirrorChange> changes;
  mirror.BeginResync();
  for (const LinkRecord& link : links) mirror.ApplyLink(link, true, &changes);
  for (const NeighRecord& neigh : neighs) mirror.ApplyNeigh(neigh, true, 0, &changes);
  mirror.EndResync(true, &changes);
  EXPECT_TRUE(changes.empty());  // nothing is reported before ready
  EXPECT_TRUE(mirror.ready());
  return mirror;
}

const NeighChange& AsNeigh(const MirrorChange& change) { return std::get<NeighChange>(change); }
const LinkChange& AsLink(const MirrorChange& change) { return std::get<LinkChange>(change); }

TEST_CASE("mirror: links added, changed (previous kept), unchanged, re-announced, removed") {
  StateMirror mirror = ReadyMirror({Link(2, 1)}, {});
  std::vector<MirrorChange> changes;
  mirror.ApplyLink(Link(3, 3), false, &changes);
  mirror.ApplyLink(Link(2, 1), false, &changes);  // the same state: nothing
  LinkRecord renamed = Link(2, 1, true, "flannel.1");
  mirror.ApplyLink(renamed, false, &changes);
  LinkRecord features = renamed;
  features.event = 2;  // IFLA_EVENT_FEATURES: re-announced unchanged, still reported
  mirror.ApplyLink(features, false, &changes);
  mirror.ApplyLink(Deleted(3), false, &changes);
  mirror.ApplyLink(Deleted(3), false, &changes);  // unknown by now: nothing
  EXPECT_EQ(changes.size(), size_t{4});
  EXPECT_TRUE(AsLink(changes[0]).kind == ChangeKind::kAdded);
  EXPECT_EQ(AsLink(changes[1]).previous->name, std::string("vx2"));
  EXPECT_EQ(AsLink(changes[1]).link.name, std::string("flannel.1"));
  EXPECT_TRUE(AsLink(changes[2]).kind == ChangeKind::kChanged);
  EXPECT_TRUE(AsLink(changes[3]).kind == ChangeKind::kRemoved);
  EXPECT_EQ(AsLink(changes[3]).link.ifindex, 3);
  EXPECT_EQ(mirror.linkCount(), size_t{1});
  EXPECT_EQ(mirror.FindLinkByName("flannel.1")->record.ifindex, 2);
}

TEST_CASE("mirror: an FDB remote beside another of its MAC is said, on its device only") {
  const StateMirror mirror =
      ReadyMirror({Link(2, 1), Link(3, 1)}, {Fdb(2, 0xa1, 11), Fdb(2, 0xa2, 12), Fdb(3, 0xa3, 13)});
  EXPECT_FALSE(mirror.HasOtherRemote(Fdb(2, 0xa1, 11)));  // the same remote again
  EXPECT_TRUE(mirror.HasOtherRemote(Fdb(2, 0xa1, 21)));   // moved, or appended: a dump says
  EXPECT_FALSE(mirror.HasOtherRemote(Fdb(2, 0xa4, 11)));  // a new MAC
  EXPECT_FALSE(mirror.HasOtherRemote(Fdb(3, 0xa1, 21)));  // another device's MAC
  EXPECT_TRUE(mirror.HasOtherRemote(Fdb(3, 0xa3, 11)));
  NeighRecord arp = Arp(2, 1, 0xa1);
  EXPECT_FALSE(mirror.HasOtherRemote(arp));
  NeighRecord other = Fdb(2, 0xa1, 21);
  other.vni = 7;  // another VNI's entry of the MAC
  EXPECT_FALSE(mirror.HasOtherRemote(other));
}

TEST_CASE("mirror: a MAC change or a down flushes; the next add ends it; FDB never flushes") {
  StateMirror mirror = ReadyMirror(
      {Link(2, 1)}, {Arp(2, 1, 0xa1), Arp(2, 2, 0xa2), Arp(2, 3, 0xa3), Fdb(2, 0xa1, 11)});
  std::vector<MirrorChange> changes;
  mirror.ApplyLink(Link(2, 9), false, &changes);
  mirror.ApplyNeigh(DeletedOf(Arp(2, 1, 0xa1)), false, 0, &changes);
  mirror.ApplyNeigh(DeletedOf(Fdb(2, 0xa1, 11)), false, 0, &changes);
  mirror.ApplyNeigh(Arp(2, 1, 0xa1), false, 77, &changes);  // put back: the flush is over
  mirror.ApplyNeigh(DeletedOf(Arp(2, 2, 0xa2)), false, 77, &changes);
  mirror.ApplyLink(Link(2, 9, false), false, &changes);  // down
  mirror.ApplyNeigh(DeletedOf(Arp(2, 3, 0xa3)), false, 0, &changes);
  EXPECT_EQ(changes.size(), size_t{7});
  EXPECT_TRUE(AsNeigh(changes[1]).cause == RemovalCause::kFlush);
  EXPECT_TRUE(AsNeigh(changes[2]).cause ==
              RemovalCause::kDeleted);  // FDB entries survive a MAC change
  EXPECT_TRUE(AsNeigh(changes[3]).kind == ChangeKind::kAdded);
  EXPECT_EQ(AsNeigh(changes[3]).portid, uint32_t{77});
  EXPECT_TRUE(AsNeigh(changes[4]).cause == RemovalCause::kDeleted);
  EXPECT_TRUE(AsNeigh(changes[6]).cause == RemovalCause::kFlush);
}

TEST_CASE("mirror: the kernel's removal of a permanent entry is a flush, MAC change or not") {
  // Any MAC write flushes, also one of the MAC the device has: its RTM_NEWLINK changes
  // nothing, and the RTM_DELNEIGHs that follow come from the kernel (port id 0) with the
  // entries still permanent. A process's delete makes the entry FAILED first, in its name.
  StateMirror mirror = ReadyMirror({Link(2, 1)}, {Arp(2, 1, 0xa1), Arp(2, 2, 0xa2)});
  std::vector<MirrorChange> changes;
  mirror.ApplyLink(Link(2, 1), false, &changes);  // the same MAC written again
  mirror.ApplyNeigh(DeletedOf(Arp(2, 1, 0xa1)), false, 0, &changes);
  mirror.ApplyNeigh(Arp(2, 2, 0xa2, NUD_FAILED), false, 55, &changes);  // ip neigh del
  mirror.ApplyNeigh(DeletedOf(Arp(2, 2, 0xa2, NUD_FAILED)), false, 0, &changes);
  EXPECT_EQ(changes.size(), size_t{3});
  EXPECT_TRUE(AsNeigh(changes[0]).cause == RemovalCause::kFlush);
  EXPECT_TRUE(AsNeigh(changes[2]).cause == RemovalCause::kDeleted);
}

TEST_CASE("mirror: a correction's own RTM_NEWLINK flushes nothing") {
  StateMirror mirror = ReadyMirror({Link(2, 1)}, {Arp(2, 1, 0xa1), Arp(2, 2, 0xa2)});
  std::vector<MirrorChange> changes;
  mirror.ApplyLink(Link(2, 9), false, &changes);  // the rewrite (it flushed)
  mirror.NoteCorrection(2, Mac(1).bytes);         // answered natively
  mirror.ApplyLink(Link(2, 1), false, &changes);  // the correction's echo
  mirror.ApplyNeigh(DeletedOf(Arp(2, 2, 0xa2)), false, 55, &changes);
  EXPECT_EQ(changes.size(), size_t{3});
  EXPECT_TRUE(AsNeigh(changes[2]).cause == RemovalCause::kDeleted);
  // The note is spent: the next MAC change flushes again.
  mirror.ApplyLink(Link(2, 8), false, &changes);
  mirror.ApplyNeigh(DeletedOf(Arp(2, 1, 0xa1)), false, 0, &changes);
  EXPECT_TRUE(AsNeigh(changes.back()).cause == RemovalCause::kFlush);
}

TEST_CASE("mirror: a correction's echo is marked only when it changes nothing but the MAC") {
  StateMirror mirror = ReadyMirror({Link(2, 1)}, {});
  std::vector<MirrorChange> changes;
  mirror.ApplyLink(Link(2, 9), false, &changes);
  mirror.NoteCorrection(2, Mac(1).bytes);
  mirror.ApplyLink(Link(2, 1), false, &changes);
  EXPECT_EQ(changes.size(), size_t{2});
  EXPECT_FALSE(AsLink(changes[0]).correctionEcho);  // the rewrite itself
  EXPECT_TRUE(AsLink(changes[1]).correctionEcho);
  // An echo that also went down, or was renamed, or came without a note, is a change of its own.
  mirror.ApplyLink(Link(2, 9), false, &changes);
  mirror.NoteCorrection(2, Mac(1).bytes);
  mirror.ApplyLink(Link(2, 1, false), false, &changes);
  EXPECT_FALSE(AsLink(changes.back()).correctionEcho);
  mirror.ApplyLink(Link(2, 9, false), false, &changes);
  mirror.NoteCorrection(2, Mac(1).bytes);
  mirror.ApplyLink(Link(2, 1, false, "other"), false, &changes);
  EXPECT_FALSE(AsLink(changes.back()).correctionEcho);
  mirror.ApplyLink(Link(2, 9, false, "other"), false, &changes);
  mirror.ApplyLink(Link(2, 1, false, "other"), false, &changes);
  EXPECT_FALSE(AsLink(changes.back()).correctionEcho);
  // A note for another MAC than the one seen is not this echo.
  mirror.ApplyLink(Link(2, 9, false, "other"), false, &changes);
  mirror.NoteCorrection(2, Mac(3).bytes);
  mirror.ApplyLink(Link(2, 1, false, "other"), false, &changes);
  EXPECT_FALSE(AsLink(changes.back()).correctionEcho);
}

TEST_CASE("mirror: a deleted device takes its entries, reported before it; others stay") {
  StateMirror mirror =
      ReadyMirror({Link(2, 1), Link(3, 2)}, {Arp(2, 1, 0xa1), Fdb(2, 0xa1, 11), Arp(3, 1, 0xb1)});
  std::vector<MirrorChange> changes;
  mirror.ApplyLink(Deleted(2), false, &changes);
  EXPECT_EQ(changes.size(), size_t{3});
  EXPECT_TRUE(AsNeigh(changes[0]).cause == RemovalCause::kDeviceRemoved);
  EXPECT_TRUE(AsNeigh(changes[1]).cause == RemovalCause::kDeviceRemoved);
  EXPECT_TRUE(AsLink(changes[2]).kind == ChangeKind::kRemoved);
  EXPECT_EQ(mirror.neighCount(), size_t{1});
}

TEST_CASE("mirror: a consistent resync removes what it did not see, an inconsistent one nothing") {
  StateMirror mirror =
      ReadyMirror({Link(2, 1), Link(3, 2)}, {Arp(2, 1, 0xa1), Arp(2, 2, 0xa2), Arp(3, 1, 0xb1)});
  std::vector<MirrorChange> changes;
  mirror.BeginResync();
  EXPECT_TRUE(mirror.resyncing());
  mirror.ApplyLink(Link(2, 1), true, &changes);
  mirror.ApplyNeigh(Arp(2, 1, 0xa1), true, 0, &changes);
  mirror.ApplyNeigh(Arp(2, 2, 0xa2), false, 9, &changes);  // a notification counts as seen
  mirror.EndResync(false, &changes);
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(mirror.linkCount(), size_t{2});
  mirror.BeginResync();
  mirror.ApplyLink(Link(2, 1), true, &changes);
  mirror.ApplyNeigh(Arp(2, 2, 0xa3), true, 0, &changes);
  mirror.EndResync(true, &changes);
  // 198.18.0.2 changed; device 3 and 198.18.0.1, 198.18.0.1@3 are gone.
  EXPECT_EQ(changes.size(), size_t{4});
  EXPECT_TRUE(AsNeigh(changes[0]).kind == ChangeKind::kChanged);
  EXPECT_TRUE(AsNeigh(changes[0]).fromDump);
  EXPECT_TRUE(AsLink(changes[1]).kind == ChangeKind::kRemoved);
  EXPECT_TRUE(AsNeigh(changes[2]).cause == RemovalCause::kResync);
  EXPECT_TRUE(AsNeigh(changes[3]).cause == RemovalCause::kResync);
  EXPECT_EQ(mirror.linkCount(), size_t{1});
  EXPECT_EQ(mirror.neighCount(), size_t{1});
}

TEST_CASE("mirror: keys - ARP by IP, FDB by MAC, remote and VNI; Forget is silent") {
  StateMirror mirror = ReadyMirror({Link(2, 1)}, {});
  std::vector<MirrorChange> changes;
  mirror.ApplyNeigh(Arp(2, 1, 0xa1), false, 0, &changes);
  mirror.ApplyNeigh(Arp(2, 1, 0xa2), false, 0, &changes);  // the same entry, another MAC
  mirror.ApplyNeigh(Fdb(2, 0xa1, 11), false, 0, &changes);
  mirror.ApplyNeigh(Fdb(2, 0xa1, 12), false, 0, &changes);  // another remote: another entry
  NeighRecord vni = Fdb(2, 0xa1, 12);
  vni.vni = 7;
  mirror.ApplyNeigh(vni, false, 0, &changes);
  EXPECT_EQ(mirror.neighCount(), size_t{4});
  EXPECT_TRUE(AsNeigh(changes[1]).kind == ChangeKind::kChanged);
  changes.clear();
  mirror.Forget(2);
  EXPECT_EQ(mirror.neighCount(), size_t{0});
  EXPECT_EQ(mirror.linkCount(), size_t{0});
}

TEST_CASE("mirror: a device's run of keys per family (VisitNeighsOf, HeldBy), seeded tables") {
  std::mt19937 random(20261207);
  const uint8_t families[] = {AF_INET, AF_INET6, AF_BRIDGE};
  // Indexes whose big-endian bytes share prefixes and straddle byte boundaries.
  const int32_t ifindexes[] = {1, 2, 255, 256, 257, 65536, 0x01000001};
  for (int round = 0; round < 200; ++round) {
    std::vector<NeighRecord> neighs;
    const size_t count = random() % 40;
    for (size_t i = 0; i < count; ++i) {
      NeighRecord neigh;
      neigh.family = families[random() % 3];
      neigh.ifindex = ifindexes[random() % 7];
      neigh.state = NUD_PERMANENT;
      neigh.destination.resize(neigh.family == AF_INET6 ? 16 : 4);
      for (uint8_t& byte : neigh.destination) byte = static_cast<uint8_t>(random() % 3);
      neigh.lladdr = Mac(static_cast<uint8_t>(random()));
      neighs.push_back(neigh);
    }
    const StateMirror mirror = ReadyMirror({}, neighs);
    fg::RestoreSet set;
    for (const auto& [key, neigh] : mirror.neighs()) {
      if (random() % 2 == 0) {
        set.Upsert(fg::RestoreEntryOf(neigh.record));
      }
    }
    for (const uint8_t family : families) {
      for (const int32_t ifindex : ifindexes) {
        std::vector<std::string> visited;
        mirror.VisitNeighsOf(family, ifindex, [&visited](const NeighRecord& neigh) {
          visited.push_back(fg::MirrorKey(neigh));
          return true;
        });
        std::vector<std::string> expected;
        for (const auto& [key, neigh] : mirror.neighs()) {
          if (neigh.record.family == family && neigh.record.ifindex == ifindex) {
            expected.push_back(key);
          }
        }
        EXPECT_EQ(visited, expected);
      }
    }
    // HeldBy says of each entry what a lookup of its record's key in the mirror says.
    for (const int32_t ifindex : ifindexes) {
      fg::RestoreSet device;
      for (const fg::netlink::NeighbourEntry& entry : set.entries()) {
        fg::netlink::NeighbourEntry placed = entry;
        placed.ifindex = ifindex;
        // FDB entries too (a restore set takes what it is given): held only at their MAC.
        if (random() % 4 == 0) placed.family = AF_BRIDGE;
        if (random() % 4 == 0) placed.lladdr[5] ^= 1;
        device.Upsert(placed);
      }
      const std::vector<bool> held = fg::HeldBy(mirror, ifindex, device);
      EXPECT_EQ(held.size(), device.size());
      for (size_t at = 0; at < device.size(); ++at) {
        const std::string key = fg::MirrorKey(fg::RecordOf(device.entries()[at]));
        EXPECT_EQ(bool(held[at]), mirror.neighs().count(key) > 0);
      }
    }
    // PositionOf finds each entry of the set where entries() has it, and nothing else.
    for (size_t at = 0; at < set.size(); ++at) {
      const fg::netlink::NeighbourEntry& entry = set.entries()[at];
      EXPECT_EQ(set.PositionOf(entry.family, entry.destination), std::optional<size_t>(at));
    }
    for (const NeighRecord& neigh : neighs) {
      const std::optional<size_t> at = set.PositionOf(neigh.family, neigh.destination);
      if (at) EXPECT_EQ(set.entries()[*at].destination, neigh.destination);
    }
  }
}

TEST_CASE("mirror: a restore set's Held is HeldBy's after any change to either, seeded") {
  std::mt19937 random(20261208);
  const int32_t ifindexes[] = {2, 3};
  for (int round = 0; round < 50; ++round) {
    StateMirror mirror = ReadyMirror({Link(2, 1), Link(3, 1)}, {});
    fg::RestoreSet set;
    std::vector<MirrorChange> changes;
    uint64_t versions = 0;  // how often the mirror's keys changed
    for (int step = 0; step < 60; ++step) {
      NeighRecord neigh = Arp(ifindexes[random() % 2], static_cast<uint8_t>(random() % 6),
                              static_cast<uint8_t>(random() % 3));
      if (random() % 3 == 0)
        neigh = Fdb(neigh.ifindex, neigh.lladdr.bytes[5], neigh.destination[3]);
      const uint64_t before = mirror.keysVersion();
      const std::map<std::string, StateMirror::Neigh> keysBefore = mirror.neighs();
      switch (random() % 8) {
        case 0:
        case 1:
          mirror.ApplyNeigh(neigh, false, 0, &changes);
          break;
        case 2:
          mirror.ApplyNeigh(DeletedOf(neigh), false, 0, &changes);
          break;
        case 3:
          set.Upsert(fg::RestoreEntryOf(neigh));
          break;
        case 4:
          set.Remove(fg::RestoreEntryOf(neigh));
          break;
        case 5:  // the device gone, all its entries at once, and made again
          mirror.ApplyLink(Deleted(neigh.ifindex), false, &changes);
          mirror.ApplyLink(Link(neigh.ifindex, 1), false, &changes);
          break;
        case 6:
          mirror.Forget(neigh.ifindex);
          break;
        case 7: {  // a consistent re-dump that finds some of the entries
          const std::map<std::string, StateMirror::Neigh> held = mirror.neighs();
          mirror.BeginResync();
          for (const int32_t ifindex : ifindexes)
            mirror.ApplyLink(Link(ifindex, 1), true, &changes);
          for (const auto& [key, kept] : held) {
            if (random() % 3 != 0) mirror.ApplyNeigh(kept.record, true, 0, &changes);
          }
          mirror.EndResync(true, &changes);
          break;
        }
      }
      // The version moves exactly when the keys do.
      const bool keysMoved =
          mirror.neighs().size() != keysBefore.size() ||
          !std::equal(keysBefore.begin(), keysBefore.end(), mirror.neighs().begin(),
                      [](const auto& a, const auto& b) { return a.first == b.first; });
      EXPECT_EQ(mirror.keysVersion() != before, keysMoved);
      if (keysMoved) ++versions;
      for (const int32_t ifindex : ifindexes) {
        EXPECT_TRUE(set.Held(mirror, ifindex) == fg::HeldBy(mirror, ifindex, set));
      }
    }
    EXPECT_TRUE(versions > 0);
  }
  // Two mirrors never share a version: a set asked of another mirror works it out again.
  const StateMirror one = ReadyMirror({}, {Arp(2, 1, 1)});
  const StateMirror other = ReadyMirror({}, {});
  fg::RestoreSet set;
  set.Upsert(fg::RestoreEntryOf(Arp(2, 1, 1)));
  EXPECT_TRUE(one.keysVersion() != other.keysVersion());
  EXPECT_TRUE(set.Held(one, 2)[0]);
  EXPECT_FALSE(set.Held(other, 2)[0]);
}

TEST_CASE("mirror: a visit stops when the visitor says so") {
  const StateMirror mirror = ReadyMirror({}, {Arp(2, 1, 1), Arp(2, 2, 2), Arp(2, 3, 3)});
  int visits = 0;
  mirror.VisitNeighsOf(AF_INET, 2, [&visits](const NeighRecord&) { return ++visits < 2; });
  EXPECT_EQ(visits, 2);
}

TEST_CASE("mirror: addr_assign_type is kept while the MAC is, forgotten when it changes") {
  StateMirror mirror = ReadyMirror({Link(2, 1)}, {});
  std::vector<MirrorChange> changes;
  mirror.SetAddrAssignType(2, Mac(1), 3);
  mirror.SetAddrAssignType(2, Mac(4), 1);  // read for another MAC: ignored
  EXPECT_EQ(mirror.FindLink(2)->addrAssignType, int16_t{3});
  LinkRecord mtu = Link(2, 1);
  mtu.mtu = 1450;
  mirror.ApplyLink(mtu, false, &changes);
  EXPECT_EQ(mirror.FindLink(2)->addrAssignType, int16_t{3});
  mirror.ApplyLink(Link(2, 5), false, &changes);
  EXPECT_EQ(mirror.FindLink(2)->addrAssignType, fg::kAddrAssignTypeUnread);
  EXPECT_EQ(AsLink(changes.back()).previousAddrAssignType, int16_t{3});
}

// The replica a consumer builds from the reported changes alone.
struct Replica {
  std::map<int32_t, std::string> links;       // ifindex -> name and MAC
  std::map<std::string, std::string> neighs;  // key -> lladdr and state

  static std::string Describe(const LinkRecord& link) {
    return link.name + "/" + std::to_string(link.mac.bytes[5]) + "/" + std::to_string(link.flags);
  }
  static std::string Describe(const NeighRecord& neigh) {
    return std::to_string(neigh.lladdr.bytes[5]) + "/" + std::to_string(neigh.state);
  }
  void Apply(std::vector<MirrorChange>& changes) {
    for (const MirrorChange& change : changes) {
      if (const auto* link = std::get_if<LinkChange>(&change)) {
        if (link->kind == ChangeKind::kAdded) EXPECT_EQ(links.count(link->link.ifindex), size_t{0});
        if (link->kind == ChangeKind::kRemoved) {
          EXPECT_EQ(links.erase(link->link.ifindex), size_t{1});
        } else {
          links[link->link.ifindex] = Describe(link->link);
        }
        continue;
      }
      const NeighChange& neigh = std::get<NeighChange>(change);
      const std::string key = fg::MirrorKey(neigh.neigh);
      if (neigh.kind == ChangeKind::kRemoved) {
        EXPECT_EQ(neighs.erase(key), size_t{1});
      } else {
        EXPECT_TRUE((neigh.kind == ChangeKind::kAdded) == (neighs.count(key) == 0));
        neighs[key] = Describe(neigh.neigh);
      }
    }
    changes.clear();
  }
  bool Matches(const StateMirror& mirror) const {
    if (links.size() != mirror.linkCount() || neighs.size() != mirror.neighCount()) return false;
    for (const auto& [ifindex, link] : mirror.links()) {
      auto found = links.find(ifindex);
      if (found == links.end() || found->second != Describe(link.record)) return false;
    }
    for (const auto& [key, neigh] : mirror.neighs()) {
      auto found = neighs.find(key);
      if (found == neighs.end() || found->second != Describe(neigh.record)) return false;
    }
    return true;
  }
};

TEST_CASE(
    "mirror: seeded random messages - the changes replayed give the mirror, which is the kernel") {
  std::mt19937 random(20261201);
  StateMirror mirror = ReadyMirror({}, {});
  Replica replica;
  // The kernel's state: what the mirror must hold once every message was read.
  std::map<int32_t, LinkRecord> kernelLinks;
  std::map<std::string, NeighRecord> kernelNeighs;
  std::vector<MirrorChange> changes;
  for (int step = 0; step < 20000; ++step) {
    const int32_t ifindex = 2 + static_cast<int32_t>(random() % 4);
    switch (random() % 12) {
      case 0:
      case 1:
      case 2: {
        LinkRecord link = Link(ifindex, static_cast<uint8_t>(random() % 4), random() % 4 != 0);
        kernelLinks[ifindex] = link;
        mirror.ApplyLink(link, false, &changes);
        break;
      }
      case 3:
        kernelLinks.erase(ifindex);
        for (auto it = kernelNeighs.begin(); it != kernelNeighs.end();) {
          it = it->second.ifindex == ifindex ? kernelNeighs.erase(it) : std::next(it);
        }
        mirror.ApplyLink(Deleted(ifindex), false, &changes);
        break;
      case 4:
      case 5:
      case 6:
      case 7: {
        NeighRecord neigh = random() % 3 == 0 ? Fdb(ifindex, static_cast<uint8_t>(random() % 3),
                                                    static_cast<uint8_t>(random() % 3))
                                              : Arp(ifindex, static_cast<uint8_t>(random() % 6),
                                                    static_cast<uint8_t>(random() % 3),
                                                    random() % 2 ? NUD_PERMANENT : NUD_REACHABLE);
        if (!kernelLinks.count(ifindex)) break;  // the kernel has no entries on a missing device
        kernelNeighs[fg::MirrorKey(neigh)] = neigh;
        mirror.ApplyNeigh(neigh, false, random() % 2, &changes);
        break;
      }
      case 8:
      case 9: {
        if (kernelNeighs.empty()) break;
        auto it = kernelNeighs.begin();
        std::advance(it, random() % kernelNeighs.size());
        mirror.ApplyNeigh(DeletedOf(it->second), false, 0, &changes);
        kernelNeighs.erase(it);
        break;
      }
      case 10: {
        // A resync after lost notifications: the kernel changed meanwhile (a device gone).
        if (!kernelLinks.empty() && random() % 2) {
          const int32_t gone = kernelLinks.begin()->first;
          kernelLinks.erase(gone);
          for (auto it = kernelNeighs.begin(); it != kernelNeighs.end();) {
            it = it->second.ifindex == gone ? kernelNeighs.erase(it) : std::next(it);
          }
        }
        mirror.BeginResync();
        for (const auto& [index, link] : kernelLinks) mirror.ApplyLink(link, true, &changes);
        for (const auto& [key, neigh] : kernelNeighs) mirror.ApplyNeigh(neigh, true, 0, &changes);
        mirror.EndResync(true, &changes);
        break;
      }
      default:
        mirror.ApplyLink(Link(ifindex, 1), true, &changes);  // a dump reply outside a resync
        kernelLinks[ifindex] = Link(ifindex, 1);
        break;
    }
    replica.Apply(changes);
    EXPECT_TRUE(replica.Matches(mirror));
    EXPECT_EQ(mirror.linkCount(), kernelLinks.size());
    EXPECT_EQ(mirror.neighCount(), kernelNeighs.size());
  }
}

}  // namespace
