// Unit tests for native/neighbour_batch.cc: the datagrams are read back through
// the parser (every request, its sequence number, only the last with NLM_F_ACK,
// none past a limit), and replies are fed as the kernel would send them: errors
// for some requests, then the last one's ACK; replies out of the datagram's
// range; lost replies. A seeded random run checks the accounting over many
// shapes: written + failed + unaccounted is always the number of entries.
#include "neighbour_batch.h"

#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "netlink_parser.h"
#include "test_harness.h"

namespace {

using fg::netlink::AckRecord;
using fg::netlink::BatchLimits;
using fg::netlink::BatchLimitsFor;
using fg::netlink::Message;
using fg::netlink::NeighbourBatch;
using fg::netlink::NeighbourEntry;

std::vector<NeighbourEntry> Entries(size_t count, bool ipv6 = false) {
  std::vector<NeighbourEntry> entries(count);
  for (size_t i = 0; i < count; ++i) {
    NeighbourEntry& entry = entries[i];
    entry.family = ipv6 ? AF_INET6 : AF_INET;
    entry.ifindex = 7;
    entry.destination.assign(ipv6 ? 16 : 4, 0);
    entry.destination[0] = 198;
    entry.destination[1] = static_cast<uint8_t>(18 + (i >> 16));
    entry.destination[2] = static_cast<uint8_t>(i >> 8);
    entry.destination[3] = static_cast<uint8_t>(i);
    entry.lladdr = {0x0e, 0, 0, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    entry.state = NUD_PERMANENT;
  }
  return entries;
}

struct Request {
  uint32_t seq;
  bool ack;
};

// Every request of a datagram, in order (header fields read directly: the
// parser knows RTM_NEWNEIGH as a record, not its request flags).
std::vector<Request> Requests(const std::vector<uint8_t>& datagram) {
  std::vector<Request> requests;
  size_t offset = 0;
  while (offset + sizeof(nlmsghdr) <= datagram.size()) {
    nlmsghdr header;
    std::memcpy(&header, datagram.data() + offset, sizeof(header));
    EXPECT_EQ(header.nlmsg_type, RTM_NEWNEIGH);
    EXPECT_TRUE((header.nlmsg_flags & (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_REQUEST)) ==
                (NLM_F_CREATE | NLM_F_REPLACE | NLM_F_REQUEST));
    requests.push_back({header.nlmsg_seq, (header.nlmsg_flags & NLM_F_ACK) != 0});
    offset += NLMSG_ALIGN(header.nlmsg_len);
  }
  EXPECT_EQ(offset, datagram.size());
  return requests;
}

Message Reply(uint32_t seq, int32_t error) {
  Message message;
  message.type = NLMSG_ERROR;
  message.seq = seq;
  AckRecord ack;
  ack.error = error;
  message.body = ack;
  return message;
}

TEST_CASE("batch: limits follow the buffers, within 1..256 requests per datagram") {
  const BatchLimits defaults = BatchLimitsFor(212992, 212992);
  EXPECT_EQ(defaults.maxBytes, size_t{212992 - 32});
  EXPECT_EQ(defaults.maxRequests, size_t{208});
  EXPECT_EQ(BatchLimitsFor(212992, 4 << 20).maxRequests, size_t{256});
  EXPECT_EQ(BatchLimitsFor(212992, 100).maxRequests, size_t{1});
  EXPECT_TRUE(BatchLimitsFor(0, 0).maxBytes > 0);
}

TEST_CASE("batch: datagrams carry consecutive requests, only the last asks for an ACK") {
  const std::vector<NeighbourEntry> entries = Entries(500);
  NeighbourBatch batch(entries, 1000, BatchLimits{1 << 20, 200});
  std::vector<uint32_t> seqs;
  size_t datagrams = 0;
  while (!batch.done()) {
    const std::vector<Request> requests = Requests(batch.NextDatagram());
    ++datagrams;
    EXPECT_TRUE(!requests.empty() && requests.size() <= 200);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(requests[i].ack, i + 1 == requests.size());
      seqs.push_back(requests[i].seq);
    }
    EXPECT_TRUE(batch.Accept(Reply(requests.back().seq, 0)));
  }
  EXPECT_EQ(datagrams, size_t{3});
  EXPECT_EQ(seqs.size(), entries.size());
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], uint32_t(1000 + i));
  EXPECT_EQ(batch.written(), size_t{500});
  EXPECT_EQ(batch.failed(), size_t{0});
}

