// Filesystem: rename of files (server-side copy + delete) and directories (every object under
// the prefix, bounded by max_rename_objects).
#include <sys/stat.h>

#include <future>
#include <optional>
#include <vector>

#include "cache/io_pool.h"
#include "fs/directory_move.h"
#include "fs/filesystem.h"
#include "fs/object_metadata.h"

namespace objfs {

namespace {

// A rename moves the file's ctime: in `metadata` (all an object's), which its copy or upload
// carries. Not where a first ctime would take it over `max_metadata` (the file then shows its
// mtime as before).
void MoveCtime(Metadata& metadata, int64_t now_ns, size_t max_metadata) {
  Metadata with_ctime = metadata;
  with_ctime[kCtimeMetadata] = FormatMtime(now_ns);
  if (max_metadata == 0 || MetadataSize(with_ctime) <= max_metadata ||
      metadata.count(kCtimeMetadata) > 0) {
    metadata = std::move(with_ctime);
  }
}

}  // namespace

Status Filesystem::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                          std::string_view new_name, uint32_t flags) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  if (flags & kRenameExchange) return UnsupportedError("RENAME_EXCHANGE is not supported");
  if (flags & ~(kRenameNoReplace | kRenameExchange)) {
    return InvalidArgumentError("unknown rename flags");
  }
  OBJFS_ASSIGN_OR_RETURN(std::string from, ChildKey(parent, name));
  OBJFS_ASSIGN_OR_RETURN(std::string to, NewChildKey(new_parent, new_name));
  if (from == to) return Status::Ok();
  if (to.size() > from.size() && to.compare(0, from.size() + 1, from + "/") == 0) {
    return InvalidArgumentError("cannot move a directory into itself");
  }

  // With a write-back window, a file not uploaded yet is renamed where it is: its pending upload
  // takes the new name (rsync's temporary files never reach the store).
  if (writer_->writeback()) {
    if (uint64_t ino = inodes_.InoOf(from)) {
      if (auto inode = inodes_.Get(ino)) {
        std::optional<Status> local = RenameLocalFile(from, to, inode, flags);
        if (local && local->ok()) {
          EntryChanged(from);
          EntryChanged(to);
        }
        if (local) return *local;
      }
    }
  }

  // Unsaved data of the source goes up first, so that the copy carries it (and the copy
  // carries a pending metadata change too).
  if (uint64_t ino = inodes_.InoOf(from)) {
    if (auto inode = inodes_.Get(ino)) {
      OBJFS_RETURN_IF_ERROR(writer_->Flush(ino, inode, /*with_metadata=*/false));
    }
  }
  // Both names as the cache knows them, like the lookups the kernel made just before (within
  // attr_timeout and negative_timeout, a change made elsewhere may go unseen, as for any other
  // operation); a copy whose source changed meanwhile fails and is retried in RenameFile.
  // RENAME_NOREPLACE asks the store about the target.
  OBJFS_ASSIGN_OR_RETURN(MetaRecord src, Resolve(from));
  if (src.is_dir) {
    // The directory's marker takes a "/" more than the name checked above.
    OBJFS_RETURN_IF_ERROR(ChildKey(new_parent, new_name, /*for_directory=*/true).status());
  }

  if (uint64_t ino = inodes_.InoOf(to)) {
    // A metadata change of the target goes too: should the rename fail, the target keeps it.
    if (auto inode = inodes_.Get(ino)) OBJFS_RETURN_IF_ERROR(writer_->Flush(ino, inode));
  }
  if (flags & kRenameNoReplace) meta_cache_.Invalidate(to);
  auto dst = Resolve(to);
  if (!dst.ok() && dst.status().code() != StatusCode::kNotFound) return dst.status();
  if (dst.ok()) {
    if (flags & kRenameNoReplace) return AlreadyExistsError(to + " exists");
    if (src.is_dir && !dst->is_dir) {
      return Status(StatusCode::kNotDirectory, to + " is not a directory");
    }
    if (!src.is_dir && dst->is_dir) return Status(StatusCode::kIsDirectory, to + " is a directory");
    if (dst->is_dir) {
      // A target directory of old s3fs's kind (RmDir): one whose object holds bytes is another
      // client's data; an empty one goes, as its marker would.
      const std::optional<uint64_t> slashless =
          store_->capabilities().directory_attributes ? std::nullopt : dst->slashless_object;
      if (slashless.value_or(0) != 0) {
        return NotEmptyError(to + " is not empty: its object " + to + " holds " +
                             std::to_string(*slashless) + " bytes");
      }
      ListOptions list;
      list.prefix = to + "/";
      list.max_keys = 2;
      OBJFS_ASSIGN_OR_RETURN(Listing listing, store_->list(list));
      for (const ObjectInfo& obj : listing.objects) {
        if (obj.key != list.prefix) return NotEmptyError(to + " is not empty");
      }
      if (!listing.common_prefixes.empty()) return NotEmptyError(to + " is not empty");
      // Nor may it hold files created here and not uploaded yet.
      for (const auto& [ino, inode] : inodes_.WithLocalData(to)) {
        auto child = inodes_.KeyOf(ino);
        if (child && *child != to && inodes_.InoOf(*child) == ino) {
          return NotEmptyError(to + " is not empty");
        }
      }
      if (dst->has_object) OBJFS_RETURN_IF_ERROR(store_->remove(list.prefix));
      if (slashless) OBJFS_RETURN_IF_ERROR(store_->remove(to));
    }
  }
  Status moved = src.is_dir ? RenameDirectory(from, to, src) : RenameFile(from, to, src);
  if (moved.ok()) {
    if (src.is_dir) ForgetDirTimes(from);
    EntryChanged(from);
    EntryChanged(to);
    ParentChanged(from);
    ParentChanged(to);
  }
  return moved;
}

