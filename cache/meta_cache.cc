#include "cache/meta_cache.h"

#include <algorithm>
#include <vector>

namespace objfs {

namespace {
// Bounds of the maps below: past this many entries, an insertion first drops expired ones.
constexpr size_t kSweepThreshold = 100000;
// The entries themselves are swept once they are twice as many as the last sweep left (at
// least this many): a huge listing, whose entries expire a second later, then holds about what
// one attribute timeout brings in, not every name, and sweeping stays O(1) per insertion.
constexpr size_t kMinSlotSweep = 4096;

// "a/b/c" -> ("a/b", "c"); "c" -> ("", "c").
std::pair<std::string, std::string> SplitKey(const std::string& key) {
  size_t slash = key.rfind('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}
}  // namespace

MetaCache::MetaCache(std::shared_ptr<Clock> clock, std::chrono::nanoseconds ttl,
                     std::chrono::nanoseconds negative_ttl)
    : clock_(std::move(clock)), ttl_(ttl), negative_ttl_(negative_ttl) {}

MetaCache::Hit MetaCache::Get(const std::string& key) const {
  Hit hit;
  MutexLock lock(&mu_);
  auto it = slots_.find(key);
  if (it == slots_.end() || it->second.expires <= clock_->now()) return hit;
  if (it->second.negative) {
    hit.state = State::kNegative;
  } else {
    hit.state = State::kPositive;
    hit.record = it->second.record;
  }
  return hit;
}

void MetaCache::Put(const std::string& key, MetaRecord record) {
  auto now = clock_->now();
  MutexLock lock(&mu_);
  NoteChangeLocked(key);  // also when nothing is cached: listings must learn of the key
  if (ttl_.count() <= 0) {
    // Nothing positive is kept (attr_timeout=0), but a "no such file" cached before must go:
    // the key exists now (a mkdir, a rename or a create just made it).
    slots_.erase(key);
    return;
  }
  if (slots_.size() >= sweep_at_) {
    std::erase_if(slots_, [now](const auto& kv) { return kv.second.expires <= now; });
    sweep_at_ = std::max(kMinSlotSweep, 2 * slots_.size());
  }
  Slot& slot = slots_[key];
  slot.negative = false;
  slot.record = std::move(record);
  slot.expires = now + ttl_;
}

void MetaCache::PutNegative(const std::string& key) {
  if (negative_ttl_.count() <= 0) return;
  auto now = clock_->now();
  MutexLock lock(&mu_);
  Slot& slot = slots_[key];
  slot.negative = true;
  slot.record = MetaRecord();
  slot.expires = now + negative_ttl_;
}

void MetaCache::Invalidate(const std::string& key) {
  MutexLock lock(&mu_);
  slots_.erase(key);
  NoteChangeLocked(key);
}

void MetaCache::NoteChangeLocked(const std::string& key) {
  if (key.empty()) return;
  auto [dir, name] = SplitKey(key);
  if (dir_changes_.size() >= kSweepThreshold) {
    dir_changes_.clear();
    cleared_seq_ = change_seq_ + 1;
  }
  dir_changes_[dir] = ++change_seq_;
  auto it = listings_.find(dir);
  if (it != listings_.end()) it->second.names.insert(std::move(name));
}

uint64_t MetaCache::ListingTicket() const {
  MutexLock lock(&mu_);
  return change_seq_;
}

void MetaCache::PutListing(const std::string& dir, std::vector<std::string> names, bool complete,
                           uint64_t ticket) {
  if (negative_ttl_.count() <= 0) return;
  auto now = clock_->now();
  MutexLock lock(&mu_);
  if (cleared_seq_ > ticket) return;
  if (auto changed = dir_changes_.find(dir);
      changed != dir_changes_.end() && changed->second > ticket) {
    return;  // changed while it was being listed
  }
  if (listings_.size() >= kSweepThreshold / 100) {
    std::erase_if(listings_, [now](const auto& kv) { return kv.second.expires <= now; });
  }
  DirListing& listing = listings_[dir];
  listing.complete = complete;
  listing.names.clear();
  for (std::string& name : names) listing.names.insert(std::move(name));
  listing.expires = now + negative_ttl_;
}

MetaCache::Listed MetaCache::ListState(const std::string& key) const {
  if (key.empty()) return Listed::kMaybePresent;
  auto [dir, name] = SplitKey(key);
  MutexLock lock(&mu_);
  auto it = listings_.find(dir);
  if (it == listings_.end() || it->second.expires <= clock_->now()) return Listed::kUnknown;
  if (!it->second.complete) return Listed::kTooLarge;
  return it->second.names.count(name) > 0 ? Listed::kMaybePresent : Listed::kAbsent;
}

void MetaCache::InvalidateTree(const std::string& key) {
  MutexLock lock(&mu_);
  std::string prefix = key.empty() ? "" : key + "/";
  std::erase_if(slots_, [&](const auto& kv) {
    return kv.first == key || kv.first.compare(0, prefix.size(), prefix) == 0;
  });
  std::erase_if(listings_, [&](const auto& kv) {
    return kv.first == key || kv.first.compare(0, prefix.size(), prefix) == 0;
  });
  NoteChangeLocked(key);
}

void MetaCache::Clear() {
  MutexLock lock(&mu_);
  slots_.clear();
  listings_.clear();
}

size_t MetaCache::size() const {
  MutexLock lock(&mu_);
  return slots_.size();
}

}  // namespace objfs
