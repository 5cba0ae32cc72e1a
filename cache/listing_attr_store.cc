#include "cache/listing_attr_store.h"

#include <chrono>
#include <utility>

namespace objfs {
namespace {

constexpr int64_t kNsPerSecond = 1'000'000'000;

bool IsMarker(std::string_view key) { return !key.empty() && key.back() == '/'; }

int64_t WholeSeconds(int64_t ns) {
  return ns >= 0 ? ns / kNsPerSecond : (ns - (kNsPerSecond - 1)) / kNsPerSecond;
}

int64_t SystemNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ListingAttrStore::ListingAttrStore(std::shared_ptr<ObjectStore> inner, std::shared_ptr<StoreDb> db,
                                   Metrics* metrics, NowFn now)
    : ForwardingStore(std::move(inner)),
      db_(std::move(db)),
      metrics_(metrics),
      now_(now ? std::move(now) : NowFn(SystemNowNs)) {}

uint64_t ListingAttrStore::Begin() {
  MutexLock lock(&mu_);
  ++in_flight_;
  return next_ticket_++;
}

void ListingAttrStore::EndLocked() {
  if (--in_flight_ == 0) written_.clear();
}

bool ListingAttrStore::WrittenSinceLocked(uint64_t ticket, std::string_view key) const {
  auto it = written_.find(key);
  return it != written_.end() && it->second >= ticket;
}

void ListingAttrStore::Written(std::string_view key) {
  {
    MutexLock lock(&mu_);
    if (auto it = listed_.find(key); it != listed_.end()) listed_.erase(it);
    if (in_flight_ > 0) written_[std::string(key)] = next_ticket_++;
  }
  Result<std::optional<ObjectMetaRecord>> kept = db_->Get<ObjectMetaRecord>(key);
  if (kept.ok() && kept->has_value()) (void)db_->Remove<ObjectMetaRecord>(key);
}

bool ListingAttrStore::FillFromRecord(ObjectInfo& object) {
  if (object.etag.empty()) return false;
  Result<std::optional<ObjectMetaRecord>> kept = db_->Get<ObjectMetaRecord>(object.key);
  if (!kept.ok() || !kept->has_value()) return false;
  const ObjectMetaRecord& r = **kept;
  // A record kept with a whole-second date (from a HEAD, or a listing without fractions)
  // matches in whole seconds: Keep recorded it only once that second was two seconds past.
  const bool same_date = r.listed_ns % kNsPerSecond == 0
                             ? WholeSeconds(r.listed_ns) == WholeSeconds(object.mtime_ns)
                             : r.listed_ns == object.mtime_ns;
  if (r.size != object.size || r.etag != object.etag || !same_date) return false;
  object.mtime_ns = r.modified_ns;  // as the HEAD gave it
  object.metadata = r.metadata;
  object.has_metadata = true;
  if (metrics_ != nullptr) Bump(metrics_->attrs_kept);
  return true;
}

void ListingAttrStore::Keep(const std::string& key, const Listed& listed, bool precise_dates,
                            const ObjectInfo& head) {
  if (listed.etag.empty() || IsMarker(key)) return;
  // With whole-second dates, a chmod (a self-copy: same size and ETag) later in the same second
  // would list exactly as this: only objects older than that are kept. (A date that happens to
  // fall on a whole second is matched as one: FillFromRecord.)
  if ((!precise_dates || listed.listed_ns % kNsPerSecond == 0) &&
      now_() - listed.listed_ns < kSameSecondNs) {
    return;
  }
  // Only a HEAD of the object the listing showed (a HEAD's date has whole seconds).
  if (head.size != listed.size || head.etag != listed.etag ||
      WholeSeconds(head.mtime_ns) != WholeSeconds(listed.listed_ns)) {
    return;
  }
  ObjectMetaRecord r;
  r.key = key;
  r.size = listed.size;
  r.listed_ns = listed.listed_ns;
  r.modified_ns = head.mtime_ns;
  r.metadata = head.metadata;
  r.etag = listed.etag;
  (void)db_->Put(r);  // a cache: a failed write costs a HEAD at the next mount
}

Result<ObjectInfo> ListingAttrStore::head(std::string_view key) {
  const uint64_t ticket = Begin();
  Result<ObjectInfo> result = ForwardingStore::head(key);
  Listed listed;
  bool from_listing = false;
  bool written = false;
  {
    MutexLock lock(&mu_);
    written = WrittenSinceLocked(ticket, key);
    if (auto it = listed_.find(key); it != listed_.end()) {
      // One HEAD per listing: the next listing shows the object again if it is still unknown.
      if (result.ok()) {
        listed = it->second;
        from_listing = true;
      }
      if (result.ok() || result.status().code() == StatusCode::kNotFound) listed_.erase(it);
    }
  }
  if (!result.ok() || written || IsMarker(key)) {
    MutexLock lock(&mu_);
    EndLocked();
    return result;
  }
  // Still counted as under way while it records: a write finishing meanwhile is noted, and
  // either is seen below or removes the record itself after this wrote it.
  if (from_listing) {
    Keep(std::string(key), listed, precise_dates_.load(), *result);
  } else {
    // Against the HEAD's own date, in whole seconds.
    Keep(std::string(key), Listed{result->size, result->etag, result->mtime_ns}, false, *result);
  }
  bool written_meanwhile = false;
  {
    MutexLock lock(&mu_);
    written_meanwhile = WrittenSinceLocked(ticket, key);
    EndLocked();
  }
  if (written_meanwhile) (void)db_->Remove<ObjectMetaRecord>(key);
  return result;
}

Result<Listing> ListingAttrStore::list(const ListOptions& options) {
  // Names only (a lookup's look at the parent, a rename's walk): nothing to fill in.
  if (!options.want_metadata) return ForwardingStore::list(options);
  const uint64_t ticket = Begin();
  Result<Listing> result = ForwardingStore::list(options);
  if (!result.ok()) {
    MutexLock lock(&mu_);
    EndLocked();
    return result;
  }
  for (const ObjectInfo& object : result->objects) {
    if (object.mtime_ns % kNsPerSecond != 0) {
      precise_dates_.store(true);
      break;
    }
  }
  // Written by this mount while the listing was under way: the listing may predate it.
  std::vector<bool> skip(result->objects.size(), false);
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < result->objects.size(); ++i) {
      skip[i] = WrittenSinceLocked(ticket, result->objects[i].key);
    }
  }
  // Files without a record that still matches, for the HEADs that may follow.
  std::vector<size_t> unknown;
  for (size_t i = 0; i < result->objects.size(); ++i) {
    ObjectInfo& object = result->objects[i];
    if (skip[i] || IsMarker(object.key) || object.has_metadata || object.etag.empty()) continue;
    if (!FillFromRecord(object)) unknown.push_back(i);
  }
  MutexLock lock(&mu_);
  for (size_t i : unknown) {
    const ObjectInfo& object = result->objects[i];
    if (WrittenSinceLocked(ticket, object.key)) continue;
    // Only a hint: past the bound, what was listed goes (those HEADs record their own date).
    if (listed_.size() >= kMaxListed) listed_.clear();
    listed_[object.key] = Listed{object.size, object.etag, object.mtime_ns};
  }
  EndLocked();
  return result;
}

