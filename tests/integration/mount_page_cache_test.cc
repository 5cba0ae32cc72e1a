// The kernel's page cache across opens, on every backend: a file read once is read again from
// the kernel's pages while the object's version (ETag; size and mtime on SFTP) is unchanged, with
// no backend read; a file another client replaced is read anew once attr_timeout has passed;
// files written, truncated, copied onto or renamed over through the mount read back right.
//
// The server side is written with the Remote helper (another client); what the mount fetched is
// read from user.objfs.stats and, on S3, from a proxy that counts the GETs the server received.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/md5.h"
#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/remote.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

// "N bytes, MD5 ..." of `data`: what tests compare, so that a failure prints no megabytes.
std::string Digest(std::string_view data) {
  return std::to_string(data.size()) + " bytes, MD5 " + HexMd5(Md5Of(data));
}

// `cat PATH`: a whole open, read and close by another program, as a user would.
std::string Cat(const std::string& path) {
  CommandResult r = RunCommand({"cat", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

std::string Stats(const ObjfsMount& mount) { return GetXattr(mount.path(), "user.objfs.stats"); }

// The backend reads between two snapshots of the statistics: 0 when the kernel's pages served.
int64_t BackendReads(const std::string& before, const std::string& after) {
  int64_t n = 0;
  for (const char* name : {"bytes_read", "read_requests", "kernel_reads", "sftp_read_requests"}) {
    if (StatsCounter(before, name) >= 0)
      n += StatsCounter(after, name) - StatsCounter(before, name);
  }
  return n;
}

// Tries `read` (a whole read of a file whose pages objfs keeps) up to three times, and expects
// at least one try to reach no backend: `fetched` says what a try fetched (0: nothing).
//
// The kernel evicts clean file pages whatever objfs asks. A trace of the test machine's page
// cache (the tracepoint filemap:mm_filemap_delete_from_page_cache, with stacks) caught its
// proactive reclaim, DAMON's kdamond with the `pageout` action, taking three single pages of a
// test file between two reads, though the pages were mapped and locked; the second read then
// fetched the 4 MB around them. An objfs that dropped the pages at each open (what these tests
// are for) fetches on every try, so it still fails; a one-off eviction passes on the next try.
template <typename Read, typename Fetched>
void ExpectAReadFromKeptPages(const std::string& what, Read read, Fetched fetched) {
  constexpr int kTries = 3;
  for (int i = 1; i <= kTries; ++i) {
    const int64_t n = fetched(read);
    if (n == 0) return;
    std::cerr << what << ", try " << i << " of " << kTries << ": " << n
              << " backend reads or requests (pages the kernel evicted, or objfs dropped)\n";
  }
  ADD_FAILURE() << what << ": each of " << kTries << " reads reached the backend";
}

// `cat PATH` again, which must be served by the pages kept from the reads before, once objfs's
// own read-ahead is over: each try an open that keeps them (page_cache_keeps) and no drop.
void ExpectCatFromKeptPages(const ObjfsMount& mount, const std::string& path,
                            const std::string& want) {
  ExpectAReadFromKeptPages(
      "cat " + path, [&] { EXPECT_EQ(Digest(Cat(path)), Digest(want)); },
      [&](auto& cat) -> int64_t {
        EXPECT_TRUE(
            WaitFor(30, [&] { return StatsCounter(Stats(mount), "in_flight_requests") == 0; }));
        const std::string before = Stats(mount);
        cat();
        const std::string after = Stats(mount);
        ExpectCounterDelta(before, after, "page_cache_keeps", 1);
        ExpectCounterDelta(before, after, "page_cache_drops", 0);
        ExpectCounterDelta(before, after, "page_cache_invalidations", 0);
        return BackendReads(before, after);
      });
}

// How many of the pages of the mapping [addr, addr+size) are in the page cache.
size_t ResidentPages(void* addr, size_t size) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  if (::mincore(addr, size, vec.data()) != 0) {
    ADD_FAILURE() << "mincore: " << std::strerror(errno);
    return 0;
  }
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

class PageCacheTest : public ::testing::TestWithParam<RemoteKind> {
 protected:
  void SetUp() override {
    remote_ = Remote::Create(GetParam(), TestName());
    ASSERT_TRUE(remote_);
    ASSERT_TRUE(remote_->capabilities().server_access);
  }

  // Writes file `path` on the server, as another client would. On SFTP the version is the size
  // and the mtime in seconds: each file written gets an mtime of its own, even in one second.
  void ReplaceOnServer(const std::string& path, const std::string& data) {
    ASSERT_TRUE(remote_->Write(path, data).ok());
    if (remote_->capabilities().posix_files) {
      // On SFTP an mtime of its own, long past: another version than any earlier one, and one
      // settled long enough to be trusted (SettledVersion).
      const std::string local = remote_->local_root() + "/" + path;
      timespec times[2] = {};
      times[0].tv_sec = times[1].tv_sec = 1600000000 + 100 * (++replaced_);
      ASSERT_EQ(::utimensat(AT_FDCWD, local.c_str(), times, 0), 0) << std::strerror(errno);
    }
  }

  const Remote& remote() const { return *remote_; }

 private:
  std::unique_ptr<Remote> remote_;
  int replaced_ = 0;
};

TEST_P(PageCacheTest, SecondReadOfAnUnchangedFileMakesNoBackendRead) {
  const std::string data = PseudoRandomBytes(8 << 20, 1);
  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("f", data));
  std::unique_ptr<ObjfsMount> mount = remote().Mount();
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/f";
  // A mapping made before the reads, locked once they filled it, holds the pages against
  // memory reclaim (sanitizer builds side by side), with no open of its own: the opens are what
  // is tested. Proactive reclaim may take some anyway (ExpectAReadFromKeptPages).
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* map = ::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);

  const std::string before_first = Stats(*mount);
  EXPECT_EQ(Digest(Cat(path)), Digest(data));
  (void)::mlock(map, data.size());
  EXPECT_GE(StatsCounter(Stats(*mount), "bytes_read") - StatsCounter(before_first, "bytes_read"),
            static_cast<int64_t>(data.size()));
  ExpectCatFromKeptPages(*mount, path, data);
  ::munmap(map, data.size());
  ::close(fd);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

TEST_P(PageCacheTest, FileReplacedByAnotherClientIsReadAnewAfterAttrTimeout) {
  // Same size: only the version tells the two apart (on S3 the mtime may well be the same
  // second too).
  const std::string first = PseudoRandomBytes(1 << 20, 2);
  const std::string second = PseudoRandomBytes(1 << 20, 3);
  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("f", first));
  std::unique_ptr<ObjfsMount> mount = remote().Mount("attr_timeout=1");
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/f";
  EXPECT_EQ(Digest(Cat(path)), Digest(first));
  EXPECT_EQ(Digest(Cat(path)), Digest(first));  // the pages are kept

  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("f", second));
  // Stale for at most attr_timeout (1 s); 10 s leaves room for a loaded machine.
  std::string seen;
  // A cat that opens the file while the old version's attributes are still cached, and reads
  // after the replacement is seen, gets ESTALE (README: a file replaced underneath its readers):
  // that cat is tried again, as a user would.
  EXPECT_TRUE(WaitFor(
      10,
      [&] {
        CommandResult r = RunCommand({"cat", path});
        if (r.exit_code != 0 && r.err.find("Stale file handle") != std::string::npos) return false;
        EXPECT_EQ(r.exit_code, 0) << r.err;
        seen = Digest(r.out);
        return seen == Digest(second);
      },
      std::chrono::milliseconds(100)))
      << "still " << seen << " after 10 s; the new version is " << Digest(second);
  const std::string stats = Stats(*mount);
  EXPECT_GE(
      StatsCounter(stats, "page_cache_drops") + StatsCounter(stats, "page_cache_invalidations"), 1)
      << stats;
  // And the new version's pages are kept in turn. The drop that the new version queued is sent
  // by a thread of its own, and on a loaded machine can reach the kernel after the read above
  // filled the pages: one more read takes the pages that drop leaves, then they are kept.
  EXPECT_EQ(Digest(Cat(path)), Digest(second));
  ExpectCatFromKeptPages(*mount, path, second);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// On SFTP a version is the size and a whole-second mtime: a rewrite of the same size within
// that second keeps it. Pages read at a version that recent are not kept for the next open, so
// such a rewrite is read anew (here dated ahead, as a server clock ahead of ours would).
TEST_P(PageCacheTest, ASameSizeRewriteWithinTheSecondIsReadAnew) {
  if (!remote().capabilities().posix_files) GTEST_SKIP() << "S3's ETag changes with the bytes";
  const std::string first = PseudoRandomBytes(1 << 20, 20);
  const std::string second = PseudoRandomBytes(1 << 20, 21);
  const std::string local = remote().local_root() + "/f";
  timespec times[2] = {};
  ASSERT_EQ(::clock_gettime(CLOCK_REALTIME, &times[0]), 0);
  times[1] = times[0];
  times[1].tv_sec += 60;
  WriteFile(local, first);
  ASSERT_EQ(::utimensat(AT_FDCWD, local.c_str(), times, 0), 0) << std::strerror(errno);
  std::unique_ptr<ObjfsMount> mount = remote().Mount("attr_timeout=1");
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/f";
  EXPECT_EQ(Digest(Cat(path)), Digest(first));
  // Rewritten in place with the same size and mtime: the same version.
  WriteFile(local, second);
  ASSERT_EQ(::utimensat(AT_FDCWD, local.c_str(), times, 0), 0) << std::strerror(errno);
  std::string seen;
  EXPECT_TRUE(WaitFor(
      10,
      [&] {
        seen = Digest(Cat(path));
        return seen == Digest(second);
      },
      std::chrono::milliseconds(100)))
      << "still " << seen << " after 10 s; the rewrite is " << Digest(second);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// A program that has the file mapped never opens it again: getattr (stat, or the kernel's
// check before a read) seeing the new version drops the pages.
TEST_P(PageCacheTest, ChangeSeenByStatDropsThePagesOfAMappedFile) {
  const std::string first = PseudoRandomBytes(1 << 20, 4);
  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("f", first));
  std::unique_ptr<ObjfsMount> mount = remote().Mount("attr_timeout=1");
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/f";
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* map = ::mmap(nullptr, first.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(Digest(std::string_view(static_cast<const char*>(map), first.size())), Digest(first));
  EXPECT_GT(ResidentPages(map, first.size()), 0u);
  const std::string before = Stats(*mount);

  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("f", PseudoRandomBytes(first.size(), 5)));
  size_t resident = 0;
  EXPECT_TRUE(WaitFor(
      10,
      [&] {
        struct stat st {};
        ::stat(path.c_str(), &st);
        resident = ResidentPages(map, first.size());
        return resident == 0;
      },
      std::chrono::milliseconds(100)))
      << resident << " pages of the old version are still cached";
  EXPECT_GE(StatsCounter(Stats(*mount), "page_cache_invalidations"),
            StatsCounter(before, "page_cache_invalidations") + 1);
  ::munmap(map, first.size());
  ::close(fd);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// Written, overwritten in place, truncated and rewritten through the mount: each read after it
// is right, and the pages written are kept (no read of what this mount just uploaded).
TEST_P(PageCacheTest, LocalWritesAndTruncatesReadBackRight) {
  std::unique_ptr<ObjfsMount> mount = remote().Mount();
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/f";
  std::string model = PseudoRandomBytes(1 << 20, 6);  // whole pages: every one written is whole
  WriteFile(path, model);
  ExpectCatFromKeptPages(*mount, path, model);

  // In place, in the middle, through a second open.
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const std::string patch = PseudoRandomBytes(5000, 7);
  ASSERT_EQ(::pwrite(fd, patch.data(), patch.size(), 300000), static_cast<ssize_t>(patch.size()));
  ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  model.replace(300000, patch.size(), patch);
  EXPECT_EQ(Digest(Cat(path)), Digest(model));

  // Shorter, then longer (zeros), with truncate(1).
  ASSERT_EQ(RunCommand({"truncate", "-s", "100000", path}).exit_code, 0);
  model.resize(100000);
  EXPECT_EQ(Digest(Cat(path)), Digest(model));
  ASSERT_EQ(RunCommand({"truncate", "-s", "200000", path}).exit_code, 0);
  model.resize(200000, '\0');
  EXPECT_EQ(Digest(Cat(path)), Digest(model));

  // O_TRUNC and new content of the same size.
  model = PseudoRandomBytes(model.size(), 8);
  WriteFile(path, model);
  EXPECT_EQ(Digest(Cat(path)), Digest(model));

  Result<std::string> stored = remote().Read("f");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(Digest(*stored), Digest(model));
  // A fresh mount (no pages at all) reads the same.
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(Digest(Cat(path)), Digest(model));
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// cp within the mount (copy_file_range: a server-side copy) onto a file whose pages are cached,
// and mv over one: the destination reads as the source.
TEST_P(PageCacheTest, CopyAndRenameOntoACachedFileReadAsTheSource) {
  const std::string a = PseudoRandomBytes(300000, 9);
  const std::string b = PseudoRandomBytes(300000, 10);
  const std::string c = PseudoRandomBytes(300000, 11);
  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("a", a));
  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("b", b));
  ASSERT_NO_FATAL_FAILURE(ReplaceOnServer("c", c));
  std::unique_ptr<ObjfsMount> mount = remote().Mount();
  ASSERT_TRUE(mount);
  const std::string root = mount->path();
  for (const char* name : {"a", "b", "c"}) Cat(root + "/" + name);  // all cached

  CommandResult cp = RunCommand({"cp", root + "/a", root + "/b"});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  EXPECT_EQ(Digest(Cat(root + "/b")), Digest(a));

  // Held open with its pages cached while it is replaced: the name reads the new file, and the
  // descriptor still reads the file it opened, as POSIX has it. Its object is gone from the
  // server, so only the kept pages can serve it. A locked mapping holds them against memory
  // reclaim; objfs's own invalidation would still drop it.
  int fd = ::open((root + "/c").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  void* map = ::mmap(nullptr, c.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  (void)::mlock(map, c.size());
  CommandResult mv = RunCommand({"mv", root + "/b", root + "/c"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  EXPECT_EQ(Digest(Cat(root + "/c")), Digest(a));
  // Read page by page: a page that proactive reclaim took anyway (ExpectAReadFromKeptPages)
  // cannot be fetched again and fails with ESTALE, and only that page. Every page read is the
  // held file's, never the new one's, and most are there: pages dropped at the mv would leave
  // none. (Under AddressSanitizer with another test running, reclaim once took 33 of 74.)
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t pages = 0;
  size_t served = 0;
  for (size_t at = 0; at < c.size(); at += page, ++pages) {
    std::string held(std::min(page, c.size() - at), '\0');
    const ssize_t n = ::pread(fd, held.data(), held.size(), static_cast<off_t>(at));
    if (n < 0) {
      EXPECT_EQ(errno, ESTALE) << "page " << pages << ": " << std::strerror(errno);
      continue;
    }
    held.resize(static_cast<size_t>(n));
    EXPECT_EQ(Digest(held), Digest(c.substr(at, held.size())))
        << "page " << pages << " of the replaced file's holder";
    if (held.size() == std::min(page, c.size() - at)) ++served;
  }
  EXPECT_GE(served * 2, pages) << "the replaced file's holder lost its content: " << served
                               << " of " << pages << " pages read";
  ::munmap(map, c.size());
  ::close(fd);
  Result<std::string> stored = remote().Read("c");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(Digest(*stored), Digest(a));
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

INSTANTIATE_TEST_SUITE_P(Remotes, PageCacheTest, ::testing::ValuesIn(RemoteKinds()),
                         [](const ::testing::TestParamInfo<RemoteKind>& info) {
                           return RemoteKindName(info.param);
                         });

// What reached the server, counted by a proxy in front of RGW rather than by objfs itself: a
// second cat of the same file sends no GET at all.
TEST(PageCacheS3Test, SecondCatSendsNoGetToTheServer) {
  const S3TestServer& server = SharedS3Server();
  FaultProxy proxy("127.0.0.1", server.port());
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "endpoint=" + proxy.endpoint();
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string data = PseudoRandomBytes(4 << 20, 12);
  WriteFile(mount->path() + "/f", data);
  ASSERT_TRUE(mount->Restart());  // a new mount: the kernel has no page of the file
  const std::string get = "GET /" + bucket + "/f";

  const int before_first = proxy.requests_seen(get);
  EXPECT_EQ(Digest(Cat(mount->path() + "/f")), Digest(data));
  // The kernel releases cat's descriptor after cat exits: its read-ahead may still be under
  // way, and is the first cat's.
  std::string stats;
  EXPECT_TRUE(WaitFor(30, [&] {
    stats = GetXattr(mount->path(), "user.objfs.stats");
    return StatsCounter(stats, "open_files") == 0 && StatsCounter(stats, "in_flight_requests") == 0;
  })) << stats;
  EXPECT_GT(proxy.requests_seen(get), before_first);
  ExpectAReadFromKeptPages(
      "a second cat sent GETs", [&] { EXPECT_EQ(Digest(Cat(mount->path() + "/f")), Digest(data)); },
      [&](auto& cat) -> int64_t {
        EXPECT_TRUE(WaitFor(30, [&] {
          return StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "in_flight_requests") ==
                 0;
        }));
        const int before = proxy.requests_seen(get);
        cat();
        return proxy.requests_seen(get) - before;
      });
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

}  // namespace
}  // namespace objfs::testing
