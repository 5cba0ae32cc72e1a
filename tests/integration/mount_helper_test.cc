// packaging/mount.objfs, the helper through which `mount -t objfs` and fstab entries mount: it
// must turn mount(8)'s calling convention into an objfs mount that is up when it returns, drop
// the options only mount(8) and systemd read, and fail with objfs's one-line error.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

std::string Helper() {
  const char* source = std::getenv("OBJFS_SOURCE_DIR");
  return std::string(source != nullptr ? source : ".") + "/packaging/mount.objfs";
}

// Runs the helper as mount(8) would, with objfs's binary and the test server's credentials.
// `cwd`: the directory it runs in (empty: the test's).
CommandResult RunHelper(const std::vector<std::string>& args, const std::string& cwd = "") {
  std::vector<std::string> argv = {"env"};
  if (!cwd.empty()) argv.insert(argv.end(), {"-C", cwd});
  argv.push_back("OBJFS_BINARY=" + ObjfsBinary());
  for (const auto& [name, value] : S3ServerEnvironment()) argv.push_back(name + "=" + value);
  argv.push_back("sh");
  argv.push_back(Helper());
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

// Unmounts a daemonised mount at the end of the test, whatever happened.
class UnmountGuard {
 public:
  explicit UnmountGuard(std::string path) : path_(std::move(path)) {}
  ~UnmountGuard() {
    if (IsFuseMountPoint(path_)) RunCommand({"fusermount3", "-u", path_});
  }

 private:
  std::string path_;
};

TEST(MountHelperTest, MountsLikeMountDoesWithFstabOptions) {
  const std::string bucket = CreateTestBucket("mount-helper");
  {
    auto writer = ObjfsMount::Start(S3MountUrl(bucket));
    ASSERT_TRUE(writer);
    WriteFile(writer->path() + "/hello.txt", "hello from the bucket\n");
    ASSERT_EQ(writer->Stop(), 0);
  }
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  UnmountGuard guard(mnt);

  // What mount(8) passes for the fstab line
  //   s3://BUCKET MNT objfs defaults,_netdev,nofail,noatime,x-systemd.automount,... 0 0
  CommandResult mounted =
      RunHelper({S3MountUrl(bucket), mnt, "-v", "-o",
                 "defaults,_netdev,nofail,noatime,x-systemd.automount,comment=backup," +
                     S3ServerOptions() + ",cache_dir=" + dir.path() + "/cache",
                 "-t", "objfs"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.err;
  // Up by the time the helper returned: no waiting.
  ASSERT_TRUE(IsFuseMountPoint(mnt));
  EXPECT_EQ(ReadFile(mnt + "/hello.txt"), "hello from the bucket\n");
  EXPECT_EQ(RunCommand({"fusermount3", "-u", mnt}).exit_code, 0);
  EXPECT_FALSE(IsFuseMountPoint(mnt));
}

// The /proc/self/mountinfo line of the mount at `path`, or "".
std::string MountInfoLine(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + path + " ") != std::string::npos) return line;
  }
  return "";
}

// An option's value is passed on as written: never matched against the names of files where
// mount(8) runs (here "fsname=evil?" against a file "fsname=evil1").
TEST(MountHelperTest, OptionsAreNotExpandedAsFileNames) {
  const std::string bucket = CreateTestBucket("mount-helper-glob");
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  WriteFile(dir.path() + "/fsname=evil1", "");
  UnmountGuard guard(mnt);
  CommandResult mounted =
      RunHelper({S3MountUrl(bucket), mnt, "-o",
                 S3ServerOptions() + ",cache_dir=" + dir.path() + "/cache,fsname=evil?"},
                dir.path());
  ASSERT_EQ(mounted.exit_code, 0) << mounted.err;
  const std::string line = MountInfoLine(mnt);
  EXPECT_NE(line.find(" evil? "), std::string::npos) << line;
  EXPECT_EQ(line.find("evil1"), std::string::npos) << line;
  EXPECT_EQ(RunCommand({"fusermount3", "-u", mnt}).exit_code, 0);
}

// An fstab line with allow_other gets the kernel's permission checks too.
TEST(MountHelperTest, AllowOtherBringsDefaultPermissions) {
  const std::string bucket = CreateTestBucket("mount-helper-allow-other");
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string mnt = dir.path() + "/mnt";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0755), 0);
  UnmountGuard guard(mnt);
  CommandResult mounted = RunHelper(
      {S3MountUrl(bucket), mnt, "-o",
       "defaults,allow_other," + S3ServerOptions() + ",cache_dir=" + dir.path() + "/cache"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.err;
  const std::string line = MountInfoLine(mnt);
  EXPECT_NE(line.find("default_permissions"), std::string::npos) << line;
  EXPECT_NE(line.find("allow_other"), std::string::npos) << line;
  EXPECT_EQ(RunCommand({"fusermount3", "-u", mnt}).exit_code, 0);
}

TEST(MountHelperTest, FakeMountMountsNothing) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  CommandResult fake = RunHelper({"s3://no-such-bucket-at-all", dir.path(), "-f", "-o", "_netdev"});
  EXPECT_EQ(fake.exit_code, 0) << fake.err;
  EXPECT_FALSE(IsFuseMountPoint(dir.path()));
}

TEST(MountHelperTest, FailuresAreObjfsOneLineErrors) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  CommandResult scheme = RunHelper({"ftp://host/x", dir.path(), "-o", "defaults"});
  EXPECT_NE(scheme.exit_code, 0);
  EXPECT_NE(scheme.err.find("unsupported URL scheme 'ftp'"), std::string::npos) << scheme.err;
  EXPECT_EQ(std::count(scheme.err.begin(), scheme.err.end(), '\n'), 1) << scheme.err;

  CommandResult bucket =
      RunHelper({"s3://objfs-no-such-bucket", dir.path(), "-o", S3ServerOptions()});
  EXPECT_NE(bucket.exit_code, 0);
  EXPECT_NE(bucket.err.find("objfs-no-such-bucket"), std::string::npos) << bucket.err;
  EXPECT_FALSE(IsFuseMountPoint(dir.path()));

  CommandResult usage = RunHelper({"s3://only-a-url"});
  EXPECT_NE(usage.exit_code, 0);
  EXPECT_NE(usage.err.find("usage: mount.objfs"), std::string::npos) << usage.err;
}

}  // namespace
}  // namespace objfs::testing
