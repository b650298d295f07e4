// Many neighbour writes in few datagrams, every one accounted for. Pure: it
// builds the datagrams and reads the replies it is handed; the socket is the
// caller's (NetlinkRequester::ReplaceNeighbours).
//
// A datagram carries consecutive requests and asks for an ACK on its last one
// only: rtnetlink handles a datagram's requests in order inside sendmsg() and
// answers one without NLM_F_ACK only when it fails, so when the last one's
// reply has been read, every failure before it has been too, and every request
// without an error reply succeeded. A datagram holds no more requests than
// the send buffer takes (netlink_sendmsg: EMSGSIZE past sk_sndbuf - 32) and
// no more than the receive buffer could hold error replies for, had all of
// them failed (each reply is charged its skb's truesize, ~800 bytes), so the
// replies to one datagram never overrun the socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "netlink_builder.h"
#include "netlink_parser.h"

namespace fg::netlink {

// What one small netlink reply or notification is charged against a receive
// buffer (its skb's truesize, 768-832 bytes here), rounded up.
inline constexpr size_t kReplyCharge = 1024;
// Requests per datagram at most, whatever the buffers allow: the kernel holds
// the RTNL lock for a datagram's whole run.
inline constexpr size_t kMaxRequestsPerDatagram = 256;

struct BatchLimits {
  size_t maxBytes = 0;     // bytes per datagram
  size_t maxRequests = 0;  // requests per datagram
};

// Limits for a socket whose buffers (as SO_SNDBUF/SO_RCVBUF read back) are these.
BatchLimits BatchLimitsFor(int sendBuffer, int receiveBuffer);

struct BatchFailure {
  size_t index = 0;   // into the entries
  int32_t error = 0;  // -errno, as the kernel sent it
  std::string extack;
};

class NeighbourBatch {
 public:
  // Requests for `entries` (which must outlive the batch), sequence numbers
  // firstSeq, firstSeq + 1, ... (unsigned: they may wrap).
  NeighbourBatch(const std::vector<NeighbourEntry>& entries, uint32_t firstSeq, BatchLimits limits);

  // A request the caller sent on the same socket just before the first datagram, without
  // NLM_F_ACK, with sequence number `seq` (not one of the entries'): a correction's MAC write,
  // sent on its own so that nothing is built before it, its answer read with the entries'. The
  // kernel answers it only if it fails, and before it handles the datagram, so once the first
  // datagram's last ACK is read, leadFailure() is known. Called before the first NextDatagram().
  void Lead(uint32_t seq);

  // Every datagram sent and answered.
  bool done() const { return next_ == entries_.size() && !inFlight_; }
  bool inFlight() const { return inFlight_; }

  // The next datagram's bytes; it is then in flight until Accept() says it is answered.
  const std::vector<uint8_t>& NextDatagram();

  // A message read from the socket (the caller checked its sender port). True
  // when it completes the datagram in flight; replies to other sequence
  // numbers are ignored.
  bool Accept(const Message& reply);

  // The datagram in flight will not be answered in full (its replies were
  // lost): its requests are counted as unaccounted, none as written.
  void Abandon();

  size_t written() const { return written_; }
  size_t failed() const { return failed_; }
  size_t unaccounted() const { return unaccounted_; }
  size_t datagrams() const { return datagrams_; }
  const std::optional<BatchFailure>& firstFailure() const { return firstFailure_; }
  // The first datagram was answered in full: the lead's failure, if any, has been read.
  bool leadAnswered() const { return leadAnswered_; }
  // Its error reply (`index` unused).
  const std::optional<BatchFailure>& leadFailure() const { return leadFailure_; }

 private:
  const std::vector<NeighbourEntry>& entries_;
  uint32_t firstSeq_;
  BatchLimits limits_;
  std::vector<uint8_t> datagram_;
  size_t next_ = 0;        // first entry not yet sent
  size_t chunkBegin_ = 0;  // entries [chunkBegin_, next_) are in flight
  size_t chunkFailures_ = 0;
  bool inFlight_ = false;
  size_t written_ = 0;
  size_t failed_ = 0;
  size_t unaccounted_ = 0;
  size_t datagrams_ = 0;
  std::optional<BatchFailure> firstFailure_;
  bool lead_ = false;
  uint32_t leadSeq_ = 0;
  bool leadInFlight_ = false;
  bool leadAnswered_ = false;
  std::optional<BatchFailure> leadFailure_;
};

}  // namespace fg::netlink
