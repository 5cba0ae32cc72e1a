#include "fs/object_attrs.h"

#include <sys/stat.h>

#include "fs/object_metadata.h"

namespace objfs {

namespace {
constexpr uint64_t kDirectorySize = 4096;
}  // namespace

MetaRecord ObjectAttrs::FromInfo(const ObjectInfo& info, bool is_dir) const {
  MetaRecord rec;
  PosixMetadata posix = ParsePosixMetadata(info.metadata);
  if (posix.mode && S_ISDIR(*posix.mode)) is_dir = true;
  rec.is_dir = is_dir;
  rec.complete = info.has_metadata;
  rec.has_object = true;
  uint32_t type = is_dir ? S_IFDIR : S_IFREG;
  uint32_t perms = (is_dir ? defaults_.dir_mode : defaults_.file_mode) & ~defaults_.umask & 07777;
  if (posix.mode) {
    uint32_t t = *posix.mode & S_IFMT;
    if (is_dir) {
      t = S_IFDIR;
    } else if (t != S_IFREG && t != S_IFLNK) {
      t = S_IFREG;
    }
    type = t;
    perms = *posix.mode & 07777;
  }
  rec.mode = type | perms;
  rec.uid = posix.uid.value_or(defaults_.uid);
  rec.gid = posix.gid.value_or(defaults_.gid);
  rec.size = is_dir ? 0 : info.size;
  rec.mtime_ns = posix.mtime_ns.value_or(info.mtime_ns);
  rec.etag = info.etag;
  rec.metadata = info.metadata;
  return rec;
}

MetaRecord ObjectAttrs::ImplicitDir(int64_t mtime_ns) const {
  MetaRecord rec;
  rec.is_dir = true;
  rec.complete = true;
  rec.has_object = false;
  rec.mode = S_IFDIR | (defaults_.dir_mode & ~defaults_.umask & 07777);
  rec.uid = defaults_.uid;
  rec.gid = defaults_.gid;
  rec.mtime_ns = mtime_ns;
  return rec;
}

FileAttr ObjectAttrs::ToAttr(uint64_t ino, const MetaRecord& rec) {
  FileAttr attr;
  attr.ino = ino;
  attr.mode = rec.mode;
  attr.uid = rec.uid;
  attr.gid = rec.gid;
  attr.size = rec.is_dir ? kDirectorySize : rec.size;
  attr.mtime_ns = attr.ctime_ns = attr.atime_ns = rec.mtime_ns;
  // Reads never move it: noatime.
  if (auto atime = rec.metadata.find(kAtimeMetadata); atime != rec.metadata.end()) {
    attr.atime_ns = ParseMtime(atime->second).value_or(attr.atime_ns);
  }
  attr.nlink = rec.is_dir ? 2 : 1;
  return attr;
}

ObjectInfo InfoFromRecord(const std::string& key, const MetaRecord& rec) {
  ObjectInfo info;
  info.key = key;
  info.size = rec.size;
  info.etag = rec.etag;
  info.mtime_ns = rec.mtime_ns;
  info.metadata = rec.metadata;
  info.has_metadata = rec.complete;
  return info;
}

}  // namespace objfs
