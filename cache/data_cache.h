// An optional, bounded disk cache of object data that outlives the mount (-o data_cache=DIR).
//
// Reading the same data again (a dataset every epoch, the same headers in every build) should
// not cost the network again, even after a remount, when the kernel's page cache has long let
// go of it. DataCache keeps blocks of `block_size` bytes (the mount's read_buffer), each at its
// own offset in one sparse file per object version ("objects/<name[0..2]>/<name>"), named after
// the mount's URL, the object's key and its version (S3 ETag; size and mtime on SFTP): a changed
// object has a new version, so its old blocks are never found again (they age out). One file per
// version, not per block, so that a random read from the cache costs one disk read: no lookup
// of a block file's name and inode, and no open and close, since the cache keeps the files it
// reads open (at most max_open_files descriptors; the least recently used is closed first, and
// a file whose last block goes is closed and removed). DataCacheStore, a store wrapper under the
// filesystem, serves a read that names the version it expects (If-Match, as every prefetcher read
// does) from the cached blocks and fetches only the missing ones, adjacent missing blocks in one
// ranged read, writing each block as it arrives.
//
// Rules:
// - Versions must be settled: on stores whose version is the size and the mtime in whole
//   seconds (SFTP), a file rewritten within the second keeps its version, so blocks of a
//   version whose mtime is less than two seconds old are neither cached nor served (git's
//   "racily clean" rule; it assumes the server's clock within a second or so of this one).
// - Bounded: the blocks never hold more than max_bytes; every insert first evicts the least
//   recently used blocks (use within a mount; across mounts, the order they were written or
//   last used in before it). An evicted block's range is punched out of its file
//   (FALLOC_FL_PUNCH_HOLE), so the disk space goes with it.
// - Persisted: the index is a RecordTable of DataBlockRecord ("objects.log"), each with the
//   CRC32C of its block, checked on every read; a block that does not match (or is missing, or
//   short) is dropped and fetched again. At open, records without a block are removed, and the
//   ranges of a file no record names (a crash between the two writes) are punched out; files
//   with no record at all are removed. A cache of the earlier layout (a file per block under
//   "blocks/", indexed by "index.log") is removed at open, never read.
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
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/etag.h"
#include "backend/log.h"
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
  // The most object files held open at once (each holds a descriptor).
  size_t max_open_files = 64;
  LogFunction log;  // the one line saying writing stopped
  // Tests: called before each block file is written; a non-ok Status fails that write as a
  // full disk would.
  std::function<Status()> before_write;
  // Tests: called by each eviction before it gives the space back (punches or removes).
  std::function<void()> before_free;
};

class DataCache {
 public:
  struct Stats {
    uint64_t bytes = 0;   // bytes of the blocks held
    uint64_t blocks = 0;  // blocks held
    uint64_t evictions = 0;
    uint64_t corrupt = 0;     // blocks dropped because their bytes did not match their checksum
    uint64_t files = 0;       // object files holding blocks
    uint64_t open_files = 0;  // of them, held open
    bool writing = true;      // false once a write failed
  };

  // Opens (creating) the cache in options.dir: locks it, replays its index and removes what a
  // crash left half written. Fails when another process holds the directory, and when its file
  // system cannot punch holes (eviction could not give space back, and the bound would not hold).
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
  // Has the disk read [offset, offset + length) of `key`'s object file ahead (WILLNEED): the
  // files are read without the kernel's read-ahead, so a read of many blocks asks for them
  // together. Nothing when the object has no file.
  void WillNeed(std::string_view key, const ETag& etag, uint64_t offset, uint64_t length);
  // Whether the block is cached (without reading or checking it).
  bool Contains(std::string_view key, const ETag& etag, uint64_t offset) const;
  // Caches `data` as the block at `offset` (block_size bytes, or fewer for the object's last
  // block). Failures are not returned: they stop writing (see above).
  void Put(std::string_view key, const ETag& etag, uint64_t offset,
           std::span<const std::byte> data);

  Stats stats() const;
  // The file holding a block, at its offset (tests corrupt it).
  std::string BlockPath(std::string_view key, const ETag& etag, uint64_t offset) const;

