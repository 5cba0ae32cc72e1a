// The disk cache of object data (-o data_cache=DIR) through real mounts on RGW and sshd: a read
// after a remount costs no GET/READ, a file replaced by another client reads new, a damaged
// block is fetched again, the size bound holds, a full cache disk still reads right, one
// mount at a time holds the directory, and a directory that cannot punch holes is refused.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/remote.h"
#include "tests/fixtures/run_command.h"

namespace objfs::testing {
namespace {

int64_t Delta(const std::string& before, const std::string& after, const std::string& name) {
  return StatsCounter(after, name) - StatsCounter(before, name);
}

// The cache's files of object data (one per object version, each block at its offset).
std::vector<std::string> ObjectFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir + "/objects")) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  return files;
}

// What the regular files under `dir` take on disk, as `du` counts them (the cache's files are
// sparse: an evicted block's range is a hole).
uint64_t DirectoryBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

class MountDataCacheTest : public ::testing::TestWithParam<RemoteKind> {
 public:
  // Writes `data` to `path` on the server as another client would. On SFTP, whose versions are
  // the size and an mtime of whole seconds, the mount caches no version younger than two
  // seconds: the file is dated a minute back, so that what follows needs no waiting.
  void WriteOnServer(const std::string& path, const std::string& data,
                     std::chrono::seconds age = std::chrono::seconds(60)) {
    ASSERT_TRUE(remote_->Write(path, data).ok());
    if (remote_->capabilities().posix_files) {
      const std::filesystem::path local = remote_->local_root() + "/" + path;
      std::filesystem::last_write_time(local, std::filesystem::file_time_type::clock::now() - age);
    }
  }

 protected:
  void SetUp() override {
    ASSERT_FALSE(scratch_.path().empty());
    cache_ = scratch_.path() + "/data";
    remote_ = Remote::Create(GetParam(), TestName());
    ASSERT_TRUE(remote_);
  }

  std::unique_ptr<ObjfsMount> Mount(const std::string& extra = {}) {
    return remote_->Mount("data_cache=" + cache_ + (extra.empty() ? "" : "," + extra));
  }

  ScratchDir scratch_;
  std::string cache_;
  std::unique_ptr<Remote> remote_;
};

TEST_P(MountDataCacheTest, AfterARemountTheSecondReadMakesNoBackendRead) {
  const std::string data = PseudoRandomBytes((8 << 20) + 12345, 31);
  ASSERT_NO_FATAL_FAILURE(WriteOnServer("dir/file", data));
  {
    std::unique_ptr<ObjfsMount> mount = Mount();
    ASSERT_TRUE(mount);
    const std::string before = GetXattr(mount->path(), "user.objfs.stats");
    EXPECT_TRUE(ReadFile(mount->path() + "/dir/file") == data) << "first read: other bytes";
    const std::string after = GetXattr(mount->path(), "user.objfs.stats");
    EXPECT_GT(Delta(before, after, "read_requests"), 0) << after;
    EXPECT_EQ(Delta(before, after, "data_cache_miss_bytes"), static_cast<int64_t>(data.size()))
        << after;
    // Counted in whole 4 KiB file system blocks: the last one is partly used.
    EXPECT_EQ(StatsCounter(after, "data_cache_bytes"),
              static_cast<int64_t>((data.size() + 4095) / 4096 * 4096));
    EXPECT_EQ(mount->Stop(), 0);
  }
  std::unique_ptr<ObjfsMount> mount = Mount();
  ASSERT_TRUE(mount);
  const std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_TRUE(ReadFile(mount->path() + "/dir/file") == data) << "second read: other bytes";
  const std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(Delta(before, after, "read_requests"), 0) << after;
  EXPECT_EQ(Delta(before, after, "sftp_read_requests"), 0) << after;
  EXPECT_EQ(Delta(before, after, "bytes_read"), 0) << after;
  EXPECT_EQ(Delta(before, after, "data_cache_hit_bytes"), static_cast<int64_t>(data.size()))
      << after;
}

TEST_P(MountDataCacheTest, AFileReplacedByAnotherClientReadsTheNewContent) {
  const std::string old_data = PseudoRandomBytes(3 << 20, 32);
  const std::string new_data = PseudoRandomBytes(3 << 20, 33);  // the same size
  ASSERT_NO_FATAL_FAILURE(WriteOnServer("file", old_data));
  std::unique_ptr<ObjfsMount> mount = Mount();
  ASSERT_TRUE(mount);
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == old_data);
  EXPECT_EQ(StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "data_cache_bytes"),
            static_cast<int64_t>(old_data.size()));
  // Another version: on SFTP another mtime (the same size).
  ASSERT_NO_FATAL_FAILURE(WriteOnServer("file", new_data, std::chrono::seconds(30)));
  ASSERT_TRUE(mount->Restart());
  const std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == new_data) << "the old content was served";
  const std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(Delta(before, after, "data_cache_hit_bytes"), 0) << after;
  EXPECT_EQ(Delta(before, after, "data_cache_miss_bytes"), static_cast<int64_t>(new_data.size()))
      << after;
}

