// The write side of a mount's files: staging a file for writing, marking it dirty, uploading it,
// holding its metadata changes, and taking over what a crash left in cache_dir.
//
// Filesystem decides what a POSIX call means (which file, which handle, which errno); this part
// decides what that does to one file's local state and to the store. Its methods are the moves
// of Inode::FileState: Stage (kStored -> kCached), MarkDirty (-> kUnsaved), Upload and
// DeferUpload (kUnsaved -> kCached/kStored, now or after the write-back window), DropStaging
// (kCached -> kStored) and Discard (any -> kRemoved). Around them it owns the crash records of the
// staged files (cache/staging.h), the held metadata changes (fs/metadata_coalescer.h), the
// write-back queue and its thread (fs/writeback_queue.h), and the recovery of an earlier mount's
// leftovers. What it must keep whole: data that close, fsync or the write-back window accepted
// is uploaded or stays staged with a record naming it; data no close accepted is never uploaded
// over the object; a removed file is never uploaded.
//
// Threading: the methods that take an Inode& expect its mutex held (REQUIRES); the rest take the
// locks they need. Lock order: fs/lock_order.h.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/log.h"
#include "backend/metrics.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/clock.h"
#include "cache/extent_set.h"
#include "cache/meta_cache.h"
#include "cache/staging.h"
#include "fs/inode_table.h"
#include "fs/metadata_coalescer.h"
#include "fs/object_attrs.h"
#include "fs/streamed_upload.h"
#include "fs/writeback_queue.h"

namespace objfs {

class IoPool;

// One piece of an edited file assembled on the server (FileWriter's close of an edit): bytes
// [offset, offset + length) of the new object, copied from the same range of the base or
// uploaded from the staged file.
struct EditPiece {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool copy = false;
  bool operator==(const EditPiece&) const = default;
};

// The pieces of a file of `size` bytes edited from a base of `base_size`, where `touched`
// holds what changed since (writes; a truncate adds everything past its size), in order and
// covering [0, size):
// - whole_parts (S3): one piece per part of `part` bytes, copied when the base has all of it
//   untouched, else uploaded whole;
// - otherwise (SFTP): only the touched ranges (and what lies past the base) are uploaded, in
//   pieces of at most `part`; untouched ranges shorter than kMinEditCopy between them are
//   uploaded with them (a copy costs round trips), the others copied in pieces of at most
//   kEditCopyPiece.
inline constexpr uint64_t kMinEditCopy = 256 << 10;
inline constexpr uint64_t kEditCopyPiece = 64 << 20;
std::vector<EditPiece> EditPieces(const ExtentSet& touched, uint64_t base_size, uint64_t size,
                                  uint64_t part, bool whole_parts);

// Sets the encryption at rest of the object `inode`'s staged data came from, and says it in the
// crash records of its staged data, so that the next mount's upload keeps it too. A record that
// cannot be rewritten now (a full cache disk) says it at its next write; the error is returned.
Status SetStoredEncryption(Inode& inode, const std::optional<AtRestEncryption>& encryption)
    REQUIRES(inode.mu);

class FileWriter {
 public:
  struct Options {
    // Seconds between the close that leaves a file unsaved and its upload (0: close uploads);
    // FilesystemOptions::writeback.
    double writeback = 0;
    // Seconds a metadata change of a closed file may be held (0: never held). 0 for a store that
    // changes attributes in place.
    double hold_metadata = 0;
    // Bytes per read when an object is fetched for writing.
    size_t read_buffer = 1 << 20;
    // Runs the write-back thread (tests that drive UploadDue themselves turn it off).
    bool writeback_thread = true;
    // FilesystemOptions::clear_abandoned_uploads.
    std::function<void()> clear_abandoned_uploads;
    // The background upload set inode `ino`'s data aside: the kernel drops its pages,
    // attributes and entry (called without the inode's lock).
    std::function<void(uint64_t ino)> data_set_aside;
    // Files uploaded at once by the write-back thread and FlushAll.
    size_t upload_threads = 4;
    // Parts of one file being written sent at once while it is written (fs/streamed_upload.h),
    // and pieces of an edit; the store's Capabilities::parts_in_flight instead where it says
    // one. 0: files go up whole at close.
    size_t stream_parts_in_flight = 4;
    // Threads sending those parts, for all files (at least the store's parts_in_flight).
    size_t stream_threads = 4;
    // One line per problem found in the background.
    LogFunction log;
  };

