// Unit tests for NetlinkSocket::ReceiveMany and DatagramSlots: many queued
// datagrams read in one recvmmsg, each judged on its own (here a process
// unicasting to the socket: foreign senders, never parsed), the batch bounded
// by what was asked and by the slots, "drained" only when the read stopped
// short; slots growing for a datagram cut short. Sockets in the test's own
// namespace; no interface is touched.
#include <linux/netlink.h>
#include <sys/socket.h>

#include <vector>

#include "netlink_socket.h"
#include "test_harness.h"

namespace {

using fg::DatagramSlots;
using fg::NetlinkSocket;

// A datagram from `from` to `to`'s port: a userspace sender (root may unicast on NETLINK_ROUTE).
void SendTo(const NetlinkSocket& from, const NetlinkSocket& to, size_t bytes) {
  std::vector<uint8_t> payload(bytes, 0xab);
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;
  address.nl_pid = to.portid();
  const ssize_t sent = sendto(from.fd(), payload.data(), payload.size(), 0,
                              reinterpret_cast<sockaddr*>(&address), sizeof(address));
  EXPECT_EQ(sent, static_cast<ssize_t>(bytes));
}

NetlinkSocket Open() {
  fg::Result<NetlinkSocket> socket = NetlinkSocket::Open(fg::NetnsTarget{}, {});
  EXPECT_TRUE(socket.ok());
  return std::move(socket.value());
}

// A reader, a process writing to it, and what the reader's last read gave.
struct Bed {
  NetlinkSocket reader = Open();
  NetlinkSocket sender = Open();
  DatagramSlots slots;
  std::vector<NetlinkSocket::Datagram> datagrams;
  bool drained = false;

  void Send(size_t count, size_t bytes) {
    for (size_t i = 0; i < count; ++i) SendTo(sender, reader, bytes);
  }
  size_t Read(size_t max) {
    EXPECT_TRUE(reader.ReceiveMany(&slots, max, &datagrams, &drained).ok());
    return datagrams.size();
  }
};

}  // namespace

TEST_CASE("receive many: queued datagrams in batches bounded by the ask, drained when short") {
  Bed bed;
  bed.Send(24, 64);
  EXPECT_EQ(bed.Read(5), size_t{5});
  EXPECT_FALSE(bed.drained);
  for (const NetlinkSocket::Datagram& datagram : bed.datagrams) {
    // Not the kernel's: dropped before parsing (N12), whatever it holds.
    EXPECT_TRUE(datagram.kind == NetlinkSocket::Received::kForeignSender);
  }
  // More than the slots hold: one slot's worth.
  EXPECT_EQ(bed.Read(100), bed.slots.count());
  EXPECT_FALSE(bed.drained);
  // The rest: fewer than asked, so the socket was empty.
  EXPECT_EQ(bed.Read(16), size_t{24 - 5} - bed.slots.count());
  EXPECT_TRUE(bed.drained);
  EXPECT_EQ(bed.Read(16), size_t{1});
  EXPECT_TRUE(bed.datagrams[0].kind == NetlinkSocket::Received::kWouldBlock);
  EXPECT_TRUE(bed.drained);
}

TEST_CASE("receive many: asking for none still reads one") {
  Bed bed;
  bed.Send(2, 16);
  EXPECT_EQ(bed.Read(0), size_t{1});
  EXPECT_FALSE(bed.drained);
}

TEST_CASE(
    "datagram slots: 16 of 64 KiB; a larger datagram makes them page-rounded, fewer, never "
    "smaller") {
  DatagramSlots slots;
  EXPECT_EQ(slots.count(), size_t{16});
  EXPECT_EQ(slots.slotBytes(), size_t{64 * 1024});
  EXPECT_EQ(slots.slot(1) - slots.slot(0), static_cast<ptrdiff_t>(64 * 1024));
  slots.Fit(1000);
  EXPECT_EQ(slots.slotBytes(), size_t{64 * 1024});
  slots.Fit(64 * 1024 + 1);
  EXPECT_EQ(slots.slotBytes(), size_t{68 * 1024});
  EXPECT_EQ(slots.count(), size_t{15});
  EXPECT_EQ(slots.slot(14) + slots.slotBytes() <= slots.slot(0) + DatagramSlots::kBytes, true);
  slots.Fit(400 * 1024);
  EXPECT_EQ(slots.count(), size_t{2});
  slots.Fit(5 * 1024 * 1024);  // larger than the whole: one slot of it all
  EXPECT_EQ(slots.slotBytes(), DatagramSlots::kBytes);
  EXPECT_EQ(slots.count(), size_t{1});
}
