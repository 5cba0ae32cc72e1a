// Reading and writing file content through a real objfs mount on RGW: a large dd round trip,
// random preads and how many backend reads a sequential read costs, and appends, overwrites in
// the middle and truncates checked against a local model after remounts.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

TEST(MountS3IoTest, DdOfALargeFileInAndBackOut) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string source = local.path() + "/source";
  CommandResult make = RunCommand({"dd", "if=/dev/urandom", "of=" + source, "bs=1M", "count=256",
                                   "iflag=fullblock", "status=none"});
  ASSERT_EQ(make.exit_code, 0) << make.err;
  std::string md5 = Md5sum(source);
  ASSERT_EQ(md5.size(), 32u);

  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
    ASSERT_TRUE(mount);
    CommandResult in =
        RunCommand({"dd", "if=" + source, "of=" + mount->path() + "/big", "bs=1M", "status=none"});
    ASSERT_EQ(in.exit_code, 0) << in.err;
    EXPECT_EQ(mount->Stop(), 0);
  }
  // A fresh mount with its own cache directory: the content can only come from the bucket.
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  struct stat st {};
  ASSERT_EQ(::stat((fresh->path() + "/big").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 256 << 20);
  std::string back = local.path() + "/back";
  CommandResult out =
      RunCommand({"dd", "if=" + fresh->path() + "/big", "of=" + back, "bs=1M", "status=none"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(Md5sum(back), md5);
}

TEST(MountS3IoTest, RandomPreadsMatchTheOriginal) {
  const size_t kSize = 20 << 20;
  std::string data = PseudoRandomBytes(kSize, 11);
  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
    ASSERT_TRUE(mount);
    WriteFile(mount->path() + "/random", data);
    EXPECT_EQ(mount->Stop(), 0);
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  int fd = ::open((mount->path() + "/random").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::mt19937_64 random(12);
  std::string buf;
  int mismatches = 0;
  for (int i = 0; i < 200; ++i) {
    // Mostly small reads, some large, some reaching past the end of the file.
    size_t length = (i % 10 == 0) ? random() % (2 << 20) + 1 : random() % 65536 + 1;
    size_t offset = random() % (kSize + 4096);
    buf.assign(length, '\0');
    ssize_t n = ::pread(fd, buf.data(), length, static_cast<off_t>(offset));
    size_t want = offset >= kSize ? 0 : std::min(length, kSize - offset);
    ASSERT_EQ(n, static_cast<ssize_t>(want))
        << "pread #" << i << " at " << offset << " of " << length << ": " << std::strerror(errno);
    if (std::memcmp(buf.data(), data.data() + std::min(offset, kSize), want) != 0) {
      ADD_FAILURE() << "pread #" << i << " at " << offset << " of " << length
                    << " returned other bytes";
      if (++mismatches > 5) break;
    }
  }
  ::close(fd);
}

TEST(MountS3IoTest, SequentialReadIsServedByFewBackendReads) {
  const size_t kSize = 32 << 20;
  std::string data = PseudoRandomBytes(kSize, 13);
  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
    ASSERT_TRUE(mount);
    WriteFile(mount->path() + "/sequential", data);
    EXPECT_EQ(mount->Stop(), 0);
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult cat = RunCommand({"cat", mount->path() + "/sequential"});
  ASSERT_EQ(cat.exit_code, 0) << cat.err;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  ASSERT_EQ(cat.out.size(), kSize);
  EXPECT_TRUE(cat.out == data) << "cat returned other bytes";
  int64_t requests = StatsCounter(after, "read_requests") - StatsCounter(before, "read_requests");
  // cat reads 128 KiB at a time: 256 reads here. Bulk backend reads make that a handful of
  // requests, and each byte is fetched once, however the kernel's requests were ordered.
  EXPECT_GT(requests, 0) << after;
  EXPECT_LT(requests, 50) << "before:\n" << before << "after:\n" << after;
  // (A retried request may fetch a piece twice; restarting the stream refetched a third.)
  const int64_t fetched = StatsCounter(after, "bytes_read") - StatsCounter(before, "bytes_read");
  EXPECT_GE(fetched, static_cast<int64_t>(kSize));
  EXPECT_LE(fetched, static_cast<int64_t>(kSize + kSize / 8)) << after;
}

// The kernel's read-ahead of the mount's device (what the kernel reads ahead of a reader).
std::string KernelReadaheadKb(const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) return "stat failed";
  return ReadFile("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                  std::to_string(minor(st.st_dev)) + "/read_ahead_kb");
}

TEST(MountS3IoTest, TheKernelReadsInPiecesOfTheReadBuffer) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root may raise a device's read-ahead";
  const size_t kSize = 32 << 20;
  std::string data = PseudoRandomBytes(kSize, 14);
  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  EXPECT_EQ(KernelReadaheadKb(mount->path()), "1024\n");  // read_buffer 1M, max_read 1M
  WriteFile(mount->path() + "/sequential", data);
  ASSERT_TRUE(mount->Restart());
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult cat = RunCommand({"cat", mount->path() + "/sequential"});
  ASSERT_EQ(cat.exit_code, 0) << cat.err;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_TRUE(cat.out == data) << "cat returned other bytes";
  // 1 MiB pieces but for the first few while the kernel's window grows; at the kernel's
  // default 128 KiB read-ahead it takes 256.
  EXPECT_LE(StatsCounter(after, "kernel_reads") - StatsCounter(before, "kernel_reads"), 64)
      << after;
  ASSERT_EQ(mount->Stop(), 0);

  // A small read_buffer asks for cheap random reads: the kernel keeps its own 128 KiB.
  ObjfsMount::Options options;
  options.extra_options = "read_buffer=4K";
  std::unique_ptr<ObjfsMount> small = ObjfsMount::Start(url, options);
  ASSERT_TRUE(small);
  EXPECT_EQ(KernelReadaheadKb(small->path()), "128\n");
}

TEST(MountS3IoTest, DirectIoBypassesThePageCache) {
  const size_t kSize = 8 << 20;
  std::string data = PseudoRandomBytes(kSize, 17);
  ObjfsMount::Options options;
  options.extra_options = "direct_io";
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())), options);
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/direct";
  WriteFile(file, data);  // writes work as well
  ASSERT_TRUE(mount->Restart());

  // Two passes over one open file: with the page cache the second costs the daemon nothing;
  // here every read(2) is a request of its own, of the reader's size.
  int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  // Page-aligned, so that each 1 MiB read(2) is one request of max_read.
  void* buffer = std::aligned_alloc(4096, kSize);
  ASSERT_NE(buffer, nullptr);
  auto* got = static_cast<char*>(buffer);
  for (int pass = 0; pass < 2; ++pass) {
    std::memset(got, 0, kSize);
    for (size_t off = 0; off < kSize; off += 1 << 20) {
      ASSERT_EQ(::pread(fd, got + off, 1 << 20, static_cast<off_t>(off)), 1 << 20);
    }
    EXPECT_TRUE(std::string_view(got, kSize) == data) << "pass " << pass << " returned other bytes";
  }
  std::free(buffer);
  ::close(fd);
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(after, "kernel_reads") - StatsCounter(before, "kernel_reads"), 16)
      << after;
}

