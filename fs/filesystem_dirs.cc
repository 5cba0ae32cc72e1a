// Filesystem: mkdir, rmdir, unlink, mknod, symlink and readlink.
#include <sys/stat.h>

#include "fs/filesystem.h"
#include "fs/object_metadata.h"

namespace objfs {

namespace {

// ok when nothing is at `key`, AlreadyExists when something is, or the lookup's error.
Status ExpectAbsent(const Result<MetaRecord>& rec, const std::string& key) {
  if (rec.ok()) return AlreadyExistsError(key + " exists");
  if (rec.status().code() == StatusCode::kNotFound) return Status::Ok();
  return rec.status();
}

}  // namespace

bool Filesystem::HasLocalFile(const std::string& key) {
  uint64_t ino = inodes_.InoOf(key);
  if (ino == 0) return false;
  auto inode = inodes_.Get(ino);
  return inode != nullptr && LocalAttr(*inode, ino).has_value();
}

Result<Entry> Filesystem::MkDir(uint64_t parent, std::string_view name, uint32_t mode,
                                const std::optional<Owner>& caller) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, NewChildKey(parent, name, /*for_directory=*/true));
  if (HasLocalFile(key)) return AlreadyExistsError(key + " exists");
  meta_cache_.Invalidate(key);
  OBJFS_RETURN_IF_ERROR(ExpectAbsent(Resolve(key), key));
  Metadata metadata;
  int64_t now = NowNs();
  bool setgid = false;
  const Owner owner = NewOwner(parent, caller, &setgid);
  SetPosixMetadata(S_IFDIR | (mode & 07777) | (setgid ? S_ISGID : 0), owner.uid, owner.gid, now,
                   &metadata);
  PutOptions put;
  put.metadata = metadata;
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, store_->put(key + "/", MemorySource(""), put));
  info.metadata = metadata;
  info.has_metadata = true;
  MetaRecord rec = RecordFromInfo(info, true);
  rec.complete = true;
  meta_cache_.Put(key, rec);
  EntryChanged(key);
  ParentChanged(key);
  uint64_t ino = inodes_.Acquire(key, 1);
  return MakeEntry(AttrFromRecord(ino, rec), true);
}

Status Filesystem::RmDir(uint64_t parent, std::string_view name) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, ChildKey(parent, name));
  meta_cache_.Invalidate(key);
  OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
  if (!rec.is_dir) return Status(StatusCode::kNotDirectory, key + " is not a directory");
  // A directory of old s3fs's kind, told by an object without the slash: removing the
  // directory removes that object; one that holds bytes is another client's data. (Not a
  // store whose directories are its own: SFTP's.)
  if (store_->capabilities().directory_attributes) rec.slashless_object.reset();
  if (rec.slashless_object.value_or(0) != 0) {
    return NotEmptyError(key + " is not empty: its object " + key + " holds " +
                         std::to_string(*rec.slashless_object) + " bytes");
  }
  const std::string marker = key + "/";
  ListOptions list;
  list.prefix = marker;
  list.max_keys = 2;
  OBJFS_ASSIGN_OR_RETURN(Listing listing, store_->list(list));
  uint64_t marker_bytes = 0;
  for (const ObjectInfo& obj : listing.objects) {
    // (Named: it may be one no name can show, such as "dir/../x" or "dir//x".)
    if (obj.key != marker) return NotEmptyError(key + " is not empty: it holds " + obj.key);
    marker_bytes = obj.size;
  }
  // Another client's data stored under the marker's name: removing the directory would delete
  // it.
  if (marker_bytes != 0) {
    return NotEmptyError(key + " is not empty: its object " + marker + " holds " +
                         std::to_string(marker_bytes) + " bytes");
  }
  if (!listing.common_prefixes.empty()) return NotEmptyError(key + " is not empty");
  for (const auto& [ino, inode] : inodes_.WithLocalData(key)) {
    // (A file removed while open keeps its old key but no name: it holds nothing here.)
    auto child = inodes_.KeyOf(ino);
    if (child && *child != key && inodes_.InoOf(*child) == ino) {
      return NotEmptyError(key + " is not empty");
    }
  }
  OBJFS_RETURN_IF_ERROR(store_->remove(marker));
  if (rec.slashless_object) OBJFS_RETURN_IF_ERROR(store_->remove(key));
  meta_cache_.InvalidateTree(key);
  ParentChanged(key);
  inodes_.Unbind(key);
  ForgetDirTimes(key);
  EntryChanged(key);
  return Status::Ok();
}

