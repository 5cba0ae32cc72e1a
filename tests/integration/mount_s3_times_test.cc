// Times through a real objfs mount on RGW: a directory's mtime and ctime move when an entry is
// created or removed in it (kept by the mount, no request per create); an atime is stored only
// when set explicitly, never by a read; the ctime moves with chmod, chown, utimensat and truncate
// (and with a rename that carries a held change). Checked with stat and the standard tools, in the
// object's headers on the server, and across remounts.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
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

constexpr int64_t kNs = 1'000'000'000;

struct Times {
  int64_t atime = 0;
  int64_t mtime = 0;
  int64_t ctime = 0;
};

int64_t Ns(const struct timespec& ts) { return ts.tv_sec * kNs + ts.tv_nsec; }

Times TimesOf(const struct stat& st) { return {Ns(st.st_atim), Ns(st.st_mtim), Ns(st.st_ctim)}; }

// lstat of `path`, recording a failure when it fails.
Times TimesOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return TimesOf(st);
}

// The user metadata of `key` in `bucket` as the server has it (a HEAD with curl): the
// x-amz-meta-* headers without their prefix.
std::map<std::string, std::string> S3UserMetadata(const std::string& bucket,
                                                  const std::string& key) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  argv.push_back("-f");
  argv.push_back("-I");
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << "HEAD " << key << ": " << r.err;
  std::map<std::string, std::string> out;
  std::istringstream lines(r.out);
  const std::string prefix = "x-amz-meta-";
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    size_t start = colon + 1;
    while (start < line.size() && line[start] == ' ') ++start;
    out[name.substr(prefix.size())] = line.substr(start);
  }
  return out;
}

// objfs's (and s3fs's) form of a time in metadata: seconds, and ".<9 digits>" when the
// nanoseconds are not zero.
std::string MetadataTime(int64_t ns) {
  std::string out = std::to_string(ns / kNs);
  if (ns % kNs == 0) return out;
  std::string frac = std::to_string(ns % kNs);
  return out + "." + std::string(9 - frac.size(), '0') + frac;
}

void RunOk(const std::vector<std::string>& argv) {
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << argv[0] << ": " << r.err;
}

TEST(MountS3TimesTest, CreatingOrRemovingAnEntryMovesItsDirectorysTimes) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  const std::string d = m + "/d";
  const std::string e = m + "/e";
  ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir(e.c_str(), 0755), 0) << std::strerror(errno);
  const Times made = TimesOf(d);
  const std::string stats_before = GetXattr(m, "user.objfs.stats");

  struct Step {
    std::string name;
    std::function<int()> op;
    std::vector<std::string> dirs;  // whose times it moves
  };
  const std::vector<Step> steps = {
      {"creat", [&] { return ::close(::open((d + "/f").c_str(), O_CREAT | O_WRONLY, 0644)); }, {d}},
      {"mkdir", [&] { return ::mkdir((d + "/s").c_str(), 0755); }, {d}},
      {"symlink", [&] { return ::symlink("f", (d + "/l").c_str()); }, {d}},
      {"unlink", [&] { return ::unlink((d + "/l").c_str()); }, {d}},
      {"rmdir", [&] { return ::rmdir((d + "/s").c_str()); }, {d}},
      {"rename out", [&] { return ::rename((d + "/f").c_str(), (e + "/f").c_str()); }, {d, e}},
      {"rename in", [&] { return ::rename((e + "/f").c_str(), (d + "/g").c_str()); }, {d, e}},
      {"creat in the root", [&] { return ::close(::creat((m + "/r").c_str(), 0644)); }, {m}},
  };
  for (const Step& step : steps) {
    std::map<std::string, Times> before;
    for (const std::string& dir : step.dirs) before[dir] = TimesOf(dir);
    ASSERT_EQ(step.op(), 0) << step.name << ": " << std::strerror(errno);
    for (const std::string& dir : step.dirs) {
      const Times after = TimesOf(dir);
      EXPECT_GT(after.mtime, before[dir].mtime) << step.name << " in " << dir;
      EXPECT_GT(after.ctime, before[dir].ctime) << step.name << " in " << dir;
      EXPECT_EQ(after.ctime, after.mtime) << step.name << " in " << dir;
    }
  }
  // The same through the tools, in whole seconds as the issue's `stat -c '%Y %Z'` shows them.
  const Times shown = TimesOf(d);
  EXPECT_GT(shown.mtime, made.mtime);

  // Kept by the mount: not one request to the directory's marker for all of that.
  const std::string stats_after = GetXattr(m, "user.objfs.stats");
  EXPECT_EQ(StatsCounter(stats_after, "set_attributes_requests"),
            StatsCounter(stats_before, "set_attributes_requests"))
      << stats_before << stats_after;
  EXPECT_EQ(S3UserMetadata(bucket, "d/")["mtime"], MetadataTime(made.mtime));

  // A chmod of the directory writes them into its marker, so they outlive the mount.
  ASSERT_EQ(::chmod(d.c_str(), 0700), 0) << std::strerror(errno);
  const Times chmodded = TimesOf(d);
  EXPECT_EQ(chmodded.mtime, shown.mtime);
  EXPECT_GT(chmodded.ctime, shown.ctime);
  EXPECT_EQ(S3UserMetadata(bucket, "d/")["mtime"], MetadataTime(shown.mtime));
  const Times e_before = TimesOf(e);
  ASSERT_TRUE(mount->Restart());
  const Times remounted = TimesOf(d);
  EXPECT_EQ(remounted.mtime, chmodded.mtime);
  EXPECT_EQ(remounted.ctime, chmodded.ctime);
  // A directory whose times were kept only in memory shows its marker's again.
  EXPECT_LT(TimesOf(e).mtime, e_before.mtime);
}

