#include "backend/log.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

namespace objfs {

Result<LogLevel> ParseLogLevel(std::string_view text) {
  if (text == "error") return LogLevel::kError;
  if (text == "warn" || text == "warning") return LogLevel::kWarn;
  if (text == "info") return LogLevel::kInfo;
  if (text == "debug") return LogLevel::kDebug;
  return InvalidArgumentError("bad value '" + std::string(text) +
                              "' for log_level (expected error, warn, info or debug)");
}

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "error";
}

Result<LogSettings> ParseLogSink(std::string_view text) {
  LogSettings settings;
  if (text.empty()) return InvalidArgumentError("log needs a value (syslog, stderr or a file)");
  if (text == "syslog") {
    settings.sink = LogSink::kSyslog;
  } else if (text == "stderr") {
    settings.sink = LogSink::kStderr;
  } else {
    settings.sink = LogSink::kFile;
    settings.path = std::string(text);
  }
  return settings;
}

namespace {

// Whether `path` is, or links to, a name of standard output or error (/dev/stderr,
// /proc/self/fd/2), which log=stderr says.
bool NamesStandardStream(const std::string& path) {
  auto standard = [](std::string_view name) {
    return name == "/dev/stderr" || name == "/dev/stdout" || name.starts_with("/dev/fd/") ||
           name.starts_with("/proc/self/fd/");
  };
  if (standard(path)) return true;
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target);
  return n > 0 && static_cast<size_t>(n) < sizeof target &&
         standard(std::string_view(target, static_cast<size_t>(n)));
}

// Whether `head`, the start of a file, is a line objfs logs to a file:
// "2026-12-02T11:20:42.123Z objfs[PID] ...".
bool StartsAsObjfsLog(std::string_view head) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.dddZ objfs[";
  if (head.size() < kShape.size() + 2) return false;
  for (size_t i = 0; i < kShape.size(); ++i) {
    const bool digit = head[i] >= '0' && head[i] <= '9';
    if (kShape[i] == 'd' ? !digit : head[i] != kShape[i]) return false;
  }
  size_t i = kShape.size();
  while (i < head.size() && head[i] >= '0' && head[i] <= '9') ++i;
  return i > kShape.size() && i < head.size() && head[i] == ']';
}

// The file of -o log=FILE, open for appending; a one-line error for a file it must not be.
Result<int> OpenLogFile(const std::string& path) {
  const std::string where = "log file '" + path + "'";
  // Checked before the open: opening a device may act (/dev/watchdog arms the watchdog), and a
  // FIFO with a reader would be opened.
  struct stat named {};
  const bool exists = ::lstat(path.c_str(), &named) == 0;
  if (!exists && errno != ENOENT) {
    return InvalidArgumentError("cannot open " + where + ": " + std::strerror(errno));
  }
  if (exists && S_ISLNK(named.st_mode)) {
    return InvalidArgumentError(where + " is a symbolic link: name the file itself" +
                                (NamesStandardStream(path) ? " (use log=stderr)" : ""));
  }
  if (exists && !S_ISREG(named.st_mode)) {
    return InvalidArgumentError(where + " is not a regular file (use log=stderr or log=syslog)");
  }
  // O_NOFOLLOW: a symbolic link planted where the file is expected cannot send a root daemon's
  // lines into another file. O_EXCL: a file that was not there is created, not whatever (a FIFO,
  // a device) was put there since. O_NONBLOCK: no open waits. (An existing file is read too:
  // its first line, below.)
  const int fd = ::open(path.c_str(),
                        (exists ? O_RDWR : O_WRONLY | O_CREAT | O_EXCL) | O_APPEND | O_NOFOLLOW |
                            O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
                        0600);
  if (fd < 0) return InvalidArgumentError("cannot open " + where + ": " + std::strerror(errno));
  // A file this open created is ours, whoever the file system says owns it (root-squashed NFS
  // gives it to 65534): no check of owner, mode or links, and removed again if refused.
  const bool created = !exists;
  auto refuse = [fd, created, &path](std::string message) -> Result<int> {
    ::close(fd);
    if (created) ::unlink(path.c_str());
    return InvalidArgumentError(std::move(message));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return refuse("cannot open " + where + ": " + std::strerror(errno));
  // What was opened is what was checked, not a file swapped in meanwhile.
  if (exists && (st.st_dev != named.st_dev || st.st_ino != named.st_ino)) {
    return refuse(where + " was replaced while being opened");
  }
  if (!S_ISREG(st.st_mode)) {
    return refuse(where + " is not a regular file (use log=stderr or log=syslog)");
  }
  // As ssh and sudo with their files: another user's file, one that others may write to (or
  // replace the lines of), or a second name of a file (a hard link planted in /tmp to
  // /etc/shadow) is not taken.
  if (!created && st.st_uid != ::geteuid()) {
    return refuse(where + " belongs to uid " + std::to_string(st.st_uid) +
                  ", not to the user mounting (uid " + std::to_string(::geteuid()) + ")");
  }
  if (!created && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return refuse(where + " is writable by group or others (mode " + mode + "): chmod go-w it");
  }
  if (!created && st.st_nlink != 1) {
    return refuse(where + " has " + std::to_string(st.st_nlink) +
                  " hard links: use a file of its own");
  }
  // A file of the kernel's (/proc/sysrq-trigger, /sys/..., a cgroup's release_agent) acts on
  // what is written to it: any of its pseudo file systems.
  struct statfs fs_info {};
  if (::fstatfs(fd, &fs_info) == 0) {
    static constexpr unsigned long kKernelFileSystems[] = {
        PROC_SUPER_MAGIC, SYSFS_MAGIC,        CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC,
        DEBUGFS_MAGIC,    TRACEFS_MAGIC,      SECURITYFS_MAGIC,   BPF_FS_MAGIC,
        SELINUX_MAGIC,    SMACK_MAGIC,        PSTOREFS_MAGIC,     EFIVARFS_MAGIC,
        BINFMTFS_MAGIC,   DEVPTS_SUPER_MAGIC, 0x62656570 /* configfs */};
    for (const unsigned long type : kKernelFileSystems) {
      if (static_cast<unsigned long>(fs_info.f_type) == type) {
        return refuse(where + " is a file of the kernel's (/proc, /sys), not one to log to");
      }
    }
  }
  // A file with lines in it must be objfs's log: a mistyped log= (an fstab line run as root)
  // never appends to /etc/passwd or a program's own file. Empty, it is a new log (touched, or
  // emptied by logrotate's copytruncate). (Read whatever its size says.)
  if (!created) {
    char head[64];
    const ssize_t n = ::pread(fd, head, sizeof head, 0);
    if (n < 0) return refuse("cannot read " + where + ": " + std::strerror(errno));
    if (n > 0 && !StartsAsObjfsLog(std::string_view(head, static_cast<size_t>(n)))) {
      return refuse(where + " is not empty and not an objfs log: name a new file");
    }
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return refuse("cannot open " + where + ": " + std::strerror(errno));
  }
  return fd;
}

}  // namespace

