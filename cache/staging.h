// Local files that hold a file's content between its first write and its upload.
//
// Object stores only take whole objects, so random writes, appends and truncates go to a
// staging file that is uploaded in one put at flush/release. A staging file "N.data" that holds
// data the store lacks has a crash record "N.meta" (a StagedUploadRecord in its codec,
// cache/codec.h) naming its key, the metadata of the upload and its state:
// - none while the file is only a copy of the stored object (being fetched for writing, or kept
//   for open handles after an upload): the next mount deletes such data;
// - kWriting once a writer changed it: the next mount sets it aside in "unfinished/" and names
//   it in the log, but never uploads it, since no close or fsync vouched for it;
// - kAccepted once close(2), fsync(2) or the write-back window accepted it (MarkAccepted, after
//   the data is on disk): the next mount uploads it (Leftovers()).
//
// A file staged from a stored object is sparse: it has a base (that object's key, ETag and
// size) and starts as a hole of the object's size. Only what a read or an upload needs is
// fetched into it (FillBase); `present` says which ranges hold the file's bytes (fetched or
// written). Bytes at or past base_limit (the smallest size the file was truncated to since it
// was staged) are not the base's: zeros or written bytes. So a byte is known locally when it is
// present or at or past base_limit; the others are the base's, and the record names the base
// and the ranges so that a crash can still complete the data from it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/disk_reserve.h"
#include "cache/extent_set.h"
#include "cache/records.h"

namespace objfs {

class StagedFile {
 public:
  ~StagedFile();  // closes the descriptor; the files stay unless Remove() was called
  StagedFile(const StagedFile&) = delete;
  StagedFile& operator=(const StagedFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& data_path() const { return data_path_; }

  // Reads up to buf.size() bytes at offset (short only at the end).
  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> buf) const;
  // Writes all of `data` at offset, growing the file as needed. The bytes that take new space
  // (past the end, or where a sparse file lacks its base's) are taken from the area's
  // DiskReserve first: NoSpace, nothing written, when it refuses them.
  Status WriteAt(uint64_t offset, std::span<const std::byte> data);
  Status Truncate(uint64_t size);
  // Flushes the data to disk (fdatasync), unless nothing was written since the last Sync.
  Status Sync();
  using State = StagedUploadRecord::State;
  // Records the data as being written under `key` (see the top of this file). Rewrites the
  // record only when key, metadata or state change. On failure (a full disk) the previous
  // record stays.
  Status MarkWriting(std::string_view key, const Metadata& metadata);
  // Records the data, as it is now, as accepted by close, fsync or the write-back window, and
  // names its size. With `sync` the data reaches the disk first, so that a record never vouches
  // for data a power loss took; without it (a close about to upload, which the record only
  // guards against objfs dying in the middle) a power loss may leave data of another size,
  // which the size in the record then refuses.
  Status MarkAccepted(std::string_view key, const Metadata& metadata, bool sync = true);
  // Rewrites the record with a new key and metadata, keeping its state (a rename, a chmod of a
  // pending file). Does nothing when there is no record.
  Status Describe(std::string_view key, const Metadata& metadata);
  // The encryption at rest of the object the data came from (S3), for the record: what the next
  // mount's upload keeps, even under a name the data was renamed to first. Rewrites the record,
  // if there is one, when it changes; when that fails, the next write of the record says it.
  // Unset: not known.
  Status SetEncryption(const std::optional<AtRestEncryption>& encryption);
  const std::optional<AtRestEncryption>& encryption() const { return encryption_; }
  // What the upload of the data as `key` requires of that key (an edit's version, a name
  // created here): each record written from now on that names `key` says it, so that the next
  // mount's upload asks the same; one naming another key (after a rename) says none.
  void SetCondition(std::string_view key, UploadCondition condition);
  // The condition a record naming `key` says.
  UploadCondition ConditionOf(std::string_view key) const {
    return key == condition_key_ ? condition_ : UploadCondition{};
  }
  // The state of the record; nullopt when there is none.
  std::optional<State> state() const { return state_; }
  // A source over the current content, for ObjectStore::put. Valid while this file lives and
  // is not written. Only whole when no base bytes are missing (MissingBase).
  FileSource Source() const { return FileSource(fd_, size_); }

  // ---- Sparse files (see the top of this file) ----

