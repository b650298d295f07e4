#include "netlink_parser.h"

#include <arpa/inet.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace fg::netlink {
namespace {

constexpr size_t kHeaderSize = sizeof(nlmsghdr);
constexpr size_t kMaxNameBytes = 15;  // IFNAMSIZ - 1
constexpr size_t kMaxKindBytes = 32;
constexpr uint32_t kAlign = NLMSG_ALIGNTO;

static_assert(sizeof(nlmsghdr) == 16, "nlmsghdr layout");
static_assert(sizeof(ifinfomsg) == 16, "ifinfomsg layout");
static_assert(sizeof(ndmsg) == 12, "ndmsg layout");
static_assert(sizeof(nlmsgerr) == 20, "nlmsgerr layout");
static_assert(sizeof(rtattr) == 4 && sizeof(nlattr) == 4, "attribute header layout");

constexpr size_t Align(size_t length) { return (length + kAlign - 1) & ~size_t{kAlign - 1}; }

template <typename T>
T Load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

// One attribute: its type with the nested/byte-order bits stripped, and its payload.
struct Attribute {
  uint16_t type;
  const uint8_t* payload;
  size_t length;
};

// Walks a TLV stream. `Next` returns false at the end; `broken()` tells whether
// it stopped on a malformed attribute rather than at the end of the bytes.
class AttributeReader {
 public:
  AttributeReader(const uint8_t* data, size_t length) : data_(data), remaining_(length) {}

  bool Next(Attribute* attribute) {
    if (remaining_ == 0) return false;
    if (remaining_ < sizeof(nlattr)) {
      broken_ = true;
      return false;
    }
    const uint16_t declared = Load<uint16_t>(data_);
    const uint16_t type = Load<uint16_t>(data_ + 2);
    if (declared < sizeof(nlattr) || declared > remaining_) {
      broken_ = true;
      return false;
    }
    attribute->type = type & NLA_TYPE_MASK;
    attribute->payload = data_ + sizeof(nlattr);
    attribute->length = declared - sizeof(nlattr);
    const size_t step = Align(declared);
    if (step >= remaining_) {
      remaining_ = 0;  // the last attribute may omit its padding
    } else {
      data_ += step;
      remaining_ -= step;
    }
    return true;
  }

  bool broken() const { return broken_; }

