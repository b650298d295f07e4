#include "netlink_socket.h"

#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/nsfs.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <thread>

#include "neighbour_batch.h"

namespace fg {
namespace {

using netlink::AckRecord;
using netlink::DoneRecord;
using netlink::LinkRecord;
using netlink::Message;
using netlink::NeighRecord;

constexpr int kReplyTimeoutMs = 2000;

SysError Errno(const char* syscall, int errnum = errno) { return SysError(errnum, syscall); }

// Creates the socket and binds it; runs on whichever thread is in the right netns.
Result<int> CreateBoundSocket() {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) return Errno("socket");
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;  // nl_pid 0: the kernel picks a unique port id
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    SysError error = Errno("bind");
    close(fd);
    return error;
  }
  return fd;
}

Result<int> CreateSocketIn(const NetnsTarget& target) {
  Result<int> socket = SysError(EINVAL, "socket", "not run");
  Result<Unit> entered = RunInNetns(target, [&] { socket = CreateBoundSocket(); });
  if (!entered.ok()) return entered.error();
  return socket;
}

template <typename T>
bool SetOption(int fd, int level, int name, T value) {
  return setsockopt(fd, level, name, &value, sizeof(value)) == 0;
}

}  // namespace

Result<Unit> RunInNetns(const NetnsTarget& target, const std::function<void()>& work) {
  if (target.path.empty()) {
    work();
    return Unit{};
  }
  Result<Unit> result = Unit{};
  // setns() moves only the calling thread; this one exists for that and ends.
  std::thread runner([&] {
    // Non-blocking: a FIFO at the path must not hang the open (and the
    // caller joining this thread). Then it must be a network namespace.
    const int ns = open(target.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (ns < 0) {
      result = SysError(errno, "open", "network namespace " + target.path);
      return;
    }
    if (ioctl(ns, NS_GET_NSTYPE) != CLONE_NEWNET) {
      close(ns);
      result = SysError(EINVAL, "ioctl(NS_GET_NSTYPE)", "not a network namespace: " + target.path);
      return;
    }
    const int entered = setns(ns, CLONE_NEWNET);
    const int setnsErrno = errno;
    close(ns);
    if (entered != 0) {
      result = SysError(setnsErrno, "setns", "network namespace " + target.path);
      return;
    }
    work();
  });
  runner.join();
  return result;
}

Result<uint64_t> NetnsInode(const NetnsTarget& target) {
  const std::string path = target.path.empty() ? "/proc/thread-self/ns/net" : target.path;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return SysError(errno, "stat", path);
  return static_cast<uint64_t>(info.st_ino);
}

Result<uint64_t> NetnsCookie(int fd) {
#ifndef SO_NETNS_COOKIE
  constexpr int SO_NETNS_COOKIE = 71;  // asm-generic/socket.h; older libc headers lack it
#endif
  uint64_t cookie = 0;
  socklen_t length = sizeof(cookie);
  if (getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &length) != 0) {
    return SysError(errno, "getsockopt(SO_NETNS_COOKIE)");
  }
  return cookie;
}

NetlinkSocket::NetlinkSocket(int fd, uint32_t portid) : fd_(fd), portid_(portid) {
  // Sequence numbers start away from 0, which the kernel uses for notifications.
  seq_ = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count() &
                               0x3fffffff) |
         1u;
}

NetlinkSocket::NetlinkSocket(NetlinkSocket&& other) noexcept { *this = std::move(other); }

NetlinkSocket& NetlinkSocket::operator=(NetlinkSocket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    portid_ = other.portid_;
    seq_ = other.seq_;
    receiveBuffer_ = other.receiveBuffer_;
    sendBuffer_ = other.sendBuffer_;
    extendedAck_ = other.extendedAck_;
    warnings_ = std::move(other.warnings_);
    other.fd_ = -1;
  }
  return *this;
}

NetlinkSocket::~NetlinkSocket() { Close(); }

void NetlinkSocket::Close() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
}

