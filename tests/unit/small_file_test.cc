// ReadSmallFile and CheckRegularFileIfExists (backend/small_file.h): the files options name are
// read whole when regular and small, and a FIFO, a device, a directory or an oversized file is
// refused with a message naming it, without blocking.
#include "backend/small_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/s3/object_headers.h"
#include "tests/fixtures/mount.h"

namespace objfs {
namespace {

class SmallFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  objfs::testing::ScratchDir scratch_;
  const std::string dir_ = scratch_.path();
};

bool Has(const Status& status, const std::string& part) {
  return status.message().find(part) != std::string::npos;
}

TEST_F(SmallFileTest, ReadsARegularFileUpToItsBound) {
  const std::string path = Write("f", "hello\n");
  EXPECT_EQ(*ReadSmallFile(path, 6, "test file"), "hello\n");
  Result<std::string> big = ReadSmallFile(path, 5, "test file");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(big.status().message(), "test file '" + path + "' is larger than 5 bytes");
  EXPECT_EQ(*ReadSmallFile("/dev/null", 5, "test file"), "");
  Result<std::string> missing = ReadSmallFile(dir_ + "/none", 5, "test file");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Has(missing.status(), "cannot read test file '" + dir_ + "/none': No such file"));
}

// `sse_c_key=<(vault read ...)` and `password_file=/dev/stdin` name a pipe: read until its writer
// closes it, up to the same bound.
TEST_F(SmallFileTest, ReadsAPipeUpToItsBound) {
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  ASSERT_EQ(::write(ends[1], "secret\n", 7), 7);
  ::close(ends[1]);
  const std::string path = "/dev/fd/" + std::to_string(ends[0]);
  Result<std::string> text = ReadSmallFile(path, 64, "key file", std::chrono::seconds(5));
  ::close(ends[0]);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "secret\n");

  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  ASSERT_EQ(::write(ends[1], "0123456789", 10), 10);
  ::close(ends[1]);
  const std::string big = "/dev/fd/" + std::to_string(ends[0]);
  Result<std::string> large = ReadSmallFile(big, 5, "key file", std::chrono::seconds(5));
  ::close(ends[0]);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().message(), "key file '" + big + "' is larger than 5 bytes");
}

// A FIFO nobody writes to, or whose writer never finishes, fails after the wait: the mount does
// not hang at boot.
TEST_F(SmallFileTest, AFifoIsWaitedOnForABoundedTime) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // An open or a read that blocked would be ended by SIGALRM rather than hang the suite.
  ::alarm(20);
  Result<std::string> from_fifo =
      ReadSmallFile(fifo, 64, "key file", std::chrono::milliseconds(200));
  ASSERT_FALSE(from_fifo.ok());
  EXPECT_EQ(from_fifo.status().message(),
            "nothing written to key file '" + fifo + "' within 200 ms");

  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  ASSERT_EQ(::write(ends[1], "part", 4), 4);
  const std::string open_pipe = "/dev/fd/" + std::to_string(ends[0]);
  Result<std::string> unfinished =
      ReadSmallFile(open_pipe, 64, "key file", std::chrono::milliseconds(200));
  ::alarm(0);
  ::close(ends[0]);
  ::close(ends[1]);
  ASSERT_FALSE(unfinished.ok());
  EXPECT_EQ(unfinished.status().message(),
            "no end written to key file '" + open_pipe + "' within 200 ms");
}

// A read of /dev/zero would never end.
TEST_F(SmallFileTest, RefusesDevicesAndDirectoriesWithoutBlocking) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<std::string> zero = ReadSmallFile("/dev/zero", 64, "key file");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "key file '/dev/zero' is not a regular file (a character device)");
  Result<std::string> dir = ReadSmallFile(dir_, 64, "key file");
  ASSERT_FALSE(dir.ok());
  EXPECT_TRUE(Has(dir.status(), "is not a regular file (a directory)")) << dir.status().message();

  EXPECT_TRUE(CheckRegularFileIfExists(dir_ + "/none", "config").ok());
  EXPECT_TRUE(CheckRegularFileIfExists(Write("c", "Host x\n"), "config").ok());
  EXPECT_TRUE(CheckRegularFileIfExists("/dev/null", "config").ok());
  Status fifo_config = CheckRegularFileIfExists(fifo, "config");
  EXPECT_EQ(fifo_config.message(), "config '" + fifo + "' is not a regular file (a FIFO)");
  EXPECT_FALSE(CheckRegularFileIfExists("/dev/zero", "config").ok());
}

// Whether `path` was opened since the watch began: inotify's IN_OPEN.
class OpenWatch {
 public:
  explicit OpenWatch(const std::string& path)
      : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)),
        ok_(fd_ >= 0 && ::inotify_add_watch(fd_, path.c_str(), IN_OPEN) >= 0) {}
  ~OpenWatch() {
    if (fd_ >= 0) ::close(fd_);
  }
  OpenWatch(const OpenWatch&) = delete;
  OpenWatch& operator=(const OpenWatch&) = delete;
  bool ok() const { return ok_; }
  bool Opened() const {
    char buf[4096];
    return ::read(fd_, buf, sizeof buf) > 0;
  }

 private:
  int fd_;
  bool ok_;
};

// Opening a device may act (/dev/watchdog arms the watchdog): a device is refused from its
// stat, never opened. A node of /dev/zero's numbers stands in for /dev/watchdog.
TEST_F(SmallFileTest, ADeviceIsRefusedWithoutBeingOpened) {
  const std::string device = dir_ + "/device";
  if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 5)) != 0) {
    GTEST_SKIP() << "cannot mknod here (not root?)";
  }
  OpenWatch watch(device);
  ASSERT_TRUE(watch.ok());
  Result<std::string> text = ReadSmallFile(device, 64, "key file");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().message(),
            "key file '" + device + "' is not a regular file (a character device)");
  EXPECT_FALSE(watch.Opened()) << "the device was opened";
  // The watch sees an open.
  const int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(watch.Opened());
}

// The SSE-C key: 32 bytes or their base64, and nothing read past a small bound.
TEST_F(SmallFileTest, SseCustomerKeyFileIsSmallAndRegular) {
  EXPECT_EQ(*s3::ReadSseCustomerKey(Write("raw", std::string(32, 'k'))), std::string(32, 'k'));
  EXPECT_EQ(*s3::ReadSseCustomerKey(Write("b64", "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=\n")),
            std::string(32, 'k'));
  Result<std::string> zero = s3::ReadSseCustomerKey("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "sse_c_key file '/dev/zero' is not a regular file (a character device)");
  const std::string big = Write("big", std::string(1 << 20, 'k'));
  Result<std::string> large = s3::ReadSseCustomerKey(big);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().message(), "sse_c_key file '" + big + "' is larger than 1024 bytes");
  Result<std::string> missing = s3::ReadSseCustomerKey(dir_ + "/none");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Has(missing.status(), "cannot read sse_c_key file '" + dir_ + "/none'"));
}

}  // namespace
}  // namespace objfs
