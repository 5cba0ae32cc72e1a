// POSIX behaviour of an sftp:// mount on a real OpenSSH sshd that shared (allow_other) mounts
// and the tools run on them rely on: a directory's own mode, owner and times whatever it holds,
// a parent's times after an entry comes or goes, access times, and the owner of a file rewritten
// through the mount. The server runs on this
// machine as root, so every result is also checked in the server's directory itself.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

ObjfsMount::Options Extra(std::string options) {
  ObjfsMount::Options o;
  o.extra_options = std::move(options);
  return o;
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return st;
}

// Polls `path` until its mtime is `mtime` (true) or `timeout_s` passes (false).
bool WaitForMtime(const std::string& path, time_t mtime, double timeout_s = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && st.st_mtime == mtime) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // between polls
  }
}

// The mount's root is the server's directory, with its own mode, owner and times, as sshfs
// shows it: a 0711 directory does not look 0755 to the local users of a shared mount. chmod and
// touch of the root change the directory on the server, and a file made in it moves its mtime.
TEST(MountSftpPosixTest, TheRootShowsAndSetsTheServersDirectory) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  ASSERT_EQ(::chmod(dir.path.c_str(), 0711), 0) << std::strerror(errno);
  ASSERT_EQ(::chown(dir.path.c_str(), 1234, 2345), 0) << std::strerror(errno);
  timespec old_times[2] = {};
  old_times[0].tv_sec = old_times[1].tv_sec = 1000000000;
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.path.c_str(), old_times, 0), 0) << std::strerror(errno);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra("attr_timeout=0"));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  struct stat st = StatOf(m);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 2345u);
  EXPECT_EQ(st.st_mtime, 1000000000);
  ASSERT_EQ(::chmod(m.c_str(), 0750), 0) << std::strerror(errno);
  CommandResult touched = RunCommand({"touch", "-m", "-d", "@1100000000", m});
  ASSERT_EQ(touched.exit_code, 0) << touched.err;
  EXPECT_EQ(StatOf(dir.path).st_mode & 07777, 0750u);
  EXPECT_EQ(StatOf(dir.path).st_mtime, 1100000000);
  EXPECT_EQ(StatOf(m).st_mode & 07777, 0750u);
  EXPECT_EQ(StatOf(m).st_mtime, 1100000000);
  WriteFile(m + "/new", "new");
  EXPECT_EQ(StatOf(m).st_mtime, StatOf(dir.path).st_mtime);
  EXPECT_GT(StatOf(m).st_mtime, 1100000000);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// A directory keeps its own mode, owner and mtime once the attribute cache has expired, also
