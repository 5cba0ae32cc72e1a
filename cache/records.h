// The records objfs keeps in its cache directory between mounts.
//
// They are plain values: cache/codec.h turns each into a compact, checksummed binary form and
// cache/store_db.h keeps them in per-type logs. A record is only ever a hint: every one of them
// can be recomputed or re-fetched, so a record that does not decode is dropped, never trusted.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "backend/etag.h"

namespace objfs {

// The MD5 of a file's content, computed by objfs for backends without ETags (SFTP). It is valid
// only while the file's path, size and mtime are all unchanged.
struct ContentETagRecord {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::array<uint8_t, 16> md5{};

  bool operator==(const ContentETagRecord&) const = default;
};

// What a HEAD said of an S3 object's metadata, with the size, ETag and LastModified its
// listing shows, so that a new mount's `ls -l` needs no HEAD for an object that a listing shows
// unchanged (an S3 listing has no metadata; any change of it rewrites the object).
struct ObjectMetaRecord {
  std::string key;
  uint64_t size = 0;
  int64_t listed_ns = 0;    // LastModified as the listing gave it (to millisecond on RGW)
  int64_t modified_ns = 0;  // LastModified as the HEAD gave it (whole seconds on S3)
  std::map<std::string, std::string> metadata;  // user metadata: mode, uid, gid, mtime, xattrs
  ETag etag;  // persisted as its kind and its text; the text must parse back to the same kind

  bool operator==(const ObjectMetaRecord& other) const {
    return key == other.key && size == other.size && listed_ns == other.listed_ns &&
           modified_ns == other.modified_ns && metadata == other.metadata &&
           etag.kind() == other.etag.kind() && etag == other.etag;
  }
};

// What a staging file holds, so that data written before a crash can be uploaded at the next
// mount. `md5` is meaningful only when `has_md5`; it decodes as zeros otherwise.
struct StagedUploadRecord {
  std::string key;
  uint64_t size = 0;
  int64_t staged_ns = 0;
  std::array<uint8_t, 16> md5{};
  bool has_md5 = false;

  bool operator==(const StagedUploadRecord&) const = default;
};

// The removal of the record of type `record_tag` (a codec's kTag) stored under `key`. Only the
// store writes these, into the same log as the records they remove.
struct TombstoneRecord {
  uint8_t record_tag = 0;
  std::string key;

  bool operator==(const TombstoneRecord&) const = default;
};

}  // namespace objfs