  // Every pointer must outlive this. Starts the write-back thread when there is a window or a
  // metadata delay (and options.writeback_thread).
  FileWriter(ObjectStore* store, StagingArea* staging, InodeTable* inodes, MetaCache* meta_cache,
             const ObjectAttrs* attrs, Metrics* metrics, std::shared_ptr<Clock> clock,
             Options options);
  ~FileWriter();  // stops the write-back thread
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // ---- One file's transitions; REQUIRES: inode.mu held ----

  // kStored -> kCached: gives `inode` a staging file holding the object `key` described by
  // `rec` (or nothing when `empty`), unless it has one. A held metadata change rides along.
  // Nothing is fetched yet: the file is sparse, with the object as its base (cache/staging.h),
  // unless the object has no ETag to fetch it by later.
  Status Stage(Inode& inode, const std::string& key, const MetaRecord& rec, bool empty)
      REQUIRES(inode.mu);
  // Makes [offset, offset+length) of the staged file hold the file's bytes
  // (fetches what is still the base's, in bulk reads of read_buffer aligned to it, never over a
  // written byte). The base replaced or removed on the server since: an I/O error, logged.
  Status FetchStaged(Inode& inode, const std::string& key, uint64_t offset, uint64_t length)
      REQUIRES(inode.mu);
  // Reads [offset, offset+buf.size()) of `staged` with the base's bytes it lacks read from the
  // server as they are needed, storing none of them: for a read that cannot fetch them into a
  // full cache_dir (as an upload then reads them, BaseFilledSource).
  Result<size_t> ReadThroughBase(const StagedFile& staged, uint64_t offset,
                                 std::span<std::byte> buf);
  // Every byte of the staged file and of an accepted copy is local: before this mount removes
  // or replaces the object they were staged from.
  Status FetchAllStaged(Inode& inode, const std::string& key) REQUIRES(inode.mu);
  // This mount is about to remove, replace or rename the object `inode`'s staged file was
  // staged from: while handles are open, what the file lacks is fetched first, so that they
  // keep reading it. A failure is logged (those bytes then read as EIO).
  void KeepStagedReadable(Inode& inode) REQUIRES(inode.mu);
  // -> kUnsaved: the staged copy is about to be written: its crash record says kWriting (set
  // aside, never uploaded, by the next mount). A version a close accepted and not uploaded yet
  // is first kept as inode.accepted_copy. `keep_content` false: the caller empties the file next
  // (O_TRUNC, truncate to 0), so an accepted version is kept without copying it.
  Status MarkDirty(Inode& inode, const std::string& key, bool keep_content = true)
      REQUIRES(inode.mu);
  // kUnsaved -> kCached (open handles) or kStored: uploads the staged data with the metadata the
  // mount shows. `accept`: the caller is close, fsync, release, unmount or the write-back window,
  // so that when the upload fails the data is recorded as accepted (a crash then uploads it at
  // the next mount); a rename uploading a file still being written passes false.
  Status Upload(Inode& inode, const std::string& key, bool accept = true) REQUIRES(inode.mu);
  // With a write-back window: accepts the staged file of a closed `inode` (its record) and
  // schedules its upload; without a record (a full cache disk), uploads it now.
  Status DeferUpload(uint64_t ino, Inode& inode) REQUIRES(inode.mu);
  // The last writer's release of unsaved data: deferred with a window, else uploaded now and,
  // should that fail (close(2) reported it), retried in the background.
  Status Close(uint64_t ino, Inode& inode) REQUIRES(inode.mu);
  // kCached -> kStored: the staging file (and any accepted copy, carried record) goes.
  void DropStaging(Inode& inode) REQUIRES(inode.mu);
  // Any -> kRemoved: the file was removed or replaced; its unsaved data is never to be uploaded.
  // The staging file goes now, or (while handles are open) loses its record and goes at the last
  // release.
  void Discard(Inode& inode) REQUIRES(inode.mu);
  // The upload metadata of the staged file: its attributes and extra metadata.
  static Metadata UploadMetadata(const Inode& inode) REQUIRES(inode.mu);
  // A writer wrote [offset, offset + length) of the staged file of `key` (after MarkDirty): a
  // file written from empty here that grows past one part starts an upload of its parts while
  // it is written (fs/streamed_upload.h). Never waits for the network.
  // A write of [offset, offset + length) failed, maybe after some of its bytes reached the
  // staged file (a short write, then a full disk): parts of those bytes that a streamed upload
  // sent or is sending are sent again at its end, from the staged file, which is what the
  // mount shows.
  static void WriteFailedPartway(Inode& inode, uint64_t offset, uint64_t length) REQUIRES(inode.mu);
  void Wrote(Inode& inode, const std::string& key, uint64_t offset, uint64_t length)
      REQUIRES(inode.mu);
  // The staged file was truncated to `size` (after MarkDirty).
  void Truncated(Inode& inode, uint64_t size) REQUIRES(inode.mu);
  // A write of [offset, offset + length) through handle `fh` to the unsaved file failed with
  // `failure` (told to the writer): until later writes put those bytes there, a truncate cuts
  // them off, or a later write through `fh` succeeds (its writer handled the error and carried
  // on, CarriedOn), the file is not what its writers meant it to be (Unfinished), and it never
  // replaces the stored file. (A write that changed nothing of a clean file leaves nothing to
  // upload.)
  void WriteFailed(Inode& inode, uint64_t fh, uint64_t offset, uint64_t length,
                   const Status& failure) REQUIRES(inode.mu);
  // The unwritten entry (Inode::unwritten) of the stored file's bytes a staged file still held
  // as they were (or never held) when the version it was opened from changed or went on the
  // server (LoseBase): written over, they no longer count.
  static constexpr uint64_t kLostBase = UINT64_MAX;
  // The upload of a sparse staged file found its base (the stored version it was opened from)
  // changed or removed: the bytes it never fetched exist nowhere now, and no retry can upload
  // it. It becomes Unfinished, with the writes that would complete it as its only mend: its last
  // writer's release, or the background upload, sets it aside (SetAsideUnfinished) and the file
  // is what the store has, rather than failing its reads and retrying in vain until unmount.
  // The same for a file that holds all of its bytes, when its upload found the base replaced
  // (KeptBase): the old bytes it keeps would undo the other client's change. False when it
  // keeps no byte of its base (then it is not unfinished). `by_directory`: the upload found a
  // directory made in the file's place (SFTP), which no retry gets past: all of it is kept, as
  // for `replaced_after_close`.
  bool LoseBase(Inode& inode, const std::string& key, bool replaced_after_close = false,
                bool by_directory = false) REQUIRES(inode.mu);
  // The version an upload of the file must still find under `key` (its If-Match): the stored
  // file it was opened from, where some of that file's bytes are still in it (an append, a
  // patch, a file read and written back; anything written onto an empty version, `>>` on an
  // empty log). An upload that finds another client's version there would undo that change,
  // so the edit is set aside instead (LoseBase), as one that lacks the old bytes is. Nothing
  // where the writes replaced every old byte: the last writer wins, as with `cp` onto the file.
  // For a file taken over from an earlier mount's crash record, the version that mount's
  // upload asked for (Inode::recovered).
  static std::optional<ETag> KeptBase(const Inode& inode, const std::string& key)
      REQUIRES(inode.mu);
  // The file was created here under `key` by a create that must not replace another client's
  // file made meanwhile (Inode::created_as) and was never uploaded: its upload is conditional
  // on the name being free (If-None-Match), and one that finds a file there is set aside as
  // for KeptBase.
  static bool CreatedHere(const Inode& inode, const std::string& key) REQUIRES(inode.mu);
  // Both, for the crash record of the data accepted under `key`: the next mount's upload asks
  // the same of the key (Adopt).
  static UploadCondition ConditionOf(const Inode& inode, const std::string& key) REQUIRES(inode.mu);
  // The condition an upload of `key` made after its writer's close asks of a file written anew
  // (Inode::replacing), if any.
  static std::optional<UploadCondition> Replacing(const Inode& inode, const std::string& key)
      REQUIRES(inode.mu);
  // Whether a put or completion with KeptBase's If-Match failed because the base was replaced
  // or removed.
  static bool BaseReplaced(const Status& failure);
  // A write through `fh` succeeded: what failed before through it no longer counts.
  static void CarriedOn(Inode& inode, uint64_t fh) REQUIRES(inode.mu) { inode.unwritten.erase(fh); }
  // The unsaved data lacks bytes a writer's failed write meant to put there (WriteFailed), or
  // the stored file's bytes that are gone (LoseBase).
  static bool Unfinished(const Inode& inode) REQUIRES(inode.mu) {
    return inode.unsaved() && !inode.unwritten.empty();
  }
  static bool IsUnfinished(Inode& inode) EXCLUDES(inode.mu) {
    MutexLock lock(&inode.mu);
    return Unfinished(inode);
  }
  // The unsaved data is a file emptied (O_TRUNC, truncate to 0) with nothing written since, and
  // its upload would replace data: the stored file, or a version a close accepted and that waits
  // in the write-back window. A close that finds only this leaves its upload to the release of
  // the open file that emptied it (Inode::emptied_by; Filesystem::Flush and Release); so does
  // unmount while that one is open (EmptiedWhileWritten, FlushAll).
  static bool OnlyEmptied(const Inode& inode) REQUIRES(inode.mu) {
    return inode.unsaved() && inode.attr.size == 0 &&
           (inode.in_store || inode.accepted_copy != nullptr);
  }
  // OnlyEmptied, and the writer that emptied it is still at work: the handle whose O_TRUNC or
  // ftruncate emptied it is open (Inode::emptied_by). (Not a `truncate` by path: its caller is
  // done.)
  static bool EmptiedWhileWritten(const Inode& inode) REQUIRES(inode.mu) {
    return OnlyEmptied(inode) && inode.emptied_by != 0;
  }
  // What a close or fsync of an Unfinished file says: the first write's failure (or the lost
  // base), named.
  Status UnfinishedError(const Inode& inode, const std::string& key) const REQUIRES(inode.mu);
  // The last writer of an Unfinished file is done: its data is set aside in
  // cache_dir/unfinished/ (logged with its path, never uploaded; dropped when it holds nothing a
  // writer wrote), and the file is again the version a close accepted and not uploaded yet
  // (inode.accepted_copy), else what the store has (the complete earlier file, or no file if it
  // was new) with the metadata change held when the writer began, held again. Returns
  // UnfinishedError. Should the data not move (a full disk may refuse even a directory), it
  // stays in the staging area with its record, which has the next mount set it aside; the file
  // moves on all the same.
  Status SetAsideUnfinished(uint64_t ino, Inode& inode, const std::string& key) REQUIRES(inode.mu);
  // The stored object `key` kept its bytes but its ETag went from `from` to `to` (a metadata
  // change): the staged file fetches what it lacks, and an edit copies, by the new one. (Never
  // after another client's version: its ETag is not `from`.)
  void Retagged(Inode& inode, const std::string& key, const ETag& from, const ETag& to)
      REQUIRES(inode.mu);

