// Keeps the data objfs stages in cache_dir from taking the last free space of the file system
// it is on.
//
// objfs runs as root for most mounts, and root may write into the blocks a file system keeps
// for it (ext4 keeps 5%). On a mount with allow_other any local user's writes are staged there:
// without a bound, one user's `cp` of a large file into the mount fills the disk that the
// system's own services need, past what that user could take by writing to it directly. So a
// staged write is allowed only while the file system keeps `reserve` bytes free beyond its
// root-only blocks (statvfs's f_bavail, what an unprivileged user may still write); otherwise it
// fails as on a full disk (NoSpace, ENOSPC), and the file's writer is told.
//
// Crash records, the write-back queue's and the journal's notes are small and are not counted:
// they must still be written when staging is refused.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "backend/mutex.h"
#include "backend/status.h"

namespace objfs {

class DiskReserve {
 public:
  // What the file system that holds the staged files has free for unprivileged users, and the
  // unit it allocates in.
  struct Space {
    uint64_t free = 0;
    uint64_t block = 0;
  };
  using FreeSpaceFn = std::function<Result<Space>()>;
  // statvfs(dir): f_bavail blocks of f_frsize bytes.
  static FreeSpaceFn FreeSpaceOf(std::string dir);

  DiskReserve(FreeSpaceFn free_space, uint64_t reserve)
      : free_space_(std::move(free_space)), reserve_(reserve) {}

  // Ok when `bytes` more may be staged; NoSpace when that would leave less than the reserve
  // free. The file system is asked again once this process has staged half of the headroom it
  // last saw (at most 64 MiB) since, or a second went by: other writers change it too. When it
  // cannot be asked, the write is allowed (the disk itself still refuses a write that does not
  // fit).
  Status Take(uint64_t bytes);

  uint64_t reserve() const { return reserve_; }
  // The file system's allocation unit, as last asked (4 KiB before): a write is charged the
  // blocks it takes, not only its bytes (one byte into a new block takes all of it).
  uint64_t block() const { return block_.load(std::memory_order_relaxed); }

 private:
  FreeSpaceFn free_space_;
  const uint64_t reserve_;
  std::atomic<uint64_t> block_{4096};
  Mutex mu_;                                // lock 36 of fs/lock_order.h
  uint64_t allowance_ GUARDED_BY(mu_) = 0;  // what may be taken before the next check
  std::chrono::steady_clock::time_point checked_ GUARDED_BY(mu_);
};

}  // namespace objfs