Result<NetlinkSocket> NetlinkSocket::Open(const NetnsTarget& target, const SocketOptions& options) {
  Result<int> created = CreateSocketIn(target);
  if (!created.ok()) return created.error();
  const int fd = created.value();

  sockaddr_nl bound{};
  socklen_t boundLength = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &boundLength) != 0) {
    SysError error = Errno("getsockname");
    close(fd);
    return error;
  }
  NetlinkSocket socket(fd, bound.nl_pid);

  // Error replies carry the kernel's explanation, and not the whole request back.
  socket.extendedAck_ = SetOption(fd, SOL_NETLINK, NETLINK_EXT_ACK, 1);
  if (!socket.extendedAck_) {
    socket.warnings_.push_back("NETLINK_EXT_ACK unsupported: kernel error messages unavailable");
  }
  SetOption(fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);

  if (options.receiveBuffer > 0) {
    // FORCE exceeds net.core.rmem_max but needs CAP_NET_ADMIN; plain is capped.
    if (!SetOption(fd, SOL_SOCKET, SO_RCVBUFFORCE, options.receiveBuffer)) {
      const int forceErrno = errno;
      if (!SetOption(fd, SOL_SOCKET, SO_RCVBUF, options.receiveBuffer)) return Errno("setsockopt");
      socket.warnings_.push_back(std::string("SO_RCVBUFFORCE failed (") +
                                 (forceErrno == EPERM ? "EPERM" : std::to_string(forceErrno)) +
                                 "): receive buffer capped by net.core.rmem_max");
    }
  }
  if (Result<Unit> read = socket.ReadBuffers(); !read.ok()) return read.error();

  // Joined before any dump is sent, so no change falls between dump and events.
  for (uint32_t group : options.groups) {
    if (!SetOption(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, group)) return Errno("setsockopt");
  }
  return socket;
}

uint32_t NetlinkSocket::NextSeq() {
  if (++seq_ == 0) seq_ = 1;
  return seq_;
}

uint32_t NetlinkSocket::ReserveSeqs(uint32_t count) {
  const uint32_t first = NextSeq();
  seq_ += count - 1;  // may pass 0: only notifications use it, and replies match by port too
  return first;
}

Result<Unit> NetlinkSocket::EnsureReceiveBuffer(int bytes) {
  if (receiveBuffer_ >= bytes) return Unit{};
  // The kernel doubles what it is given (for its bookkeeping) and reports that.
  const int asked = bytes / 2;
  if (!SetOption(fd_, SOL_SOCKET, SO_RCVBUFFORCE, asked) &&
      !SetOption(fd_, SOL_SOCKET, SO_RCVBUF, asked)) {
    return Errno("setsockopt");
  }
  return ReadBuffers();
}

Result<Unit> NetlinkSocket::ReadBuffers() {
  int receive = 0;
  int send = 0;
  socklen_t length = sizeof(receive);
  if (getsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive, &length) != 0) return Errno("getsockopt");
  length = sizeof(send);
  if (getsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &send, &length) != 0) return Errno("getsockopt");
  receiveBuffer_ = receive;
  sendBuffer_ = send;
  return Unit{};
}

Result<Unit> NetlinkSocket::Send(const std::vector<uint8_t>& request) {
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    const ssize_t sent = sendto(fd_, request.data(), request.size(), 0,
                                reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel));
    if (sent >= 0) return Unit{};
    if (errno != EINTR) return Errno("sendto");
  }
}

Result<Unit> NetlinkSocket::SetFilter(const std::vector<sock_filter>& program) {
  if (program.empty()) {
    // The value is ignored, but the kernel wants an int's worth of it.
    const int unused = 0;
    if (setsockopt(fd_, SOL_SOCKET, SO_DETACH_FILTER, &unused, sizeof(unused)) != 0 &&
        errno != ENOENT) {
      return Errno("setsockopt");
    }
    return Unit{};
  }
  sock_fprog filter{};
  filter.len = static_cast<unsigned short>(program.size());
  filter.filter = const_cast<sock_filter*>(program.data());
  if (setsockopt(fd_, SOL_SOCKET, SO_ATTACH_FILTER, &filter, sizeof(filter)) != 0) {
    return Errno("setsockopt");
  }
  return Unit{};
}

