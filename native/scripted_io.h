// The scripted side of the monitor's seam (monitor_io.h): a source fed the
// bytes a kernel would send, and a writer that answers from a script and
// records nothing itself (the script does). Tests drive the real MonitorCore
// with them; the addon's ScriptedMonitor hands the script to JavaScript. No
// Node dependency.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "monitor_io.h"

namespace fg {

class ScriptedSource final : public NotificationSource {
 public:
  // `answer`: called with each request the core sends (its dumps), to feed the replies at
  // once, as the kernel answers when asked; without it, requests wait for TakeRequests().
  using Answer = std::function<void(const std::vector<uint8_t>& request)>;
  // `unfed`: whether the script's kernel holds notifications for this socket that it has not
  // fed yet (a real socket would hold them already: they count as readable).
  using Unfed = std::function<bool()>;
  explicit ScriptedSource(uint32_t portid, Answer answer = {}, Unfed unfed = {})
      : portid_(portid), answer_(std::move(answer)), unfed_(std::move(unfed)) {}

  // Queues a datagram as the kernel would (read in order, one per datagram).
  void Feed(std::vector<uint8_t> datagram);
  // Queues an ENOBUFS at this point of the stream (notifications were lost).
  void FeedOverrun();
  // Whatever the core has sent (its dump requests), oldest first; emptied.
  std::vector<std::vector<uint8_t>> TakeRequests();
  size_t queued() const { return queue_.size(); }

  int fd() const override { return -1; }
  uint32_t portid() const override { return portid_; }
  int receiveBuffer() const override { return receiveBuffer_; }
  const std::vector<std::string>& warnings() const override { return warnings_; }
  uint32_t NextSeq() override { return ++seq_; }
  Result<Unit> Send(const std::vector<uint8_t>& request) override;
  // Takes up to `max` queued datagrams; `drained` when fewer were left.
  Result<Unit> ReceiveMany(DatagramSlots* slots, size_t max,
                           std::vector<NetlinkSocket::Datagram>* out, bool* drained) override;
  Result<bool> WaitReadable(int timeoutMs) override;
  Result<Unit> SetFilter(const std::vector<sock_filter>& program) override;
  Result<Unit> EnsureReceiveBuffer(int bytes) override;

 private:
  struct Queued {
    bool overrun = false;
    std::vector<uint8_t> bytes;
  };
  uint32_t portid_;
  Answer answer_;
  Unfed unfed_;
  uint32_t seq_ = 0;
  int receiveBuffer_ = 212992;  // the kernel's usual default
  std::vector<std::string> warnings_;
  std::deque<Queued> queue_;
  std::vector<Queued> taken_;  // what the last ReceiveMany handed out (its data points here)
  std::vector<std::vector<uint8_t>> requests_;
};

// What a scripted writer does: each call answers as the script's kernel would.
struct WriterScript {
  std::function<Result<netlink::LinkRecord>(int32_t ifindex)> getLink;
  std::function<Result<Unit>(int32_t ifindex, const std::array<uint8_t, 6>& mac)> setLinkAddress;
  std::function<NeighbourWrites(const std::vector<netlink::NeighbourEntry>& entries)>
      replaceNeighbours;
};

class ScriptedWriter final : public CorrectionWriter {
 public:
  ScriptedWriter(uint32_t portid, WriterScript script)
      : portid_(portid), script_(std::move(script)) {}
  uint32_t portid() const override { return portid_; }
  Result<netlink::LinkRecord> GetLink(int32_t ifindex) override { return script_.getLink(ifindex); }
  // The kernel's order: the MAC write, then the entries whatever its outcome.
  CorrectionWrites WriteCorrection(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                   const std::vector<netlink::NeighbourEntry>& entries,
                                   const std::function<int64_t()>& clock) override {
    CorrectionWrites writes;
    Result<Unit> written = script_.setLinkAddress(ifindex, mac);
    writes.macAnsweredNs = clock();
    if (!written.ok()) writes.macError = written.error();
    if (!entries.empty()) writes.neighbours = script_.replaceNeighbours(entries);
    return writes;
  }

 private:
  uint32_t portid_;
  WriterScript script_;
};

}  // namespace fg
