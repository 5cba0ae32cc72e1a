// DiskReserve: staged bytes leave the reserve free beyond the file system's root-only blocks,
// and the file system is not asked at every write.
#include "cache/disk_reserve.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

namespace objfs {
namespace {

// A file system whose free space (for unprivileged users) the test sets, and that counts how
// often it is asked.
struct FakeDisk {
  uint64_t free = 0;
  int asked = 0;
  bool fails = false;
  DiskReserve::FreeSpaceFn Fn() {
    return [this]() -> Result<DiskReserve::Space> {
      ++asked;
      if (fails) return IoError("statvfs: no such file");
      return DiskReserve::Space{free, 4096};
    };
  }
};

constexpr uint64_t kMiB = 1 << 20;

TEST(DiskReserveTest, AWriteThatWouldTakeTheReserveIsRefusedAsOnAFullDisk) {
  FakeDisk disk;
  disk.free = 10 * kMiB;
  DiskReserve reserve(disk.Fn(), 4 * kMiB);
  EXPECT_TRUE(reserve.Take(6 * kMiB).ok());  // exactly down to the reserve
  disk.free = 4 * kMiB;                      // as the disk now has it
  Status refused = reserve.Take(1);
  EXPECT_EQ(refused.code(), StatusCode::kNoSpace) << refused.ToString();
  EXPECT_NE(refused.message().find("cache_reserve"), std::string::npos) << refused.message();
  // Room made (the user removed a file): the next write asks again, and goes.
  disk.free = 5 * kMiB;
  EXPECT_TRUE(reserve.Take(kMiB).ok());
}

TEST(DiskReserveTest, WithNoReserveOnlyWhatTheFileSystemHasLeftIsTaken) {
  FakeDisk disk;
  disk.free = 3 * kMiB;  // f_bavail: the root-only blocks are not in it
  DiskReserve reserve(disk.Fn(), 0);
  EXPECT_EQ(reserve.Take(3 * kMiB + 1).code(), StatusCode::kNoSpace);
  EXPECT_TRUE(reserve.Take(3 * kMiB).ok());
  EXPECT_TRUE(reserve.Take(0).ok());
}

TEST(DiskReserveTest, TheFileSystemIsAskedOnceForEveryHalfOfTheHeadroomTaken) {
  FakeDisk disk;
  disk.free = 1ull << 40;  // a big disk: at most 64 MiB between two questions
  DiskReserve reserve(disk.Fn(), 0);
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(reserve.Take(kMiB).ok());
  EXPECT_GE(disk.asked, 4);
  EXPECT_LE(disk.asked, 5);

  // Close to the reserve, every half of what is left: the last write that fits still goes, and
  // none that does not.
  FakeDisk small;
  small.free = 16 * kMiB;
  DiskReserve near(small.Fn(), 8 * kMiB);
  uint64_t taken = 0;
  while (near.Take(kMiB).ok()) {
    taken += kMiB;
    small.free = 16 * kMiB - taken;
    ASSERT_LE(taken, 8 * kMiB);
  }
  EXPECT_EQ(taken, 8 * kMiB);
}

TEST(DiskReserveTest, AFileSystemThatCannotBeAskedLeavesTheWriteToTheDisk) {
  FakeDisk disk;
  disk.fails = true;
  DiskReserve reserve(disk.Fn(), 4 * kMiB);
  EXPECT_TRUE(reserve.Take(kMiB).ok());
  EXPECT_TRUE(reserve.Take(kMiB).ok());
  EXPECT_EQ(disk.asked, 2);  // asked again each time
}

}  // namespace
}  // namespace objfs
