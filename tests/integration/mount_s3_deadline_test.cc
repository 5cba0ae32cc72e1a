// An S3 server that hangs instead of failing: one that accepts and never answers, one that
// answers at 2 bytes/s, one that stopped (SIGSTOP) mid-request. Reads and closes on a real mount
// fail with EIO within operation_timeout (plus slack) and the log names the call and the reason;
// the staged data of a failed close stays in cache_dir and the next mount uploads it once the
// server answers again; SIGTERM and unmount end objfs within the budget while a request hangs.
// A server that is merely busy is not taken for a hanging one: a server-side copy (cp and mv
// within the mount) whose reply the server holds back past both timeouts succeeds.
// A fault proxy in front of the shared RGW plays the hanging server; short timeouts
// (request_timeout=2, operation_timeout=5) keep the tests fast.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kOperationTimeout = 5;
// The correctness bound every hanging call must return within: the budget plus generous slack
// for a loaded machine. Not a speed target.
constexpr double kBoundSeconds = kOperationTimeout + 10;
const std::string kTimeouts =
    ",request_timeout=2,operation_timeout=" + std::to_string(kOperationTimeout);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What a blocking call on the mount returned, and whether it did within the bound.
struct CallOutcome {
  long result = 0;
  int err = 0;
  double seconds = 0;
  bool in_time = false;
};

// Runs `call` (a system call on the mount) on a thread of its own and waits up to kBoundSeconds
// for it. A call still blocked then fails the test and objfs is killed, which ends the call
// (ENOTCONN): a broken bound fails the test instead of hanging it.
CallOutcome BoundedCall(ObjfsMount& mount, const std::function<long()>& call) {
  CallOutcome out;
  std::atomic<bool> done{false};
  const Clock::time_point start = Clock::now();
  std::thread worker([&] {
    errno = 0;
    out.result = call();
    out.err = errno;
    done = true;
  });
  out.in_time = WaitFor(kBoundSeconds, [&] { return done.load(); });
  out.seconds = SecondsSince(start);
  EXPECT_TRUE(out.in_time) << "the call still blocks after " << out.seconds << " s";
  if (!out.in_time) mount.KillAndWait(SIGKILL);
  worker.join();
  return out;
}

// PUTs `data` as `key` straight to the server (not through the proxy).
void PutObject(const std::string& bucket, const std::string& key, const std::string& data) {
  const S3TestServer& s3 = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(s3, data);
  argv.insert(argv.end(), {"--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT",
                           "--data-binary", "@-", s3.endpoint + "/" + bucket + "/" + key});
  CommandResult r = RunCommand(argv, data);
  ASSERT_EQ(r.out, "200") << r.err;
}

// The object's bytes straight from the server, or "<missing>".
std::string GetObject(const std::string& bucket, const std::string& key) {
  const S3TestServer& s3 = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(s3, "");
  argv.insert(argv.end(), {"--max-time", "30", "-f", "-s", s3.endpoint + "/" + bucket + "/" + key});
  CommandResult r = RunCommand(argv);
  return r.exit_code == 0 ? r.out : "<missing>";
}

// A mount of a fresh bucket through a fault proxy in front of the shared RGW.
struct ProxiedMount {
  std::string bucket;
  std::unique_ptr<FaultProxy> proxy;
  std::unique_ptr<ObjfsMount> mount;
};

ProxiedMount MountThroughProxy(const std::string& extra = "") {
  ProxiedMount m;
  m.bucket = CreateTestBucket(TestName());
  m.proxy = std::make_unique<FaultProxy>("127.0.0.1", SharedS3Server().port());
  ObjfsMount::Options options;
  options.extra_options = "endpoint=" + m.proxy->endpoint() + kTimeouts + extra;
  m.mount = ObjfsMount::Start(S3MountUrl(m.bucket), options);
  return m;
}