 private:
  // An open object file; closed when the last user lets go (eviction from the descriptor cache
  // does not cut a read short).
  struct Descriptor {
    explicit Descriptor(int fd) : fd(fd) {}
    ~Descriptor();
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    const int fd;
  };
  // An object file holding blocks.
  struct File {
    uint64_t blocks = 0;  // entries in it, written or being written
    std::shared_ptr<Descriptor> open;
    std::list<std::string>::iterator open_lru;  // in open_lru_ while `open` is set
  };
  struct Entry {
    uint32_t length = 0;
    uint32_t crc32c = 0;
    bool ready = false;  // the block and its record are written
    uint64_t offset = 0;
    std::string file;
    std::list<std::string>::iterator lru;
    // Told apart from an entry of the same name made since: a read whose bytes did not match
    // counts the block as damaged only if its entry is still the one it read.
    uint64_t generation = 0;
  };
  // Disk work an eviction leaves for after the lock: a punch of a block's range, or the removal
  // of a file whose last block went. Until it is done, no block is written where it works.
  struct Freeing {
    std::string file;
    uint64_t offset = 0;
    bool remove = false;
    std::shared_ptr<Descriptor> open = nullptr;  // the file's descriptor if it was open
    uint64_t cost = 0;                           // the disk space it gives back (DiskCost)
  };

  DataCache(DataCacheOptions options, Metrics* metrics, int lock_fd,
            std::unique_ptr<RecordTable<DataBlockRecord>> table);
  Status Load();
  std::string NameOf(std::string_view key, const ETag& etag, uint64_t offset) const;
  std::string FileOf(std::string_view key, const ETag& etag) const;
  std::string PathOf(const std::string& file) const;
  // The open descriptor of `file` (opening it, and creating it when `create`), most recently
  // used now; null when it cannot be opened.
  std::shared_ptr<Descriptor> OpenFile(const std::string& file, bool create) REQUIRES(mu_);
  // Takes the entry `it` out of the index in memory and adds the freeing of its range on disk
  // (the removal of its file with the file's last block) to `later`, for Free once the lock is
  // let go; its record is removed by the caller, outside the lock too.
  void Forget(std::unordered_map<std::string, Entry>::iterator it, std::vector<Freeing>* later)
      REQUIRES(mu_);
  // Does what Forget left in `frees`, outside the lock, then lets blocks be written there again.
  void Free(std::vector<Freeing>& frees) EXCLUDES(mu_);
  // Whether a block at `offset` of `file` would be written where a Free is still at work.
  bool BeingFreed(const std::string& file, uint64_t offset) const REQUIRES(mu_);
  void CloseFile(std::unordered_map<std::string, File>::iterator it) REQUIRES(mu_);
  // Drops the entry `name` if it is still the one of `generation` (a damaged block), and its
  // range and record; true when it was dropped.
  bool Drop(const std::string& name, uint64_t generation);
  void StopWriting(const Status& why);
  void UpdateGauge() REQUIRES(mu_);

  const DataCacheOptions options_;
  Metrics* const metrics_;
  const int lock_fd_;
  const std::unique_ptr<RecordTable<DataBlockRecord>> table_;
  std::atomic<bool> writing_{true};

  mutable Mutex mu_;  // lock 29 of fs/lock_order.h
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  std::list<std::string> lru_ GUARDED_BY(mu_);  // most recently used first
  std::unordered_map<std::string, File> files_ GUARDED_BY(mu_);
  std::list<std::string> open_lru_ GUARDED_BY(mu_);  // open files, most recently used first
  uint64_t bytes_ GUARDED_BY(mu_) = 0;               // of every entry, written or being written
  // What evictions have taken off bytes_ but not yet given back to the disk (a Free under way):
  // still counted against the bound, or the directory would outgrow it by a block per thread.
  uint64_t freeing_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t stamp_ GUARDED_BY(mu_) = 0;  // the last stamp given to a written record
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
  uint64_t corrupt_ GUARDED_BY(mu_) = 0;
  uint64_t generations_ GUARDED_BY(mu_) = 0;  // the last generation given to an entry
  // Files being removed, and ranges (file, offset) being punched, by a Free under way.
  std::unordered_map<std::string, int> removing_ GUARDED_BY(mu_);
  std::map<std::pair<std::string, uint64_t>, int> punching_ GUARDED_BY(mu_);
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
