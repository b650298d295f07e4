// libFuzzer target for native/netlink_parser.cc (and netlink_builder.cc by round trip).
//
// Each input is parsed three ways:
//   1. as is, as a whole datagram;
//   2. with the first nlmsg_len rewritten to the input's length (as OSS-Fuzz's
//      fuzz_msg.c clamps it), so that random bytes get past the header check and
//      reach the message decoders;
//   3. as the body of one message of a decoded type (link, neighbour, error, done)
//      chosen by the first byte, behind a sound header.
// Every parsed field is touched (formatted, measured), the parser's promises are
// checked (names <= 15 bytes, a MAC only from a 6-byte attribute, addresses of 4 or
// 16 bytes, errors inside the datagram, the monitor's header-only look ahead finding every
// link record, ...), and every record the addon could write
// back is round-tripped: a link with a valid MAC through BuildSetLinkAddressRequest,
// a neighbour with a valid lladdr through BuildNeighbourReplaceRequest, a name through
// BuildGetLinkByNameRequest. A broken promise or a lost field is a trap (a crash that
// libFuzzer records with its input).
//
// Seeds: native/fuzz/corpus/netlink/ (real datagrams from a Linux 6.18 netns, and the
// malformed fixtures of netlink_parser_test.cc / test/parser.test.ts).
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "netlink_builder.h"
#include "netlink_parser.h"
#include "restore_set.h"