Result<NetlinkSocket::Received> NetlinkSocket::Receive(std::vector<uint8_t>* buffer,
                                                       size_t* length) {
  // One syscall per datagram: the buffer is larger than any dump datagram
  // (the kernel caps those at 32 KiB), and MSG_TRUNC makes recvmsg report a
  // datagram's full size. A notification larger still is reported truncated
  // (the caller recovers the state it held) and the buffer grows to take it.
  if (buffer->size() < kReceiveBytes) buffer->resize(kReceiveBytes);
  sockaddr_nl sender{};
  iovec vector{buffer->data(), buffer->size()};
  msghdr header{};
  header.msg_name = &sender;
  header.msg_namelen = sizeof(sender);
  header.msg_iov = &vector;
  header.msg_iovlen = 1;
  ssize_t received;
  do {
    received = recvmsg(fd_, &header, MSG_DONTWAIT | MSG_TRUNC);
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Received::kWouldBlock;
    if (errno == ENOBUFS) return Received::kOverrun;
    return Errno("recvmsg");
  }
  switch (netlink::Admit(sender.nl_pid, header.msg_flags)) {
    case netlink::Admission::kForeignSender:
      return Received::kForeignSender;
    case netlink::Admission::kTruncated:
      if (static_cast<size_t>(received) <= kMaxReceiveBytes) {
        buffer->resize(static_cast<size_t>(received));
      }
      return Received::kTruncated;
    case netlink::Admission::kAccept:
      break;
  }
  *length = static_cast<size_t>(received);
  return Received::kDatagram;
}

Result<bool> NetlinkSocket::WaitReadable(int timeoutMs) {
  pollfd entry{fd_, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    const int ready = poll(&entry, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return Errno("poll");
  }
}

Result<NetlinkRequester> NetlinkRequester::Open(const NetnsTarget& target) {
  // Room for the error replies of large neighbour batches (see neighbour_batch.h);
  // without CAP_NET_ADMIN the plain option's cap applies, and batches are smaller.
  SocketOptions options;
  options.receiveBuffer = kRequesterReceiveBuffer;
  Result<NetlinkSocket> socket = NetlinkSocket::Open(target, options);
  if (!socket.ok()) return socket.error();
  return NetlinkRequester(std::move(socket.value()));
}

void DatagramSlots::Fit(size_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t rounded = std::min((bytes + kPage - 1) / kPage * kPage, kBytes);
  if (rounded > slotBytes_) slotBytes_ = rounded;
}

Result<Unit> NetlinkSocket::ReceiveMany(DatagramSlots* slots, size_t max,
                                        std::vector<Datagram>* out, bool* drained) {
  out->clear();
  *drained = false;
  const size_t want = std::clamp<size_t>(max, 1, std::min(slots->count(), kMaxBatchDatagrams));
  std::array<sockaddr_nl, kMaxBatchDatagrams> senders{};
  std::array<iovec, kMaxBatchDatagrams> vectors{};
  std::array<mmsghdr, kMaxBatchDatagrams> headers{};
  const size_t slotBytes = slots->slotBytes();
  for (size_t i = 0; i < want; ++i) {
    vectors[i] = iovec{slots->slot(i), slotBytes};
    headers[i].msg_hdr.msg_name = &senders[i];
    headers[i].msg_hdr.msg_namelen = sizeof(sockaddr_nl);
    headers[i].msg_hdr.msg_iov = &vectors[i];
    headers[i].msg_hdr.msg_iovlen = 1;
  }
  int received;
  do {
    received = recvmmsg(fd_, headers.data(), static_cast<unsigned>(want), MSG_DONTWAIT | MSG_TRUNC,
                        nullptr);
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      out->push_back(Datagram{Received::kWouldBlock});
      *drained = true;
      return Unit{};
    }
    if (errno == ENOBUFS) {
      out->push_back(Datagram{Received::kOverrun});
      return Unit{};
    }
    return Errno("recvmmsg");
  }
  for (size_t i = 0; i < static_cast<size_t>(received); ++i) {
    const msghdr& header = headers[i].msg_hdr;
    const size_t length = headers[i].msg_len;
    switch (netlink::Admit(senders[i].nl_pid, header.msg_flags)) {
      case netlink::Admission::kForeignSender:
        out->push_back(Datagram{Received::kForeignSender});
        break;
      case netlink::Admission::kTruncated:
        slots->Fit(length);  // the slots already read are not moved
        out->push_back(Datagram{Received::kTruncated});
        break;
      case netlink::Admission::kAccept:
        out->push_back(Datagram{Received::kDatagram,
                                static_cast<const uint8_t*>(vectors[i].iov_base), length});
        break;
    }
  }
  *drained = static_cast<size_t>(received) < want;
  return Unit{};
}