// when it holds files or directories (a directory is one on the server, never a prefix dated by
// its first entry). Each directory's mtime is moved on the server once the mount has cached
// it: seeing that new mtime proves the cached attributes expired.
TEST(MountSftpPosixTest, ANonEmptyDirectoryKeepsItsModeOwnerAndTimes) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra("attr_timeout=0.1"));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  CommandResult mkdir = RunCommand({"mkdir", "-p", m + "/d/s", m + "/e", m + "/f"});
  ASSERT_EQ(mkdir.exit_code, 0) << mkdir.err;
  WriteFile(m + "/f/file", "x");
  for (const char* name : {"d", "e", "f"}) {
    const std::string path = m + "/" + name;
    ASSERT_EQ(::chmod(path.c_str(), 01777), 0) << std::strerror(errno);
    ASSERT_EQ(::chown(path.c_str(), 65534, 65533), 0) << std::strerror(errno);
    ASSERT_EQ(RunCommand({"touch", "-m", "-d", "@1234567890", path}).exit_code, 0);
  }
  // What `ls -l` does first: a listing of the parent, then a lookup of each name.
  ASSERT_EQ(RunCommand({"ls", "-l", m}).exit_code, 0);
  for (const char* name : {"d", "e", "f"}) {
    const struct stat server = StatOf(dir.path + "/" + name);
    ASSERT_EQ(server.st_mode, static_cast<mode_t>(S_IFDIR | 01777)) << name;
    ASSERT_EQ(server.st_uid, 65534u) << name;
    ASSERT_EQ(RunCommand({"touch", "-m", "-d", "@1234567891", dir.path + "/" + name}).exit_code, 0);
    EXPECT_TRUE(WaitForMtime(m + "/" + name, 1234567891))
        << name << " shows mtime " << StatOf(m + "/" + name).st_mtime;
    const struct stat seen = StatOf(m + "/" + name);
    EXPECT_EQ(seen.st_mode, static_cast<mode_t>(S_IFDIR | 01777)) << name;
    EXPECT_EQ(seen.st_uid, 65534u) << name;
    EXPECT_EQ(seen.st_gid, 65533u) << name;
  }
  // A directory made on the server behind the mount's back, with a directory in it.
  fs::create_directories(dir.path + "/server/sub");
  ASSERT_EQ(::chmod((dir.path + "/server").c_str(), 0710), 0);
  ASSERT_EQ(::chown((dir.path + "/server").c_str(), 4321, 4322), 0);
  ASSERT_EQ(RunCommand({"touch", "-m", "-d", "@1000000000", dir.path + "/server"}).exit_code, 0);
  EXPECT_TRUE(WaitForMtime(m + "/server", 1000000000))
      << "shows mtime " << StatOf(m + "/server").st_mtime;
  const struct stat seen = StatOf(m + "/server");
  EXPECT_EQ(seen.st_mode, static_cast<mode_t>(S_IFDIR | 0710));
  EXPECT_EQ(seen.st_uid, 4321u);
  EXPECT_EQ(seen.st_gid, 4322u);
}

