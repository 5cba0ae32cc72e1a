// What POSIX promises that an S3 bucket has no notion of, through a real objfs mount on RGW
// shared as a conformance suite uses it (allow_other, so default_permissions): FIFOs, sockets
// and devices kept as s3fs keeps them, the errors POSIX names for names the store cannot take
// and sizes it cannot hold, fstat of a removed file, the link count of directories, and hard
// links. Operations run as root and as a second user (setpriv), and the server is checked with
// signed requests of its own.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kOtherUid = 4321;
constexpr uint32_t kOtherGid = 8765;

// The response headers of a HEAD of `key` in `bucket`, names in lower case; empty (after a
// test failure unless `may_be_absent`) when the object is not there.
std::map<std::string, std::string> HeadObject(const std::string& bucket, const std::string& key,
                                              bool may_be_absent = false) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  for (const char* a : {"-I", "-w", "%{http_code}"}) argv.push_back(a);
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> headers;
  if (!r.out.ends_with("200")) {
    if (!may_be_absent) ADD_FAILURE() << "HEAD " << key << ": " << r.out;
    return headers;
  }
  size_t at = 0;
  while (at < r.out.size()) {
    size_t end = r.out.find('\n', at);
    if (end == std::string::npos) end = r.out.size();
    std::string line = r.out.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (size_t colon = line.find(':'); colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      size_t value = line.find_first_not_of(' ', colon + 1);
      headers[name] = value == std::string::npos ? "" : line.substr(value);
    }
    at = end + 1;
  }
  return headers;
}

// Every key of `bucket`, sorted (one ListObjectsV2 page: the tests keep few).
std::vector<std::string> BucketKeys(const std::string& bucket) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  argv.push_back("-f");
  argv.push_back(server.endpoint + "/" + bucket + "?list-type=2");
  CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<IsTruncated>false</IsTruncated>"), std::string::npos) << r.out;
  std::vector<std::string> keys;
  for (size_t at = r.out.find("<Key>"); at != std::string::npos; at = r.out.find("<Key>", at)) {
    at += 5;
    keys.push_back(r.out.substr(at, r.out.find("</Key>", at) - at));
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

// Puts an empty object with `headers` ("x-amz-meta-mode: 4516") into `bucket`, as another
// client of the bucket would.
void PutEmptyObject(const std::string& bucket, const std::string& key,
                    const std::vector<std::string>& headers) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  for (const std::string& h : headers) {
    argv.push_back("-H");
    argv.push_back(h);
  }
  for (const char* a : {"-f", "-X", "PUT", "--data-binary", ""}) argv.push_back(a);
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  CommandResult r = RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
}

// Runs the Python program `code` with `args` as root (`uid` 0) or as kOtherUid/kOtherGid.
CommandResult RunPython(uint32_t uid, const std::string& code,
                        const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv;
  if (uid != 0) {
    argv = {"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(kOtherGid),
            "--clear-groups"};
  }
  // The system's interpreter: one that another user may run, whatever PATH says.
  for (const char* a : {"/usr/bin/python3", "-c"}) argv.push_back(a);
  argv.push_back(code);
  for (const std::string& a : args) argv.push_back(a);
  return RunCommand(argv);
}

// A Python program that runs one call named by argv[1] on the paths that follow and prints
// "ok" or the errno's name (ENAMETOOLONG, EPERM, ...).
constexpr char kCallProgram[] = R"(
import errno, os, socket, sys
op, paths = sys.argv[1], sys.argv[2:]
def bind(p):
    s = socket.socket(socket.AF_UNIX)
    s.bind(p)
    s.close()
