#include "sysfs.h"

#include <fcntl.h>
#include <unistd.h>

namespace fg {
namespace {

// One sysfs attribute of `name`, trimmed; empty when unreadable.
std::string ReadAttribute(const std::string& name, const char* attribute) {
  const std::string path = "/sys/class/net/" + name + "/" + attribute;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char text[64];
  const ssize_t length = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (length <= 0) return "";
  std::string value(text, static_cast<size_t>(length));
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  return value;
}

}  // namespace

std::optional<int> ReadAddrAssignType(const std::string& name, int32_t ifindex,
                                      const std::string& mac) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return std::nullopt;
  }
  if (ReadAttribute(name, "ifindex") != std::to_string(ifindex) ||
      ReadAttribute(name, "address") != mac) {
    return std::nullopt;
  }
  const std::string value = ReadAttribute(name, "addr_assign_type");
  if (value.empty() || value.size() > 3 ||
      value.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoi(value);
}

}  // namespace fg