// Creating or removing an entry moves its directory's mtime on the server, and a stat of the
// directory shows that at once, not what was cached before for attr_timeout (here long).
TEST(MountSftpPosixTest, AParentShowsTheServersNewTimesAtOnce) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  const std::vector<std::string> parents = {"create",  "unlink",    "mkdir",      "rmdir",
                                            "symlink", "rename-in", "rename-out", "other"};
  for (const std::string& p : parents) fs::create_directories(dir.path + "/" + p);
  WriteFile(dir.path + "/unlink/f", "f");
  fs::create_directories(dir.path + "/rmdir/d");
  WriteFile(dir.path + "/rename-out/f", "f");
  WriteFile(dir.path + "/other/f", "f");
  constexpr time_t kOld = 1000000000;
  for (const std::string& p : parents) {
    ASSERT_EQ(RunCommand({"touch", "-m", "-d", "@1000000000", dir.path + "/" + p}).exit_code, 0);
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra("attr_timeout=60"));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  // Cached, by the kernel and by objfs, for a minute.
  for (const std::string& p : parents) ASSERT_EQ(StatOf(m + "/" + p).st_mtime, kOld) << p;

  WriteFile(m + "/create/f", "new");
  ASSERT_EQ(::unlink((m + "/unlink/f").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::mkdir((m + "/mkdir/d").c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::rmdir((m + "/rmdir/d").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::symlink("target", (m + "/symlink/l").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::rename((m + "/other/f").c_str(), (m + "/rename-in/f").c_str()), 0)
      << std::strerror(errno);
  ASSERT_EQ(::rename((m + "/rename-out/f").c_str(), (m + "/other/g").c_str()), 0)
      << std::strerror(errno);
  for (const std::string& p : parents) {
    const struct stat server = StatOf(dir.path + "/" + p);
    ASSERT_NE(server.st_mtime, kOld) << p << ": the server's directory did not change";
    EXPECT_EQ(StatOf(m + "/" + p).st_mtime, server.st_mtime) << p;
  }
}

// touch -a sets the atime on the server and touch -m the mtime, each keeping the other; a
// rewrite keeps the atime too (objfs itself never moves it: noatime).
TEST(MountSftpPosixTest, TouchSetsTheTimeAskedForAndKeepsTheOther) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra("attr_timeout=0"));
  ASSERT_TRUE(mount);
  const std::string f = mount->path() + "/f";
  const std::string server = dir.path + "/f";
  WriteFile(f, "data");
  ASSERT_EQ(RunCommand({"touch", "-m", "-d", "@1200000000", f}).exit_code, 0);
  ASSERT_EQ(StatOf(server).st_mtime, 1200000000);

  ASSERT_EQ(RunCommand({"touch", "-a", "-d", "@1000000000", f}).exit_code, 0);
  EXPECT_EQ(StatOf(server).st_atime, 1000000000);
  EXPECT_EQ(StatOf(server).st_mtime, 1200000000);
  EXPECT_EQ(StatOf(f).st_atime, 1000000000);
  EXPECT_EQ(StatOf(f).st_mtime, 1200000000);

  ASSERT_EQ(RunCommand({"touch", "-m", "-d", "@1100000000", f}).exit_code, 0);
  EXPECT_EQ(StatOf(server).st_atime, 1000000000);
  EXPECT_EQ(StatOf(server).st_mtime, 1100000000);
  EXPECT_EQ(StatOf(f).st_atime, 1000000000);
  EXPECT_EQ(StatOf(f).st_mtime, 1100000000);

  // New bytes move the mtime, not the atime.
  ASSERT_EQ(RunCommand({"sh", "-c", "echo more >> \"$0\"", f}).exit_code, 0);
  EXPECT_EQ(StatOf(server).st_atime, 1000000000);
  EXPECT_NE(StatOf(server).st_mtime, 1100000000);
  EXPECT_EQ(ReadFile(server), "datamore\n");
}

// An upload replaces a file by renaming a new one over it, which the account logged in (root
// here) owns: a file of another owner gets that owner back, whether it went up whole (a small
// rewrite, an append) or streamed in parts, and so does a file chowned before its upload. A
// new file belongs to the account, as for any SFTP client.
TEST(MountSftpPosixTest, AFileRewrittenThroughTheMountKeepsItsOwner) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  for (const char* name : {"small", "appended", "large", "setuid"}) {
    WriteFile(dir.path + "/" + name, "old");
    ASSERT_EQ(::chown((dir.path + "/" + name).c_str(), 1234, 2345), 0) << std::strerror(errno);
  }
  // (A chown clears set-user-ID: the mode comes after it.)
  ASSERT_EQ(::chmod((dir.path + "/setuid").c_str(), 04755), 0) << std::strerror(errno);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra("attr_timeout=0"));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  WriteFile(m + "/small", "rewritten");
  ASSERT_EQ(RunCommand({"sh", "-c", "echo more >> \"$0\"", m + "/appended"}).exit_code, 0);
  // Parts of 8 MiB stream while it is written.
  WriteFile(m + "/large", PseudoRandomBytes(20 << 20, 3));
  WriteFile(m + "/setuid", "rewritten");
  WriteFile(m + "/new", "new");
  WriteFile(m + "/given", "given");
  ASSERT_EQ(::chown((m + "/given").c_str(), 4321, 5432), 0) << std::strerror(errno);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  EXPECT_EQ(StatOf(dir.path + "/setuid").st_mode & 07777, 04755u);
  for (const char* name : {"small", "appended", "large", "setuid"}) {
    const struct stat st = StatOf(dir.path + "/" + name);
    EXPECT_EQ(st.st_uid, 1234u) << name;
    EXPECT_EQ(st.st_gid, 2345u) << name;
  }
  EXPECT_EQ(ReadFile(dir.path + "/small"), "rewritten");
  EXPECT_EQ(ReadFile(dir.path + "/appended"), "oldmore\n");
  EXPECT_EQ(StatOf(dir.path + "/new").st_uid, ::getuid());
  EXPECT_EQ(StatOf(dir.path + "/given").st_uid, 4321u);
  EXPECT_EQ(StatOf(dir.path + "/given").st_gid, 5432u);
}

