// Copying and moving through a real objfs mount on RGW with the everyday tools: cp (in, out,
// within, recursive), rsync (and that a second rsync finds nothing to do), mv of files and
// directories, and the ETag attribute of single-part and multipart objects.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
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

TEST(MountS3CopyTest, CpInOutAndWithinTheMount) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string source = local.path() + "/source";
  WriteFile(source, PseudoRandomBytes(2 << 20, 1));
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string in_mount = mount->path() + "/in";
  std::string copy = mount->path() + "/copy";

  CommandResult cp_in = RunCommand({"cp", source, in_mount});
  ASSERT_EQ(cp_in.exit_code, 0) << cp_in.err;
  ExpectSameContent(source, in_mount);

  CommandResult cp_out = RunCommand({"cp", in_mount, local.path() + "/out"});
  ASSERT_EQ(cp_out.exit_code, 0) << cp_out.err;
  ExpectSameContent(source, local.path() + "/out");

  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult cp_within = RunCommand({"cp", in_mount, copy});
  ASSERT_EQ(cp_within.exit_code, 0) << cp_within.err;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  for (const char* counter : {"bytes_read", "bytes_hashed", "bytes_written"}) {
    ExpectCounterDelta(before, after, counter, 0);
  }
  ExpectCounterDelta(before, after, "server_copies", 1);

  std::string etag = GetXattr(in_mount, "user.etag");
  EXPECT_EQ(etag.size(), 32u) << etag;
  EXPECT_EQ(GetXattr(copy, "user.etag"), etag);
  ExpectSameContent(source, copy);

  ASSERT_TRUE(mount->Restart());
  ExpectSameContent(source, copy);
  EXPECT_EQ(GetXattr(copy, "user.etag"), etag);
}

TEST(MountS3CopyTest, RecursiveCpInAndBackOut) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string tree = local.path() + "/tree";
  MakeTree(tree, 30);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);

  CommandResult cp_in = RunCommand({"cp", "-r", tree, mount->path() + "/"});
  ASSERT_EQ(cp_in.exit_code, 0) << cp_in.err;
  CommandResult diff_in = RunCommand({"diff", "-r", tree, mount->path() + "/tree"});
  EXPECT_EQ(diff_in.exit_code, 0) << diff_in.out << diff_in.err;

  // Out through a fresh mount, so that everything comes from the bucket.
  ASSERT_TRUE(mount->Restart());
  std::string back = local.path() + "/back";
  CommandResult cp_out = RunCommand({"cp", "-r", mount->path() + "/tree", back});
  ASSERT_EQ(cp_out.exit_code, 0) << cp_out.err;
  CommandResult diff_out = RunCommand({"diff", "-r", tree, back});
  EXPECT_EQ(diff_out.exit_code, 0) << diff_out.out << diff_out.err;
  CommandResult count = RunCommand({"find", back, "-type", "f"});
  EXPECT_EQ(std::count(count.out.begin(), count.out.end(), '\n'), 30) << count.out;
}

