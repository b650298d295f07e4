// NETLINK_ROUTE sockets: opened in a chosen network namespace without moving
// the calling thread, non-blocking and close-on-exec, with bounded reads that
// never parse a truncated or foreign datagram. No Node dependency.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "netlink_builder.h"
#include "netlink_parser.h"
#include "result.h"

namespace fg::netlink {
class NeighbourBatch;
}  // namespace fg::netlink

namespace fg {

// A dump flagged NLM_F_DUMP_INTR is walked again up to this many times in all
// (as vishvananda/netlink does); after that it is reported as inconsistent.
inline constexpr int kDumpAttempts = 10;

// The network namespace a socket lives in. An empty path is the caller's own.
struct NetnsTarget {
  std::string path;  // "/run/netns/NAME", "/proc/PID/ns/net", or empty
};

// Runs `work` on a short-lived thread inside `target` (inline for the caller's
// own namespace): sockets it creates live there; no thread of the process
// changes namespace. Fails when the namespace cannot be entered (work not run).
Result<Unit> RunInNetns(const NetnsTarget& target, const std::function<void()>& work);

// Inode number of the network namespace at `path` (own namespace when empty).
Result<uint64_t> NetnsInode(const NetnsTarget& target);
// SO_NETNS_COOKIE of the namespace `fd` lives in (Linux 5.14+): unlike an
// inode, never reused while the system runs.
Result<uint64_t> NetnsCookie(int fd);

struct SocketOptions {
  std::vector<uint32_t> groups;  // RTNLGRP_* to join before anything is sent
  int receiveBuffer = 0;         // bytes; 0 keeps the kernel default
};

// Room for the datagrams one NetlinkSocket::ReceiveMany reads: equal slots of
// one allocation of kBytes, left uninitialised so that only what the kernel
// writes is ever touched. Slots of 64 KiB to begin with (16 of them: twice the
// kernel's largest dump datagram); a datagram cut short makes every slot as
// large as it (fewer of them).
class DatagramSlots {
 public:
  static constexpr size_t kBytes = 1024 * 1024;
  static constexpr size_t kFirstSlotBytes = 64 * 1024;

  DatagramSlots() : storage_(new uint8_t[kBytes]) {}
  size_t count() const { return kBytes / slotBytes_; }
  size_t slotBytes() const { return slotBytes_; }
  uint8_t* slot(size_t index) { return storage_.get() + index * slotBytes_; }
  // Room for a datagram of `bytes` (at most kBytes) in each slot from now on.
  void Fit(size_t bytes);

 private:
  std::unique_ptr<uint8_t[]> storage_;
  size_t slotBytes_ = kFirstSlotBytes;
};

class NetlinkSocket {
 public:
  // Opens the socket inside `target` on a short-lived thread (setns needs
  // CAP_SYS_ADMIN), so no thread of the process changes namespace.
  static Result<NetlinkSocket> Open(const NetnsTarget& target, const SocketOptions& options);

  NetlinkSocket(NetlinkSocket&& other) noexcept;
  NetlinkSocket& operator=(NetlinkSocket&& other) noexcept;
  NetlinkSocket(const NetlinkSocket&) = delete;
  NetlinkSocket& operator=(const NetlinkSocket&) = delete;
  ~NetlinkSocket();

  int fd() const { return fd_; }
  uint32_t portid() const { return portid_; }
  int receiveBuffer() const { return receiveBuffer_; }  // effective, as read back
  int sendBuffer() const { return sendBuffer_; }        // effective, as read back
  // Degradations accepted while opening (a smaller receive buffer, no extended ACKs).
  const std::vector<std::string>& warnings() const { return warnings_; }
  bool extendedAck() const { return extendedAck_; }

  // Releases the descriptor (idempotent).
  void Close();

  Result<Unit> Send(const std::vector<uint8_t>& request);

  // Replaces the socket's classic BPF filter; an empty program removes it.
  Result<Unit> SetFilter(const std::vector<sock_filter>& program);

  enum class Received : uint8_t {
    kDatagram,       // `*length` bytes from the kernel are in the buffer
    kWouldBlock,     // nothing queued
    kOverrun,        // ENOBUFS: the kernel dropped notifications
    kForeignSender,  // a datagram not sent by the kernel was discarded
    kTruncated,      // a datagram was cut short and discarded
  };

  // Reads one datagram without blocking, in one syscall, into a buffer of at
  // least kReceiveBytes. A datagram cut short is discarded (kTruncated) and
  // the buffer grown to its size (up to kMaxReceiveBytes) for the next one.
  Result<Received> Receive(std::vector<uint8_t>* buffer, size_t* length);
  static constexpr size_t kReceiveBytes = DatagramSlots::kFirstSlotBytes;
  static constexpr size_t kMaxReceiveBytes = DatagramSlots::kBytes;

  // A datagram as ReceiveMany judged it; `data` points into its slot.
  struct Datagram {
    Received kind = Received::kWouldBlock;
    const uint8_t* data = nullptr;
    size_t length = 0;
  };
  // Reads up to `max` queued datagrams (at most slots->count()) without
  // blocking, in one recvmmsg, each judged as Receive judges one, into `out`
  // (replaced). Nothing queued is one kWouldBlock, ENOBUFS one kOverrun. Fewer
  // datagrams than asked (`*drained`): the socket was empty then, or an error
  // stopped the read, which the kernel keeps for the next call.
  Result<Unit> ReceiveMany(DatagramSlots* slots, size_t max, std::vector<Datagram>* out,
                           bool* drained);
  static constexpr size_t kMaxBatchDatagrams =
      DatagramSlots::kBytes / DatagramSlots::kFirstSlotBytes;