std::optional<Status> Filesystem::RenameLocalFile(const std::string& from, const std::string& to,
                                                  const std::shared_ptr<Inode>& inode,
                                                  uint32_t flags) {
  {
    MutexLock lock(&inode->mu);
    if (!inode->unsaved()) return std::nullopt;
    // Being written with no version a close accepted: a crash would upload nothing under the
    // new name, while the rename removes the stored version under the old one (and drops a
    // pending target). The store renames it instead, as without a window.
    if (inode->staged->state() != StagedFile::State::kAccepted && !inode->accepted_copy) {
      return std::nullopt;
    }
  }
  // The target, as the cache knows it (like a lookup would).
  uint64_t old = inodes_.InoOf(to);
  std::shared_ptr<Inode> old_inode = old ? inodes_.Get(old) : nullptr;
  bool target_local = old_inode != nullptr && LocalAttr(*old_inode, old).has_value();
  // RENAME_NOREPLACE asks the store itself; a plain rename trusts the cache, like a lookup.
  if (flags & kRenameNoReplace) meta_cache_.Invalidate(to);
  auto dst = Resolve(to);
  if (!dst.ok() && dst.status().code() != StatusCode::kNotFound) return dst.status();
  if ((dst.ok() || target_local) && (flags & kRenameNoReplace)) {
    return AlreadyExistsError(to + " exists");
  }
  if (dst.ok() && dst->is_dir) return Status(StatusCode::kIsDirectory, to + " is a directory");
  // A pending target loses its sidecar first, so that a crash in between never uploads the
  // replaced data over the new; it gets it back if the rename fails.
  std::optional<StagedFile::State> target_state, target_copy_state;
  auto restore_target = [&] {
    if (old_inode == nullptr) return;
    MutexLock lock(&old_inode->mu);
    if (old_inode->unsaved()) {
      // Accepted: recorded and scheduled again; still being written: recorded as such.
      if (target_state == StagedFile::State::kAccepted) {
        (void)writer_->DeferUpload(old, *old_inode);
      } else {
        (void)old_inode->staged->Restore(target_state);
      }
      if (old_inode->accepted_copy) (void)old_inode->accepted_copy->Restore(target_copy_state);
    }
  };
  if (old_inode != nullptr) {
    MutexLock lock(&old_inode->mu);
    if (old_inode->staged) target_state = old_inode->staged->Orphan();
    if (old_inode->accepted_copy) target_copy_state = old_inode->accepted_copy->Orphan();
  }
  // Decided under the file's lock; the target gets its sidecar back after it, since that may
  // upload it (on a full cache disk) and no upload waits with two inodes locked.
  bool committed = false;
  Status failure;  // not committed and not left to the store either
  {
    MutexLock lock(&inode->mu);
    // Uploaded by the write-back thread meanwhile: rename it in the store.
    if (inode->unsaved()) {
      Metadata metadata = inode->extra_metadata;
      SetPosixMetadata(inode->attr.mode, inode->attr.uid, inode->attr.gid, inode->attr.mtime_ns,
                       &metadata);
      MoveCtime(metadata, NowNs(), options_.max_metadata);
      if (auto ctime = metadata.find(kCtimeMetadata); ctime != metadata.end()) {
        inode->extra_metadata[kCtimeMetadata] = ctime->second;
      }
      // Uploaded after its close under the new name, it goes only over what that name holds
      // now as this mount knows it, or onto it still free: a version another client stores
      // there meanwhile is the newer (Inode::replacing). The record says it too.
      // (A symbolic link or other kind of file there is replaced as before, unconditionally.)
      const UploadCondition onto =
          dst.ok() && !dst->etag.empty() && S_ISREG(dst->mode)
              ? UploadCondition{.if_match = dst->etag, .if_none_match = false}
              : UploadCondition{.if_match = std::nullopt, .if_none_match = !dst.ok()};
      const UploadCondition before = inode->staged->ConditionOf(from);
      const UploadCondition copy_before =
          inode->accepted_copy ? inode->accepted_copy->ConditionOf(from) : UploadCondition{};
      auto condition_back = [&] {
        inode->mu.AssertHeld();  // called below, under the lock
        inode->staged->SetCondition(from, before);
        if (inode->accepted_copy) inode->accepted_copy->SetCondition(from, copy_before);
      };
      inode->staged->SetCondition(to, onto);
      if (inode->accepted_copy) inode->accepted_copy->SetCondition(to, onto);
      // The record first: from now on a crash uploads the data under its new name. (So does
      // an accepted version kept while the file is written again.)
      // The object the staged data was staged from goes with the old name: what of it the
      // data still lacks is fetched first.
      const Status fetched = writer_->FetchAllStaged(*inode, from);
      // So is its encryption, learnt and recorded before the record names the new name, where
      // no object would tell.
      const Status learnt = fetched.ok() ? LearnStoredEncryption(*inode, from) : Status::Ok();
      Status described =
          fetched.ok() && learnt.ok() ? inode->staged->Describe(to, metadata) : Status::Ok();
      if (fetched.ok() && described.ok() && inode->accepted_copy) {
        described = inode->accepted_copy->Describe(to, metadata);
        if (!described.ok()) (void)inode->staged->Describe(from, metadata);
      }
      Status removed;
      if (!fetched.ok()) {
        condition_back();
        failure = fetched.WithContext("renaming " + from);
      } else if (!learnt.ok()) {
        condition_back();
        failure = learnt.WithContext("renaming " + from);
      } else if (!described.ok()) {
        // No record under the new name (the cache disk is full): the data goes up under the
        // old one now, and the store renames it.
        condition_back();
        Log(LogLevel::kWarn, "uploading " + from + " before its rename: " + described.message());
        failure = writer_->Upload(*inode, from, /*accept=*/false);
      } else if (inode->in_store && !(removed = RemoveEdited(*inode, from, "mv")).ok()) {
        condition_back();
        (void)inode->staged->Describe(from, metadata);
        if (inode->accepted_copy) (void)inode->accepted_copy->Describe(from, metadata);
        failure = removed.WithContext("renaming " + from);
      } else {
        inode->in_store = dst.ok();
        inode->stored_file.reset();  // the mode it goes up with is its own
        // The version the data was staged from went with the old name (removed just now, or
        // another client's since), and every byte of it the data lacked was fetched above:
        // nothing is copied from it or asked of it any more. An upload under the old name
        // again (mv back) asking it would fail against the removal this rename made.
        inode->base.reset();
        inode->touched.Clear();
        inode->recovered.reset();
        inode->created_as.clear();
        inode->replacing.reset();
        if (onto.if_match || onto.if_none_match) {
          inode->replacing = Inode::KeyCondition{.key = to, .condition = onto};
        }
        // The new name before the inode is unlocked: a release racing the rename (the kernel
        // sends RELEASE after close(2) returns, so it may come after rsync's rename) describes
        // the file under the name it then has; under the old one, a crash would upload it as
        // that.
        inodes_.Rename(from, to, /*subtree=*/false);
        committed = true;
      }
    }
  }
  if (!committed) {
    restore_target();
    if (!failure.ok()) return failure;
    return std::nullopt;
  }
  // Committed: the replaced target's data goes (its open handles keep reading it).
  if (old_inode != nullptr) {
    MutexLock lock(&old_inode->mu);
    writer_->Discard(*old_inode);
  }
  meta_cache_.Invalidate(to);
  meta_cache_.PutNegative(from);
  return Status::Ok();
}

