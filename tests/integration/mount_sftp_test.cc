// What only an sftp:// mount of a directory on a real OpenSSH sshd does: the ETag as a content
// MD5 kept in the cache directory, mv of a nested directory leaving its parent, one READ per
// max read length, attributes taken from the listing, links made on the server, df of the
// server's file system, ~ and user-less URLs, and chown on the server. The server runs on this
// machine, so results are also checked in the server's directory itself. (What every backend
// does, cp, rsync, mv, dd and the rest: mount_suite_test.cc.)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// The files of `root` (recursively, objfs's own included, which there must be none of), sorted.
std::string ServerFiles(const std::string& root) {
  CommandResult r =
      RunCommand({"sh", "-c", "cd \"$0\" && find . -type f -print | LC_ALL=C sort", root});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// user.etag of an SFTP file is the MD5 of its content: computed once (in bulk reads) when first
// asked for, kept in the mount's cache directory (never on the server), reused by a copy within
// the mount without hashing, still known after a remount, and recomputed when the file is
// changed on the server behind the mount's back.
TEST(MountSftpTest, EtagIsTheContentMd5ComputedOnceAndReused) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string content = PseudoRandomBytes((5 << 20) + 123, 7);
  WriteFile(local.path() + "/source", content);
  const std::string md5 = Md5sum(local.path() + "/source");
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/server-made", content);  // written on the server, not through objfs
  // Older than the window in which a same-second rewrite could go unnoticed (a file hashed
  // within two seconds of its mtime is not recorded).
  ASSERT_EQ(RunCommand({"touch", "-d", "1 hour ago", dir.path + "/server-made"}).exit_code, 0);

  // Hashed here, from its bytes (AServerMadeFileGetsItsMd5FromTheServer: by the server).
  ObjfsMount::Options options;
  options.extra_options = "no_server_md5";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, options);
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/server-made";
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(GetXattr(file, "user.etag"), md5);
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(after, "bytes_hashed") - StatsCounter(before, "bytes_hashed"),
            static_cast<int64_t>(content.size()))
      << after;
  // Bulk reads: a 5 MiB file is a handful of read calls, not one per page.
  EXPECT_LE(StatsCounter(after, "read_requests") - StatsCounter(before, "read_requests"), 4)
      << after;
  CommandResult listed = RunCommand({"getfattr", "-d", file});
  EXPECT_NE(listed.out.find("user.etag=\"" + md5 + "\""), std::string::npos) << listed.out;

  // Asked again, and for a copy within the mount: nothing is hashed again.
  before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(GetXattr(file, "user.etag"), md5);
  CommandResult cp = RunCommand({"cp", file, mount->path() + "/copy"});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  EXPECT_EQ(GetXattr(mount->path() + "/copy", "user.etag"), md5);
  CommandResult mv = RunCommand({"mv", mount->path() + "/copy", mount->path() + "/moved"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  EXPECT_EQ(GetXattr(mount->path() + "/moved", "user.etag"), md5);
  after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(after, "bytes_hashed"), StatsCounter(before, "bytes_hashed")) << after;

  // A remount with the same cache directory knows the MD5s.
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(GetXattr(mount->path() + "/server-made", "user.etag"), md5);
  EXPECT_EQ(GetXattr(mount->path() + "/moved", "user.etag"), md5);
  EXPECT_EQ(StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "bytes_hashed"), 0);

  // Changed on the server: the old MD5 is not shown.
  WriteFile(dir.path + "/server-made", "changed on the server\n");
  ASSERT_TRUE(mount->Restart());
  WriteFile(local.path() + "/changed", "changed on the server\n");
  EXPECT_EQ(GetXattr(mount->path() + "/server-made", "user.etag"),
            Md5sum(local.path() + "/changed"));
  // Nothing but the files themselves on the server.
  EXPECT_EQ(ServerFiles(dir.path), "./moved\n./server-made\n");
}