Status Filesystem::Unlink(uint64_t parent, std::string_view name) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, ChildKey(parent, name));
  for (;;) {
    uint64_t ino = inodes_.InoOf(key);
    std::shared_ptr<Inode> inode = ino ? inodes_.Get(ino) : nullptr;
    // An upload of the file holds its lock from start to end: the removal waits for it, or its
    // PUT, landing after the DELETE, would bring the file back; an upload after the removal
    // finds the inode unlinked.
    OptionalInodeLock lock(inode.get());
    if (inodes_.InoOf(key) != ino) continue;  // renamed or replaced while waiting for it
    return UnlinkLocked(key, ino, inode.get());
  }
}

Status Filesystem::UnlinkLocked(const std::string& key, uint64_t ino, Inode* inode) {
  // Created here and never uploaded, the file has nothing on the server: one of that name
  // there is another client's, made since, and stays.
  const bool only_here = inode != nullptr && inode->unsaved() && !inode->in_store;
  bool local_only = only_here;
  auto rec = only_here ? Result<MetaRecord>(NotFoundError(key)) : Resolve(key);
  if (!only_here && !rec.ok()) {
    if (rec.status().code() != StatusCode::kNotFound) return rec.status();
    if (inode == nullptr || !LocalAttrLocked(*inode, ino)) return rec.status();
    local_only = true;  // created here, never uploaded
  } else if (!only_here && rec->is_dir) {
    return Status(StatusCode::kIsDirectory, key + " is a directory");
  }
  if (!local_only) {
    // No crash record may outlive the object: the next mount would upload the file again.
    // Should the removal fail, they come back, and with them what close accepted.
    std::optional<StagedFile::State> staged_state, copy_state;
    // The removal on the server (and the fetch that keeps an open file readable) holds the
    // file's lock: stat and listings show it as it was until it is gone.
    std::optional<ServerWorkScope> removing;
    if (inode != nullptr) removing.emplace(*inode, AttrFromRecord(0, *rec));
    if (inode != nullptr) writer_->KeepStagedReadable(*inode);  // before its object goes
    if (inode != nullptr && inode->staged) staged_state = inode->staged->Orphan();
    if (inode != nullptr && inode->accepted_copy) copy_state = inode->accepted_copy->Orphan();
    Status removed = inode != nullptr && inode->unsaved() ? RemoveEdited(*inode, key, "rm")
                                                          : store_->remove(key);
    if (!removed.ok()) {
      if (inode != nullptr) {
        Status restored = inode->staged ? inode->staged->Restore(staged_state) : Status::Ok();
        if (restored.ok() && inode->accepted_copy) {
          restored = inode->accepted_copy->Restore(copy_state);
        }
        if (!restored.ok())
          Log(LogLevel::kWarn, "no crash record for " + key + ": " + restored.message());
      }
      return removed;
    }
  }
  meta_cache_.Invalidate(key);
  if (!local_only) ParentChanged(key);
  if (inode != nullptr && !inode->staged && rec.ok()) {
    // What fstat of a handle still open shows from now on.
    inode->attr = AttrFromRecord(ino, *rec);
    inode->extra_metadata = WithoutPosixMetadata(rec->metadata);
  }
  if (inode != nullptr) writer_->Discard(*inode);
  inodes_.Unbind(key);
  EntryChanged(key);
  return Status::Ok();
}