// SFTP's version of a file is its size and an mtime of whole seconds: a rewrite with the same size
// within the same second keeps it. Blocks of a version that recent are not cached. Both writes
// are dated the same whole second a minute ahead, as a server clock ahead of this one would date
// them: the same rule covers that, and the test does not depend on finishing the first read
// within two seconds of the first write (a loaded machine did not, cached the blocks, and then
// had its own back-dated rewrite served from them).
TEST_P(MountDataCacheTest, AFileRewrittenWithinItsSecondIsNotServedFromTheCache) {
  if (!remote_->capabilities().posix_files) GTEST_SKIP() << "versions are ETags here";
  const std::string old_data = PseudoRandomBytes(2 << 20, 37);
  const std::string new_data = PseudoRandomBytes(2 << 20, 38);
  const std::filesystem::path local = remote_->local_root() + "/file";
  const auto second =
      std::chrono::floor<std::chrono::seconds>(std::filesystem::file_time_type::clock::now()) +
      std::chrono::minutes(1);
  ASSERT_TRUE(remote_->Write("file", old_data).ok());
  std::filesystem::last_write_time(local, second);
  std::unique_ptr<ObjfsMount> mount = Mount();
  ASSERT_TRUE(mount);
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == old_data);
  const std::string first = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(first, "data_cache_bytes"), 0) << "a version not yet settled was cached";
  ASSERT_TRUE(remote_->Write("file", new_data).ok());
  std::filesystem::last_write_time(local, second);
  ASSERT_TRUE(mount->Restart());
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == new_data) << "the old content was served";
  const std::string stats = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(stats, "data_cache_hit_bytes"), 0) << stats;
}

TEST_P(MountDataCacheTest, ABlockDamagedOnDiskIsFetchedAgain) {
  const std::string data = PseudoRandomBytes(4 << 20, 34);
  ASSERT_NO_FATAL_FAILURE(WriteOnServer("file", data));
  constexpr int64_t kBlock = 1 << 20;
  std::unique_ptr<ObjfsMount> mount = Mount("read_buffer=1M");
  ASSERT_TRUE(mount);
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == data);
  EXPECT_EQ(mount->Stop(), 0);
  std::vector<std::string> files = ObjectFiles(cache_);
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream block(files[0], std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(block.is_open());
    block.seekg(777);
    const char c = static_cast<char>(block.get());
    block.seekp(777);
    block.put(static_cast<char>(c ^ 0x40));
  }
  ASSERT_TRUE(mount->Restart());
  const std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == data) << "the damaged block was served";
  const std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(Delta(before, after, "data_cache_corrupt"), 1) << after;
  EXPECT_GT(Delta(before, after, "read_requests"), 0) << after;
  // That block only: read_buffer, rounded down to a multiple of SFTP's read size there.
  const int64_t missed = Delta(before, after, "data_cache_miss_bytes");
  EXPECT_GT(missed, kBlock / 2) << after;
  EXPECT_LE(missed, kBlock) << after;
  EXPECT_EQ(Delta(before, after, "data_cache_hit_bytes"),
            static_cast<int64_t>(data.size()) - missed)
      << after;
}

INSTANTIATE_TEST_SUITE_P(Backends, MountDataCacheTest, ::testing::ValuesIn(RemoteKinds()),
                         [](const ::testing::TestParamInfo<RemoteKind>& info) {
                           return RemoteKindName(info.param);
                         });

// ---- S3 only: the bound, a full disk, one mount per directory ----

class MountDataCacheS3Test : public MountDataCacheTest {};

TEST_P(MountDataCacheS3Test, TheDirectoryStaysUnderTheSizeBound) {
  constexpr int64_t kBound = 4 << 20;
  constexpr int64_t kBlock = 1 << 20;
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    files.push_back(PseudoRandomBytes((3 << 20) + 1000 * i, 40 + i));
    ASSERT_TRUE(remote_->Write(std::string("f").append(std::to_string(i)), files.back()).ok());
  }
  std::unique_ptr<ObjfsMount> mount = Mount("data_cache_size=4M,read_buffer=1M");
  ASSERT_TRUE(mount);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < files.size(); ++i) {
      EXPECT_TRUE(ReadFile(mount->path() + "/f" + std::to_string(i)) == files[i]) << i;
      const std::string stats = GetXattr(mount->path(), "user.objfs.stats");
      EXPECT_LE(StatsCounter(stats, "data_cache_bytes"), kBound) << stats;
      EXPECT_LE(DirectoryBytes(cache_), static_cast<uint64_t>(kBound + kBlock));
    }
  }
  const std::string stats = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_GT(StatsCounter(stats, "data_cache_evictions"), 0) << stats;
  EXPECT_GT(StatsCounter(stats, "data_cache_bytes"), kBound - 2 * kBlock) << stats;
}