// mv of a directory takes the directories it emptied with it, and nothing above it: the
// server's own directory holding only the moved one stays.
TEST(MountSftpTest, MvOfANestedDirectoryLeavesItsParentAlone) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  fs::create_directories(dir.path + "/p/d/sub");
  WriteFile(dir.path + "/p/d/x", "x");
  WriteFile(dir.path + "/p/d/sub/y", "y");
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  CommandResult mv = RunCommand({"mv", mount->path() + "/p/d", mount->path() + "/q"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  EXPECT_TRUE(fs::is_directory(dir.path + "/p")) << "the parent was removed";
  EXPECT_FALSE(fs::exists(dir.path + "/p/d"));
  EXPECT_EQ(ReadFile(dir.path + "/q/x"), "x");
  EXPECT_EQ(ReadFile(dir.path + "/q/sub/y"), "y");
  EXPECT_TRUE(fs::is_directory(mount->path() + "/p"));
  EXPECT_FALSE(fs::exists(mount->path() + "/p/d"));
}

// Names beginning with ".objfs-" are the store's own on the server (temporary files, commit
// locks, directory markers). Making one fails with EINVAL, as a lookup of one does, also right
// after a listing of the directory told the kernel the name is absent (which made no lookup ask
// the store): made here, the file's upload would be refused at every try. Nothing reaches
// the server. One another program made there stays hidden, and keeps its directory.
TEST(MountSftpTest, ANameOfTheStoresOwnCannotBeMadeEvenAfterAListing) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/kept", "kept");
  fs::create_directories(dir.path + "/held");
  WriteFile(dir.path + "/held/.objfs-x", "x");
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  std::vector<std::string> listed;  // the listing, which caches the names absent
  for (const auto& entry : fs::directory_iterator(mount->path())) {
    listed.push_back(entry.path().filename().string());
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, (std::vector<std::string>{"held", "kept"}));
  EXPECT_TRUE(fs::is_empty(mount->path() + "/held"));
  WriteFile(mount->path() + "/new", "new");  // a create, whose listing knows all the rest
  for (const std::string name : {".objfs-tmp-abc", ".objfs-dir", ".objfs-x"}) {
    SCOPED_TRACE(name);
    const std::string path = mount->path() + "/" + name;
    errno = 0;
    EXPECT_LT(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 0);
    EXPECT_EQ(errno, EINVAL) << std::strerror(errno);
    errno = 0;
    EXPECT_NE(::mkdir(path.c_str(), 0755), 0);
    EXPECT_EQ(errno, EINVAL) << std::strerror(errno);
    errno = 0;
    EXPECT_NE(::rename((mount->path() + "/kept").c_str(), path.c_str()), 0);
    EXPECT_EQ(errno, EINVAL) << std::strerror(errno);
  }
  // Such a name another program made on the server is not shown, and keeps its directory:
  // rmdir fails with ENOTEMPTY, as for an upload's temporary file, not EIO.
  errno = 0;
  EXPECT_NE(::rmdir((mount->path() + "/held").c_str()), 0);
  EXPECT_EQ(errno, ENOTEMPTY) << std::strerror(errno);
  EXPECT_TRUE(fs::exists(dir.path + "/held/.objfs-x"));
  fs::remove_all(dir.path + "/held");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  std::vector<std::string> on_server;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    on_server.push_back(entry.path().filename().string());
  }
  std::sort(on_server.begin(), on_server.end());
  EXPECT_EQ(on_server, (std::vector<std::string>{"kept", "new"}));
}

// A sequential read costs one READ request per max read length of the server, not one per
// kernel page, and no short request at the end of each read-ahead buffer. OpenSSH's
// sftp-server answers limits@openssh.com with a read length of 261,120 bytes (256 KiB less
// 1 KiB).
TEST(MountSftpTest, ASequentialReadCostsOneRequestPerMaxReadLength) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  const std::string data = PseudoRandomBytes(64 << 20, 7);
  WriteFile(dir.path + "/big", data);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  const std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(ReadFile(mount->path() + "/big"), data);
  const std::string after = GetXattr(mount->path(), "user.objfs.stats");
  constexpr int64_t kMaxRead = 261120;
  const int64_t requests =
      StatsCounter(after, "sftp_read_requests") - StatsCounter(before, "sftp_read_requests");
  EXPECT_GE(requests, (int64_t{64} << 20) / kMaxRead) << after;
  EXPECT_LE(requests, (int64_t{64} << 20) / kMaxRead + 3) << after;
  ExpectCounterDelta(before, after, "bytes_read", int64_t{64} << 20);
}

