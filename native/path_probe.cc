#include "path_probe.h"

#include <arpa/inet.h>
#include <linux/icmp.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "internet_checksum.h"
#include "owned_fds.h"

namespace fg::probe {
namespace {

constexpr uint8_t kEchoReply = 0;
constexpr uint8_t kEchoRequest = 8;
constexpr size_t kIcmpHeader = 8;
constexpr size_t kEchoPayload = 24;
// An echo reply of ours is ~52 bytes; a longer datagram is read cut and refused.
constexpr size_t kReceiveBytes = 512;
// Replies read per wakeup of the ICMP socket (others wait for the next poll).
constexpr int kReadsPerWake = 64;

static_assert(sizeof(icmphdr) == kIcmpHeader, "ICMP header layout");
static_assert(sizeof(iphdr) == 20, "IPv4 header layout");

Result<int> OpenBound(int type, int protocol, const std::string& device, const char* what) {
  const int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
  if (fd < 0) return SysError(errno, what);
  if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, device.c_str(),
                 static_cast<socklen_t>(device.size())) != 0) {
    SysError error(errno, "setsockopt(SO_BINDTODEVICE)");
    error.interface = device;
    close(fd);
    return error;
  }
  return fd;
}

sockaddr_in AddressOf(uint32_t address, uint16_t port) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = address;
  to.sin_port = htons(port);
  return to;
}

int SocketError(int fd) {
  int error = 0;
  socklen_t length = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) return errno;
  return error;
}

}  // namespace

std::vector<uint8_t> EchoRequest(uint16_t id, uint16_t sequence, size_t payloadBytes) {
  std::vector<uint8_t> packet(kIcmpHeader + payloadBytes);
  packet[0] = kEchoRequest;
  packet[4] = static_cast<uint8_t>(id >> 8);
  packet[5] = static_cast<uint8_t>(id);
  packet[6] = static_cast<uint8_t>(sequence >> 8);
  packet[7] = static_cast<uint8_t>(sequence);
  for (size_t i = 0; i < payloadBytes; ++i) packet[kIcmpHeader + i] = static_cast<uint8_t>(i);
  const uint16_t checksum = InternetChecksum(packet.data(), packet.size());
  packet[2] = static_cast<uint8_t>(checksum >> 8);
  packet[3] = static_cast<uint8_t>(checksum);
  return packet;
}

std::optional<EchoReply> ParseEchoReply(const uint8_t* data, size_t length) {
  if (length < sizeof(iphdr)) return std::nullopt;
  iphdr ip;
  std::memcpy(&ip, data, sizeof(ip));
  const size_t headerBytes = static_cast<size_t>(ip.ihl) * 4;
  if (ip.version != 4 || headerBytes < sizeof(iphdr) || length < headerBytes + kIcmpHeader) {
    return std::nullopt;
  }
  if (ip.protocol != IPPROTO_ICMP) return std::nullopt;
  const uint8_t* icmp = data + headerBytes;
  const size_t icmpBytes = length - headerBytes;
  if (icmp[0] != kEchoReply || icmp[1] != 0) return std::nullopt;
  if (InternetChecksum(icmp, icmpBytes) != 0) return std::nullopt;
  return EchoReply{ip.saddr, static_cast<uint16_t>(icmp[4] << 8 | icmp[5]),
                   static_cast<uint16_t>(icmp[6] << 8 | icmp[7])};
}

