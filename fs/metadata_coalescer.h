// Held metadata changes: on a store where changing an object's metadata rewrites the object (an
// S3 self-copy), a chmod, chown, utimens or setxattr of a closed file may wait
// (FilesystemOptions::metadata_delay), so that rsync's utimens + chmod + rename of each file
// costs one copy instead of three. The mount shows the change at once; a crash record in
// cache_dir applies it at the next mount should the daemon die first.
//
// This part owns what such a change is (HeldChange), its crash record, how it reaches the
// store (Apply: the change applies to the object it was made to, or to one replaced since; a
// removed object drops it; a permanent refusal is logged and dropped), how a writer's data takes
// it over (Carry), and the recovery of the records an earlier mount left (Recover). Filesystem
// keeps only when to hold and when to apply: the per-inode state lives in Inode, under its lock,
// and the write-back queue (fs/writeback_queue.h) says when a held change is due.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/log.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/staging.h"

namespace objfs {

// A metadata change of a stored object that has not reached the store yet.
struct HeldChange {
  ObjectInfo object;  // the object it changes: size and ETag (set_attributes's expected version)
  bool own_write = false;                // that object is this mount's own upload or copy
  Metadata metadata;                     // all the metadata the object is to carry
  std::unique_ptr<PendingAttrs> record;  // its crash record in cache_dir
};

// The crash record of a held change whose file a writer then changed: the change travels with
// the data from then on, but should objfs die before close or fsync accepts that data (whose
// record then carries it), the next mount sets the data aside, and the change must still reach
// the object as it was (`etag`). Kept current with `metadata` (all the metadata that object is
// to carry) until the data is accepted, uploaded or removed.
struct CarriedChange {
  std::unique_ptr<PendingAttrs> record;
  ETag etag;
  Metadata metadata;
  ObjectInfo object;       // the held change's object and
  bool own_write = false;  // its own_write, to hold it again (Uncarry)
  explicit operator bool() const { return record != nullptr; }
};

// What `to` changes of `from`, for the log: the user extended attributes and the other metadata
// names it sets, changes or removes ("user.big, mode").
std::string ChangedMetadataNames(const Metadata& from, const Metadata& to);

class MetadataCoalescer {
 public:
  using LogFn = LogFunction;
  // Told that what is cached of `key` may be stale.
  using InvalidateFn = std::function<void(const std::string& key)>;

  // `store` and `staging` must outlive this.
  MetadataCoalescer(ObjectStore* store, StagingArea* staging, LogFn log, InvalidateFn invalidate)
      : store_(store),
        staging_(staging),
        log_(std::move(log)),
        invalidate_(std::move(invalidate)) {}

  // A change giving `object` (named `key`) the metadata `metadata`, with its crash record; nullopt
  // when it cannot be held (no ETag to tie it to, or no record: the cache disk is full).
  std::optional<HeldChange> Hold(const std::string& key, const ObjectInfo& object, bool own_write,
                                 const Metadata& metadata);

  // A later change joins `held`: its crash record says so. On failure the record is as it was
  // and `held` keeps its metadata; the caller then applies the change at once.
  Status Join(HeldChange& held, const std::string& key, Metadata metadata);

  // How Apply ended.
  enum class Outcome {
    kApplied,  // the store has it: `info` is the object now
    kRefused,  // the store refuses it for good: dropped, logged by the caller with `reason`
    kGone,     // the object was removed elsewhere: dropped, logged here
  };
  struct Applied {
    Outcome outcome = Outcome::kApplied;
    ObjectInfo info;  // kApplied: the object with its new metadata (and the held size)
    Status reason;    // kRefused: the refusal
  };
  // Sends `held` to the object `key`. An object replaced elsewhere meanwhile gets the change too
  // (last writer wins, as for bytes). A failure that may pass (a server error) is returned, and
  // `held` stays for a retry. The caller forgets `held` on any Applied.
  Result<Applied> Apply(HeldChange& held, const std::string& key);

  // A writer changed the file of `held`: the change travels with the data from now on, and its
  // crash record moves to `carried` (replacing what was there).
  static void Carry(std::optional<HeldChange>& held, CarriedChange& carried);
  // The writer's data went without changing the object: the change, with all it gathered since,
  // is held for that object again.
  static std::optional<HeldChange> Uncarry(CarriedChange& carried);
  // Forgets a change and its crash record (applied, carried by an upload or a copy, or moot).
  static void Forget(std::optional<HeldChange>& held);
  static void Forget(CarriedChange& carried);

  // Applies the changes an earlier mount held and did not apply, each only to the object it was
  // made to: one removed or replaced since stands as it is. Returns the first failure that may
  // pass (its record stays for the next mount).
  Status Recover();

 private:
  ObjectStore* store_;
  StagingArea* staging_;
  LogFn log_;
  InvalidateFn invalidate_;
};

}  // namespace objfs