Result<std::vector<Message>> NetlinkRequester::Exchange(const std::vector<uint8_t>& request,
                                                        uint32_t seq, bool* interrupted,
                                                        uint32_t count) {
  Result<Unit> sent = socket_.Send(request);
  if (!sent.ok()) return sent.error();
  std::vector<Message> replies;
  uint32_t finished = 0;
  for (;;) {
    size_t length = 0;
    Result<NetlinkSocket::Received> received = socket_.Receive(&buffer_, &length);
    if (!received.ok()) return received.error();
    switch (received.value()) {
      case NetlinkSocket::Received::kWouldBlock: {
        Result<bool> readable = socket_.WaitReadable(kReplyTimeoutMs);
        if (!readable.ok()) return readable.error();
        if (!readable.value()) return SysError(ETIMEDOUT, "recvmsg", "no reply from the kernel");
        continue;
      }
      case NetlinkSocket::Received::kOverrun:
        // Unsubscribed: only a dump can overflow it; its replies are never dropped.
        continue;
      case NetlinkSocket::Received::kForeignSender:
      case NetlinkSocket::Received::kTruncated:
        continue;
      case NetlinkSocket::Received::kDatagram:
        break;
    }
    netlink::ParseDatagramInto(buffer_.data(), length, &parsed_);
    for (Message& message : parsed_.messages) {
      // Ours: sent by this socket, seq in [seq, seq + count) (unsigned: wraps).
      if (message.seq - seq >= count || message.portid != socket_.portid()) continue;
      if (message.flags & NLM_F_DUMP_INTR) *interrupted = true;
      // A dump ends with NLMSG_DONE; any other reply is one message, or an ACK.
      const bool final = std::holds_alternative<AckRecord>(message.body) ||
                         std::holds_alternative<DoneRecord>(message.body) ||
                         !(message.flags & NLM_F_MULTI);
      replies.push_back(std::move(message));
      if (final && ++finished == count) return replies;
    }
    if (parsed_.error) {
      return SysError(EBADMSG, "recvmsg", "malformed reply: " + parsed_.error->reason);
    }
  }
}

namespace {

// The kernel's verdict in a reply list: the errno of an error ACK or of a DONE.
int32_t ReplyError(const std::vector<Message>& replies, std::string* extack) {
  if (replies.empty()) return 0;
  const Message& last = replies.back();
  if (const auto* ack = std::get_if<AckRecord>(&last.body)) {
    *extack = ack->extackMessage;
    return ack->error;
  }
  if (const auto* done = std::get_if<DoneRecord>(&last.body)) return done->error;
  return 0;
}

}  // namespace

Result<Unit> NetlinkRequester::Acknowledged(const std::vector<uint8_t>& request, uint32_t seq,
                                            const char* syscall, int32_t ifindex) {
  bool interrupted = false;
  Result<std::vector<Message>> replies = Exchange(request, seq, &interrupted);
  if (!replies.ok()) {
    SysError error = replies.error();
    error.ifindex = ifindex;
    return error;
  }
  std::string extack;
  const int32_t error = ReplyError(replies.value(), &extack);
  if (error != 0) {
    SysError failure(-error, syscall);
    failure.ifindex = ifindex;
    failure.extack = extack;
    return failure;
  }
  return Unit{};
}

template <typename Record>
Result<std::vector<Record>> NetlinkRequester::Dump(uint16_t type, uint8_t family,
                                                   const char* syscall) {
  for (int attempt = 1; attempt <= kDumpAttempts; ++attempt) {
    const uint32_t seq = socket_.NextSeq();
    bool interrupted = false;
    Result<std::vector<Message>> replies =
        Exchange(netlink::BuildDumpRequest(type, family, seq), seq, &interrupted);
    if (!replies.ok()) return replies.error();
    std::string extack;
    const int32_t error = ReplyError(replies.value(), &extack);
    if (error != 0) {
      SysError failure(-error, syscall);
      failure.extack = extack;
      return failure;
    }
    if (interrupted) continue;  // the set changed while it was walked: walk it again
    std::vector<Record> records;
    for (Message& message : replies.value()) {
      if (auto* record = std::get_if<Record>(&message.body)) records.push_back(std::move(*record));
    }
    return records;
  }
  return SysError(EAGAIN, syscall,
                  "dump inconsistent after " + std::to_string(kDumpAttempts) + " attempts");
}