Logger& Logger::Instance() {
  static Logger* logger = new Logger();  // never destroyed: threads may log at exit
  return *logger;
}

Status Logger::Configure(const LogSettings& settings) {
  LogSettings chosen = settings;
  if (chosen.sink == LogSink::kFile && chosen.path[0] != '/') {
    // A daemon's working directory is "/".
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) != nullptr) chosen.path = std::string(cwd) + "/" + chosen.path;
  }
  if (chosen.sink == LogSink::kFile) {
    OBJFS_ASSIGN_OR_RETURN(const int fd, OpenLogFile(chosen.path));
    if (file_fd_ >= 0) ::close(file_fd_);
    file_fd_ = fd;
  }
  settings_ = std::move(chosen);
  if (stderr_fd_ < 0) stderr_fd_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  const char* journal = std::getenv("JOURNAL_STREAM");
  journal_ = journal != nullptr && journal[0] != '\0';
  level_.store(static_cast<int>(settings_.level), std::memory_order_relaxed);
  return Status::Ok();
}

void Logger::StartServing(bool daemon) {
  LogSink sink = settings_.sink;
  if (sink == LogSink::kAuto) sink = daemon && !journal_ ? LogSink::kSyslog : LogSink::kStderr;
  bool no_syslog = false;
  if (sink == LogSink::kSyslog) {
    struct stat st {};
    no_syslog = ::stat("/dev/log", &st) != 0 || !S_ISSOCK(st.st_mode);
    if (no_syslog) {
      sink = LogSink::kStderr;  // syslog() would drop every line
    } else {
      ::openlog("objfs", LOG_PID, LOG_DAEMON);
    }
  }
  if (daemon && stderr_fd_ >= 0) {
    // The daemon keeps the caller's standard error only where lines are read as they come (a
    // terminal, a file, the journal's socket): a pipe's reader may wait for its end, which the
    // mount's whole life would delay.
    struct stat st {};
    const bool keep = sink == LogSink::kStderr && ::fstat(stderr_fd_, &st) == 0 &&
                      (S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode) ||
                       (S_ISCHR(st.st_mode) && ::isatty(stderr_fd_) == 1));
    if (!keep) {
      ::close(stderr_fd_);
      stderr_fd_ = -1;
    }
  }
  resolved_.store(sink);
  serving_.store(true);
  if (no_syslog) Write(LogLevel::kWarn, "no syslog socket /dev/log: logging to standard error");
}

std::string Logger::Describe() const {
  switch (resolved_.load()) {
    case LogSink::kSyslog:
      return "syslog";
    case LogSink::kFile:
      return settings_.path;
    default:
      return "stderr";
  }
}

void Logger::Log(LogLevel level, std::string_view message) {
  if (!Enabled(level)) return;
  Write(level, message);
}

