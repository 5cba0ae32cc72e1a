// Inode numbers for keys: the FUSE kernel names files by 64-bit inode numbers, the store by
// keys. The table hands out a stable number per key, counts the kernel's references (lookup /
// forget), follows renames, and owns the per-inode state of files with local data.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/mutex.h"
#include "backend/object_store.h"
#include "cache/extent_set.h"
#include "cache/staging.h"
#include "fs/file_attr.h"
#include "fs/metadata_coalescer.h"
#include "fs/streamed_upload.h"

namespace objfs {

// Per-inode state. Its mutex is lock 1 of fs/lock_order.h; every field below it is guarded by
// it except the atomics.
struct Inode {
  Mutex mu;
  // The staged content, when this inode has local data (unsaved, or kept while handles are
  // open after an upload).
  std::unique_ptr<StagedFile> staged GUARDED_BY(mu);
  // The version of the file that a close, fsync or the write-back window accepted and that is
  // not uploaded yet, kept (with its crash record) while a writer changes `staged`, a copy of
  // it: a crash then uploads this, never the half-written copy. Goes once `staged` is accepted
  // or uploaded in turn.
  std::unique_ptr<StagedFile> accepted_copy GUARDED_BY(mu);
  // Where the file's content is. Moves: kStored -> kCached (EnsureStaged) -> kUnsaved (a
  // write, truncate or O_TRUNC: MarkDirty) -> kCached (uploaded, kept for open handles) ->
  // kStored (the staging file dropped); any -> kRemoved (unlinked or replaced while open),
  // which only a new O_CREAT of the inode leaves.
  enum class FileState {
    kStored,   // nothing staged: the store's object is the file (a held change may wait)
    kCached,   // `staged` holds what the store has: fetched for writing, or kept for handles
    kUnsaved,  // `staged` holds data the store lacks: being written, or accepted and waiting
    kRemoved,  // removed or replaced while open: nothing staged is ever uploaded
  };
  FileState state GUARDED_BY(mu) = FileState::kStored;
  // `staged` holds data to upload.
  bool unsaved() const REQUIRES(mu) { return state == FileState::kUnsaved; }
  bool removed() const REQUIRES(mu) { return state == FileState::kRemoved; }
  // The store holds an object at this inode's key that its pending upload replaces (false for
  // a file created here and not uploaded yet): a rename of the unsaved file removes it.
  bool in_store GUARDED_BY(mu) = true;
  // The encryption at rest of the object the staged data came from (S3; none for a file created
  // here), when known: its upload keeps it, whatever the key by then.
  std::optional<AtRestEncryption> stored_encryption GUARDED_BY(mu);
  // The stored file at this key (its permission bits, size and mtime) as this mount last knew it:
  // when the staged data was staged from it, last uploaded over it or chmod'ed. Its upload keeps
  // a chmod another client made since, of a mode this mount did not change (PutOptions). Unset
  // for a file created or renamed here.
  std::optional<ReplacedFile> stored_file GUARDED_BY(mu);
  // The key this mount created the file under, where the create must not replace another
  // client's file made meanwhile (O_EXCL, or no O_TRUNC: `>>` on a new name): its first upload
  // is conditional on the name being free (FileWriter::KeptBase). Empty otherwise.
  std::string created_as GUARDED_BY(mu);
  // A key, and what an upload under it asks of it (recovered, replacing).
  struct KeyCondition {
    std::string key;
    UploadCondition condition;
  };
  // Taken over from an earlier mount's crash record (FileWriter::Adopt): the key the data was
  // accepted under, and what that mount's upload asked of it (the version an edit was made to,
  // FileWriter::KeptBase; the name free, with created_as). The upload here asks the same.
  // Cleared as created_as is.
  std::optional<KeyCondition> recovered GUARDED_BY(mu);
  // What the key held, as far as this mount knew, when the file was emptied to be written anew
  // (O_TRUNC, a truncate to 0, a create of a free name with O_TRUNC): that version, or no object.
  // The upload at the writer's close goes over whatever the key holds then (the latest close
  // wins, as on a local disk). One made after the close (at the end of the write-back window,
  // a retry after a failed close, the next mount after a crash) asks the key to hold that
  // still: a version another client stored after the close is newer, and stands
  // (FileWriter::ConditionOf, LoseBase). Cleared by an upload, and by staging an edit.
  std::optional<KeyCondition> replacing GUARDED_BY(mu);
  // The upload that runs while the file is written (fs/streamed_upload.h), and whether one may
  // start: the data being written began empty here (a new file, O_TRUNC, truncate to 0) and no
  // upload of it was given up yet.
  std::shared_ptr<StreamedUpload> stream GUARDED_BY(mu);
  bool may_stream GUARDED_BY(mu) = false;
  // The handle whose O_TRUNC (or ftruncate to 0) emptied the unsaved file, until its release
  // (0: none): a file only emptied is uploaded at that release, not at a close before it nor at
  // another writer's release (FileWriter::OnlyEmptied, Filesystem::Release).
  uint64_t emptied_by GUARDED_BY(mu) = 0;
  // The stored object the staged file was staged from or last uploaded as (its key, size and
  // ETag), and the ranges written since: a close copies the untouched parts of it on the
  // server. Unset when there is none (a new or emptied file).
  std::optional<ObjectInfo> base GUARDED_BY(mu);
  ExtentSet touched GUARDED_BY(mu);
  // By handle, the ranges of unsaved data that a write(2) through it failed to put in `staged`
  // (a full cache disk, a size past the store's largest object) and no later write put there
  // (no entry is empty), with the first of those failures: while any is left the file is not
  // what its writers meant it to be, and is never uploaded (FileWriter::WriteFailed). Under
  // FileWriter::kLostBase, the stored file's bytes the staged file never held, gone from the
  // server with the version it was opened from (FileWriter::LoseBase).
  struct Unwritten {
    ExtentSet ranges;
    Status failure;
    uint64_t serial = 0;  // of `failure`, among this inode's write failures
  };
  std::unordered_map<uint64_t, Unwritten> unwritten GUARDED_BY(mu);
  uint64_t write_failures GUARDED_BY(mu) = 0;  // numbers them (Unwritten::serial)
  // The owner and mode fields (kSetMode, kSetUid, kSetGid) a chmod or chown set while the
  // unsaved data was being written: they rode with it, and should it be set aside, they are set
  // on the file it is again. From the write's start (FileWriter::MarkDirty).
  uint32_t set_while_written GUARDED_BY(mu) = 0;
  // Counts the attribute changes made through the mount (Filesystem::MutateMetadata): one
  // made on the user's behalf later checks that none came in between.
  uint64_t metadata_changes GUARDED_BY(mu) = 0;
  // Attributes of the staged file (size, mode, owner, mtime) and the metadata the upload
  // carries besides mode/uid/gid/mtime (xattrs, unknown names), valid while `staged`.
  FileAttr attr GUARDED_BY(mu);
  Metadata extra_metadata GUARDED_BY(mu);
  // The ETag of the last upload or copy made through this inode (empty: none this session).
  ETag uploaded_etag GUARDED_BY(mu);
  // The version (ETag) of the stored object that the kernel's cached pages of this file hold:
  // the one an open read it at, or the one an upload or copy of this mount made (the pages then
  // hold what was written through them). An open of the same version keeps the pages
  // (keep_cache); empty: none known, and the next open drops whatever the kernel has.
  ETag page_version GUARDED_BY(mu);
  // False when an open read the pages at a size-and-mtime version younger than its mtime's
  // resolution allows to trust (SettledVersion, backend/object_version.h): a same-size rewrite
  // within that second keeps the version, so the next open drops them even at the same version.
  bool page_version_settled GUARDED_BY(mu) = true;
  // Lookup or getattr saw a new version and queued a drop of the kernel's pages that has not
  // been sent yet. An open that drops them itself (keep_cache off) clears it: sent after that
  // open's reads, the drop would throw away the new version's pages.
  bool pages_drop_queued GUARDED_BY(mu) = false;
  // New versions this mount's own metadata changes gave unchanged bytes, oldest first (at most
  // kMaxRetagged): on a store that sets attributes in place (SFTP's SETSTAT), a touch gives
  // the same bytes a new mtime, hence a new version. A handle that read_info'd the old one
  // before the change reads on at the new one, where its reads would fail (ESTALE).
  // NoteRetagged, RetaggedVersion. (Not S3: its self-copy may copy another client's bytes,
  // since RGW ignores x-amz-copy-source-if-match, so a new ETag proves nothing.)
  struct Retag {
    uint64_t serial = 0;  // retag_serial when noted
    std::string key;
    ETag from;
    ETag to;
  };
  static constexpr size_t kMaxRetagged = 8;
  std::vector<Retag> retagged GUARDED_BY(mu);
  // Counts the retags noted; a handle keeps its value from when it learnt its version, and
  // follows only later ones: a version that came back since (another client's rewrite) is not
  // the retagged one.
  std::atomic<uint64_t> retag_serial{0};
  // A metadata change (chmod, chown, utimens, setxattr) of the stored object, not applied to
  // the store yet (FilesystemOptions::metadata_delay); while set, `attr` and `extra_metadata`
  // hold the changed attributes.
  std::optional<HeldChange> pending_metadata GUARDED_BY(mu);
  // The crash record of a held change that a writer's data carries now (fs/metadata_coalescer.h).
  CarriedChange carried GUARDED_BY(mu);
  // Open handles; read by the table without the mutex to decide whether it may forget.
  std::atomic<int> open_handles{0};
  // Of those, the ones open for writing. The close of a read-only handle never uploads or
  // accepts the data of a writer still at work.
  std::atomic<int> open_writers{0};
  // `staged` or `pending_metadata` is set (mirrors them for the table).
  std::atomic<bool> has_local_data{false};
  // Server work on this file is under way, and holds `mu` until the server answers, for as
  // long as the work's allowance: an upload at close or fsync (the tail of a streamed file, or
  // all of it), a server-side copy into it (Filesystem::CopyFileRange), a rename's copy, a held
  // chmod's self-copy. Minutes for gigabytes, or for a stuck server. Meanwhile stat, lookups
  // and listings answer from what the work left here, the file's attributes as they were when
  // it began (ServerWorkScope), rather than wait for `mu`: `ls -l` of the directory a file is
  // uploaded to, or copied into, never hangs on it. What reads or changes the file still waits.
  // `local`: the file had local data (LocalAttrOf gave `attr`). Taken alone or under `mu`,
  // never the other way round (fs/lock_order.h).
  struct ServerWork {
    FileAttr attr;  // its ino aside (the reader's)
    bool local = false;
  };
  Mutex work_mu;
  std::optional<ServerWork> server_work GUARDED_BY(work_mu);
};

// The attributes of a file with local state (staged data, or a held metadata change), but for
// its inode number, or nullopt.
std::optional<FileAttr> LocalAttrOf(const Inode& inode) REQUIRES(inode.mu);

// Inode::server_work for the life of server work made under the inode's mutex, which its
// caller holds throughout: set at construction to the file's attributes then (LocalAttrOf, or
// `otherwise` for a file without local state; nothing is set when both are unset), and put back
// as it was (an outer scope's, or none) at destruction, before the caller lets go of the mutex.
class ServerWorkScope {
 public:
  explicit ServerWorkScope(Inode& inode, const std::optional<FileAttr>& otherwise = std::nullopt)
      REQUIRES(inode.mu);
  ~ServerWorkScope();
  ServerWorkScope(const ServerWorkScope&) = delete;
  ServerWorkScope& operator=(const ServerWorkScope&) = delete;

