// The basic life of a real objfs mount on RGW: mounting, reading back what was written across
// remounts, cp in and within the mount, the ETag and statistics attributes, directories, mounts
// that must fail at once with one clear line, and SIGTERM uploading what is still open.

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

std::string RandomBytes(size_t size, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(random() & 0xff);
  return out;
}

// The value of counter `name` in the "name=value" lines of user.objfs.stats, or -1.
int64_t Counter(const std::string& stats, const std::string& name) {
  size_t pos = 0;
  while (pos < stats.size()) {
    size_t end = stats.find('\n', pos);
    if (end == std::string::npos) end = stats.size();
    std::string line = stats.substr(pos, end - pos);
    if (line.rfind(name + "=", 0) == 0) return std::atoll(line.c_str() + name.size() + 1);
    pos = end + 1;
  }
  return -1;
}

TEST(MountBasicTest, MountsAndUnmounts) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  struct stat st {};
  ASSERT_EQ(::stat(mount->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_TRUE(IsFuseMountPoint(mount->path()));
  EXPECT_EQ(mount->Stop(), 0);
  EXPECT_FALSE(IsFuseMountPoint(mount->path()));
  EXPECT_FALSE(mount->running());
}

TEST(MountBasicTest, WrittenFileIsReadBackAfterRemount) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string data = RandomBytes(300000, 1);
  WriteFile(mount->path() + "/written", data);
  EXPECT_EQ(ReadFile(mount->path() + "/written"), data);

  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(mount->path() + "/written"), data);
  struct stat st {};
  ASSERT_EQ(::stat((mount->path() + "/written").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(MountBasicTest, CpIntoTheMountAndWithinIt) {
  TempDir local;
  ASSERT_FALSE(local.path().empty());
  std::string source = local.path() + "/source";
  WriteFile(source, RandomBytes(3 << 20, 2));
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string in_mount = mount->path() + "/copy";
  std::string second = mount->path() + "/second";

  CommandResult cp = RunCommand({"cp", source, in_mount});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  CommandResult cmp = RunCommand({"cmp", source, in_mount});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;

  // cp within the mount is copy_file_range: a server-side copy, no byte through this machine.
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult cp_within = RunCommand({"cp", in_mount, second});
  ASSERT_EQ(cp_within.exit_code, 0) << cp_within.err;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_GT(Counter(after, "server_copies"), Counter(before, "server_copies")) << after;
  EXPECT_EQ(Counter(after, "bytes_read"), Counter(before, "bytes_read")) << after;
  EXPECT_EQ(Counter(after, "bytes_written"), Counter(before, "bytes_written")) << after;
  CommandResult cmp_within = RunCommand({"cmp", source, second});
  EXPECT_EQ(cmp_within.exit_code, 0) << cmp_within.out << cmp_within.err;

  ASSERT_TRUE(mount->Restart());
  CommandResult cmp_after = RunCommand({"cmp", source, second});
  EXPECT_EQ(cmp_after.exit_code, 0) << cmp_after.out << cmp_after.err;
}

TEST(MountBasicTest, EtagAttributeIsTheMd5OfTheFile) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string file = mount->path() + "/hashed";
  WriteFile(file, RandomBytes(100000, 3));
  std::string md5 = Md5File(file);
  ASSERT_EQ(md5.size(), 32u);

  CommandResult value = RunCommand({"getfattr", "--only-values", "-n", "user.etag", file});
  ASSERT_EQ(value.exit_code, 0) << value.err;
  EXPECT_EQ(value.out, md5);
  EXPECT_EQ(GetXattr(file, "user.etag"), md5);

  CommandResult dump = RunCommand({"getfattr", "-d", file});
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  EXPECT_NE(dump.out.find("user.etag=\"" + md5 + "\""), std::string::npos) << dump.out;
}

TEST(MountBasicTest, StatsAttributeCountsRequests) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  int64_t puts_before = Counter(before, "put_requests");
  ASSERT_GE(puts_before, 0) << before;

  WriteFile(mount->path() + "/counted", "some data");
  CommandResult after =
      RunCommand({"getfattr", "--only-values", "-n", "user.objfs.stats", mount->path()});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_GE(Counter(after.out, "put_requests"), puts_before + 1) << after.out;
  EXPECT_GE(Counter(after.out, "bytes_written"), 9) << after.out;

  // The counters may grow between a size probe and the read that follows it (getfattr's two
  // calls): the probe leaves room, so that the read never fails with ERANGE.
  const ssize_t probed = ::getxattr(mount->path().c_str(), "user.objfs.stats", nullptr, 0);
  ASSERT_GT(probed, 0) << std::strerror(errno);
  WriteFile(mount->path() + "/more", std::string(123456, 'x'));  // counters gain digits
  std::string value(static_cast<size_t>(probed), '\0');
  const ssize_t got =
      ::getxattr(mount->path().c_str(), "user.objfs.stats", value.data(), value.size());
  ASSERT_GT(got, 0) << std::strerror(errno);
  value.resize(static_cast<size_t>(got));
  EXPECT_GE(Counter(value, "bytes_written"), 123456 + 9) << value;
}

