// The seam of the monitor at the message boundary (as mdlayher/netlink's
// nltest): MonitorCore reads notifications and dump replies from a
// NotificationSource and makes its corrections through a CorrectionWriter.
// The kernel's are a subscribed NETLINK_ROUTE socket and a request socket;
// the scripted ones (scripted_io.h) are fed bytes and answer from a script,
// so that tests drive the real core - mirror, restore sets, allowance,
// corrections - without a kernel. No Node dependency.
#pragma once

#include <linux/filter.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "netlink_builder.h"
#include "netlink_parser.h"
#include "netlink_socket.h"
#include "result.h"

namespace fg {

class NotificationSource {
 public:
  virtual ~NotificationSource() = default;
  // The descriptor a reader polls (-1: nothing to poll, the owner drives reads).
  virtual int fd() const = 0;
  // The port id dump replies are addressed to.
  virtual uint32_t portid() const = 0;
  virtual int receiveBuffer() const = 0;
  virtual const std::vector<std::string>& warnings() const = 0;
  virtual uint32_t NextSeq() = 0;
  virtual Result<Unit> Send(const std::vector<uint8_t>& request) = 0;
  // As NetlinkSocket::ReceiveMany.
  virtual Result<Unit> ReceiveMany(DatagramSlots* slots, size_t max,
                                   std::vector<NetlinkSocket::Datagram>* out, bool* drained) = 0;
  virtual Result<bool> WaitReadable(int timeoutMs) = 0;
  virtual Result<Unit> SetFilter(const std::vector<sock_filter>& program) = 0;
  virtual Result<Unit> EnsureReceiveBuffer(int bytes) = 0;
};

class CorrectionWriter {
 public:
  virtual ~CorrectionWriter() = default;
  // The port id its writes' notifications name.
  virtual uint32_t portid() const = 0;
  virtual Result<netlink::LinkRecord> GetLink(int32_t ifindex) = 0;
  // As NetlinkRequester::WriteCorrection: the entries are written whatever the MAC write's
  // outcome, and `clock` read once its answer is.
  virtual CorrectionWrites WriteCorrection(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                           const std::vector<netlink::NeighbourEntry>& entries,
                                           const std::function<int64_t()>& clock) = 0;
};

// Opens the writer on first use (a correction is armed).
using WriterOpener = std::function<Result<std::unique_ptr<CorrectionWriter>>()>;

// The kernel's source: a subscribed NETLINK_ROUTE socket.
class SocketSource final : public NotificationSource {
 public:
  explicit SocketSource(NetlinkSocket socket) : socket_(std::move(socket)) {}
  int fd() const override { return socket_.fd(); }
  uint32_t portid() const override { return socket_.portid(); }
  int receiveBuffer() const override { return socket_.receiveBuffer(); }
  const std::vector<std::string>& warnings() const override { return socket_.warnings(); }
  uint32_t NextSeq() override { return socket_.NextSeq(); }
  Result<Unit> Send(const std::vector<uint8_t>& request) override { return socket_.Send(request); }
  Result<Unit> ReceiveMany(DatagramSlots* slots, size_t max,
                           std::vector<NetlinkSocket::Datagram>* out, bool* drained) override {
    return socket_.ReceiveMany(slots, max, out, drained);
  }
  Result<bool> WaitReadable(int timeoutMs) override { return socket_.WaitReadable(timeoutMs); }
  Result<Unit> SetFilter(const std::vector<sock_filter>& program) override {
    return socket_.SetFilter(program);
  }
  Result<Unit> EnsureReceiveBuffer(int bytes) override {
    return socket_.EnsureReceiveBuffer(bytes);
  }

 private:
  NetlinkSocket socket_;
};

// The kernel's writer: a request socket in the monitor's namespace.
class RequesterWriter final : public CorrectionWriter {
 public:
  static WriterOpener Opener(NetnsTarget netns);
  explicit RequesterWriter(NetlinkRequester requester) : requester_(std::move(requester)) {}
  uint32_t portid() const override { return requester_.portid(); }
  Result<netlink::LinkRecord> GetLink(int32_t ifindex) override {
    return requester_.GetLink(ifindex);
  }
  CorrectionWrites WriteCorrection(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                   const std::vector<netlink::NeighbourEntry>& entries,
                                   const std::function<int64_t()>& clock) override {
    return requester_.WriteCorrection(ifindex, mac, entries, clock);
  }

 private:
  NetlinkRequester requester_;
};

}  // namespace fg