 private:
  Inode& inode_;
  std::optional<Inode::ServerWork> outer_;
};

// Notes that `to` is a new ETag of `key`'s bytes at `from` (Inode::retagged).
void NoteRetagged(Inode& inode, const std::string& key, const ETag& from, const ETag& to)
    REQUIRES(inode.mu);
// The newest ETag this mount gave `key`'s bytes at `version` in a retag noted after serial
// `seen`: empty when it gave none.
ETag RetaggedVersion(const Inode& inode, const std::string& key, const ETag& version, uint64_t seen)
    REQUIRES(inode.mu);

// Holds `inode`'s mutex when there is an inode, for the few paths (unlink, rename) that act the
// same on a name with and without one. The analysis cannot follow a lock taken on one path only,
// so the functions under such a lock opt out of it (NO_THREAD_SAFETY_ANALYSIS) and say so.
class OptionalInodeLock {
 public:
  explicit OptionalInodeLock(Inode* inode) NO_THREAD_SAFETY_ANALYSIS
      : mu_(inode != nullptr ? &inode->mu : nullptr) {
    if (mu_ != nullptr) mu_->Lock();
  }
  ~OptionalInodeLock() NO_THREAD_SAFETY_ANALYSIS {
    if (mu_ != nullptr) mu_->Unlock();
  }
  OptionalInodeLock(const OptionalInodeLock&) = delete;
  OptionalInodeLock& operator=(const OptionalInodeLock&) = delete;

