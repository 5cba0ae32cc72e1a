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
#include <vector>

#include "backend/status.h"

namespace objfs {

// One line of /proc/self/mountinfo, with the mount point's octal escapes (\040...) undone.
struct MountEntry {
  std::string device;      // "major:minor"
  std::string mountpoint;  // as this process sees it
  std::string fstype;      // "ext4", "fuse.objfs", ...
};

// The mounts listed in `mountinfo` (the text of /proc/self/mountinfo), in its order; malformed
// lines are skipped.
std::vector<MountEntry> ParseMountinfo(std::string_view mountinfo);

// The text of /proc/self/mountinfo (empty when it cannot be read).
std::string ReadMountinfo();

// The device ("major:minor") of the file system of type `fstype` mounted at `mountpoint`
// according to `mountinfo`, the text of /proc/self/mountinfo; the last such mount on that point
// wins. Empty when there is none.
std::string MountedDevice(std::string_view mountinfo, std::string_view mountpoint,
                          std::string_view fstype);

// Sets the read-ahead of the file system of type `fstype` mounted at `mountpoint` (an absolute,
// canonical path) to `bytes`, rounded down to whole KiB.
Status SetKernelReadahead(const std::string& mountpoint, std::string_view fstype, uint64_t bytes);

}  // namespace objfs
