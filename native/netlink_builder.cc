#include "netlink_builder.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstring>

namespace fg::netlink {
namespace {

// Appends a header, a zeroed family struct and attributes, then fixes nlmsg_len.
class RequestWriter {
 public:
  RequestWriter(uint16_t type, uint16_t flags, uint32_t seq, size_t familyHeaderSize) {
    nlmsghdr header{};
    header.nlmsg_type = type;
    header.nlmsg_flags = flags;
    header.nlmsg_seq = seq;
    Append(&header, sizeof(header));
    bytes_.resize(bytes_.size() + NLMSG_ALIGN(familyHeaderSize), 0);
  }

  template <typename T>
  T* FamilyHeader() {
    return reinterpret_cast<T*>(bytes_.data() + sizeof(nlmsghdr));
  }

  void Attribute(uint16_t type, const void* payload, size_t length) {
    rtattr attribute{};
    attribute.rta_len = static_cast<uint16_t>(RTA_LENGTH(length));
    attribute.rta_type = type;
    Append(&attribute, sizeof(attribute));
    Append(payload, length);
    bytes_.resize(NLMSG_ALIGN(bytes_.size()), 0);
  }

  std::vector<uint8_t> Finish() {
    const uint32_t length = static_cast<uint32_t>(bytes_.size());
    std::memcpy(bytes_.data(), &length, sizeof(length));
    return std::move(bytes_);
  }

 private:
  void Append(const void* data, size_t length) {
    const auto* begin = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), begin, begin + length);
  }

  std::vector<uint8_t> bytes_;
};

}  // namespace

std::vector<uint8_t> BuildDumpRequest(uint16_t type, uint8_t family, uint32_t seq) {
  const bool link = type == RTM_GETLINK;
  RequestWriter writer(type, NLM_F_REQUEST | NLM_F_DUMP, seq,
                       link ? sizeof(ifinfomsg) : sizeof(ndmsg));
  if (link) {
    writer.FamilyHeader<ifinfomsg>()->ifi_family = family;
    // Statistics are a third of every link message and are never used here.
    const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
    writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
  } else {
    writer.FamilyHeader<ndmsg>()->ndm_family = family;
  }
  return writer.Finish();
}

std::vector<uint8_t> BuildGetLinkRequest(int32_t ifindex, uint32_t seq) {
  RequestWriter writer(RTM_GETLINK, NLM_F_REQUEST, seq, sizeof(ifinfomsg));
  writer.FamilyHeader<ifinfomsg>()->ifi_index = ifindex;
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
  return writer.Finish();
}

std::vector<uint8_t> BuildGetLinkByNameRequest(const std::string& name, uint32_t seq) {
  RequestWriter writer(RTM_GETLINK, NLM_F_REQUEST, seq, sizeof(ifinfomsg));
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
  const std::string bounded = name.substr(0, IFNAMSIZ - 1);
  writer.Attribute(IFLA_IFNAME, bounded.c_str(), bounded.size() + 1);  // with its NUL
  return writer.Finish();
}

std::vector<uint8_t> BuildSetLinkAddressRequest(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                                uint32_t seq) {
  RequestWriter writer(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, sizeof(ifinfomsg));
  writer.FamilyHeader<ifinfomsg>()->ifi_index = ifindex;
  writer.Attribute(IFLA_ADDRESS, mac.data(), mac.size());
  return writer.Finish();
}

std::vector<uint8_t> BuildNoopSetLinkRequest(uint32_t seq) {
  RequestWriter writer(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, sizeof(ifinfomsg));
  writer.FamilyHeader<ifinfomsg>()->ifi_index = 1;
  return writer.Finish();
}

std::vector<uint8_t> BuildNeighbourReplaceRequest(const NeighbourEntry& entry, uint32_t seq) {
  RequestWriter writer(RTM_NEWNEIGH, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, seq,
                       sizeof(ndmsg));
  auto* header = writer.FamilyHeader<ndmsg>();
  header->ndm_family = entry.family;
  header->ndm_ifindex = entry.ifindex;
  header->ndm_state = entry.state;
  header->ndm_flags = entry.flags;
  if (!entry.destination.empty()) {
    writer.Attribute(NDA_DST, entry.destination.data(), entry.destination.size());
  }
  writer.Attribute(NDA_LLADDR, entry.lladdr.data(), entry.lladdr.size());
  return writer.Finish();
}

}  // namespace fg::netlink
