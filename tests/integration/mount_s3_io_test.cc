// Reading and writing file content through a real objfs mount on RGW: how many backend reads
// a sequential read costs, the kernel's read-ahead, direct_io, and a cache disk too small for a
// file. (dd, random preads, appends and truncates on every backend: mount_suite_test.cc.)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

// Writes `data` to `fd` in 1 MiB writes until one fails; `written` gets what went in. The
// failed write's errno, or 0.
int WriteUntilError(int fd, const std::string& data, size_t* written) {
  *written = 0;
  while (*written < data.size()) {
    ssize_t n =
        ::write(fd, data.data() + *written, std::min<size_t>(1 << 20, data.size() - *written));
    if (n < 0) return errno;
    *written += static_cast<size_t>(n);
  }
  return 0;
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

// An 8 MiB tmpfs to put a mount's cache_dir on, unmounted at scope end.
class SmallDisk {
 public:
  SmallDisk() {
    if (local_.path().empty()) return;
    path_ = local_.path() + "/disk";
    if (::mkdir(path_.c_str(), 0700) != 0) {
      ADD_FAILURE() << "mkdir " << path_ << ": " << std::strerror(errno);
      return;
    }
    CommandResult made = RunCommand({"mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", path_});
    mounted_ = made.exit_code == 0;
    if (!mounted_) ADD_FAILURE() << "mount -t tmpfs: " << made.err;
  }
  ~SmallDisk() {
    if (mounted_) RunCommand({"umount", "-l", path_});
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  bool ok() const { return mounted_; }
  const std::string& path() const { return path_; }

 private:
  ScratchDir local_;
  std::string path_;
  bool mounted_ = false;
};

// Writes `data` to `name` in the bucket of `url` through a mount of its own (with a cache_dir
// of its own), and unmounts.
void WriteThroughAMount(const std::string& url, const std::string& name, const std::string& data) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/" + name, data);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// A cache disk (cache_dir) too small for a file: the write that does not fit fails with ENOSPC,
// as on a full local disk, and so does the close. The file is not finished, so it does not
// replace the complete file of that name: the bucket keeps the earlier version (with a
// write-back window, the version closed into it goes up), and what was written is set aside in
// cache_dir/unfinished/, named in the log, for the user to keep or delete. No other file
// suffers.
TEST(MountS3IoTest, AFullCacheDiskGivesENOSPCAndLosesNothing) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string& disk = small.path();

  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string old = PseudoRandomBytes(1 << 20, 20);
  const std::string data = PseudoRandomBytes(16 << 20, 21);
  const std::string second = PseudoRandomBytes(3 << 20, 22);
  for (const std::string mode : {"", "writeback=600"}) {
    SCOPED_TRACE(mode.empty() ? "upload at close" : mode);
    const std::string dir = mode.empty() ? "at-close" : "window";
    {
      ObjfsMount::Options options;
      options.cache_dir = disk + "/" + dir;
      options.extra_options = mode;
      std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
      ASSERT_TRUE(mount);
      const std::string root = mount->path() + "/" + dir;
      ASSERT_EQ(::mkdir(root.c_str(), 0755), 0) << std::strerror(errno);
      WriteFile(root + "/kept", "kept");
      WriteFile(root + "/big", old);  // complete (uploaded, or waiting in the window)

      const std::string before = GetXattr(mount->path(), "user.objfs.stats");
      int fd = ::open((root + "/big").c_str(), O_WRONLY | O_TRUNC);
      ASSERT_GE(fd, 0) << std::strerror(errno);
      size_t written = 0;
      const int error = WriteUntilError(fd, data, &written);
      EXPECT_EQ(error, ENOSPC) << std::strerror(error);
      EXPECT_GT(written, 0u);
      EXPECT_LT(written, data.size());
      // A duplicate closed (as a shell's redirection does) fails too, and leaves the file open.
      const std::string aside = options.cache_dir + "/unfinished/" + dir + "%2Fbig";
      errno = 0;
      EXPECT_EQ(::close(::dup(fd)), -1);
      EXPECT_EQ(errno, ENOSPC) << std::strerror(errno);
      EXPECT_NE(::access(aside.c_str(), F_OK), 0) << "set aside while still open";
      errno = 0;
      EXPECT_EQ(::close(fd), -1);
      EXPECT_EQ(errno, ENOSPC) << std::strerror(errno);
      // The kernel releases the file after close(2) returns.
      EXPECT_TRUE(WaitFor(20, [&] {
        return StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "open_files") == 0;
      }));
      const std::string after = GetXattr(mount->path(), "user.objfs.stats");
      EXPECT_EQ(StatsCounter(after, "unfinished_set_aside") -
                    StatsCounter(before, "unfinished_set_aside"),
                1)
          << after;
      // The mount shows the complete file again, once the kernel has dropped the pages and
      // size the failed writer left in its cache: objfs asks for that from its invalidation
      // thread after the release (from within the release it could deadlock), so a read right
      // after the close may still see them, for a moment.
      EXPECT_TRUE(WaitFor(20, [&] { return ReadFile(root + "/big") == old; }))
          << "big is not the complete file";

      // What was written is in cache_dir/unfinished/, named in the log.
      const std::string kept = ReadFile(aside);
      EXPECT_GE(kept.size(), written);
      EXPECT_TRUE(kept == data.substr(0, kept.size())) << aside << " is not what was written";
      EXPECT_NE(mount->log().find(aside), std::string::npos) << mount->log();
      // The user deletes it, and the disk has room again.
      EXPECT_EQ(::unlink(aside.c_str()), 0) << aside << ": " << std::strerror(errno);
      WriteFile(root + "/second", second);
      EXPECT_EQ(mount->Stop(), 0) << mount->log();
    }
    // Nothing left staged, nothing lost: a mount with its own cache sees it all.
    std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
    ASSERT_TRUE(fresh);
    const std::string root = fresh->path() + "/" + dir;
    EXPECT_EQ(ReadFile(root + "/kept"), "kept");
    EXPECT_TRUE(ReadFile(root + "/big") == old) << "big is not the complete file it was";
    EXPECT_TRUE(ReadFile(root + "/second") == second) << "second differs";
  }
}

