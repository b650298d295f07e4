// libFuzzer target for native/state_mirror.cc: a run of operations on one mirror.
//
// The input is a sequence of chunks, each [op: 1 byte][length: 2 bytes LE][payload]:
//   op % 6 == 0, 1: the payload as a datagram (a notification; a dump reply for 1) - when
//                   nothing parses, again with its first nlmsg_len clamped to the payload so
//                   random bytes reach the decoders; every link and neighbour record in it is
//                   applied with the message's port id;
//   op % 6 == 2:    a resync begins;
//   op % 6 == 3:    it ends, consistent when the payload's first byte is odd;
//   op % 6 == 4:    a correction is noted (payload: ifindex byte, 6 MAC bytes);
//   op % 6 == 5:    a device is forgotten (payload: ifindex byte).
// After every operation the mirror's promises are checked, and a trap (a crash libFuzzer
// records with its input) marks a broken one:
//   - a replica built only from the reported changes equals the mirror (once it is ready): an
//     `added` is for an unknown key, a `removed` for a known one, a `changed` carries the
//     previous state the replica had;
//   - its counts, its lookups by index and by name, and its ordering agree with its contents.
//
// Seeds: native/fuzz/corpus/mirror/ (real datagrams of the netlink corpus, framed).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "netlink_parser.h"
#include "state_mirror.h"

namespace {

using fg::ChangeKind;
using fg::LinkChange;
using fg::MirrorChange;
using fg::NeighChange;
using fg::StateMirror;
using fg::netlink::LinkRecord;
using fg::netlink::NeighRecord;

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

struct Replica {
  std::map<int32_t, LinkRecord> links;
  std::map<std::string, NeighRecord> neighs;

  void Apply(const std::vector<MirrorChange>& changes) {
    for (const MirrorChange& change : changes) {
      if (const auto* link = std::get_if<LinkChange>(&change)) {
        const auto found = links.find(link->link.ifindex);
        switch (link->kind) {
          case ChangeKind::kAdded:
            Check(found == links.end());
            links.emplace(link->link.ifindex, link->link);
            break;
          case ChangeKind::kChanged:
            Check(found != links.end() && link->previous &&
                  fg::SameLink(found->second, *link->previous));
            found->second = link->link;
            break;
          case ChangeKind::kRemoved:
            Check(found != links.end());
            links.erase(found);
            break;
        }
        continue;
      }
      const NeighChange& neigh = std::get<NeighChange>(change);
      const std::string key = fg::MirrorKey(neigh.neigh);
      const auto found = neighs.find(key);
      switch (neigh.kind) {
        case ChangeKind::kAdded:
          Check(found == neighs.end());
          neighs.emplace(key, neigh.neigh);
          break;
        case ChangeKind::kChanged:
          Check(found != neighs.end() && neigh.previous &&
                fg::SameNeigh(found->second, *neigh.previous));
          found->second = neigh.neigh;
          break;
        case ChangeKind::kRemoved:
          Check(found != neighs.end());
          neighs.erase(found);
          break;
      }
    }
  }

  void Load(const StateMirror& mirror) {
    links.clear();
    neighs.clear();
    for (const auto& [ifindex, link] : mirror.links()) links.emplace(ifindex, link.record);
    for (const auto& [key, neigh] : mirror.neighs()) neighs.emplace(key, neigh.record);
  }

  void Matches(const StateMirror& mirror) const {
    Check(links.size() == mirror.linkCount() && neighs.size() == mirror.neighCount());
    for (const auto& [ifindex, link] : mirror.links()) {
      const auto found = links.find(ifindex);
      Check(found != links.end() && fg::SameLink(found->second, link.record));
      Check(link.record.ifindex == ifindex && mirror.FindLink(ifindex) == &link);
      const StateMirror::Link* byName = mirror.FindLinkByName(link.record.name);
      Check(byName != nullptr && byName->record.name == link.record.name);
    }
    for (const auto& [key, neigh] : mirror.neighs()) {
      const auto found = neighs.find(key);
      Check(found != neighs.end() && fg::SameNeigh(found->second, neigh.record));
      Check(fg::MirrorKey(neigh.record) == key);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return -1;
  StateMirror mirror;
  Replica replica;
  std::vector<MirrorChange> changes;
  size_t at = 0;
  for (int operations = 0; at + 3 <= size && operations < 256; ++operations) {
    const uint8_t op = data[at] % 6;
    size_t length = static_cast<size_t>(data[at + 1]) | (static_cast<size_t>(data[at + 2]) << 8);
    at += 3;
    length = std::min(length, size - at);
    std::vector<uint8_t> payload(data + at, data + at + length);
    at += length;
    const bool wasReady = mirror.ready();
    switch (op) {
      case 0:
      case 1: {
        fg::netlink::ParsedDatagram parsed =
            fg::netlink::ParseDatagram(payload.data(), payload.size());
        if (parsed.messages.empty() && payload.size() >= sizeof(uint32_t)) {
          const uint32_t clamped = static_cast<uint32_t>(payload.size());
          std::memcpy(payload.data(), &clamped, sizeof(clamped));
          parsed = fg::netlink::ParseDatagram(payload.data(), payload.size());
        }
        for (fg::netlink::Message& message : parsed.messages) {
          if (auto* link = std::get_if<LinkRecord>(&message.body)) {
            mirror.ApplyLink(std::move(*link), op == 1, &changes);
          } else if (auto* neigh = std::get_if<NeighRecord>(&message.body)) {
            mirror.ApplyNeigh(std::move(*neigh), op == 1, message.portid, &changes);
          }
        }
        break;
      }
      case 2:
        mirror.BeginResync();
        Check(mirror.resyncing());
        break;
      case 3:
        mirror.EndResync(!payload.empty() && (payload[0] & 1) != 0, &changes);
        Check(mirror.ready() && !mirror.resyncing());
        break;
      case 4:
        if (payload.size() >= 7) {
          std::array<uint8_t, 6> mac{};
          std::memcpy(mac.data(), payload.data() + 1, mac.size());
          mirror.NoteCorrection(payload[0], mac);
        }
        break;
      default:
        if (!payload.empty()) {
          mirror.Forget(payload[0]);
          replica.Load(mirror);  // silent by design
        }
        break;
    }
    // Nothing is reported before ready; from then on the changes tell the whole story.
    if (!wasReady) {
      Check(changes.empty());
      if (mirror.ready()) replica.Load(mirror);
    } else {
      replica.Apply(changes);
    }
    changes.clear();
    if (mirror.ready()) replica.Matches(mirror);
  }
  return 0;
}