TEST(MountS3TimesTest, AnAtimeIsStoredWhenSetAndNeverByReads) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string f = mount->path() + "/f";
  WriteFile(f, "hello");
  const Times written = TimesOf(f);
  EXPECT_EQ(written.atime, written.mtime);  // never set: the mtime
  EXPECT_EQ(ReadFile(f), "hello");
  EXPECT_EQ(TimesOf(f).atime, written.atime);  // a read stores nothing

  // touch -a sets the atime alone.
  RunOk({"touch", "-a", "-d", "@1500000000", f});
  Times touched = TimesOf(f);
  EXPECT_EQ(touched.atime, 1500000000 * kNs);
  EXPECT_EQ(touched.mtime, written.mtime);
  EXPECT_GT(touched.ctime, written.ctime);

  // utimensat with nanoseconds, the mtime left as it is.
  struct timespec times[2] = {{1000000000, 5}, {0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), times, 0), 0) << std::strerror(errno);
  const Times set = TimesOf(f);
  EXPECT_EQ(set.atime, 1000000000 * kNs + 5);
  EXPECT_EQ(set.mtime, written.mtime);
  EXPECT_GE(set.ctime, touched.ctime);
  EXPECT_EQ(ReadFile(f), "hello");
  EXPECT_EQ(TimesOf(f).atime, set.atime);

  // On the server as s3fs writes it, once the held change is applied (fsync applies it).
  {
    int fd = ::open(f.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(::fsync(fd), 0) << std::strerror(errno);
    ::close(fd);
  }
  std::map<std::string, std::string> stored = S3UserMetadata(bucket, "f");
  EXPECT_EQ(stored["atime"], "1000000000.000000005");
  EXPECT_EQ(stored["ctime"], MetadataTime(set.ctime));
  EXPECT_EQ(stored["mtime"], MetadataTime(written.mtime));

  ASSERT_TRUE(mount->Restart());
  const Times remounted = TimesOf(f);
  EXPECT_EQ(remounted.atime, set.atime);
  EXPECT_EQ(remounted.mtime, set.mtime);
  EXPECT_EQ(remounted.ctime, set.ctime);
  EXPECT_EQ(ReadFile(f), "hello");
  EXPECT_EQ(TimesOf(f).atime, set.atime);
}

