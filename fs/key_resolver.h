// What a key of the store is: a file (its object), a directory (its marker object, or only a
// prefix of other keys), or nothing, answered from the metadata cache when it can be and with as
// few requests as possible when not (a HEAD for a file; for a name that is none, one listing of
// its parent, which then answers the lookups of the parent's other missing names too).
//
// It exists apart from Filesystem because every call that names a file starts here, and the
// rules (a negative entry answers at once, a fresh listing proves absence, an implicit
// directory has the mount's defaults) are one job with tests of their own over the in-memory
// store, counting requests. It keeps no state of its own beyond the cache it fills.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/status.h"
#include "cache/meta_cache.h"
#include "fs/object_attrs.h"

namespace objfs {

class KeyResolver {
 public:
  // Every pointer must outlive this. `root_mtime_ns`: the root's (and a prefix-only directory's
  // without any object to date it) mtime.
  KeyResolver(ObjectStore* store, MetaCache* meta_cache, const ObjectAttrs* attrs, Metrics* metrics,
              int64_t root_mtime_ns)
      : store_(store),
        meta_cache_(meta_cache),
        attrs_(attrs),
        metrics_(metrics),
        root_mtime_ns_(root_mtime_ns) {}

  // The record of `key` ("" is the root): a file, symbolic link or directory. NotFound when
  // nothing is there (cached for the negative timeout). A complete fresh cache entry costs
  // nothing, a file one HEAD, a directory a HEAD and a one-key listing (on a store with
  // directory_attributes, two HEADs: the second of its marker). The root is the mount's defaults
  // (Root), except on a store with directory_attributes, where it is the server's directory
  // (its marker "/", cached as any entry). While the server does not answer it is the one the
  // server last gave (never the defaults: a 0700 directory must not look open to every local
  // user of a shared mount during an outage), or the failure before any; the defaults when the
  // server has no such directory and gave none before.
  Result<MetaRecord> Resolve(const std::string& key);

  // The root's attributes as this mount changed them (chmod, chown, touch): what it shows while
  // the server does not answer.
  void RootChanged(const MetaRecord& rec) {
    MutexLock lock(&root_mu_);
    last_root_ = rec;
  }

  // The root directory's record from the mount's defaults.
  MetaRecord Root() const { return attrs_->ImplicitDir(root_mtime_ns_); }

 private:
  Result<MetaRecord> ResolveDirectory(const std::string& key);
  // Lists the directory holding `key` (one page) into the metadata cache and returns what the
  // listing says of `key`.
  Result<MetaCache::Listed> ListParent(const std::string& key);

  ObjectStore* store_;
  MetaCache* meta_cache_;
  const ObjectAttrs* attrs_;
  Metrics* metrics_;
  int64_t root_mtime_ns_;
  Mutex root_mu_;  // lock 35 of fs/lock_order.h; a leaf
  std::optional<MetaRecord> last_root_ GUARDED_BY(root_mu_);
};

}  // namespace objfs