TEST(MountBasicTest, MkdirListRmdir) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string dir = mount->path() + "/dir";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
  WriteFile(dir + "/inner", "x");

  CommandResult ls = RunCommand({"ls", "-1", mount->path()});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(ls.out, "dir\n");
  CommandResult ls_inner = RunCommand({"ls", "-1", dir});
  ASSERT_EQ(ls_inner.exit_code, 0) << ls_inner.err;
  EXPECT_EQ(ls_inner.out, "inner\n");

  EXPECT_NE(::rmdir(dir.c_str()), 0);
  EXPECT_EQ(errno, ENOTEMPTY);
  // A failed reply is counted and logged with its path and reason; asking for a name that is
  // not there is a routine answer, neither.
  struct stat missing {};
  EXPECT_NE(::stat((mount->path() + "/missing").c_str(), &missing), 0);
  const std::string stats = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(Counter(stats, "failed_rmdir"), 1) << stats;
  EXPECT_EQ(Counter(stats, "failed_lookup"), 0) << stats;
  EXPECT_NE(mount->log().find("rmdir /dir: ENOTEMPTY (Directory not empty): dir"),
            std::string::npos)
      << mount->log();
  ASSERT_EQ(::unlink((dir + "/inner").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::rmdir(dir.c_str()), 0) << std::strerror(errno);
  CommandResult ls_after = RunCommand({"ls", "-1A", mount->path()});
  ASSERT_EQ(ls_after.exit_code, 0) << ls_after.err;
  EXPECT_EQ(ls_after.out, "");

  ASSERT_TRUE(mount->Restart());
  struct stat st {};
  EXPECT_NE(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
}

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

// A mount that cannot work: objfs (without -f, so a wrong success would go to the background)
// must exit non-zero within seconds with one line on stderr that contains `reason`, and leave
// nothing mounted.
void ExpectMountFails(const std::vector<std::string>& args,
                      const std::map<std::string, std::string>& env, const std::string& mountpoint,
                      const std::string& reason) {
  auto start = std::chrono::steady_clock::now();
  CommandResult result = RunObjfs(args, env);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (IsFuseMountPoint(mountpoint)) {
    ADD_FAILURE() << "objfs mounted " << mountpoint << " although it should have failed";
    RunCommand({"fusermount3", "-uz", mountpoint});
  }
  EXPECT_NE(result.exit_code, 0);
  EXPECT_LT(seconds, 15.0);
  ASSERT_FALSE(result.err.empty());
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << "not one line: " << result.err;
  EXPECT_EQ(result.err.rfind("objfs: ", 0), 0u) << result.err;
  EXPECT_NE(result.err.find(reason), std::string::npos)
      << "expected '" << reason << "' in: " << result.err;
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

TEST(MountBasicTest, SigtermUploadsAFileThatIsStillOpen) {
  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  std::string data = RandomBytes(200000, 4);
  std::string file = mount->path() + "/open-at-exit";
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));

  EXPECT_EQ(mount->KillAndWait(SIGTERM), 0) << mount->log();
  EXPECT_FALSE(IsFuseMountPoint(mount->path()));
  ::close(fd);  // the mount is gone; this fails with ENOTCONN

  // A new mount with its own cache directory: the data can only come from the bucket.
  std::unique_ptr<ObjfsMount> again = ObjfsMount::Start(url);
  ASSERT_TRUE(again);
  EXPECT_EQ(ReadFile(again->path() + "/open-at-exit"), data);
}