// A file size limit on the daemon (ulimit -f where it was started, prlimit since) fails a
// write that would stage more with EFBIG, and the mount goes on; its signal, SIGXFSZ, ended
// the mount. The file is set aside as unfinished, and the stored one stays.
TEST(MountS3IoTest, AFileSizeLimitOnTheDaemonFailsTheWriteAndTheMountGoesOn) {
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  const std::string old = PseudoRandomBytes(1 << 20, 30);
  WriteFile(mount->path() + "/big", old);
  struct rlimit limit {};
  ASSERT_EQ(::prlimit(mount->pid(), RLIMIT_FSIZE, nullptr, &limit), 0) << std::strerror(errno);
  struct rlimit limited = limit;
  limited.rlim_cur = 4 << 20;
  ASSERT_EQ(::prlimit(mount->pid(), RLIMIT_FSIZE, &limited, nullptr), 0) << std::strerror(errno);

  const std::string data = PseudoRandomBytes(8 << 20, 31);
  int fd = ::open((mount->path() + "/big").c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  size_t written = 0;
  const int error = WriteUntilError(fd, data, &written);
  EXPECT_EQ(error, EFBIG) << std::strerror(error);
  EXPECT_LT(written, data.size());
  EXPECT_NE(::close(fd), 0);
  ASSERT_EQ(::prlimit(mount->pid(), RLIMIT_FSIZE, &limit, nullptr), 0) << std::strerror(errno);

  // The daemon still serves: the stored file is whole again, and a new file is stored.
  EXPECT_TRUE(WaitFor(20, [&] { return ReadFile(mount->path() + "/big") == old; }))
      << "big is not the complete file";
  WriteFile(mount->path() + "/after", "after");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(ReadFile(fresh->path() + "/big") == old);
  EXPECT_EQ(ReadFile(fresh->path() + "/after"), "after");
}

// objfs out of file descriptors (its RLIMIT_NOFILE) fails a create with ENFILE, the file
// system's own limit, not an EIO that reads as a failing disk. The files it took are stored, and
// it serves on once it has descriptors again.
TEST(MountS3IoTest, ADaemonOutOfDescriptorsFailsACreateWithEnfileAndGoesOn) {
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/first", "first");  // its connection to the server is open
  size_t open_now = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(mount->pid()) + "/fd")) {
    (void)entry;
    ++open_now;
  }
  struct rlimit limit {};
  ASSERT_EQ(::prlimit(mount->pid(), RLIMIT_NOFILE, nullptr, &limit), 0) << std::strerror(errno);
  struct rlimit limited = limit;
  limited.rlim_cur = open_now + 8;
  ASSERT_EQ(::prlimit(mount->pid(), RLIMIT_NOFILE, &limited, nullptr), 0) << std::strerror(errno);

  // Each file open here keeps its staging file open in objfs.
  std::vector<int> held;
  int error = 0;
  for (int i = 0; i < 64 && error == 0; ++i) {
    const int fd = ::open((mount->path() + "/f" + std::to_string(i)).c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      error = errno;
    } else {
      held.push_back(fd);
      EXPECT_EQ(::write(fd, "x", 1), 1) << std::strerror(errno);
    }
  }
  EXPECT_EQ(error, ENFILE) << std::strerror(error);
  EXPECT_FALSE(held.empty());
  ASSERT_EQ(::prlimit(mount->pid(), RLIMIT_NOFILE, &limit, nullptr), 0) << std::strerror(errno);
  for (const int fd : held) EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
  WriteFile(mount->path() + "/after", "after");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(ReadFile(fresh->path() + "/f" + std::to_string(i)), "x") << i;
  }
  EXPECT_FALSE(std::filesystem::exists(fresh->path() + "/f" + std::to_string(held.size())));
  EXPECT_EQ(ReadFile(fresh->path() + "/after"), "after");
}

