#include "netlink_builder.h"

#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace fg::netlink {
namespace {

// Appends a header, a zeroed family struct and attributes to a buffer (which may
// already hold other requests). The request is sized once, up front, from the
// attributes' payload lengths: one zeroed resize, then the fields written in place.
class RequestWriter {
 public:
  RequestWriter(std::vector<uint8_t>* out, uint16_t type, uint16_t flags, uint32_t seq,
                size_t familyHeaderSize, std::initializer_list<size_t> attributeLengths)
      : bytes_(*out), start_(out->size()) {
    size_t length = NLMSG_HDRLEN + NLMSG_ALIGN(familyHeaderSize);
    for (size_t attributeLength : attributeLengths) length += RTA_SPACE(attributeLength);
    bytes_.resize(start_ + length);
    nlmsghdr header{};
    header.nlmsg_len = static_cast<uint32_t>(length);
    header.nlmsg_type = type;
    header.nlmsg_flags = flags;
    header.nlmsg_seq = seq;
    std::memcpy(bytes_.data() + start_, &header, sizeof(header));
    cursor_ = start_ + NLMSG_HDRLEN + NLMSG_ALIGN(familyHeaderSize);
  }

  template <typename T>
  T* FamilyHeader() {
    return reinterpret_cast<T*>(bytes_.data() + start_ + NLMSG_HDRLEN);
  }

  // In the order, and with the lengths, the constructor was given: anything else is this
  // file's bug, stopped before it writes past the request.
  void Attribute(uint16_t type, const void* payload, size_t length) {
    if (cursor_ + RTA_SPACE(length) > bytes_.size()) std::abort();
    rtattr attribute{};
    attribute.rta_len = static_cast<uint16_t>(RTA_LENGTH(length));
    attribute.rta_type = type;
    std::memcpy(bytes_.data() + cursor_, &attribute, sizeof(attribute));
    std::memcpy(bytes_.data() + cursor_ + RTA_LENGTH(0), payload, length);
    cursor_ += RTA_SPACE(length);
  }

 private:
  std::vector<uint8_t>& bytes_;
  size_t start_;
  size_t cursor_;
};

// One request in a buffer of its own.
template <typename Fill>
std::vector<uint8_t> Build(uint16_t type, uint16_t flags, uint32_t seq, size_t familyHeaderSize,
                           std::initializer_list<size_t> attributeLengths, Fill fill) {
  std::vector<uint8_t> bytes;
  RequestWriter writer(&bytes, type, flags, seq, familyHeaderSize, attributeLengths);
  fill(writer);
  return bytes;
}

}  // namespace

std::vector<uint8_t> BuildDumpRequest(uint16_t type, uint8_t family, uint32_t seq) {
  const bool link = type == RTM_GETLINK;
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  return Build(type, NLM_F_REQUEST | NLM_F_DUMP, seq, link ? sizeof(ifinfomsg) : sizeof(ndmsg),
               link ? std::initializer_list<size_t>{sizeof(mask)} : std::initializer_list<size_t>{},
               [&](RequestWriter& writer) {
                 if (link) {
                   writer.FamilyHeader<ifinfomsg>()->ifi_family = family;
                   // Statistics are a third of every link message and are never used here.
                   writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
                 } else {
                   writer.FamilyHeader<ndmsg>()->ndm_family = family;
                 }
               });
}

std::vector<uint8_t> BuildGetLinkRequest(int32_t ifindex, uint32_t seq) {
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  return Build(RTM_GETLINK, NLM_F_REQUEST, seq, sizeof(ifinfomsg), {sizeof(mask)},
               [&](RequestWriter& writer) {
                 writer.FamilyHeader<ifinfomsg>()->ifi_index = ifindex;
                 writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
               });
}

std::vector<uint8_t> BuildGetLinkByNameRequest(const std::string& name, uint32_t seq) {
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  const std::string bounded = name.substr(0, IFNAMSIZ - 1);
  return Build(RTM_GETLINK, NLM_F_REQUEST, seq, sizeof(ifinfomsg),
               {sizeof(mask), bounded.size() + 1}, [&](RequestWriter& writer) {
                 writer.Attribute(IFLA_EXT_MASK, &mask, sizeof(mask));
                 writer.Attribute(IFLA_IFNAME, bounded.c_str(), bounded.size() + 1);  // its NUL
               });
}

std::vector<uint8_t> BuildSetLinkAddressRequest(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                                uint32_t seq, bool ack) {
  const uint16_t flags = NLM_F_REQUEST | (ack ? NLM_F_ACK : uint16_t{0});
  return Build(RTM_NEWLINK, flags, seq, sizeof(ifinfomsg), {mac.size()},
               [&](RequestWriter& writer) {
                 writer.FamilyHeader<ifinfomsg>()->ifi_index = ifindex;
                 writer.Attribute(IFLA_ADDRESS, mac.data(), mac.size());
               });
}

std::vector<uint8_t> BuildNoopSetLinkRequest(uint32_t seq) {
  return Build(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, seq, sizeof(ifinfomsg), {},
               [](RequestWriter& writer) { writer.FamilyHeader<ifinfomsg>()->ifi_index = 1; });
}

namespace {
// The entry as ndmsg and attributes: what RTM_NEWNEIGH writes and RTM_DELNEIGH names.
void AppendNeighbourRequest(std::vector<uint8_t>* out, uint16_t type, uint16_t flags,
                            const NeighbourEntry& entry, uint32_t seq) {
  const bool destination = !entry.destination.empty();
  RequestWriter writer(
      out, type, flags, seq, sizeof(ndmsg),
      destination ? std::initializer_list<size_t>{entry.destination.size(), entry.lladdr.size()}
                  : std::initializer_list<size_t>{entry.lladdr.size()});
  auto* header = writer.FamilyHeader<ndmsg>();
  header->ndm_family = entry.family;
  header->ndm_ifindex = entry.ifindex;
  header->ndm_state = entry.state;
  header->ndm_flags = entry.flags;
  if (destination) writer.Attribute(NDA_DST, entry.destination.data(), entry.destination.size());
  writer.Attribute(NDA_LLADDR, entry.lladdr.data(), entry.lladdr.size());
}
}  // namespace

void AppendNeighbourReplaceRequest(std::vector<uint8_t>* out, const NeighbourEntry& entry,
                                   uint32_t seq, bool ack) {
  const uint16_t flags =
      NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | (ack ? NLM_F_ACK : uint16_t{0});
  AppendNeighbourRequest(out, RTM_NEWNEIGH, flags, entry, seq);
}

void RequestAck(std::vector<uint8_t>* bytes, size_t offset) {
  nlmsghdr header;
  std::memcpy(&header, bytes->data() + offset, sizeof(header));
  header.nlmsg_flags |= NLM_F_ACK;
  std::memcpy(bytes->data() + offset, &header, sizeof(header));
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
