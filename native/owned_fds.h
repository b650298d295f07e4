// File descriptors one call opens and must close on every way out.
#pragma once

#include <unistd.h>

#include <vector>

namespace fg {

class OwnedFds {
 public:
  OwnedFds() = default;
  OwnedFds(const OwnedFds&) = delete;
  OwnedFds& operator=(const OwnedFds&) = delete;
  ~OwnedFds() {
    for (int fd : fds_) close(fd);
  }
  int Add(int fd) {
    fds_.push_back(fd);
    return fd;
  }

 private:
  std::vector<int> fds_;
};

}  // namespace fg