// A create on a cache disk so full that not even the new file's crash record fits fails with
// ENOSPC, and leaves no name behind: no file shows that the bucket never gets. Once there is
// room, the same create works.
TEST(MountS3IoTest, ACreateThatFailsOnAFullCacheDiskLeavesNoName) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  ObjfsMount::Options options;
  options.cache_dir = small.path() + "/cache";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  const std::string filler = small.path() + "/filler";
  {
    int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    const std::string block(64 << 10, 'x');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }
  const std::string name = mount->path() + "/new";
  errno = 0;
  EXPECT_LT(::open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 0);
  EXPECT_EQ(errno, ENOSPC) << std::strerror(errno);
  struct stat st {};
  EXPECT_NE(::stat(name.c_str(), &st), 0) << "a file the bucket never got shows";
  EXPECT_EQ(errno, ENOENT) << std::strerror(errno);
  EXPECT_TRUE(std::filesystem::is_empty(mount->path())) << "listed";

  ASSERT_EQ(::unlink(filler.c_str()), 0) << std::strerror(errno);
  WriteFile(name, "made");
  EXPECT_EQ(ReadFile(name), "made");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// A mount of `url` with its cache_dir on `disk` (8 MiB) and cache_reserve=6M: 2 MiB to stage.
std::unique_ptr<ObjfsMount> MountReserving6M(const std::string& url, const SmallDisk& disk) {
  ObjfsMount::Options options;
  options.cache_dir = disk.path() + "/cache";
  options.extra_options = "cache_reserve=6M";
  return ObjfsMount::Start(url, options);
}