calls = {
    "mkdir": lambda: os.mkdir(paths[0]),
    "create": lambda: os.close(os.open(paths[0], os.O_CREAT | os.O_WRONLY, 0o644)),
    "symlink": lambda: os.symlink("target", paths[0]),
    "mkfifo": lambda: os.mkfifo(paths[0]),
    "mknod-chr": lambda: os.mknod(paths[0], 0o644 | 0o020000, os.makedev(1, 3)),
    "bind": lambda: bind(paths[0]),
    "rename": lambda: os.rename(paths[0], paths[1]),
    "link": lambda: os.link(paths[0], paths[1]),
    "truncate": lambda: os.truncate(paths[0], int(paths[1])),
    "ftruncate": lambda: os.ftruncate(os.open(paths[0], os.O_WRONLY), int(paths[1])),
    "pwrite": lambda: os.pwrite(os.open(paths[0], os.O_WRONLY), b"x", int(paths[1])),
}
try:
    calls[op]()
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
)";

// What `op` on `paths` gives, run as `uid`: "ok" or the errno's name.
std::string Call(uint32_t uid, const std::string& op, const std::vector<std::string>& paths) {
  std::vector<std::string> args = {op};
  args.insert(args.end(), paths.begin(), paths.end());
  CommandResult r = RunPython(uid, kCallProgram, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
  return r.out;
}

// An allow_other mount of a fresh bucket with a directory "shared" (mode 1777) that the second
// user may write in, its parent directories open to that user.
struct SharedMount {
  std::string bucket;
  std::unique_ptr<ObjfsMount> mount;
  std::string shared;
};

SharedMount StartSharedMount() {
  SharedMount out;
  out.bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "allow_other";
  out.mount = ObjfsMount::Start(S3MountUrl(out.bucket), options);
  if (!out.mount) return out;
  const std::string m = out.mount->path();
  EXPECT_EQ(::chmod(fs::path(m).parent_path().c_str(), 0711), 0) << std::strerror(errno);
  out.shared = m + "/shared";
  EXPECT_EQ(::mkdir(out.shared.c_str(), 0777), 0) << std::strerror(errno);
  EXPECT_EQ(::chmod(out.shared.c_str(), 01777), 0) << std::strerror(errno);
  return out;
}

struct SpecialFileCase {
  const char* op;  // a call of kCallProgram
  const char* name;
  uint32_t type;
  uint32_t perms;  // what the call leaves (umask 022 for mknod and mkfifo, none for bind's)
  dev_t rdev;
};

const SpecialFileCase kSpecialFiles[] = {
    {"mkfifo", "fifo", S_IFIFO, 0644, 0},
    {"mknod-chr", "chr", S_IFCHR, 0644, makedev(1, 3)},
    {"bind", "sock", S_IFSOCK, 0755, 0},
};

// mkfifo, mknod of a device and bind() of a Unix socket make zero-byte objects whose mode has
// the type (s3fs's "x-amz-meta-mode") and, for a device, whose "x-amz-meta-rdev" has the
// number; stat shows both, before and after a remount, and the maker owns them.
TEST(MountS3PosixTest, SpecialFilesAreObjectsWithTheirTypeInTheirMode) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  ::umask(022);
  // Only root may make a device; anyone a FIFO or a socket.
  EXPECT_EQ(Call(kOtherUid, "mknod-chr", {s.shared + "/user-chr"}), "EPERM");
  ASSERT_EQ(Call(kOtherUid, "mkfifo", {s.shared + "/user-fifo"}), "ok");
  ASSERT_EQ(Call(kOtherUid, "bind", {s.shared + "/user-sock"}), "ok");
  for (const SpecialFileCase& c : kSpecialFiles) {
    ASSERT_EQ(Call(0, c.op, {s.shared + "/" + c.name}), "ok") << c.name;
  }
  struct Expected {
    std::string name;
    uint32_t mode;
    dev_t rdev;
    uint32_t uid;
  };
  std::vector<Expected> expected;
  for (const SpecialFileCase& c : kSpecialFiles) {
    expected.push_back({c.name, c.type | c.perms, c.rdev, 0});
  }
  expected.push_back({"user-fifo", S_IFIFO | 0644, 0, kOtherUid});
  expected.push_back({"user-sock", S_IFSOCK | 0755, 0, kOtherUid});

  auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    for (const Expected& e : expected) {
      SCOPED_TRACE(e.name);
      struct stat st {};
      ASSERT_EQ(::lstat((s.shared + "/" + e.name).c_str(), &st), 0) << std::strerror(errno);
      EXPECT_EQ(st.st_mode, e.mode);
      EXPECT_EQ(st.st_rdev, e.rdev);
      EXPECT_EQ(st.st_size, 0);
      EXPECT_EQ(st.st_uid, e.uid);
      std::map<std::string, std::string> head = HeadObject(s.bucket, "shared/" + e.name);
      EXPECT_EQ(head["content-length"], "0");
      EXPECT_EQ(head["x-amz-meta-mode"], std::to_string(e.mode));
      EXPECT_EQ(head["x-amz-meta-uid"], std::to_string(e.uid));
      if (S_ISCHR(e.mode)) {
        EXPECT_EQ(head["x-amz-meta-rdev"], std::to_string(e.rdev));
      } else {
        EXPECT_EQ(head.count("x-amz-meta-rdev"), 0u);
      }
    }
    // What a listing shows, as find(1) reads it.
    for (const auto& [type, names] : std::map<std::string, std::string>{
             {"p", "fifo\nuser-fifo\n"}, {"c", "chr\n"}, {"s", "sock\nuser-sock\n"}}) {
      CommandResult find = RunCommand({"find", s.shared, "-type", type, "-printf", "%f\n"});
      EXPECT_EQ(find.out, names) << type;
    }
  };
  check("as made");
  ASSERT_TRUE(s.mount->Restart());
  check("after a remount");
}

