// Filesystem: chmod, chown, utimens, truncate and extended attributes.
#include <sys/stat.h>

#include "backend/etag.h"
#include "backend/md5.h"
#include "fs/errno_map.h"
#include "fs/filesystem.h"
#include "fs/object_metadata.h"
#include "fs/xattr.h"

namespace objfs {

namespace {

// The whole user metadata of an object with attributes `attr` and other metadata `extra`.
Metadata FullMetadata(const FileAttr& attr, const Metadata& extra) {
  Metadata metadata = extra;
  SetPosixMetadata(attr.mode, attr.uid, attr.gid, attr.mtime_ns, &metadata);
  return metadata;
}

}  // namespace

Result<FileAttr> Filesystem::MutateMetadata(
    uint64_t ino, const std::function<Status(FileAttr&, Metadata&)>& change) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  // A change may not take the metadata over options.max_metadata: the server would refuse the
  // upload or copy. (One that does not grow it is not refused: the object already has it.)
  const int64_t now = NowNs();
  auto mutate = [&](FileAttr& attr, Metadata& extra) -> Status {
    const Metadata full_before = FullMetadata(attr, extra);
    const size_t before = MetadataSize(full_before);
    OBJFS_RETURN_IF_ERROR(change(attr, extra));
    const size_t after = MetadataSize(FullMetadata(attr, extra));
    if (options_.max_metadata > 0 && after > options_.max_metadata && after > before) {
      return NoSpaceError("the metadata of " + key + " would take " + std::to_string(after) +
                          " bytes, over max_metadata=" + std::to_string(options_.max_metadata));
    }
    // A change moves the ctime (one that changes nothing costs nothing, and moves nothing). It
    // rides in the same copy; where a first ctime would take the metadata over max_metadata, the
    // object goes without (and shows its mtime).
    if (FullMetadata(attr, extra) != full_before) {
      Metadata with_ctime = extra;
      with_ctime[kCtimeMetadata] = FormatMtime(now);
      const size_t size = MetadataSize(FullMetadata(attr, with_ctime));
      if (options_.max_metadata == 0 || size <= options_.max_metadata || size <= after) {
        extra = std::move(with_ctime);
      }
    }
    attr = WithStoredTimes(attr, extra);
    return Status::Ok();
  };
  // The root of a bucket or prefix has no object to keep them; an SFTP directory has its own.
  if (key.empty() && !store_->capabilities().directory_attributes) {
    return UnsupportedError("the root directory's attributes cannot be changed");
  }
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  if (inode == nullptr) return NotFoundError("unknown inode " + std::to_string(ino));
  MutexLock lock(&inode->mu);
  ++inode->metadata_changes;
  // The change rides along with the pending upload.
  if (inode->unsaved()) {
    const FileAttr before = inode->attr;
    Result<FileAttr> changed = writer_->ChangeUnsavedMetadata(ino, *inode, key, mutate);
    if (changed.ok() && inode->unsaved() && inode->staged &&
        inode->staged->state() == StagedFile::State::kWriting) {
      if ((before.mode & 07777) != (inode->attr.mode & 07777)) inode->set_while_written |= kSetMode;
      if (before.uid != inode->attr.uid) inode->set_while_written |= kSetUid;
      if (before.gid != inode->attr.gid) inode->set_while_written |= kSetGid;
    }
    return changed;
  }
  if (inode->pending_metadata && !inode->removed()) {
    // An earlier change still waits: this one joins it.
    FileAttr attr = inode->attr;
    Metadata extra = inode->extra_metadata;
    OBJFS_RETURN_IF_ERROR(mutate(attr, extra));
    const uint64_t size = inode->pending_metadata->object.size;
    OBJFS_RETURN_IF_ERROR(writer_->JoinHeldMetadata(*inode, key, attr, extra));
    attr.ino = ino;
    attr.size = size;
    return attr;
  }
  if (inode->removed()) {
    // Removed while open: no object is this file's any more (its old name may be another
    // file's by now). Only the attributes its open handles see change.
    FileAttr attr = inode->attr;
    Metadata extra = inode->extra_metadata;
    OBJFS_RETURN_IF_ERROR(mutate(attr, extra));
    inode->attr = attr;
    inode->extra_metadata = std::move(extra);
    attr.ino = ino;
    if (inode->staged) attr.size = inode->staged->size();
    return attr;
  }
  for (int attempt = 0;; ++attempt) {
    OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
    // (A directory's marker takes the times this mount gave it along.)
    FileAttr attr = WithDirTimes(key, AttrFromRecord(ino, rec));
    Metadata extra = WithoutPosixMetadata(rec.metadata);
    Metadata before = extra;
    SetPosixMetadata(attr.mode, attr.uid, attr.gid, attr.mtime_ns, &before);
    OBJFS_RETURN_IF_ERROR(mutate(attr, extra));
    Metadata metadata = extra;
    SetPosixMetadata(attr.mode, attr.uid, attr.gid, attr.mtime_ns, &metadata);
    if (metadata == before && rec.has_object && rec.metadata == metadata) return attr;
    // A staged copy here is clean (uploaded by close(2), kept until the kernel's asynchronous
    // RELEASE): it holds nothing the store lacks, so the change may wait as for a closed file,
    // and rsync's chmod racing that RELEASE still rides along with its rename.
    if (!rec.is_dir && rec.has_object && !inode->removed() && writer_->holds_metadata() &&
        writer_->HoldMetadata(ino, *inode, key, rec, attr, extra, metadata)) {
      attr.ino = ino;
      attr.size = rec.size;
      return attr;
    }

    Result<ObjectInfo> result = InternalError("unreachable");
    if (rec.is_dir && !rec.has_object) {
      PutOptions put;
      put.metadata = metadata;
      result = store_->put(key + "/", MemorySource(""), put);
    } else {
      SetAttributesOptions set;
      set.expected.key = rec.is_dir ? key + "/" : key;
      set.expected.size = rec.size;
      set.expected.etag = rec.etag;
      // What it was: SFTP sets a changed owner, a link's own times.
      set.expected.metadata = rec.metadata;
      set.expected.has_metadata = rec.has_object;
      set.expected.encryption = rec.encryption;
      // An object this mount just wrote is not HEADed first. Should another client have
      // replaced it meanwhile, the copy gives its bytes our metadata and then fails, and the loop
      // looks again: last writer wins, as for the bytes.
      set.source_known_current = rec.own_write;
      result = store_->set_attributes(set.expected.key, metadata, set);
    }
    if (!result.ok()) {
      meta_cache_.Invalidate(key);
      // The object changed since it was cached: look again, once.
      if (result.status().code() == StatusCode::kPreconditionFailed && attempt == 0) continue;
      // A server with a lower limit than max_metadata.
      if (IsPermanentRefusal(result.status()) && MetadataSize(metadata) > MetadataSize(before)) {
        return XattrTooLargeError("the server refuses the metadata of " + key + ": " +
                                  result.status().ToString());
      }
      return result.status();
    }
    ObjectInfo info = *result;
    info.size = rec.size;
    info.metadata = metadata;
    info.has_metadata = true;
    MetaRecord updated = RecordFromInfo(info, rec.is_dir);
    updated.complete = true;
    updated.own_write = true;
    meta_cache_.Put(key, updated);
    if (key.empty()) resolver_.RootChanged(updated);
    if (inode->staged) {  // clean staged copy kept for open handles
      if (inode->stored_file) {
        inode->stored_file = ReplacedFile{attr.mode & 07777, rec.size,
                                          info.mtime_ns > 0 ? info.mtime_ns : attr.mtime_ns,
                                          std::make_pair(attr.uid, attr.gid)};
      }
      inode->attr.mode = attr.mode;
      inode->attr.uid = attr.uid;
      inode->attr.gid = attr.gid;
      inode->attr.mtime_ns = attr.mtime_ns;
      inode->extra_metadata = extra;
      // The change kept the bytes of the version the copy is based on but may have given it a
      // new ETag (a self-copy, SFTP's new mtime): what the copy still lacks is fetched by that
      // one, and an edit copies from it. (Never after another client's version: its ETag is
      // not the base's; nor after a self-copy that did not prove it copied these bytes, as
      // for NoteRetagged below.)
      if (!rec.is_dir && !info.etag.empty() && info.etag != rec.etag &&
          (!store_->capabilities().attributes_by_copy || info.same_bytes_as_source)) {
        writer_->Retagged(*inode, key, rec.etag, info.etag);
      }
    }
    if (!rec.is_dir) {
      // Same bytes, new version: the kernel's pages of the old one still hold them.
      if (inode->page_version == rec.etag) inode->page_version = info.etag;
      // Set in place (SFTP), or a self-copy that proved it copied the version it was based on
      // (S3, made of parts): a new version of the very bytes its readers are reading. (Not any
      // other self-copy: with a server that ignores its condition, it may have copied another
      // client's bytes, which the new ETag would then be.)
      if (!store_->capabilities().attributes_by_copy || info.same_bytes_as_source) {
        NoteRetagged(*inode, key, rec.etag, info.etag);
      }
      inode->uploaded_etag = info.etag;
    }
    if (rec.is_dir) ForgetDirTimes(key);  // its marker has them now
    return AttrFromRecord(ino, updated);
  }
}