Result<std::vector<LinkRecord>> NetlinkRequester::DumpLinks() {
  return Dump<LinkRecord>(RTM_GETLINK, AF_UNSPEC, "getlink");
}

Result<std::vector<NeighRecord>> NetlinkRequester::DumpNeighbours(uint8_t family) {
  return Dump<NeighRecord>(RTM_GETNEIGH, family, "getneigh");
}

Result<LinkRecord> NetlinkRequester::FetchLink(const std::vector<uint8_t>& request, uint32_t seq,
                                               int32_t ifindex, const std::string& name) {
  bool interrupted = false;
  Result<std::vector<Message>> replies = Exchange(request, seq, &interrupted);
  SysError failure(0, "getlink");
  failure.ifindex = ifindex;
  failure.interface = name;
  if (!replies.ok()) {
    failure.errnum = replies.error().errnum;
    failure.detail = replies.error().detail;
    return failure;
  }
  failure.errnum = -ReplyError(replies.value(), &failure.extack);
  if (failure.errnum != 0) return failure;
  for (Message& message : replies.value()) {
    if (auto* link = std::get_if<LinkRecord>(&message.body)) return std::move(*link);
  }
  failure.errnum = EBADMSG;
  failure.detail = "reply without a link";
  return failure;
}

Result<LinkRecord> NetlinkRequester::GetLink(int32_t ifindex) {
  const uint32_t seq = socket_.NextSeq();
  return FetchLink(netlink::BuildGetLinkRequest(ifindex, seq), seq, ifindex, "");
}

Result<LinkRecord> NetlinkRequester::GetLinkByName(const std::string& name) {
  const uint32_t seq = socket_.NextSeq();
  return FetchLink(netlink::BuildGetLinkByNameRequest(name, seq), seq, 0, name);
}

Result<Unit> NetlinkRequester::SetLinkAddress(int32_t ifindex, const std::array<uint8_t, 6>& mac) {
  const uint32_t seq = socket_.NextSeq();
  return Acknowledged(netlink::BuildSetLinkAddressRequest(ifindex, mac, seq), seq, "setlink",
                      ifindex);
}

Result<Unit> NetlinkRequester::ReplaceNeighbour(const netlink::NeighbourEntry& entry) {
  const uint32_t seq = socket_.NextSeq();
  return Acknowledged(netlink::BuildNeighbourReplaceRequest(entry, seq), seq, "setneigh",
                      entry.ifindex);
}

Result<Unit> NetlinkRequester::DeleteNeighbour(const netlink::NeighbourEntry& entry) {
  const uint32_t seq = socket_.NextSeq();
  return Acknowledged(netlink::BuildNeighbourDeleteRequest(entry, seq), seq, "delneigh",
                      entry.ifindex);
}

NeighbourWrites NetlinkRequester::ReplaceNeighbours(
    const std::vector<netlink::NeighbourEntry>& entries) {
  if (entries.empty()) return NeighbourWrites{};
  const uint32_t first = socket_.ReserveSeqs(static_cast<uint32_t>(entries.size()));
  netlink::NeighbourBatch batch(
      entries, first, netlink::BatchLimitsFor(socket_.sendBuffer(), socket_.receiveBuffer()));
  return WriteBatch(&batch, entries, nullptr, nullptr);
}