// A FIFO's data passes between two local processes, never through objfs or the server: the
// kernel serves the open; O_WRONLY|O_NONBLOCK without a reader gives ENXIO as anywhere.
TEST(MountS3PosixTest, AFifoPassesDataBetweenLocalProcesses) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  const std::string fifo = s.shared + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(fifo.c_str(), 0666), 0) << std::strerror(errno);
  EXPECT_EQ(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK), -1);
  EXPECT_EQ(errno, ENXIO);

  // The reader is this process; the writer another user's.
  int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0) << std::strerror(errno);
  CommandResult writer = RunPython(kOtherUid,
                                   "import os, sys\n"
                                   "fd = os.open(sys.argv[1], os.O_WRONLY)\n"
                                   "os.write(fd, b'through the pipe')\n",
                                   {fifo});
  EXPECT_EQ(writer.exit_code, 0) << writer.err;
  pollfd p{reader, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  char buf[64] = {};
  ssize_t n = ::read(reader, buf, sizeof(buf));
  ::close(reader);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "through the pipe");
  EXPECT_EQ(HeadObject(s.bucket, "shared/pipe")["content-length"], "0");
}

// Once they exist, special files are names like others: EEXIST, ENOTDIR, chmod, rename (the
// device number goes along), unlink, and the sticky directory's rule on who may remove them.
TEST(MountS3PosixTest, SpecialFilesRenameUnlinkAndCollide) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  const std::string d = s.shared;
  ASSERT_EQ(::mknod((d + "/dev").c_str(), S_IFBLK | 0600, makedev(8, 17)), 0)
      << std::strerror(errno);
  ASSERT_EQ(Call(kOtherUid, "mkfifo", {d + "/fifo"}), "ok");

  EXPECT_EQ(Call(0, "mkfifo", {d + "/fifo"}), "EEXIST");
  EXPECT_EQ(Call(0, "mkdir", {d + "/fifo"}), "EEXIST");
  EXPECT_EQ(Call(0, "create", {d + "/dev/x"}), "ENOTDIR");
  EXPECT_EQ(Call(0, "mkfifo", {d + "/fifo/x"}), "ENOTDIR");

  // chmod keeps the type, on the server too.
  ASSERT_EQ(::chmod((d + "/dev").c_str(), 0640), 0) << std::strerror(errno);
  ASSERT_TRUE(WaitFor(10, [&] {
    return HeadObject(s.bucket, "shared/dev")["x-amz-meta-mode"] == std::to_string(S_IFBLK | 0640);
  })) << HeadObject(s.bucket, "shared/dev")["x-amz-meta-mode"];

  // Sticky directory: root did not make "fifo" but may remove anything; the other user may not
  // remove root's device, and may rename and remove its own FIFO.
  EXPECT_EQ(Call(kOtherUid, "rename", {d + "/dev", d + "/stolen"}), "EPERM");
  ASSERT_EQ(Call(kOtherUid, "rename", {d + "/fifo", d + "/fifo2"}), "ok");
  ASSERT_EQ(::rename((d + "/dev").c_str(), (d + "/dev2").c_str()), 0) << std::strerror(errno);
  struct stat st {};
  ASSERT_EQ(::lstat((d + "/dev2").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_mode, S_IFBLK | 0640u);
  EXPECT_EQ(st.st_rdev, makedev(8, 17));
  std::map<std::string, std::string> head = HeadObject(s.bucket, "shared/dev2");
  EXPECT_EQ(head["x-amz-meta-mode"], std::to_string(S_IFBLK | 0640));
  EXPECT_EQ(head["x-amz-meta-rdev"], std::to_string(makedev(8, 17)));
  EXPECT_EQ(BucketKeys(s.bucket),
            (std::vector<std::string>{"shared/", "shared/dev2", "shared/fifo2"}));

  CommandResult rm = RunCommand({"setpriv", "--reuid=" + std::to_string(kOtherUid),
                                 "--regid=" + std::to_string(kOtherGid), "--clear-groups", "rm",
                                 "-f", d + "/dev2", d + "/fifo2"});
  EXPECT_NE(rm.exit_code, 0);  // dev2 is root's
  EXPECT_NE(rm.err.find("dev2"), std::string::npos) << rm.err;
  EXPECT_EQ(BucketKeys(s.bucket), (std::vector<std::string>{"shared/", "shared/dev2"}));
  ASSERT_EQ(::unlink((d + "/dev2").c_str()), 0) << std::strerror(errno);
  EXPECT_EQ(BucketKeys(s.bucket), (std::vector<std::string>{"shared/"}));
  ASSERT_TRUE(s.mount->Restart());
  CommandResult ls = RunCommand({"ls", "-A", d});
  EXPECT_EQ(ls.out, "");
}

