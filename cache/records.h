// The records objfs keeps in its cache directory between mounts.
//
// They are plain values: cache/codec.h turns each into a compact, checksummed binary form.
// cache/store_db.h keeps the hints in per-type logs (ContentETagRecord, ObjectMetaRecord): each
// can be recomputed or re-fetched, so one that does not decode is dropped, never trusted.
// cache/staging.h keeps the others one file each, beside what they describe (StagedUploadRecord,
// PendingAttrsRecord): work a crash interrupted, redone at the next mount only when it decodes.
// cache/upload_records.h keeps OpenUploadRecord one file each too. cache/data_cache.h keeps
// DataBlockRecord in a log of its own, in the data cache's directory.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/etag.h"
#include "backend/object_store.h"

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

// What an upload requires of its key: the version an edit was made to (If-Match), or the name
// still free (If-None-Match: a file created there that must not replace one another client
// made meanwhile). Neither: it replaces whatever the key holds.
struct UploadCondition {
  std::optional<ETag> if_match{};
  bool if_none_match = false;

  bool operator==(const UploadCondition& other) const {
    return if_none_match == other.if_none_match &&
           if_match.has_value() == other.if_match.has_value() &&
           (!if_match ||
            (if_match->kind() == other.if_match->kind() && *if_match == *other.if_match));
  }
};

// What a staging file "N.data" is to become: the key it is uploaded to, the metadata the
// upload carries, and whether a crash may publish it. Kept beside the data as "N.meta" and
// rewritten when any of these changes (not on every write).
//
// Only data that close(2), fsync(2) or the write-back window accepted is ever uploaded by the
// next mount (kAccepted, and only while the data file still has `size` bytes). Data a writer
// had not finished (kWriting: open, written, never closed or synced since) is set aside in
// cache_dir and named in the log instead: a crash must never replace a complete object with a
// torn one. Records of objfs before 0.3 (version 2, and the text form) did not say which they
// were, and are treated as kWriting.
//
// A sparse staging file (version 4) also names its base: the object it was staged from (key,
// ETag, size), `base_limit` (the base's bytes at or past it are not the file's any more: it was
// truncated there since) and the ranges of the data file that hold the file's bytes (`present`:
// fetched or written). The bytes below base_limit outside them are the base's, fetched from it
// (with its ETag as if-match) before the data can be uploaded. No base_key: the data is whole.
//
// From version 5 it also names the encryption at rest (S3) of the object the data came from,
// where objfs knew it, so that the next mount keeps it even under a name the data was renamed
// to before its upload; unset: not known (the store asks the object the upload replaces).
//
// From version 6 it also names the condition of its upload (UploadCondition), as the mount that
// accepted the data asked it: the next mount asks the same.
struct StagedUploadRecord {
  enum class State : uint8_t { kWriting = 0, kAccepted = 1 };
  std::string key;
  std::map<std::string, std::string> metadata;
  State state = State::kWriting;
  uint64_t size = 0;       // the data's size when accepted (0 while kWriting)
  std::string base_key{};  // empty: not sparse
  ETag base_etag{};
  uint64_t base_size = 0;
  uint64_t base_limit = 0;
  std::vector<std::pair<uint64_t, uint64_t>> present{};  // [start, end), in order, disjoint
  std::optional<AtRestEncryption> encryption{};
  // What the upload of the accepted data requires of `key`, as the mount that accepted it
  // asked: the next mount's upload asks the same, and never replaces another client's change.
  UploadCondition condition{};

  bool operator==(const StagedUploadRecord& other) const {
    return key == other.key && metadata == other.metadata && state == other.state &&
           size == other.size && base_key == other.base_key &&
           base_etag.kind() == other.base_etag.kind() && base_etag == other.base_etag &&
           base_size == other.base_size && base_limit == other.base_limit &&
           present == other.present && encryption == other.encryption &&
           condition == other.condition;
  }
};

// A metadata change (chmod, chown, utimens, setxattr) of a stored object that is held back
// ("N.attrs"): the object's key, the ETag it had when the change was made (the change applies
// to that object only), and the whole metadata it is to carry.
struct PendingAttrsRecord {
  std::string key;
  ETag etag;
  std::map<std::string, std::string> metadata;
  // When the change was made, in ns since the epoch by this machine's clock (0: not known, in
  // a record of version 1). A change made elsewhere after it wins over it.
  int64_t changed_ns = 0;

  bool operator==(const PendingAttrsRecord& other) const {
    return key == other.key && etag.kind() == other.etag.kind() && etag == other.etag &&
           metadata == other.metadata && changed_ns == other.changed_ns;
  }
};

// An upload the server holds until it completes or is aborted (backend/upload_journal.h): an
// S3 multipart upload (`name` its key, `upload_id` its UploadId) or an SFTP upload's temporary
// file (`name` its path on the server, no `upload_id`). A mount that finds one left by a crash
// aborts or removes exactly that upload.
struct OpenUploadRecord {
  std::string name;
  std::string upload_id;

  bool operator==(const OpenUploadRecord&) const = default;
};

// One block of an object's data held by the disk cache (cache/data_cache.h): which object
// version and range it holds (at `offset` of the object version's file, "objects/<f[0..2]>/<f>")
// and the CRC32C of its bytes, checked on every read. `stamp` orders blocks for eviction across
// mounts (the larger, the more recently written or used).
struct DataBlockRecord {
  std::string name;  // the block's id: hex, derived from the mount's URL, key, ETag and offset
  std::string key;
  ETag etag;
  uint64_t offset = 0;      // a multiple of block_size
  uint32_t block_size = 0;  // the cache's block size when written
  uint32_t length = 0;      // block_size, or less for the object's last block
  uint32_t crc32c = 0;
  uint64_t stamp = 0;

  bool operator==(const DataBlockRecord& other) const {
    return name == other.name && key == other.key && etag.kind() == other.etag.kind() &&
           etag == other.etag && offset == other.offset && block_size == other.block_size &&
           length == other.length && crc32c == other.crc32c && stamp == other.stamp;
  }
};

// The removal of the record of type `record_tag` (a codec's kTag) stored under `key`. Only the
// store writes these, into the same log as the records they remove.
struct TombstoneRecord {
  uint8_t record_tag = 0;
  std::string key;

  bool operator==(const TombstoneRecord&) const = default;
};

}  // namespace objfs