namespace {

using fg::netlink::AckRecord;
using fg::netlink::DoneRecord;
using fg::netlink::LinkRecord;
using fg::netlink::MacField;
using fg::netlink::MalformedRecord;
using fg::netlink::Message;
using fg::netlink::NeighRecord;
using fg::netlink::ParsedDatagram;

// Written so that no field access can be optimised away.
volatile size_t gSink;

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

void TouchMac(const MacField& field) {
  switch (field.state) {
    case MacField::State::kValid:
      Check(fg::netlink::FormatMac(field.bytes).size() == 17);
      Check(fg::netlink::DescribeMacProblem(field).empty());
      break;
    case MacField::State::kBadLength:
      Check(field.length != 6);
      // A MAC that is not 6 bytes is never turned into one: its bytes stay zero.
      for (uint8_t byte : field.bytes) Check(byte == 0);
      Check(!fg::netlink::DescribeMacProblem(field).empty());
      break;
    case MacField::State::kAbsent:
      Check(field.length == 0);
      Check(!fg::netlink::DescribeMacProblem(field).empty());
      break;
    default:
      __builtin_trap();
  }
}

bool SoundAddress(const std::vector<uint8_t>& address) {
  return address.empty() || address.size() == 4 || address.size() == 16;
}

void RoundTripLink(const LinkRecord& link, uint32_t seq) {
  if (link.mac.state == MacField::State::kValid) {
    const std::vector<uint8_t> request =
        fg::netlink::BuildSetLinkAddressRequest(link.ifindex, link.mac.bytes, seq);
    const ParsedDatagram back = fg::netlink::ParseDatagram(request.data(), request.size());
    Check(!back.error && back.messages.size() == 1);
    const Message& message = back.messages[0];
    Check(message.type == RTM_NEWLINK && message.seq == seq && message.portid == 0);
    Check(message.flags == (NLM_F_REQUEST | NLM_F_ACK));
    const auto* echoed = std::get_if<LinkRecord>(&message.body);
    Check(echoed != nullptr);
    Check(echoed->ifindex == link.ifindex);
    Check(echoed->mac.state == MacField::State::kValid && echoed->mac.bytes == link.mac.bytes);
    // S15: nothing but the address.
    Check(echoed->name.empty() && !echoed->mtu && !echoed->master && !echoed->lowerIfindex &&
          echoed->kind.empty() && echoed->flags == 0 && echoed->changeMask == 0);
  }
  // A name read from the kernel can be asked for again, unchanged.
  std::vector<uint8_t> byName = fg::netlink::BuildGetLinkByNameRequest(link.name, seq);
  const uint16_t newlink = RTM_NEWLINK;  // same body layout as RTM_GETLINK
  std::memcpy(byName.data() + 4, &newlink, sizeof(newlink));
  const ParsedDatagram named = fg::netlink::ParseDatagram(byName.data(), byName.size());
  Check(!named.error && named.messages.size() == 1);
  const auto* echoed = std::get_if<LinkRecord>(&named.messages[0].body);
  Check(echoed != nullptr && echoed->name == link.name && !echoed->nameTooLong);
}

void RoundTripNeigh(const NeighRecord& neigh, uint32_t seq) {
  if (neigh.lladdr.state != MacField::State::kValid) return;
  const std::vector<uint8_t> request =
      fg::netlink::BuildNeighbourReplaceRequest(fg::RestoreEntryOf(neigh), seq);
  const ParsedDatagram back = fg::netlink::ParseDatagram(request.data(), request.size());
  Check(!back.error && back.messages.size() == 1);
  Check(back.messages[0].type == RTM_NEWNEIGH && back.messages[0].seq == seq);
  const auto* echoed = std::get_if<NeighRecord>(&back.messages[0].body);
  Check(echoed != nullptr);
  Check(echoed->family == neigh.family && echoed->ifindex == neigh.ifindex &&
        echoed->state == neigh.state && echoed->flags == neigh.flags);
  Check(echoed->destination == neigh.destination);
  Check(echoed->lladdr.state == MacField::State::kValid &&
        echoed->lladdr.bytes == neigh.lladdr.bytes);
  Check(!echoed->vni && !echoed->master);
}

void Inspect(const ParsedDatagram& parsed, size_t length) {
  // Every message has at least a 16-byte header inside the datagram.
  Check(parsed.messages.size() <= length / NLMSG_HDRLEN);
  if (parsed.error) {
    Check(parsed.error->offset < length);
    Check(length - parsed.error->offset < NLMSG_HDRLEN ||
          parsed.error->reason.find("nlmsg_len") != std::string::npos);
    Check(!parsed.error->reason.empty());
  }
  size_t sink = 0;
  for (const Message& message : parsed.messages) {
    sink += message.type + message.flags + message.seq + message.portid;
    if (const auto* link = std::get_if<LinkRecord>(&message.body)) {
      Check(link->deleted == (message.type == RTM_DELLINK));
      Check(link->name.size() <= 15);
      Check(link->name.find('\0') == std::string::npos);
      Check(link->kind.size() <= 32);
      TouchMac(link->mac);
      sink += static_cast<size_t>(link->ifindex) + link->deviceType + link->flags +
              link->changeMask + link->name.size() + link->kind.size();
      sink += link->mtu.value_or(0) + link->operstate.value_or(0) + link->master.value_or(0) +
              link->lowerIfindex.value_or(0) + static_cast<size_t>(link->linkNetnsid.value_or(0)) +
              link->event.value_or(0);
      if (link->vxlan) {
        Check(link->kind == "vxlan");
        Check(SoundAddress(link->vxlan->local));
        sink += link->vxlan->vni.value_or(0) + link->vxlan->port.value_or(0) +
                link->vxlan->local.size() + link->vxlan->underlayIfindex.value_or(0) +
                link->vxlan->learning.value_or(false);
      }
      RoundTripLink(*link, message.seq);
    } else if (const auto* neigh = std::get_if<NeighRecord>(&message.body)) {
      Check(neigh->deleted == (message.type == RTM_DELNEIGH));
      Check(SoundAddress(neigh->destination));
      TouchMac(neigh->lladdr);
      sink += neigh->family + static_cast<size_t>(neigh->ifindex) + neigh->state + neigh->flags +
              neigh->type + neigh->destination.size() + neigh->vni.value_or(0) +
              neigh->master.value_or(0);
      RoundTripNeigh(*neigh, message.seq);
    } else if (const auto* ack = std::get_if<AckRecord>(&message.body)) {
      Check(message.type == NLMSG_ERROR);
      Check(ack->extackMessage.size() <= 256);
      sink += static_cast<size_t>(ack->error) + ack->extackMessage.size();
    } else if (const auto* done = std::get_if<DoneRecord>(&message.body)) {
      Check(message.type == NLMSG_DONE);
      sink += static_cast<size_t>(done->error);
    } else if (const auto* malformed = std::get_if<MalformedRecord>(&message.body)) {
      Check(!malformed->reason.empty());
      sink += malformed->reason.size();
    }
  }
  gSink = sink;
}

// The monitor's look ahead from the headers alone (MayNotifyLink) never misses a link record
// the parser finds, nor a datagram the parser gives up on.
void CheckLinkLookahead(const std::vector<uint8_t>& bytes, const ParsedDatagram& parsed) {
  for (const Message& message : parsed.messages) {
    if (const auto* link = std::get_if<LinkRecord>(&message.body)) {
      Check(fg::netlink::MayNotifyLink(bytes.data(), bytes.size(), link->ifindex));
    }
  }
  if (parsed.error) Check(fg::netlink::MayNotifyLink(bytes.data(), bytes.size(), 0));
}

// Parses a heap copy of exactly `length` bytes, so that ASan sees any read past the end
// (libFuzzer's own buffer is exact too, but the rewritten copies below are not always).
void ParseExact(const uint8_t* data, size_t length) {
  const std::vector<uint8_t> exact(data, data + length);  // allocates exactly `length`
  const ParsedDatagram parsed = fg::netlink::ParseDatagram(exact.data(), exact.size());
  Inspect(parsed, length);
  CheckLinkLookahead(exact, parsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return -1;  // recvmsg never hands over more than one datagram

  // 1. The datagram as it came.
  ParseExact(data, size);

  // 2. First nlmsg_len clamped to the input length.
  if (size >= sizeof(uint32_t)) {
    std::vector<uint8_t> clamped(data, data + size);
    const uint32_t length = static_cast<uint32_t>(size);
    std::memcpy(clamped.data(), &length, sizeof(length));
    ParseExact(clamped.data(), clamped.size());
  }

  // 3. The input as the body of one message of a type the parser decodes.
  if (size >= 1) {
    static const uint16_t kTypes[] = {RTM_NEWLINK,  RTM_DELLINK, RTM_NEWNEIGH,
                                      RTM_DELNEIGH, NLMSG_ERROR, NLMSG_DONE};
    const uint8_t selector = data[0];
    nlmsghdr header{};
    header.nlmsg_len = static_cast<uint32_t>(NLMSG_HDRLEN + size - 1);
    header.nlmsg_type = kTypes[selector % (sizeof(kTypes) / sizeof(kTypes[0]))];
    // The high bits pick the flags that change how an error is decoded.
    header.nlmsg_flags = static_cast<uint16_t>(((selector >> 4) & 1 ? NLM_F_ACK_TLVS : 0) |
                                               ((selector >> 5) & 1 ? NLM_F_CAPPED : 0) |
                                               ((selector >> 6) & 1 ? NLM_F_MULTI : 0));
    header.nlmsg_seq = 0x5eed;
    std::vector<uint8_t> framed(NLMSG_HDRLEN + size - 1);
    std::memcpy(framed.data(), &header, sizeof(header));
    if (size > 1) std::memcpy(framed.data() + NLMSG_HDRLEN, data + 1, size - 1);
    ParseExact(framed.data(), framed.size());
  }
  return 0;
}
