#include "fs/key_resolver.h"

#include <utility>
#include <vector>

namespace objfs {

namespace {

// A lookup's listing of the parent directory reads one page of this many keys; a larger
// directory is left to per-name requests.
constexpr int kListParentKeys = 1000;

std::string DirPrefix(const std::string& key) { return key.empty() ? "" : key + "/"; }

}  // namespace

Result<MetaRecord> KeyResolver::Resolve(const std::string& key) {
  MetaCache::Hit hit = meta_cache_->Get(key);
  if (key.empty()) {
    if (hit.state == MetaCache::State::kPositive && hit.record.complete) {
      Bump(metrics_->cache_hits);
      return hit.record;
    }
    if (!store_->capabilities().directory_attributes) return Root();
    Bump(metrics_->cache_misses);
    // A mount of a directory that has a mode, an owner and times of its own shows them, as
    // sshfs does: a 0700 directory does not look open to every local user of a shared mount.
    Result<ObjectInfo> root = store_->head("/");
    if (!root.ok()) {
      {
        MutexLock lock(&root_mu_);
        if (last_root_) return *last_root_;
      }
      if (root.status().code() == StatusCode::kNotFound) return Root();
      return root.status();
    }
    MetaRecord rec = attrs_->FromInfo(*root, true);
    rec.complete = true;
    meta_cache_->Put(key, rec);
    MutexLock lock(&root_mu_);
    last_root_ = rec;
    return rec;
  }
  if (hit.state == MetaCache::State::kNegative) {
    Bump(metrics_->cache_hits);
    return NotFoundError("no such file: " + key);
  }
  if (hit.state == MetaCache::State::kPositive) {
    if (hit.record.complete) {
      Bump(metrics_->cache_hits);
      return hit.record;
    }
    if (hit.record.is_dir) {
      Bump(metrics_->cache_misses);
      return ResolveDirectory(key);
    }
  }
  MetaCache::Listed listed = meta_cache_->ListState(key);
  if (listed == MetaCache::Listed::kAbsent) {
    Bump(metrics_->cache_hits);
    meta_cache_->PutNegative(key);
    return NotFoundError("no such file: " + key);
  }
  Bump(metrics_->cache_misses);
  auto head = store_->head(key);
  if (head.ok()) {
    MetaRecord rec = attrs_->FromInfo(*head, false);
    rec.complete = true;
    meta_cache_->Put(key, rec);
    return rec;
  }
  if (head.status().code() != StatusCode::kNotFound) return head.status();
  if (listed == MetaCache::Listed::kUnknown) {
    // Not a file. One listing of the parent directory tells whether it is a directory and,
    // while it is fresh, answers the lookups of its other missing names without a request.
    OBJFS_ASSIGN_OR_RETURN(listed, ListParent(key));
    if (listed == MetaCache::Listed::kAbsent) {
      meta_cache_->PutNegative(key);
      return NotFoundError("no such file or directory: " + key);
    }
  }
  return ResolveDirectory(key);
}

Result<MetaCache::Listed> KeyResolver::ListParent(const std::string& key) {
  size_t slash = key.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : key.substr(0, slash);
  const std::string prefix = DirPrefix(dir);
  ListOptions list;
  list.prefix = prefix;
  list.delimiter = std::string(1, '/');  // (assigning "/" trips a false -Wrestrict of GCC 12)
  list.max_keys = kListParentKeys;
  const uint64_t ticket = meta_cache_->ListingTicket();
  OBJFS_ASSIGN_OR_RETURN(Listing page, store_->list(list));
  std::vector<std::string> names;
  names.reserve(page.objects.size() + page.common_prefixes.size());
  for (const ObjectInfo& obj : page.objects) {
    if (obj.key.size() <= prefix.size()) continue;  // the directory's own marker
    std::string name = obj.key.substr(prefix.size());
    if (name.back() == '/') name.pop_back();
    names.push_back(std::move(name));
  }
  for (const std::string& cp : page.common_prefixes) {
    if (cp.size() <= prefix.size() + 1) continue;
    names.push_back(cp.substr(prefix.size(), cp.size() - prefix.size() - 1));
  }
  meta_cache_->PutListing(dir, std::move(names), page.next_token.empty(), ticket);
  return meta_cache_->ListState(key);
}

Result<MetaRecord> KeyResolver::ResolveDirectory(const std::string& key) {
  if (store_->capabilities().directory_attributes) {
    // Every directory is one on the server, with its own mode, owner and times: never a
    // prefix dated by its first key.
    Result<ObjectInfo> dir = store_->head(key + "/");
    if (!dir.ok()) {
      if (dir.status().code() == StatusCode::kNotFound) meta_cache_->PutNegative(key);
      return dir.status();
    }
    MetaRecord rec = attrs_->FromInfo(*dir, true);
    rec.complete = true;
    meta_cache_->Put(key, rec);
    return rec;
  }
  ListOptions list;
  list.prefix = key + "/";
  list.max_keys = 1;
  OBJFS_ASSIGN_OR_RETURN(Listing listing, store_->list(list));
  if (listing.objects.empty() && listing.common_prefixes.empty()) {
    meta_cache_->PutNegative(key);
    return NotFoundError("no such file or directory: " + key);
  }
  MetaRecord rec;
  if (!listing.objects.empty() && listing.objects.front().key == list.prefix) {
    auto marker = store_->head(list.prefix);
    if (marker.ok()) {
      rec = attrs_->FromInfo(*marker, true);
      rec.complete = true;
    } else if (marker.status().code() != StatusCode::kNotFound) {
      return marker.status();
    } else {
      rec = attrs_->ImplicitDir(listing.objects.front().mtime_ns);
    }
  } else {
    rec = attrs_->ImplicitDir(listing.objects.empty() ? root_mtime_ns_
                                                      : listing.objects.front().mtime_ns);
  }
  meta_cache_->Put(key, rec);
  return rec;
}

}  // namespace objfs
