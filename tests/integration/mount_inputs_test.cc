// The files an operator names in options, through the real objfs binary as root runs it from
// fstab: the log file (-o log=FILE) is never a FIFO, a symbolic link, another's or a
// world-writable file, and a new one is private; the files objfs reads (-o sse_c_key=,
// credentials_file=, password_file=, identity=, ssh_config=, known_hosts=) never hang it (a FIFO
// is waited on for a bounded time) nor are read without bound. Each refusal is one line and a
// non-zero exit within seconds, with nothing mounted.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/base64.h"
#include "backend/s3/s3_store.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// Calls `run`. Should it still be running after 20 s (objfs blocked opening the FIFO `fifo`),
// opens `fifo` so that the open returns and the test fails rather than hangs.
// Returns whether it had to.
template <typename Run>
bool UnblockedFifo(const std::string& fifo, Run run) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool unblocked = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (cv.wait_for(lock, std::chrono::seconds(20), [&] { return done; })) return;
    unblocked = true;
    // O_RDWR on a FIFO never blocks (Linux) and wakes an open waiting for either end; closed at
    // once, the woken side then reads an end of file or writes to no reader.
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  });
  run();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  watchdog.join();
  return unblocked;
}

// objfs on a fresh bucket with `options` after the server's must fail at once with one line
// holding `reason`.
void ExpectS3MountFails(const std::string& options, const std::string& reason,
                        const std::string& fifo = "") {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir temp;
  ASSERT_FALSE(temp.path().empty());
  const std::string mnt = temp.path() + "/mnt";
  ASSERT_TRUE(fs::create_directory(mnt));
  const std::vector<std::string> args = {
      S3MountUrl(bucket), mnt, "-o",
      S3ServerOptions() + ",cache_dir=" + temp.path() + "/cache," + options};
  auto fail = [&] { ExpectMountFails(args, S3ServerEnvironment(), mnt, reason); };
  if (fifo.empty()) {
    fail();
  } else {
    EXPECT_FALSE(UnblockedFifo(fifo, fail)) << "objfs blocked opening the FIFO " << fifo;
  }
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(MountInputsTest, LogToAFifoIsRefusedAtOnce) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string fifo = scratch.path() + "/log.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectS3MountFails("log=" + fifo, "log file '" + fifo + "' is not a regular file", fifo);
  // A directory neither.
  ExpectS3MountFails("log=" + scratch.path(), "is not a regular file");
}

TEST(MountInputsTest, LogThroughASymbolicLinkIsRefusedAndTheTargetUntouched) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string victim = scratch.path() + "/shadow";
  WriteFile(victim, "root:*:19000:0:99999:7:::\n");
  ASSERT_EQ(::chmod(victim.c_str(), 0640), 0);
  const std::string link = scratch.path() + "/objfs.log";
  ASSERT_EQ(::symlink(victim.c_str(), link.c_str()), 0);
  ExpectS3MountFails("log=" + link, "log file '" + link + "' is a symbolic link");
  EXPECT_EQ(ReadLocal(victim), "root:*:19000:0:99999:7:::\n");
  // Nor a second hard link to it, which a symbolic link check alone would let through.
  const std::string hard = scratch.path() + "/objfs-hard.log";
  ASSERT_EQ(::link(victim.c_str(), hard.c_str()), 0);
  ExpectS3MountFails("log=" + hard, "has 2 hard links");
  EXPECT_EQ(ReadLocal(victim), "root:*:19000:0:99999:7:::\n");
  // Nor the file itself, which root (these tests' user) owns as it owns /etc/shadow: a
  // mistyped log= of an fstab line.
  ASSERT_EQ(::unlink(hard.c_str()), 0);
  ExpectS3MountFails("log=" + victim,
                     "log file '" + victim + "' is not empty and not an objfs log");
  EXPECT_EQ(ReadLocal(victim), "root:*:19000:0:99999:7:::\n");
}

TEST(MountInputsTest, LogFileOthersMayWriteOrOwnIsRefused) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string open_log = scratch.path() + "/open.log";
  WriteFile(open_log, "");
  ASSERT_EQ(::chmod(open_log.c_str(), 0666), 0);
  ExpectS3MountFails("log=" + open_log, "is writable by group or others (mode 0666)");
  EXPECT_EQ(ReadLocal(open_log), "");
  const std::string theirs = scratch.path() + "/theirs.log";
  WriteFile(theirs, "");
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  ExpectS3MountFails("log=" + theirs, "belongs to uid 65534, not to the user mounting");
  EXPECT_EQ(ReadLocal(theirs), "");
}

TEST(MountInputsTest, NewLogFileIsPrivateAndAnExistingOneKeepsItsMode) {
  std::string bucket = CreateTestBucket(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string log = scratch.path() + "/objfs.log";
  // A permissive umask must not widen it.
  const mode_t old_umask = ::umask(0);
  ObjfsMount::Options options;
  options.extra_options = "log=" + log;
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ::umask(old_umask);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/f", "x");
  ASSERT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(ModeOf(log), 0600u);
  EXPECT_NE(ReadLocal(log).find(" objfs["), std::string::npos) << ReadLocal(log);

  // An operator's 0640 (group may read) is kept, and appended to.
  ASSERT_EQ(::chmod(log.c_str(), 0640), 0);
  const size_t before = ReadLocal(log).size();
  auto again = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->Stop(), 0) << again->log();
  EXPECT_EQ(ModeOf(log), 0640u);
  EXPECT_GT(ReadLocal(log).size(), before);
}

