// The kernel's read-ahead for the mount.
//
// The kernel reads a FUSE file ahead by its backing device's read_ahead_kb: 128 KiB unless
// raised, whatever max_read allows (the init reply can only lower it). So a sequential read
// reaches the daemon as 128 KiB requests, each a wake-up, a reply and a pinning of the reader's
// pages. Raised to the mount's max_read, the kernel asks for 1 MiB at a time: an eighth of the
// requests. The setting lives in sysfs, which only root may write; other mounts keep the
// kernel's default.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

// The device ("major:minor") of the file system of type `fstype` mounted at `mountpoint`
// according to `mountinfo`, the text of /proc/self/mountinfo; the last such mount on that point
// wins. Empty when there is none.
std::string MountedDevice(std::string_view mountinfo, std::string_view mountpoint,
                          std::string_view fstype);

// Sets the read-ahead of the file system of type `fstype` mounted at `mountpoint` (an absolute,
// canonical path) to `bytes`, rounded down to whole KiB.
Status SetKernelReadahead(const std::string& mountpoint, std::string_view fstype, uint64_t bytes);

}  // namespace objfs