CorrectionWrites NetlinkRequester::WriteCorrection(
    int32_t ifindex, const std::array<uint8_t, 6>& mac,
    const std::vector<netlink::NeighbourEntry>& entries, const std::function<int64_t()>& clock) {
  CorrectionWrites result;
  if (entries.empty()) {
    Result<Unit> written = SetLinkAddress(ifindex, mac);
    result.macAnsweredNs = clock();
    if (!written.ok()) result.macError = written.error();
    return result;
  }
  // The MAC write goes first, on its own: nothing else is built or sent before it. Its answer
  // (an error, or nothing) is read with the first datagram's.
  const uint32_t macSeq = socket_.NextSeq();
  if (Result<Unit> sent =
          socket_.Send(netlink::BuildSetLinkAddressRequest(ifindex, mac, macSeq, false));
      !sent.ok()) {
    SysError error = sent.error();
    error.ifindex = ifindex;
    result.macError = error;
    result.macAnsweredNs = clock();
    return result;  // refused by the socket: the entries' datagram would fare no better
  }
  const uint32_t first = socket_.ReserveSeqs(static_cast<uint32_t>(entries.size()));
  netlink::NeighbourBatch batch(
      entries, first, netlink::BatchLimitsFor(socket_.sendBuffer(), socket_.receiveBuffer()));
  batch.Lead(macSeq);
  result.neighbours = WriteBatch(&batch, entries, &clock, &result.macAnsweredNs);
  if (const std::optional<netlink::BatchFailure>& failure = batch.leadFailure()) {
    result.macError = SysError(-failure->error, "setlink");
    result.macError->ifindex = ifindex;
    result.macError->extack = failure->extack;
  } else if (!batch.leadAnswered()) {
    // Its answer was not read: the first datagram's send or read failed, as the batch's error says.
    result.macError = result.neighbours.error;
    result.macAnsweredNs = clock();
  }
  return result;
}

NeighbourWrites NetlinkRequester::WriteBatch(netlink::NeighbourBatch* batch,
                                             const std::vector<netlink::NeighbourEntry>& entries,
                                             const std::function<int64_t()>* clock,
                                             int64_t* leadAnsweredNs) {
  NeighbourWrites result;
  const auto fail = [&](SysError error) {
    batch->Abandon();
    result.error = std::move(error);
  };
  while (!batch->done() && !result.error) {
    if (Result<Unit> sent = socket_.Send(batch->NextDatagram()); !sent.ok()) {
      fail(sent.error());
      break;
    }
    while (batch->inFlight() && !result.error) {
      size_t length = 0;
      Result<NetlinkSocket::Received> received = socket_.Receive(&buffer_, &length);
      if (!received.ok()) {
        fail(received.error());
        break;
      }
      if (received.value() == NetlinkSocket::Received::kWouldBlock) {
        Result<bool> readable = socket_.WaitReadable(kReplyTimeoutMs);
        if (!readable.ok()) fail(readable.error());
        if (readable.ok() && !readable.value()) {
          fail(SysError(ETIMEDOUT, "recvmsg", "no reply from the kernel"));
        }
        continue;
      }
      if (received.value() == NetlinkSocket::Received::kOverrun) {
        // Error replies were dropped: which requests failed is unknown.
        fail(SysError(ENOBUFS, "recvmsg", "replies to neighbour writes lost"));
        break;
      }
      if (received.value() != NetlinkSocket::Received::kDatagram) continue;
      netlink::ParseDatagramInto(buffer_.data(), length, &parsed_);
      for (const Message& message : parsed_.messages) {
        if (message.portid == socket_.portid() && batch->Accept(message) &&
            leadAnsweredNs != nullptr && *leadAnsweredNs == 0 && batch->leadAnswered()) {
          *leadAnsweredNs = (*clock)();
        }
      }
    }
  }
  result.written = batch->written();
  result.datagrams = batch->datagrams();
  const size_t unwritten = entries.size() - batch->written();
  if (!result.error && batch->firstFailure()) {
    const netlink::BatchFailure& failure = *batch->firstFailure();
    result.error = SysError(-failure.error, "setneigh");
    result.error->ifindex = entries[failure.index].ifindex;
    result.error->extack = failure.extack;
  }
  if (result.error && unwritten > 0) {
    result.error->detail += (result.error->detail.empty() ? "" : "; ") + std::to_string(unwritten) +
                            " of " + std::to_string(entries.size()) + " entries not written";
  }
  return result;
}

Result<Unit> NetlinkRequester::ProbeWriteAccess() {
  const uint32_t seq = socket_.NextSeq();
  return Acknowledged(netlink::BuildNoopSetLinkRequest(seq), seq, "setlink", 1);
}

}  // namespace fg