// Opens mount/`key` for reading (its HEAD goes through while the proxy forwards), then has the
// proxy hang with `hang`, and reads: the read must fail with EIO within the bound and the log
// must name the GET and the budget.
template <typename Hang>
void ExpectReadFailsInTime(Hang hang) {
  ProxiedMount m = MountThroughProxy(",read_buffer=1M,max_readahead=1M");
  ASSERT_TRUE(m.mount);
  const std::string data = PseudoRandomBytes(300000, 51);
  ASSERT_NO_FATAL_FAILURE(PutObject(m.bucket, "slow", data));
  int fd = ::open((m.mount->path() + "/slow").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);

  hang(*m.proxy);
  std::string buf(64 << 10, '\0');
  CallOutcome read = BoundedCall(*m.mount, [&] { return ::pread(fd, buf.data(), buf.size(), 0); });
  ASSERT_TRUE(read.in_time);
  EXPECT_EQ(read.result, -1);
  EXPECT_EQ(read.err, EIO) << std::strerror(read.err);
  ::close(fd);
  const std::string log = m.mount->log();
  EXPECT_NE(log.find("GET s3://" + m.bucket + "/slow"), std::string::npos) << log;
  EXPECT_NE(log.find("(operation_timeout); last error:"), std::string::npos) << log;
  m.proxy->Resume();
  EXPECT_EQ(m.mount->Stop(), 0);
}

TEST(MountS3DeadlineTest, ReadFromAServerThatNeverAnswersFailsWithinTheBudget) {
  ExpectReadFailsInTime([](FaultProxy& proxy) { proxy.NeverAnswer(); });
}

TEST(MountS3DeadlineTest, ReadAtTwoBytesPerSecondFailsWithinTheBudget) {
  ExpectReadFailsInTime([](FaultProxy& proxy) { proxy.Trickle(2); });
}

// The server stops (as with SIGSTOP) after a file was written and before its close: close
// fails with EIO within the bound and says why, the data stays staged, the unmount ends
// within the bound saying what it kept, and the next mount uploads it once the server is back.
TEST(MountS3DeadlineTest, CloseWhileTheServerIsStoppedFailsInTimeAndKeepsTheData) {
  ProxiedMount m = MountThroughProxy();
  ASSERT_TRUE(m.mount);
  const std::string file = m.mount->path() + "/stopped";
  const std::string data = PseudoRandomBytes(300000, 52);
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()))
      << std::strerror(errno);

  m.proxy->Pause();
  CallOutcome closed = BoundedCall(*m.mount, [&] { return ::close(fd); });
  ASSERT_TRUE(closed.in_time);
  EXPECT_NE(closed.result, 0) << "close() succeeded with the server stopped";
  EXPECT_EQ(closed.err, EIO) << std::strerror(closed.err);
  EXPECT_NE(m.mount->log().find("PUT s3://" + m.bucket + "/stopped"), std::string::npos)
      << m.mount->log();
  EXPECT_NE(m.mount->log().find("(operation_timeout); last error:"), std::string::npos)
      << m.mount->log();
  EXPECT_EQ(StagingFilesHolding(m.mount->cache_dir(), data).size(), 1u)
      << "no staging file with the written data in " << m.mount->cache_dir();

  // Unmount with the server still stopped: bounded, and the exit status and the log say that
  // the data was kept.
  const Clock::time_point start = Clock::now();
  const int status = m.mount->Stop();
  const double took = SecondsSince(start);
  EXPECT_LT(took, kBoundSeconds) << "the unmount took " << took << " s";
  EXPECT_NE(status, 0) << "objfs reported success with unsaved data";
  EXPECT_NE(m.mount->log().find("kept in " + m.mount->cache_dir()), std::string::npos)
      << m.mount->log();
  EXPECT_EQ(StagingFilesHolding(m.mount->cache_dir(), data).size(), 1u)
      << "the staged data is gone from " << m.mount->cache_dir();
  EXPECT_EQ(GetObject(m.bucket, "stopped"), "<missing>");

  // The server answers again: the next mount over the same cache_dir uploads it.
  m.proxy->Resume();
  ASSERT_TRUE(m.mount->Restart());
  EXPECT_TRUE(WaitFor(30, [&] { return GetObject(m.bucket, "stopped") == data; }))
      << "the staged data did not reach the bucket";
  EXPECT_EQ(m.mount->Stop(), 0);
  EXPECT_TRUE(StagingFilesHolding(m.mount->cache_dir(), data).empty());
}