TEST_CASE("batch: a datagram never passes the byte limit (IPv6 entries are larger)") {
  const std::vector<NeighbourEntry> entries = Entries(100, true);
  const size_t maxBytes = 1000;
  NeighbourBatch batch(entries, 1, BatchLimits{maxBytes, 256});
  size_t sent = 0;
  while (!batch.done()) {
    const std::vector<uint8_t>& datagram = batch.NextDatagram();
    EXPECT_TRUE(datagram.size() <= maxBytes);
    const std::vector<Request> requests = Requests(datagram);
    sent += requests.size();
    batch.Accept(Reply(requests.back().seq, 0));
  }
  EXPECT_EQ(sent, size_t{100});
}

TEST_CASE("batch: error replies before the final ACK are counted, the first one kept") {
  const std::vector<NeighbourEntry> entries = Entries(10);
  NeighbourBatch batch(entries, 50, BatchLimits{1 << 20, 256});
  Requests(batch.NextDatagram());
  EXPECT_FALSE(batch.Accept(Reply(52, -EINVAL)));
  EXPECT_FALSE(batch.Accept(Reply(55, -ENODEV)));
  EXPECT_FALSE(batch.Accept(Reply(49, -EPERM)));  // before the batch: not ours
  EXPECT_FALSE(batch.Accept(Reply(70, -EPERM)));  // past it
  EXPECT_TRUE(batch.Accept(Reply(59, 0)));
  EXPECT_TRUE(batch.done());
  EXPECT_EQ(batch.written(), size_t{8});
  EXPECT_EQ(batch.failed(), size_t{2});
  EXPECT_EQ(batch.firstFailure()->index, size_t{2});
  EXPECT_EQ(batch.firstFailure()->error, -EINVAL);
}

TEST_CASE("batch: the last request failing ends its datagram too") {
  const std::vector<NeighbourEntry> entries = Entries(3);
  NeighbourBatch batch(entries, 7, BatchLimits{1 << 20, 256});
  Requests(batch.NextDatagram());
  EXPECT_TRUE(batch.Accept(Reply(9, -ENOENT)));
  EXPECT_EQ(batch.written(), size_t{2});
  EXPECT_EQ(batch.failed(), size_t{1});
}

TEST_CASE("batch: sequence numbers may wrap past zero") {
  const std::vector<NeighbourEntry> entries = Entries(6);
  NeighbourBatch batch(entries, 0xfffffffeu, BatchLimits{1 << 20, 256});
  const std::vector<Request> requests = Requests(batch.NextDatagram());
  EXPECT_EQ(requests.front().seq, 0xfffffffeu);
  EXPECT_EQ(requests.back().seq, 3u);
  EXPECT_FALSE(batch.Accept(Reply(0, -EINVAL)));
  EXPECT_TRUE(batch.Accept(Reply(3, 0)));
  EXPECT_EQ(batch.written(), size_t{5});
  EXPECT_EQ(batch.firstFailure()->index, size_t{2});
}

TEST_CASE("batch: replies lost leave the datagram's requests unaccounted, never written") {
  const std::vector<NeighbourEntry> entries = Entries(30);
  NeighbourBatch batch(entries, 1, BatchLimits{1 << 20, 10});
  Requests(batch.NextDatagram());
  EXPECT_TRUE(batch.Accept(Reply(10, 0)));
  Requests(batch.NextDatagram());
  batch.Accept(Reply(12, -EINVAL));
  batch.Abandon();
  EXPECT_FALSE(batch.inFlight());
  EXPECT_EQ(batch.written(), size_t{10});
  EXPECT_EQ(batch.unaccounted(), size_t{10});
  EXPECT_FALSE(batch.done());  // the third datagram is still to go, if the caller goes on
}

