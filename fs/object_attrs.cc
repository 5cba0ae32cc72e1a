#include "fs/object_attrs.h"

#include <sys/stat.h>

#include "fs/object_metadata.h"

namespace objfs {

namespace {
constexpr uint64_t kDirectorySize = 4096;

// A FIFO, socket or device: a zero-byte object whose "mode" has that type.
bool IsSpecialType(uint32_t type) {
  return type == S_IFIFO || type == S_IFSOCK || type == S_IFCHR || type == S_IFBLK;
}
}  // namespace

MetaRecord ObjectAttrs::FromInfo(const ObjectInfo& info, bool is_dir) const {
  MetaRecord rec;
  PosixMetadata posix = ParsePosixMetadata(info.metadata);
  if (posix.mode && S_ISDIR(*posix.mode) && !is_dir) {
    is_dir = true;
    rec.slashless_object = info.size;
  }
  rec.is_dir = is_dir;
  rec.complete = info.has_metadata;
  rec.has_object = true;
  uint32_t type = is_dir ? S_IFDIR : S_IFREG;
  uint32_t perms = (is_dir ? defaults_.dir_mode : defaults_.file_mode) & ~defaults_.umask & 07777;
  if (posix.mode) {
    uint32_t t = *posix.mode & S_IFMT;
    if (is_dir) {
      t = S_IFDIR;
    } else if (t != S_IFREG && t != S_IFLNK && !IsSpecialType(t)) {
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
  rec.encryption = info.encryption;
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
  attr.mtime_ns = rec.mtime_ns;
  attr = WithStoredTimes(attr, rec.metadata);
  // A directory's link count would be 2 + its subdirectories, which only a listing can tell: 1,
  // as btrfs and other file systems without such counts report, tells find(1) and fts not to
  // rely on it (they then look at every entry instead of stopping after nlink - 2 directories).
  attr.nlink = 1;
  const uint32_t type = rec.mode & S_IFMT;
  if (type == S_IFCHR || type == S_IFBLK) attr.rdev = ParseRdev(rec.metadata);
  return attr;
}

FileAttr WithStoredTimes(FileAttr attr, const Metadata& metadata) {
  const StoredTimes times = StoredTimesOf(metadata, attr.mtime_ns);
  attr.atime_ns = times.atime_ns;
  attr.ctime_ns = times.ctime_ns;
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
  info.encryption = rec.encryption;
  return info;
}

}  // namespace objfs
