// Content ETags for a store without native ETags (SFTP), kept on this machine.
//
// An SFTP server has no ETags, and objfs writes nothing to it but the files themselves. This
// wrapper keeps the MD5 of each file's content in a ContentETagRecord of the StoreDb (in the
// mount's cache directory), valid while the file keeps the size and mtime it was recorded for:
// - put() records the MD5 the inner store computed while uploading;
// - copy() records the source's MD5 for the destination: nothing is re-hashed. A copy of a
//   file whose MD5 is not known yet is remembered (in memory, until either file is written,
//   renamed or removed) with both versions, so the MD5 computed first for either of the two
//   serves the other too while both keep their versions: the bytes are hashed once;
// - set_attributes() keeps the bytes: the MD5 known for the version it changed is recorded for
//   the version it leaves;
// - an upload session's complete() records the MD5 its inner session computed, if any;
// - remove() / remove_many() drop the records;
// - head() and list() report the recorded MD5 as the ETag when the record still matches the
//   object, and the inner store's version (backend/object_version.h) otherwise; a record that no
//   longer matches (the file was changed by something other than objfs) is dropped;
// - ContentEtag() computes a missing MD5 by reading the whole object in large reads.
//
// Preconditions: the inner store checks If-Match against its version (size and mtime), which
// costs nothing extra. An MD5 given as If-Match here, or as a copy source's ETag, is translated
// to the version its record was made for, so an object replaced since the MD5 was seen fails
// with PreconditionFailed (and an MD5 without a current record fails too); any other ETag is
// passed on unchanged.
//
// The ETags this store reports are therefore either a content MD5 or an opaque version. Only
// the MD5 may be shown to users: the filesystem asks ContentEtag() for "user.etag".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "cache/records.h"
#include "cache/store_db.h"

namespace objfs {

class ContentEtagStore : public ForwardingStore {
 public:
  // SFTP mtimes have whole seconds: a file hashed within the second it was written in could be
  // rewritten at the same size and second without its version changing. Such an MD5 is
  // returned but not recorded (as git treats "racily clean" index entries).
  static constexpr int64_t kRacyNs = 2'000'000'000;

  // Nanoseconds since the epoch, as the server's mtimes count them (tests pass a fake).
  using WallClock = std::function<int64_t()>;

  // `metrics` may be null; it must outlive the store. `inner` is a store without native ETags
  // whose ETags are versions (SftpStore, or MemoryStore with native_etags false).
  // A file hashed by ContentEtag() whose mtime was less than `racy_ns` old when the hashing
  // began is not recorded. `wall_clock`: empty for the system's.
  ContentEtagStore(std::shared_ptr<ObjectStore> inner, std::shared_ptr<StoreDb> db,
                   Metrics* metrics, int64_t racy_ns = kRacyNs, WallClock wall_clock = {});

  // Bytes read per call while hashing.
  static constexpr size_t kHashReadBytes = 4u << 20;

  Result<ObjectInfo> head(std::string_view key) override;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;
  Result<Listing> list(const ListOptions& options) override;
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override;
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override;
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override;
  Status remove_many(const std::vector<std::string>& keys) override;
  // Moves the record of a file along with it (rename keeps size and mtime). Records of the
  // files in a renamed directory are not moved: those files are hashed again when asked.
  Status rename(std::string_view from, std::string_view to) override;
  // An MD5 as a copied base's ETag is translated to the version it was recorded for, as for
  // copy(); complete() records the MD5 the inner session computed (it hashed every byte in
  // order), and reports the object's version otherwise: an edit's MD5 is never guessed.
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;

  // The MD5 of the content of `key`: from its record when that still matches the object,
  // else computed by reading the object in reads of kHashReadBytes (counted in
  // metrics->bytes_hashed) and recorded. InvalidArgument for a directory marker.
  Result<ETag> ContentEtag(std::string_view key);

 private:
  class Session;

  // The record of `key` if it describes an object of this size and mtime; a record that does
  // not is removed.
  std::optional<ContentETagRecord> ValidRecord(std::string_view key, uint64_t size,
                                               int64_t mtime_ns);
  // Replaces the inner version in `info` with the recorded MD5, when there is a valid record.
  void FillETag(ObjectInfo& info);
  // The ETag to give the inner store for `etag` as an If-Match on `key`: an MD5 becomes the
  // version of its record (PreconditionFailed without one), anything else stays.
  Result<ETag> InnerETag(std::string_view key, const ETag& etag, std::string_view what);
  // Persists the record; false when it could not be written.
  bool Record(const std::string& key, uint64_t size, int64_t mtime_ns, const ETag& md5);
  void Forget(std::string_view key);
  // Records `md5`, just computed for `key` at `version`, for the files copied from or to it
  // (and from or to those, and so on) that still have the versions the copies left them with.
  void ShareWithCopies(const std::string& key, const ETag& version, const ETag& md5);
  // The MD5 of a file that `key` (at `version`) was copied from or to, from its record, while
  // both still have the versions the copy left them with.
  std::optional<ETag> FromCopies(const std::string& key, const ETag& version);
  // `key` was removed: its record and what is known of its copies go.
  void ForgetRemoved(std::string_view key);
  // Drops what is known of copies from or to `key`: it was written, renamed or removed.
  void ForgetCopies(std::string_view key);
  static constexpr size_t kMaxCopies = 1 << 16;

  // A copy of a file whose MD5 was unknown: `other` holds the same bytes while `key` (the map's
  // key) has `version` and `other` has `other_version`.
  struct Copy {
    ETag version;
    std::string other;
    ETag other_version;
  };

  std::shared_ptr<ObjectStore> inner_;
  std::shared_ptr<StoreDb> db_;
  Metrics* metrics_;
  const int64_t racy_ns_;
  const WallClock wall_clock_;
  // Serialises each read-check-write of a record against writes of the same key's record
  // (the records are in db_, whose own lock is taken under this one). Lock 9 of
  // fs/lock_order.h.
  Mutex records_mu_;
  Mutex copies_mu_;  // lock 13 of fs/lock_order.h
  std::multimap<std::string, Copy> copies_ GUARDED_BY(copies_mu_);
};

}  // namespace objfs
