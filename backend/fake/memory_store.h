// An in-memory ObjectStore for unit tests of the layers above the backends.
//
// It behaves like a strict S3 bucket: plain MD5 ETags for single puts, "<md5 of part md5s>-N"
// ETags for puts above its multipart threshold, If-Match honoured on read/put/copy, listings
// with prefix, delimiter and continuation, copies that keep or replace metadata. It passes the
// same conformance suite as the real backends (tests/conformance/), so a test that passes
// over it has not merely passed over a lenient double.
//
// With MemoryStoreOptions::native_etags false it behaves like the SFTP store instead: head() and
// list() report each object's version (VersionTag(size, mtime), backend/object_version.h) as its
// ETag, If-Match is checked against that version, put() returns the content MD5 of what it
// stored, copy() returns the source's ETag when that is a plain MD5 and no ETag otherwise, and
// capabilities().native_etags is false. The SFTP store's other traits are options of their own
// (native_rename, attributes_by_copy, stores_owner), so that the filesystem's SFTP-only paths
// run over the fake too.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "backend/mutex.h"
#include "backend/object_store.h"

namespace objfs {

struct MemoryStoreOptions {
  uint64_t multipart_threshold = 8 << 20;  // puts above this get a "-N" ETag
  uint64_t part_size = 5 << 20;
  uint64_t copy_part_threshold = 64 << 20;  // copies above this get a "-N" ETag
  int max_keys_per_page = 1000;             // caps ListOptions::max_keys
  bool native_etags = true;                 // false: versions instead of ETags, as SFTP
  // As S3Store on RGW, which ignores x-amz-copy-source-if-match: a copy whose caller said
  // source_known_current is made even from a changed source, and then fails with
  // PreconditionFailed if the source's ETag was a plain MD5.
  bool copy_ignores_source_condition = false;
  // Above 0: puts and copies whose user metadata (names and values) takes more bytes are
  // refused with InvalidArgument [MetadataTooLarge], as S3 does above 2 KiB.
  size_t max_metadata = 0;
  // Reported in capabilities() (0: no limit); puts are not checked against it.
  uint64_t max_object_size = 0;
  // Reported in capabilities(): parts of one upload to send at once (0: the mount's default).
  size_t parts_in_flight = 0;
  // As SFTP's posix-rename: rename() moves a file, or a directory with every key under it, in
  // one step, keeping content, metadata, mtime and version; it replaces a file or an empty
  // directory at the target. False: rename() is Unsupported, as on S3.
  bool native_rename = false;
  // Reported in capabilities(): set_attributes() rewrites the object, as S3's self-copy does
  // (false: in place, as SFTP's SETSTAT). Either way it gives the object a new mtime and, with
  // native ETags, the ETag such a copy gets.
  bool attributes_by_copy = true;
  // Reported in capabilities(): puts keep the "uid" and "gid" they are given (S3); SFTP's
  // server decides who owns a new file.
  bool stores_owner = true;
  // start_upload() gives sessions (false: Unsupported, as on a store without them), and their
  // copy() copies ranges of existing objects (false: Unsupported, as on an SFTP server without
  // copy-data). With native ETags a session takes whole parts only, as S3 does, and its object
  // gets the "-N" ETag of those parts.
  bool upload_sessions = true;
  bool copy_ranges = true;
  // Reported in capabilities(): puts keep the mode of a FIFO, socket or device (S3); SFTP
  // cannot make such files.
  bool special_files = true;
  // Reported in capabilities(): keys are UTF-8, as on S3 (false: any bytes, as SFTP's names).
  bool utf8_keys = true;
  // Reported in capabilities(): user extended attributes are kept in the metadata, as on S3
  // (false: there is nowhere to keep them, as on SFTP).
  bool user_xattrs = true;
};

class MemoryStore : public ObjectStore {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {});

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
  Status rename(std::string_view from, std::string_view to) override;
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;
  Capabilities capabilities() const override;
  std::string describe() const override { return "memory://"; }

  // Test helpers: the stored bytes of `key` (empty when missing) and the number of objects.
  std::string contents(std::string_view key) const;
  size_t object_count() const;
  // Sets the stored mtime of `key` (ns), as if written at that time.
  void set_mtime(std::string_view key, int64_t mtime_ns);
  // Upload sessions started and neither completed nor aborted yet (S3 would list them).
  int uploads_in_progress() const { return uploads_in_progress_.load(); }

 private:
  class MemoryUpload;
  struct Object {
    std::string data;
    ObjectInfo info;
  };

  // A fresh mtime: the current time, or one ns past the last one given if the clock has not
  // moved, so that every write in this store has a distinct, increasing mtime.
  int64_t NextMtimeLocked() REQUIRES(mu_);
  // The ETag S3 gives an object of `data` written in parts of part_size (or in one piece when
  // `multipart` is false).
  ETag ETagOf(std::string_view data, bool multipart) const;
  // The "-N" ETag of `data` uploaded in parts of `part_size`.
  static ETag PartsETag(std::string_view data, uint64_t part_size);
  // The ETag head() and list() report and If-Match is checked against: the object's ETag, or
  // its version without native ETags.
  ETag CurrentETag(const Object& object) const;

  MemoryStoreOptions options_;
  mutable Mutex mu_;  // lock 22 of fs/lock_order.h
  std::map<std::string, Object, std::less<>> objects_ GUARDED_BY(mu_);
  int64_t last_mtime_ns_ GUARDED_BY(mu_) = 0;
  std::atomic<int> uploads_in_progress_{0};
};

}  // namespace objfs
