#include "netlink_builder.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstring>

namespace fg::netlink {
namespace {

// Appends a header, a zeroed family struct and attributes to a buffer (which may
// already hold other requests), then fixes nlmsg_len.
class RequestWriter {
 public:
  RequestWriter(std::vector<uint8_t>* out, uint16_t type, uint16_t flags, uint32_t seq,
                size_t familyHeaderSize)
      : bytes_(*out), start_(out->size()) {
    nlmsghdr header{};
    header.nlmsg_type = type;
    header.nlmsg_flags = flags;
    header.nlmsg_seq = seq;
    Append(&header, sizeof(header));
    bytes_.resize(bytes_.size() + NLMSG_ALIGN(familyHeaderSize), 0);
  }

  template <typename T>
  T* FamilyHeader() {
    return reinterpret_cast<T*>(bytes_.data() + start_ + sizeof(nlmsghdr));
  }

  void Attribute(uint16_t type, const void* payload, size_t length) {
    rtattr attribute{};
    attribute.rta_len = static_cast<uint16_t>(RTA_LENGTH(length));
    attribute.rta_type = type;
    Append(&attribute, sizeof(attribute));
    Append(payload, length);
    bytes_.resize(start_ + NLMSG_ALIGN(bytes_.size() - start_), 0);
  }

  void Finish() {
    const uint32_t length = static_cast<uint32_t>(bytes_.size() - start_);
    std::memcpy(bytes_.data() + start_, &length, sizeof(length));
  }

 private:
  void Append(const void* data, size_t length) {
    const size_t at = bytes_.size();
    bytes_.resize(at + length);
    std::memcpy(bytes_.data() + at, data, length);
  }

  std::vector<uint8_t>& bytes_;
  size_t start_;
};

// One request in a buffer of its own.
template <typename Fill>
std::vector<uint8_t> Build(uint16_t type, uint16_t flags, uint32_t seq, size_t familyHeaderSize,
                           Fill fill) {
  std::vector<uint8_t> bytes;
  RequestWriter writer(&bytes, type, flags, seq, familyHeaderSize);
  fill(writer);
  writer.Finish();
  return bytes;
}

}  // namespace

std::vector<uint8_t> BuildDumpRequest(uint16_t type, uint8_t family, uint32_t seq) {
  const bool link = type == RTM_GETLINK;
  return Build(type, NLM_F_REQUEST | NLM_F_DUMP, seq, link ? sizeof(ifinfomsg) : sizeof(ndmsg),
               [&](RequestWriter& writer) {
                 if (link) {
                   writer.FamilyHeader<ifinfomsg>()->ifi_family = family;
                   // Statistics are a third of every link message and are never used here.
                   const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
                   writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
                 } else {
                   writer.FamilyHeader<ndmsg>()->ndm_family = family;
                 }
               });
}

std::vector<uint8_t> BuildGetLinkRequest(int32_t ifindex, uint32_t seq) {
  return Build(RTM_GETLINK, NLM_F_REQUEST, seq, sizeof(ifinfomsg), [&](RequestWriter& writer) {
    writer.FamilyHeader<ifinfomsg>()->ifi_index = ifindex;
    const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
    writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
  });
}

std::vector<uint8_t> BuildGetLinkByNameRequest(const std::string& name, uint32_t seq) {
  return Build(RTM_GETLINK, NLM_F_REQUEST, seq, sizeof(ifinfomsg), [&](RequestWriter& writer) {
    const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
    writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
    const std::string bounded = name.substr(0, IFNAMSIZ - 1);
    writer.Attribute(IFLA_IFNAME, bounded.c_str(), bounded.size() + 1);  // with its NUL
  });
}

std::vector<uint8_t> BuildSetLinkAddressRequest(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                                uint32_t seq) {
  return Build(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, sizeof(ifinfomsg),
               [&](RequestWriter& writer) {
                 writer.FamilyHeader<ifinfomsg>()->ifi_index = ifindex;
                 writer.Attribute(IFLA_ADDRESS, mac.data(), mac.size());
               });
}

std::vector<uint8_t> BuildNoopSetLinkRequest(uint32_t seq) {
  return Build(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, sizeof(ifinfomsg),
               [](RequestWriter& writer) { writer.FamilyHeader<ifinfomsg>()->ifi_index = 1; });
}

namespace {
// The entry as ndmsg and attributes: what RTM_NEWNEIGH writes and RTM_DELNEIGH names.
void AppendNeighbourRequest(std::vector<uint8_t>* out, uint16_t type, uint16_t flags,
                            const NeighbourEntry& entry, uint32_t seq) {
  RequestWriter writer(out, type, flags, seq, sizeof(ndmsg));
  auto* header = writer.FamilyHeader<ndmsg>();
  header->ndm_family = entry.family;
  header->ndm_ifindex = entry.ifindex;
  header->ndm_state = entry.state;
  header->ndm_flags = entry.flags;
  if (!entry.destination.empty()) {
    writer.Attribute(NDA_DST, entry.destination.data(), entry.destination.size());
  }
  writer.Attribute(NDA_LLADDR, entry.lladdr.data(), entry.lladdr.size());
  writer.Finish();
}
}  // namespace

void AppendNeighbourReplaceRequest(std::vector<uint8_t>* out, const NeighbourEntry& entry,
                                   uint32_t seq, bool ack) {
  const uint16_t flags =
      NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | (ack ? NLM_F_ACK : uint16_t{0});
  AppendNeighbourRequest(out, RTM_NEWNEIGH, flags, entry, seq);
}

std::vector<uint8_t> BuildNeighbourReplaceRequest(const NeighbourEntry& entry, uint32_t seq) {
  std::vector<uint8_t> bytes;
  AppendNeighbourReplaceRequest(&bytes, entry, seq, true);
  return bytes;
}

std::vector<uint8_t> BuildNeighbourDeleteRequest(const NeighbourEntry& entry, uint32_t seq) {
  std::vector<uint8_t> bytes;
  AppendNeighbourRequest(&bytes, RTM_DELNEIGH, NLM_F_REQUEST | NLM_F_ACK, entry, seq);
  return bytes;
}

}  // namespace fg::netlink