 private:
  const uint8_t* data_;
  size_t remaining_;
  bool broken_ = false;
};

template <typename T>
std::optional<T> ReadScalar(const Attribute& attribute) {
  if (attribute.length < sizeof(T)) return std::nullopt;
  return Load<T>(attribute.payload);
}

// A string attribute, cut at the first NUL or at the attribute's end, whichever
// comes first, and at `limit` bytes. Sets *tooLong when bytes were dropped.
std::string ReadString(const Attribute& attribute, size_t limit, bool* tooLong) {
  const void* nul = std::memchr(attribute.payload, '\0', attribute.length);
  size_t length = nul ? static_cast<size_t>(static_cast<const uint8_t*>(nul) - attribute.payload)
                      : attribute.length;
  if (length > limit) {
    if (tooLong) *tooLong = true;
    length = limit;
  }
  return std::string(reinterpret_cast<const char*>(attribute.payload), length);
}

MacField ReadMac(const Attribute& attribute) {
  MacField field;
  if (attribute.length == field.bytes.size()) {
    field.state = MacField::State::kValid;
    std::memcpy(field.bytes.data(), attribute.payload, field.bytes.size());
  } else {
    field.state = MacField::State::kBadLength;
    field.length = static_cast<uint16_t>(attribute.length);
  }
  return field;
}

std::vector<uint8_t> ReadAddress(const Attribute& attribute) {
  if (attribute.length != 4 && attribute.length != 16) return {};
  return std::vector<uint8_t>(attribute.payload, attribute.payload + attribute.length);
}

bool ParseVxlan(const Attribute& data, VxlanInfo* vxlan) {
  AttributeReader reader(data.payload, data.length);
  Attribute attribute;
  while (reader.Next(&attribute)) {
    switch (attribute.type) {
      case IFLA_VXLAN_ID:
        vxlan->vni = ReadScalar<uint32_t>(attribute);
        break;
      case IFLA_VXLAN_PORT:
        if (auto port = ReadScalar<uint16_t>(attribute)) vxlan->port = ntohs(*port);
        break;
      case IFLA_VXLAN_LOCAL:
      case IFLA_VXLAN_LOCAL6:
        vxlan->local = ReadAddress(attribute);
        break;
      case IFLA_VXLAN_LINK:
        vxlan->underlayIfindex = ReadScalar<uint32_t>(attribute);
        break;
      case IFLA_VXLAN_LEARNING:
        if (auto learning = ReadScalar<uint8_t>(attribute)) vxlan->learning = *learning != 0;
        break;
      default:
        break;
    }
  }
  return !reader.broken();
}

bool ParseLinkInfo(const Attribute& linkinfo, LinkRecord* link) {
  // A later IFLA_LINKINFO replaces an earlier one entirely.
  link->kind.clear();
  link->vxlan.reset();
  AttributeReader reader(linkinfo.payload, linkinfo.length);
  Attribute attribute;
  std::optional<Attribute> data;
  while (reader.Next(&attribute)) {
    if (attribute.type == IFLA_INFO_KIND) {
      link->kind = ReadString(attribute, kMaxKindBytes, nullptr);
    } else if (attribute.type == IFLA_INFO_DATA) {
      data = attribute;
    }
  }
  if (reader.broken()) return false;
  // IFLA_INFO_DATA's layout depends on the kind, which may come after it.
  if (data && link->kind == "vxlan") {
    link->vxlan.emplace();
    return ParseVxlan(*data, &*link->vxlan);
  }
  return true;
}

MessageBody ParseLink(const nlmsghdr& header, const uint8_t* payload, size_t length) {
  if (length < sizeof(ifinfomsg)) return MalformedRecord{"link message shorter than ifinfomsg"};
  const auto info = Load<ifinfomsg>(payload);
  LinkRecord link;
  link.deleted = header.nlmsg_type == RTM_DELLINK;
  link.ifindex = info.ifi_index;
  link.deviceType = info.ifi_type;
  link.flags = info.ifi_flags;
  link.changeMask = info.ifi_change;

  const size_t offset = Align(sizeof(ifinfomsg));
  AttributeReader reader(payload + offset, length > offset ? length - offset : 0);
  Attribute attribute;
  while (reader.Next(&attribute)) {
    switch (attribute.type) {
      case IFLA_IFNAME:
        link.nameTooLong = false;  // a later IFLA_IFNAME replaces an earlier one
        link.name = ReadString(attribute, kMaxNameBytes, &link.nameTooLong);
        break;
      case IFLA_ADDRESS:
        link.mac = ReadMac(attribute);
        break;
      case IFLA_MTU:
        link.mtu = ReadScalar<uint32_t>(attribute);
        break;
      case IFLA_OPERSTATE:
        link.operstate = ReadScalar<uint8_t>(attribute);
        break;
      case IFLA_MASTER:
        link.master = ReadScalar<uint32_t>(attribute);
        break;
      case IFLA_LINK:
        link.lowerIfindex = ReadScalar<uint32_t>(attribute);
        break;
      case IFLA_LINK_NETNSID:
        link.linkNetnsid = ReadScalar<int32_t>(attribute);
        break;
      case IFLA_EVENT:
        link.event = ReadScalar<uint32_t>(attribute);
        break;
      case IFLA_LINKINFO:
        if (!ParseLinkInfo(attribute, &link)) {
          return MalformedRecord{"truncated IFLA_LINKINFO"};
        }
        break;
      default:
        break;
    }
  }
  if (reader.broken()) return MalformedRecord{"bad attribute length in link message"};
  return link;
}

MessageBody ParseNeigh(const nlmsghdr& header, const uint8_t* payload, size_t length) {
  if (length < sizeof(ndmsg)) return MalformedRecord{"neighbour message shorter than ndmsg"};
  const auto info = Load<ndmsg>(payload);
  NeighRecord neigh;
  neigh.deleted = header.nlmsg_type == RTM_DELNEIGH;
  neigh.family = info.ndm_family;
  neigh.ifindex = info.ndm_ifindex;
  neigh.state = info.ndm_state;
  neigh.flags = info.ndm_flags;
  neigh.type = info.ndm_type;

  const size_t offset = Align(sizeof(ndmsg));
  AttributeReader reader(payload + offset, length > offset ? length - offset : 0);
  Attribute attribute;
  while (reader.Next(&attribute)) {
    switch (attribute.type) {
      case NDA_DST:
        neigh.destination = ReadAddress(attribute);
        break;
      case NDA_LLADDR:
        neigh.lladdr = ReadMac(attribute);
        break;
      case NDA_VNI:
        neigh.vni = ReadScalar<uint32_t>(attribute);
        break;
      case NDA_MASTER:
        neigh.master = ReadScalar<uint32_t>(attribute);
        break;
      default:
        break;
    }
  }
  if (reader.broken()) return MalformedRecord{"bad attribute length in neighbour message"};
  return neigh;
}

MessageBody ParseAck(const nlmsghdr& header, const uint8_t* payload, size_t length) {
  if (length < sizeof(nlmsgerr)) return MalformedRecord{"NLMSG_ERROR shorter than nlmsgerr"};
  const auto error = Load<nlmsgerr>(payload);
  AckRecord ack;
  ack.error = error.error;
  if (!(header.nlmsg_flags & NLM_F_ACK_TLVS)) return ack;

  // The TLVs follow the echoed request: just its header when capped, else all of it.
  size_t offset = sizeof(nlmsgerr);
  if (!(header.nlmsg_flags & NLM_F_CAPPED)) {
    const size_t echoed = error.msg.nlmsg_len;
    if (echoed < kHeaderSize) return ack;
    offset = sizeof(nlmsgerr) - kHeaderSize + Align(echoed);
  }
  if (offset >= length) return ack;
  AttributeReader reader(payload + offset, length - offset);
  Attribute attribute;
  std::string message;
  while (reader.Next(&attribute)) {
    if (attribute.type == NLMSGERR_ATTR_MSG) message = ReadString(attribute, 256, nullptr);
  }
  // A malformed TLV stream costs only the text, never the error itself.
  if (!reader.broken()) ack.extackMessage = std::move(message);
  return ack;
}

MessageBody ParseDone(const uint8_t* payload, size_t length) {
  DoneRecord done;
  if (length >= sizeof(int32_t)) done.error = Load<int32_t>(payload);
  return done;
}

MessageBody ParseBody(const nlmsghdr& header, const uint8_t* payload, size_t length) {
  switch (header.nlmsg_type) {
    case RTM_NEWLINK:
    case RTM_DELLINK:
      return ParseLink(header, payload, length);
    case RTM_NEWNEIGH:
    case RTM_DELNEIGH:
      return ParseNeigh(header, payload, length);
    case NLMSG_ERROR:
      return ParseAck(header, payload, length);
    case NLMSG_DONE:
      return ParseDone(payload, length);
    default:
      return std::monostate{};
  }
}

}  // namespace

