// A small persisted store of the hints of cache/records.h (content ETags, object attributes)
// that objfs keeps between mounts, in one directory.
//
// Each record type has one append-only log ("<name>.log"): every Put appends the encoded record
// and every Remove appends a tombstone, each in a frame "u32 length | record". Open replays the
// log into an in-memory map keyed by path/key, so Get never touches the disk. What a crash or a
// bad disk leaves behind is dropped, never trusted: a frame whose record does not decode is
// skipped (the reader then looks for the next frame that does, byte by byte), and a torn tail is
// cut off. When a log grows past twice the bytes of its live records it is rewritten with only
// those (write to a temporary file, fsync, rename).
//
// One process at a time: Open takes an exclusive lock on "<dir>/LOCK".
// Thread-safe: each table serialises its operations with its own mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend/mutex.h"
#include "backend/status.h"
#include "cache/codec.h"
#include "cache/records.h"

namespace objfs {

struct StoreDbOptions {
  // fdatasync the log after every Put and Remove. Off: a crash may lose the last writes (never
  // corrupt the others). Compaction always syncs before it replaces a log.
  bool sync_writes = false;
  // A log is compacted only once it is at least this large (and more than twice its live bytes).
  uint64_t compaction_min_bytes = 1 << 20;
};

// The log and the index of one record type.
template <typename Record>
class RecordTable {
 public:
  using Codec = typename CodecFor<Record>::type;

  struct Stats {
    uint64_t records = 0;        // live records
    uint64_t live_bytes = 0;     // bytes of the frames of the live records
    uint64_t log_bytes = 0;      // size of the log file, header included
    uint64_t dropped_bytes = 0;  // bytes Open skipped or cut off as corrupt
    uint64_t compactions = 0;
  };

  ~RecordTable();
  RecordTable(const RecordTable&) = delete;
  RecordTable& operator=(const RecordTable&) = delete;

  // Opens (creating if needed) the log at `path` and replays it.
  static Result<std::unique_ptr<RecordTable>> Open(std::string path, StoreDbOptions options);

  // Stores `record` under Codec::Key(record), replacing any record with that key.
  Status Put(const Record& record);
  // The record stored under `key`, or nullopt.
  Result<std::optional<Record>> Get(std::string_view key) const;
  // Removes the record under `key`; removing a missing key is not an error.
  Status Remove(std::string_view key);
  // Rewrites the log with only the live records.
  Status Compact();
  // Every live record, in no particular order (for a cache that rebuilds its own index at open).
  std::vector<Record> All() const;

  size_t size() const;
  Stats stats() const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  using Index = std::unordered_map<std::string, Record, StringHash, std::equal_to<>>;

  RecordTable(std::string path, StoreDbOptions options, int fd);
  Status Replay() REQUIRES(mu_);
  Status Append(const std::string& frame) REQUIRES(mu_);
  Status CompactIfLarge() REQUIRES(mu_);
  Status CompactLocked() REQUIRES(mu_);

  const std::string path_;
  const StoreDbOptions options_;
  mutable Mutex mu_;  // lock 14 of fs/lock_order.h
  int fd_ GUARDED_BY(mu_);
  Index index_ GUARDED_BY(mu_);
  Stats stats_ GUARDED_BY(mu_);
};

extern template class RecordTable<ContentETagRecord>;
extern template class RecordTable<ObjectMetaRecord>;
extern template class RecordTable<DataBlockRecord>;

class StoreDb {
 public:
  // Opens the store in `dir` (created if missing, mode 0700).
  static Result<StoreDb> Open(const std::string& dir, StoreDbOptions options = {});

  StoreDb(StoreDb&&) noexcept;
  StoreDb& operator=(StoreDb&&) noexcept;
  ~StoreDb();

  Status Put(const ContentETagRecord& record) { return content_etags_->Put(record); }
  Status Put(const ObjectMetaRecord& record) { return object_meta_->Put(record); }

  // db.Get<ContentETagRecord>(path), db.Remove<ObjectMetaRecord>(key), ...
  template <typename Record>
  Result<std::optional<Record>> Get(std::string_view key) const {
    return Table<Record>().Get(key);
  }
  template <typename Record>
  Status Remove(std::string_view key) {
    return Table<Record>().Remove(key);
  }

  template <typename Record>
  RecordTable<Record>& Table() const {
    if constexpr (std::is_same_v<Record, ContentETagRecord>) {
      return *content_etags_;
    } else {
      static_assert(std::is_same_v<Record, ObjectMetaRecord>, "not a stored record type");
      return *object_meta_;
    }
  }

 private:
  StoreDb() = default;

  int lock_fd_ = -1;
  std::unique_ptr<RecordTable<ContentETagRecord>> content_etags_;
  std::unique_ptr<RecordTable<ObjectMetaRecord>> object_meta_;
};

}  // namespace objfs
