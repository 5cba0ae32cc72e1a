// An sftp:// mount of a directory on a real OpenSSH sshd, used through the kernel with the
// everyday tools: cp (in, out, within, recursive), rsync (and that a second rsync finds nothing
// to do), mv of files and directories, a large dd round trip, random preads, appends, overwrites
// and truncates, chmod and touch, and files and links made on the server directly. The server
// runs on this machine, so every result is also checked in the server's directory itself.

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

// diff -r of two trees: the server's copy must hold exactly the files and directories, nothing
// of objfs's own.
void ExpectSameTree(const std::string& a, const std::string& b) {
  CommandResult diff = RunCommand({"diff", "-r", a, b});
  EXPECT_EQ(diff.exit_code, 0) << a << " vs " << b << ": " << diff.out << diff.err;
}

// The files of `root` (recursively, objfs's own included, which there must be none of), sorted.
std::string ServerFiles(const std::string& root) {
  CommandResult r =
      RunCommand({"sh", "-c", "cd \"$0\" && find . -type f -print | LC_ALL=C sort", root});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(MountSftpTest, CpInOutAndWithinTheMount) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string source = local.path() + "/source";
  WriteFile(source, PseudoRandomBytes(3 << 20, 1));
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  std::string in_mount = mount->path() + "/in";
  std::string copy = mount->path() + "/copy";

  CommandResult cp_in = RunCommand({"cp", source, in_mount});
  ASSERT_EQ(cp_in.exit_code, 0) << cp_in.err;
  ExpectSameContent(source, in_mount);
  ExpectSameContent(source, dir.path + "/in");  // a plain file on the server

  CommandResult cp_out = RunCommand({"cp", in_mount, local.path() + "/out"});
  ASSERT_EQ(cp_out.exit_code, 0) << cp_out.err;
  ExpectSameContent(source, local.path() + "/out");

  // Within the mount: the server's copy-data, no byte through this machine.
  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult cp_within = RunCommand({"cp", in_mount, copy});
  ASSERT_EQ(cp_within.exit_code, 0) << cp_within.err;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  for (const char* counter : {"bytes_read", "bytes_written", "sftp_read_requests"}) {
    ExpectCounterDelta(before, after, counter, 0);
  }
  ExpectCounterDelta(before, after, "server_copies", 1);
  ExpectSameContent(source, copy);
  ExpectSameContent(source, dir.path + "/copy");

  ASSERT_TRUE(mount->Restart());
  ExpectSameContent(source, in_mount);
  ExpectSameContent(source, copy);
  EXPECT_EQ(ServerFiles(dir.path), "./copy\n./in\n");
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

  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
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

// mkdir and rmdir through the mount are mkdir and rmdir on the server: a directory made there is
// a plain empty directory (nothing of objfs's inside), it stays when its last file goes, and
// rmdir refuses a directory that is not empty.
TEST(MountSftpTest, DirectoriesArePlainDirectoriesOnTheServer) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  ASSERT_EQ(::mkdir((mount->path() + "/made").c_str(), 0750), 0) << std::strerror(errno);
  EXPECT_TRUE(fs::is_directory(dir.path + "/made"));
  EXPECT_TRUE(fs::is_empty(dir.path + "/made"));
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);

  WriteFile(mount->path() + "/made/f", "f");
  EXPECT_EQ(::rmdir((mount->path() + "/made").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  ASSERT_EQ(::unlink((mount->path() + "/made/f").c_str()), 0) << std::strerror(errno);
  EXPECT_TRUE(fs::is_directory(dir.path + "/made"));  // POSIX: rm of the last file keeps it
  EXPECT_TRUE(fs::is_empty(dir.path + "/made"));
  ASSERT_TRUE(mount->Restart());
  struct stat again {};
  EXPECT_EQ(::stat((mount->path() + "/made").c_str(), &again), 0);
  EXPECT_TRUE(S_ISDIR(again.st_mode));
  ASSERT_EQ(::rmdir((mount->path() + "/made").c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(fs::exists(dir.path + "/made"));
  EXPECT_EQ(ServerFiles(dir.path), "");
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

TEST(MountSftpTest, RecursiveCpInAndBackOutThroughAFreshMount) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string tree = local.path() + "/tree";
  MakeTree(tree, 30);
  SftpTestDir dir = CreateSftpTestDir(TestName());
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
    ASSERT_TRUE(mount);
    CommandResult cp_in = RunCommand({"cp", "-r", tree, mount->path() + "/"});
    ASSERT_EQ(cp_in.exit_code, 0) << cp_in.err;
    ExpectSameTree(tree, mount->path() + "/tree");
    EXPECT_EQ(mount->Stop(), 0);
  }
  // The server holds the tree as plain directories and files.
  EXPECT_EQ(ServerFiles(dir.path + "/tree"), ServerFiles(tree));
  ExpectSameTree(tree, dir.path + "/tree");

  // Out through a fresh mount with its own cache directory: everything comes from the server.
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(fresh);
  std::string back = local.path() + "/back";
  CommandResult cp_out = RunCommand({"cp", "-r", fresh->path() + "/tree", back});
  ASSERT_EQ(cp_out.exit_code, 0) << cp_out.err;
  ExpectSameTree(tree, back);
  CommandResult count = RunCommand({"find", back, "-type", "f"});
  EXPECT_EQ(std::count(count.out.begin(), count.out.end(), '\n'), 30) << count.out;
}

TEST(MountSftpTest, SecondRsyncTransfersNothing) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string tree = local.path() + "/tree";
  MakeTree(tree, 40);
  ASSERT_EQ(::chmod((tree + "/a/file1").c_str(), 0600), 0);
  CommandResult old_time = RunCommand({"touch", "-d", "2005-06-07 08:09:10", tree + "/a/b/file2"});
  ASSERT_EQ(old_time.exit_code, 0) << old_time.err;
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  std::string target = mount->path() + "/synced";

  CommandResult first = RunCommand({"rsync", "-a", "--stats", tree + "/", target});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(FilesTransferred(first.out), 40) << first.out;
  ExpectSameTree(tree, target);

  auto expect_nothing_to_do = [&](const std::string& when) {
    SCOPED_TRACE(when);
    CommandResult again =
        RunCommand({"rsync", "-a", "--stats", "--itemize-changes", tree + "/", target});
    ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
    EXPECT_EQ(FilesTransferred(again.out), 0) << again.out;
    std::regex changed("^[<>ch.][fdL][^ ]* ", std::regex::multiline);
    EXPECT_FALSE(std::regex_search(again.out, changed)) << again.out;
  };
  expect_nothing_to_do("same mount");
  ASSERT_TRUE(mount->Restart());
  expect_nothing_to_do("after a remount");

  // Mode and mtime reached the server's files.
  struct stat st {};
  ASSERT_EQ(::stat((dir.path + "/synced/a/file1").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat((dir.path + "/synced/a/b/file2").c_str(), &st), 0) << std::strerror(errno);
  struct stat want {};
  ASSERT_EQ(::stat((tree + "/a/b/file2").c_str(), &want), 0);
  EXPECT_EQ(st.st_mtime, want.st_mtime);
  ExpectSameTree(tree, dir.path + "/synced");
}

TEST(MountSftpTest, MvOfAFileAndOfADirectory) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  std::string data = PseudoRandomBytes(300000, 7);
  WriteFile(m + "/file", data);

  // mv is one posix-rename on the server: no copy, nothing read or written.
  std::string before = GetXattr(m, "user.objfs.stats");
  CommandResult mv = RunCommand({"mv", m + "/file", m + "/moved"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  std::string after = GetXattr(m, "user.objfs.stats");
  ExpectCounterDelta(before, after, "rename_requests", 1);
  for (const char* counter : {"copy_requests", "bytes_read", "bytes_written", "remove_requests"}) {
    ExpectCounterDelta(before, after, counter, 0);
  }
  struct stat st {};
  EXPECT_NE(::stat((m + "/file").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(ReadFile(m + "/moved"), data);

  ASSERT_EQ(::mkdir((m + "/dir").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/dir/sub").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/dir/empty").c_str(), 0755), 0) << std::strerror(errno);
  WriteFile(m + "/dir/one", "first");
  WriteFile(m + "/dir/sub/two", "second");
  before = GetXattr(m, "user.objfs.stats");
  CommandResult mv_dir = RunCommand({"mv", m + "/dir", m + "/renamed"});
  ASSERT_EQ(mv_dir.exit_code, 0) << mv_dir.err;
  after = GetXattr(m, "user.objfs.stats");
  // The whole tree in one request too.
  ExpectCounterDelta(before, after, "rename_requests", 1);
  ExpectCounterDelta(before, after, "copy_requests", 0);

  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    EXPECT_NE(::stat((m + "/dir").c_str(), &st), 0);
    EXPECT_EQ(ReadFile(m + "/moved"), data);
    EXPECT_EQ(ReadFile(m + "/renamed/one"), "first");
    EXPECT_EQ(ReadFile(m + "/renamed/sub/two"), "second");
    ASSERT_EQ(::stat((m + "/renamed/empty").c_str(), &st), 0) << std::strerror(errno);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    CommandResult ls = RunCommand({"ls", "-1A", m});
    EXPECT_EQ(ls.out, "moved\nrenamed\n");
    CommandResult find = RunCommand({"sh", "-c", "find \"$0\" | LC_ALL=C sort", m + "/renamed"});
    EXPECT_EQ(find.out, m + "/renamed\n" + m + "/renamed/empty\n" + m + "/renamed/one\n" + m +
                            "/renamed/sub\n" + m + "/renamed/sub/two\n");
  };
  check("same mount");
  ASSERT_TRUE(mount->Restart());
  check("after a remount");
  // On the server: the new names only.
  EXPECT_EQ(ServerFiles(dir.path), "./moved\n./renamed/one\n./renamed/sub/two\n");
  EXPECT_FALSE(fs::exists(dir.path + "/dir"));
  EXPECT_TRUE(fs::is_directory(dir.path + "/renamed/empty"));
}

TEST(MountSftpTest, DdOfALargeFileInAndBackOut) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string source = local.path() + "/source";
  CommandResult make = RunCommand({"dd", "if=/dev/urandom", "of=" + source, "bs=1M", "count=256",
                                   "iflag=fullblock", "status=none"});
  ASSERT_EQ(make.exit_code, 0) << make.err;
  std::string md5 = Md5sum(source);
  ASSERT_EQ(md5.size(), 32u);

  SftpTestDir dir = CreateSftpTestDir(TestName());
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
    ASSERT_TRUE(mount);
    CommandResult in =
        RunCommand({"dd", "if=" + source, "of=" + mount->path() + "/big", "bs=1M", "status=none"});
    ASSERT_EQ(in.exit_code, 0) << in.err;
    EXPECT_EQ(mount->Stop(), 0);
  }
  EXPECT_EQ(Md5sum(dir.path + "/big"), md5) << "the file on the server";
  // A fresh mount with its own cache directory: the content can only come from the server.
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(fresh);
  struct stat st {};
  ASSERT_EQ(::stat((fresh->path() + "/big").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 256 << 20);
  std::string back = local.path() + "/back";
  CommandResult out =
      RunCommand({"dd", "if=" + fresh->path() + "/big", "of=" + back, "bs=1M", "status=none"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(Md5sum(back), md5);
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

// The file is written on the server directly, as any SFTP user would: objfs reads files it did
// not write.
TEST(MountSftpTest, RandomPreadsOfAServerFileMatchIt) {
  const size_t kSize = 20 << 20;
  std::string data = PseudoRandomBytes(kSize, 11);
  SftpTestDir dir = CreateSftpTestDir(TestName());
  WriteFile(dir.path + "/random", data);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  int fd = ::open((mount->path() + "/random").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  std::mt19937_64 random(12);
  std::string buf;
  int mismatches = 0;
  for (int i = 0; i < 200; ++i) {
    // Mostly small reads, some large, some reaching past the end of the file.
    size_t length = (i % 10 == 0) ? random() % (2 << 20) + 1 : random() % 65536 + 1;
    size_t offset = random() % (kSize + 4096);
    buf.assign(length, '\0');
    ssize_t n = ::pread(fd, buf.data(), length, static_cast<off_t>(offset));
    size_t want = offset >= kSize ? 0 : std::min(length, kSize - offset);
    ASSERT_EQ(n, static_cast<ssize_t>(want))
        << "pread #" << i << " at " << offset << " of " << length << ": " << std::strerror(errno);
    if (std::memcmp(buf.data(), data.data() + std::min(offset, kSize), want) != 0) {
      ADD_FAILURE() << "pread #" << i << " at " << offset << " of " << length
                    << " returned other bytes";
      if (++mismatches > 5) break;
    }
  }
  ::close(fd);
}

TEST(MountSftpTest, AppendOverwriteAndTruncateMatchALocalModel) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  std::string file = mount->path() + "/edited";
  std::string model = PseudoRandomBytes(1 << 20, 14);
  WriteFile(file, model);

  auto check = [&](const std::string& step) {
    SCOPED_TRACE(step);
    ASSERT_TRUE(mount->Restart());
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_size, static_cast<off_t>(model.size()));
    std::string got = ReadFile(file);
    EXPECT_EQ(got.size(), model.size());
    EXPECT_TRUE(got == model) << "content differs from the model";
    std::string on_server = ReadFile(dir.path + "/edited");
    EXPECT_EQ(on_server.size(), model.size());
    EXPECT_TRUE(on_server == model) << "the server's file differs from the model";
  };

  std::string chunk = PseudoRandomBytes(100000, 15);
  std::string chunk_path = local.path() + "/chunk";
  WriteFile(chunk_path, chunk);
  CommandResult append = RunCommand({"sh", "-c", "cat \"$0\" >> \"$1\"", chunk_path, file});
  ASSERT_EQ(append.exit_code, 0) << append.err;
  model += chunk;
  check("append");

  std::string patch = PseudoRandomBytes(3 * 4096, 16);
  std::string patch_path = local.path() + "/patch";
  WriteFile(patch_path, patch);
  CommandResult dd = RunCommand({"dd", "if=" + patch_path, "of=" + file, "bs=4096", "seek=100",
                                 "conv=notrunc", "status=none"});
  ASSERT_EQ(dd.exit_code, 0) << dd.err;
  model.replace(100 * 4096, patch.size(), patch);
  check("overwrite in the middle");

  CommandResult up = RunCommand({"truncate", "-s", "2000000", file});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  model.resize(2000000, '\0');
  check("truncate up");

  CommandResult down = RunCommand({"truncate", "-s", "12345", file});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  model.resize(12345);
  check("truncate down");
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
  ExpectCounterDelta(before, after, "head_requests", 1);  // the directory itself
  EXPECT_NE(ls.out.find("-rw-r----- 1"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("-rw----r-- 1"), std::string::npos) << ls.out;
  CommandResult stat = RunCommand({"stat", "-c", "%a %s", mount->path() + "/d/f7"});
  ASSERT_EQ(stat.exit_code, 0) << stat.err;
  EXPECT_EQ(stat.out, "604 7\n");
}

TEST(MountSftpTest, ChmodAndTouchShowInAFreshMountAndOnTheServer) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  const time_t kMtime = 1296705906;  // 2011-02-03 04:05:06 UTC
  {
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
    ASSERT_TRUE(mount);
    std::string file = mount->path() + "/file";
    WriteFile(file, "content");
    std::string before = GetXattr(mount->path(), "user.objfs.stats");
    CommandResult chmod = RunCommand({"chmod", "640", file});
    ASSERT_EQ(chmod.exit_code, 0) << chmod.err;
    CommandResult touch = RunCommand({"touch", "-d", "@1296705906", file});
    ASSERT_EQ(touch.exit_code, 0) << touch.err;
    // Set in place: the stats show no copy of the file.
    std::string after = GetXattr(mount->path(), "user.objfs.stats");
    ExpectCounterDelta(before, after, "server_copies", 0);
    ExpectCounterDelta(before, after, "bytes_copied_on_server", 0);
    ExpectCounterDelta(before, after, "bytes_read", 0);
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0) << std::strerror(errno);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_EQ(st.st_mtime, kMtime);
    EXPECT_EQ(mount->Stop(), 0);
  }
  std::unique_ptr<ObjfsMount> fresh = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(fresh);
  CommandResult stat_mount = RunCommand({"stat", "-c", "%a %Y %s", fresh->path() + "/file"});
  ASSERT_EQ(stat_mount.exit_code, 0) << stat_mount.err;
  EXPECT_EQ(stat_mount.out, "640 1296705906 7\n");
  CommandResult stat_server = RunCommand({"stat", "-c", "%a %Y %s", dir.path + "/file"});
  ASSERT_EQ(stat_server.exit_code, 0) << stat_server.err;
  EXPECT_EQ(stat_server.out, "640 1296705906 7\n");

  // And the other way: mode and mtime set on the server show through the mount.
  WriteFile(dir.path + "/server-made", "from the server");
  ASSERT_EQ(::chmod((dir.path + "/server-made").c_str(), 0604), 0);
  CommandResult touch = RunCommand({"touch", "-d", "@1000000000", dir.path + "/server-made"});
  ASSERT_EQ(touch.exit_code, 0) << touch.err;
  CommandResult stat_made = RunCommand({"stat", "-c", "%a %Y %s", fresh->path() + "/server-made"});
  ASSERT_EQ(stat_made.exit_code, 0) << stat_made.err;
  EXPECT_EQ(stat_made.out, "604 1000000000 15\n");
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
}  // namespace objfs::testing
