// rtnetlink datagrams assembled in code, as the kernel lays them out
// (nlmsghdr + ifinfomsg/ndmsg/nlmsgerr + attributes), for the parser's and the
// monitor core's tests.
#pragma once

#include <linux/if_arp.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace fg_test::rtnl {

using Bytes = std::vector<uint8_t>;

inline Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

template <typename T>
inline Bytes Raw(const T& value) {
  Bytes out(sizeof(T));
  std::memcpy(out.data(), &value, sizeof(T));
  return out;
}

inline Bytes U8(uint8_t value) { return Raw(value); }
inline Bytes U16(uint16_t value) { return Raw(value); }
inline Bytes U32(uint32_t value) { return Raw(value); }
inline Bytes Be16(uint16_t value) {
  return Bytes{static_cast<uint8_t>(value >> 8), static_cast<uint8_t>(value)};
}
// The bytes of `text` without a terminating NUL.
inline Bytes Str(const std::string& text) { return Bytes(text.begin(), text.end()); }
// The bytes of `text` with its NUL.
inline Bytes CStr(const std::string& text) { return Cat({Str(text), Bytes{0}}); }
inline Bytes Fill(size_t count, uint8_t value) { return Bytes(count, value); }

inline Bytes Pad(Bytes bytes) {
  bytes.resize((bytes.size() + 3) & ~size_t{3}, 0);
  return bytes;
}

// An attribute whose header declares `declared` bytes, followed by `payload` as is.
inline Bytes AttrDeclaring(uint16_t declared, uint16_t type, const Bytes& payload) {
  return Cat({U16(declared), U16(type), payload});
}

// A well-formed attribute without its trailing padding.
inline Bytes AttrUnpadded(uint16_t type, const Bytes& payload) {
  return AttrDeclaring(static_cast<uint16_t>(4 + payload.size()), type, payload);
}

// A well-formed, padded attribute.
inline Bytes Attr(uint16_t type, const Bytes& payload) { return Pad(AttrUnpadded(type, payload)); }

inline Bytes Nested(uint16_t type, std::initializer_list<Bytes> children) {
  return Attr(static_cast<uint16_t>(type | NLA_F_NESTED), Cat(children));
}

inline Bytes Header(uint32_t length, uint16_t type, uint16_t flags = 0, uint32_t seq = 0,
                    uint32_t portid = 0) {
  nlmsghdr header{};
  header.nlmsg_len = length;
  header.nlmsg_type = type;
  header.nlmsg_flags = flags;
  header.nlmsg_seq = seq;
  header.nlmsg_pid = portid;
  return Raw(header);
}

// A message whose nlmsg_len covers header and body, without trailing padding.
inline Bytes MsgUnpadded(uint16_t type, const Bytes& body, uint16_t flags = 0, uint32_t seq = 0,
                         uint32_t portid = 0) {
  return Cat({Header(static_cast<uint32_t>(16 + body.size()), type, flags, seq, portid), body});
}

// A message as the kernel lays it out: padded to NLMSG_ALIGNTO.
inline Bytes Msg(uint16_t type, const Bytes& body, uint16_t flags = 0, uint32_t seq = 0,
                 uint32_t portid = 0) {
  return Pad(MsgUnpadded(type, body, flags, seq, portid));
}

inline Bytes IfInfo(int32_t ifindex, uint32_t flags = 0, uint32_t change = 0,
                    uint16_t deviceType = ARPHRD_ETHER, uint8_t family = AF_UNSPEC) {
  ifinfomsg info{};
  info.ifi_family = family;
  info.ifi_type = deviceType;
  info.ifi_index = ifindex;
  info.ifi_flags = flags;
  info.ifi_change = change;
  return Raw(info);
}

inline Bytes NdMsg(uint8_t family, int32_t ifindex, uint16_t state, uint8_t flags = 0,
                   uint8_t type = RTN_UNICAST) {
  ndmsg info{};
  info.ndm_family = family;
  info.ndm_ifindex = ifindex;
  info.ndm_state = state;
  info.ndm_flags = flags;
  info.ndm_type = type;
  return Raw(info);
}

inline Bytes NlmsgErr(int32_t error, const Bytes& echoedHeader) {
  return Cat({Raw(error), echoedHeader});
}

inline Bytes Link(int32_t ifindex, const Bytes& attributes, uint16_t flags = 0, uint32_t seq = 0) {
  return Msg(RTM_NEWLINK, Cat({IfInfo(ifindex), attributes}), flags, seq);
}

inline Bytes Neigh(const Bytes& ndmsgBytes, const Bytes& attributes, uint16_t type = RTM_NEWNEIGH) {
  return Msg(type, Cat({ndmsgBytes, attributes}));
}

}  // namespace fg_test::rtnl