Status Filesystem::LearnStoredEncryption(Inode& inode, const std::string& key) {
  if (!keeps_encryption_ || !inode.in_store || inode.stored_encryption) return Status::Ok();
  Result<ObjectInfo> current = store_->head(key);
  if (current.ok()) return SetStoredEncryption(inode, current->encryption);
  return current.status().code() == StatusCode::kNotFound ? Status::Ok() : current.status();
}

Status Filesystem::RenameFile(const std::string& from, const std::string& to,
                              const MetaRecord& src) {
  // A replaced target's open handles must not resurrect it at release.
  if (uint64_t replaced = inodes_.InoOf(to)) {
    if (auto inode = inodes_.Get(replaced)) {
      MutexLock lock(&inode->mu);
      writer_->Discard(*inode);
    }
  }
  uint64_t ino = inodes_.InoOf(from);
  std::shared_ptr<Inode> inode = ino ? inodes_.Get(ino) : nullptr;
  OptionalInodeLock lock(inode.get());
  MetaRecord source = src;
  // (S3: a copy, minutes for gigabytes.) Stat and listings of an open file answer meanwhile.
  std::optional<ServerWorkScope> working;
  if (inode != nullptr) working.emplace(*inode, AttrFromRecord(ino, src));
  if (inode != nullptr) {
    if (inode->unsaved()) {
      OBJFS_RETURN_IF_ERROR(writer_->Upload(*inode, from, /*accept=*/false));
      OBJFS_ASSIGN_OR_RETURN(source, Resolve(from));
    }
    // A staged copy kept for open handles: its object moves away from the key it came from.
    writer_->KeepStagedReadable(*inode);
  }
  // A metadata change still pending rides along with the copy, instead of a self-copy first.
  // (Stores with a native rename set attributes in place and never hold one.)
  const bool fold = inode != nullptr && inode->pending_metadata;
  if (native_rename_) {
    // One atomic request (SFTP posix-rename): same content, mtime and version.
    OBJFS_RETURN_IF_ERROR(store_->rename(from, to));
    meta_cache_.Invalidate(from);
    meta_cache_.Put(to, source);
  } else {
    CopyOptions copy;
    copy.source_known_current = source.own_write;
    // rsync's and editors' temporary names give no Content-Type; the file's name does.
    copy.retype_by_name = true;
    copy.keep_tags = true;
    if (fold) source.metadata = inode->pending_metadata->metadata;
    // A copy that replaces the metadata anyway (a held change rides along) carries the
    // rename's ctime too. Otherwise the metadata is copied as it is, ctime included: POSIX
    // leaves moving it to the file system, and replacing it would drop what objfs does not
    // keep (Content-Type, Content-Encoding, Cache-Control ...) and could revert another
    // client's change made since the record was read.
    const int64_t now = NowNs();
    if (fold) {
      MoveCtime(source.metadata, now, options_.max_metadata);
      copy.replace_metadata = source.metadata;
    }
    Result<ObjectInfo> copied = InternalError("unreachable");
    for (int attempt = 0;; ++attempt) {
      ObjectInfo info;
      info.key = from;
      info.size = source.size;
      info.etag = source.etag;
      info.encryption = source.encryption;  // known: the copy need not HEAD for it
      info.metadata = source.metadata;
      info.has_metadata = source.complete && source.has_object;
      copied = store_->copy(info, to, copy);
      if (copied.ok() || copied.status().code() != StatusCode::kPreconditionFailed || attempt > 0) {
        break;
      }
      // Replaced elsewhere since this mount wrote it (the target may hold a copy of what it is
      // now): look again and copy that, checking first this time.
      meta_cache_.Invalidate(from);
      meta_cache_.Invalidate(to);
      Result<MetaRecord> again = Resolve(from);
      if (!again.ok()) return again.status();
      if (again->is_dir) return NotFoundError(from + " is no longer a file");
      if (fold) again->metadata = WithHeaderMetadataOf(source.metadata, again->metadata);
      source = *again;
      copy.source_known_current = false;
      if (fold) {
        copy.replace_metadata = source.metadata;
      } else {
        copy.replace_metadata.reset();
      }
    }
    if (!copied.ok() && fold && IsPermanentRefusal(copied.status())) {
      // The held change is what the server refuses: the file moves with the metadata it has.
      source.metadata = inode->pending_metadata->object.metadata;
      writer_->DropRefusedMetadata(*inode, from, copied.status());
      copy.replace_metadata.reset();
      ObjectInfo info;
      info.key = from;
      info.size = source.size;
      info.etag = source.etag;
      info.encryption = source.encryption;  // known: the copy need not HEAD for it
      copied = store_->copy(info, to, copy);
    }
    if (!copied.ok()) {
      meta_cache_.Invalidate(to);  // a failed copy may still have written it
      return copied.status();
    }
    // The copy carries the change; the source keeps it (and its record) until it is gone, so
    // that a failed removal leaves the source as the mount shows it. (A record outliving the
    // source meets no object of that ETag at the next mount.) Only the version copied goes:
    // another client's stored since stays, as though it came after the rename.
    Status removed = source.etag.empty()
                         ? store_->remove(from)
                         : store_->remove_if_match(from, source.etag, /*known_current=*/true);
    if (removed.code() == StatusCode::kPreconditionFailed) {
      Log(LogLevel::kInfo, "mv " + from +
                               ": another client stored a version of it during the "
                               "rename, and it stays (" +
                               removed.message() + ")");
      removed = Status::Ok();
    }
    OBJFS_RETURN_IF_ERROR(removed);
    if (fold) writer_->ForgetHeldMetadata(*inode);
    meta_cache_.Invalidate(from);
    copied->size = source.size;
    Metadata stored = source.metadata;
    // The type the copy stored: the new name's, where the rename retyped it.
    if (auto type = copied->metadata.find(kContentTypeMetadata); type != copied->metadata.end()) {
      stored[kContentTypeMetadata] = type->second;
    }
    copied->metadata = std::move(stored);
    copied->has_metadata = true;
    MetaRecord rec = RecordFromInfo(*copied, false);
    rec.complete = true;
    rec.own_write = true;
    meta_cache_.Put(to, rec);
    // The copy holds the same bytes: the kernel's pages of the source's version stay good.
    if (inode != nullptr && !copied->etag.empty() && inode->page_version == source.etag) {
      inode->page_version = copied->etag;
    }
  }
  // The replaced file's pages stay: nobody opens it by that name again, and whoever still has
  // it open or mapped reads its old content from them, as POSIX has it (the object is gone, so
  // they could not be read again).
  inodes_.Rename(from, to, /*subtree=*/false);
  // The open file's staged copy (uploaded above) is in the store under the new name: a crash
  // must not upload it again, under either name; a later write describes it anew.
  if (inode != nullptr && inode->staged) inode->staged->Orphan();
  return Status::Ok();
}