Result<ObjectInfo> ListingAttrStore::put(std::string_view key, const ByteSource& source,
                                         const PutOptions& options) {
  Result<ObjectInfo> result = ForwardingStore::put(key, source, options);
  Written(key);
  return result;
}

class ListingAttrStore::Session : public ForwardingUpload {
 public:
  Session(std::unique_ptr<Upload> target, ListingAttrStore* store)
      : ForwardingUpload(std::move(target)), store_(store) {}
  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    Result<ObjectInfo> result = ForwardingUpload::complete(size, options);
    store_->Written(key());
    return result;
  }

 private:
  ListingAttrStore* store_;
};

Result<std::unique_ptr<Upload>> ListingAttrStore::start_upload(std::string_view key,
                                                               const UploadOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload,
                         ForwardingStore::start_upload(key, options));
  return std::unique_ptr<Upload>(std::make_unique<Session>(std::move(upload), this));
}

Result<ObjectInfo> ListingAttrStore::copy(const ObjectInfo& src, std::string_view dst,
                                          const CopyOptions& options) {
  Result<ObjectInfo> result = ForwardingStore::copy(src, dst, options);
  Written(dst);
  return result;
}

Result<ObjectInfo> ListingAttrStore::set_attributes(std::string_view key, const Metadata& metadata,
                                                    const SetAttributesOptions& options) {
  Result<ObjectInfo> result = ForwardingStore::set_attributes(key, metadata, options);
  Written(key);
  return result;
}

Status ListingAttrStore::remove(std::string_view key) {
  Status status = ForwardingStore::remove(key);
  Written(key);
  return status;
}

Status ListingAttrStore::remove_if_match(std::string_view key, const ETag& etag,
                                         bool known_current) {
  Status status = ForwardingStore::remove_if_match(key, etag, known_current);
  Written(key);
  return status;
}

Status ListingAttrStore::remove_many(const std::vector<std::string>& keys) {
  Status status = ForwardingStore::remove_many(keys);
  for (const std::string& key : keys) Written(key);
  return status;
}

Status ListingAttrStore::rename(std::string_view from, std::string_view to) {
  Status status = ForwardingStore::rename(from, to);
  Written(from);
  Written(to);
  return status;
}

Result<ObjectInfo> ListingAttrStore::symlink(std::string_view key, std::string_view target,
                                             const PutOptions& options) {
  Result<ObjectInfo> result = ForwardingStore::symlink(key, target, options);
  Written(key);
  return result;
}

}  // namespace objfs