// pwrite(2)s `size` bytes of `data` at every `stride` bytes from 0 on, until all of `data` is
// covered or one fails: its errno (0: none), and what was written in *written.
int WriteUntilRefused(int fd, const std::string& data, size_t size, size_t stride,
                      size_t* written) {
  *written = 0;
  for (size_t at = 0; at < data.size(); at += stride) {
    if (::pwrite(fd, data.data() + at, std::min(size, data.size() - at), static_cast<off_t>(at)) <
        0) {
      return errno;
    }
    *written = at + size;
  }
  return 0;
}

// A file being edited is staged sparse, and a read of it fetches the bytes it lacks into
// cache_dir. Where there is no room for them (here: cache_reserve leaves 2 MiB), the read gets
// them from the server instead, rather than fail with ENOSPC, which no reader expects. The
// edit still goes up whole.
TEST(MountS3IoTest, AReadOfAnEditOnAFullCacheDiskIsServedFromTheServer) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string old = PseudoRandomBytes(16 << 20, 40);
  WriteThroughAMount(url, "big", old);
  std::string edited = old;
  edited.replace(0, 4, "EDIT");
  {
    std::unique_ptr<ObjfsMount> mount = MountReserving6M(url, small);
    ASSERT_TRUE(mount);
    int fd = ::open((mount->path() + "/big").c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::pwrite(fd, "EDIT", 4, 0), 4) << std::strerror(errno);
    std::string read(old.size(), '\0');
    size_t got = 0;
    int error = 0;
    while (got < read.size()) {
      ssize_t n = ::pread(fd, read.data() + got, std::min<size_t>(1 << 20, read.size() - got),
                          static_cast<off_t>(got));
      if (n <= 0) {
        error = n < 0 ? errno : 0;
        break;
      }
      got += static_cast<size_t>(n);
    }
    EXPECT_EQ(error, 0) << std::strerror(error) << " after " << got << " bytes";
    EXPECT_EQ(got, old.size());
    EXPECT_TRUE(read == edited) << "the read is not the edited file";
    EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
    EXPECT_EQ(mount->Stop(), 0) << mount->log();
  }
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(ReadFile(fresh->path() + "/big") == edited) << "big is not the edited file";
  EXPECT_EQ(fresh->Stop(), 0) << fresh->log();
}

// cache_reserve: writes staged in cache_dir leave that much of its disk free. On an 8 MiB disk
// with 6 MiB reserved, a 1 MiB file goes up and a 4 MiB one fails with ENOSPC, as on a full
// disk, though the disk had room for it: another user of an allow_other mount cannot fill the
// disk that root's cache_dir is on. The room a write takes counts, not its bytes: written into
// a hole the file was truncated to, or one byte into each 4 KiB block. Bad values are refused
// at mount.
TEST(MountS3IoTest, CacheReserveKeepsWritesFromTakingTheLastOfTheCacheDisk) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string fits = PseudoRandomBytes(1 << 20, 30);
  const std::string big = PseudoRandomBytes(4 << 20, 31);
  struct Way {
    const char* name;
    bool truncated_first;
    size_t size, stride;
  };
  for (const Way way : {Way{"big", false, 1 << 20, 1 << 20}, Way{"holes", true, 1 << 20, 1 << 20},
                        Way{"strided", true, 1, 4096}}) {
    SCOPED_TRACE(way.name);
    std::unique_ptr<ObjfsMount> mount = MountReserving6M(url, small);
    ASSERT_TRUE(mount);
    if (way.name == std::string("big")) WriteFile(mount->path() + "/fits", fits);
    const std::string path = mount->path() + "/" + way.name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    if (way.truncated_first) {
      ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(big.size())), 0) << std::strerror(errno);
    }
    size_t written = 0;
    const int error = WriteUntilRefused(fd, big, way.size, way.stride, &written);
    EXPECT_EQ(error, ENOSPC) << std::strerror(error) << " after " << written << " bytes";
    EXPECT_NE(::close(fd), 0);
    EXPECT_NE(mount->log().find("cache_reserve"), std::string::npos) << mount->log();
    EXPECT_EQ(mount->Stop(), 0) << mount->log();
    // What was written is set aside in cache_dir/unfinished/; its user removes it.
    std::error_code ignored;
    std::filesystem::remove_all(small.path() + "/cache/unfinished", ignored);
  }
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(ReadFile(fresh->path() + "/fits") == fits) << "fits differs";
  for (const char* name : {"big", "holes", "strided"}) {
    EXPECT_NE(::access((fresh->path() + "/" + name).c_str(), F_OK), 0)
        << name << ": an unfinished file went up";
  }
  EXPECT_EQ(fresh->Stop(), 0) << fresh->log();

  CommandResult refused =
      RunCommand({testing::ObjfsBinary(), url, small.path() + "/mnt", "-o", "cache_reserve=lots"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("cache_reserve"), std::string::npos) << refused.err;
}