  // Uploads the inode's unsaved data (Upload with `accept`); then, with `with_metadata`, applies
  // a held metadata change. Takes inode.mu.
  Status Flush(uint64_t ino, const std::shared_ptr<Inode>& inode, bool with_metadata = true,
               bool accept = false);

  // ---- Metadata changes of a file; REQUIRES: inode.mu held ----

  // Holds a metadata change of the stored object `rec` for options.hold_metadata instead of a
  // self-copy now; false when it cannot be held (no crash record: the cache disk is full).
  bool HoldMetadata(uint64_t ino, Inode& inode, const std::string& key, const MetaRecord& rec,
                    const FileAttr& attr, const Metadata& extra, const Metadata& metadata)
      REQUIRES(inode.mu);
  // A later change (the inode's attributes become `attr` and `extra`) joins the held one. Without
  // a crash record for it the change goes to the store now; on failure the inode is as it was.
  Status JoinHeldMetadata(Inode& inode, const std::string& key, const FileAttr& attr,
                          const Metadata& extra) REQUIRES(inode.mu);
  // Applies inode.pending_metadata to the object `key` with a self-copy and forgets it. An object
  // replaced elsewhere meanwhile gets the change too (last writer wins, as for bytes); one
  // removed elsewhere drops it.
  Status ApplyHeldMetadata(Inode& inode, const std::string& key) REQUIRES(inode.mu);
  // The store refused the held change of `key` for good (`refusal`, IsPermanentRefusal): logs
  // it once, forgets it and its crash record, and the inode shows the metadata the object has.
  void DropRefusedMetadata(Inode& inode, const std::string& key, const Status& refusal)
      REQUIRES(inode.mu);
  // Forgets inode.pending_metadata and its crash record (applied, carried by an upload or a
  // copy, or moot).
  void ForgetHeldMetadata(Inode& inode) REQUIRES(inode.mu);
  // A metadata change (`change`, which may refuse) of a file with unsaved data: it rides along
  // with the pending upload, and every crash record of the file (the staged data, an accepted
  // copy, a change held before the write) carries it. A closed file of the write-back window is
  // accepted again (DeferUpload). Returns the new attributes.
  Result<FileAttr> ChangeUnsavedMetadata(uint64_t ino, Inode& inode, const std::string& key,
                                         const std::function<Status(FileAttr&, Metadata&)>& change)
      REQUIRES(inode.mu);