TEST(MountS3TimesTest, TheCtimeMovesWithChmodChownRenameAndTruncate) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  WriteFile(m + "/f", "0123456789");
  const Times written = TimesOf(m + "/f");
  EXPECT_EQ(written.ctime, written.mtime);

  ASSERT_EQ(::chmod((m + "/f").c_str(), 0600), 0) << std::strerror(errno);
  const Times chmodded = TimesOf(m + "/f");
  EXPECT_GT(chmodded.ctime, written.ctime);
  EXPECT_EQ(chmodded.mtime, written.mtime);

  ASSERT_EQ(::chown((m + "/f").c_str(), 1234, 1234), 0) << std::strerror(errno);
  const Times chowned = TimesOf(m + "/f");
  EXPECT_GT(chowned.ctime, chmodded.ctime);
  EXPECT_EQ(chowned.mtime, written.mtime);

  // A chmod to the mode the file has changes nothing, and moves nothing.
  ASSERT_EQ(::chmod((m + "/f").c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_EQ(TimesOf(m + "/f").ctime, chowned.ctime);

  // A rename copies the object with its metadata, ctime included (POSIX leaves moving it to
  // the file system; a held chmod or chown riding along moves it). Nothing else is lost: the
  // Content-Type stays the source's.
  ASSERT_EQ(::rename((m + "/f").c_str(), (m + "/g").c_str()), 0) << std::strerror(errno);
  const Times renamed = TimesOf(m + "/g");
  EXPECT_GE(renamed.ctime, chowned.ctime);
  EXPECT_EQ(renamed.mtime, written.mtime);
  EXPECT_EQ(S3UserMetadata(bucket, "g")["ctime"], MetadataTime(renamed.ctime));

  RunOk({"truncate", "-s", "4", m + "/g"});
  const Times truncated = TimesOf(m + "/g");
  EXPECT_GT(truncated.mtime, renamed.mtime);
  EXPECT_GE(truncated.ctime, truncated.mtime);

  // ftruncate on an open descriptor: fstat and stat show the new ctime with the new mtime at
  // once, and so does the next stat after the close.
  int fd = ::open((m + "/g").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, 2), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0) << std::strerror(errno);
  const Times ftruncated = TimesOf(st);
  EXPECT_GT(ftruncated.mtime, truncated.mtime);
  EXPECT_GE(ftruncated.ctime, ftruncated.mtime);
  const Times by_path = TimesOf(m + "/g");
  EXPECT_EQ(by_path.mtime, ftruncated.mtime);
  EXPECT_GE(by_path.ctime, ftruncated.mtime);
  ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
  const Times closed = TimesOf(m + "/g");
  EXPECT_GE(closed.ctime, closed.mtime);

  // A write moves both: the ctime is the new mtime.
  {
    int wfd = ::open((m + "/g").c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(wfd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(wfd, "xy", 2), 2) << std::strerror(errno);
    ASSERT_EQ(::close(wfd), 0) << std::strerror(errno);
  }
  const Times appended = TimesOf(m + "/g");
  EXPECT_GT(appended.mtime, closed.mtime);
  EXPECT_EQ(appended.ctime, appended.mtime);

  ASSERT_EQ(::chmod((m + "/g").c_str(), 0640), 0) << std::strerror(errno);
  const Times last = TimesOf(m + "/g");
  EXPECT_GT(last.ctime, appended.ctime);
  ASSERT_TRUE(mount->Restart());  // the unmount applies the held chmod
  const Times remounted = TimesOf(m + "/g");
  EXPECT_EQ(remounted.mtime, last.mtime);
  EXPECT_EQ(remounted.ctime, last.ctime);
  EXPECT_EQ(S3UserMetadata(bucket, "g")["ctime"], MetadataTime(last.ctime));
}

TEST(MountS3TimesTest, TimesThatS3fsStoredAreShown) {
  const std::string bucket = CreateTestBucket(TestName());
  {
    // An object as s3fs writes one: its times in whole seconds.
    const S3TestServer& server = SharedS3Server();
    std::vector<std::string> argv = SignedCurlArgs(server, "data");
    for (std::string a : {"-f", "-X", "PUT", "--data-binary", "data", "-H",
                          "x-amz-meta-mode: 33188", "-H", "x-amz-meta-mtime: 1600000000", "-H",
                          "x-amz-meta-atime: 1600000100", "-H", "x-amz-meta-ctime: 1600000200"}) {
      argv.push_back(a);
    }
    argv.push_back(server.endpoint + "/" + bucket + "/s3fs");
    CommandResult put = RunCommand(argv);
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const Times shown = TimesOf(mount->path() + "/s3fs");
  EXPECT_EQ(shown.mtime, 1600000000 * kNs);
  EXPECT_EQ(shown.atime, 1600000100 * kNs);
  EXPECT_EQ(shown.ctime, 1600000200 * kNs);
}

}  // namespace
}  // namespace objfs::testing
