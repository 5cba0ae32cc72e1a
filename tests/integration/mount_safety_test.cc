// What a mount must refuse or check before it serves anyone: other users' access with
// allow_other (the kernel checks the modes shown), a cache directory another user could write,
// a mount point that is already one, S3 settings and names that cannot work; and the limits of
// S3 reported where they are hit (ENAMETOOLONG, EFBIG), with nothing sent to the server.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/metrics.h"
#include "backend/s3/s3_store.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string TestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info != nullptr ? std::string(info->name()) : std::string("safety");
}

// An S3 client of the test server, to see what the bucket holds without the mount.
std::unique_ptr<s3::S3Store> BucketClient(const std::string& bucket, Metrics* metrics = nullptr) {
  const S3TestServer& server = SharedS3Server();
  s3::S3StoreOptions o;
  o.bucket = bucket;
  o.endpoint = server.endpoint;
  o.region = server.region;
  o.credentials.access_key = server.access_key;
  o.credentials.secret_key = server.secret_key;
  o.multipart_threshold = 5 << 20;
  o.part_size = 5 << 20;
  o.metrics = metrics;
  auto store = s3::S3Store::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Every key of the bucket with its ETag and metadata, one line each.
std::string BucketState(s3::S3Store& store) {
  std::string state;
  ListOptions list;
  for (;;) {
    Result<Listing> page = store.list(list);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok()) return state;
    for (const ObjectInfo& entry : page->objects) {
      Result<ObjectInfo> info = store.head(entry.key);
      EXPECT_TRUE(info.ok()) << info.status().ToString();
      if (!info.ok()) continue;
      state += info->key + " " + info->etag.value();
      for (const auto& [name, value] : info->metadata) {
        if (name != "mtime") state += " " + name + "=" + value;
      }
      state += "\n";
    }
    if (page->next_token.empty()) return state;
    list.continuation_token = page->next_token;
  }
}

// Every entry under `dir` with its type, mode, owner and content, one line each.
std::string TreeState(const std::string& dir) {
  std::vector<std::string> lines;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0) continue;
    std::ostringstream line;
    line << entry.path().string().substr(dir.size()) << " " << std::oct << st.st_mode << std::dec
         << " " << st.st_uid << ":" << st.st_gid;
    if (S_ISREG(st.st_mode)) {
      std::ifstream in(entry.path());
      line << " " << std::string(std::istreambuf_iterator<char>(in), {});
    }
    lines.push_back(line.str());
  }
  std::sort(lines.begin(), lines.end());
  std::string state;
  for (const std::string& line : lines) state += line + "\n";
  return state;
}

// Runs `sh -c script` as nobody (uid and gid 65534, no other groups) with $0 the mount.
CommandResult AsNobody(const std::string& script, const std::string& mount) {
  return RunCommand(
      {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script, mount});
}

// What another user tries on root's files: each must be refused by the kernel.
struct Attempt {
  const char* what;
  const char* script;
};
constexpr Attempt kAttempts[] = {
    {"read a 0600 file", "cat \"$0/secret\""},
    {"append to it", "echo more >> \"$0/secret\""},
    {"truncate it", "truncate -s 0 \"$0/secret\""},
    {"chown it", "chown 65534:65534 \"$0/secret\""},
    {"remove it", "rm -f \"$0/secret\""},
    {"rename it", "mv \"$0/secret\" \"$0/moved\""},
    {"mkdir in a 0700 directory", "mkdir \"$0/private/sub\""},
};