Status Filesystem::RemoveEdited(Inode& inode, const std::string& key, std::string_view op) {
  const std::optional<ETag> edited = FileWriter::KeptBase(inode, key);
  Status removed =
      edited ? store_->remove_if_match(key, *edited, /*known_current=*/false) : store_->remove(key);
  if (removed.code() == StatusCode::kPreconditionFailed) {
    Log(LogLevel::kInfo, std::string(op) + " " + key + ": another client stored a version of it " +
                             "since this mount's unsaved edit began, and it stays (" +
                             removed.message() + ")");
    return Status::Ok();
  }
  return removed.code() == StatusCode::kNotFound ? Status::Ok() : removed;
}

Result<Entry> Filesystem::MkNod(uint64_t parent, std::string_view name, uint32_t mode,
                                uint64_t rdev, const std::optional<Owner>& caller) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, NewChildKey(parent, name));
  const uint32_t type = mode & S_IFMT;
  if (type != S_IFIFO && type != S_IFSOCK && type != S_IFCHR && type != S_IFBLK) {
    return Status(StatusCode::kNotPermitted, key + ": mknod makes FIFOs, sockets and devices");
  }
  if (!special_files_) {
    return Status(StatusCode::kNotPermitted,
                  key + ": this store cannot keep FIFOs, sockets or devices");
  }
  if (HasLocalFile(key)) return AlreadyExistsError(key + " exists");
  meta_cache_.Invalidate(key);
  OBJFS_RETURN_IF_ERROR(ExpectAbsent(Resolve(key), key));
  Metadata metadata;
  const Owner owner = NewOwner(parent, caller);
  SetPosixMetadata(type | (mode & 07777), owner.uid, owner.gid, NowNs(), &metadata);
  if (type == S_IFCHR || type == S_IFBLK) metadata[kRdevMetadata] = std::to_string(rdev);
  PutOptions put;
  put.metadata = metadata;
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, store_->put(key, MemorySource(""), put));
  info.metadata = metadata;
  info.has_metadata = true;
  MetaRecord rec = RecordFromInfo(info, false);
  rec.complete = true;
  meta_cache_.Put(key, rec);
  EntryChanged(key);
  uint64_t ino = inodes_.Acquire(key, 1);
  return MakeEntry(AttrFromRecord(ino, rec), true);
}

Result<Entry> Filesystem::Symlink(std::string_view target, uint64_t parent, std::string_view name,
                                  const std::optional<Owner>& caller) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, NewChildKey(parent, name));
  if (HasLocalFile(key)) return AlreadyExistsError(key + " exists");
  meta_cache_.Invalidate(key);
  OBJFS_RETURN_IF_ERROR(ExpectAbsent(Resolve(key), key));
  Metadata metadata;
  const Owner owner = NewOwner(parent, caller);
  SetPosixMetadata(S_IFLNK | 0777, owner.uid, owner.gid, NowNs(), &metadata);
  PutOptions put;
  put.metadata = metadata;
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, store_->symlink(key, target, put));
  info.size = target.size();
  info.metadata = metadata;
  info.has_metadata = true;
  MetaRecord rec = RecordFromInfo(info, false);
  rec.complete = true;
  meta_cache_.Put(key, rec);
  EntryChanged(key);
  ParentChanged(key);
  uint64_t ino = inodes_.Acquire(key, 1);
  return MakeEntry(AttrFromRecord(ino, rec), true);
}

Result<std::string> Filesystem::ReadLink(uint64_t ino) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
  if ((rec.mode & S_IFMT) != S_IFLNK) {
    return InvalidArgumentError(key + " is not a symbolic link");
  }
  // Another writer's object may say it is a link and hold gigabytes: no target longer than a
  // path is fetched into memory. (Nor given to the kernel, which would refuse it and fail
  // readlink with EIO: an SFTP server answers with the target itself.)
  Result<std::string> target =
      rec.size > kMaxLinkTarget ? LinkTargetTooLong(key, rec.size) : store_->read_link(key);
  if (target.ok() && target->size() > kMaxLinkTarget) {
    target = LinkTargetTooLong(key, target->size());
  }
  if (!target.ok() && target.status().code() == StatusCode::kNameTooLong) {
    Log(LogLevel::kWarn, "readlink: " + target.status().message());
  }
  return target;
}

}  // namespace objfs