void ParseDatagramInto(const uint8_t* data, size_t length, ParsedDatagram* out) {
  // A notification is one message; a dump's datagram, hundreds: storage for those is not kept.
  constexpr size_t kKeptMessages = 16;
  if (out->messages.capacity() > kKeptMessages) {
    out->messages = {};
  } else {
    out->messages.clear();
  }
  out->error.reset();
  size_t offset = 0;
  while (offset < length) {
    const size_t remaining = length - offset;
    if (remaining < kHeaderSize) {
      out->error = DatagramError{offset, "trailing bytes shorter than a netlink header"};
      break;
    }
    const auto header = Load<nlmsghdr>(data + offset);
    if (header.nlmsg_len < kHeaderSize) {
      out->error = DatagramError{offset, "nlmsg_len shorter than a netlink header"};
      break;
    }
    if (header.nlmsg_len > remaining) {
      out->error = DatagramError{offset, "nlmsg_len beyond the end of the datagram"};
      break;
    }
    Message message;
    message.type = header.nlmsg_type;
    message.flags = header.nlmsg_flags;
    message.seq = header.nlmsg_seq;
    message.portid = header.nlmsg_pid;
    message.body = ParseBody(header, data + offset + kHeaderSize, header.nlmsg_len - kHeaderSize);
    out->messages.push_back(std::move(message));
    // nlmsg_len >= 16 guarantees progress; the final message may lack padding.
    offset += std::min(Align(header.nlmsg_len), remaining);
  }
}

ParsedDatagram ParseDatagram(const uint8_t* data, size_t length) {
  ParsedDatagram result;
  ParseDatagramInto(data, length, &result);
  return result;
}

bool MayNotifyLink(const uint8_t* data, size_t length, int32_t ifindex) {
  size_t offset = 0;
  while (offset < length) {
    const size_t remaining = length - offset;
    if (remaining < kHeaderSize) return true;
    const auto header = Load<nlmsghdr>(data + offset);
    if (header.nlmsg_len < kHeaderSize || header.nlmsg_len > remaining) return true;
    if (header.nlmsg_type == RTM_NEWLINK || header.nlmsg_type == RTM_DELLINK) {
      if (header.nlmsg_len < kHeaderSize + sizeof(ifinfomsg)) return true;
      if (Load<ifinfomsg>(data + offset + kHeaderSize).ifi_index == ifindex) return true;
    }
    offset += std::min(Align(header.nlmsg_len), remaining);
  }
  return false;
}

Admission Admit(uint32_t senderPortid, int msgFlags) {
  // The sender first: a foreign datagram is dropped whatever its shape, and
  // must never be taken for lost kernel data (which would trigger a resync).
  if (senderPortid != 0) return Admission::kForeignSender;
  if (msgFlags & MSG_TRUNC) return Admission::kTruncated;
  return Admission::kAccept;
}

std::string FormatMac(const std::array<uint8_t, 6>& mac) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  text.reserve(17);
  for (size_t i = 0; i < mac.size(); ++i) {
    if (i) text.push_back(':');
    text.push_back(kHex[mac[i] >> 4]);
    text.push_back(kHex[mac[i] & 0xf]);
  }
  return text;
}

std::string DescribeMacProblem(const MacField& field) {
  switch (field.state) {
    case MacField::State::kAbsent:
      return "no link-layer address attribute";
    case MacField::State::kBadLength:
      return "link-layer address of " + std::to_string(field.length) + " bytes, not 6";
    case MacField::State::kValid:
      break;
  }
  return "";
}

}  // namespace fg::netlink
