// An optional, bounded disk cache of object data that outlives the mount (-o data_cache=DIR).
//
// Reading the same data again (a dataset every epoch, the same headers in every build) should
// not cost the network again, even after a remount, when the kernel's page cache has long let
// go of it. DataCache keeps blocks of `block_size` bytes (the mount's read_buffer) in files of
// DIR, each named after the mount's URL, the object's key, its version (S3 ETag; size and
// mtime on SFTP) and the block's offset: a changed object has a new version, so its old blocks
// are never found again (they age out). DataCacheStore, a store wrapper under the filesystem,
// serves a read that names the version it expects (If-Match, as every prefetcher read does)
// from the cached blocks and fetches only the missing ones, adjacent missing blocks in one
// ranged read, writing each block as it arrives.
//
// Rules:
// - Versions must be settled: on stores whose version is the size and the mtime in whole
//   seconds (SFTP), a file rewritten within the second keeps its version, so blocks of a
//   version whose mtime is less than two seconds old are neither cached nor served (git's
//   "racily clean" rule; it assumes the server's clock within a second or so of this one).
// - Bounded: the blocks never hold more than max_bytes; every insert first evicts the least
//   recently used blocks (use within a mount; across mounts, the order they were written or
//   last used in before it).
// - Persisted: the index is a RecordTable of DataBlockRecord ("index.log"), each with the CRC32C
//   of its block, checked on every read; a block that does not match (or is missing, or short)
//   is dropped and fetched again. At open, blocks without a record (a crash between the two
//   writes) and records without a block are removed.
// - One mount at a time: the directory is locked (flock on "lock") for the life of the cache.
//   Sharing it would need every mount to see the others' inserts and evictions to keep the
//   bound; a second mount with the same DIR is refused with a one-line error instead.
// - Never the cause of a failed read: a block that cannot be read is a miss, and a block that
//   cannot be written (a full or failing disk) turns writing off for the rest of the mount,
//   with one log line; what is cached is still served.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backend/etag.h"
#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/records.h"
#include "cache/store_db.h"

namespace objfs {

struct DataCacheOptions {
  std::string dir;  // created (0700) if missing
  uint64_t max_bytes = 1ull << 30;
  uint32_t block_size = 1 << 20;
  // Names the store the blocks come from (the mount's URL), so that another bucket's blocks
  // with the same key and ETag are never served.
  std::string scope;
  std::function<void(const std::string&)> log;  // the one line saying writing stopped
  // Tests: called before each block file is written; a non-ok Status fails that write as a
  // full disk would.
  std::function<Status()> before_write;
};

class DataCache {
 public:
  struct Stats {
    uint64_t bytes = 0;   // bytes of the blocks held
    uint64_t blocks = 0;  // blocks held
    uint64_t evictions = 0;
    uint64_t corrupt = 0;  // blocks dropped because their bytes did not match their checksum
    bool writing = true;   // false once a write failed
  };

  // Opens (creating) the cache in options.dir: locks it, replays its index and removes what a
  // crash left half written. Fails when another process holds the directory.
  static Result<std::unique_ptr<DataCache>> Open(DataCacheOptions options,
                                                 Metrics* metrics = nullptr);
  ~DataCache();
  DataCache(const DataCache&) = delete;
  DataCache& operator=(const DataCache&) = delete;

  uint32_t block_size() const { return options_.block_size; }

  // Fills `out` (at least block_size bytes) with the cached block at `offset` (a multiple of
  // block_size) of version `etag` of `key`, and returns its length (less than block_size only
  // for the object's last block); nullopt when it is not cached or no longer intact.
  std::optional<size_t> Get(std::string_view key, const ETag& etag, uint64_t offset,
                            std::span<std::byte> out);
  // Whether the block is cached (without reading or checking it).
  bool Contains(std::string_view key, const ETag& etag, uint64_t offset) const;
  // Caches `data` as the block at `offset` (block_size bytes, or fewer for the object's last
  // block). Failures are not returned: they stop writing (see above).
  void Put(std::string_view key, const ETag& etag, uint64_t offset,
           std::span<const std::byte> data);

  Stats stats() const;
  // The file holding a block (tests corrupt it).
  std::string BlockPath(std::string_view key, const ETag& etag, uint64_t offset) const;

 private:
  struct Entry {
    uint32_t length = 0;
    uint32_t crc32c = 0;
    bool ready = false;  // the file and its record are written
    std::list<std::string>::iterator lru;
  };

  DataCache(DataCacheOptions options, Metrics* metrics, int lock_fd,
            std::unique_ptr<RecordTable<DataBlockRecord>> table);
  Status Load();
  std::string NameOf(std::string_view key, const ETag& etag, uint64_t offset) const;
  std::string PathOf(const std::string& name) const;
  // Removes the block's file and record (its entry is already gone).
  void Discard(const std::string& name);
  // Drops the entry `name` if it is still there (a damaged block), and its file and record.
  void Drop(const std::string& name);
  void StopWriting(const Status& why);
  void UpdateGauge() REQUIRES(mu_);

  const DataCacheOptions options_;
  Metrics* const metrics_;
  const int lock_fd_;
  const std::unique_ptr<RecordTable<DataBlockRecord>> table_;
  std::atomic<bool> writing_{true};
  std::atomic<uint64_t> tmp_counter_{0};

  mutable Mutex mu_;  // lock 29 of fs/lock_order.h
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  std::list<std::string> lru_ GUARDED_BY(mu_);  // most recently used first
  uint64_t bytes_ GUARDED_BY(mu_) = 0;          // of every entry, written or being written
  uint64_t stamp_ GUARDED_BY(mu_) = 0;          // the last stamp given to a written record
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
  uint64_t corrupt_ GUARDED_BY(mu_) = 0;
};

// Serves reads that carry an If-Match from `cache`, fetching only the blocks it lacks (adjacent
// ones in one read) and caching them. Everything else goes to the wrapped store unchanged.
class DataCacheStore : public ForwardingStore {
 public:
  DataCacheStore(std::shared_ptr<ObjectStore> target, std::shared_ptr<DataCache> cache,
                 Metrics* metrics);
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;

 private:
  std::shared_ptr<DataCache> cache_;
  Metrics* metrics_;
};

}  // namespace objfs