  // Makes this (new, empty) file a hole of `size` bytes whose content is the object `key` with
  // ETag `etag` (the base), none of it fetched yet.
  Status SetBase(std::string_view key, const ETag& etag, uint64_t size);
  // The store now holds this file's content as the object `key` with ETag `etag` (an upload
  // that copied the bytes still missing here on the server): they are that object's from now on.
  void Rebase(std::string_view key, const ETag& etag);
  // Some bytes are still the base's and not local.
  bool has_base() const { return !base_key_.empty(); }
  const std::string& base_key() const { return base_key_; }
  const ETag& base_etag() const { return base_etag_; }
  uint64_t base_size() const { return base_size_; }
  uint64_t base_limit() const { return base_limit_; }
  const ExtentSet& present() const { return present_; }
  // The sub-ranges of [offset, offset+length) whose bytes are the base's and not local yet.
  std::vector<ExtentSet::Range> MissingBase(uint64_t offset, uint64_t length) const;
  // Stores `data`, the base's bytes at `offset`, where they are still missing (never over a
  // written byte), and counts them as present. Once nothing is missing the file forgets its
  // base. The bytes stored are taken from the area's DiskReserve first.
  Status FillBase(uint64_t offset, std::span<const std::byte> data);
  // Deletes the data file and its sidecar (after a successful upload).
  void Remove();
  // Deletes only the sidecar, so that a crash leaves nothing to upload: for data that must no
  // longer reach the store (its file was removed or replaced, or the store has it) but is
  // still open. Returns the state it had, for Restore().
  std::optional<State> Orphan();
  // Writes the record again as it was before Orphan() (`state`; nothing for nullopt).
  Status Restore(std::optional<State> state);

 private:
  friend class StagingArea;
  StagedFile(int fd, std::string data_path, std::string meta_path, uint64_t size);
  // Cuts the data file back to size_ if a failed write left bytes past it (stale_tail_).
  Status CutStaleTail();
  // The bytes of [start, end), below size_, that a write there would newly allocate: the holes
  // in it, in whole blocks of `block` bytes.
  uint64_t NewSpaceWithin(uint64_t start, uint64_t end, uint64_t block) const;

  int fd_;
  std::shared_ptr<DiskReserve> reserve_;  // the area's; null: none
  std::string data_path_;
  std::string meta_path_;
  uint64_t size_;
  bool removed_ = false;
  std::string described_;       // the sidecar's current bytes
  bool synced_ = true;          // nothing written since the last Sync()
  std::optional<State> state_;  // the sidecar's state; nullopt: no sidecar
  std::string key_;             // what the sidecar says (or said, before Orphan())
  Metadata metadata_;
  std::optional<AtRestEncryption> encryption_;
  std::string condition_key_;  // SetCondition
  UploadCondition condition_;
  std::string base_key_;  // empty: the file holds all of its bytes
  ETag base_etag_;
  uint64_t base_size_ = 0;
  uint64_t base_limit_ = 0;
  ExtentSet present_;
  // A failed write left bytes past size_ that could not be cut off: they go before the file
  // grows again, or they would read back as its content.
  bool stale_tail_ = false;

  // Forgets the base once every byte below base_limit is present.
  void ForgetBaseIfWhole();

  Status WriteRecord(std::string_view key, const Metadata& metadata, State state);
  StagedUploadRecord RecordOf(std::string_view key, const Metadata& metadata, State state) const;
};

// A metadata change (chmod, chown, utimens, setxattr) of a stored object that is not applied to
// the store yet: "N.attrs" (a PendingAttrsRecord in its codec) names the key, the ETag of the
// object it changes and the whole metadata the object is to carry, so that a crash before the
// change reaches the store applies it at the next mount.
class PendingAttrs {
 public:
  ~PendingAttrs();  // the record stays unless Remove() was called
  PendingAttrs(const PendingAttrs&) = delete;
  PendingAttrs& operator=(const PendingAttrs&) = delete;

  // Rewrites the record (a new file renamed into place). On failure the previous one stays.
  Status Describe(std::string_view key, const ETag& etag, const Metadata& metadata);
  // Deletes the record (the change reached the store, or no longer applies).
  void Remove();
  const std::string& path() const { return path_; }

 private:
  friend class StagingArea;
  explicit PendingAttrs(std::string path) : path_(std::move(path)) {}