// Makes root's files in `m` (a mount with allow_other), lets nobody reach the mount point, and
// has nobody try each of kAttempts.
void PrepareRootFiles(const std::string& m) {
  // The mount point's parent is private to root: let the other user through it.
  ASSERT_EQ(::chmod(fs::path(m).parent_path().c_str(), 0711), 0) << std::strerror(errno);
  WriteFile(m + "/secret", "s\n");
  ASSERT_EQ(::chmod((m + "/secret").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/private").c_str(), 0700), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod((m + "/private").c_str(), 0700), 0) << std::strerror(errno);
}

void ExpectOtherUserRefused(const std::string& m) {
  for (const Attempt& attempt : kAttempts) {
    SCOPED_TRACE(attempt.what);
    CommandResult r = AsNobody(attempt.script, m);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_TRUE(r.err.find("Permission denied") != std::string::npos ||
                r.err.find("Operation not permitted") != std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("s\n"), std::string::npos) << "nobody read: " << r.out;
  }
}

// The owner may do all of it.
void ExpectOwnerAllowed(const std::string& m) {
  for (const char* script :
       {"cat \"$0/secret\" >/dev/null", "echo more >> \"$0/secret\"", "truncate -s 1 \"$0/secret\"",
        "chown 65534:65534 \"$0/secret\"", "mkdir \"$0/private/sub\"",
        "mv \"$0/secret\" \"$0/moved\"", "rm -f \"$0/moved\""}) {
    SCOPED_TRACE(script);
    CommandResult r = RunCommand({"sh", "-c", script, m});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_TRUE(fs::is_directory(m + "/private/sub"));
  EXPECT_FALSE(fs::exists(m + "/moved"));
}

TEST(MountSafetyTest, AllowOtherChecksPermissionsOnS3) {
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  // Changes of mode applied at once, so that the bucket shows what the mount shows.
  options.extra_options = "allow_other,metadata_delay=0";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_NO_FATAL_FAILURE(PrepareRootFiles(m));
  std::unique_ptr<s3::S3Store> client = BucketClient(bucket);
  ASSERT_TRUE(client);
  const std::string before = BucketState(*client);
  ASSERT_NE(before.find("secret"), std::string::npos) << before;

  ExpectOtherUserRefused(m);
  EXPECT_EQ(ReadFile(m + "/secret"), "s\n");
  EXPECT_FALSE(fs::exists(m + "/moved"));
  EXPECT_FALSE(fs::exists(m + "/private/sub"));
  ASSERT_EQ(mount->Stop(), 0);
  EXPECT_EQ(BucketState(*client), before);

  ASSERT_TRUE(mount->Restart());
  ExpectOwnerAllowed(mount->path());
}

TEST(MountSafetyTest, AllowOtherChecksPermissionsOnSftp) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ObjfsMount::Options options;
  options.extra_options = "allow_other";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_NO_FATAL_FAILURE(PrepareRootFiles(m));
  const std::string before = TreeState(dir.path);
  ASSERT_NE(before.find("/secret 100600 0:0 s\n"), std::string::npos) << before;

  ExpectOtherUserRefused(m);
  EXPECT_EQ(TreeState(dir.path), before);
  ExpectOwnerAllowed(m);
  EXPECT_TRUE(fs::is_directory(dir.path + "/private/sub"));
}

// A mount of `dir` with allow_other (and `extra`: ",option=value..."), whose mount point other
// users can reach.
std::unique_ptr<ObjfsMount> SharedMount(const SftpTestDir& dir, const std::string& extra = "") {
  ObjfsMount::Options options;
  options.extra_options = "allow_other" + extra;
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, options);
  if (mount && ::chmod(fs::path(mount->path()).parent_path().c_str(), 0711) != 0) {
    ADD_FAILURE() << "chmod: " << std::strerror(errno);
    return nullptr;
  }
  return mount;
}

// Another user's `>` of a name the mount saw missing, while another client makes a private
// file of that name on the server: on a local disk the open would find that file, and fail.
// The upload of the new file is conditional on the name being free, so it never replaces the
// file made meanwhile; the writer gets EIO.
TEST(MountSafetyTest, AnotherUsersNewFileNeverReplacesOneMadeMeanwhile) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = SharedMount(dir, ",negative_timeout=600");
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_EQ(::mkdir((m + "/tmp").c_str(), 01777), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod((m + "/tmp").c_str(), 01777), 0) << std::strerror(errno);
  // Seen missing, by the kernel and by objfs.
  EXPECT_NE(AsNobody("stat \"$0/tmp/victim\"", m).exit_code, 0);
  const std::string victim = dir.path + "/tmp/victim";
  {
    std::ofstream made(victim);
    made << "root's secret\n";
  }
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0) << std::strerror(errno);
  CommandResult replaced =
      AsNobody("printf evil | dd of=\"$0/tmp/victim\" conv=fsync status=none", m);
  EXPECT_NE(replaced.exit_code, 0) << replaced.err;
  EXPECT_EQ(ReadLocal(victim), "root's secret\n");
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_EQ(ReadLocal(victim), "root's secret\n");
}

