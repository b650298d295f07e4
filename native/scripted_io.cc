#include "scripted_io.h"

#include <algorithm>

namespace fg {

void ScriptedSource::Feed(std::vector<uint8_t> datagram) {
  queue_.push_back(Queued{false, std::move(datagram)});
}

void ScriptedSource::FeedOverrun() { queue_.push_back(Queued{true, {}}); }

std::vector<std::vector<uint8_t>> ScriptedSource::TakeRequests() {
  return std::exchange(requests_, {});
}

Result<Unit> ScriptedSource::Send(const std::vector<uint8_t>& request) {
  if (answer_) {
    answer_(request);
  } else {
    requests_.push_back(request);
  }
  return Unit{};
}

// As the kernel's recvmmsg: an ENOBUFS first in line is the whole read; one
// after some datagrams stops the read there and is kept for the next.
Result<Unit> ScriptedSource::ReceiveMany(DatagramSlots* slots, size_t max,
                                         std::vector<NetlinkSocket::Datagram>* out, bool* drained) {
  (void)slots;
  out->clear();
  taken_.clear();
  *drained = false;
  const size_t want = std::clamp<size_t>(max, 1, NetlinkSocket::kMaxBatchDatagrams);
  if (queue_.empty()) {
    out->push_back(NetlinkSocket::Datagram{NetlinkSocket::Received::kWouldBlock});
    *drained = true;
    return Unit{};
  }
  if (queue_.front().overrun) {
    queue_.pop_front();
    out->push_back(NetlinkSocket::Datagram{NetlinkSocket::Received::kOverrun});
    return Unit{};
  }
  while (taken_.size() < want && !queue_.empty() && !queue_.front().overrun) {
    taken_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  for (const Queued& datagram : taken_) {
    out->push_back(NetlinkSocket::Datagram{NetlinkSocket::Received::kDatagram,
                                           datagram.bytes.data(), datagram.bytes.size()});
  }
  *drained = taken_.size() < want;
  return Unit{};
}

Result<bool> ScriptedSource::WaitReadable(int timeoutMs) {
  (void)timeoutMs;
  return !queue_.empty() || (unfed_ && unfed_());
}

Result<Unit> ScriptedSource::SetFilter(const std::vector<sock_filter>& program) {
  (void)program;  // the script sends only what it means the core to read
  return Unit{};
}

Result<Unit> ScriptedSource::EnsureReceiveBuffer(int bytes) {
  receiveBuffer_ = std::max(receiveBuffer_, bytes);
  return Unit{};
}

}  // namespace fg
