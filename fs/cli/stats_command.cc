#include "fs/cli/stats_command.h"

#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "fs/xattr.h"

namespace objfs {
namespace {

std::vector<std::pair<std::string, uint64_t>> ParseCounters(const std::string& stats) {
  std::vector<std::pair<std::string, uint64_t>> counters;
  size_t start = 0;
  while (start < stats.size()) {
    size_t end = stats.find('\n', start);
    if (end == std::string::npos) end = stats.size();
    const std::string line = stats.substr(start, end - start);
    start = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    counters.emplace_back(line.substr(0, eq), std::strtoull(line.c_str() + eq + 1, nullptr, 10));
  }
  return counters;
}

// "12345678 (11.8 MiB)"; under 1 KiB just the number.
std::string Bytes(uint64_t n) {
  if (n < 1024) return std::to_string(n);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(n) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, "%llu (%.1f %s)", static_cast<unsigned long long>(n), value,
                units[unit]);
  return text;
}

bool IsBytes(std::string_view name) { return name.find("bytes") != std::string_view::npos; }

}  // namespace

std::string FormatStats(const std::string& stats) {
  const auto counters = ParseCounters(stats);
  auto value = [&counters](std::string_view name) -> uint64_t {
    for (const auto& [n, v] : counters) {
      if (n == name) return v;
    }
    return 0;
  };
  std::string out;
  auto row = [&out](std::string_view label, const std::string& text) {
    out += label;
    out += std::string(label.size() < 24 ? 24 - label.size() : 1, ' ');
    out += text;
    out += '\n';
  };
  // A file being written or uploaded is counted without its bytes: its lock is not waited for.
  const uint64_t busy = value("pending_upload_busy_files");
  row("pending uploads:",
      std::to_string(value("pending_upload_files")) + " files, " +
          Bytes(value("pending_upload_bytes")) + " bytes" +
          (busy == 0 ? std::string()
                     : " (not counting " + std::to_string(busy) + " being written or uploaded)"));
  row("staged in cache_dir:", Bytes(value("staged_bytes")) + " bytes");
  row("requests in flight:", std::to_string(value("in_flight_requests")));
  row("open files:", std::to_string(value("open_files")));
  row("uploads left on server:", std::to_string(value("abandoned_uploads")) +
                                     " (aborts that failed; cleared once it answers)");
  std::string failed;
  uint64_t failed_total = 0;
  for (const auto& [name, v] : counters) {
    if (name.rfind("failed_", 0) != 0 || name == "failed_requests" || v == 0) continue;
    if (!failed.empty()) failed += ", ";
    failed += name.substr(7) + " " + std::to_string(v);
    failed_total += v;
  }
  row("failed operations:", failed_total == 0 ? "none" : failed);
  row("failed requests:", std::to_string(value("failed_requests")) + " (retries " +
                              std::to_string(value("retries")) + ")");
  out += "\ncounters:\n";
  size_t width = 0;
  for (const auto& [name, v] : counters) width = std::max(width, name.size());
  for (const auto& [name, v] : counters) {
    out += "  " + name + std::string(width + 2 - name.size(), ' ');
    out += IsBytes(name) ? Bytes(v) : std::to_string(v);
    out += '\n';
  }
  return out;
}

int RunStats(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') {
    std::fprintf(stderr, "usage: objfs stats MOUNTPOINT\n");
    return 2;
  }
  const std::string& path = args[0];
  // The counters may grow between the size probe and the read: retry with more room.
  std::string value(4096, '\0');
  for (int attempt = 0;; ++attempt) {
    const ssize_t n = ::getxattr(path.c_str(), kStatsXattr, value.data(), value.size());
    if (n >= 0) {
      value.resize(static_cast<size_t>(n));
      break;
    }
    const int err = errno;
    if (err == ERANGE && attempt < 4) {
      value.resize(value.size() * 4);
      continue;
    }
    if (err == ENODATA || err == ENOTSUP) {
      std::fprintf(stderr, "objfs: '%s' is not the root of an objfs mount\n", path.c_str());
    } else {
      std::fprintf(stderr, "objfs: cannot read the counters of '%s': %s\n", path.c_str(),
                   std::strerror(err));
    }
    return 1;
  }
  std::fputs(FormatStats(value).c_str(), stdout);
  return 0;
}

}  // namespace objfs