  // Waits up to `timeoutMs` for the socket to become readable.
  Result<bool> WaitReadable(int timeoutMs);

  uint32_t NextSeq();
  // `count` consecutive sequence numbers; the first of them.
  uint32_t ReserveSeqs(uint32_t count);

  // Grows the receive buffer to at least `bytes` (SO_RCVBUFFORCE with
  // CAP_NET_ADMIN, else as far as net.core.rmem_max allows); never shrinks it.
  Result<Unit> EnsureReceiveBuffer(int bytes);

 private:
  NetlinkSocket(int fd, uint32_t portid);
  Result<Unit> ReadBuffers();

  int fd_ = -1;
  uint32_t portid_ = 0;
  uint32_t seq_ = 0;
  int receiveBuffer_ = 0;
  int sendBuffer_ = 0;
  bool extendedAck_ = false;
  std::vector<std::string> warnings_;
};

// The outcome of a batch of neighbour writes: how many the kernel took, and the
// first failure (a write it refused, or a socket error after which the rest is
// unknown); `error` is empty only when every entry was written.
struct NeighbourWrites {
  size_t written = 0;
  size_t datagrams = 0;
  std::optional<SysError> error;
};

// A correction's writes (NetlinkRequester::WriteCorrection): the MAC write's failure, if it
// failed or its answer was lost, the clock when its answer was read, and the re-adds'.
struct CorrectionWrites {
  std::optional<SysError> macError;
  int64_t macAnsweredNs = 0;
  NeighbourWrites neighbours;
};

// A requester's receive buffer, asked for at open: error replies for 1024 requests.
inline constexpr int kRequesterReceiveBuffer = 1 << 20;

// Request/response over a dedicated, unsubscribed socket: every call sends one
// request and reads until the reply with its sequence number; anything else
// (a late reply to an earlier, timed-out request) is dropped.
class NetlinkRequester {
 public:
  static Result<NetlinkRequester> Open(const NetnsTarget& target);

  int fd() const { return socket_.fd(); }
  // The port id its requests' notifications name (nlmsg_pid).
  uint32_t portid() const { return socket_.portid(); }
  void Close() { socket_.Close(); }

  Result<std::vector<netlink::LinkRecord>> DumpLinks();
  Result<std::vector<netlink::NeighRecord>> DumpNeighbours(uint8_t family);
  // ENODEV (as a SysError) when no such interface exists.
  Result<netlink::LinkRecord> GetLink(int32_t ifindex);
  Result<netlink::LinkRecord> GetLinkByName(const std::string& name);
  Result<Unit> SetLinkAddress(int32_t ifindex, const std::array<uint8_t, 6>& mac);
  Result<Unit> ReplaceNeighbour(const netlink::NeighbourEntry& entry);
  Result<Unit> DeleteNeighbour(const netlink::NeighbourEntry& entry);
  // All of them, in as few datagrams as the socket's buffers allow, each
  // accounted for (see neighbour_batch.h).
  NeighbourWrites ReplaceNeighbours(const std::vector<netlink::NeighbourEntry>& entries);
  // The MAC write, then the entries it flushed re-added, without waiting for the write's answer
  // in between: it is read with the first datagram's (one read for both). The kernel takes the
  // entries whether or not the write fails (they are other nodes' entries, right either way).
  CorrectionWrites WriteCorrection(int32_t ifindex, const std::array<uint8_t, 6>& mac,
                                   const std::vector<netlink::NeighbourEntry>& entries,
                                   const std::function<int64_t()>& clock);
  // A write that changes nothing (RTM_NEWLINK on lo without attributes): the
  // kernel checks CAP_NET_ADMIN before looking at it.
  Result<Unit> ProbeWriteAccess();

 private:
  explicit NetlinkRequester(NetlinkSocket socket) : socket_(std::move(socket)) {}

  // Sends `request` (`count` messages with consecutive sequence numbers from
  // `seq`) and collects the replies until each has its ACK or NLMSG_DONE; a
  // dump reply flagged NLM_F_DUMP_INTR sets *interrupted.
  Result<std::vector<netlink::Message>> Exchange(const std::vector<uint8_t>& request, uint32_t seq,
                                                 bool* interrupted, uint32_t count = 1);
  Result<Unit> Acknowledged(const std::vector<uint8_t>& request, uint32_t seq, const char* syscall,
                            int32_t ifindex);
  Result<netlink::LinkRecord> FetchLink(const std::vector<uint8_t>& request, uint32_t seq,
                                        int32_t ifindex, const std::string& name);
  template <typename Record>
  Result<std::vector<Record>> Dump(uint16_t type, uint8_t family, const char* syscall);
  // Sends the batch's datagrams and reads their answers; when the batch has a lead, *leadAnsweredNs
  // is the clock when its datagram was answered.
  NeighbourWrites WriteBatch(netlink::NeighbourBatch* batch,
                             const std::vector<netlink::NeighbourEntry>& entries,
                             const std::function<int64_t()>* clock, int64_t* leadAnsweredNs);

  NetlinkSocket socket_;
  std::vector<uint8_t> buffer_;
  netlink::ParsedDatagram parsed_;  // scratch: one reply datagram's messages
};

}  // namespace fg