// The mount options of the mount at `path` (the sixth field of /proc/self/mountinfo).
std::string KernelMountOptions(const std::string& path) {
  std::string mountinfo = ReadFile("/proc/self/mountinfo");
  size_t pos = 0;
  while (pos < mountinfo.size()) {
    size_t end = mountinfo.find('\n', pos);
    if (end == std::string::npos) end = mountinfo.size();
    std::vector<std::string> fields;
    std::string line = mountinfo.substr(pos, end - pos);
    for (size_t at = 0; at <= line.size();) {
      size_t space = line.find(' ', at);
      if (space == std::string::npos) space = line.size();
      fields.push_back(line.substr(at, space - at));
      at = space + 1;
    }
    if (fields.size() > 5 && fields[4] == path) return fields[5];
    pos = end + 1;
  }
  return "";
}

// Waits (up to 30 s) until `path` is no longer a FUSE mount point; false if it still is.
bool WaitUntilUnmounted(const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (IsFuseMountPoint(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(MountBasicTest, UmountUploadsWhatIsStagedAndObjfsExits) {
  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  ObjfsMount::Options options;
  options.extra_options = "writeback=600";  // closed files wait, staged, for the unmount
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  std::string data = RandomBytes(300000, 7);
  WriteFile(mount->path() + "/staged", data);
  {
    // Not in the bucket yet: a mount with a cache directory of its own does not see it.
    std::unique_ptr<ObjfsMount> other = ObjfsMount::Start(url);
    ASSERT_TRUE(other);
    struct stat st {};
    EXPECT_NE(::stat((other->path() + "/staged").c_str(), &st), 0);
  }

  CommandResult umount = RunCommand({"umount", mount->path()});
  ASSERT_EQ(umount.exit_code, 0) << umount.err;
  EXPECT_FALSE(IsFuseMountPoint(mount->path()));
  EXPECT_EQ(mount->WaitUntilExited(60), 0) << mount->log();

  std::unique_ptr<ObjfsMount> again = ObjfsMount::Start(url);
  ASSERT_TRUE(again);
  EXPECT_EQ(ReadFile(again->path() + "/staged"), data);
}

TEST(MountBasicTest, AutoUnmountAndKernelFlagsReachTheMount) {
  std::string url = S3MountUrl(CreateTestBucket(TestName()));
  ObjfsMount::Options options;
  options.extra_options = "auto_unmount,noatime,noexec,relatime,writeback=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  std::string flags = "," + KernelMountOptions(mount->path()) + ",";
  EXPECT_NE(flags.find(",noatime,"), std::string::npos) << flags;
  EXPECT_NE(flags.find(",noexec,"), std::string::npos) << flags;  // (nosuid is FUSE's default)
  std::string data = RandomBytes(200000, 8);
  WriteFile(mount->path() + "/staged", data);

  // Killed outright, objfs cannot unmount: FUSE's auto_unmount does, instead of leaving a
  // mount point that answers "Transport endpoint is not connected".
  ASSERT_EQ(::kill(mount->pid(), SIGKILL), 0);
  EXPECT_TRUE(WaitUntilUnmounted(mount->path()));
  EXPECT_EQ(mount->WaitUntilExited(60), 128 + SIGKILL);
  // The staged data survived in the cache directory: the next mount of it uploads it.
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(mount->path() + "/staged"), data);
}

TEST(MountBasicTest, HelpAndVersionNeedNoServer) {
  CommandResult help = RunObjfs({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: objfs URL MOUNTPOINT"), std::string::npos) << help.out;
  CommandResult version = RunObjfs({"-V"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("objfs ", 0), 0u) << version.out;
}

TEST(MountBasicTest, ASecondMountOfTheSameCacheDirectoryIsRefused) {
  TempDir temp;
  ASSERT_FALSE(temp.path().empty());
  std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.cache_dir = temp.path() + "/shared-cache";
  std::unique_ptr<ObjfsMount> first = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(first);
  std::string mnt = temp.path() + "/second";
  ASSERT_TRUE(fs::create_directory(mnt));
  ExpectMountFails(
      {S3MountUrl(bucket), mnt, "-o", S3ServerOptions() + ",cache_dir=" + options.cache_dir},
      S3ServerEnvironment(), mnt,
      "cache directory '" + options.cache_dir + "' is in use by another objfs mount");
  EXPECT_EQ(first->Stop(), 0);
}

}  // namespace
}  // namespace objfs::testing