namespace {

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return LOG_ERR;
    case LogLevel::kWarn:
      return LOG_WARNING;
    case LogLevel::kInfo:
      return LOG_INFO;
    case LogLevel::kDebug:
      return LOG_DEBUG;
  }
  return LOG_ERR;
}

// "2026-12-02T11:20:42.123Z"
std::string TimeStamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return buf;
}

// The UTF-8 sequence at `s[i]`: its length and code point, or 0 where the bytes are not one
// (a stray byte, an overlong form, a surrogate, past U+10FFFF, cut short).
size_t Utf8At(std::string_view s, size_t i, char32_t* cp) {
  const auto lead = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  char32_t min = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2;
    *cp = lead & 0x1f;
    min = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3;
    *cp = lead & 0x0f;
    min = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4;
    *cp = lead & 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto next = static_cast<unsigned char>(s[i + k]);
    if ((next & 0xc0) != 0x80) return 0;
    *cp = (*cp << 6) | (next & 0x3f);
  }
  if (*cp < min || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff)) return 0;
  return n;
}

// Characters that a terminal or viewer takes as more than a character: the C1 controls (CSI
// among them), the ones that reorder text shown after them (bidirectional overrides, embeddings,
// isolates and marks), and the line and paragraph separators.
bool ActsOnText(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

// `message` with its control characters written out ("\\n", "\\x1b", "\\u202e"): a line of the
// log is one message, whatever the names in it hold. A file name is any bytes but '/' and NUL,
// and another user of an allow_other mount could otherwise write lines that look like objfs's
// own (a time stamp, a level, a journal priority), terminal escapes, or text that shows in
// another order than it reads. Bytes that are not UTF-8 are written out too ("\\xff"); other
// UTF-8 text stays as it is.
std::string OneLine(std::string_view message) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string line;
  line.reserve(message.size());
  const auto escape_byte = [&line](unsigned char byte) {
    line += "\\x";
    line += kHex[byte >> 4];
    line += kHex[byte & 15];
  };
  for (size_t i = 0; i < message.size();) {
    const char ch = message[i];
    const auto byte = static_cast<unsigned char>(ch);
    char32_t cp = 0;
    if (byte >= 0x80) {
      const size_t n = Utf8At(message, i, &cp);
      if (n > 0 && !ActsOnText(cp)) {
        line.append(message.substr(i, n));
      } else if (n > 0) {
        line += "\\u";
        for (int shift = 12; shift >= 0; shift -= 4) line += kHex[(cp >> shift) & 15];
      } else {
        escape_byte(byte);
      }
      i += n > 0 ? n : 1;
      continue;
    }
    ++i;
    if (ch == '\\') {
      line += "\\\\";  // so that a name's own "\n" is told from a newline
    } else if (byte >= 0x20 && byte != 0x7f) {
      line += ch;
    } else if (ch == '\n') {
      line += "\\n";
    } else if (ch == '\t') {
      line += "\\t";
    } else if (ch == '\r') {
      line += "\\r";
    } else {
      escape_byte(byte);
    }
  }
  return line;
}

}  // namespace

void Logger::Write(LogLevel level, std::string_view raw_message) {
  const std::string escaped = OneLine(raw_message);
  const std::string_view message = escaped;
  const LogSink sink = resolved_.load();
  // The copy of the caller's standard error (a daemon's own is /dev/null).
  const int err_fd = stderr_fd_ >= 0 ? stderr_fd_ : STDERR_FILENO;
  // Standard error: "objfs: MESSAGE", warnings and debug lines marked; the journal takes a
  // "<N>" prefix as the line's priority.
  auto to_stderr = [&] {
    std::string line;
    // Appended piece by piece: g++ 12 at -O3 warns (-Wrestrict, GCC bug 105329) on a chain of
    // operator+ that starts with a literal.
    if (journal_) line.append("<").append(std::to_string(SyslogPriority(level))).append(">");
    line += "objfs: ";
    if (level == LogLevel::kWarn) line += "warning: ";
    if (level == LogLevel::kDebug) line += "debug: ";
    line += message;
    line += '\n';
    WriteAll(err_fd, line);
  };
  if (!serving_.load()) {
    // Before the mount: where the user ran objfs, and in the log file too.
    to_stderr();
    if (settings_.sink != LogSink::kFile) return;
  }
  switch (sink) {
    case LogSink::kSyslog:
      ::syslog(SyslogPriority(level), "%.*s", static_cast<int>(message.size()), message.data());
      break;
    case LogSink::kFile:
      if (file_fd_ >= 0) {
        // "2026-12-02T11:20:42.123Z objfs[PID] LEVEL: MESSAGE"
        std::string line = TimeStamp() + " objfs[" + std::to_string(::getpid()) + "] " +
                           std::string(LogLevelName(level)) + ": ";
        line += message;
        line += '\n';
        WriteAll(file_fd_, line);
      }
      break;
    default:
      to_stderr();
      break;
  }
}

}  // namespace objfs
