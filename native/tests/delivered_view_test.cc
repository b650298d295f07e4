// Unit tests for native/delivered_view.cc: the mirror with the queued items'
// changes undone must be the mirror as it was when the last delivered item was
// read, whatever the history (seeded random histories over the real mirror).
#include "delivered_view.h"

#include <linux/if.h>
#include <linux/neighbour.h>
#include <sys/socket.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "mirror_records.h"
#include "test_harness.h"

namespace {

using fg::DeliveredView;
using fg::LinkChange;
using fg::LinkItem;
using fg::MirrorChange;
using fg::MonitorItem;
using fg::NeighChange;
using fg::NeighItem;
using fg::StateMirror;
using fg::ViewedLink;
using fg::netlink::LinkRecord;
using fg::netlink::NeighRecord;
using fg_test::records::Arp;
using fg_test::records::Deleted;
using fg_test::records::Link;

// What a view shows, as text: links (index, name, MAC) and entries (key, MAC).
std::string Shown(const std::vector<ViewedLink>& links,
                  const std::vector<const NeighRecord*>& neighs) {
  std::string text;
  for (const ViewedLink& link : links) {
    text += std::to_string(link.record.ifindex) + ":" + link.record.name + "@" +
            std::to_string(link.record.mac.bytes[5]) + " ";
  }
  for (const NeighRecord* neigh : neighs) {
    text += fg::MirrorKey(*neigh) + "@" + std::to_string(neigh->lladdr.bytes[5]) + " ";
  }
  return text;
}

std::string ShownMirror(const StateMirror& mirror) {
  std::vector<ViewedLink> links;
  for (const auto& [ifindex, link] : mirror.links()) links.push_back({link.record});
  std::vector<const NeighRecord*> neighs;
  for (const auto& [key, neigh] : mirror.neighs()) neighs.push_back(&neigh.record);
  return Shown(links, neighs);
}

MonitorItem ItemOf(const MirrorChange& change) {
  if (const auto* link = std::get_if<LinkChange>(&change)) {
    return LinkItem{link->link.ifindex, *link, std::nullopt, false, 1};
  }
  return NeighItem{std::get<NeighChange>(change)};
}

// One random message: a device added, renamed, re-addressed or deleted; an entry added,
// changed or deleted (a device's deletion takes its entries with it).
void RandomMessage(std::mt19937& random, StateMirror* mirror, std::vector<MirrorChange>* out) {
  const int32_t ifindex = 2 + static_cast<int32_t>(random() % 3);
  const uint8_t value = static_cast<uint8_t>(random() % 4);
  switch (random() % 5) {
    case 0:
    case 1: {
      // Names are unique, as the kernel keeps them; a rename moves between two.
      const std::string name = (random() % 2 == 0 ? "vx" : "flannel.") + std::to_string(ifindex);
      mirror->ApplyLink(Link(ifindex, value, true, name), false, out);
      return;
    }
    case 2: {
      mirror->ApplyLink(Deleted(ifindex), false, out);
      return;
    }
    default: {
      if (mirror->FindLink(ifindex) == nullptr) return;
      NeighRecord neigh = Arp(ifindex, static_cast<uint8_t>(random() % 3), value);
      neigh.deleted = random() % 3 == 0;
      mirror->ApplyNeigh(neigh, false, 0, out);
      return;
    }
  }
}

// The mirror after a dump of flannel.1 (ifindex 2, MAC ..:01) with one permanent entry.
void DumpOneDevice(StateMirror* mirror, std::vector<MirrorChange>* changes) {
  mirror->BeginResync();
  mirror->ApplyLink(Link(2, 1, true, "flannel.1"), true, changes);
  mirror->ApplyNeigh(Arp(2, 1, 7), true, 0, changes);
  mirror->EndResync(true, changes);
}

TEST_CASE("delivered view: with nothing queued it is the mirror") {
  StateMirror mirror;
  std::vector<MirrorChange> changes;
  DumpOneDevice(&mirror, &changes);
  const DeliveredView view(mirror, {});
  EXPECT_EQ(Shown(view.Links(), view.Neighbours(std::nullopt)), ShownMirror(mirror));
  EXPECT_EQ(view.LinkNamed("flannel.1")->record.ifindex, 2);
  EXPECT_FALSE(view.Link(2)->beforeQueued);
  EXPECT_FALSE(view.Link(3).has_value());
}

TEST_CASE("delivered view: a queued rewrite is not seen; its flush is not either") {
  StateMirror mirror;
  std::vector<MirrorChange> changes;
  DumpOneDevice(&mirror, &changes);
  mirror.ApplyLink(Link(2, 9, true, "flannel.1"), false, &changes);  // another writer's MAC
  NeighRecord flushed = Arp(2, 1, 7);
  flushed.deleted = true;
  mirror.ApplyNeigh(flushed, false, 0, &changes);
  EXPECT_EQ(changes.size(), size_t{2});
  std::vector<MonitorItem> items;
  for (const MirrorChange& change : changes) items.push_back(ItemOf(change));
  std::vector<const MonitorItem*> queued;
  for (const MonitorItem& item : items) queued.push_back(&item);
  const DeliveredView view(mirror, queued);
  EXPECT_EQ(view.Link(2)->record.mac.bytes[5], 1);
  EXPECT_TRUE(view.Link(2)->beforeQueued);
  EXPECT_EQ(view.Neighbours(2).size(), size_t{1});
  EXPECT_EQ(mirror.FindLink(2)->record.mac.bytes[5], 9);  // the mirror itself is ahead
  EXPECT_EQ(mirror.neighCount(), size_t{0});
}

TEST_CASE("delivered view: seeded histories: the view is the mirror as of the last item taken") {
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    std::mt19937 random(seed);
    StateMirror mirror;
    std::vector<MirrorChange> changes;
    mirror.BeginResync();
    mirror.ApplyLink(Link(2, 0, true, "vx2"), true, &changes);
    mirror.EndResync(true, &changes);
    const size_t delivered = random() % 12;
    const size_t total = delivered + random() % 12;
    for (size_t i = 0; i < delivered; ++i) RandomMessage(random, &mirror, &changes);
    const std::string expected = ShownMirror(mirror);
    changes.clear();
    for (size_t i = delivered; i < total; ++i) RandomMessage(random, &mirror, &changes);
    std::vector<MonitorItem> items;
    for (const MirrorChange& change : changes) items.push_back(ItemOf(change));
    std::vector<const MonitorItem*> queued;
    for (const MonitorItem& item : items) queued.push_back(&item);
    const DeliveredView view(mirror, queued);
    EXPECT_EQ(Shown(view.Links(), view.Neighbours(std::nullopt)), expected);
    for (int32_t ifindex = 2; ifindex <= 4; ++ifindex) {
      const std::optional<ViewedLink> link = view.Link(ifindex);
      std::vector<ViewedLink> one;
      if (link) one.push_back(*link);
      const std::string shown = Shown(one, view.Neighbours(ifindex));
      EXPECT_TRUE(link.has_value() ==
                  (expected.find(std::to_string(ifindex) + ":") != std::string::npos));
      if (link) EXPECT_EQ(view.LinkNamed(link->record.name)->record.name, link->record.name);
      EXPECT_TRUE(expected.find(shown.substr(0, shown.find(' '))) != std::string::npos ||
                  shown.empty());
    }
  }
}

}  // namespace