  // ---- Room in cache_dir ----

  // `status`, or, when it is a full cache_dir and uploading closed files of the write-back window
  // early freed something, `retry()`'s. `busy`'s must be the only Inode::mu held.
  template <typename F>
  Status RetryWithRoom(Status status, const Inode* busy, uint64_t needed, F retry) {
    if (status.code() != StatusCode::kNoSpace || !writeback() || MakeRoom(busy, needed) == 0) {
      return status;
    }
    return retry();
  }

  // ---- The background ----

  // A background upload of `ino` failed: counted, logged, and due again after a delay.
  void RetryLater(uint64_t ino, const Status& failure);
  // Uploads the files whose write-back window has passed, in parallel; the first failure.
  Status UploadDue();
  // Uploads the unsaved data and applies the held changes of every inode; the first error.
  Status FlushAll();
  // Filesystem::RecoverStaged.
  Status RecoverStaged();
  // `ino`'s upload or held change waits in the queue.
  bool Queued(uint64_t ino) const;
  size_t pending_uploads() const;
  size_t recovering_files() const;
  // What user.objfs.stats adds to the counters: "pending_upload_files=N",
  // "pending_upload_bytes=N" (files whose data the store lacks yet: written or being written,
  // and their staged sizes; a file busy with its upload counts, its bytes do not) and
  // "staged_bytes=N" (disk space the staging files of cache_dir take), one a line.
  std::string StatsText() const;
  // Stops the write-back thread (its work reaches the inode table and the metadata cache).
  void Stop();