TEST_CASE(
    "batch: a lead takes one request's room in the first datagram only; its failure is read before "
    "the last ACK") {
  const std::vector<NeighbourEntry> entries = Entries(30);
  NeighbourBatch batch(entries, 1, BatchLimits{1 << 20, 10});
  batch.Lead(500);
  const std::vector<Request> requests = Requests(batch.NextDatagram());
  EXPECT_EQ(requests.size(), size_t{9});  // its error reply takes the tenth's room
  EXPECT_EQ(requests.front().seq, 1u);
  EXPECT_TRUE(requests.back().ack);
  EXPECT_FALSE(batch.Accept(Reply(500, -EADDRNOTAVAIL)));
  EXPECT_FALSE(batch.leadAnswered());
  EXPECT_TRUE(batch.Accept(Reply(9, 0)));
  EXPECT_TRUE(batch.leadAnswered());
  EXPECT_EQ(batch.leadFailure()->error, -EADDRNOTAVAIL);
  EXPECT_EQ(batch.written(), size_t{9});
  EXPECT_FALSE(batch.firstFailure().has_value());  // the entries' own failures only
  const std::vector<Request> second = Requests(batch.NextDatagram());
  EXPECT_EQ(second.size(), size_t{10});
  EXPECT_EQ(second.front().seq, 10u);
  EXPECT_FALSE(batch.Accept(Reply(500, -EINVAL)));  // not in flight now: not taken
  EXPECT_TRUE(batch.Accept(Reply(19, 0)));
  EXPECT_EQ(batch.leadFailure()->error, -EADDRNOTAVAIL);
}

TEST_CASE("batch: a lead that succeeds is answered without a reply of its own") {
  const std::vector<NeighbourEntry> entries = Entries(3);
  NeighbourBatch batch(entries, 20, BatchLimits{1 << 20, 256});
  batch.Lead(19);
  EXPECT_EQ(Requests(batch.NextDatagram()).size(), size_t{3});
  EXPECT_TRUE(batch.Accept(Reply(22, 0)));
  EXPECT_TRUE(batch.done());
  EXPECT_TRUE(batch.leadAnswered());
  EXPECT_FALSE(batch.leadFailure().has_value());
}

TEST_CASE("batch: a lead whose first datagram's replies are lost is not answered") {
  const std::vector<NeighbourEntry> entries = Entries(3);
  NeighbourBatch batch(entries, 20, BatchLimits{1 << 20, 256});
  batch.Lead(19);
  batch.NextDatagram();
  batch.Abandon();
  EXPECT_FALSE(batch.leadAnswered());
  EXPECT_EQ(batch.unaccounted(), size_t{3});
}

TEST_CASE("batch: seeded random shapes always account for every entry") {
  std::mt19937 random(20261201);
  for (int round = 0; round < 300; ++round) {
    const size_t count = 1 + random() % 700;
    const std::vector<NeighbourEntry> entries = Entries(count, random() % 2 == 0);
    const uint32_t first = static_cast<uint32_t>(random());
    NeighbourBatch batch(entries, first, BatchLimits{64 + random() % 4000, 1 + random() % 256});
    // Half the rounds with a lead (a MAC write sent before) numbered just before the entries.
    const bool lead = random() % 2 == 0;
    if (lead) batch.Lead(first - 1);
    const bool leadFails = lead && random() % 3 == 0;
    bool leadLost = false;
    size_t expectedFailed = 0;
    size_t expectedLost = 0;
    std::set<uint32_t> seen;
    while (!batch.done()) {
      const bool firstDatagram = batch.datagrams() == 0;
      const std::vector<Request> requests = Requests(batch.NextDatagram());
      if (lead && firstDatagram && leadFails) {
        EXPECT_FALSE(batch.Accept(Reply(first - 1, -EADDRNOTAVAIL)));
      }
      for (const Request& request : requests) EXPECT_TRUE(seen.insert(request.seq).second);
      if (random() % 50 == 0) {
        expectedLost += requests.size();
        leadLost = leadLost || (lead && firstDatagram);
        batch.Abandon();
        continue;
      }
      for (size_t i = 0; i + 1 < requests.size(); ++i) {
        if (random() % 7 == 0) {
          ++expectedFailed;
          EXPECT_FALSE(batch.Accept(Reply(requests[i].seq, -EINVAL)));
        }
      }
      const bool lastFails = random() % 7 == 0;
      expectedFailed += lastFails ? 1 : 0;
      EXPECT_TRUE(batch.Accept(Reply(requests.back().seq, lastFails ? -EEXIST : 0)));
    }
    EXPECT_EQ(seen.size(), count);
    EXPECT_EQ(batch.failed(), expectedFailed);
    EXPECT_EQ(batch.unaccounted(), expectedLost);
    EXPECT_EQ(batch.written() + batch.failed() + batch.unaccounted(), count);
    EXPECT_EQ(batch.leadAnswered(), lead && !leadLost);
    EXPECT_EQ(batch.leadFailure().has_value(), leadFails);
  }
}

}  // namespace
