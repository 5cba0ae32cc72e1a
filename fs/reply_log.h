// The failed replies of a mount, as the application saw them and with the reason it could not.
//
// An errno tells an application that a call failed, never why: EIO covers a server that timed
// out, refused the credentials or answered garbage. Every failed reply at the FUSE boundary is
// therefore counted per operation ("failed_<op>" in user.objfs.stats) and logged with its
// operation, path and reason, except the answers that tools ask for routinely and that say
// nothing about objfs or its server (Expected(): ENOENT on lookup, ENODATA on getxattr, ...).
// The log is rate-limited: a burst of lines, then one line a second, each saying how many
// failures it did not log; a dead server must not flood syslog with one line per read.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "backend/mutex.h"

namespace objfs {

class ReplyLog {
 public:
  using Sink = std::function<void(const std::string&)>;
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  struct Limits {
    int burst = 10;                            // lines logged back to back
    std::chrono::milliseconds interval{1000};  // then one line per interval
  };

  // The operations counted, in the order user.objfs.stats lists them; anything else counts as
  // "other".
  static constexpr std::array<std::string_view, 30> kOperations = {
      "lookup",      "getattr",  "setattr",         "readlink", "mknod",     "mkdir",
      "unlink",      "rmdir",    "symlink",         "rename",   "open",      "read",
      "write",       "flush",    "release",         "fsync",    "opendir",   "readdir",
      "readdirplus", "fsyncdir", "statfs",          "setxattr", "getxattr",  "listxattr",
      "removexattr", "create",   "copy_file_range", "lseek",    "fallocate", "other"};

  explicit ReplyLog(Sink sink) : ReplyLog(std::move(sink), Limits{}, nullptr) {}
  ReplyLog(Sink sink, Limits limits, Now now);

  // True for the answers tools ask for routinely: not counted, not logged.
  static bool Expected(std::string_view op, int err);

  // A reply of `op` failed with `err` (a positive errno) for `why`. `where` names the file (it
  // is called only when the line is logged: finding a path costs a lookup).
  void Record(std::string_view op, int err, const std::function<std::string()>& where,
              std::string_view why);

  // Failed replies of `op` so far.
  uint64_t failures(std::string_view op) const;
  // "failed_<op>=N" lines, one for each of kOperations, in that order.
  std::string ToText() const;

 private:
  static size_t IndexOf(std::string_view op);
  // Whether a line may be logged now; counts the ones that may not.
  bool TakeToken(uint64_t* suppressed_before);

  Sink sink_;
  Limits limits_;
  Now now_;
  std::array<std::atomic<uint64_t>, kOperations.size()> counts_{};
  Mutex mu_;  // lock 20 of fs/lock_order.h
  double tokens_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point last_refill_ GUARDED_BY(mu_);
  uint64_t suppressed_ GUARDED_BY(mu_) = 0;
};

}  // namespace objfs