// Objects that s3fs made (its mknod writes only the type in "mode", no device number) are
// special files here too.
TEST(MountS3PosixTest, ReadsSpecialFilesThatS3fsMade) {
  const std::string bucket = CreateTestBucket(TestName());
  PutEmptyObject(bucket, "fifo",
                 {"x-amz-meta-mode: " + std::to_string(S_IFIFO | 0640), "x-amz-meta-uid: 0",
                  "x-amz-meta-gid: 0", "x-amz-meta-mtime: 1700000000"});
  PutEmptyObject(bucket, "sock", {"x-amz-meta-mode: " + std::to_string(S_IFSOCK | 0755)});
  PutEmptyObject(bucket, "chr", {"x-amz-meta-mode: " + std::to_string(S_IFCHR | 0600)});
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::map<std::string, uint32_t> modes = {
      {"fifo", S_IFIFO | 0640}, {"sock", S_IFSOCK | 0755}, {"chr", S_IFCHR | 0600}};
  for (const auto& [name, mode] : modes) {
    struct stat st {};
    ASSERT_EQ(::lstat((mount->path() + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode, mode) << name;
    EXPECT_EQ(st.st_rdev, 0u) << name;
  }
  EXPECT_EQ(RunCommand({"find", mount->path(), "-type", "p"}).out, mount->path() + "/fifo\n");
}

// A name whose key would be over S3's 1,024 bytes fails with ENAMETOOLONG at once, for every
// call that makes a name, and nothing reaches the server or stays listed; one byte less works.
// (bind() takes at most 108 bytes of path: sockets are left out.)
TEST(MountS3PosixTest, KeysOverTheStoresLimitAreNamesTooLong) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  // "shared" and 4 directories of 250 bytes: a key of 1,010 bytes.
  std::string dir = s.shared;
  std::string key = "shared";
  for (char c : {'a', 'b', 'c', 'd'}) {
    dir += "/" + std::string(250, c);
    key += "/" + std::string(250, c);
    ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0) << std::strerror(errno);
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0) << std::strerror(errno);
  ASSERT_EQ(key.size(), 1010u);
  const std::string fits(1024 - key.size() - 1, 'f');  // a file key of 1,024 bytes
  const std::string too_long(1024 - key.size(), 'l');  // 1,025 bytes
  const std::string dir_too_long(fits.size(), 'd');    // its marker "…/" is 1,025 bytes
  WriteFile(dir + "/src", "x");
  ASSERT_EQ(::chmod((dir + "/src").c_str(), 0666), 0) << std::strerror(errno);
  const std::vector<std::string> before = BucketKeys(s.bucket);

  struct Case {
    std::string op;
    std::vector<std::string> paths;
  };
  const std::vector<Case> cases = {
      {"mkdir", {dir + "/" + too_long}},
      {"mkdir", {dir + "/" + dir_too_long}},
      {"create", {dir + "/" + too_long}},
      {"symlink", {dir + "/" + too_long}},
      {"mkfifo", {dir + "/" + too_long}},
      {"rename", {dir + "/src", dir + "/" + too_long}},
      {"link", {dir + "/src", dir + "/" + too_long}},
  };
  for (uint32_t uid : {0u, kOtherUid}) {
    for (const Case& c : cases) {
      SCOPED_TRACE("uid " + std::to_string(uid) + " " + c.op + " " +
                   std::to_string(c.paths.back().size()));
      EXPECT_EQ(Call(uid, c.op, c.paths), "ENAMETOOLONG");
    }
  }
  EXPECT_EQ(Call(0, "mknod-chr", {dir + "/" + too_long}), "ENAMETOOLONG");
  EXPECT_EQ(BucketKeys(s.bucket), before);
  CommandResult ls = RunCommand({"ls", "-A", dir});
  EXPECT_EQ(ls.out, "src\n");

  // At the limit: a file of 1,024 bytes of key is made, and renamed there.
  ASSERT_EQ(Call(kOtherUid, "create", {dir + "/" + fits}), "ok");
  EXPECT_FALSE(HeadObject(s.bucket, key + "/" + fits).empty());
  ASSERT_EQ(Call(kOtherUid, "rename", {dir + "/src", dir + "/" + std::string(fits.size(), 'r')}),
            "ok");
  EXPECT_FALSE(HeadObject(s.bucket, key + "/" + std::string(fits.size(), 'r')).empty());
}

