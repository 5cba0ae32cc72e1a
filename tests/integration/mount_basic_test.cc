// What only an s3:// mount does at mount time: a URL with a prefix mounts the keys under it,
// and mounts that must fail at once with one clear line; --help and -V need no server. (The
// basic life of a mount on every backend: mount_suite_test.cc.)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/free_port.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// A directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char dir_template[] = "/tmp/objfs-basic-XXXXXX";
    if (::mkdtemp(dir_template) != nullptr) path_ = dir_template;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(MountBasicTest, PrefixUrlMountsTheKeysUnderThePrefix) {
  std::string bucket = CreateTestBucket(TestName());
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket, "some/dir"));
    ASSERT_TRUE(mount);
    WriteFile(mount->path() + "/inside", "under the prefix");
    EXPECT_EQ(mount->Stop(), 0);
  }
  std::unique_ptr<ObjfsMount> root = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(root);
  EXPECT_EQ(ReadFile(root->path() + "/some/dir/inside"), "under the prefix");
  struct stat st {};
  EXPECT_NE(::stat((root->path() + "/inside").c_str(), &st), 0);
}

TEST(MountBasicTest, BadMountsFailAtOnceWithOneLine) {
  TempDir temp;
  ASSERT_FALSE(temp.path().empty());
  std::string mnt = temp.path() + "/mnt";
  ASSERT_TRUE(fs::create_directory(mnt));
  std::string cache = "cache_dir=" + temp.path() + "/cache";
  std::string bucket = CreateTestBucket(TestName());
  const S3TestServer& server = SharedS3Server();
  std::map<std::string, std::string> env = S3ServerEnvironment();
  std::string options = S3ServerOptions() + "," + cache;

  {
    SCOPED_TRACE("unknown URL scheme");
    ExpectMountFails({"gs://" + bucket, mnt, "-o", options}, env, mnt,
                     "unsupported URL scheme 'gs'");
  }
  {
    SCOPED_TRACE("unreachable endpoint");
    int port = FreePort();
    ASSERT_GT(port, 0);
    std::string endpoint = "127.0.0.1:" + std::to_string(port);
    ExpectMountFails(
        {S3MountUrl(bucket), mnt, "-o", "endpoint=http://" + endpoint + ",path_style," + cache},
        env, mnt, endpoint);
  }
  {
    SCOPED_TRACE("wrong secret");
    std::map<std::string, std::string> wrong = env;
    wrong["AWS_SECRET_ACCESS_KEY"] = server.secret_key + "x";
    ExpectMountFails({S3MountUrl(bucket), mnt, "-o", options}, wrong, mnt, "denied");
  }
  {
    SCOPED_TRACE("missing bucket");
    ExpectMountFails({S3MountUrl(bucket + "-missing"), mnt, "-o", options}, env, mnt,
                     "does not exist");
  }
  {
    SCOPED_TRACE("missing mount point");
    ExpectMountFails({S3MountUrl(bucket), temp.path() + "/absent", "-o", options}, env,
                     temp.path() + "/absent", "does not exist");
  }
  {
    SCOPED_TRACE("mount point is a file");
    WriteFile(temp.path() + "/file", "");
    ExpectMountFails({S3MountUrl(bucket), temp.path() + "/file", "-o", options}, env,
                     temp.path() + "/file", "not a directory");
  }
  {
    SCOPED_TRACE("unknown option");
    ExpectMountFails({S3MountUrl(bucket), mnt, "-o", options + ",no_such_option"}, env, mnt,
                     "unknown option 'no_such_option'");
  }
}

TEST(MountBasicTest, HelpAndVersionNeedNoServer) {
  CommandResult help = RunObjfs({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: objfs URL MOUNTPOINT"), std::string::npos) << help.out;
  CommandResult version = RunObjfs({"-V"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("objfs ", 0), 0u) << version.out;
}

}  // namespace
}  // namespace objfs::testing
