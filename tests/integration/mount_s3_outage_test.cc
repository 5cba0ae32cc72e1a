// The S3 server going away while a file is being written: close() reports the failed upload,
// the data stays staged in the mount's cache directory, and it is uploaded once the server is
// back. The test runs a Ceph cluster of its own, since it stops and restarts its radosgw.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/own_s3_cluster.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// True while `pid` runs (a zombie counts as gone: the daemons are not our children).
bool ProcessAlive(pid_t pid) {
  std::string stat = ReadLocal("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

TEST(MountS3OutageTest, ServerStoppedWhileWritingKeepsTheDataForARetry) {
  OwnS3Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  const std::string bucket = "outage";
  ASSERT_EQ(cluster.Request("PUT", "/" + bucket), "200");

  ObjfsMount::Options options;
  options.use_shared_server = false;
  options.extra_options =
      "endpoint=" + cluster.server().endpoint + ",path_style,region=" + cluster.server().region;
  options.env = {{"AWS_ACCESS_KEY_ID", cluster.server().access_key},
                 {"AWS_SECRET_ACCESS_KEY", cluster.server().secret_key}};
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  // "unsent" is retried by a new open and fsync, "at-unmount" by the unmount's flush.
  std::string file = mount->path() + "/unsent";
  std::string data = PseudoRandomBytes(1 << 20, 21);
  std::string second = mount->path() + "/at-unmount";
  std::string second_data = PseudoRandomBytes(300000, 22);

  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()))
      << std::strerror(errno);
  int fd2 = ::open(second.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd2, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd2, second_data.data(), second_data.size()),
            static_cast<ssize_t>(second_data.size()))
      << std::strerror(errno);

  // Stop radosgw alone; the mon and the memstore osd (which hold the bucket) keep running.
  pid_t rgw = cluster.RadosgwPid();
  ASSERT_GT(rgw, 0);
  std::string cmdline = ReadLocal("/proc/" + std::to_string(rgw) + "/cmdline");
  std::vector<std::string> rgw_argv;
  for (size_t pos = 0; pos < cmdline.size();) {
    size_t end = cmdline.find('\0', pos);
    if (end == std::string::npos) end = cmdline.size();
    rgw_argv.push_back(cmdline.substr(pos, end - pos));
    pos = end + 1;
  }
  ASSERT_FALSE(rgw_argv.empty());
  ASSERT_NE(rgw_argv[0].find("radosgw"), std::string::npos) << cmdline;
  ASSERT_EQ(::kill(rgw, SIGTERM), 0) << std::strerror(errno);
  ASSERT_TRUE(WaitFor(20, [&] { return !ProcessAlive(rgw); })) << "radosgw did not exit";

  errno = 0;
  EXPECT_NE(::close(fd), 0) << "close() succeeded with the server down";
  EXPECT_EQ(errno, EIO) << std::strerror(errno);
  errno = 0;
  EXPECT_NE(::close(fd2), 0) << "close() succeeded with the server down";
  EXPECT_EQ(errno, EIO) << std::strerror(errno);
  EXPECT_EQ(StagingFilesHolding(mount->cache_dir(), data).size(), 1u)
      << "no staging file with the written data in " << mount->cache_dir();
  EXPECT_EQ(StagingFilesHolding(mount->cache_dir(), second_data).size(), 1u)
      << "no staging file with the second file's data in " << mount->cache_dir();
  // Reading the file back still gives what was written (from the staging file).
  EXPECT_TRUE(ReadFile(file) == data) << "reading the unsent file gave other bytes";

  // The same command line again; it detaches, so nothing of ours may stay open in it.
  std::vector<std::string> restart = {"/bin/sh", "-c", "exec \"$@\" < /dev/null >> \"$0\" 2>&1",
                                      cluster.server().dir + "/log/restart.log"};
  restart.insert(restart.end(), rgw_argv.begin(), rgw_argv.end());
  CommandResult started = RunCommand(restart);
  ASSERT_EQ(started.exit_code, 0) << started.err;
  ASSERT_TRUE(WaitFor(60, [&] { return cluster.Request("GET", "/" + bucket) == "200"; }))
      << "radosgw did not come back";

  // A new open of the same file finds the staged data; fsync uploads it.
  int again = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(again, 0) << std::strerror(errno);
  EXPECT_EQ(::fsync(again), 0) << std::strerror(errno);
  EXPECT_EQ(::close(again), 0) << std::strerror(errno);

  std::string body;
  EXPECT_EQ(cluster.Request("GET", "/" + bucket + "/unsent", &body), "200");
  EXPECT_EQ(body.size(), data.size());
  EXPECT_TRUE(body == data) << "the bucket holds other bytes";
  // The staging copy was kept for the open handle at the fsync and goes at its release, which
  // the kernel sends after close() has returned: waited for, with a bound.
  EXPECT_TRUE(WaitFor(20, [&] { return StagingFilesHolding(mount->cache_dir(), data).empty(); }))
      << "the staging file stayed after the upload and the last release";

  // "at-unmount" may already be up: the kernel's release after the failed close retries the
  // upload, and in a slow (sanitizer) build it can arrive after radosgw is back. By the end of
  // the unmount at the latest it must be in the bucket.
  EXPECT_EQ(mount->Stop(), 0);
  std::string second_body;
  EXPECT_EQ(cluster.Request("GET", "/" + bucket + "/at-unmount", &second_body), "200");
  EXPECT_TRUE(second_body == second_data) << "the bucket holds other bytes for at-unmount";
  EXPECT_TRUE(StagingFilesHolding(mount->cache_dir(), second_data).empty())
      << "the staging file stayed after the upload at unmount";
}