// truncate, ftruncate and a write past 5 TiB, S3's largest object, give EFBIG, and the file
// keeps its size and content.
TEST(MountS3PosixTest, SizesOverTheLargestObjectAreFileTooLarge) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  const std::string file = s.shared + "/f";
  WriteFile(file, "data");
  ASSERT_EQ(::chmod(file.c_str(), 0666), 0) << std::strerror(errno);
  const std::string past = std::to_string((uint64_t{5} << 40) + 1);
  for (uint32_t uid : {0u, kOtherUid}) {
    SCOPED_TRACE("uid " + std::to_string(uid));
    EXPECT_EQ(Call(uid, "truncate", {file, "999999999999999"}), "EFBIG");
    EXPECT_EQ(Call(uid, "truncate", {file, past}), "EFBIG");
    EXPECT_EQ(Call(uid, "ftruncate", {file, past}), "EFBIG");
    EXPECT_EQ(Call(uid, "pwrite", {file, std::to_string(uint64_t{5} << 40)}), "EFBIG");
    CommandResult t = RunCommand({"truncate", "-s", "999999999999999", file});
    EXPECT_NE(t.err.find("File too large"), std::string::npos) << t.err;
  }
  EXPECT_EQ(ReadFile(file), "data");
  EXPECT_EQ(HeadObject(s.bucket, "shared/f")["content-length"], "4");
}