Status Filesystem::TruncateLocked(Inode& inode, const std::string& key, uint64_t size,
                                  bool new_mtime) {
  if (!inode.staged) {
    OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
    if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
    bool empty = size == 0 || rec.size == 0;
    OBJFS_RETURN_IF_ERROR(writer_->Stage(inode, key, rec, empty));
  }
  OBJFS_RETURN_IF_ERROR(writer_->MarkDirty(inode, key, /*keep_content=*/size > 0));
  OBJFS_RETURN_IF_ERROR(inode.staged->Truncate(size));
  writer_->Truncated(inode, size);
  inode.attr.size = size;
  if (new_mtime) {
    inode.attr.mtime_ns = NowNs();
    inode.extra_metadata.erase(kCtimeMetadata);  // the ctime is the new mtime
  }
  meta_cache_.Invalidate(key);
  return Status::Ok();
}

Result<Entry> Filesystem::SetAttr(uint64_t ino, uint32_t to_set, const FileAttr& attr,
                                  std::optional<uint64_t> fh) {
  if (to_set & kSetSize) {
    OBJFS_RETURN_IF_ERROR(CheckWritable());
    OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
    OBJFS_RETURN_IF_ERROR(CheckObjectSize(key, attr.size));
    std::shared_ptr<Inode> inode = inodes_.Get(ino);
    if (inode == nullptr) return NotFoundError("unknown inode " + std::to_string(ino));
    MutexLock lock(&inode->mu);
    OBJFS_RETURN_IF_ERROR(TruncateLocked(*inode, key, attr.size, /*new_mtime=*/true));
    // ftruncate(fd, 0): that open file's release uploads the emptied file (see Release). A
    // truncate by path has no such writer (its caller is done), and an earlier emptier, writing
    // since, is not this one.
    inode->emptied_by = fh && FileWriter::OnlyEmptied(*inode) ? *fh : 0;
  }
  uint32_t meta_fields =
      kSetMode | kSetUid | kSetGid | kSetMtime | kSetMtimeNow | kSetAtime | kSetAtimeNow;
  if (to_set & meta_fields) {
    int64_t now = NowNs();
    const std::shared_ptr<Inode> target = (to_set & kSetMode) ? inodes_.Find(ino) : nullptr;
    auto mutate = [&](FileAttr& a, Metadata& extra) -> Status {
      if (to_set & kSetMode) {
        a.mode = (a.mode & S_IFMT) | (attr.mode & 07777);
        // The mode set here, even the one the file had, is the one its next upload gives it:
        // another client's chmod since does not override it (KeepOthersChmod).
        if (target != nullptr) {
          target->mu.AssertHeld();  // run by MutateMetadata, under the inode's lock
          target->stored_file.reset();
        }
      }
      if (to_set & kSetUid) a.uid = attr.uid;
      if (to_set & kSetGid) a.gid = attr.gid;
      if (to_set & kSetMtimeNow) {
        a.mtime_ns = now;
      } else if (to_set & kSetMtime) {
        a.mtime_ns = attr.mtime_ns;
      }
      // An atime is stored only when set explicitly: reads never write it (noatime). One equal
      // to the mtime is what an object without one shows: nothing is stored (touch sets both,
      // and must not fail on an object whose metadata is near max_metadata).
      if (to_set & (kSetAtimeNow | kSetAtime)) {
        const int64_t atime = (to_set & kSetAtimeNow) ? now : attr.atime_ns;
        if (atime == a.mtime_ns) {
          extra.erase(kAtimeMetadata);
        } else {
          extra[kAtimeMetadata] = FormatMtime(atime);
        }
      }
      return Status::Ok();
    };
    OBJFS_RETURN_IF_ERROR(MutateMetadata(ino, mutate).status());
  }
  if (to_set & kSetSize) {
    // A truncate of a file no writer has open is uploaded at once: a reader's close is no
    // writer's (it never accepts a writer's data), and waiting for it left the new size
    // unaccepted, lost in a crash while `tail` or a backup tool held the file open.
    std::shared_ptr<Inode> inode = inodes_.Get(ino);
    if (inode != nullptr && inode->open_writers.load() == 0) {
      // truncate(2) returned: the new size is accepted, and retried in the background should
      // the upload fail, as after a close.
      Status s = writer_->Flush(ino, inode, /*with_metadata=*/true, /*accept=*/true);
      if (!s.ok()) {
        writer_->RetryLater(ino, s);
        return s;
      }
    }
  }
  return GetAttr(ino);
}