// Another client makes a file private (chmod 600) while a program rewrites it through the mount
// (cp, an editor's save, `>`): the rewrite goes in with 600, as a file written in place would,
// not with the 644 it was opened at, which would open it to everyone again. Whole or streamed,
// and the mount shows the mode the server has. A chmod made through the mount is the mount's.
TEST(MountSftpPosixTest, ARewriteKeepsAChmodAnotherClientMadeMeanwhile) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  // The mode each has on the server, another client's chmod during the rewrite, the writer's
  // own (0: none) and the mode it ends with.
  struct Case {
    const char* name;
    uint32_t before, theirs, writers, after;
  };
  const Case cases[] = {
      {"small", 0644, 0600, 0, 0600},
      {"large", 0644, 0600, 0, 0600},
      {"mine", 0644, 0600, 0640, 0640},
      // The writer makes it private again, to the mode it opened it at: that stands.
      {"private", 0600, 0644, 0600, 0600},
  };
  for (const Case& c : cases) {
    WriteFile(dir.path + "/" + c.name, "old");
    ASSERT_EQ(::chmod((dir.path + "/" + c.name).c_str(), c.before), 0) << std::strerror(errno);
  }
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra("attr_timeout=0"));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  const std::string large = PseudoRandomBytes(20 << 20, 4);  // streamed in parts
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string data = std::string(c.name) == "large" ? large : "rewritten";
    const int fd = ::open((m + "/" + c.name).c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    ASSERT_EQ(::chmod((dir.path + "/" + c.name).c_str(), c.theirs), 0);  // on the server
    if (c.writers != 0) {
      ASSERT_EQ(::fchmod(fd, c.writers), 0) << std::strerror(errno);
    }
    ASSERT_EQ(::close(fd), 0) << std::strerror(errno);
    EXPECT_EQ(ReadFile(dir.path + "/" + c.name), data);
    EXPECT_EQ(StatOf(dir.path + "/" + c.name).st_mode & 07777, c.after);
    EXPECT_EQ(StatOf(m + "/" + c.name).st_mode & 07777, c.after);
  }
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// An append to a file that another client replaced with a directory or a link while it was
// open: the version the append builds on is gone as surely as if other bytes had replaced it.
// The close fails with EIO and the append is set aside at once, rather than retried in vain.
TEST(MountSftpPosixTest, AnAppendWhoseFileBecameADirectoryOrALinkIsSetAside) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  const std::string data = PseudoRandomBytes(3 << 20, 5);
  for (const char* name : {"todir", "tolink"}) WriteFile(dir.path + "/" + name, data);
  WriteFile(dir.path + "/target", data);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url);
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  for (const std::string name : {"todir", "tolink"}) {
    SCOPED_TRACE(name);
    const int fd = ::open((m + "/" + name).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::write(fd, "tail\n", 5), 5);
    const std::string on_server = dir.path + "/" + name;
    ASSERT_EQ(::unlink(on_server.c_str()), 0);
    if (name == "todir") {
      ASSERT_EQ(::mkdir(on_server.c_str(), 0755), 0);
    } else {
      ASSERT_EQ(::symlink((dir.path + "/target").c_str(), on_server.c_str()), 0);
    }
    EXPECT_EQ(::close(fd), -1);
    EXPECT_EQ(errno, EIO);
    const std::string kept = mount->cache_dir() + "/unfinished/" + name;
    EXPECT_TRUE(WaitFor(30, [&] { return fs::exists(kept); })) << mount->log();
  }
  EXPECT_EQ(ReadFile(dir.path + "/target"), data);  // the link's target is untouched
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// A shared mount (allow_other): what a user makes belongs to that user on the server too, as
// on a local disk (the account logged in, root here, may chown), and that user may then chmod
// and truncate it. Each command runs as uid 1234, gid 2345 (setpriv).
TEST(MountSftpPosixTest, OnASharedMountNewEntriesBelongToTheirCreator) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  // (The mount's root shows the mount's own mode; a directory in it, the server's.)
  const std::string shared = dir.path + "/shared";
  ASSERT_EQ(::mkdir(shared.c_str(), 0755), 0) << std::strerror(errno);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0) << std::strerror(errno);
  std::unique_ptr<ObjfsMount> mount =
      ObjfsMount::Start(dir.url, Extra("allow_other,attr_timeout=0"));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  // The mount's own temporary directory is root's, 0700: the user must get through it.
  ASSERT_EQ(::chmod(fs::path(m).parent_path().c_str(), 0711), 0) << std::strerror(errno);
  auto as_user = [](const std::string& script, const std::string& arg) {
    return RunCommand({"setpriv", "--reuid=1234", "--regid=2345", "--clear-groups", "sh", "-c",
                       script, "sh", arg});
  };
  CommandResult made = as_user(
      "cd \"$1\" && echo data > file && mkdir dir && ln -s file link && "
      "chmod 600 file && truncate -s 2 file && head -c 20971520 /dev/zero > large",
      m + "/shared");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  for (const char* name : {"file", "dir", "link", "large"}) {
    struct stat st {};
    ASSERT_EQ(::lstat((shared + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_uid, 1234u) << name;
    EXPECT_EQ(st.st_gid, 2345u) << name;
  }
  EXPECT_EQ(StatOf(shared + "/file").st_mode & 07777, 0600u);
  EXPECT_EQ(ReadFile(shared + "/file"), "da");
}

// A hard link is refused (EPERM), as on S3: an upload renames a new file over the old one, so
// a link would be split by the first write through either name. Nothing reaches the server.
TEST(MountSftpPosixTest, HardLinksArePermissionDenied) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra(""));
  ASSERT_TRUE(mount);
  WriteFile(mount->path() + "/f", "x");
  EXPECT_EQ(::link((mount->path() + "/f").c_str(), (mount->path() + "/g").c_str()), -1);
  EXPECT_EQ(errno, EPERM) << std::strerror(errno);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_FALSE(fs::exists(dir.path + "/g"));
  EXPECT_EQ(StatOf(dir.path + "/f").st_nlink, 1u);
}

