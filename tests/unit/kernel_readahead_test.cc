#include "fs/kernel_readahead.h"

#include <gtest/gtest.h>

namespace objfs {
namespace {

constexpr char kMountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "35 22 0:51 / /mnt/my\\040bucket rw,nosuid,nodev shared:20 - fuse.objfs objfs:s3://b rw\n"
    "36 22 0:52 / /mnt/data rw,nosuid,nodev shared:21 - fuse.objfs objfs:s3://c rw\n"
    "40 36 0:57 / /mnt/data rw,nosuid,nodev shared:25 - fuse.objfs objfs:s3://d rw\n"
    "41 22 0:58 / /mnt/back\\134slash rw - fuse.objfs objfs:s3://e rw";

TEST(KernelReadaheadTest, FindsTheDeviceOfAMountPoint) {
  EXPECT_EQ(MountedDevice(kMountinfo, "/"), "8:1");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/my bucket"), "0:51");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/back\\slash"), "0:58");
}

TEST(KernelReadaheadTest, TheLastMountOnAPointWins) {
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/data"), "0:57");
}

TEST(KernelReadaheadTest, NothingMountedThereIsEmpty) {
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt"), "");
  EXPECT_EQ(MountedDevice(kMountinfo, "/mnt/my\\040bucket"), "");
  EXPECT_EQ(MountedDevice("", "/"), "");
}

}  // namespace
}  // namespace objfs