TEST_P(MountDataCacheS3Test, ACacheDirectoryOnAFullDiskStillReadsRight) {
  const std::string disk = scratch_.path() + "/disk";
  ASSERT_EQ(::mkdir(disk.c_str(), 0700), 0) << std::strerror(errno);
  CommandResult made =
      RunCommand({"mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", disk});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  struct Unmount {
    std::string path;
    ~Unmount() { RunCommand({"umount", "-l", path}); }
  } unmount{disk};
  cache_ = disk + "/data";
  // Fill the disk but for a few KiB: the index fits, no block does.
  CommandResult filled =
      RunCommand({"dd", "if=/dev/zero", "of=" + disk + "/filler", "bs=4k", "count=2000"});
  ASSERT_NE(filled.exit_code, 0) << "the disk did not fill up";

  const std::string data = PseudoRandomBytes(6 << 20, 35);
  const std::string other = PseudoRandomBytes(5 << 20, 36);
  ASSERT_TRUE(remote_->Write("file", data).ok());
  ASSERT_TRUE(remote_->Write("other", other).ok());
  std::unique_ptr<ObjfsMount> mount = Mount();
  ASSERT_TRUE(mount) << "a full cache disk must not stop the mount";
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == data);
  EXPECT_TRUE(ReadFile(mount->path() + "/other") == other);
  EXPECT_EQ(mount->Stop(), 0);
  // Room for the index but not for the blocks: reads stay right too.
  ASSERT_EQ(::truncate((disk + "/filler").c_str(), (2 << 20) - (64 << 10)), 0);
  ASSERT_TRUE(mount->Restart());
  EXPECT_TRUE(ReadFile(mount->path() + "/file") == data);
  EXPECT_TRUE(ReadFile(mount->path() + "/other") == other);
  EXPECT_EQ(mount->Stop(), 0);
  const std::string log = mount->log();
  size_t lines = 0;
  for (size_t at = log.find("reads go uncached"); at != std::string::npos;
       at = log.find("reads go uncached", at + 1)) {
    ++lines;
  }
  // One line a mount (the log holds both), however many reads.
  EXPECT_EQ(lines, 2u) << log;
}

TEST_P(MountDataCacheS3Test, ASecondMountOfTheSameDirectoryIsRefused) {
  std::unique_ptr<ObjfsMount> mount = Mount();
  ASSERT_TRUE(mount);
  const std::string second = scratch_.path() + "/second";
  ASSERT_EQ(::mkdir(second.c_str(), 0700), 0);
  ExpectMountFails({remote_->url(), second, "-o",
                    remote_->server_options() + ",cache_dir=" + scratch_.path() +
                        "/second-cache,data_cache=" + cache_},
                   remote_->server_environment(), second, "in use by another objfs mount");
}

// A cache directory whose file system cannot punch holes (here another objfs mount, whose
// fallocate says EOPNOTSUPP; NFSv3 and vfat say the same) could never give an evicted block's
// space back while its file holds others: the mount says so instead of outgrowing the bound.
TEST_P(MountDataCacheS3Test, ACacheDirectoryThatCannotPunchHolesIsRefused) {
  std::unique_ptr<ObjfsMount> holder = ObjfsMount::Start("memory://" + TestName(), {});
  ASSERT_TRUE(holder);
  cache_ = holder->path() + "/data";
  const std::string mountpoint = scratch_.path() + "/refused";
  ASSERT_EQ(::mkdir(mountpoint.c_str(), 0700), 0);
  ExpectMountFails({remote_->url(), mountpoint, "-o",
                    remote_->server_options() + ",cache_dir=" + scratch_.path() +
                        "/refused-cache,data_cache=" + cache_},
                   remote_->server_environment(), mountpoint, "cannot punch holes");
  // Nothing of the probe is left in the directory.
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(cache_ + "/objects")) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_TRUE(left.empty()) << left.front();
  EXPECT_EQ(holder->Stop(), 0) << holder->log();
}

INSTANTIATE_TEST_SUITE_P(S3, MountDataCacheS3Test, ::testing::Values(RemoteKind::kRgw),
                         [](const ::testing::TestParamInfo<RemoteKind>& info) {
                           return RemoteKindName(info.param);
                         });

}  // namespace
}  // namespace objfs::testing
