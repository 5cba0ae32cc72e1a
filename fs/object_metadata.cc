#include "fs/object_metadata.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>

namespace objfs {

namespace {

template <typename T>
std::optional<T> ParseUnsigned(std::string_view text) {
  T value = 0;
  if (text.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<std::string_view> Find(const Metadata& metadata, const char* name) {
  auto it = metadata.find(name);
  if (it == metadata.end()) return std::nullopt;
  return std::string_view(it->second);
}

}  // namespace

std::optional<int64_t> ParseMtime(std::string_view text) {
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  const size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  // Digits only: from_chars would take a second sign.
  if (whole.empty() || whole[0] < '0' || whole[0] > '9') return std::nullopt;
  auto secs = ParseUnsigned<uint64_t>(whole);
  if (!secs) return std::nullopt;
  uint64_t ns = 0;
  if (dot != std::string_view::npos) {
    std::string_view frac = text.substr(dot + 1);
    if (frac.empty()) return std::nullopt;
    uint64_t scale = 100000000;
    for (char c : frac) {
      if (c < '0' || c > '9') return std::nullopt;
      ns += static_cast<uint64_t>(c - '0') * scale;
      scale /= 10;
    }
  }
  // Another writer's value past what 64-bit nanoseconds hold (1677 to 2262) is malformed, not
  // wrapped round to another date.
  constexpr uint64_t kLargest = static_cast<uint64_t>(INT64_MAX);
  const uint64_t limit = negative ? kLargest + 1 : kLargest;
  if (*secs > limit / 1000000000) return std::nullopt;
  const uint64_t total = *secs * 1000000000 + ns;  // below 2^64: secs is at most 9223372036
  if (total > limit) return std::nullopt;
  if (!negative) return static_cast<int64_t>(total);
  return total == kLargest + 1 ? INT64_MIN : -static_cast<int64_t>(total);
}

std::string FormatMtime(int64_t mtime_ns) {
  // Sign and magnitude, so that ParseMtime reads back the same value for times before 1970.
  bool negative = mtime_ns < 0;
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(mtime_ns) : mtime_ns;
  uint64_t secs = magnitude / 1000000000;
  uint64_t ns = magnitude % 1000000000;
  std::string out = negative ? "-" : "";
  if (ns == 0) return out + std::to_string(secs);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%llu.%09llu", static_cast<unsigned long long>(secs),
                static_cast<unsigned long long>(ns));
  return out + buf;
}

size_t MetadataSize(const Metadata& metadata) {
  // "-9223372036.854775808": the longest mtime FormatMtime writes.
  constexpr size_t kLongestMtime = 21;
  size_t total = 0;
  for (const auto& [name, value] : metadata) {
    if (IsHeaderMetadata(name)) continue;  // headers of their own, not user metadata
    total += name.size();
    const bool time = name == kMtimeMetadata || name == kAtimeMetadata || name == kCtimeMetadata;
    total += time ? std::max(value.size(), kLongestMtime) : value.size();
  }
  return total;
}

bool IsPermanentRefusal(const Status& status) {
  if (status.code() != StatusCode::kInvalidArgument) return false;
  // Only what says the request itself is refused: S3's MetadataTooLarge and InvalidArgument,
  // and a 400 without any error code (RGW's answer to metadata over its limit). Anything
  // else with a code (ExpiredToken, OperationAborted, a redirect, a damaged body) may pass
  // on a later try, and a change is never dropped for it.
  const std::string& code = status.server_code();
  return code == "MetadataTooLarge" || code == "InvalidArgument" || code.empty();
}

uint64_t ParseRdev(const Metadata& metadata) {
  auto v = Find(metadata, kRdevMetadata);
  return v ? ParseUnsigned<uint64_t>(*v).value_or(0) : 0;
}

PosixMetadata ParsePosixMetadata(const Metadata& metadata) {
  PosixMetadata out;
  if (auto v = Find(metadata, kModeMetadata)) out.mode = ParseUnsigned<uint32_t>(*v);
  // (uid_t)-1 is no account's: chown's "leave it as it is". The mount's own shows instead.
  auto owner = [](std::string_view text) -> std::optional<uint32_t> {
    std::optional<uint32_t> id = ParseUnsigned<uint32_t>(text);
    if (id == UINT32_MAX) return std::nullopt;
    return id;
  };
  if (auto v = Find(metadata, kUidMetadata)) out.uid = owner(*v);
  if (auto v = Find(metadata, kGidMetadata)) out.gid = owner(*v);
  if (auto v = Find(metadata, kMtimeMetadata)) out.mtime_ns = ParseMtime(*v);
  return out;
}

StoredTimes StoredTimesOf(const Metadata& metadata, int64_t mtime_ns) {
  StoredTimes out{mtime_ns, mtime_ns};
  if (auto v = Find(metadata, kAtimeMetadata)) out.atime_ns = ParseMtime(*v).value_or(mtime_ns);
  if (auto v = Find(metadata, kCtimeMetadata)) out.ctime_ns = ParseMtime(*v).value_or(mtime_ns);
  return out;
}

void SetPosixMetadata(uint32_t mode, uint32_t uid, uint32_t gid, int64_t mtime_ns,
                      Metadata* metadata) {
  (*metadata)[kModeMetadata] = std::to_string(mode);
  (*metadata)[kUidMetadata] = std::to_string(uid);
  (*metadata)[kGidMetadata] = std::to_string(gid);
  (*metadata)[kMtimeMetadata] = FormatMtime(mtime_ns);
}

Metadata WithoutPosixMetadata(const Metadata& metadata) {
  Metadata out = metadata;
  out.erase(kModeMetadata);
  out.erase(kUidMetadata);
  out.erase(kGidMetadata);
  out.erase(kMtimeMetadata);
  return out;
}

}  // namespace objfs
