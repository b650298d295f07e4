// addr_assign_type from /sys/class/net: the kernel's only account of how a
// device's MAC was set (0 random at creation, 1 stolen, 2 set by userspace or
// a driver's own, 3 set by a write). Sysfs shows this process's namespace, so
// a device is only taken for the one meant when its index and MAC match.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fg {

// The value for `name`, or nothing when the name cannot be a device's, sysfs
// shows another device (index or MAC differ) or the file is unreadable.
std::optional<int> ReadAddrAssignType(const std::string& name, int32_t ifindex,
                                      const std::string& mac);

}  // namespace fg