// Another user's open with O_TRUNC of a set-ID file drops its set-user-ID bit, and its
// set-group-ID bit where group execute is set, as truncate(2) and a write do on a local disk;
// the owner's own open keeps them (root may: CAP_FSETID).
TEST(MountSafetyTest, AnotherUsersTruncatingOpenDropsTheSetIdBits) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = SharedMount(dir);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  for (const auto& [name, before, after] :
       {std::tuple{"both", 06777u, 0777u}, std::tuple{"no-group-exec", 06767u, 02767u}}) {
    SCOPED_TRACE(name);
    WriteFile(m + "/" + name, "content");
    ASSERT_EQ(::chmod((m + "/" + name).c_str(), before), 0) << std::strerror(errno);
    // The owner's own truncating open keeps them.
    CommandResult own = RunCommand({"sh", "-c", ": > \"$0\"", m + "/" + name});
    ASSERT_EQ(own.exit_code, 0) << own.err;
    struct stat st {};
    ASSERT_EQ(::stat((m + "/" + name).c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_mode & 07777, before);
    CommandResult other = AsNobody(std::string(": > \"$0/") + name + "\"", m);
    ASSERT_EQ(other.exit_code, 0) << other.err;
    ASSERT_EQ(::stat((m + "/" + name).c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_mode & 07777, after);
    EXPECT_EQ(st.st_size, 0);
  }
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/both").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0777u);
  ASSERT_EQ(::stat((dir.path + "/no-group-exec").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 02767u);
}

// A set-group-ID directory (a group's shared one): what another user makes in it takes the
// directory's group, not the maker's, and a new directory takes the set-group-ID bit too, as
// on a local disk.
TEST(MountSafetyTest, NewEntriesOfASetGroupIdDirectoryTakeItsGroup) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = SharedMount(dir);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  const gid_t shared = 100;  // "users", of which nobody is no member
  ASSERT_EQ(::mkdir((m + "/shared").c_str(), 0777), 0) << std::strerror(errno);
  ASSERT_EQ(::chown((m + "/shared").c_str(), 0, shared), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod((m + "/shared").c_str(), 02777), 0) << std::strerror(errno);
  CommandResult made = AsNobody(
      "echo a > \"$0/shared/file\" && mkdir \"$0/shared/dir\" && ln -s file \"$0/shared/link\"", m);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  for (const char* name : {"file", "dir", "link"}) {
    SCOPED_TRACE(name);
    struct stat st {};
    ASSERT_EQ(::lstat((dir.path + "/shared/" + name).c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_gid, shared);
  }
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/shared/dir").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_NE(st.st_mode & S_ISGID, 0u);
  ASSERT_EQ(::stat((dir.path + "/shared/file").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & S_ISGID, 0u);
}

// Said explicitly, no_default_permissions gives the unchecked mount it always was, with a
// warning.
TEST(MountSafetyTest, NoDefaultPermissionsChecksNothingAndSaysSo) {
  ObjfsMount::Options options;
  options.extra_options = "allow_other,no_default_permissions";
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_NO_FATAL_FAILURE(PrepareRootFiles(m));
  CommandResult read = AsNobody("cat \"$0/secret\"", m);
  EXPECT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(read.out, "s\n");
  EXPECT_NE(mount->log().find("warning: allow_other with no_default_permissions"),
            std::string::npos)
      << mount->log();
}

// Runs objfs (in the background if it mounts) on a fresh mount point and expects exit status 1
// with one line naming every one of `reasons`, and nothing mounted.
void ExpectRefused(const std::vector<std::string>& args_before_mountpoint,
                   const std::string& options, const std::vector<std::string>& reasons) {
  ScratchDir temp;
  ASSERT_FALSE(temp.path().empty());
  const std::string mnt = temp.path() + "/mnt";
  ASSERT_TRUE(fs::create_directory(mnt));
  std::vector<std::string> args = args_before_mountpoint;
  args.push_back(mnt);
  args.push_back("-o");
  args.push_back(options);
  CommandResult r = RunObjfs(args, S3ServerEnvironment());
  const bool mounted = IsFuseMountPoint(mnt);
  if (mounted) RunCommand({"fusermount3", "-u", mnt});
  EXPECT_FALSE(mounted);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const std::string& reason : reasons) {
    EXPECT_NE(r.err.find(reason), std::string::npos) << "want '" << reason << "' in: " << r.err;
  }
}

TEST(MountSafetyTest, CacheDirWritableByOthersOrOwnedByAnotherUserIsRefused) {
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  ScratchDir temp;
  ASSERT_FALSE(temp.path().empty());
  const std::string t = temp.path();
  auto make_dir = [](const std::string& path, mode_t mode, uid_t uid) {
    EXPECT_EQ(::mkdir(path.c_str(), 0700), 0) << path << ": " << std::strerror(errno);
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    EXPECT_EQ(::chown(path.c_str(), uid, uid), 0);
  };
  make_dir(t + "/group-writable", 0770, 0);
  make_dir(t + "/other-writable", 0707, 0);
  make_dir(t + "/not-mine", 0700, 65534);
  make_dir(t + "/open", 0777, 0);  // no sticky bit: anyone may swap what is in it
  make_dir(t + "/open/cache", 0700, 0);
  make_dir(t + "/target", 0700, 0);
  ASSERT_EQ(::symlink((t + "/target").c_str(), (t + "/link").c_str()), 0);
  ASSERT_EQ(::lchown((t + "/link").c_str(), 65534, 65534), 0);

  const std::string server = S3ServerOptions();
  ExpectRefused({url}, server + ",cache_dir=" + t + "/group-writable",
                {"cache directory '" + t + "/group-writable' is writable by group or others",
                 "chmod 700 " + t + "/group-writable"});
  ExpectRefused({url}, server + ",cache_dir=" + t + "/other-writable",
                {"writable by group or others", "chmod 700"});
  ExpectRefused({url}, server + ",cache_dir=" + t + "/not-mine",
                {"cache directory '" + t + "/not-mine' is owned by uid 65534", "chown 0 "});
  ExpectRefused({url}, server + ",cache_dir=" + t + "/link",
                {"cache directory '" + t + "/link' is a symbolic link owned by uid 65534"});
  ExpectRefused({url}, server + ",cache_dir=" + t + "/open/cache",
                {"which another user can change", t + "/open'"});
  // Nothing was staged or locked in any of them.
  for (const char* name : {"/group-writable", "/other-writable", "/not-mine", "/target"}) {
    EXPECT_TRUE(fs::is_empty(t + name)) << name;
  }
}

TEST(MountSafetyTest, NewCacheDirAndItsDbArePrivate) {
  ScratchDir temp;
  ASSERT_FALSE(temp.path().empty());
  ObjfsMount::Options options;
  options.cache_dir = temp.path() + "/new/cache";
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())), options);
  ASSERT_TRUE(mount);
  const std::string db = options.cache_dir + "/db";
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!fs::exists(db + "/LOCK") && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const std::string& dir : {temp.path() + "/new", options.cache_dir, db}) {
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir << ": " << std::strerror(errno);
    EXPECT_EQ(st.st_mode & 07777, 0700u) << dir;
  }
}

