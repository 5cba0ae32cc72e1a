// Copying through a real objfs mount on RGW: rsync with a write-back window, stat and ls while
// the server copies or takes an upload, and the ETag attribute of single-part and multipart
// objects. (cp, rsync and mv on every backend:
// mount_suite_test.cc.)

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "backend/md5.h"
#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// One line per entry under `root` (sorted): type, mode, owner, mtime in seconds, relative
// path and, for a symbolic link, its target.
std::string TreeListing(const std::string& root) {
  CommandResult r = RunCommand(
      {"sh", "-c", "cd \"$0\" && find . -printf '%y %m %u:%g %Ts %P -> %l\\n' | LC_ALL=C sort",
       root});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
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

// Runs `work` in a thread until the proxy holds its request (the next whose request line
// starts with `held`), then `stat` of `path` and `ls -l` of the mount, which must answer while
// the request is held, with the file as it was before (`size_before`); then lets the request
// go on and waits for `work`.
void ExpectStatAndLsAnswerWhileHeld(FaultProxy& proxy, const std::string& held,
                                    const std::string& path, off_t size_before,
                                    const std::function<void()>& work) {
  const int held_before = proxy.held_requests();
  proxy.HoldNextRequest(held);
  std::thread worker(work);
  const bool was_held = WaitFor(60, [&] { return proxy.held_requests() == held_before + 1; });
  std::atomic<bool> answered{false};
  int stat_result = -1;
  struct stat during {};
  CommandResult ls;
  const std::string dir = path.substr(0, path.rfind('/'));
  std::thread looker([&] {
    stat_result = ::stat(path.c_str(), &during);
    ls = RunCommand({"ls", "-l", dir});
    answered = true;
  });
  // (A bound for a failure to show as one, not a pause: they answer at once.)
  const bool in_time = was_held && WaitFor(30, [&] { return answered.load(); });
  proxy.ReleaseHeldRequest();
  looker.join();
  worker.join();
  ASSERT_TRUE(was_held) << "no request was held: " << held;
  EXPECT_TRUE(in_time) << "stat and ls waited for the server";
  EXPECT_EQ(stat_result, 0);
  EXPECT_EQ(during.st_size, size_before);
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find(" " + path.substr(path.rfind('/') + 1) + "\n"), std::string::npos)
      << ls.out;
}