// A new file whose writer failed (a write past 5 TiB) is not made at its close: its bytes are
// set aside in cache_dir. Its name is free again at once, though the kernel had it cached: a
// shell's `>` (an open with O_CREAT) makes a new file there, where it got ENOENT until the
// kernel's entry timed out.
TEST(MountS3PosixTest, ANewFileWhoseWriterFailedLeavesItsNameFreeAtOnce) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  const std::string file = s.shared + "/failed";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ASSERT_EQ(::write(fd, "0123456789", 10), 10) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(::pwrite(fd, "z", 1, static_cast<off_t>((uint64_t{5} << 40) + 10)), -1);
  EXPECT_EQ(errno, EFBIG) << std::strerror(errno);
  (void)::close(fd);  // its error: the file was not made
  EXPECT_TRUE(HeadObject(s.bucket, "shared/failed", /*may_be_absent=*/true).empty());
  CommandResult redirect = RunCommand({"sh", "-c", "echo hello > \"$1\"", "sh", file});
  EXPECT_EQ(redirect.exit_code, 0) << redirect.err;
  EXPECT_EQ(ReadFile(file), "hello\n");
  EXPECT_EQ(HeadObject(s.bucket, "shared/failed")["content-length"], "6");
}

// fstat of a file still open after its removal shows no link and its size, on both a stored
// file and one written and not closed yet (whose data it still reads).
TEST(MountS3PosixTest, FstatAfterUnlinkShowsNoLinks) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  const std::string program = R"(
import os, sys
d = sys.argv[1]
fd = os.open(d + "/stored", os.O_RDONLY)
os.unlink(d + "/stored")
st = os.fstat(fd)
print(st.st_nlink, st.st_size)
w = os.open(d + "/written", os.O_CREAT | os.O_RDWR, 0o644)
os.write(w, b"unsaved")
os.unlink(d + "/written")
st = os.fstat(w)
print(st.st_nlink, st.st_size, os.pread(w, 100, 0).decode())
)";
  for (uint32_t uid : {kOtherUid, 0u}) {
    SCOPED_TRACE("uid " + std::to_string(uid));
    // In the sticky directory only its owner (or root) may remove the file.
    WriteFile(s.shared + "/stored", "stored data");
    ASSERT_EQ(::chown((s.shared + "/stored").c_str(), uid, kOtherGid), 0) << std::strerror(errno);
    CommandResult r = RunPython(uid, program, {s.shared});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "0 11\n0 7 unsaved\n");
  }
  EXPECT_EQ(BucketKeys(s.bucket), (std::vector<std::string>{"shared/"}));
}

// A directory shows one link, whatever it holds (its subdirectories would take a listing to
// count), as btrfs does: find(1) then looks at every entry rather than trusting the count.
TEST(MountS3PosixTest, DirectoriesShowOneLink) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  const std::string d = s.shared + "/d";
  CommandResult mk = RunCommand({"mkdir", "-p", d + "/a/x", d + "/b"});
  ASSERT_EQ(mk.exit_code, 0) << mk.err;
  for (const std::string& path : {s.mount->path(), d, d + "/a", d + "/b"}) {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_nlink, 1u) << path;
  }
  CommandResult find = RunCommand({"find", d, "-type", "d"});
  EXPECT_EQ(find.out, d + "\n" + d + "/a\n" + d + "/a/x\n" + d + "/b\n");
}

// Hard links cannot be kept in a bucket: link() gives EPERM, to root and other users alike,
// and nothing reaches the server.
TEST(MountS3PosixTest, HardLinksArePermissionDenied) {
  SharedMount s = StartSharedMount();
  ASSERT_TRUE(s.mount);
  WriteFile(s.shared + "/f", "x");
  for (uint32_t uid : {0u, kOtherUid}) {
    EXPECT_EQ(Call(uid, "link", {s.shared + "/f", s.shared + "/g"}), "EPERM") << uid;
  }
  CommandResult ln = RunCommand({"ln", s.shared + "/f", s.shared + "/g"});
  EXPECT_NE(ln.err.find("Operation not permitted"), std::string::npos) << ln.err;
  EXPECT_EQ(BucketKeys(s.bucket), (std::vector<std::string>{"shared/", "shared/f"}));
}

}  // namespace
}  // namespace objfs::testing
