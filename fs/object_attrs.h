// How the store's objects become the attributes the mount shows: the record of an object (its
// mode, owner and mtime from the s3fs metadata names, or the mount's defaults where they are
// missing; a directory from its marker or from a prefix alone), and the stat attributes of a
// record.
//
// It exists apart from Filesystem because every part that reads or writes objects (lookups,
// listings, uploads, copies, held metadata changes) turns an ObjectInfo into a MetaRecord the
// same way, and the defaults (-o uid, gid, umask, file_mode, dir_mode) are the whole of its
// state: a value that is cheap to test on its own.
#pragma once

#include <cstdint>
#include <string>

#include "backend/object_store.h"
#include "cache/meta_cache.h"
#include "fs/file_attr.h"

namespace objfs {

// The attributes of objects that carry none of their own.
struct AttrDefaults {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t umask = 0022;
  uint32_t file_mode = 0644;
  uint32_t dir_mode = 0755;
};

class ObjectAttrs {
 public:
  explicit ObjectAttrs(AttrDefaults defaults) : defaults_(defaults) {}

  // The record of the object `info` (a directory's marker when `is_dir`, or when its "mode"
  // says so). Complete when the info carries the object's metadata.
  MetaRecord FromInfo(const ObjectInfo& info, bool is_dir) const;
  // A directory that exists only as a prefix of other keys (or the root), dated `mtime_ns`.
  MetaRecord ImplicitDir(int64_t mtime_ns) const;
  // What stat shows of `rec` as inode `ino`.
  static FileAttr ToAttr(uint64_t ino, const MetaRecord& rec);

  const AttrDefaults& defaults() const { return defaults_; }

 private:
  AttrDefaults defaults_;
};

// `attr` with the access and change times that `metadata` (an object's, or what an inode keeps
// beside its attributes) names, or its mtime for those it does not name.
FileAttr WithStoredTimes(FileAttr attr, const Metadata& metadata);

// The object a record describes (its key, size, ETag, mtime and metadata), for a read or a
// conditional request.
ObjectInfo InfoFromRecord(const std::string& key, const MetaRecord& rec);

}  // namespace objfs
