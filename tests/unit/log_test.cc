// The process's log (backend/log.h): levels, the file sink's lines, the level-less callbacks'
// lines, and the parsers of -o log= and -o log_level=.
#include "backend/log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/fsuid.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace objfs {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LogTest, ParsesSinksAndLevels) {
  EXPECT_EQ(ParseLogSink("syslog")->sink, LogSink::kSyslog);
  EXPECT_EQ(ParseLogSink("stderr")->sink, LogSink::kStderr);
  EXPECT_EQ(ParseLogSink("/var/log/objfs.log")->sink, LogSink::kFile);
  EXPECT_EQ(ParseLogSink("/var/log/objfs.log")->path, "/var/log/objfs.log");
  EXPECT_FALSE(ParseLogSink("").ok());
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("verbose").ok());
}

// One test for the process-wide logger: it is configured once.
TEST(LogTest, AFileGetsTheLinesAtAndAboveItsLevel) {
  const std::string path = ::testing::TempDir() + "/log_test.log";
  std::remove(path.c_str());
  LogSettings settings;
  settings.sink = LogSink::kFile;
  settings.path = path;
  settings.level = LogLevel::kWarn;
  ASSERT_TRUE(Logger::Instance().Configure(settings).ok());
  Logger::Instance().StartServing(/*daemon=*/true);
  EXPECT_EQ(Logger::Instance().Describe(), path);
  LogError("an error line");
  LogWarn("a warning line");
  LogInfo("an info line");
  LogDebug("a debug line");
  EXPECT_FALSE(LogDebugEnabled());
  const std::string text = ReadAll(path);
  EXPECT_NE(text.find("] error: an error line\n"), std::string::npos) << text;
  EXPECT_NE(text.find("] warn: a warning line\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("info line"), std::string::npos) << text;
  EXPECT_EQ(text.find("debug line"), std::string::npos) << text;
  // "2026-12-02T11:20:42.123Z objfs[PID] error: ..."
  EXPECT_EQ(text[4], '-');
  EXPECT_EQ(text[10], 'T');
  EXPECT_EQ(text.substr(23, 8), "Z objfs[");

  settings.level = LogLevel::kDebug;
  ASSERT_TRUE(Logger::Instance().Configure(settings).ok());
  EXPECT_TRUE(LogDebugEnabled());
  LogDebug("now a debug line");
  EXPECT_NE(ReadAll(path).find("] debug: now a debug line\n"), std::string::npos);

  // A message is one line, whatever a name in it holds: another user of an allow_other mount
  // must not write lines that look like objfs's own, nor terminal escapes.
  const std::string before = ReadAll(path);
  const auto lines_before = std::count(before.begin(), before.end(), '\n');
  LogError("mknod pub/x\n2026-12-06T10:00:00.000Z objfs[1] error: FORGED\r\t\x1b[2J\x7f\\n: EPERM");
  const std::string forged = ReadAll(path);
  EXPECT_EQ(std::count(forged.begin(), forged.end(), '\n'), lines_before + 1) << forged;
  EXPECT_NE(forged.find("] error: mknod pub/x\\n2026-12-06T10:00:00.000Z objfs[1] error: "
                        "FORGED\\r\\t\\x1b[2J\\x7f\\\\n: EPERM\n"),
            std::string::npos)
      << forged;

  // Nor characters that a terminal acts on (a C1 CSI), text that shows in another order than it
  // reads (a right-to-left override), or bytes that are not UTF-8; other UTF-8 stays.
  LogError(
      "rm pub/caf\xc3\xa9 \xc2\x9b"
      "2J \xe2\x80\xae"
      "fdp.exe \xff\xc3 \xe2\x81\xa6 \xc0\xaf");
  const std::string shown = ReadAll(path);
  EXPECT_NE(shown.find("] error: rm pub/caf\xc3\xa9 \\u009b2J \\u202e"
                       "fdp.exe \\xff\\xc3 \\u2066 "
                       "\\xc0\\xaf\n"),
            std::string::npos)
      << shown;

  settings.path = "/nonexistent-dir/objfs.log";
  Status refused = Logger::Instance().Configure(settings);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("cannot open log file '/nonexistent-dir/objfs.log'"),
            std::string::npos);
}

// The refusals of -o log=FILE leave the logger as it was; each is one line naming the file.
TEST(LogTest, ALogFileIsARegularPrivateFileOfItsOwn) {
  char dir_template[] = "/tmp/log_test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  LogSettings settings;
  settings.sink = LogSink::kFile;
  auto refused = [&](const std::string& path) {
    settings.path = path;
    return std::string(Logger::Instance().Configure(settings).message());
  };

  // A FIFO nobody reads: refused at once (SIGALRM ends a blocked open rather than the suite).
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::alarm(20);
  EXPECT_EQ(refused(fifo),
            "log file '" + fifo + "' is not a regular file (use log=stderr or log=syslog)");
  ::alarm(0);
  EXPECT_EQ(refused(dir),
            "log file '" + dir + "' is not a regular file (use log=stderr or log=syslog)");

  // A device is refused from its lstat, never opened (opening /dev/watchdog arms it): a node of
  // /dev/null's numbers, watched for opens by inotify.
  const std::string device = dir + "/device.log";
  if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0) {
    const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ASSERT_GE(watch, 0);
    ASSERT_GE(::inotify_add_watch(watch, device.c_str(), IN_OPEN), 0);
    EXPECT_EQ(refused(device),
              "log file '" + device + "' is not a regular file (use log=stderr or log=syslog)");
    char events[4096];
    EXPECT_LT(::read(watch, events, sizeof events), 0) << "the device was opened";
    const int fd = ::open(device.c_str(), O_WRONLY | O_CLOEXEC);  // the watch sees an open
    ASSERT_GE(fd, 0);
    ::close(fd);
    EXPECT_GT(::read(watch, events, sizeof events), 0);
    ::close(watch);
  }

  // A symbolic link, even to a file that would do.
  const std::string target = dir + "/target";
  std::ofstream(target) << "kept\n";
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  const std::string link = dir + "/link.log";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(refused(link), "log file '" + link + "' is a symbolic link: name the file itself");
  // A name of standard error: log=stderr says it.
  EXPECT_EQ(refused("/dev/stderr"),
            "log file '/dev/stderr' is a symbolic link: name the file itself (use log=stderr)");
  const std::string to_stdout = dir + "/stdout.log";
  ASSERT_EQ(::symlink("/proc/self/fd/1", to_stdout.c_str()), 0);
  EXPECT_EQ(refused(to_stdout), "log file '" + to_stdout +
                                    "' is a symbolic link: name the file itself (use log=stderr)");
  // A second name of another file.
  const std::string hard = dir + "/hard.log";
  ASSERT_EQ(::link(target.c_str(), hard.c_str()), 0);
  EXPECT_EQ(refused(hard), "log file '" + hard + "' has 2 hard links: use a file of its own");
  EXPECT_EQ(ReadAll(target), "kept\n");

  // Writable by others, or by the group.
  const std::string open_log = dir + "/open.log";
  std::ofstream(open_log) << "";
  ASSERT_EQ(::chmod(open_log.c_str(), 0666), 0);
  EXPECT_EQ(refused(open_log), "log file '" + open_log +
                                   "' is writable by group or others (mode 0666): chmod go-w it");
  ASSERT_EQ(::chmod(open_log.c_str(), 0620), 0);
  EXPECT_NE(refused(open_log).find("(mode 0620)"), std::string::npos);
  // Another user's (the tests run as root, who may chown).
  if (::geteuid() == 0) {
    const std::string theirs = dir + "/theirs.log";
    std::ofstream(theirs) << "";
    ASSERT_EQ(::chmod(theirs.c_str(), 0600), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_EQ(refused(theirs),
              "log file '" + theirs + "' belongs to uid 65534, not to the user mounting (uid 0)");
  }

  // A file with lines objfs did not write: a mistyped log= of an fstab line run as root must not
  // append to /etc/passwd. Nor one that merely looks like it (another program's "objfs" line).
  const std::string other = dir + "/passwd";
  for (const std::string text : {"root:x:0:0:root:/root:/bin/bash\n",
                                 "2026-12-02T11:20:42.123Z other[12] objfs[3] info: x\n",
                                 "2026-12-02T11:20:42.123Z objfs[] info: x\n", "x"}) {
    std::ofstream(other, std::ios::trunc) << text;
    ASSERT_EQ(::chmod(other.c_str(), 0644), 0);
    EXPECT_EQ(refused(other),
              "log file '" + other + "' is not empty and not an objfs log: name a new file")
        << text;
    EXPECT_EQ(ReadAll(other), text);
  }

  // A file of the kernel's, which may act on what is written to it (/proc/sysrq-trigger; root
  // may open these).
  if (::geteuid() == 0) {
    EXPECT_EQ(
        refused("/proc/version"),
        "log file '/proc/version' is a file of the kernel's (/proc, /sys), not one to log to");
    // A cgroup's file (a cgroup v1 release_agent takes a command line), where there is one.
    for (const std::string cgroup :
         {"/sys/fs/cgroup/pids/cgroup.procs", "/sys/fs/cgroup/cgroup.procs"}) {
      struct stat st {};
      if (::lstat(cgroup.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      EXPECT_EQ(
          refused(cgroup),
          "log file '" + cgroup + "' is a file of the kernel's (/proc, /sys), not one to log to");
    }
  }

  // A new one is 0600 whatever the umask; an existing 0640 is kept as it is.
  const mode_t old_umask = ::umask(0);
  const std::string fresh = dir + "/fresh.log";
  settings.path = fresh;
  EXPECT_TRUE(Logger::Instance().Configure(settings).ok());
  ::umask(old_umask);
  struct stat st {};
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::chmod(fresh.c_str(), 0640), 0);
  EXPECT_TRUE(Logger::Instance().Configure(settings).ok());
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // An objfs log, as objfs wrote it, is appended to.
  std::ofstream(fresh) << "2026-12-02T11:20:42.123Z objfs[4242] info: s3: endpoint AWS\n";
  EXPECT_TRUE(Logger::Instance().Configure(settings).ok());
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// A new log file is the mount's own even when the file system gives it to another user, as
// root-squashed NFS gives root's new files to 65534 (here: root's file system uid set to 65534).
TEST(LogTest, ANewLogFileIsTakenWhoeverOwnsIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create files as another uid";
  char dir_template[] = "/tmp/log_test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  LogSettings settings;
  settings.sink = LogSink::kFile;
  settings.path = dir + "/squashed.log";
  ::setfsuid(65534);
  const Status status = Logger::Instance().Configure(settings);
  ::setfsuid(0);
  EXPECT_TRUE(status.ok()) << status.message();
  struct stat st {};
  ASSERT_EQ(::stat(settings.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  // Existing, it is another user's file like any other.
  EXPECT_EQ(
      Logger::Instance().Configure(settings).message(),
      "log file '" + settings.path + "' belongs to uid 65534, not to the user mounting (uid 0)");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace objfs
