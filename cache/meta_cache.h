// Cached answers to "what is at this key?", so that the stat storms of ls, find and rsync cost
// no backend request while the answer is fresh.
//
// An entry is either a record (a file, symlink or directory, with the attributes known) or a
// negative entry ("nothing there"). A record is "complete" when it came from a HEAD or from a
// write of ours (exact mode, owner, mtime and metadata) and "partial" when it came from a listing
// (size, Last-Modified and ETag only). Entries expire after a TTL measured on an injected Clock.
// The filesystem invalidates a key on every change it makes to it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/etag.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "cache/clock.h"

namespace objfs {

struct MetaRecord {
  bool is_dir = false;
  bool complete = false;   // mode, uid, gid, mtime and metadata are exact
  bool has_object = true;  // false for a directory with no marker object
  uint32_t mode = 0;       // st_mode with type bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  ETag etag;
  Metadata metadata;  // the object's user metadata (complete records only)
  // This mount wrote the object as recorded (upload, copy or rename); within the cache's
  // lifetime its ETag is trusted as current by the copies of chmod and rename.
  bool own_write = false;
  // The object's encryption at rest (S3), where a HEAD or this mount's write learnt it; unset
  // from a listing. Uploads and copies pass it on (ObjectInfo::encryption).
  std::optional<AtRestEncryption> encryption;
  // A directory told by the mode in the metadata of an object named without the trailing slash
  // ("dir", as old s3fs wrote them), not by a marker "dir/": that object's size. rmdir and mv
  // take that object along.
  std::optional<uint64_t> slashless_object;
};

class MetaCache {
 public:
  MetaCache(std::shared_ptr<Clock> clock, std::chrono::nanoseconds ttl,
            std::chrono::nanoseconds negative_ttl);

  enum class State { kMiss, kNegative, kPositive };
  struct Hit {
    State state = State::kMiss;
    MetaRecord record;  // when kPositive
  };

  // The fresh entry for `key`, if any. Counts nothing: callers count hits and misses.
  Hit Get(const std::string& key) const;
  void Put(const std::string& key, MetaRecord record);
  void PutNegative(const std::string& key);
  void Invalidate(const std::string& key);
  // Drops `key` and every key under "key/".
  void InvalidateTree(const std::string& key);

  // Directory listings, so that a lookup of a name that does not exist costs nothing once its
  // directory was listed (rsync and editors look up many fresh names in one directory). A
  // listing is kept for the negative TTL; every key put or invalidated since is added to its
  // directory's listing, so that it can only claim "absent" for names nothing here created.
  //
  // Take a ticket before listing a directory and hand it to PutListing with the result: a
  // listing during which this mount changed a key of that directory is not kept (it may lack
  // the change).
  uint64_t ListingTicket() const;
  // Records that directory `dir` ("" is the root) held exactly `names` (files and directories).
  // `complete` false records a directory too large to list in one request: ListState says so,
  // and callers do not try again within the TTL.
  void PutListing(const std::string& dir, std::vector<std::string> names, bool complete,
                  uint64_t ticket);
  enum class Listed { kUnknown, kTooLarge, kAbsent, kMaybePresent };
  // What a fresh listing of `key`'s directory says about `key`.
  Listed ListState(const std::string& key) const;
  void Clear();
  size_t size() const;

 private:
  struct Slot {
    bool negative = false;
    MetaRecord record;
    std::chrono::nanoseconds expires{0};
  };

  std::shared_ptr<Clock> clock_;
  std::chrono::nanoseconds ttl_;
  std::chrono::nanoseconds negative_ttl_;
  mutable Mutex mu_;  // lock 5 of fs/lock_order.h
  std::unordered_map<std::string, Slot> slots_ GUARDED_BY(mu_);
  size_t sweep_at_ GUARDED_BY(mu_) = 4096;  // Put drops expired slots once there are this many
  struct DirListing {
    bool complete = true;
    std::unordered_set<std::string> names;
    std::chrono::nanoseconds expires{0};
  };
  // Adds the name of `key` to its directory's listing, if there is one.
  void NoteChangeLocked(const std::string& key) REQUIRES(mu_);
  std::unordered_map<std::string, DirListing> listings_ GUARDED_BY(mu_);
  // Change numbers: the last one of each directory, and the one at which that map was last
  // cleared (to bound it).
  uint64_t change_seq_ GUARDED_BY(mu_) = 0;
  uint64_t cleared_seq_ GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, uint64_t> dir_changes_ GUARDED_BY(mu_);
};

}  // namespace objfs