// An edit of a stored file whose close cannot fetch what the file lacks into the full cache
// disk (a multipart file written in every part, so no part is copied on the server): those
// bytes are read from the server as the file goes up, so the edit is uploaded at close and its
// room freed. (Before, every try to upload it failed on the full disk, and the edit stayed
// there across remounts, every new file failing with ENOSPC.) With `refused_xattr`, the upload
// also carries an extended attribute the server refuses for good (above its metadata limit):
// it goes up again without it, from the same bytes (before, from the staged file alone, with
// zeros where the old bytes were never fetched).
void EditThatFillsTheCacheDisk(bool refused_xattr) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string& disk = small.path();

  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string old = PseudoRandomBytes(24 << 20, 23);
  const std::string patch = PseudoRandomBytes(1 << 20, 24);
  ASSERT_NO_FATAL_FAILURE(WriteThroughAMount(url, "big", old));
  ObjfsMount::Options options;
  options.cache_dir = disk + "/c";
  // Multipart, whose upload is noted in the full cache_dir: it goes on un-noted.
  options.extra_options = "multipart_threshold=5M,part_size=5M,max_metadata=16K";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/big";
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // 1 MiB into each of the five parts: 5 MiB on the 8 MiB disk, which the other 19 do not fit.
  std::string expected = old;
  for (size_t part = 0; part < 5; ++part) {
    const size_t at = part * (5 << 20) + (2 << 20);
    ASSERT_EQ(::pwrite(fd, patch.data(), patch.size(), static_cast<off_t>(at)),
              static_cast<ssize_t>(patch.size()))
        << std::strerror(errno);
    expected.replace(at, patch.size(), patch);
  }
  if (refused_xattr) {
    CommandResult big =
        RunCommand({"setfattr", "-n", "user.big", "-v", std::string(12000, 'v'), path});
    ASSERT_EQ(big.exit_code, 0) << big.err;
  }
  EXPECT_EQ(::close(fd), 0) << std::strerror(errno) << "\n" << mount->log();
  EXPECT_NE(mount->log().find("with the bytes it lacks read from big as they are sent"),
            std::string::npos)
      << mount->log();
  if (refused_xattr) {
    EXPECT_NE(mount->log().find("without its metadata change (user.big"), std::string::npos)
        << mount->log();
  }
  // Its staging file goes once the kernel releases the file, after close(2) returned.
  EXPECT_TRUE(WaitFor(20, [&] {
    return StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "open_files") == 0;
  }));
  WriteFile(mount->path() + "/after", PseudoRandomBytes(6 << 20, 26));
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  const std::string big = ReadFile(fresh->path() + "/big");
  EXPECT_EQ(big.size(), old.size());
  EXPECT_TRUE(big == expected) << "big is not the old file with 1 MiB written into each part";
  EXPECT_NE(GetXattr(fresh->path() + "/big", "user.etag").find('-'), std::string::npos)
      << "not made of parts";
  EXPECT_TRUE(ReadFile(fresh->path() + "/after") == PseudoRandomBytes(6 << 20, 26));
}