TEST(MountS3IoTest, AppendOverwriteAndTruncateMatchALocalModel) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string file = mount->path() + "/edited";
  std::string model = PseudoRandomBytes(1 << 20, 14);
  WriteFile(file, model);

  auto check = [&](const std::string& step) {
    SCOPED_TRACE(step);
    ASSERT_TRUE(mount->Restart());
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
    std::string got = ReadFile(file);
    EXPECT_EQ(got.size(), model.size());
    EXPECT_TRUE(got == model) << "content differs from the model";
  };

  // Append with the shell's >>.
  std::string chunk = PseudoRandomBytes(100000, 15);
  std::string chunk_path = local.path() + "/chunk";
  WriteFile(chunk_path, chunk);
  CommandResult append = RunCommand({"sh", "-c", "cat \"$0\" >> \"$1\"", chunk_path, file});
  ASSERT_EQ(append.exit_code, 0) << append.err;
  model += chunk;
  check("append");

  // Overwrite 3 blocks of 4 KiB in the middle.
  std::string patch = PseudoRandomBytes(3 * 4096, 16);
  std::string patch_path = local.path() + "/patch";
  WriteFile(patch_path, patch);
  CommandResult dd = RunCommand({"dd", "if=" + patch_path, "of=" + file, "bs=4096", "seek=100",
                                 "conv=notrunc", "status=none"});
  ASSERT_EQ(dd.exit_code, 0) << dd.err;
  model.replace(100 * 4096, patch.size(), patch);
  check("overwrite in the middle");

  CommandResult up = RunCommand({"truncate", "-s", "2000000", file});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  model.resize(2000000, '\0');
  check("truncate up");

  CommandResult down = RunCommand({"truncate", "-s", "12345", file});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  model.resize(12345);
  check("truncate down");

  CommandResult zero = RunCommand({"truncate", "-s", "0", file});
  ASSERT_EQ(zero.exit_code, 0) << zero.err;
  model.clear();
  check("truncate to zero");
}