TEST(MountSafetyTest, BadPartSizesAndDotSegmentsAreRefusedAtMount) {
  const std::string bucket = CreateTestBucket(TestName());
  ExpectRefused({S3MountUrl(bucket)}, S3ServerOptions() + ",part_size=1",
                {"part_size=1 is out of range (5M..5120M)"});
  ExpectRefused({S3MountUrl(bucket)}, S3ServerOptions() + ",multipart_threshold=1K",
                {"multipart_threshold=1K is out of range"});
  ExpectRefused({"s3://" + bucket + "/a/../etc"}, S3ServerOptions(),
                {"URL 's3://" + bucket + "/a/../etc' has a '..' path component"});
}

TEST(MountSafetyTest, AMountPointThatIsAlreadyOneIsRefused) {
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  std::unique_ptr<ObjfsMount> first = ObjfsMount::Start(url);
  ASSERT_TRUE(first);
  WriteFile(first->path() + "/first", "first");
  ScratchDir temp;
  CommandResult r = RunObjfs(
      {url, first->path(), "-o", S3ServerOptions() + ",cache_dir=" + temp.path() + "/cache"},
      S3ServerEnvironment());
  if (r.exit_code == 0) RunCommand({"fusermount3", "-u", first->path()});  // the stacked one
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("'" + first->path() + "' is already a mount point"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(ReadFile(first->path() + "/first"), "first");
  EXPECT_EQ(first->Stop(), 0);
}

// S3 keys are at most 1,024 bytes, the mount's prefix included: a longer name fails with
// ENAMETOOLONG, as on a local file system, before any request.
TEST(MountSafetyTest, AKeyOver1024BytesIsENAMETOOLONG) {
  const std::string bucket = CreateTestBucket(TestName());
  const std::string prefix(60, 'p');
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket, prefix));
  ASSERT_TRUE(mount);
  std::string dir = mount->path();
  std::string key;  // under the prefix
  for (char c : {'a', 'b', 'c', 'd'}) {
    const std::string name(200, c);
    dir += "/" + name;
    key += name + "/";
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
  }
  // 804 bytes so far; 1,000 without the prefix, 1,061 with it.
  const std::string name(196, 'x');
  ASSERT_LE(key.size() + name.size(), 1024u);
  ASSERT_GT(prefix.size() + 1 + key.size() + name.size(), 1024u);
  const std::string path = dir + "/" + name;
  const int64_t requests =
      StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "http_requests");
  ASSERT_GT(requests, 0);
  errno = 0;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_LT(fd, 0);
  EXPECT_EQ(errno, ENAMETOOLONG) << std::strerror(errno);
  if (fd >= 0) ::close(fd);
  errno = 0;
  EXPECT_NE(::mkdir(path.c_str(), 0755), 0);
  EXPECT_EQ(errno, ENAMETOOLONG) << std::strerror(errno);
  CommandResult touch = RunCommand({"touch", path});
  EXPECT_NE(touch.err.find("File name too long"), std::string::npos) << touch.err;
  EXPECT_EQ(StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "http_requests"), requests);
  ASSERT_EQ(mount->Stop(), 0);
  std::unique_ptr<s3::S3Store> client = BucketClient(bucket);
  ASSERT_TRUE(client);
  const std::string state = BucketState(*client);
  EXPECT_EQ(state.find(name), std::string::npos) << state;
}