TEST(MountSftpTest, LsDashLTakesAttributesFromTheListing) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  fs::create_directory(dir.path + "/d");
  for (int i = 0; i < 50; ++i) {
    std::string file = dir.path + "/d/f" + std::to_string(i);
    WriteFile(file, std::string(i, 'x'));
    ASSERT_EQ(::chmod(file.c_str(), i % 2 == 0 ? 0640 : 0604), 0);
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult ls = RunCommand({"ls", "-l", mount->path() + "/d"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  // No stat per file: the listing's READDIR replies said it all.
  // Two for the directory itself: its name as a file, then its own attributes.
  ExpectCounterDelta(before, after, "head_requests", 2);
  EXPECT_NE(ls.out.find("-rw-r----- 1"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("-rw----r-- 1"), std::string::npos) << ls.out;
  CommandResult stat = RunCommand({"stat", "-c", "%a %s", mount->path() + "/d/f7"});
  ASSERT_EQ(stat.exit_code, 0) << stat.err;
  EXPECT_EQ(stat.out, "604 7\n");
}

// The store follows symbolic links on the server (it stats, never lstats, what it serves): a
// link to a file is a regular file with the target's content, a link to a directory a
// directory.
std::string ServerLink(const std::string& path) {
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  EXPECT_FALSE(ec) << path << ": " << ec.message();
  return target.string();
}

// Links are links: those on the server show as links (not as what they point to, which the
// kernel follows), and `ln -s` in the mount makes a link on the server.
TEST(MountSftpTest, SymlinksAreLinksOnTheServerAndInTheMount) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/target", "pointed to");
  fs::create_directory(dir.path + "/sub");
  WriteFile(dir.path + "/sub/inner", "inside");
  ASSERT_EQ(::symlink("target", (dir.path + "/link").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::symlink("sub", (dir.path + "/dirlink").c_str()), 0) << std::strerror(errno);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();

  struct stat st {};
  ASSERT_EQ(::lstat((m + "/link").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_size, 6);  // "target"
  EXPECT_EQ(ServerLink(m + "/link"), "target");
  EXPECT_EQ(ReadFile(m + "/link"), "pointed to");
  ASSERT_EQ(::lstat((m + "/dirlink").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << std::oct << st.st_mode;
  EXPECT_EQ(ReadFile(m + "/dirlink/inner"), "inside");
  CommandResult ls = RunCommand({"ls", "-1A", m});
  EXPECT_EQ(ls.out, "dirlink\nlink\nsub\ntarget\n");

  // Removing a tree removes a link in it, not what the link leads to.
  CommandResult rm = RunCommand({"rm", "-rf", m + "/dirlink"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir.path + "/dirlink")));
  EXPECT_EQ(ReadFile(dir.path + "/sub/inner"), "inside");

  // Made in the mount: a link on the server, and one in a fresh mount.
  ASSERT_EQ(::symlink("sub/inner", (m + "/made").c_str()), 0) << std::strerror(errno);
  EXPECT_TRUE(fs::is_symlink(dir.path + "/made"));
  EXPECT_EQ(ServerLink(dir.path + "/made"), "sub/inner");
  EXPECT_EQ(ReadFile(m + "/made"), "inside");

  // Its own times, not its target's (rsync -a sets a link's times with lutimes).
  struct stat target_before {};
  ASSERT_EQ(::stat((dir.path + "/sub/inner").c_str(), &target_before), 0);
  CommandResult touch = RunCommand({"touch", "-h", "-d", "@1500000000", m + "/made"});
  EXPECT_EQ(touch.exit_code, 0) << touch.err;
  struct stat link_st {
  }, target_after{};
  ASSERT_EQ(::lstat((dir.path + "/made").c_str(), &link_st), 0);
  ASSERT_EQ(::stat((dir.path + "/sub/inner").c_str(), &target_after), 0);
  EXPECT_EQ(link_st.st_mtime, 1500000000);
  EXPECT_EQ(target_after.st_mtime, target_before.st_mtime);

  ASSERT_TRUE(mount->Restart());
  ASSERT_EQ(::lstat((m + "/made").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << std::oct << st.st_mode;
  EXPECT_EQ(st.st_mtime, 1500000000);
  EXPECT_EQ(ServerLink(m + "/made"), "sub/inner");
}

// df of the mount is df of the server's file system (statvfs@openssh.com), not invented
// numbers: the server here is this machine, so the two can be compared.
TEST(MountSftpTest, StatfsIsTheServersFileSystem) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  struct statvfs server {
  }, mounted{};
  ASSERT_EQ(::statvfs(dir.path.c_str(), &server), 0) << std::strerror(errno);
  ASSERT_EQ(::statvfs(mount->path().c_str(), &mounted), 0) << std::strerror(errno);
  EXPECT_EQ(mounted.f_blocks * mounted.f_frsize, server.f_blocks * server.f_frsize);
  EXPECT_EQ(mounted.f_files, server.f_files);
  // Free space moves with other writers on this machine: within 1 GiB.
  const double free_server = static_cast<double>(server.f_bavail) * server.f_frsize;
  const double free_mounted = static_cast<double>(mounted.f_bavail) * mounted.f_frsize;
  EXPECT_NEAR(free_mounted, free_server, 1 << 30);
}

// sftp://HOST/~/DIR is DIR under the home directory of the account logged in to.
TEST(MountSftpTest, ATildePathIsUnderTheHomeDirectory) {
  struct passwd* pw = ::getpwnam(SharedSftpServer().user.c_str());
  ASSERT_NE(pw, nullptr);
  const std::string name = "objfs-home-test-" + std::to_string(::getpid());
  const std::string home_dir = std::string(pw->pw_dir) + "/" + name;
  ASSERT_TRUE(fs::create_directories(home_dir));
  WriteFile(home_dir + "/there", "from the server");
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(SftpMountUrl("~/" + name));
    EXPECT_TRUE(mount);
    if (mount) {
      EXPECT_EQ(ReadFile(mount->path() + "/there"), "from the server");
      WriteFile(mount->path() + "/made", "through the mount");
      EXPECT_EQ(ReadFile(home_dir + "/made"), "through the mount");
    }
  }
  fs::remove_all(home_dir);
}

// Without USER@ the URL logs in as the local user (the test's account, which the server knows).
TEST(MountSftpTest, AUrlWithoutAUserLogsInAsTheLocalUser) {
  const SftpTestServer& server = SharedSftpServer();
  struct passwd* me = ::getpwuid(::geteuid());
  ASSERT_NE(me, nullptr);
  ASSERT_EQ(server.user, me->pw_name) << "the shared server's account is not the local user";
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/f", "logged in");
  const std::string host =
      server.host.find(':') != std::string::npos ? "[" + server.host + "]" : server.host;
  const std::string url = "sftp://" + host + ":" + std::to_string(server.port) + dir.path;
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url);
  ASSERT_TRUE(mount);
  EXPECT_EQ(ReadFile(mount->path() + "/f"), "logged in");
}

// chown through the mount changes the owner on the server (the test's account is root there).
TEST(MountSftpTest, ChownChangesTheOwnerOnTheServer) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/f", "x");
  WriteFile(dir.path + "/g", "y");
  ASSERT_EQ(::chown((dir.path + "/g").c_str(), 0, 4000), 0) << std::strerror(errno);
  fs::create_directory(dir.path + "/d");
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  // The owner alone: the group stays the server's.
  ASSERT_EQ(::chown((mount->path() + "/g").c_str(), 4321, static_cast<gid_t>(-1)), 0)
      << std::strerror(errno);
  struct stat g {};
  ASSERT_EQ(::stat((dir.path + "/g").c_str(), &g), 0);
  EXPECT_EQ(g.st_uid, 4321u);
  EXPECT_EQ(g.st_gid, 4000u);
  // A directory.
  ASSERT_EQ(::chown((mount->path() + "/d").c_str(), 4321, 4322), 0) << std::strerror(errno);
  struct stat d {};
  ASSERT_EQ(::stat((dir.path + "/d").c_str(), &d), 0);
  EXPECT_EQ(d.st_uid, 4321u);
  EXPECT_EQ(d.st_gid, 4322u);

  ASSERT_EQ(::chown((mount->path() + "/f").c_str(), 4321, 4322), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4322u);
  ASSERT_TRUE(mount->Restart());
  ASSERT_EQ(::stat((mount->path() + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  // A chmod afterwards keeps that owner.
  ASSERT_EQ(::chmod((mount->path() + "/f").c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::stat((dir.path + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

}  // namespace
// A file copied in is streamed up unhashed once md5sum on the server has passed its check on a
// probe (which the mount's first streamed upload starts), and the server computes its MD5 when
// it is first asked for; with no_server_md5 it is hashed on its way up instead, several parts
// going up at once. Either way asking for it reads no byte of the file back.
TEST(MountSftpTest, AFileCopiedInGetsItsMd5WithoutBeingReadBack) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string content = PseudoRandomBytes((48 << 20) + 5, 8);
  WriteFile(local.path() + "/source", content);
  const std::string md5 = Md5sum(local.path() + "/source");
  SftpTestDir dir = CreateSftpTestDir(TestName());
  for (const std::string mode : {"", "no_server_md5"}) {
    SCOPED_TRACE("-o " + mode);
    ObjfsMount::Options options;
    options.extra_options = mode;
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, options);
    ASSERT_TRUE(mount);
    const std::string m = mount->path();
    // The mount's first streamed upload; md5sum's check runs once it is complete.
    CommandResult first = RunCommand({"cp", local.path() + "/source", m + "/first"});
    ASSERT_EQ(first.exit_code, 0) << first.err;
    if (mode.empty()) {
      EXPECT_TRUE(WaitFor(30, [&] {
        return StatsCounter(GetXattr(m, "user.objfs.stats"), "server_md5_probes") == 1;
      })) << mount->log();
    }
    std::string before = GetXattr(m, "user.objfs.stats");
    CommandResult cp = RunCommand({"cp", local.path() + "/source", m + "/copied"});
    ASSERT_EQ(cp.exit_code, 0) << cp.err;
    std::string after = GetXattr(m, "user.objfs.stats");
    EXPECT_GE(StatsCounter(after, "streamed_parts") - StatsCounter(before, "streamed_parts"), 2)
        << after;
    EXPECT_EQ(StatsCounter(after, "bytes_hashed") - StatsCounter(before, "bytes_hashed"),
              mode.empty() ? 0 : static_cast<int64_t>(content.size()))
        << after;
    before = after;
    EXPECT_EQ(GetXattr(m + "/copied", "user.etag"), md5);
    after = GetXattr(m, "user.objfs.stats");
    EXPECT_EQ(StatsCounter(after, "read_requests"), StatsCounter(before, "read_requests")) << after;
    EXPECT_EQ(StatsCounter(after, "bytes_hashed"), StatsCounter(before, "bytes_hashed")) << after;
    EXPECT_EQ(StatsCounter(after, "server_md5s") - StatsCounter(before, "server_md5s"),
              mode.empty() ? 1 : 0)
        << after;
    EXPECT_TRUE(ReadFile(dir.path + "/copied") == content);
    EXPECT_EQ(mount->Stop(), 0) << mount->log();
    EXPECT_EQ(ServerFiles(dir.path), "./copied\n./first\n");  // no probe or temporary file
    fs::remove(dir.path + "/copied");
    fs::remove(dir.path + "/first");
  }
}

TEST(MountSftpTest, AServerMadeFileGetsItsMd5FromTheServer) {
  // md5sum runs on the server. Its first answer in a mount is checked against the bytes; after
  // that no byte of a file comes here. A name no shell may see is hashed here.
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string content = PseudoRandomBytes((9 << 20) + 17, 9);
  WriteFile(local.path() + "/source", content);
  const std::string md5 = Md5sum(local.path() + "/source");
  SftpTestDir dir = CreateSftpTestDir(TestName());
  const std::string first = PseudoRandomBytes(5 << 20, 10);  // over 4 MiB: asked of md5sum
  WriteFile(dir.path + "/first", first);
  WriteFile(dir.path + "/server-made", content);
  WriteFile(dir.path + "/it's", content);
  for (const char* name : {"/first", "/server-made", "/it's"}) {
    ASSERT_EQ(RunCommand({"touch", "-d", "1 hour ago", dir.path + name}).exit_code, 0);
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  WriteFile(local.path() + "/first", first);
  EXPECT_EQ(GetXattr(mount->path() + "/first", "user.etag"), Md5sum(local.path() + "/first"));
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(before, "server_md5s"), 1) << before;
  EXPECT_EQ(GetXattr(mount->path() + "/server-made", "user.etag"), md5);
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(after, "server_md5s") - StatsCounter(before, "server_md5s"), 1) << after;
  EXPECT_EQ(StatsCounter(after, "read_requests"), StatsCounter(before, "read_requests")) << after;
  EXPECT_EQ(StatsCounter(after, "bytes_hashed"), StatsCounter(before, "bytes_hashed")) << after;

  before = after;
  EXPECT_EQ(GetXattr(mount->path() + "/it's", "user.etag"), md5);
  after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(after, "server_md5s"), StatsCounter(before, "server_md5s")) << after;
  EXPECT_EQ(StatsCounter(after, "bytes_hashed") - StatsCounter(before, "bytes_hashed"),
            static_cast<int64_t>(content.size()))
      << after;

  // Recorded: a remount asks nobody.
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(GetXattr(mount->path() + "/server-made", "user.etag"), md5);
  after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_EQ(StatsCounter(after, "server_md5s"), 0) << after;
  EXPECT_EQ(StatsCounter(after, "bytes_hashed"), 0) << after;
}

TEST(MountSftpTest, OnXfsACopyOrAnEditInTheMountIsACloneOnTheServer) {
  // cp --reflink=always on the server, where the file system clones; with no_server_cp,
  // copy-data. Either way no byte comes here, and a copy keeps its source's MD5. (Each mount's
  // first cp is run whatever the file's size: it tells how long the account's shell takes to
  // start.)
  XfsSftpTestDir xfs(TestName());
  if (xfs.dir().path.empty()) GTEST_SKIP() << xfs.why();
  const SftpTestDir& dir = xfs.dir();
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string content = PseudoRandomBytes((6 << 20) + 11, 12);
  WriteFile(local.path() + "/source", content);
  const std::string md5 = Md5sum(local.path() + "/source");
  for (const std::string mode : {"", "no_server_cp"}) {
    SCOPED_TRACE("-o " + mode);
    ObjfsMount::Options options;
    options.extra_options = mode;
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, options);
    ASSERT_TRUE(mount);
    const std::string m = mount->path();
    CommandResult in = RunCommand({"cp", local.path() + "/source", m + "/source"});
    ASSERT_EQ(in.exit_code, 0) << in.err;
    const std::string before = GetXattr(m, "user.objfs.stats");
    CommandResult cp = RunCommand({"cp", m + "/source", m + "/copy"});
    ASSERT_EQ(cp.exit_code, 0) << cp.err;
    EXPECT_EQ(GetXattr(m + "/copy", "user.etag"), md5);
    const std::string after = GetXattr(m, "user.objfs.stats");
    auto delta = [&](const std::string& counter) {
      return StatsCounter(after, counter) - StatsCounter(before, counter);
    };
    EXPECT_EQ(delta("server_cps"), mode.empty() ? 1 : 0) << after;
    EXPECT_EQ(delta("server_copies"), 1) << after;
    EXPECT_EQ(delta("bytes_read"), 0) << after;
    EXPECT_EQ(delta("bytes_written"), 0) << after;
    EXPECT_EQ(delta("bytes_hashed"), 0) << after;
    EXPECT_TRUE(ReadFile(dir.path + "/copy") == content);
    EXPECT_EQ(mount->Stop(), 0) << mount->log();
    EXPECT_EQ(ServerFiles(dir.path), "./copy\n./source\n");
    fs::remove(dir.path + "/copy");
  }

  // An append in a fresh mount: the old bytes cloned, the new one written, nothing fetched.
  const std::string big = PseudoRandomBytes(20 << 20, 14);  // an edit leaves a whole part as it was
  WriteFile(dir.path + "/big", big);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  const std::string tail = PseudoRandomBytes(1 << 20, 13);
  WriteFile(local.path() + "/tail", tail);
  const std::string before = GetXattr(m, "user.objfs.stats");
  CommandResult append =
      RunCommand({"sh", "-c", "cat \"$0\" >> \"$1\"", local.path() + "/tail", m + "/big"});
  ASSERT_EQ(append.exit_code, 0) << append.err;
  const std::string after = GetXattr(m, "user.objfs.stats");
  auto delta = [&](const std::string& counter) {
    return StatsCounter(after, counter) - StatsCounter(before, counter);
  };
  EXPECT_EQ(delta("server_cps"), 1) << after;
  EXPECT_EQ(delta("copy_requests"), 1) << after;
  EXPECT_EQ(delta("bytes_copied_on_server"), static_cast<int64_t>(big.size())) << after;
  EXPECT_EQ(delta("bytes_written"), static_cast<int64_t>(tail.size())) << after;
  EXPECT_EQ(delta("bytes_read"), 0) << after;
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_TRUE(ReadFile(dir.path + "/big") == big + tail);
  EXPECT_EQ(ServerFiles(dir.path), "./big\n./source\n");
}

}  // namespace objfs::testing