TEST(MountS3IoTest, AnEditThatFillsTheCacheDiskIsUploadedAtClose) {
  EditThatFillsTheCacheDisk(/*refused_xattr=*/false);
}

TEST(MountS3IoTest, AnEditThatFillsTheCacheDiskKeepsItsOldBytesWithoutARefusedXattr) {
  EditThatFillsTheCacheDisk(/*refused_xattr=*/true);
}

// An edit accepted into the write-back window, its mount killed before the upload: the next
// mount completes it from the object and uploads it. Where the cache disk has no room for what
// it lacks (16 MiB here, 2 MiB of room), the upload reads those bytes from the server as it
// sends them. (It once stayed in cache_dir "for the next mount", at every mount, and never
// reached the server.)
TEST(MountS3IoTest, AKilledMountsEditTooBigForTheCacheDiskIsStoredByTheNextMount) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string old = PseudoRandomBytes(16 << 20, 50);
  WriteThroughAMount(url, "big", old);
  std::string edited = old;
  edited.replace(4 << 20, 16, "sixteen bytes!!\n");
  ObjfsMount::Options options;
  options.cache_dir = small.path() + "/cache";
  options.extra_options = "cache_reserve=6M,writeback=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  int fd = ::open((mount->path() + "/big").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, edited.data() + (4 << 20), 16, 4 << 20), 16) << std::strerror(errno);
  ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  EXPECT_EQ(mount->KillAndWait(SIGKILL), 128 + SIGKILL);

  ASSERT_TRUE(mount->Restart());
  EXPECT_TRUE(ReadFile(mount->path() + "/big") == edited) << "big is not the edited file";
  EXPECT_EQ(mount->Stop(), 0) << mount->log();  // uploads it, if the background has not yet
  const std::string log = mount->log();
  EXPECT_EQ(log.find("for the next mount"), std::string::npos) << log;
  EXPECT_NE(log.find("its upload reads them from the server"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(small.path() + "/cache/unfinished"));
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(ReadFile(fresh->path() + "/big") == edited) << "big is not the edited file";
  EXPECT_EQ(fresh->Stop(), 0) << fresh->log();
}

// A copy_file_range made through this machine (part of a file) that fills the cache disk
// reports what it copied, as write(2) does: those bytes are uploaded at close. (ENOSPC comes
// only at a next call, whose failure then leaves the file unfinished, as a failed write does.)
TEST(MountS3IoTest, ACopyThatFillsTheCacheDiskReportsWhatItCopied) {
  SmallDisk small;
  ASSERT_TRUE(small.ok());
  const std::string& disk = small.path();

  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  const std::string data = PseudoRandomBytes(20 << 20, 25);
  ASSERT_NO_FATAL_FAILURE(WriteThroughAMount(url, "src", data));
  ObjfsMount::Options options;
  options.cache_dir = disk + "/c";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  const int in = ::open((mount->path() + "/src").c_str(), O_RDONLY);
  ASSERT_GE(in, 0) << std::strerror(errno);
  const int out = ::open((mount->path() + "/dst").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(out, 0) << std::strerror(errno);
  constexpr off_t kFrom = 1 << 20;
  off_t off_in = kFrom;
  const size_t want = data.size() - kFrom;
  const ssize_t copied = ::copy_file_range(in, &off_in, out, nullptr, want, 0);
  ASSERT_GT(copied, 0) << "the call failed instead of giving what it copied: "
                       << std::strerror(errno);
  EXPECT_LT(static_cast<size_t>(copied), want) << "more than the disk holds";
  EXPECT_EQ(::close(out), 0) << std::strerror(errno);
  ::close(in);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(url);
  ASSERT_TRUE(fresh);
  const std::string dst = ReadFile(fresh->path() + "/dst");
  EXPECT_EQ(dst.size(), static_cast<size_t>(copied));
  EXPECT_TRUE(dst == data.substr(kFrom, copied)) << "dst is not the bytes reported copied";
}

}  // namespace
}  // namespace objfs::testing