// One line per entry under `root` (sorted): type, mode, owner, mtime in seconds, relative
// path and, for a symbolic link, its target.
std::string TreeListing(const std::string& root) {
  CommandResult r = RunCommand(
      {"sh", "-c", "cd \"$0\" && find . -printf '%y %m %u:%g %Ts %P -> %l\\n' | LC_ALL=C sort",
       root});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(MountS3CopyTest, SecondRsyncTransfersNothing) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string tree = local.path() + "/tree";
  MakeTree(tree, 50);
  ASSERT_EQ(::chmod((tree + "/a/file1").c_str(), 0600), 0);
  ASSERT_EQ(::chmod((tree + "/d").c_str(), 0700), 0);
  ASSERT_EQ(::lchown((tree + "/a/b/file2").c_str(), 1234, 5678), 0) << std::strerror(errno);
  ASSERT_EQ(::symlink("b/file2", (tree + "/a/link").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::symlink("../f", (tree + "/d/dirlink").c_str()), 0) << std::strerror(errno);
  CommandResult old_times =
      RunCommand({"touch", "-h", "-d", "2005-06-07 08:09:10", tree + "/a/link", tree + "/a/b/file2",
                  tree + "/d/e with space"});
  ASSERT_EQ(old_times.exit_code, 0) << old_times.err;
  std::string want_listing = TreeListing(tree);
  ASSERT_NE(want_listing.find("l 777 root:root 1118"), std::string::npos) << want_listing;
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string target = mount->path() + "/synced";

  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult first = RunCommand({"rsync", "-a", "--stats", tree + "/", target});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(FilesTransferred(first.out), 50) << first.out;
  // rsync sets each temporary file's times and mode and then renames it: the rename's copy
  // carries both changes, so each file is one PUT and one copy (not three copies), also when a
  // change reaches the daemon before the kernel's asynchronous release of the closed file.
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_GE(StatsCounter(after, "metadata_deferred") - StatsCounter(before, "metadata_deferred"),
            100);
  EXPECT_LT(StatsCounter(after, "copy_requests") - StatsCounter(before, "copy_requests"), 100);
  EXPECT_EQ(TreeListing(target), want_listing);
  CommandResult diff = RunCommand({"diff", "-r", tree, target});
  EXPECT_EQ(diff.exit_code, 0) << diff.out << diff.err;

  auto expect_nothing_to_do = [&](const std::string& when) {
    SCOPED_TRACE(when);
    CommandResult again =
        RunCommand({"rsync", "-a", "--stats", "--itemize-changes", tree + "/", target});
    ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
    EXPECT_EQ(FilesTransferred(again.out), 0) << again.out;
    EXPECT_EQ(TreeListing(target), want_listing);
    // --itemize-changes lists every file or directory whose content or attributes differ.
    std::regex changed("^[<>ch.][fdL][^ ]* ", std::regex::multiline);
    EXPECT_FALSE(std::regex_search(again.out, changed)) << again.out;
    for (const char* name : {"/a/file1", "/d", "/a/b/c/file3", "/file0"}) {
      struct stat want {};
      struct stat got {};
      ASSERT_EQ(::lstat((tree + name).c_str(), &want), 0);
      ASSERT_EQ(::lstat((target + name).c_str(), &got), 0) << name << ": " << std::strerror(errno);
      EXPECT_EQ(got.st_mode, want.st_mode) << name;
      if (S_ISREG(want.st_mode)) {
        EXPECT_EQ(got.st_mtime, want.st_mtime) << name;
      }
    }
  };
  expect_nothing_to_do("same mount");
  ASSERT_TRUE(mount->Restart());
  expect_nothing_to_do("after a remount");

  // One changed file: rsync reads the old one as its basis and renames the new one over it.
  WriteFile(tree + "/a/b/c/file3", PseudoRandomBytes(40000, 999));
  CommandResult touch = RunCommand({"touch", "-d", "2010-01-01 00:00:00", tree + "/a/b/c/file3"});
  ASSERT_EQ(touch.exit_code, 0) << touch.err;
  want_listing = TreeListing(tree);
  CommandResult update = RunCommand({"rsync", "-a", "--stats", tree + "/", target});
  ASSERT_EQ(update.exit_code, 0) << update.out << update.err;
  EXPECT_EQ(FilesTransferred(update.out), 1) << update.out;
  CommandResult diff_update = RunCommand({"diff", "-r", tree, target});
  EXPECT_EQ(diff_update.exit_code, 0) << diff_update.out << diff_update.err;
  ASSERT_TRUE(mount->Restart());
  expect_nothing_to_do("after an update and a remount");
  CommandResult diff_after = RunCommand({"diff", "-r", tree, target});
  EXPECT_EQ(diff_after.exit_code, 0) << diff_after.out << diff_after.err;
}

// The number of regular files under `root`.
int RegularFiles(const std::string& root) {
  CommandResult r = RunCommand({"find", root, "-type", "f"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return static_cast<int>(std::count(r.out.begin(), r.out.end(), '\n'));
}

// -o writeback=SECONDS: rsync's temporary files, attribute changes and renames stay in the
// daemon; unmount uploads each file once under its final name, and a crash in the window
// leaves the files for the next mount to upload.
TEST(MountS3CopyTest, RsyncWithAWritebackWindow) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  std::string tree = local.path() + "/tree";
  MakeTree(tree, 30);
  ASSERT_EQ(::chmod((tree + "/a/file1").c_str(), 0600), 0);
  std::string want_listing = TreeListing(tree);
  std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options windowed;
  windowed.extra_options = "writeback=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), windowed);
  ASSERT_TRUE(mount);

  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult rsync = RunCommand({"rsync", "-a", "--stats", tree + "/", mount->path() + "/t"});
  ASSERT_EQ(rsync.exit_code, 0) << rsync.out << rsync.err;
  EXPECT_EQ(FilesTransferred(rsync.out), 30) << rsync.out;
  std::string after = GetXattr(mount->path(), "user.objfs.stats");
  ExpectCounterDelta(before, after, "bytes_written", 0);  // no file uploaded yet
  EXPECT_EQ(TreeListing(mount->path() + "/t"), want_listing);
  CommandResult again = RunCommand({"rsync", "-a", "--stats", tree + "/", mount->path() + "/t"});
  EXPECT_EQ(FilesTransferred(again.out), 0) << again.out;
  {
    std::unique_ptr<ObjfsMount> other = ObjfsMount::Start(S3MountUrl(bucket));
    ASSERT_TRUE(other);
    EXPECT_EQ(RegularFiles(other->path() + "/t"), 0);
  }

  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  std::unique_ptr<ObjfsMount> check = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(check);
  EXPECT_EQ(TreeListing(check->path() + "/t"), want_listing);  // no temporary names either
  CommandResult diff = RunCommand({"diff", "-r", tree, check->path() + "/t"});
  EXPECT_EQ(diff.exit_code, 0) << diff.out << diff.err;

  // Killed inside the window: the next mount over the same cache directory uploads the files.
  std::unique_ptr<ObjfsMount> doomed = ObjfsMount::Start(S3MountUrl(bucket), windowed);
  ASSERT_TRUE(doomed);
  CommandResult second = RunCommand({"rsync", "-a", tree + "/", doomed->path() + "/u"});
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_EQ(doomed->KillAndWait(SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(check->Restart());  // a fresh view of the bucket
  EXPECT_EQ(RegularFiles(check->path() + "/u"), 0);
  ASSERT_TRUE(doomed->Restart());
  EXPECT_EQ(doomed->Stop(), 0) << doomed->log();
  ASSERT_TRUE(check->Restart());
  CommandResult diff_u = RunCommand({"diff", "-r", tree, check->path() + "/u"});
  EXPECT_EQ(diff_u.exit_code, 0) << diff_u.out << diff_u.err;
  EXPECT_EQ(TreeListing(check->path() + "/u"), want_listing);
}

TEST(MountS3CopyTest, MvOfAFileAndOfADirectory) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  std::string data = PseudoRandomBytes(300000, 7);
  WriteFile(m + "/file", data);
  std::string etag = GetXattr(m + "/file", "user.etag");
  ASSERT_FALSE(etag.empty());

  CommandResult mv = RunCommand({"mv", m + "/file", m + "/moved"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  struct stat st {};
  EXPECT_NE(::stat((m + "/file").c_str(), &st), 0);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(ReadFile(m + "/moved"), data);
  EXPECT_EQ(GetXattr(m + "/moved", "user.etag"), etag);

  ASSERT_EQ(::mkdir((m + "/dir").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/dir/sub").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/dir/empty").c_str(), 0755), 0) << std::strerror(errno);
  WriteFile(m + "/dir/one", "first");
  WriteFile(m + "/dir/sub/two", "second");
  CommandResult mv_dir = RunCommand({"mv", m + "/dir", m + "/renamed"});
  ASSERT_EQ(mv_dir.exit_code, 0) << mv_dir.err;

  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    EXPECT_NE(::stat((m + "/dir").c_str(), &st), 0);
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
  EXPECT_EQ(GetXattr(m + "/moved", "user.etag"), etag);
}

TEST(MountS3CopyTest, EtagOfSinglePartAndMultipartFiles) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  ObjfsMount::Options options;
  options.extra_options = "multipart_threshold=8M,part_size=5M";
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();

  std::string small_local = local.path() + "/small";
  WriteFile(small_local, PseudoRandomBytes(3 << 20, 8));
  CommandResult cp_small = RunCommand({"cp", small_local, m + "/small"});
  ASSERT_EQ(cp_small.exit_code, 0) << cp_small.err;
  EXPECT_EQ(GetXattr(m + "/small", "user.etag"), Md5sum(small_local));

  std::string big_local = local.path() + "/big";
  WriteFile(big_local, PseudoRandomBytes(12 << 20, 9));
  CommandResult cp_big = RunCommand({"cp", big_local, m + "/big"});
  ASSERT_EQ(cp_big.exit_code, 0) << cp_big.err;
  std::string etag = GetXattr(m + "/big", "user.etag");
  EXPECT_TRUE(std::regex_match(etag, std::regex("[0-9a-f]{32}-3"))) << etag;

  // A multipart source is copied on the server too: nothing read through here, nothing hashed.
  const std::string before = GetXattr(m, "user.objfs.stats");
  CommandResult cp_within = RunCommand({"cp", m + "/big", m + "/big-copy"});
  ASSERT_EQ(cp_within.exit_code, 0) << cp_within.err;
  const std::string after = GetXattr(m, "user.objfs.stats");
  ExpectCounterDelta(before, after, "bytes_read", 0);
  ExpectCounterDelta(before, after, "bytes_hashed", 0);
  ExpectCounterDelta(before, after, "server_copies", 1);
  ExpectSameContent(big_local, m + "/big-copy");
  EXPECT_FALSE(GetXattr(m + "/big-copy", "user.etag").empty());

  ASSERT_TRUE(mount->Restart());
  ExpectSameContent(big_local, m + "/big");
  ExpectSameContent(big_local, m + "/big-copy");
  EXPECT_EQ(GetXattr(m + "/big", "user.etag"), etag);
  EXPECT_FALSE(GetXattr(m + "/big-copy", "user.etag").empty());
  EXPECT_EQ(GetXattr(m + "/small", "user.etag"), Md5sum(small_local));
}

}  // namespace
}  // namespace objfs::testing