Status Filesystem::RenameDirectory(const std::string& from, const std::string& to,
                                   const MetaRecord& src) {
  for (const auto& [ino, inode] : inodes_.WithLocalData(from)) {
    OBJFS_RETURN_IF_ERROR(writer_->Flush(ino, inode));
    {
      // A staged copy kept for open handles may still lack bytes of the object it was staged
      // from (or uploaded as), which moves away from its key: fetched first, as for a file.
      MutexLock lock(&inode->mu);
      writer_->KeepStagedReadable(*inode);
    }
    inodes_.Forget(ino, 0);  // one the kernel forgot goes once it is clean
  }
  if (native_rename_) {
    // The whole tree in one atomic request, however many files it holds.
    OBJFS_RETURN_IF_ERROR(store_->rename(from, to));
    meta_cache_.InvalidateTree(from);
    meta_cache_.InvalidateTree(to);
    inodes_.Rename(from, to, /*subtree=*/true);
    return Status::Ok();
  }
  // A directory of old s3fs's kind, told by an object without the slash: its attributes go to
  // a marker of the new name, and that object goes last. One that holds bytes is another
  // client's data, which a directory cannot take along.
  const std::optional<uint64_t> slashless = src.slashless_object;
  if (slashless) {
    if (*slashless != 0) {
      return NotEmptyError(from + " cannot be moved: its object " + from + " holds " +
                           std::to_string(*slashless) + " bytes");
    }
    PutOptions marker;
    marker.metadata = src.metadata;
    OBJFS_RETURN_IF_ERROR(store_->put(to + "/", MemorySource(""), marker).status());
  }
  Status moved = MoveDirectoryObjects(
      *store_, *io_pool_, from, to, src.has_object && !slashless, options_.max_rename_objects,
      [this](LogLevel level, const std::string& line) { Log(level, line); });
  meta_cache_.InvalidateTree(to);  // (copies may have landed even when one failed)
  OBJFS_RETURN_IF_ERROR(moved);
  if (slashless) OBJFS_RETURN_IF_ERROR(store_->remove(from));
  meta_cache_.InvalidateTree(from);
  inodes_.Rename(from, to, /*subtree=*/true);
  return Status::Ok();
}

}  // namespace objfs