// Bytes damaged on the way to the server: the Content-MD5 makes RGW refuse the upload, so close
// reports EIO instead of success, the staged data stays, and a retry stores the right bytes.
TEST(MountS3OutageTest, AnUploadDamagedInTransitFailsCloseAndIsRetried) {
  const S3TestServer& server = SharedS3Server();
  FaultProxy proxy("127.0.0.1", server.port());
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "endpoint=" + proxy.endpoint();
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/damaged";
  const std::string data = PseudoRandomBytes(500000, 23);
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));

  proxy.CorruptNextRequestBody("PUT ");
  errno = 0;
  EXPECT_NE(::close(fd), 0) << "close() succeeded although the server refused the upload";
  EXPECT_EQ(errno, EIO) << std::strerror(errno);
  EXPECT_EQ(proxy.corrupted_requests(), 1);
  EXPECT_NE(mount->log().find("BadDigest"), std::string::npos) << mount->log();
  // The application saw EIO; the log says for which file, and why.
  EXPECT_NE(mount->log().find("flush /damaged: EIO (Input/output error): "), std::string::npos)
      << mount->log();

  // A new open and fsync upload the staged data (the kernel's release after the failed close
  // may have done so already); either way the bucket ends up with the bytes written.
  int again = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(again, 0) << std::strerror(errno);
  EXPECT_EQ(::fsync(again), 0) << std::strerror(errno);
  EXPECT_EQ(::close(again), 0) << std::strerror(errno);
  // Once both handles are released (the first one's RELEASE may still be on its way) the
  // staged copy goes; by the end of the unmount at the latest.
  ASSERT_EQ(mount->Stop(), 0);
  EXPECT_TRUE(StagingFilesHolding(mount->cache_dir(), data).empty());
  std::unique_ptr<ObjfsMount> direct = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(direct);
  EXPECT_TRUE(ReadFile(direct->path() + "/damaged") == data) << "the bucket holds other bytes";
  EXPECT_EQ(GetXattr(direct->path() + "/damaged", "user.etag"),
            Md5File(direct->path() + "/damaged"));
}

}  // namespace
}  // namespace objfs::testing
