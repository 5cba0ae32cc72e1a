// The version of an object on a store without native ETags (SFTP): its size and mtime, written
// as an opaque ETag "v1-<size>-<mtime_ns>".
//
// Such a store reports this version as the ETag of head() and list(), and checks the If-Match
// of read(), put() and copy() against it (an fstat of the file being read costs no extra round
// trip). It says nothing about the content: it is never shown as a file's ETag. Content MD5s
// for these stores come from ContentEtagStore (cache/content_etag_store.h), which records them
// per version and translates an MD5 If-Match back to the version it was recorded for.
#pragma once

#include <cstdint>
#include <string>

#include "backend/etag.h"

namespace objfs {

inline ETag VersionTag(uint64_t size, int64_t mtime_ns) {
  return ETag::Parse("v1-" + std::to_string(size) + "-" + std::to_string(mtime_ns));
}

inline bool IsVersionTag(const ETag& etag) {
  return etag.kind() == ETag::Kind::kOpaque && etag.value().rfind("v1-", 0) == 0;
}

}  // namespace objfs