// As on S3: a file removed while open shows no links to fstat, with its size (and a file being
// written, its unsaved bytes); a directory shows one link, whatever it holds; and ftruncate of
// an open file moves its ctime with its mtime at once.
TEST(MountSftpPosixTest, FstatAfterUnlinkDirectoryLinksAndFtruncateCtime) {
  SftpTestDir dir = CreateSftpTestDir(TestName());
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(dir.url, Extra(""));
  ASSERT_TRUE(mount);
  const std::string m = mount->path();
  WriteFile(m + "/stored", "stored data");
  WriteFile(m + "/cut", "0123456789");
  // An mtime well in the past: the ftruncate's new one differs from it whatever the clock.
  ASSERT_EQ(RunCommand({"touch", "-d", "@1000000000", m + "/cut"}).exit_code, 0);
  ASSERT_EQ(RunCommand({"mkdir", "-p", m + "/d/a", m + "/d/b"}).exit_code, 0);
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
print(os.stat(d + "/d").st_nlink)
c = os.open(d + "/cut", os.O_RDWR)
os.ftruncate(c, 2)
for st in (os.fstat(c), os.stat(d + "/cut")):
  print(st.st_size, st.st_mtime > 1000000000, st.st_ctime_ns == st.st_mtime_ns)
)";
  CommandResult r = RunCommand({"python3", "-c", program, m});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0 11\n0 7 unsaved\n1\n2 True True\n2 True True\n");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_FALSE(fs::exists(dir.path + "/stored"));
  EXPECT_FALSE(fs::exists(dir.path + "/written"));
  EXPECT_EQ(ReadFile(dir.path + "/cut"), "01");
}

}  // namespace
}  // namespace objfs::testing