// A cache disk (cache_dir) too small for a file: the write that does not fit fails with ENOSPC,
// what was written before it reaches the bucket, the disk is free again for the next file, and
// no other file suffers. With a write-back window, files waiting in it are uploaded early to
// make room.
TEST(MountS3IoTest, AFullCacheDiskGivesENOSPCAndLosesNothing) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string disk = local.path() + "/disk";
  ASSERT_EQ(::mkdir(disk.c_str(), 0700), 0) << std::strerror(errno);
  CommandResult made = RunCommand({"mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", disk});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  struct Unmount {
    std::string path;
    ~Unmount() { RunCommand({"umount", "-l", path}); }
  } unmount{disk};

  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string data = PseudoRandomBytes(16 << 20, 21);
  const std::string second = PseudoRandomBytes(3 << 20, 22);
  for (const std::string mode : {"", "writeback=600"}) {
    SCOPED_TRACE(mode.empty() ? "upload at close" : mode);
    const std::string dir = mode.empty() ? "/at-close" : "/window";
    size_t written = 0;
    {
      ObjfsMount::Options options;
      options.cache_dir = disk + dir;
      options.extra_options = mode;
      std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
      ASSERT_TRUE(mount);
      const std::string root = mount->path() + dir;
      ASSERT_EQ(::mkdir(root.c_str(), 0755), 0) << std::strerror(errno);
      WriteFile(root + "/kept", "kept");

      int fd = ::open((root + "/big").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      int error = 0;
      while (written < data.size()) {
        ssize_t n =
            ::write(fd, data.data() + written, std::min<size_t>(1 << 20, data.size() - written));
        if (n < 0) {
          error = errno;
          break;
        }
        written += static_cast<size_t>(n);
      }
      EXPECT_EQ(error, ENOSPC) << std::strerror(error);
      EXPECT_GT(written, 0u);
      EXPECT_LT(written, data.size());
      std::string before = GetXattr(mount->path(), "user.objfs.stats");
      // What was written is uploaded (at close, or from the window when room is needed), as a
      // local file system keeps what fitted.
      EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
      // The kernel releases the file after close(2) returns; its staging file is freed then.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "open_files") != 0 &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }

      // The next file finds room: big's staging file is gone, or goes up early to free it.
      WriteFile(root + "/second", second);
      std::string after = GetXattr(mount->path(), "user.objfs.stats");
      if (!mode.empty()) {
        // Long before the window's end.
        EXPECT_GE(StatsCounter(after, "put_requests") - StatsCounter(before, "put_requests"), 1)
            << "big was not uploaded:\n"
            << before << after;
      }
      EXPECT_EQ(mount->Stop(), 0) << mount->log();
    }
    // Nothing left staged, nothing lost: a mount with its own cache sees it all.
    std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
    ASSERT_TRUE(fresh);
    const std::string root = fresh->path() + dir;
    EXPECT_EQ(ReadFile(root + "/kept"), "kept");
    std::string big = ReadFile(root + "/big");
    EXPECT_EQ(big.size(), written);
    EXPECT_TRUE(big == data.substr(0, written)) << "big differs from what was written";
    EXPECT_TRUE(ReadFile(root + "/second") == second) << "second differs";
  }
}

}  // namespace
}  // namespace objfs::testing
