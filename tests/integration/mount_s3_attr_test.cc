// File attributes and names through a real objfs mount on RGW: listings without a HEAD per
// file, held metadata changes, long, non-ASCII and URL-special names, listings of large
// directories, user extended attributes and the owner of new files, each checked with the
// standard tools and across remounts. (chmod, chown, touch, links and rmdir on every backend:
// mount_suite_test.cc.)

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// `stat -c FORMAT PATH` without the newline.
std::string StatFormat(const std::string& format, const std::string& path) {
  CommandResult r = RunCommand({"stat", "-c", format, path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
  return r.out;
}

// How many objects under `prefix` of `bucket` RGW's listing dates on a whole second
// (".000Z", one in a thousand). ListingAttrStore::Keep does not keep what a HEAD found of such an
// object until its second is two seconds past (whole seconds cannot tell a later chmod apart), so
// a listing soon after the write may HEAD it again at the next mount.
int WholeSecondDates(const std::string& bucket, const std::string& prefix) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  argv.push_back("-f");
  argv.push_back(server.endpoint + "/" + bucket +
                 "?list-type=2&prefix=" + prefix);  // `prefix` URL-encoded
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<IsTruncated>false</IsTruncated>"), std::string::npos) << r.out;
  int n = 0;
  for (size_t at = r.out.find(".000Z</LastModified>"); at != std::string::npos;
       at = r.out.find(".000Z</LastModified>", at + 1)) {
    ++n;
  }
  return n;
}

// Expects counter `name` to have grown by between `low` and `high` from `before` to `after`.
void ExpectCounterGrowth(const std::string& before, const std::string& after,
                         const std::string& name, int64_t low, int64_t high) {
  const int64_t grew = StatsCounter(after, name) - StatsCounter(before, name);
  EXPECT_GE(grew, low) << name << "\nbefore:\n" << before << "after:\n" << after;
  EXPECT_LE(grew, high) << name << "\nbefore:\n" << before << "after:\n" << after;
}

TEST(MountS3AttrTest, ARemountListsUnchangedObjectsWithoutAHeadEach) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_EQ(::mkdir((m + "/d").c_str(), 0755), 0) << std::strerror(errno);
  constexpr int kFiles = 20;
  for (int i = 0; i < kFiles; ++i) {
    std::string file = m + "/d/f" + std::to_string(i);
    WriteFile(file, std::string(i, 'x'));
    ASSERT_EQ(::chmod(file.c_str(), i % 2 == 0 ? 0640 : 0604), 0) << std::strerror(errno);
  }
  const std::vector<std::string> ls = {"ls", "-ln", "--time-style=+%s", m + "/d"};
  // The first listing of a fresh mount HEADs each file and keeps what it found in cache_dir.
  ASSERT_TRUE(mount->Restart());
  std::string before = GetXattr(m, "user.objfs.stats");
  CommandResult first = RunCommand(ls);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::string after = GetXattr(m, "user.objfs.stats");
  EXPECT_GE(StatsCounter(after, "head_requests") - StatsCounter(before, "head_requests"), kFiles);
  EXPECT_NE(first.out.find("-rw-r----- 1"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("-rw----r-- 1"), std::string::npos) << first.out;

  // The next mount lists the same attributes without those HEADs (but of the objects dated on
  // a whole second, which may not have been kept yet).
  const int whole = WholeSecondDates(bucket, "d%2F");
  ASSERT_TRUE(mount->Restart());
  before = GetXattr(m, "user.objfs.stats");
  CommandResult second = RunCommand(ls);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  after = GetXattr(m, "user.objfs.stats");
  EXPECT_EQ(second.out, first.out);
  ExpectCounterGrowth(before, after, "attrs_kept", kFiles - whole, kFiles);
  ExpectCounterGrowth(before, after, "head_requests", 0, 2 + whole);  // the directory's lookup

  // A file changed by another client (here: the bucket written directly, through a second
  // mount with its own cache) is HEADed again and shows its new mode.
  {
    ObjfsMount::Options other;
    std::unique_ptr<ObjfsMount> writer = ObjfsMount::Start(mount->url(), other);
    ASSERT_TRUE(writer);
    ASSERT_EQ(::chmod((writer->path() + "/d/f3").c_str(), 0600), 0) << std::strerror(errno);
    EXPECT_EQ(writer->Stop(), 0);
  }
  ASSERT_TRUE(mount->Restart());
  before = GetXattr(m, "user.objfs.stats");
  CommandResult third = RunCommand(ls);
  ASSERT_EQ(third.exit_code, 0) << third.err;
  after = GetXattr(m, "user.objfs.stats");
  ExpectCounterGrowth(before, after, "attrs_kept", kFiles - 1 - whole, kFiles - 1);
  EXPECT_EQ(StatFormat("%a", m + "/d/f3"), "600");
}

// -o listing_attrs: ls -l of a fresh mount makes no HEAD per file, and shows the listing's
// sizes with the mount's default mode (the stored modes are only read by later lookups).
TEST(MountS3AttrTest, ListingAttrsListWithoutAHeadEach) {
  const std::string url = S3MountUrl(CreateTestBucket(TestName()));
  constexpr int kFiles = 20;
  {
    std::unique_ptr<ObjfsMount> writer = ObjfsMount::Start(url);
    ASSERT_TRUE(writer);
    ASSERT_EQ(::mkdir((writer->path() + "/d").c_str(), 0755), 0) << std::strerror(errno);
    for (int i = 0; i < kFiles; ++i) {
      std::string file = writer->path() + "/d/f" + std::to_string(i);
      WriteFile(file, std::string(i, 'x'));
      ASSERT_EQ(::chmod(file.c_str(), 0600), 0) << std::strerror(errno);
    }
    ASSERT_EQ(writer->Stop(), 0);
  }
  ObjfsMount::Options options;
  options.extra_options = "listing_attrs";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(url, options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  std::string before = GetXattr(m, "user.objfs.stats");
  CommandResult ls = RunCommand({"ls", "-ln", m + "/d"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::string after = GetXattr(m, "user.objfs.stats");
  EXPECT_LE(StatsCounter(after, "head_requests") - StatsCounter(before, "head_requests"), 2)
      << "only the directory's own lookup";
  EXPECT_NE(ls.out.find("-rw-r--r-- 1 0 0 19 "), std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.find("-rw------- "), std::string::npos) << ls.out;
}

// A directory with more files than readdir_heads: the listing HEADs none of them, the lookups
// of `ls -l` do, and what they find is kept as the listing's HEADs' would be, so the next mount
// lists every file without a HEAD.
TEST(MountS3AttrTest, ADirectoryPastReaddirHeadsIsKeptForTheNextMount) {
  ObjfsMount::Options options;
  options.extra_options = "readdir_heads=10";
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  ASSERT_EQ(::mkdir((m + "/d").c_str(), 0755), 0) << std::strerror(errno);
  constexpr int kFiles = 50;
  for (int i = 0; i < kFiles; ++i) {
    std::string file = m + "/d/f" + std::to_string(i);
    WriteFile(file, std::string(i, 'x'));
    ASSERT_EQ(::chmod(file.c_str(), i % 2 == 0 ? 0640 : 0604), 0) << std::strerror(errno);
  }
  const std::vector<std::string> ls = {"ls", "-ln", "--time-style=+%s", m + "/d"};
  ASSERT_TRUE(mount->Restart());
  std::string before = GetXattr(m, "user.objfs.stats");
  CommandResult first = RunCommand(ls);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::string after = GetXattr(m, "user.objfs.stats");
  EXPECT_GE(StatsCounter(after, "head_requests") - StatsCounter(before, "head_requests"), kFiles);
  EXPECT_NE(first.out.find("-rw-r----- 1"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("-rw----r-- 1"), std::string::npos) << first.out;

  const int whole = WholeSecondDates(bucket, "d%2F");
  ASSERT_TRUE(mount->Restart());
  before = GetXattr(m, "user.objfs.stats");
  CommandResult second = RunCommand(ls);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  after = GetXattr(m, "user.objfs.stats");
  EXPECT_EQ(second.out, first.out);
  ExpectCounterGrowth(before, after, "attrs_kept", kFiles - whole, kFiles);
  ExpectCounterGrowth(before, after, "head_requests", 0, 2 + whole);  // the directory's lookup
}

// Every entry name of directory `dir` read with getdents64 into a buffer of `buffer` bytes, so
// that the kernel keeps only what fits of each FUSE reply and asks again from there.
std::vector<std::string> GetdentsNames(const std::string& dir, size_t buffer) {
  std::vector<std::string> names;
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  if (fd < 0) return names;
  std::vector<char> buf(buffer);
  for (;;) {
    long n = ::syscall(SYS_getdents64, fd, buf.data(), buf.size());
    EXPECT_GE(n, 0) << std::strerror(errno);
    if (n <= 0) break;
    for (long pos = 0; pos < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[].
      uint16_t reclen = 0;
      std::memcpy(&reclen, buf.data() + pos + 16, sizeof(reclen));
      names.emplace_back(buf.data() + pos + 19);
      pos += reclen;
    }
  }
  ::close(fd);
  return names;
}

// Counts of each name in `names`; and the names not seen exactly once.
std::string NotOnce(const std::vector<std::string>& names) {
  std::map<std::string, int> count;
  for (const std::string& n : names) ++count[n];
  std::string out;
  for (const auto& [n, c] : count) {
    if (c != 1) out += n + " x" + std::to_string(c) + "\n";
  }
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A directory of more than two ListObjectsV2 pages (RGW's 1,000 keys) is served a page at a
// time: `ls`, `find`, a reader whose buffer holds a few entries (the kernel then re-reads from
// the middle of a reply), seekdir back to an earlier page and rewinddir each see every name once.
TEST(MountS3AttrTest, AListingOfManyPagesGivesEveryNameOnce) {
  const std::string bucket = CreateTestBucket(TestName());
  constexpr int kFiles = 2500;
  {
    // The objects straight into the bucket, by one curl over parallel connections.
    const S3TestServer& server = SharedS3Server();
    std::vector<std::string> argv = SignedCurlArgs(server, "x");
    for (std::string a : {"-Z", "--parallel-max", "16", "-X", "PUT", "--data-binary", "x", "-o",
                          "/dev/null", "-w", "%{http_code}\n"}) {
      argv.push_back(a);
    }
    argv.push_back(server.endpoint + "/" + bucket + "/big/f[1000-" +
                   std::to_string(1000 + kFiles - 1) + "]");
    CommandResult put = RunCommand(argv);
    ASSERT_EQ(put.exit_code, 0) << put.err;
    std::vector<std::string> codes = Lines(put.out);
    ASSERT_EQ(codes.size(), static_cast<size_t>(kFiles));
    for (const std::string& code : codes) ASSERT_EQ(code, "200");
  }
  ObjfsMount::Options options;
  options.extra_options = "readdir_heads=0";  // names only: no HEAD per file
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string dir = mount->path() + "/big";
  std::vector<std::string> want;
  for (int i = 1000; i < 1000 + kFiles; ++i)
    want.push_back(std::string("f").append(std::to_string(i)));

  std::string before = GetXattr(mount->path(), "user.objfs.stats");
  CommandResult ls = RunCommand({"ls", "-1", dir});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(Lines(ls.out), want);
  const int64_t lists = StatsCounter(GetXattr(mount->path(), "user.objfs.stats"), "list_requests") -
                        StatsCounter(before, "list_requests");
  EXPECT_GE(lists, 3) << "three pages";
  EXPECT_LE(lists, 3 + 2) << "three pages, and the lookup of big";

  CommandResult find = RunCommand({"find", dir, "-mindepth", "1", "-printf", "%f\n"});
  ASSERT_EQ(find.exit_code, 0) << find.err;
  std::vector<std::string> found = Lines(find.out);
  EXPECT_EQ(found.size(), static_cast<size_t>(kFiles));
  EXPECT_EQ(NotOnce(found), "");

  std::vector<std::string> small = GetdentsNames(dir, 96);
  EXPECT_EQ(small.size(), static_cast<size_t>(kFiles) + 2);
  EXPECT_EQ(NotOnce(small), "");

  // seekdir back into the first page once the last was read, then rewinddir.
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << std::strerror(errno);
  std::vector<std::string> all;
  long mark = -1;
  size_t mark_index = 0;
  while (dirent* e = ::readdir(d)) {
    all.emplace_back(e->d_name);
    if (all.size() == 500) {
      mark = ::telldir(d);
      mark_index = all.size();
    }
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(kFiles) + 2);
  ASSERT_GE(mark, 0);
  ::seekdir(d, mark);
  std::vector<std::string> again;
  while (dirent* e = ::readdir(d)) again.emplace_back(e->d_name);
  EXPECT_EQ(again,
            std::vector<std::string>(all.begin() + static_cast<long>(mark_index), all.end()));
  ::rewinddir(d);
  std::vector<std::string> rewound;
  while (dirent* e = ::readdir(d)) rewound.emplace_back(e->d_name);
  EXPECT_EQ(rewound, all);
  ::closedir(d);
}

// A chmod or touch of a closed file waits up to metadata_delay (long here) for what follows
// it: the mount shows it at once, fsync applies it, and after a crash the next mount over the
// same cache directory applies it from its record.
TEST(MountS3AttrTest, HeldMetadataChangesAreShownSyncedAndSurviveACrash) {
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options held;
  held.extra_options = "metadata_delay=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), held);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  WriteFile(m + "/kept", "kept");
  WriteFile(m + "/synced", "synced");
  std::string before = GetXattr(m, "user.objfs.stats");
  for (const std::string& path : {m + "/kept", m + "/synced"}) {
    ASSERT_EQ(::chmod(path.c_str(), 0600), 0) << std::strerror(errno);
    CommandResult touch = RunCommand({"touch", "-d", "2001-02-03 04:05:06", path});
    ASSERT_EQ(touch.exit_code, 0) << touch.err;
  }
  std::string after = GetXattr(m, "user.objfs.stats");
  ExpectCounterDelta(before, after, "copy_requests", 0);
  ExpectCounterDelta(before, after, "set_attributes_requests", 0);
  ExpectCounterDelta(before, after, "metadata_deferred", 4);
  CommandResult expected_time = RunCommand({"date", "-d", "2001-02-03 04:05:06", "+%s"});
  ASSERT_EQ(expected_time.exit_code, 0);
  const std::string changed = "600 " + expected_time.out.substr(0, expected_time.out.size() - 1);
  EXPECT_EQ(StatFormat("%a %Y", m + "/kept"), changed);

  // `sync FILE` is an fsync: that file's change reaches the bucket now, the other's not yet.
  CommandResult sync = RunCommand({"sync", m + "/synced"});
  ASSERT_EQ(sync.exit_code, 0) << sync.err;
  ExpectCounterDelta(after, GetXattr(m, "user.objfs.stats"), "set_attributes_requests", 1);
  {
    std::unique_ptr<ObjfsMount> other = ObjfsMount::Start(S3MountUrl(bucket));
    ASSERT_TRUE(other);
    EXPECT_EQ(StatFormat("%a %Y", other->path() + "/synced"), changed);
    EXPECT_EQ(StatFormat("%a", other->path() + "/kept"), "644");
  }

  EXPECT_EQ(mount->KillAndWait(SIGKILL), 128 + SIGKILL);
  ASSERT_TRUE(mount->Restart());
  std::unique_ptr<ObjfsMount> other = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(other);
  EXPECT_EQ(StatFormat("%a %Y", other->path() + "/kept"), changed);
  EXPECT_EQ(ReadFile(other->path() + "/kept"), "kept");

  // cp onto a file whose chmod still waits: the server-side copy carries the mode, and the
  // file shows the new content's size at once and after a remount.
  WriteFile(m + "/longer", "a longer content");
  ASSERT_EQ(::chmod((m + "/kept").c_str(), 0640), 0) << std::strerror(errno);
  CommandResult cp = RunCommand({"cp", m + "/longer", m + "/kept"});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  EXPECT_EQ(StatFormat("%a %s", m + "/kept"), "640 16");
  EXPECT_EQ(ReadFile(m + "/kept"), "a longer content");
  ASSERT_TRUE(other->Restart());
  EXPECT_EQ(StatFormat("%a %s", other->path() + "/kept"), "640 16");
}

TEST(MountS3AttrTest, LongAndUnicodeNames) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  std::string ascii(255, 'a');
  // "é" is 2 bytes, "€" 3 and "🙂" 4: 60 * 4 + 5 * 3 = 255 bytes.
  std::string utf8;
  for (int i = 0; i < 60; ++i) utf8 += "\xF0\x9F\x99\x82";
  for (int i = 0; i < 5; ++i) utf8 += "\xE2\x82\xAC";
  ASSERT_EQ(utf8.size(), 255u);
  std::string spaced = "name with  spaces, caf\xC3\xA9 & \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E";
  for (const std::string& name : {ascii, utf8, spaced}) WriteFile(m + "/" + name, name);

  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    CommandResult ls = RunCommand({"ls", "-1A", m});
    ASSERT_EQ(ls.exit_code, 0) << ls.err;
    for (const std::string& name : {ascii, utf8, spaced}) {
      EXPECT_NE(ls.out.find(name + "\n"), std::string::npos) << name << " not in:\n" << ls.out;
      EXPECT_EQ(ReadFile(m + "/" + name), name);
    }
    CommandResult count = RunCommand({"sh", "-c", "ls -1A \"$0\" | wc -l", m});
    EXPECT_EQ(count.out, "3\n");
  };
  check("same mount");

  std::string too_long(256, 'b');
  CommandResult touch = RunCommand({"touch", m + "/" + too_long});
  EXPECT_NE(touch.exit_code, 0);
  EXPECT_NE(touch.err.find("File name too long"), std::string::npos) << touch.err;
  std::string too_long_utf8 = utf8 + "x";
  CommandResult touch_utf8 = RunCommand({"touch", m + "/" + too_long_utf8});
  EXPECT_NE(touch_utf8.exit_code, 0);
  EXPECT_NE(touch_utf8.err.find("File name too long"), std::string::npos) << touch_utf8.err;
  EXPECT_NE(::mkdir((m + "/" + too_long).c_str(), 0755), 0);
  EXPECT_EQ(errno, ENAMETOOLONG);
  // Keys are UTF-8: a name that is not fails at once (it used to be made here, in a directory
  // already listed, and its upload then failed for ever). ls -1A above counts what exists.
  const std::string not_utf8 = "bad\xFF\xFEname";
  CommandResult touch_bad = RunCommand({"touch", m + "/" + not_utf8});
  EXPECT_NE(touch_bad.exit_code, 0);
  EXPECT_NE(touch_bad.err.find("Invalid argument"), std::string::npos) << touch_bad.err;
  EXPECT_NE(::rename((m + "/" + ascii).c_str(), (m + "/" + not_utf8).c_str()), 0);
  EXPECT_EQ(errno, EINVAL) << std::strerror(errno);

  ASSERT_TRUE(mount->Restart());
  check("after a remount");
}

// Characters that URLs, SigV4 canonical requests and copy sources must encode.
TEST(MountS3AttrTest, NamesWithUrlSpecialCharacters) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  const std::vector<std::string> names = {"plus+sign",   "percent%20x", "question?mark",
                                          "hash#tag",    "amp&eq=1;x",  "tilde~star*",
                                          "quote'\"",    "back\\slash", "caf\xC3\xA9 \xE2\x82\xAC",
                                          "[br]{ace}@$!"};
  ASSERT_EQ(::mkdir((m + "/dir + %2F ?").c_str(), 0755), 0) << std::strerror(errno);
  for (const std::string& name : names) WriteFile(m + "/dir + %2F ?/" + name, name);

  // Renaming the directory copies every object; cp within copies on the server.
  CommandResult mv = RunCommand({"mv", m + "/dir + %2F ?", m + "/moved #1"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  for (const std::string& name : names) {
    CommandResult cp = RunCommand({"cp", m + "/moved #1/" + name, m + "/moved #1/" + name + "+c"});
    EXPECT_EQ(cp.exit_code, 0) << name << ": " << cp.err;
  }

  ASSERT_TRUE(mount->Restart());
  CommandResult ls = RunCommand({"ls", "-1A", m + "/moved #1"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  for (const std::string& name : names) {
    EXPECT_NE(ls.out.find(name + "\n"), std::string::npos) << name << " not in:\n" << ls.out;
    EXPECT_NE(ls.out.find(name + "+c\n"), std::string::npos) << name << "+c not in:\n" << ls.out;
    EXPECT_EQ(ReadFile(m + "/moved #1/" + name), name);
    EXPECT_EQ(ReadFile(m + "/moved #1/" + name + "+c"), name);
  }
  CommandResult count = RunCommand({"sh", "-c", "ls -1A \"$0\" | wc -l", m + "/moved #1"});
  EXPECT_EQ(count.out, std::to_string(2 * names.size()) + "\n");
  CommandResult root = RunCommand({"ls", "-1A", m});
  EXPECT_EQ(root.out, "moved #1\n");
}

TEST(MountS3AttrTest, UserExtendedAttributes) {
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())));
  ASSERT_TRUE(mount);
  std::string file = mount->path() + "/colored";
  WriteFile(file, "has attributes");
  std::string etag = GetXattr(file, "user.etag");
  ASSERT_EQ(etag.size(), 32u);

  CommandResult set = RunCommand({"setfattr", "-n", "user.color", "-v", "blue", file});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(GetXattr(file, "user.color"), "blue");

  CommandResult set_etag = RunCommand({"setfattr", "-n", "user.etag", "-v", "forged", file});
  EXPECT_NE(set_etag.exit_code, 0);
  EXPECT_NE(set_etag.err.find("Operation not permitted"), std::string::npos) << set_etag.err;
  EXPECT_NE(::setxattr(file.c_str(), "user.etag", "x", 1, 0), 0);
  EXPECT_EQ(errno, EPERM);
  // Set to what it is, or removed (as rsync -aX and cp --preserve=xattr do): nothing changes,
  // and nothing fails.
  EXPECT_EQ(::setxattr(file.c_str(), "user.etag", etag.data(), etag.size(), 0), 0)
      << std::strerror(errno);
  EXPECT_EQ(::removexattr(file.c_str(), "user.etag"), 0) << std::strerror(errno);
  EXPECT_EQ(GetXattr(file, "user.etag"), etag);
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string plain = local.path() + "/plain";
  WriteFile(plain, "no attributes");
  CommandResult rsync = RunCommand({"rsync", "-aX", plain, mount->path() + "/synced"});
  EXPECT_EQ(rsync.exit_code, 0) << rsync.err;
  // Again, onto the file it made there (which lists user.etag, the source does not).
  CommandResult again =
      RunCommand({"rsync", "-aX", "--inplace", "-I", plain, mount->path() + "/synced"});
  EXPECT_EQ(again.exit_code, 0) << again.err;

  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(GetXattr(file, "user.color"), "blue");
  EXPECT_EQ(GetXattr(file, "user.etag"), etag);
  EXPECT_EQ(ReadFile(file), "has attributes");
  CommandResult dump = RunCommand({"getfattr", "-d", file});
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  EXPECT_NE(dump.out.find("user.color=\"blue\"\n"), std::string::npos) << dump.out;
  EXPECT_NE(dump.out.find("user.etag=\"" + etag + "\"\n"), std::string::npos) << dump.out;

  // Other namespaces are not kept: unsupported, as ls -l and cp -a expect.
  char buf[64];
  EXPECT_LT(::lgetxattr(file.c_str(), "security.selinux", buf, sizeof(buf)), 0);
  EXPECT_EQ(errno, EOPNOTSUPP);

  CommandResult remove = RunCommand({"setfattr", "-x", "user.color", file});
  ASSERT_EQ(remove.exit_code, 0) << remove.err;
  ASSERT_TRUE(mount->Restart());
  CommandResult dump_after = RunCommand({"getfattr", "-d", file});
  EXPECT_EQ(dump_after.out.find("user.color"), std::string::npos) << dump_after.out;
  EXPECT_NE(dump_after.out.find("user.etag="), std::string::npos) << dump_after.out;
}

// With allow_other, what another user creates is theirs, and stays theirs after a remount.
TEST(MountS3AttrTest, NewFilesBelongToTheUserWhoCreatesThem) {
  ObjfsMount::Options options;
  options.extra_options = "allow_other";
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(S3MountUrl(CreateTestBucket(TestName())), options);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  // The mount point's parent is private to root: let the other user through it. allow_other
  // implies default_permissions: the user writes in a directory open to all.
  ASSERT_EQ(::chmod(fs::path(m).parent_path().c_str(), 0711), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/shared").c_str(), 0777), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod((m + "/shared").c_str(), 0777), 0) << std::strerror(errno);
  const std::string shared = m + "/shared";
  CommandResult as_user = RunCommand(
      {"setpriv", "--reuid=4321", "--regid=8765", "--clear-groups", "sh", "-c",
       "echo hello > \"$0/by-user\" && mkdir \"$0/dir-by-user\" && ln -s by-user \"$0/link\"",
       shared});
  ASSERT_EQ(as_user.exit_code, 0) << as_user.err;
  auto expect_owned = [&](const std::string& when) {
    SCOPED_TRACE(when);
    for (const char* name : {"/shared/by-user", "/shared/dir-by-user", "/shared/link"}) {
      struct stat st {};
      ASSERT_EQ(::lstat((m + name).c_str(), &st), 0) << name << ": " << std::strerror(errno);
      EXPECT_EQ(st.st_uid, 4321u) << name;
      EXPECT_EQ(st.st_gid, 8765u) << name;
    }
  };
  expect_owned("same mount");
  ASSERT_TRUE(mount->Restart());
  expect_owned("after a remount");
}

}  // namespace
}  // namespace objfs::testing