// `ls -l` and `stat` of the directory cp writes into, while RGW copies on the server (for
// gigabytes, minutes), and while a file goes up at its close: they waited for all of it. A
// proxy between objfs and RGW holds the copy's or the upload's request until they answered.
TEST(MountS3CopyTest, LsAndStatDoNotWaitForACopyOrAnUploadOnTheServer) {
  const S3TestServer& server = SharedS3Server();
  FaultProxy proxy("127.0.0.1", server.port());
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  // Every stat asks objfs, not the kernel's cache.
  options.extra_options = "endpoint=" + proxy.endpoint() + ",attr_timeout=0";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  std::string data(3 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 4093);
  const std::string src = mount->path() + "/src";
  const std::string dst = mount->path() + "/dst";
  const std::string written = mount->path() + "/written";

  // The upload at close of a file written here (one PUT: smaller than a part).
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndLsAnswerWhileHeld(proxy, "PUT /" + bucket + "/src ", src,
                                                         static_cast<off_t>(data.size()),
                                                         [&] { WriteFile(src, data); }));
  // A copy on the server: cp within the mount (the file is empty until the copy ends).
  CommandResult cp;
  ASSERT_NO_FATAL_FAILURE(
      ExpectStatAndLsAnswerWhileHeld(proxy, "PUT /" + bucket + "/dst ", dst, 0, [&] {
        cp = RunCommand({"cp", src, dst});
      }));
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  EXPECT_EQ(proxy.requests_containing("x-amz-copy-source:"), 1);
  struct stat st {};
  ASSERT_EQ(::stat(dst.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  // A listing opened while the server copies, and read after the copy ended, on a mount whose
  // kernel caches attributes: readdirplus must not hand it the size from before the copy (it
  // gives the name only), or `stat` after `cp` says 0 bytes for attr_timeout.
  ObjfsMount::Options cached_options;
  cached_options.extra_options = "endpoint=" + proxy.endpoint() + ",attr_timeout=30";
  std::unique_ptr<ObjfsMount> cached = ObjfsMount::Start(S3MountUrl(bucket), cached_options);
  ASSERT_TRUE(cached);
  const std::string again = cached->path() + "/again";
  const int held_before = proxy.held_requests();
  proxy.HoldNextRequest("PUT /" + bucket + "/again ");
  CommandResult cp_again;
  std::thread copier([&] { cp_again = RunCommand({"cp", cached->path() + "/src", again}); });
  const bool held = WaitFor(60, [&] { return proxy.held_requests() == held_before + 1; });
  DIR* listing = held ? ::opendir(cached->path().c_str()) : nullptr;
  proxy.ReleaseHeldRequest();
  copier.join();
  ASSERT_TRUE(held);
  ASSERT_NE(listing, nullptr) << std::strerror(errno);
  ASSERT_EQ(cp_again.exit_code, 0) << cp_again.err;
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(listing)) names.emplace_back(entry->d_name);
  ::closedir(listing);
  EXPECT_NE(std::find(names.begin(), names.end(), "again"), names.end());
  ASSERT_EQ(::stat(again.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  EXPECT_EQ(cached->Stop(), 0) << cached->log();

  std::unique_ptr<ObjfsMount> check = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(check);
  EXPECT_TRUE(ReadLocal(check->path() + "/src") == data);
  EXPECT_TRUE(ReadLocal(check->path() + "/dst") == data);
  EXPECT_TRUE(ReadLocal(check->path() + "/again") == data);
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

// part_checksum=none: a file streamed up in parts, and an append to it assembled from copied
// and uploaded parts, hash nothing here and still show the ETag their bytes give. The default
// (md5) hashes every part it sends.
TEST(MountS3CopyTest, PartsSentWithoutAChecksumHashNothingAndKeepAnHonestETag) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string data = PseudoRandomBytes(12 << 20, 31);
  const std::string tail = PseudoRandomBytes(1 << 20, 32);
  std::vector<Md5Digest> md5s;
  for (size_t off = 0; off < data.size(); off += 5 << 20) {
    md5s.push_back(Md5Of(std::string_view(data).substr(off, 5 << 20)));
  }
  const std::string etag = MultipartETag(md5s).value();
  const std::string bucket = CreateTestBucket(TestName());
  WriteFile(local.path() + "/big", data);
  WriteFile(local.path() + "/tail", tail);
  for (const std::string& checksum : {std::string("md5"), std::string("none")}) {
    SCOPED_TRACE(checksum);
    ObjfsMount::Options options;
    options.extra_options = "multipart_threshold=8M,part_size=5M,part_checksum=" + checksum;
    std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
    ASSERT_TRUE(mount);
    const std::string file = mount->path() + "/" + checksum;
    const std::string before = GetXattr(mount->path(), "user.objfs.stats");
    CommandResult cp = RunCommand({"cp", local.path() + "/big", file});
    ASSERT_EQ(cp.exit_code, 0) << cp.err;
    EXPECT_EQ(GetXattr(file, "user.etag"), etag);
    CommandResult append = RunCommand({"dd", "if=" + local.path() + "/tail", "of=" + file,
                                       "oflag=append", "conv=notrunc", "bs=1M", "status=none"});
    ASSERT_EQ(append.exit_code, 0) << append.err;
    const std::string after = GetXattr(mount->path(), "user.objfs.stats");
    const int64_t hashed =
        StatsCounter(after, "bytes_hashed") - StatsCounter(before, "bytes_hashed");
    if (checksum == "none") {
      EXPECT_EQ(hashed, 0) << after;
    } else {
      EXPECT_GE(hashed, static_cast<int64_t>(data.size() + tail.size())) << after;
    }
    EXPECT_TRUE(std::regex_match(GetXattr(file, "user.etag"), std::regex("[0-9a-f]{32}-[0-9]+")));
    ASSERT_TRUE(mount->Restart());
    EXPECT_TRUE(ReadLocal(file) == data + tail);
  }
}

// A chmod of a file made of parts, below copy_part_threshold, is one CopyObject onto itself.
// RGW keeps the parts' ETag for it, so the file's readers read on at the version they opened.
// (A server that gave it a new ETag would fail them with ESTALE: that copy could not tell
// whether it copied their version.)
TEST(MountS3CopyTest, AReaderOfAMultipartFileReadsOnAfterAChmod) {
  ObjfsMount::Options options;
  options.extra_options = "multipart_threshold=8M,part_size=5M,metadata_delay=0";
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())), options);
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/big";
  const std::string model = PseudoRandomBytes(12 << 20, 87);
  WriteFile(path, model);
  const std::string etag = GetXattr(path, "user.etag");
  ASSERT_TRUE(std::regex_match(etag, std::regex("[0-9a-f]{32}-3"))) << etag;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0) << std::strerror(errno);
  std::string got(model.size(), '\0');
  EXPECT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()))
      << std::strerror(errno);
  EXPECT_EQ(::close(fd), 0) << std::strerror(errno);
  EXPECT_TRUE(got == model) << "the reader read other bytes";
  EXPECT_EQ(GetXattr(path, "user.etag"), etag);
  ASSERT_TRUE(mount->Restart());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(ReadFile(path) == model);
}

}  // namespace
}  // namespace objfs::testing