  std::string path_;
  bool removed_ = false;
};

// A PendingAttrs record found at startup.
struct AttrsLeftover {
  std::string key;
  ETag etag;
  Metadata metadata;
  std::string path;
  int64_t changed_ns = 0;  // when the change was made (0: not known, in an older record)
};

// A staging file found at startup.
struct StagedLeftover {
  std::string key;
  Metadata metadata;
  std::string data_path;
  std::string meta_path;
  StagedUploadRecord::State state = StagedUploadRecord::State::kWriting;
  uint64_t size = 0;  // accepted size (kAccepted)
  // A sparse file's base and the ranges it held (see the top of this file); no base_key: whole.
  std::string base_key;
  ETag base_etag;
  uint64_t base_size = 0;
  uint64_t base_limit = 0;
  ExtentSet present;
  std::optional<AtRestEncryption> encryption;  // of the object the data came from (S3)
  UploadCondition condition;  // what its upload requires of `key` (none in an older record)
  // The data is what its writer's close, fsync or write-back window accepted, whole: the next
  // mount may upload it. Otherwise it is set aside (SetAside).
  bool publishable() const;
};

class StagingArea {
 public:
  // Uses (and creates) directory `dir`. Staged bytes leave `reserve` bytes free on its file
  // system beyond the blocks it keeps for root (cache/disk_reserve.h).
  static Result<std::unique_ptr<StagingArea>> Open(const std::string& dir, uint64_t reserve = 0);

  // A new, empty staging file, without a record (see the top of this file).
  Result<std::unique_ptr<StagedFile>> Create();
  // A new staging file holding the same bytes as `from` (a reflink where the file system has
  // them, else copied in the kernel: only its present ranges when it is sparse), with the same
  // base, without a record: the version a close accepted stays intact while a writer changes the
  // copy.
  Result<std::unique_ptr<StagedFile>> Clone(const StagedFile& from);
  // Moves the data of a leftover that must not be uploaded into "unfinished/" under a name made
  // from its key, deletes its record, and returns the new path.
  Result<std::string> SetAside(const StagedLeftover& left) const;
  // The same for the data of `file`, a staging file of this process that must not be uploaded
  // under `key`: on success `file` is removed (its descriptor stays open, its bytes are at the
  // returned path).
  Result<std::string> SetAside(StagedFile& file, std::string_view key) const;
  // Deletes the data and the record of a leftover that holds nothing to keep.
  Status Drop(const StagedLeftover& left) const;
  // Reopens the data of a publishable leftover as a staging file that keeps its record (key,
  // metadata, state kAccepted, base and present ranges): the next mount serves and uploads it
  // like a file closed and not uploaded yet.
  Result<std::unique_ptr<StagedFile>> Adopt(const StagedLeftover& left) const;

  // Whether `dir` holds a record of staged data or of a held metadata change (readable or
  // not): something the next mount over it uploads or applies, or sets aside. A directory that
  // cannot be listed counts as holding one.
  static bool HoldsRecords(const std::string& dir);

  // Staging files left by an earlier process, with a readable sidecar. The data files whose
  // sidecar does not decode (damaged, or cut short by a power loss) are left where they are
  // and named in `unreadable`. A sidecar whose data file is gone is removed and, where that
  // worked, given in `without_data` (its key and state where it decodes).
  Result<std::vector<StagedLeftover>> Leftovers(
      std::vector<std::string>* unreadable = nullptr,
      std::vector<StagedLeftover>* without_data = nullptr) const;

  // A new record of a pending metadata change.
  Result<std::unique_ptr<PendingAttrs>> CreateAttrs(std::string_view key, const ETag& etag,
                                                    const Metadata& metadata);
  // Records of pending metadata changes left by an earlier process. Unreadable ones, which
  // can never be applied, are deleted and named in `unreadable`.
  Result<std::vector<AttrsLeftover>> AttrsLeftovers(
      std::vector<std::string>* unreadable = nullptr) const;

  // Deletes staged data that no record names: copies an earlier process had uploaded and kept
  // only for handles then open, and data of files removed while open. Returns the bytes freed
  // (and the files deleted in `files`). Only before this process stages anything.
  Result<uint64_t> RemoveUnrecorded(size_t* files = nullptr) const;

  const std::string& dir() const { return dir_; }

 private:
  StagingArea(std::string dir, uint64_t reserve)
      : dir_(dir),
        reserve_(std::make_shared<DiskReserve>(DiskReserve::FreeSpaceOf(dir), reserve)) {}

  std::string dir_;
  std::shared_ptr<DiskReserve> reserve_;
  Mutex mu_;  // lock 6 of fs/lock_order.h
  uint64_t next_id_ GUARDED_BY(mu_) = 0;

  // A base name ("DIR/PID-N") no other file of this area uses yet.
  std::string NextBase();
};

// The records as objfs 0.1 wrote them, read so that what it staged or held is still uploaded
// or applied. A sidecar: first line the key, then "name=value" lines, each percent-encoded so
// that control characters, '%' and '=' survive. A held change: a first line with the ETag's
// text, then a sidecar.
bool DecodeLegacySidecar(std::string_view text, std::string* key, Metadata* metadata);
bool DecodeLegacyAttrsRecord(std::string_view text, std::string* key, ETag* etag,
                             Metadata* metadata);

}  // namespace objfs
