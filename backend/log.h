// The one place every message of an objfs process goes, whatever thread sends it.
//
// A daemon's problems used to reach only syslog, without levels, and a machine without /dev/log
// lost them. Here each line has a level (error, warn, info, debug) and goes to one sink, chosen
// by `-o log=syslog|stderr|FILE`: syslog with the level as its priority, standard error (under
// systemd, the journal), or a file appended to with a time stamp on each line. Lines below the
// level asked for (`-o log_level=`) cost one atomic load. The background threads (write-back,
// uploads, the SFTP watchdog) log through the same sink as the request threads.
//
// Until the process is a daemon every line also goes to standard error, so that what fails
// before the mount is printed where the user ran objfs. Afterwards the default sink is syslog,
// or standard error when it is the journal (JOURNAL_STREAM) or there is no /dev/log: standard
// error is kept open (a copy taken before the fork) for that.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn" (or "warning"), "info", "debug".
Result<LogLevel> ParseLogLevel(std::string_view text);
std::string_view LogLevelName(LogLevel level);

enum class LogSink {
  kAuto,    // stderr in the foreground or under systemd; syslog in the background
  kSyslog,  // falls back to stderr when there is no /dev/log
  kStderr,
  kFile,
};

struct LogSettings {
  LogSink sink = LogSink::kAuto;
  std::string path;  // kFile: an absolute path
  LogLevel level = LogLevel::kInfo;
};

// "syslog", "stderr", or a file name (anything else). InvalidArgument for an empty value.
Result<LogSettings> ParseLogSink(std::string_view text);

// Process-wide; thread-safe.
class Logger {
 public:
  static Logger& Instance();

  // Takes the settings: opens the file of kFile (InvalidArgument, one line, when it cannot be
  // opened for appending) and keeps a copy of standard error. Called before the mount.
  Status Configure(const LogSettings& settings);
  // The process is (or stays) the serving one: `daemon` when standard error is gone to
  // /dev/null. Resolves kAuto and the syslog fallback.
  void StartServing(bool daemon);

  bool Enabled(LogLevel level) const {
    return static_cast<int>(level) <= level_.load(std::memory_order_relaxed);
  }
  void Log(LogLevel level, std::string_view message);

  // Where lines go now: "syslog", "stderr" or the file's path (for tests and --help).
  std::string Describe() const;

 private:
  Logger() = default;
  void Write(LogLevel level, std::string_view message);

  std::atomic<int> level_{static_cast<int>(LogLevel::kInfo)};
  // Set before the serving threads start.
  LogSettings settings_;
  std::atomic<LogSink> resolved_{LogSink::kFile};  // kFile until StartServing: see Write
  std::atomic<bool> serving_{false};
  bool journal_ = false;  // standard error is systemd's journal stream
  int stderr_fd_ = -1;    // a copy of the original standard error
  int file_fd_ = -1;
};

inline void Log(LogLevel level, std::string_view message) {
  Logger& logger = Logger::Instance();
  if (logger.Enabled(level)) logger.Log(level, message);
}
inline void LogError(std::string_view message) { Log(LogLevel::kError, message); }
inline void LogWarn(std::string_view message) { Log(LogLevel::kWarn, message); }
inline void LogInfo(std::string_view message) { Log(LogLevel::kInfo, message); }
inline bool LogDebugEnabled() { return Logger::Instance().Enabled(LogLevel::kDebug); }
inline void LogDebug(std::string_view message) { Log(LogLevel::kDebug, message); }

// A component's log: each line with its level. Components take one (in their options) so that
// tests can read what they say; the mount gives them the process's Logger (`LogTo` below).
using LogFunction = std::function<void(LogLevel, const std::string&)>;

// `log` when there is one, the process's Logger otherwise.
inline void LogTo(const LogFunction& log, LogLevel level, const std::string& message) {
  if (log) {
    log(level, message);
  } else {
    Log(level, message);
  }
}

}  // namespace objfs
