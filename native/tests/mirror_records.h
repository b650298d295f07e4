// Parsed rtnetlink records (links, ARP entries) built in code, for the tests of
// the state mirror and of what is built on it.
#pragma once

#include <linux/if.h>
#include <linux/neighbour.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "netlink_parser.h"

namespace fg_test::records {

inline fg::netlink::MacField Mac(uint8_t last) {
  fg::netlink::MacField mac;
  mac.state = fg::netlink::MacField::State::kValid;
  mac.bytes = {0x0e, 0, 0, 0, 0, last};
  return mac;
}

inline fg::netlink::LinkRecord Link(int32_t ifindex, uint8_t mac, bool up = true,
                                    const std::string& name = "") {
  fg::netlink::LinkRecord link;
  link.ifindex = ifindex;
  link.name = name.empty() ? "vx" + std::to_string(ifindex) : name;
  link.kind = "vxlan";
  link.mac = Mac(mac);
  link.flags = up ? IFF_UP : 0;
  return link;
}

inline fg::netlink::LinkRecord Deleted(int32_t ifindex) {
  fg::netlink::LinkRecord link = Link(ifindex, 0);
  link.deleted = true;
  return link;
}

inline fg::netlink::NeighRecord Arp(int32_t ifindex, uint8_t last, uint8_t mac,
                                    uint16_t state = NUD_PERMANENT) {
  fg::netlink::NeighRecord neigh;
  neigh.family = AF_INET;
  neigh.ifindex = ifindex;
  neigh.state = state;
  neigh.destination = {198, 18, 0, last};
  neigh.lladdr = Mac(mac);
  return neigh;
}

}  // namespace fg_test::records