// SIGTERM while a read waits on a server that never answers: objfs exits within the bound,
// and the reader gets an error, not a hang.
TEST(MountS3DeadlineTest, SigtermWhileAReadHangsEndsObjfsWithinTheBudget) {
  ProxiedMount m = MountThroughProxy(",read_buffer=1M,max_readahead=1M");
  ASSERT_TRUE(m.mount);
  const std::string data = PseudoRandomBytes(300000, 53);
  ASSERT_NO_FATAL_FAILURE(PutObject(m.bucket, "hangs", data));
  int fd = ::open((m.mount->path() + "/hangs").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);

  m.proxy->NeverAnswer();
  std::atomic<bool> read_done{false};
  ssize_t read_result = 0;
  std::thread reader([&] {
    std::string buf(64 << 10, '\0');
    read_result = ::pread(fd, buf.data(), buf.size(), 0);
    read_done = true;
  });
  // The GET has reached the (silent) server.
  ASSERT_TRUE(WaitFor(10, [&] { return m.proxy->swallowed_reads() > 0; }));

  const Clock::time_point start = Clock::now();
  ASSERT_EQ(::kill(m.mount->pid(), SIGTERM), 0) << std::strerror(errno);
  const int status = m.mount->WaitUntilExited(kBoundSeconds);
  const double took = SecondsSince(start);
  EXPECT_NE(status, -1) << "objfs still runs " << took << " s after SIGTERM";
  EXPECT_TRUE(WaitFor(kBoundSeconds, [&] { return read_done.load(); })) << "the read still hangs";
  if (!read_done) m.mount->KillAndWait(SIGKILL);
  reader.join();
  EXPECT_EQ(read_result, -1);
  ::close(fd);
  m.proxy->Resume();
  m.mount->Stop();
}

// The server takes longer over each server-side copy than request_timeout and
// operation_timeout together, saying nothing meanwhile (as RGW and AWS do while they copy
// gigabytes): `cp` within the mount (CopyObject) and `mv` of a file above copy_part_threshold
// (UploadPartCopy, CompleteMultipartUpload) succeed, no byte passes through this machine, and
// the server has the objects.
TEST(MountS3DeadlineTest, ServerSideCopiesTheServerTakesLongOverAreNotCut) {
  ProxiedMount m = MountThroughProxy(",copy_part_threshold=1M");
  ASSERT_TRUE(m.mount);
  const std::string small = PseudoRandomBytes(300000, 54);
  const std::string big = PseudoRandomBytes(3 << 20, 55);
  ASSERT_NO_FATAL_FAILURE(PutObject(m.bucket, "small", small));
  ASSERT_NO_FATAL_FAILURE(PutObject(m.bucket, "big", big));
  const std::string dir = m.mount->path();
  const std::string before = GetXattr(dir, "user.objfs.stats");

  constexpr int kHoldMs = (kOperationTimeout + 1) * 1000;
  m.proxy->HoldResponses({"x-amz-copy-source:", "?uploadId="}, kHoldMs);
  // Bounded all the same, should a copy hang.
  const std::string bound = std::to_string(3 * kHoldMs / 1000 + 30);
  CommandResult cp =
      RunCommand({"timeout", "-k", "5", bound, "cp", dir + "/small", dir + "/small-copy"});
  EXPECT_EQ(cp.exit_code, 0) << cp.err << m.mount->log();
  EXPECT_GE(m.proxy->held_responses(), 1);
  CommandResult mv =
      RunCommand({"timeout", "-k", "5", bound, "mv", dir + "/big", dir + "/big-moved"});
  EXPECT_EQ(mv.exit_code, 0) << mv.err << m.mount->log();
  // The part copy and the completion were held.
  EXPECT_GE(m.proxy->held_responses(), 3);
  m.proxy->StopHolding();

  const std::string after = GetXattr(dir, "user.objfs.stats");
  ExpectCounterDelta(before, after, "bytes_written", 0);
  ExpectCounterDelta(before, after, "server_copies", 2);
  EXPECT_EQ(GetObject(m.bucket, "small-copy"), small);
  EXPECT_EQ(GetObject(m.bucket, "big-moved"), big);
  EXPECT_EQ(GetObject(m.bucket, "big"), "<missing>");
  EXPECT_EQ(m.mount->log().find("(operation_timeout)"), std::string::npos) << m.mount->log();
  EXPECT_EQ(m.mount->Stop(), 0);
}

}  // namespace
}  // namespace objfs::testing