Result<Metadata> Filesystem::ExtraMetadata(uint64_t ino) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  if (std::shared_ptr<Inode> inode = inodes_.Get(ino)) {
    MutexLock lock(&inode->mu);
    if (inode->staged || inode->pending_metadata) return inode->extra_metadata;
  }
  if (key.empty()) return Metadata();
  OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
  return WithoutPosixMetadata(rec.metadata);
}

Result<ETag> Filesystem::UserETag(const std::string& key, const MetaRecord& rec) {
  // A store's own ETag; or a content MD5 that an upload or copy of a store without them gave.
  if (native_etags_ || rec.etag.is_plain_md5()) return rec.etag;
  if (options_.content_etags == nullptr) return ETag();  // a version is no ETag to show
  Result<ETag> md5 = options_.content_etags->ContentEtag(key);
  if (!md5.ok() && md5.status().code() == StatusCode::kNotFound) return ETag();
  return md5;
}

Result<std::string> Filesystem::GetXattr(uint64_t ino, std::string_view name) {
  if (name == kStatsXattr) {
    if (ino == kRootIno) return metrics_->ToText() + writer_->StatsText();
    return NoXattrError(std::string(name));
  }
  // Only user. attributes exist here. Saying so (EOPNOTSUPP, not "no such attribute") lets
  // `ls -l` stop asking for security.selinux and system.posix_acl_access: coreutils remembers a
  // file system without them after the first file, instead of asking the daemon twice per file.
  if (!IsUserXattr(name)) return UnsupportedXattrError(name);
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  if (name == kEtagXattr || name == kEtagKindXattr) {
    if (key.empty()) return NoXattrError(std::string(name));
    // A closed file waiting in the write-back window, or kept for a retry after a failed close,
    // has no ETag yet: asking for it uploads it (and fails as the upload does), rather than
    // answering the replaced version's. A pending metadata change goes to the store first too:
    // a self-copy may change the ETag.
    if (std::shared_ptr<Inode> inode = inodes_.Get(ino); inode != nullptr) {
      bool unsaved = false;
      {
        MutexLock lock(&inode->mu);
        unsaved = inode->unsaved();
      }
      if ((writer_->writeback() || unsaved) && inode->open_handles.load() == 0) {
        OBJFS_RETURN_IF_ERROR(writer_->Flush(ino, inode));
      }
      MutexLock lock(&inode->mu);
      if (FileWriter::EmptiedWhileWritten(*inode)) {
        // Emptied, its upload left to the release of the open file (Filesystem::Flush), which
        // may come after this: the empty content's MD5, as a close that stored it gave.
        const ETag empty = ETag::FromMd5(Md5Of(std::string_view()));
        if (name == kEtagXattr) return empty.value();
        return std::string(ETagKindName(empty.kind()));
      }
      if (inode->pending_metadata && !inode->removed() && !inode->unsaved()) {
        OBJFS_RETURN_IF_ERROR(writer_->ApplyHeldMetadata(*inode, key));
      }
    }
    auto rec = Resolve(key);
    if (!rec.ok()) {
      if (rec.status().code() == StatusCode::kNotFound) return NoXattrError(std::string(name));
      return rec.status();
    }
    if (rec->is_dir) return NoXattrError(std::string(name));
    OBJFS_ASSIGN_OR_RETURN(ETag etag, UserETag(key, *rec));
    if (etag.empty()) return NoXattrError(std::string(name));
    if (name == kEtagXattr) return etag.value();
    return std::string(ETagKindName(etag.kind()));
  }
  if (IsReservedXattr(name)) return NoXattrError(std::string(name));
  OBJFS_ASSIGN_OR_RETURN(Metadata extra, ExtraMetadata(ino));
  return GetUserXattr(extra, std::string(name));
}

