// The records objfs keeps in its cache directory between mounts.
//
// They are plain values: cache/codec.h turns each into a compact, checksummed binary form and
// cache/store_db.h keeps them in per-type logs. A record is only ever a hint: every one of them
// can be recomputed or re-fetched, so a record that does not decode is dropped, never trusted.
#pragma once

#include <array>
#include <cstdint>
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

// The attributes of an object, kept so that a new mount does not start with a cold stat cache.
struct ObjectMetaRecord {
  std::string key;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  ETag etag;  // persisted as its kind and its text; the text must parse back to the same kind
  uint32_t mode = 0;  // st_mode with type bits
  uint32_t uid = 0;
  uint32_t gid = 0;

  bool operator==(const ObjectMetaRecord& other) const {
    return key == other.key && size == other.size && mtime_ns == other.mtime_ns &&
           etag.kind() == other.etag.kind() && etag == other.etag && mode == other.mode &&
           uid == other.uid && gid == other.gid;
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
