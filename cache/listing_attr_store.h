// Metadata for S3 listings, kept on this machine between mounts.
//
// An S3 listing gives each object's size, ETag and LastModified but none of its user metadata
// (mode, owner, mtime, extended attributes), so `ls -l` would need a HEAD per file. This wrapper
// keeps what HEADs found in an ObjectMetaRecord of the StoreDb (in the mount's cache directory),
// with the size, ETag and LastModified a listing shows for that object. Any change of an S3
// object, metadata included, rewrites it with a new LastModified, so:
// - list() with ListOptions::want_metadata fills in the metadata (has_metadata = true, mtime_ns
//   the HEAD's date) of every file it lists with exactly the size, ETag and date of a record,
//   and counts it in metrics->attrs_kept. Other files are remembered (in memory, bounded) with
//   the date listed;
// - head() records what it found: against the date a listing showed for that object when the
//   HEAD saw the same size, ETag and second (to the millisecond on RGW), else against the
//   HEAD's own date (whole seconds on S3);
// - a record with a whole-second date matches a listed date in the same second. Whole seconds
//   cannot tell a chmod (a self-copy: same size and ETag) later in that second, so an object
//   with such a date is recorded only once its second is two seconds past. A store whose
//   listings have fractions of seconds (RGW) is recognised by the first such date listed;
// - put(), copy(), set_attributes(), symlink(), remove(), remove_many(), rename() and upload
//   sessions' complete() forget the records of the keys they write, and a listing or HEAD that was
//   under way meanwhile records nothing of those keys: what it saw may be the object before the
//   write.
// A record is a hint: one that cannot be written costs a HEAD at the next mount.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "cache/store_db.h"

namespace objfs {

class ListingAttrStore : public ForwardingStore {
 public:
  // The clock records are judged by (ns since the epoch); tests pass their own.
  using NowFn = std::function<int64_t()>;

  // `metrics` may be null; it must outlive the store. `now` empty: the system clock.
  ListingAttrStore(std::shared_ptr<ObjectStore> inner, std::shared_ptr<StoreDb> db,
                   Metrics* metrics, NowFn now = {});

  // With whole-second dates, an object is recorded only once its date is this far past.
  static constexpr int64_t kSameSecondNs = 2'000'000'000;
  // Files listed without a record and not HEADed yet that are remembered; past it, all are
  // forgotten (their HEADs then record against the HEAD's date).
  static constexpr size_t kMaxListed = 1 << 16;

  Result<ObjectInfo> head(std::string_view key) override;
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
  Result<ObjectInfo> symlink(std::string_view key, std::string_view target,
                             const PutOptions& options) override;
  // Its complete() forgets the record of the key, as put() does.
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;

 private:
  class Session;

  // A file as a listing showed it.
  struct Listed {
    uint64_t size = 0;
    ETag etag;
    int64_t listed_ns = 0;
  };

  // Starts a listing or HEAD: its ticket, for WrittenSinceLocked.
  uint64_t Begin();
  // Ends a listing or HEAD; once none is under way, the writes noted for them are dropped.
  void EndLocked() REQUIRES(mu_);
  // `key` was written since `ticket` was taken: what was seen may be the object before that.
  bool WrittenSinceLocked(uint64_t ticket, std::string_view key) const REQUIRES(mu_);
  // `key` was written by this mount: its record and what listings showed of it go.
  void Written(std::string_view key);

  // The metadata a record keeps for a file listed as `object`, if it still matches.
  bool FillFromRecord(ObjectInfo& object);
  // Records what `head` says of `key`, if it is the object listed as `listed`.
  void Keep(const std::string& key, const Listed& listed, bool precise_dates,
            const ObjectInfo& head);

  std::shared_ptr<StoreDb> db_;
  Metrics* metrics_;
  NowFn now_;
  // A listed date had a fraction of a second: this store's listings are precise.
  std::atomic<bool> precise_dates_{false};

  Mutex mu_;  // lock 24 of fs/lock_order.h: a leaf
  uint64_t next_ticket_ GUARDED_BY(mu_) = 0;
  int in_flight_ GUARDED_BY(mu_) = 0;  // listings and HEADs under way
  // While any is under way: the keys written, with the ticket of the write.
  std::map<std::string, uint64_t, std::less<>> written_ GUARDED_BY(mu_);
  std::map<std::string, Listed, std::less<>> listed_ GUARDED_BY(mu_);
};

}  // namespace objfs