 private:
  Mutex* const mu_;
};

class InodeTable {
 public:
  InodeTable();

  // The inode of `key` (directories without a trailing slash; "" is the root), created when
  // unknown; adds `lookups` kernel references.
  uint64_t Acquire(const std::string& key, uint64_t lookups);
  // Adds one reference to a known inode. False when `ino` is unknown.
  bool AddLookup(uint64_t ino);
  // Drops `n` references; forgets the inode once it has none, no open handle and no local data.
  void Forget(uint64_t ino, uint64_t n);

  // The current key of `ino`, or nullopt when unknown.
  std::optional<std::string> KeyOf(uint64_t ino) const;
  // The inode currently bound to `key`, or 0.
  uint64_t InoOf(const std::string& key) const;
  // The state of `ino` (never null for a known inode: made on first use), or nullptr when
  // unknown.
  std::shared_ptr<Inode> Get(uint64_t ino);
  // The state of `ino` if it has any yet: nullptr when unknown or never used by Get, i.e. no
  // open handle, staged data or pending change. For attribute checks of listed names, so that
  // a huge listing's inodes cost a number and a name each, not an Inode.
  std::shared_ptr<Inode> Find(uint64_t ino) const;

  // Moves `from` to `to`, and with `subtree` every key under "from/" to the same place under
  // "to/". An inode already bound to `to` loses its name (it was replaced).
  void Rename(const std::string& from, const std::string& to, bool subtree);
  // Unbinds `key` (after unlink/rmdir): the inode keeps its number for open handles but a new
  // file of that name gets a new inode.
  void Unbind(const std::string& key);

  // Inodes with local data (staged, or a pending metadata change) whose key is `prefix` or under
  // "prefix/" (all when prefix is "").
  std::vector<std::pair<uint64_t, std::shared_ptr<Inode>>> WithLocalData(
      const std::string& prefix) const;

  size_t size() const;

 private:
  struct Slot {
    std::string key;
    bool bound = true;  // `key` maps back to this inode
    uint64_t lookups = 0;
    std::shared_ptr<Inode> inode;  // null until Get
  };
  void MaybeEraseLocked(uint64_t ino) REQUIRES(mu_);

  mutable Mutex mu_;  // lock 4 of fs/lock_order.h
  std::unordered_map<uint64_t, Slot> slots_ GUARDED_BY(mu_);
  std::unordered_map<std::string, uint64_t> by_key_ GUARDED_BY(mu_);
  uint64_t next_ino_ GUARDED_BY(mu_) = kRootIno + 1;
};

}  // namespace objfs
