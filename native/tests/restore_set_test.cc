// Unit tests for native/restore_set.cc: the list and its index stay in step
// through assignments, upserts and removals (a seeded random run checks them
// against a plain map after every step).
#include "restore_set.h"

#include <sys/socket.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "test_harness.h"

namespace {

using fg::RestoreSet;
using fg::netlink::NeighbourEntry;

NeighbourEntry Entry(uint8_t last, uint8_t mac, uint8_t family = AF_INET) {
  NeighbourEntry entry;
  entry.family = family;
  entry.ifindex = 3;
  entry.destination =
      family == AF_INET ? std::vector<uint8_t>{198, 18, 0, last} : std::vector<uint8_t>(16, last);
  entry.lladdr = {0x0e, 0, 0, 0, 0, mac};
  return entry;
}

// destination's last byte -> lladdr's last byte, as the set holds them.
std::map<std::string, uint8_t> Contents(const RestoreSet& set) {
  std::map<std::string, uint8_t> contents;
  for (const NeighbourEntry& entry : set.entries()) {
    const bool added =
        contents
            .emplace(std::to_string(entry.family) + "/" + std::to_string(entry.destination.back()),
                     entry.lladdr[5])
            .second;
    EXPECT_TRUE(added);  // no key twice
  }
  return contents;
}

TEST_CASE("restore set: upsert replaces by family and destination, remove swaps the last in") {
  RestoreSet set;
  set.Assign({Entry(1, 1), Entry(2, 2), Entry(3, 3), Entry(1, 9, AF_INET6)});
  EXPECT_EQ(set.size(), size_t{4});
  set.Upsert(Entry(2, 20));
  EXPECT_EQ(set.size(), size_t{4});
  EXPECT_EQ(Contents(set).at("2/2"), 20);
  EXPECT_TRUE(set.Remove(Entry(1, 0)));  // the lladdr does not matter
  EXPECT_FALSE(set.Remove(Entry(1, 0)));
  EXPECT_EQ(set.size(), size_t{3});
  EXPECT_EQ(Contents(set).count("2/1"), size_t{0});
  EXPECT_EQ(Contents(set).at("10/1"), 9);  // the IPv6 entry with the same last byte stays
  set.Upsert(Entry(3, 30));
  EXPECT_EQ(Contents(set).at("2/3"), 30);
}

TEST_CASE("restore set: assign replaces everything, a repeated key once (the last wins)") {
  RestoreSet set;
  set.Assign({Entry(1, 1), Entry(2, 2)});
  set.Assign({Entry(5, 5), Entry(5, 6)});
  EXPECT_EQ(set.size(), size_t{1});
  EXPECT_EQ(Contents(set).at("2/5"), 6);
  EXPECT_FALSE(set.Remove(Entry(1, 1)));
}

TEST_CASE("restore set: seeded random steps agree with a plain map") {
  std::mt19937 random(1201);
  RestoreSet set;
  std::map<std::string, uint8_t> model;
  for (int step = 0; step < 20000; ++step) {
    const uint8_t last = static_cast<uint8_t>(random() % 64);
    const uint8_t family = random() % 4 == 0 ? AF_INET6 : AF_INET;
    const std::string key = std::to_string(family) + "/" + std::to_string(last);
    const uint8_t mac = static_cast<uint8_t>(random());
    switch (random() % 10) {
      case 0: {
        std::vector<NeighbourEntry> entries;
        model.clear();
        for (int i = 0, n = static_cast<int>(random() % 20); i < n; ++i) {
          const uint8_t l = static_cast<uint8_t>(random() % 64);
          const uint8_t m = static_cast<uint8_t>(random());
          entries.push_back(Entry(l, m));
          model[std::to_string(AF_INET) + "/" + std::to_string(l)] = m;
        }
        set.Assign(std::move(entries));
        break;
      }
      case 1:
      case 2:
      case 3:
      case 4:
        EXPECT_EQ(set.Remove(Entry(last, mac, family)), model.erase(key) == 1);
        break;
      default:
        set.Upsert(Entry(last, mac, family));
        model[key] = mac;
        break;
    }
    EXPECT_TRUE(Contents(set) == model);
  }
}

}  // namespace
