#include "fs/reply_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

namespace objfs {

ReplyLog::ReplyLog(Sink sink, Limits limits, Now now)
    : sink_(std::move(sink)),
      limits_(limits),
      now_(now ? std::move(now) : Now([] { return std::chrono::steady_clock::now(); })),
      tokens_(limits.burst),
      last_refill_(now_()) {}

bool ReplyLog::Expected(std::string_view op, int err) {
  // Asking whether a name exists.
  if (op == "lookup") return err == ENOENT;
  // Asking for an attribute that is not there, the size of a value (ERANGE on a short buffer),
  // or for a namespace objfs does not keep (security.*, system.posix_acl_*: ls and cp ask).
  if (op == "getxattr" || op == "removexattr") {
    return err == ENODATA || err == ERANGE || err == EOPNOTSUPP;
  }
  if (op == "listxattr") return err == ERANGE;
  if (op == "setxattr") return err == EOPNOTSUPP;
  // Creating what exists: mkdir -p, lock files made with O_EXCL.
  if (op == "mkdir" || op == "create" || op == "mknod" || op == "symlink") return err == EEXIST;
  // The kernel falls back to reading and writing.
  if (op == "copy_file_range") return err == EXDEV || err == EOPNOTSUPP;
  // posix_fallocate falls back to writing zeros.
  if (op == "fallocate") return err == EOPNOTSUPP;
  return false;
}

size_t ReplyLog::IndexOf(std::string_view op) {
  for (size_t i = 0; i + 1 < kOperations.size(); ++i) {
    if (kOperations[i] == op) return i;
  }
  return kOperations.size() - 1;
}

bool ReplyLog::TakeToken(uint64_t* suppressed_before) {
  MutexLock lock(&mu_);
  const auto now = now_();
  if (limits_.interval.count() > 0 && now > last_refill_) {
    const double earned = std::chrono::duration<double>(now - last_refill_) /
                          std::chrono::duration<double>(limits_.interval);
    tokens_ = std::min<double>(limits_.burst, tokens_ + earned);
  }
  last_refill_ = now;
  if (tokens_ < 1) {
    ++suppressed_;
    return false;
  }
  tokens_ -= 1;
  *suppressed_before = std::exchange(suppressed_, 0);
  return true;
}

void ReplyLog::Record(std::string_view op, int err, const std::function<std::string()>& where,
                      std::string_view why) {
  if (Expected(op, err)) return;
  counts_[IndexOf(op)].fetch_add(1, std::memory_order_relaxed);
  uint64_t suppressed = 0;
  if (!TakeToken(&suppressed) || !sink_) return;
  std::string line(op);
  const std::string path = where ? where() : std::string();
  if (!path.empty()) {
    line += " ";
    line += path;
  }
  line += ": ";
  const char* name = strerrorname_np(err);
  line += name != nullptr ? name : std::to_string(err);
  line += " (";
  line += std::strerror(err);
  line += ")";
  if (!why.empty()) {
    line += ": ";
    line += why;
  }
  if (suppressed > 0) {
    line += " [" + std::to_string(suppressed) + " failed " +
            (suppressed == 1 ? "reply" : "replies") + " before this one not logged]";
  }
  sink_(line);
}

uint64_t ReplyLog::failures(std::string_view op) const {
  return counts_[IndexOf(op)].load(std::memory_order_relaxed);
}

std::string ReplyLog::ToText() const {
  std::string text;
  for (size_t i = 0; i < kOperations.size(); ++i) {
    text += "failed_";
    text += kOperations[i];
    text += "=";
    text += std::to_string(counts_[i].load(std::memory_order_relaxed));
    text += "\n";
  }
  return text;
}

}  // namespace objfs
