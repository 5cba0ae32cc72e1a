#include "fs/kernel_readahead.h"

#include <gtest/gtest.h>

namespace objfs {
namespace {

constexpr char kMountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "35 22 0:51 / /mnt/my\\040bucket rw,nosuid,nodev shared:20 - fuse.objfs objfs:s3://b rw\n"
    "36 22 0:52 / /mnt/data rw,nosuid,nodev shared:21 - fuse.objfs objfs:s3://c rw\n"
    "40 36 0:57 / /mnt/data rw,nosuid,nodev shared:25 - fuse.objfs objfs:s3://d rw\n"
    "41 22 0:58 / /mnt/back\\134slash rw - fuse.objfs objfs:s3://e rw\n"
    "42 22 0:59 / /mnt/other rw - fuse.sshfs host:/ rw\n"
    "43 42 8:2 / /mnt/other rw shared:30 - ext4 /dev/sda2 rw";

TEST(KernelReadaheadTest, FindsTheDeviceOfAMountPoint) {
  EXPECT_EQ(MountedDevice(kMountinfo, "/", "ext4"), "8:1");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/my bucket", "fuse.objfs"), "0:51");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/back\\slash", "fuse.objfs"), "0:58");
}

TEST(KernelReadaheadTest, TheLastMountOnAPointWins) {
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/data", "fuse.objfs"), "0:57");
}

TEST(KernelReadaheadTest, OnlyAMountOfTheTypeCounts) {
  // The last mount on /mnt/other is a disk's: never the one to tune for an objfs mount.
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/other", "fuse.objfs"), "");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/other", "fuse.sshfs"), "0:59");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/data", "ext4"), "");
}

TEST(KernelReadaheadTest, ParsesEveryMountWithItsTypeAndUnescapedPath) {
  std::vector<MountEntry> entries = ParseMountinfo(kMountinfo);
  ASSERT_EQ(entries.size(), 7u);
  EXPECT_EQ(entries[1].device, "0:51");
  EXPECT_EQ(entries[1].mountpoint, "/mnt/my bucket");
  EXPECT_EQ(entries[1].fstype, "fuse.objfs");
  EXPECT_EQ(entries[6].fstype, "ext4");
  EXPECT_TRUE(ParseMountinfo("no separator here\n").empty());
}

TEST(KernelReadaheadTest, NothingMountedThereIsEmpty) {
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt", "fuse.objfs"), "");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/my\\040bucket", "fuse.objfs"), "");
  EXPECT_EQ(MountedDevice("", "/", "ext4"), "");
}

}  // namespace
}  // namespace objfs