  bool writeback() const { return options_.writeback > 0; }
  bool holds_metadata() const { return options_.hold_metadata > 0; }

 private:
  Result<std::string> KeyOf(uint64_t ino) const;
  void Log(LogLevel level, const std::string& message) const;
  // The store refused `metadata` (`refusal`, IsPermanentRefusal) for a put of `source` to
  // `key`: puts the data again with the metadata the server last accepted (the object's
  // current metadata with `metadata`'s mode, owner and mtime; for a new object, only those)
  // and logs the refused change once, under the same `if_match` (KeptBase). On success
  // `metadata` is what was stored; otherwise the refusal is returned (it was not about the
  // metadata).
  Result<ObjectInfo> PutWithAcceptedMetadata(const std::string& key, const ByteSource& source,
                                             const std::optional<ETag>& if_match,
                                             Metadata* metadata, const Status& refusal);
  // cache_dir is full: uploads closed files of the write-back window now, one after another
  // until `needed` bytes of staging files are gone, skipping `busy` and files whose lock another
  // request holds. Returns the bytes freed.
  uint64_t MakeRoom(const Inode* busy, uint64_t needed);
  // A write-back upload failed and is tried again after `retry`: counted and logged.
  void NoteUploadFailure(const Status& failure, std::chrono::nanoseconds retry);
  // Seconds before a failed background upload is tried again (the first time: the delay
  // doubles with each failure of the file in a row, up to kMaxRetrySeconds or this).
  double retry_seconds() const { return std::max(options_.writeback, 10.0); }
  static constexpr double kMaxRetrySeconds = 300;
  // The upload (or held metadata change) of one file of the write-back queue; a failure is
  // rescheduled. Ok also when there was nothing to do.
  Status UploadDueFile(uint64_t ino);
  // Fetches the base bytes of [offset, offset+length) that `staged` lacks (FetchStaged);
  // `busy` is the inode whose lock is held, if any: while it fetches, stat and listings of that
  // file answer from before (ServerWorkScope) rather than wait for the lock. `base_changed` (if
  // given) is set when the failure is the base's, replaced or removed on the server.
  Status FillFromBase(StagedFile& staged, Inode* busy, const std::string& key, uint64_t offset,
                      uint64_t length, bool* base_changed = nullptr);
  // RecoverStaged: makes the publishable leftover `left` the staged, dirty data of its key's
  // inode and schedules its upload now; a sparse one is completed from its base first, and set
  // aside (`set_aside`) when the base changed. False when it is not taken over.
  bool Adopt(const StagedLeftover& left,
             const std::function<void(const StagedLeftover&, const std::string&)>& set_aside);
  // Adopt, of a sparse leftover whose base is gone: whether the object now at its key may be
  // what the crashed mount's own upload of it stored (that mount stopped before it dropped the
  // record): its size and mtime (to the store's precision) are the record's, and each byte the
  // staged file holds is the object's. Only a hint for the log line that sets it aside: the bytes
  // it lacks are gone with its base, and another client's version can match all of that (a
  // copied mtime, the same bytes appended), so dropping it on this evidence could lose the edit.
  bool MayBeStoredBeforeTheStop(const StagedLeftover& left, const StagedFile& file);