Result<std::vector<std::string>> Filesystem::ListXattr(uint64_t ino) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  std::vector<std::string> names;
  if (ino == kRootIno) names.push_back(kStatsXattr);
  if (!key.empty()) {
    auto rec = Resolve(key);
    // Only a regular file has one: a link, FIFO or device lists none, as its read gives
    // ENODATA (rsync -aX and cp --preserve=xattr fail on a name listed but not readable).
    if (rec.ok() && !rec->is_dir && S_ISREG(rec->mode)) {
      // Without native ETags the MD5 is computed only when asked for.
      bool has_etag = native_etags_ ? !rec->etag.empty()
                                    : options_.content_etags != nullptr || rec->etag.is_plain_md5();
      if (has_etag) names.push_back(kEtagXattr);
    }
    if (!rec.ok() && rec.status().code() != StatusCode::kNotFound) return rec.status();
  }
  auto extra = ExtraMetadata(ino);
  if (extra.ok()) {
    OBJFS_ASSIGN_OR_RETURN(XattrMap xattrs, XattrsOf(*extra));
    // Only names a read gives: another writer's metadata may hold other namespaces' (whose
    // reads are unsupported here), objfs's own (answered by objfs, listed above), or names the
    // kernel refuses to ask for (longer than XATTR_NAME_MAX, or holding a NUL, which would
    // split the list).
    for (const auto& [name, value] : xattrs) {
      if (IsUserXattr(name) && !IsReservedXattr(name) && name.size() <= kMaxXattrName &&
          name.find('\0') == std::string::npos) {
        names.push_back(name);
      }
    }
  } else if (extra.status().code() != StatusCode::kNotFound) {
    return extra.status();
  }
  return names;
}

