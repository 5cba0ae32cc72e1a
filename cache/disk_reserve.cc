#include "cache/disk_reserve.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "cache/file_io.h"

namespace objfs {

DiskReserve::FreeSpaceFn DiskReserve::FreeSpaceOf(std::string dir) {
  return [dir = std::move(dir)]() -> Result<Space> {
    struct statvfs st {};
    if (::statvfs(dir.c_str(), &st) != 0) return ErrnoStatus("statvfs", dir, errno);
    return Space{static_cast<uint64_t>(st.f_bavail) * st.f_frsize, st.f_frsize};
  };
}

Status DiskReserve::Take(uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  constexpr uint64_t kMaxAllowance = 64ull << 20;
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(&mu_);
  if (bytes <= allowance_ && now - checked_ < std::chrono::seconds(1)) {
    allowance_ -= bytes;
    return Status::Ok();
  }
  Result<Space> space = free_space_();
  checked_ = now;
  if (!space.ok()) {
    allowance_ = 0;
    return Status::Ok();
  }
  if (space->block > 0 && space->block <= (1u << 20)) block_.store(space->block);
  const uint64_t free = space->free;
  const uint64_t headroom = free > reserve_ ? free - reserve_ : 0;
  if (bytes > headroom) {
    allowance_ = 0;  // asked again at the next write: space may be freed meanwhile
    return NoSpaceError("staging " + std::to_string(bytes) + " bytes would leave less than " +
                        std::to_string(reserve_) + " bytes free (cache_reserve) on the disk of " +
                        "cache_dir, beyond the blocks it keeps for root (" + std::to_string(free) +
                        " bytes free)");
  }
  allowance_ = std::max(std::min(headroom / 2, kMaxAllowance), bytes) - bytes;
  return Status::Ok();
}

}  // namespace objfs