  // Why a streamed upload was given up for a whole put at close: each is logged once.
  enum class Fallback {
    kNotStarted,
    kPartFailed,
    kCompleteFailed,
    kRenamed,
    kReplaced,
    kEditFailed,
    kCount
  };
  // Drops inode.stream (aborted once its parts in flight return); with a reason, logs it once.
  void GiveUpStream(Inode& inode, const std::string& key, std::optional<Fallback> why,
                    const Status& detail) REQUIRES(inode.mu);
  // Upload's way through inode.stream: its result, or nullopt when there is none or it was
  // given up (the caller then puts the file whole).
  // `later`: the condition of an upload after the writer's close (Inode::replacing).
  std::optional<Result<ObjectInfo>> FinishStream(Inode& inode, const std::string& key,
                                                 Metadata* metadata,
                                                 const std::optional<UploadCondition>& later)
      REQUIRES(inode.mu);

  // Upload's way for an edit of inode.base under its own key, with the store's copy_ranges:
  // the parts no write touched are copied from the base on the server, the others uploaded
  // from the staged file. Nullopt when that is not worth it or was given up (the caller then
  // puts the file whole).
  std::optional<Result<ObjectInfo>> UploadEdit(Inode& inode, const std::string& key,
                                               const Metadata& metadata) REQUIRES(inode.mu);

  ObjectStore* store_;
  StagingArea* staging_;
  InodeTable* inodes_;
  MetaCache* meta_cache_;
  const ObjectAttrs* attrs_;
  Metrics* metrics_;
  std::shared_ptr<Clock> clock_;
  Options options_;
  // Held metadata changes: how they reach the store, and their recovery.
  MetadataCoalescer coalescer_;
  RecoveryProgress recovery_;
  // What the store offers for streamed uploads, and the threads that send their parts.
  const Capabilities caps_;
  std::unique_ptr<IoPool> stream_pool_;
  std::array<std::atomic<bool>, static_cast<size_t>(Fallback::kCount)> fallback_logged_{};
  // Files whose upload or held metadata change waits for the background, and the thread that
  // does it. Last: destroyed (its thread stopped) first.
  std::unique_ptr<WritebackQueue> queue_;
};

}  // namespace objfs