Result<std::vector<PathAnswer>> ProbePaths(const NetnsTarget& target,
                                           const PathProbeOptions& options,
                                           const std::vector<uint32_t>& addresses) {
  if (addresses.size() > kMaxTargets) {
    return SysError(EINVAL, "probe", "at most " + std::to_string(kMaxTargets) + " addresses");
  }
  if (options.timeoutMs < 1 || options.timeoutMs > kMaxTimeoutMs) {
    return SysError(EINVAL, "probe", "timeout out of range");
  }
  OwnedFds owned;
  int icmp = -1;
  std::vector<int> udp(addresses.size(), -1);
  std::vector<int> tcp(addresses.size(), -1);
  std::optional<SysError> failure;
  // Only the sockets need the namespace: they stay in it wherever they are used.
  Result<Unit> entered = RunInNetns(target, [&] {
    Result<int> raw = OpenBound(SOCK_RAW, IPPROTO_ICMP, options.device, "socket(SOCK_RAW)");
    if (!raw.ok()) {
      failure = raw.error();
      return;
    }
    icmp = owned.Add(raw.value());
    for (size_t i = 0; i < addresses.size(); ++i) {
      Result<int> datagram = OpenBound(SOCK_DGRAM, IPPROTO_UDP, options.device, "socket(udp)");
      Result<int> stream = OpenBound(SOCK_STREAM, IPPROTO_TCP, options.device, "socket(tcp)");
      if (datagram.ok()) udp[i] = owned.Add(datagram.value());
      if (stream.ok()) tcp[i] = owned.Add(stream.value());
      if (!datagram.ok() || !stream.ok()) {
        failure = datagram.ok() ? stream.error() : datagram.error();
        return;
      }
    }
  });
  if (!entered.ok()) return entered.error();
  if (failure) return *failure;
  // Only echo replies reach the raw socket (the kernel filters the rest).
  icmp_filter filter{};
  filter.data = ~(1U << ICMP_ECHOREPLY);
  if (setsockopt(icmp, SOL_RAW, ICMP_FILTER, &filter, sizeof(filter)) != 0) {
    return SysError(errno, "setsockopt(ICMP_FILTER)");
  }

  std::vector<PathAnswer> answers(addresses.size());
  static const char kPayload[] = "flannel-guard path probe";
  for (size_t i = 0; i < addresses.size(); ++i) {
    answers[i].address = addresses[i];
    const sockaddr_in echoTo = AddressOf(addresses[i], 0);
    const std::vector<uint8_t> echo =
        EchoRequest(options.echoId, static_cast<uint16_t>(i), kEchoPayload);
    // A send that fails (no route, a full queue) is an unanswered probe.
    (void)sendto(icmp, echo.data(), echo.size(), 0, reinterpret_cast<const sockaddr*>(&echoTo),
                 sizeof(echoTo));
    const sockaddr_in udpTo = AddressOf(addresses[i], options.udpPort);
    if (connect(udp[i], reinterpret_cast<const sockaddr*>(&udpTo), sizeof(udpTo)) == 0) {
      (void)send(udp[i], kPayload, sizeof(kPayload) - 1, 0);
    }
    const sockaddr_in tcpTo = AddressOf(addresses[i], options.tcpPort);
    (void)connect(tcp[i], reinterpret_cast<const sockaddr*>(&tcpTo), sizeof(tcpTo));
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeoutMs);
  std::vector<bool> udpDone(addresses.size(), false);
  std::vector<bool> tcpDone(addresses.size(), false);
  for (;;) {
    std::vector<pollfd> wanted;
    std::vector<std::pair<char, size_t>> which;  // 'u' or 't', index
    bool echoPending = false;
    for (size_t i = 0; i < addresses.size(); ++i) {
      echoPending = echoPending || !answers[i].echo;
      if (!udpDone[i]) {
        wanted.push_back({udp[i], POLLIN, 0});
        which.emplace_back('u', i);
      }
      if (!tcpDone[i]) {
        wanted.push_back({tcp[i], POLLOUT, 0});
        which.emplace_back('t', i);
      }
    }
    if (echoPending) wanted.push_back({icmp, POLLIN, 0});
    if (wanted.empty()) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    const int ready = poll(wanted.data(), wanted.size(), static_cast<int>(left));
    if (ready < 0 && errno != EINTR) return SysError(errno, "poll");
    if (ready <= 0) continue;
    for (size_t k = 0; k < which.size(); ++k) {
      if (wanted[k].revents == 0) continue;
      const auto [kind, i] = which[k];
      const int error = SocketError(wanted[k].fd);
      if (kind == 'u') {
        // A connected UDP socket gets the port unreachable as ECONNREFUSED;
        // a reply (the port was open) proves the checksum as well.
        answers[i].udp = error == ECONNREFUSED || (wanted[k].revents & POLLIN) != 0;
        udpDone[i] = true;
      } else {
        // RST: ECONNREFUSED; a SYN-ACK: connected (0). Anything else is no answer.
        answers[i].tcp = error == ECONNREFUSED || error == 0;
        tcpDone[i] = true;
      }
    }
    if (echoPending && (wanted.back().revents & POLLIN) != 0) {
      uint8_t buffer[kReceiveBytes];
      for (int reads = 0; reads < kReadsPerWake; ++reads) {
        const ssize_t got = recv(icmp, buffer, sizeof(buffer), MSG_TRUNC);
        if (got < 0) break;
        if (static_cast<size_t>(got) > sizeof(buffer)) continue;
        const std::optional<EchoReply> reply = ParseEchoReply(buffer, static_cast<size_t>(got));
        // Ours: our identifier, a sequence we sent, from the address it went to.
        if (!reply || reply->id != options.echoId || reply->sequence >= addresses.size()) continue;
        PathAnswer& answer = answers[reply->sequence];
        if (reply->source == answer.address) answer.echo = true;
      }
    }
  }
  return answers;
}

}  // namespace fg::probe
