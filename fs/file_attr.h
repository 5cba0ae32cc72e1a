// The attributes objfs reports for one inode, in the shape the FUSE adapter turns into a struct
// stat, without depending on libfuse or on the kernel's structures.
#pragma once

#include <cstdint>

namespace objfs {

// The inode number of the mount's root directory (FUSE_ROOT_ID).
inline constexpr uint64_t kRootIno = 1;

struct FileAttr {
  uint64_t ino = 0;
  uint32_t mode = 0;  // st_mode, with the type bits (S_IFREG, S_IFDIR, S_IFLNK, S_IFIFO, ...)
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;  // ns since the epoch
  int64_t ctime_ns = 0;
  int64_t atime_ns = 0;
  uint32_t nlink = 1;
  uint64_t rdev = 0;  // st_rdev of a character or block device
};

// A name resolved to an inode: what FUSE's lookup, mkdir, create and readdirplus reply with.
struct Entry {
  FileAttr attr;
  double attr_timeout = 0;   // seconds the kernel may cache `attr`
  double entry_timeout = 0;  // seconds the kernel may cache the name -> inode binding
};

}  // namespace objfs