Status Filesystem::SetXattr(uint64_t ino, std::string_view name, std::string_view value,
                            int flags) {
  // user.etag set to what it is already changes nothing: rsync -aX and cp --preserve=xattr of a
  // file copied out of a mount set it back, and would fail (rsync: exit 23) on EPERM. Only an
  // ETag known without work is compared (no upload of a waiting file, no hashing).
  if (name == kEtagXattr) {
    OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
    Result<MetaRecord> rec = key.empty() ? NotFoundError("the root") : Resolve(key);
    if (rec.ok() && !rec->is_dir && S_ISREG(rec->mode) && !rec->etag.empty() &&
        (native_etags_ || rec->etag.is_plain_md5()) && rec->etag.value() == value) {
      if (flags & kXattrCreate) return AlreadyExistsError(std::string(name) + " exists");
      return Status::Ok();
    }
  }
  if (IsReservedXattr(name) || name == kStatsXattr) {
    return ReservedXattrError(std::string(name));
  }
  if (!IsUserXattr(name) || !user_xattrs_) {
    return UnsupportedXattrError(name);
  }
  std::string n(name);
  std::string v(value);
  auto mutate = [&](FileAttr& attr, Metadata& extra) -> Status {
    // (One that fits alone but not with the object's other attributes finds no room: ENOSPC,
    // from MutateMetadata.)
    return SetUserXattr(n, v, (flags & kXattrCreate) != 0, (flags & kXattrReplace) != 0,
                        options_.max_metadata, attr, &extra);
  };
  return MutateMetadata(ino, mutate).status();
}

Status Filesystem::RemoveXattr(uint64_t ino, std::string_view name) {
  // user.etag is the server's (or the content's) and cannot go; rsync -aX removes every
  // attribute its source lacks, and failed (exit 23) on each file it copied into a mount.
  // Nothing is kept for it, so nothing is removed, and the removal of a regular file's is not
  // refused (what has none: ENODATA).
  if (name == kEtagXattr) {
    OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
    if (key.empty()) return NoXattrError(std::string(name));
    Result<MetaRecord> rec = Resolve(key);
    if (!rec.ok() && rec.status().code() != StatusCode::kNotFound) return rec.status();
    if (!rec.ok() || rec->is_dir || !S_ISREG(rec->mode)) return NoXattrError(std::string(name));
    return Status::Ok();
  }
  if (IsReservedXattr(name) || name == kStatsXattr) {
    return ReservedXattrError(std::string(name));
  }
  if (!IsUserXattr(name)) return UnsupportedXattrError(name);
  std::string n(name);
  auto mutate = [&](FileAttr&, Metadata& extra) -> Status { return RemoveUserXattr(n, &extra); };
  return MutateMetadata(ino, mutate).status();
}

}  // namespace objfs