// S3 objects are at most 5 TiB: the write (or truncate) that would go past it fails with
// EFBIG, not the upload at close.
TEST(MountSafetyTest, AWritePastFiveTiBIsEFBIG) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/huge";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const off_t limit = static_cast<off_t>(s3::kMaxObjectSize);
  errno = 0;
  EXPECT_EQ(::pwrite(fd, "x", 1, limit), -1);
  EXPECT_EQ(errno, EFBIG) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(::ftruncate(fd, limit + 1), -1);
  EXPECT_EQ(errno, EFBIG) << std::strerror(errno);
  EXPECT_EQ(::pwrite(fd, "tail", 4, 0), 4);
  // Without the limit the file would now be 5 TiB long; unlinked, it is never uploaded.
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 4);
  if (st.st_size != 4) ::unlink(path.c_str());
  EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
  EXPECT_EQ(ReadFile(path), "tail");
  EXPECT_EQ(mount->Stop(), 0);
}

// RGW's CompleteMultipartUpload names no ETag. The upload's own is computed from its parts;
// a HEAD after it could see another writer's newer object and call a good upload failed.
TEST(MountSafetyTest, AConcurrentWriterDoesNotFailAMultipartUpload) {
  const std::string bucket = CreateTestBucket(TestName());
  Metrics metrics;
  std::unique_ptr<s3::S3Store> store = BucketClient(bucket, &metrics);
  std::unique_ptr<s3::S3Store> other = BucketClient(bucket);
  ASSERT_TRUE(store && other);
  const std::string data = PseudoRandomBytes((11 << 20) + 5, 7);
  MemorySource source(data);

  // Initiate, three parts, complete: nothing else.
  const uint64_t requests = metrics.http_requests.load();
  Result<ObjectInfo> put = store->put("key", source, {});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(metrics.http_requests.load() - requests, 5u);
  EXPECT_EQ(put->etag.parts(), 3u);
  Result<ObjectInfo> head = other->head("key");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, put->etag);

  // Another client writes the same key all the while, multipart uploads of other data, whose
  // ETags a HEAD after this client's upload would compare with this one's parts.
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  const std::string theirs = PseudoRandomBytes((6 << 20) + 1, 8);
  std::thread writer([&] {
    while (!stop.load()) {
      if (other->put("key", MemorySource(theirs), {}).ok()) written.fetch_add(1);
    }
  });
  for (int i = 0; i < 8; ++i) {
    Result<ObjectInfo> again = store->put("key", source, {});
    EXPECT_TRUE(again.ok()) << again.status().ToString();
    if (again.ok()) {
      EXPECT_EQ(again->etag, put->etag);
    }
  }
  stop.store(true);
  writer.join();
  EXPECT_GT(written.load(), 0);
}

}  // namespace
}  // namespace objfs::testing