// A FIFO is read (`sse_c_key=<(vault read ...)`), but one nobody writes to fails the mount after
// a bounded wait rather than hanging it.
TEST(MountInputsTest, SseCustomerKeyFifoWithoutAWriterFailsAfterTheWait) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string fifo = scratch.path() + "/key.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectS3MountFails("sse_c_key=" + fifo,
                     "nothing written to sse_c_key file '" + fifo + "' within 10 s", fifo);
}

// sse_c_key=<(vault read ...): the key comes through a pipe, /dev/fd/N, and the objects the mount
// writes are encrypted with it on the server.
TEST(MountInputsTest, SseCustomerKeyFromAPipe) {
  std::string bucket = CreateTestBucket(TestName());
  const std::string key = "0123456789abcdef0123456789ABCDEF";
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);  // the read end is inherited by objfs
  const std::string encoded =
      Base64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(key.data()), key.size())) +
      "\n";
  ASSERT_EQ(::write(ends[1], encoded.data(), encoded.size()), static_cast<ssize_t>(encoded.size()));
  ::close(ends[1]);
  ObjfsMount::Options options;
  options.extra_options = "sse_c_key=/dev/fd/" + std::to_string(ends[0]);
  auto mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ::close(ends[0]);
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/secret.txt", "encrypted at rest");
  ASSERT_EQ(mount->Stop(), 0) << mount->log();

  // The server's side: the object is read with the key, and not without it.
  const S3TestServer& server = SharedS3Server();
  s3::S3StoreOptions store_options;
  store_options.bucket = bucket;
  store_options.endpoint = server.endpoint;
  store_options.region = server.region;
  store_options.credentials.access_key = server.access_key;
  store_options.credentials.secret_key = server.secret_key;
  Result<std::unique_ptr<s3::S3Store>> keyless = s3::S3Store::Create(store_options);
  ASSERT_TRUE(keyless.ok()) << keyless.status().ToString();
  EXPECT_FALSE((*keyless)->head("secret.txt").ok()) << "stored without the key";
  store_options.object_headers.sse_c_key = key;
  Result<std::unique_ptr<s3::S3Store>> keyed = s3::S3Store::Create(store_options);
  ASSERT_TRUE(keyed.ok()) << keyed.status().ToString();
  Result<ObjectInfo> head = (*keyed)->head("secret.txt");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->size, 17u);
}

TEST(MountInputsTest, CredentialsFileFifoWithoutAWriterFailsAfterTheWait) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string fifo = scratch.path() + "/credentials.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ExpectS3MountFails("credentials_file=" + fifo,
                     "nothing written to AWS configuration file '" + fifo + "' within 10 s", fifo);
}

TEST(MountInputsTest, SseCustomerKeyFileOfADeviceOrTooLargeIsRefused) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  ExpectS3MountFails("sse_c_key=/dev/zero",
                     "sse_c_key file '/dev/zero' is not a regular file (a character device)");
  const std::string big = scratch.path() + "/big.key";
  WriteFile(big, std::string(1 << 20, 'k'));
  ExpectS3MountFails("sse_c_key=" + big, "sse_c_key file '" + big + "' is larger than 1024 bytes");
}

TEST(MountInputsTest, SftpFilesMayNotBeFifos) {
  const SftpTestServer& server = SharedSftpServer();
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const std::string fifo = scratch.path() + "/input.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string mnt = scratch.path() + "/mnt";
  ASSERT_TRUE(fs::create_directory(mnt));
  const std::string base = "identity=" + server.key_path + ",known_hosts=" + server.known_hosts +
                           ",cache_dir=" + scratch.path() + "/cache,";
  const struct {
    std::string option;
    std::string reason;
  } cases[] = {
      // Read as a pipe (password_file=/dev/stdin), but nobody writes to this one.
      {"password_file=" + fifo, "nothing written to password file '" + fifo + "' within 10 s"},
      {"ssh_config=" + fifo, "ssh configuration '" + fifo + "' is not a regular file (a FIFO)"},
      {"known_hosts=" + fifo, "known_hosts file '" + fifo + "' is not a regular file (a FIFO)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.option);
    auto fail = [&] { ExpectMountFails({dir.url, mnt, "-o", base + c.option}, {}, mnt, c.reason); };
    EXPECT_FALSE(UnblockedFifo(fifo, fail)) << "objfs blocked opening the FIFO " << fifo;
  }
  // An identity file (given first, so libssh never gets to read it).
  auto fail = [&] {
    ExpectMountFails({dir.url, mnt, "-o",
                      "identity=" + fifo + ",known_hosts=" + server.known_hosts +
                          ",cache_dir=" + scratch.path() + "/cache"},
                     {}, mnt, "identity file '" + fifo + "' is not a regular file (a FIFO)");
  };
  EXPECT_FALSE(UnblockedFifo(fifo, fail)) << "objfs blocked opening the FIFO " << fifo;
}

}  // namespace
}  // namespace objfs::testing
