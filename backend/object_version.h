// The version of an object on a store without native ETags (SFTP): its size and mtime, written
// as an opaque ETag "v1-<size>-<mtime_ns>".
//
// Such a store reports this version as the ETag of head() and list(), and checks the If-Match
// of read(), put() and copy() against it (an fstat of the file being read costs no extra round
// trip). It says nothing about the content: it is never shown as a file's ETag. Content MD5s
// for these stores come from ContentEtagStore (cache/content_etag_store.h), which records them
// per version and translates an MD5 If-Match back to the version it was recorded for.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backend/etag.h"

namespace objfs {

inline ETag VersionTag(uint64_t size, int64_t mtime_ns) {
  return ETag::Parse("v1-" + std::to_string(size) + "-" + std::to_string(mtime_ns));
}

inline bool IsVersionTag(const ETag& etag) {
  return etag.kind() == ETag::Kind::kOpaque && etag.value().rfind("v1-", 0) == 0;
}

// How long after its mtime a size-and-mtime version (SFTP) is trusted to name one content. An
// SFTP mtime has whole seconds: a file rewritten with the same size within the second it was
// last written keeps its version, so blocks of a version that recent could be served for other
// bytes (git's "racily clean" index entries, the same problem). The margin also allows for a
// server clock a little ahead of this one.
inline constexpr int64_t kRecentVersionNs = 2'000'000'000;

// Whether data read at version `etag` may be kept and served as that version later (the disk
// cache's blocks, the kernel's pages): any ETag but a size-and-mtime version whose mtime is less
// than kRecentVersionNs ago.
inline bool SettledVersion(const ETag& etag) {
  if (!IsVersionTag(etag)) return true;
  const std::string& text = etag.value();
  const size_t dash = text.rfind('-');
  if (dash == std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long mtime_ns = std::strtoll(text.c_str() + dash + 1, &end, 10);
  if (errno != 0 || end == text.c_str() + dash + 1 || *end != '\0') return false;
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  return mtime_ns <= now_ns - kRecentVersionNs;
}

}  // namespace objfs
