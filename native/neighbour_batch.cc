#include "neighbour_batch.h"

#include <algorithm>
#include <variant>

namespace fg::netlink {

namespace {
// netlink_sendmsg refuses a datagram longer than sk_sndbuf - 32.
constexpr size_t kSendSlack = 32;
// The largest request: header, ndmsg, NDA_DST of 16 bytes, NDA_LLADDR of 6.
constexpr size_t kLargestRequest = 16 + 12 + 20 + 12;
}  // namespace

BatchLimits BatchLimitsFor(int sendBuffer, int receiveBuffer) {
  BatchLimits limits;
  const size_t send = sendBuffer > 0 ? static_cast<size_t>(sendBuffer) : 0;
  limits.maxBytes = send > kSendSlack + kLargestRequest ? send - kSendSlack : kLargestRequest;
  const size_t receive = receiveBuffer > 0 ? static_cast<size_t>(receiveBuffer) : 0;
  limits.maxRequests = std::clamp<size_t>(receive / kReplyCharge, 1, kMaxRequestsPerDatagram);
  return limits;
}

NeighbourBatch::NeighbourBatch(const std::vector<NeighbourEntry>& entries, uint32_t firstSeq,
                               BatchLimits limits)
    : entries_(entries), firstSeq_(firstSeq), limits_(limits) {}

void NeighbourBatch::Lead(uint32_t seq) {
  lead_ = true;
  leadSeq_ = seq;
}

const std::vector<uint8_t>& NeighbourBatch::NextDatagram() {
  datagram_.clear();
  chunkBegin_ = next_;
  chunkFailures_ = 0;
  // The lead's error reply takes one request's room in the receive buffer.
  const bool lead = lead_ && datagrams_ == 0;
  const size_t maxRequests = std::max<size_t>(limits_.maxRequests - (lead ? 1 : 0), 1);
  // Room for the requests up front: one allocation per datagram, not one per doubling.
  const size_t requests = std::min(entries_.size() - next_, maxRequests);
  datagram_.reserve(std::min(requests * kLargestRequest, limits_.maxBytes + kLargestRequest));
  leadInFlight_ = lead;
  // Requests are appended until the next would pass a limit; the last then
  // asks for an ACK.
  size_t lastOffset = 0;
  while (next_ < entries_.size() && next_ - chunkBegin_ < maxRequests) {
    const size_t before = datagram_.size();
    AppendNeighbourReplaceRequest(&datagram_, entries_[next_],
                                  firstSeq_ + static_cast<uint32_t>(next_), false);
    if (datagram_.size() > limits_.maxBytes && next_ > chunkBegin_) {
      datagram_.resize(before);
      break;
    }
    lastOffset = before;
    ++next_;
  }
  if (next_ > chunkBegin_) {
    RequestAck(&datagram_, lastOffset);
    inFlight_ = true;
    ++datagrams_;
  }
  return datagram_;
}

bool NeighbourBatch::Accept(const Message& reply) {
  if (!inFlight_) return false;
  const auto* ack = std::get_if<AckRecord>(&reply.body);
  if (ack == nullptr) return false;
  if (leadInFlight_ && reply.seq == leadSeq_) {
    if (ack->error != 0 && !leadFailure_)
      leadFailure_ = BatchFailure{0, ack->error, ack->extackMessage};
    return false;
  }
  const size_t index = reply.seq - firstSeq_;  // unsigned: wraps with the numbers
  if (index < chunkBegin_ || index >= next_) return false;
  if (ack->error != 0) {
    ++chunkFailures_;
    if (!firstFailure_) firstFailure_ = BatchFailure{index, ack->error, ack->extackMessage};
  }
  if (index + 1 != next_) return false;
  // The last request's reply: everything before it has been answered.
  const size_t sent = next_ - chunkBegin_;
  failed_ += chunkFailures_;
  written_ += sent - chunkFailures_;
  inFlight_ = false;
  leadAnswered_ = leadAnswered_ || leadInFlight_;
  leadInFlight_ = false;
  return true;
}

void NeighbourBatch::Abandon() {
  if (!inFlight_) return;
  unaccounted_ += next_ - chunkBegin_;
  inFlight_ = false;
  leadInFlight_ = false;
}

}  // namespace fg::netlink
