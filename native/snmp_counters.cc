#include "snmp_counters.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

namespace fg {
namespace {

constexpr std::string_view kCounter = "InCsumErrors";

SysError Malformed(const std::string& why) { return SysError(EBADMSG, "read", why); }

// Splits at runs of spaces and tabs.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (at < line.size()) {
    const size_t start = line.find_first_not_of(" \t", at);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(line.find_first_of(" \t", start), line.size());
    fields.push_back(line.substr(start, end - start));
    at = end;
  }
  return fields;
}

std::optional<uint64_t> Decimal(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

// `protocol`'s InCsumErrors in snmp's layout: "Udp: InDatagrams ... InCsumErrors ..."
// followed by "Udp: 8121 ... 0 ...".
Result<std::optional<uint64_t>> TableCounter(const std::vector<std::string_view>& lines,
                                             std::string_view protocol) {
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string_view> header = Fields(lines[i]);
    if (header.empty() || header[0] != protocol) continue;
    size_t column = 0;
    for (size_t c = 1; c < header.size(); ++c) {
      if (header[c] == kCounter) column = c;
    }
    if (column == 0) return std::optional<uint64_t>();
    const std::string name = std::string(protocol) + " " + std::string(kCounter);
    if (i + 1 >= lines.size()) return Malformed(name + ": no value line");
    const std::vector<std::string_view> values = Fields(lines[i + 1]);
    if (values.size() != header.size() || values[0] != protocol) {
      return Malformed(name + ": the value line does not match the header");
    }
    const std::optional<uint64_t> value = Decimal(values[column]);
    if (!value) return Malformed(name + ": not a counter");
    return std::optional<uint64_t>(value);
  }
  return std::optional<uint64_t>();
}

// A counter in snmp6's layout: "Udp6InCsumErrors                \t0".
Result<std::optional<uint64_t>> ListCounter(const std::vector<std::string_view>& lines,
                                            std::string_view name) {
  for (const std::string_view line : lines) {
    const std::vector<std::string_view> fields = Fields(line);
    if (fields.empty() || fields[0] != name) continue;
    const std::optional<uint64_t> value = fields.size() == 2 ? Decimal(fields[1]) : std::nullopt;
    if (!value) return Malformed(std::string(name) + ": not a counter");
    return std::optional<uint64_t>(value);
  }
  return std::optional<uint64_t>();
}

// The whole file from its start, or EFBIG past kMaxBytes (a truncated read is never parsed).
Result<std::string> ReadWhole(int fd, const char* path) {
  std::string text(SnmpFiles::kMaxBytes + 1, '\0');
  size_t length = 0;
  while (length < text.size()) {
    const ssize_t got =
        pread(fd, text.data() + length, text.size() - length, static_cast<off_t>(length));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return SysError(errno, "read", path);
    if (got == 0) break;
    length += static_cast<size_t>(got);
  }
  if (length > SnmpFiles::kMaxBytes) return SysError(EFBIG, "read", path);
  text.resize(length);
  return text;
}

constexpr const char* kSnmpPath = "/proc/thread-self/net/snmp";
constexpr const char* kSnmp6Path = "/proc/thread-self/net/snmp6";

}  // namespace

Result<ChecksumErrors> ParseChecksumErrors(std::string_view snmp, std::string_view snmp6) {
  const std::vector<std::string_view> lines = Lines(snmp);
  ChecksumErrors counters;
  Result<std::optional<uint64_t>> udp = TableCounter(lines, "Udp:");
  if (!udp.ok()) return udp.error();
  Result<std::optional<uint64_t>> tcp = TableCounter(lines, "Tcp:");
  if (!tcp.ok()) return tcp.error();
  Result<std::optional<uint64_t>> udp6 = ListCounter(Lines(snmp6), "Udp6InCsumErrors");
  if (!udp6.ok()) return udp6.error();
  counters.udp = udp.value();
  counters.tcp = tcp.value();
  counters.udp6 = udp6.value();
  return counters;
}

Result<SnmpFiles> SnmpFiles::Open(const NetnsTarget& target) {
  Result<SnmpFiles> opened = SysError(EINVAL, "open", "not run");
  Result<Unit> entered = RunInNetns(target, [&] {
    const int snmp = open(kSnmpPath, O_RDONLY | O_CLOEXEC);
    if (snmp < 0) {
      opened = SysError(errno, "open", kSnmpPath);
      return;
    }
    // No snmp6 in a kernel or namespace without IPv6: its counter is then absent.
    opened = SnmpFiles(snmp, open(kSnmp6Path, O_RDONLY | O_CLOEXEC));
  });
  if (!entered.ok()) return entered.error();
  return opened;
}

SnmpFiles::SnmpFiles(SnmpFiles&& other) noexcept { *this = std::move(other); }

SnmpFiles& SnmpFiles::operator=(SnmpFiles&& other) noexcept {
  if (this != &other) {
    Close();
    snmp_ = std::exchange(other.snmp_, -1);
    snmp6_ = std::exchange(other.snmp6_, -1);
  }
  return *this;
}

SnmpFiles::~SnmpFiles() { Close(); }

void SnmpFiles::Close() {
  if (snmp_ >= 0) close(snmp_);
  if (snmp6_ >= 0) close(snmp6_);
  snmp_ = snmp6_ = -1;
}

Result<ChecksumErrors> SnmpFiles::Read() const {
  Result<std::string> snmp = ReadWhole(snmp_, kSnmpPath);
  if (!snmp.ok()) return snmp.error();
  std::string snmp6;
  if (snmp6_ >= 0) {
    Result<std::string> text = ReadWhole(snmp6_, kSnmp6Path);
    if (!text.ok()) return text.error();
    snmp6 = std::move(text.value());
  }
  return ParseChecksumErrors(snmp.value(), snmp6);
}

}  // namespace fg
