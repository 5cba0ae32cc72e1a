// Filesystem: open files, reads, staged writes and uploads.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backend/object_version.h"
#include "cache/io_pool.h"
#include "cache/read_budget.h"
#include "fs/filesystem.h"
#include "fs/object_metadata.h"
#include "fs/xattr.h"

namespace objfs {

namespace {

bool IsWritable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

}  // namespace

Result<uint64_t> Filesystem::Open(uint64_t ino, int flags, bool* keep_cache) {
  bool keep = false;
  bool writable = IsWritable(flags);
  bool truncate = writable && (flags & O_TRUNC) != 0;
  if (writable) OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  if (inode == nullptr) return NotFoundError("unknown inode " + std::to_string(ino));
  auto handle = std::make_shared<Handle>(ino, flags, inode, key);
  // An O_TRUNC of a file this mount holds empty already changes nothing (another `>` emptied it).
  bool empty_already = false;
  {
    MutexLock lock(&inode->mu);
    empty_already = truncate && inode->staged && inode->staged->size() == 0;
    // The self-copy that applies a pending metadata change keeps a plain-MD5 ETag but may give a
    // multipart object a new one, which would fail this handle's reads: apply it before.
    if (inode->pending_metadata && !inode->staged && !truncate &&
        !inode->pending_metadata->object.etag.is_plain_md5()) {
      OBJFS_RETURN_IF_ERROR(writer_->ApplyHeldMetadata(*inode, key));
    }
    if (!inode->staged) {
      // An edit (a write that keeps the stored bytes: an append, a patch) starts from the
      // version on the server now, not from one cached before another client changed it: that
      // base would fail the upload at close (EIO, the edit set aside). So, with a write-back
      // window, does a file written anew (O_TRUNC): its upload after the close goes only over
      // the version it replaces (Inode::replacing), which a version cached before another
      // client's change would set aside for nothing. One HEAD per such open. Without the
      // window the close's own upload goes over whatever is there: `cp` over a file, or `>`,
      // costs no extra round trip (only a retry after a failed close, or the next mount after
      // a crash, asks that version, and sets the file aside, logged, should it be stale).
      if (writable && (!truncate || options_.writeback > 0)) meta_cache_.Invalidate(key);
      Result<MetaRecord> resolved = Resolve(key);
      if (!resolved.ok() && resolved.status().code() == StatusCode::kNotFound) {
        // Removed on the server since the kernel looked the name up, its entry still cached:
        // ESTALE makes the kernel look it up again, so that `>` or `>>` (O_CREAT) makes the
        // file anew rather than failing with ENOENT until the entry expires. A metadata change
        // held for the object goes with it: the lookup would answer from it, and every open
        // fail the same way until the change came due.
        if (inode->pending_metadata) {
          Log(LogLevel::kWarn,
              "dropping a metadata change of " + key + ": the file was removed on the server");
          writer_->ForgetHeldMetadata(*inode);
        }
        return Status(StatusCode::kPreconditionFailed,
                      key + " was removed on the server since it was looked up");
      }
      OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, std::move(resolved));
      if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
      if (truncate) {
        OBJFS_RETURN_IF_ERROR(writer_->Stage(*inode, key, rec, /*empty=*/true));
        inode->attr.mtime_ns = NowNs();
        inode->extra_metadata.erase(kCtimeMetadata);
        OBJFS_RETURN_IF_ERROR(writer_->MarkDirty(*inode, key));
        meta_cache_.Invalidate(key);
      } else {
        MutexLock handle_lock(&handle->mu);  // unshared yet; the analysis asks for it
        handle->read_info = InfoFromRecord(key, rec);
        handle->retags_seen = inode->retag_serial.load();
        // The kernel's pages hold the object's current version (an earlier open read them, or
        // this mount wrote it): they stay. Otherwise the kernel drops them at this open, and
        // what it reads from now on is this version.
        keep = !rec.etag.empty() && rec.etag == inode->page_version && inode->page_version_settled;
        if (options_.kernel_page_cache && !keep && !inode->page_version.empty()) {
          Bump(metrics_->page_cache_drops);
        }
        inode->page_version = rec.etag;
        inode->page_version_settled = SettledVersion(rec.etag);
        // Not kept: the kernel drops the pages at this open, so a drop still queued is done.
        if (!keep) inode->pages_drop_queued = false;
      }
    } else if (!truncate) {
      // Staged here: every change of it went through the kernel, whose pages hold it too.
      // Unless a drop of them is still queued (they held data set aside since): dropped now.
      keep = !inode->pages_drop_queued;
      inode->pages_drop_queued = false;
    } else if (truncate && inode->staged->size() > 0) {
      OBJFS_RETURN_IF_ERROR(writer_->MarkDirty(*inode, key, /*keep_content=*/false));
      OBJFS_RETURN_IF_ERROR(inode->staged->Truncate(0));
      writer_->Truncated(*inode, 0);
      inode->attr.size = 0;
      inode->attr.mtime_ns = NowNs();
      inode->extra_metadata.erase(kCtimeMetadata);
      meta_cache_.Invalidate(key);
    }
    CountOpenLocked(*inode, flags);
  }
  if (options_.kernel_page_cache && keep) Bump(metrics_->page_cache_keeps);
  if (keep_cache != nullptr) *keep_cache = options_.kernel_page_cache && keep;
  const uint64_t fh = AddHandle(std::move(handle));
  if (truncate) {
    // `cmd > file`: this open file's release uploads the emptied file (see Release). Emptied
    // already by another open file still at work: that one's release does, as its close
    // accepted the empty file (the second `>` of two at once changed nothing).
    MutexLock lock(&inode->mu);
    if (!(empty_already && inode->emptied_by != 0)) {
      inode->emptied_by = FileWriter::OnlyEmptied(*inode) ? fh : 0;
    }
  }
  return fh;
}

Result<CreatedFile> Filesystem::Create(uint64_t parent, std::string_view name, uint32_t mode,
                                       int flags, const std::optional<Owner>& caller) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, NewChildKey(parent, name));
  bool exists = false;
  if (uint64_t known = inodes_.InoOf(key)) {
    if (auto inode = inodes_.Get(known)) exists = LocalAttr(*inode, known).has_value();
  }
  // Whether a NotFound below would come from the cache alone (a name seen missing, or absent
  // from a fresh listing of its directory) rather than from the server.
  const bool cached_missing =
      (flags & O_EXCL) != 0 && (meta_cache_.Get(key).state == MetaCache::State::kNegative ||
                                meta_cache_.ListState(key) == MetaCache::Listed::kAbsent);
  if (!exists) {
    auto rec = Resolve(key);
    if (rec.ok()) {
      exists = true;
      if (rec->is_dir && (flags & O_EXCL) == 0) {
        return Status(StatusCode::kIsDirectory, key + " is a directory");
      }
    } else if (rec.status().code() != StatusCode::kNotFound) {
      return rec.status();
    } else if (cached_missing) {
      // An exclusive create (a lock file, noclobber, mkstemp) asks the server, as NFS's and
      // SFTP's own exclusive creates do: a name cached as missing may have been made since by
      // another client, whose file this create would otherwise replace at close.
      Result<ObjectInfo> there = store_->head(key);
      if (there.ok()) {
        meta_cache_.Invalidate(key);
        // The kernel's negative entry goes too, so that a stat of the name sees the file.
        InvalidateEntry(parent, std::string(name));
        return AlreadyExistsError(key + " exists (made by another client)");
      }
      if (there.status().code() != StatusCode::kNotFound) return there.status();
    }
  }
  if (exists) {
    if (flags & O_EXCL) return AlreadyExistsError(key + " exists");
    uint64_t ino = inodes_.Acquire(key, 0);
    if (caller && caller->uid != 0 && caller->uid != options_.uid) {
      // The kernel creates only a name it saw missing, so it checked this caller against the
      // directory alone: the file another client made there since is checked here as the
      // kernel checks an open (default_permissions: mode, owner and group, the caller's
      // supplementary groups too).
      OBJFS_ASSIGN_OR_RETURN(Entry found, GetAttr(ino));
      const int access = flags & O_ACCMODE;
      const uint32_t need =
          (access != O_WRONLY ? 4U : 0U) | (access != O_RDONLY || (flags & O_TRUNC) != 0 ? 2U : 0U);
      const uint32_t mode = found.attr.mode;
      const bool in_group =
          caller->gid == found.attr.gid || (caller->in_group && caller->in_group(found.attr.gid));
      const uint32_t granted = caller->uid == found.attr.uid ? (mode >> 6) & 7
                               : in_group                    ? (mode >> 3) & 7
                                                             : mode & 7;
      if ((granted & need) != need) {
        return Status(StatusCode::kPermissionDenied,
                      key + " was made by another client since it was seen missing, and uid " +
                          std::to_string(caller->uid) + " may not open it so");
      }
    }
    bool keep_cache = false;
    OBJFS_ASSIGN_OR_RETURN(uint64_t fh, Open(ino, flags, &keep_cache));
    if ((flags & O_TRUNC) != 0 && caller && caller->uid != 0) {
      // Truncated by this open: its set-user-ID bit goes (and its set-group-ID bit where group
      // execute is set), as for an open with O_TRUNC (fs/fuse_adapter.cc, DropSetIdBits),
      // unless the caller may keep them (root).
      Result<Entry> opened = GetAttr(ino);
      const uint32_t mode = opened.ok() ? opened->attr.mode : 0;
      const uint32_t drop = S_ISUID | ((mode & S_IXGRP) != 0 ? S_ISGID : 0);
      if ((mode & drop) != 0) {
        FileAttr attr = opened->attr;
        attr.mode &= ~drop;
        (void)SetAttr(ino, kSetMode, attr, fh);
      }
    }
    auto entry = GetAttr(ino);
    if (!entry.ok()) {
      (void)Release(fh);
      return entry.status();
    }
    inodes_.AddLookup(ino);
    return CreatedFile{*entry, fh, keep_cache};
  }

  const Owner owner = NewOwner(parent, caller);
  uint64_t ino = inodes_.Acquire(key, 1);
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  auto handle = std::make_shared<Handle>(ino, flags, inode, key);
  FileAttr attr;
  {
    MutexLock lock(&inode->mu);
    const bool staged_here = !inode->staged;
    if (!inode->staged) {
      MetaRecord rec;
      rec.mode = S_IFREG | (mode & 07777);
      rec.uid = owner.uid;
      rec.gid = owner.gid;
      rec.mtime_ns = NowNs();
      rec.complete = true;
      Status s = writer_->Stage(*inode, key, rec, /*empty=*/true);
      if (!s.ok()) {
        inodes_.Forget(ino, 1);
        return s;
      }
      inode->in_store = false;
      inode->stored_file.reset();
      // `>>` on a new name, an exclusive create: never over another client's file made since.
      // Nor a create of another local user (allow_other): the kernel let it through a name it
      // saw missing, and a file made there since may be one that user may not write.
      if ((flags & O_EXCL) != 0 || (flags & O_TRUNC) == 0 ||
          (caller && caller->uid != options_.uid)) {
        inode->created_as = key;
      } else {
        // `cp` to a free name: the close may go over a file made there meanwhile (the latest
        // close wins), an upload after it only onto the free name (Inode::replacing).
        inode->replacing = Inode::KeyCondition{
            .key = key,
            .condition = UploadCondition{.if_match = std::nullopt, .if_none_match = true}};
      }
      // A new file has none of its own. (No record yet.)
      (void)SetStoredEncryption(*inode, AtRestEncryption{});
    }
    if (inode->removed()) {
      inode->state = inode->staged ? Inode::FileState::kCached : Inode::FileState::kStored;
    }
    Status marked = writer_->MarkDirty(*inode, key);
    if (!marked.ok()) {
      if (staged_here) {
        // No crash record could be written (a full cache disk): the create failed, and nothing
        // of the new file may stay, or its name would show a file the server never gets.
        writer_->DropStaging(*inode);
        inode->in_store = true;
        inode->created_as.clear();
      }
      inodes_.Forget(ino, 1);
      return marked;
    }
    attr = inode->attr;
    attr.ino = ino;
    attr.size = inode->staged->size();
    CountOpenLocked(*inode, flags);
  }
  meta_cache_.Invalidate(key);
  EntryChanged(key);
  uint64_t fh = AddHandle(std::move(handle));
  return CreatedFile{MakeEntry(attr, true), fh};
}

Result<std::shared_ptr<Prefetcher>> Filesystem::PrefetcherOf(Handle& handle) {
  MutexLock lock(&handle.mu);
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle.ino));
  if (handle.prefetcher == nullptr || handle.read_key != key || handle.read_info.key != key) {
    if (handle.read_info.key != key || handle.read_info.etag.empty()) {
      // Retags noted from now on are after this version was learnt (a count read early errs
      // towards following none).
      const uint64_t serial = handle.inode->retag_serial.load();
      OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
      if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
      handle.read_info = InfoFromRecord(key, rec);
      handle.retags_seen = serial;
    }
    handle.read_key = key;
    handle.prefetcher =
        std::make_shared<Prefetcher>(store_, key, handle.read_info.etag, handle.read_info.size,
                                     options_.prefetch, *io_pool_, *read_budget_, metrics_);
  }
  return handle.prefetcher;
}

Result<size_t> Filesystem::ReadFromStore(Handle& handle, uint64_t offset,
                                         std::span<std::byte> buf) {
  OBJFS_ASSIGN_OR_RETURN(std::shared_ptr<Prefetcher> prefetcher, PrefetcherOf(handle));
  return prefetcher->Read(offset, buf);
}

Status Filesystem::FetchStagedRange(uint64_t ino, Inode& inode, uint64_t offset, size_t size) {
  if (!inode.staged->has_base()) return Status::Ok();
  const uint64_t size_now = inode.staged->size();
  if (offset >= size_now) return Status::Ok();
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  return writer_->FetchStaged(inode, key, offset, std::min<uint64_t>(size, size_now - offset));
}

Result<size_t> Filesystem::ReadStaged(uint64_t ino, Inode& inode, uint64_t offset,
                                      std::span<std::byte> buf) {
  // A sparse staged file fetches the part read (in read_buffer blocks) first.
  Status fetched = FetchStagedRange(ino, inode, offset, buf.size());
  if (fetched.code() == StatusCode::kNoSpace && inode.staged->has_base()) {
    return writer_->ReadThroughBase(*inode.staged, offset, buf);
  }
  OBJFS_RETURN_IF_ERROR(fetched);
  return inode.staged->ReadAt(offset, buf);
}

void Filesystem::NoteReadVersion(Inode& inode, const ETag& version) {
  // A handle opened at an older version than the pages are now said to hold fills them with
  // that version's bytes: the next open must not keep them.
  if (!version.empty() && version != inode.page_version) inode.page_version = ETag();
}

ETag Filesystem::FollowRetagLocked(Inode& inode, Handle& handle) {
  MutexLock lock(&handle.mu);
  if (!inode.retagged.empty()) {
    const ETag now =
        RetaggedVersion(inode, handle.read_info.key, handle.read_info.etag, handle.retags_seen);
    if (!now.empty()) {
      handle.read_info.etag = now;
      handle.prefetcher.reset();  // remade for the new version at the next read
    }
  }
  return handle.read_info.etag;
}

bool Filesystem::FollowRetag(Handle& handle, const ETag& version) {
  Inode& inode = *handle.inode;
  MutexLock lock(&inode.mu);
  return FollowRetagLocked(inode, handle) != version;
}

Result<size_t> Filesystem::Read(uint64_t fh, uint64_t offset, std::span<std::byte> buf) {
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  ETag version;  // what the read asks for
  {
    Inode& inode = *handle->inode;
    MutexLock lock(&inode.mu);
    if (inode.staged) return ReadStaged(handle->ino, inode, offset, buf);
    version = FollowRetagLocked(inode, *handle);
    NoteReadVersion(inode, version);
  }
  Result<size_t> read = ReadFromStore(*handle, offset, buf);
  // Retagged while this read was under way.
  if (!read.ok() && read.status().code() == StatusCode::kPreconditionFailed &&
      FollowRetag(*handle, version)) {
    read = ReadFromStore(*handle, offset, buf);
  }
  if (!read.ok() && read.status().code() == StatusCode::kPreconditionFailed) {
    ForgetStaleVersion(handle->ino);
  }
  return read;
}

void Filesystem::ForgetStaleVersion(uint64_t ino) {
  if (Result<std::string> key = KeyOf(ino); key.ok()) meta_cache_.Invalidate(*key);
  std::shared_ptr<Inode> inode = inodes_.Find(ino);
  if (inode == nullptr) return;
  {
    MutexLock lock(&inode->mu);
    if (inode->staged) return;  // its pages are what was written here
    // Pages of no known version, whose drop the page invalidator must send (it sends only
    // queued ones): the kernel then asks for the attributes again too.
    inode->page_version = ETag();
    inode->pages_drop_queued = true;
  }
  InvalidatePages(ino);
}

Result<size_t> Filesystem::ReadSegments(uint64_t fh, uint64_t offset, size_t size,
                                        std::vector<ReadSegment>* out) {
  Bump(metrics_->kernel_reads);
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  ETag version;  // what the read asks for
  {
    Inode& inode = *handle->inode;
    MutexLock lock(&inode.mu);
    if (inode.staged) {
      std::shared_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
      OBJFS_ASSIGN_OR_RETURN(size_t n,
                             ReadStaged(handle->ino, inode, offset, std::span(buf.get(), size)));
      if (n > 0) out->push_back(ReadSegment{buf, buf.get(), n});
      return n;
    }
    version = FollowRetagLocked(inode, *handle);
    NoteReadVersion(inode, version);
  }
  const size_t had = out->size();
  for (int attempt = 0;; ++attempt) {
    OBJFS_ASSIGN_OR_RETURN(std::shared_ptr<Prefetcher> prefetcher, PrefetcherOf(*handle));
    Result<size_t> read = prefetcher->ReadSegments(offset, size, out);
    // Retagged while this read was under way: once more, at the new version.
    if (read.ok() || read.status().code() != StatusCode::kPreconditionFailed) return read;
    if (attempt > 0 || !FollowRetag(*handle, version)) {
      ForgetStaleVersion(handle->ino);
      return read;
    }
    out->resize(had);
  }
}

Result<size_t> Filesystem::Write(uint64_t fh, uint64_t offset, std::span<const std::byte> data,
                                 bool note_failure) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  if (!IsWritable(handle->flags)) return InvalidArgumentError("handle not open for writing");
  Inode& inode = *handle->inode;
  MutexLock lock(&inode.mu);
  Result<size_t> written = WriteLocked(*handle, inode, &offset, data);
  if (written.ok()) {
    FileWriter::CarriedOn(inode, fh);
    return written;
  }
  writer_->WriteFailedPartway(inode, offset, data.size());
  if (note_failure) writer_->WriteFailed(inode, fh, offset, data.size(), written.status());
  return written;
}

Result<size_t> Filesystem::WriteLocked(const Handle& handle, Inode& inode, uint64_t* at,
                                       std::span<const std::byte> data) {
  uint64_t& offset = *at;
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle.ino));
  if (!inode.staged) {
    OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
    if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
    // (An empty object is a base all the same: an append goes on that version.)
    OBJFS_RETURN_IF_ERROR(writer_->Stage(inode, key, rec, /*empty=*/false));
  }
  if (handle.flags & O_APPEND) offset = inode.staged->size();
  OBJFS_RETURN_IF_ERROR(CheckObjectSize(key, offset + data.size()));
  OBJFS_RETURN_IF_ERROR(writer_->MarkDirty(inode, key));
  // A change of the data: the ctime is the new mtime (before a streamed upload takes the
  // metadata it starts with).
  inode.extra_metadata.erase(kCtimeMetadata);
  OBJFS_RETURN_IF_ERROR(
      writer_->RetryWithRoom(inode.staged->WriteAt(offset, data), &inode, data.size(), [&] {
        inode.mu.AssertHeld();  // run by RetryWithRoom, under our lock
        return inode.staged->WriteAt(offset, data);
      }));
  writer_->Wrote(inode, key, offset, data.size());
  inode.attr.size = inode.staged->size();
  inode.attr.mtime_ns = NowNs();
  meta_cache_.Invalidate(key);
  return data.size();
}

Status Filesystem::ReportedAtClose(std::string_view call, uint64_t ino, Status failed, bool kept) {
  if (failed.ok()) return failed;
  Result<std::string> key = KeyOf(ino);
  Log(LogLevel::kError,
      std::string(call) + " of " + (key.ok() ? *key : "inode " + std::to_string(ino)) +
          " failed: " + failed.ToString() +
          (kept ? "; kept for a retry"
                : "; the release of its last writer sets it aside in cache_dir/unfinished/"));
  if (failed.code() == StatusCode::kNoSpace || failed.code() == StatusCode::kIoError) {
    return failed;
  }
  return Status(StatusCode::kIoError, failed.message(), failed.server_code());
}

Status Filesystem::Flush(uint64_t fh) {
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  // A reader's close says nothing of a writer's data: it stays unaccepted until the writer's
  // close (or an fsync). Nor does it upload a file whose upload waits in the background (a
  // recovered file, a failed upload to retry).
  if (!IsWritable(handle->flags) &&
      (handle->inode->open_writers.load() > 0 || writer_->Queued(handle->ino))) {
    return Status::Ok();
  }
  if (IsWritable(handle->flags)) {
    {
      // Said at every close(2); the release of the last writer's open file sets it aside (a
      // descriptor closed here may have duplicates that write on).
      Inode& inode = *handle->inode;
      MutexLock lock(&inode.mu);
      if (FileWriter::Unfinished(inode)) {
        OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle->ino));
        return writer_->UnfinishedError(inode, key);
      }
    }
    OBJFS_RETURN_IF_ERROR(ReportedAtClose("close", handle->ino, TrimUnaskedCopy(*handle)));
    // `cmd > file`: the shell opens the file with O_TRUNC, gives the command a duplicate of the
    // descriptor and closes its own. That close finds the file emptied and nothing written yet.
    // Storing it would replace the complete file with an empty one while the command runs, and
    // for good should objfs stop before the command's close. The release of the open file that
    // emptied it stores it instead (a failure then is logged and retried, as in the write-back
    // window); a close that finds data written stores that.
    Inode& inode = *handle->inode;
    MutexLock lock(&inode.mu);
    if (FileWriter::OnlyEmptied(inode)) return Status::Ok();
  }
  if (writer_->writeback()) {
    Inode& inode = *handle->inode;
    MutexLock lock(&inode.mu);
    if (!inode.unsaved()) return Status::Ok();
    // (Without a crash record, on a full cache disk, this uploads at once.)
    Status deferred = writer_->DeferUpload(handle->ino, inode);
    return ReportedAtClose("close", handle->ino, deferred, !FileWriter::Unfinished(inode));
  }
  // close(2) uploads unsaved data; a pending metadata change keeps waiting (fsync applies it).
  Status flushed = writer_->Flush(handle->ino, handle->inode, /*with_metadata=*/false,
                                  /*accept=*/IsWritable(handle->flags));
  return ReportedAtClose("close", handle->ino, flushed,
                         flushed.ok() || !FileWriter::IsUnfinished(*handle->inode));
}

Status Filesystem::Fsync(uint64_t fh, bool /*datasync*/) {
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  {
    Inode& inode = *handle->inode;
    MutexLock lock(&inode.mu);
    if (FileWriter::Unfinished(inode)) {  // its writers may still mend it
      OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle->ino));
      return writer_->UnfinishedError(inode, key);
    }
  }
  Status flushed = writer_->Flush(handle->ino, handle->inode, /*with_metadata=*/true,
                                  /*accept=*/true);
  return ReportedAtClose("fsync", handle->ino, flushed,
                         flushed.ok() || !FileWriter::IsUnfinished(*handle->inode));
}

Status Filesystem::CloseUnfinished(uint64_t ino, Inode& inode) {
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  // Another writer may still mend it: its close decides.
  if (inode.open_writers.load() > 1) return writer_->UnfinishedError(inode, key);
  const bool lost_base = inode.unwritten.count(FileWriter::kLostBase) > 0;
  Status error = writer_->SetAsideUnfinished(ino, inode, key);
  InvalidatePages(ino);  // its pages were the data set aside
  // A new file its writer did not finish is no file now: the kernel forgets its name, so that
  // the next open(O_CREAT) of it makes a file rather than open the gone one (ENOENT). So does
  // one whose stored file another client replaced or removed (LoseBase): the kernel then
  // looks it up as it is now.
  if (lost_base || (!inode.staged && !inode.in_store)) InvalidateEntryOf(key);
  return error;
}

void Filesystem::InvalidateEntryOf(const std::string& key) {
  if (key.empty()) return;
  const size_t slash = key.rfind('/');
  const uint64_t parent = inodes_.InoOf(slash == std::string::npos ? "" : key.substr(0, slash));
  if (parent != 0) InvalidateEntry(parent, key.substr(slash + 1));
}

void Filesystem::InvalidateEntry(uint64_t parent, const std::string& name) {
  std::function<void(uint64_t, const std::string&)> invalidate;
  {
    MutexLock lock(&invalidators_mu_);
    invalidate = invalidate_entry_;
  }
  if (invalidate) invalidate(parent, name);
}

Status Filesystem::Release(uint64_t fh) {
  std::shared_ptr<Handle> handle;
  {
    MutexLock lock(&handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return InvalidArgumentError("unknown file handle");
    handle = std::move(it->second);
    handles_.erase(it);
  }
  Inode& inode = *handle->inode;
  Status status;
  uint32_t reapply = 0;  // the fields of `changed` to set again
  FileAttr changed;
  uint64_t changes = 0;  // inode.metadata_changes when they were known
  {
    MutexLock lock(&inode.mu);
    int remaining = inode.open_handles.fetch_sub(1) - 1;
    const bool writer = IsWritable(handle->flags);
    const int writers = writer ? inode.open_writers.fetch_sub(1) - 1 : inode.open_writers.load();
    const bool emptier = inode.emptied_by == fh;
    if (emptier) inode.emptied_by = 0;
    if (inode.removed()) {
      if (remaining == 0) writer_->DropStaging(inode);
    } else if (!writer && (writers > 0 || writer_->Queued(handle->ino))) {
      // A reader's release: the writer's close or the queued upload decides (see Flush). A
      // clean copy kept only for open handles goes with the last of them.
      if (remaining == 0 && !inode.unsaved()) writer_->DropStaging(inode);
    } else {
      if (FileWriter::OnlyEmptied(inode) && (inode.emptied_by != 0 || (!emptier && writers > 0))) {
        // Emptied, and the writer that emptied it is still at work (`cmd > file`; where none
        // is known, any writer): its close or release stores the file (see Flush).
      } else if (inode.unsaved() && !FileWriter::Unfinished(inode)) {
        // Uploaded, deferred or kept for a retry; or unfinished now, its base gone (below).
        status = writer_->Close(handle->ino, inode);
      } else if (!inode.unsaved() && remaining == 0) {
        writer_->DropStaging(inode);
      }
      if (FileWriter::Unfinished(inode) && writers == 0) {
        // Left unfinished by a failed write, or by the close above.
        changed = inode.attr;
        status = CloseUnfinished(handle->ino, inode);
        if (inode.unsaved()) {
          // The version closed before, as it was (and set aside too should its base be gone).
          (void)writer_->Close(handle->ino, inode);
          if (FileWriter::Unfinished(inode)) (void)CloseUnfinished(handle->ino, inode);
        } else {
          if (remaining == 0) writer_->DropStaging(inode);
          // A chmod or chown made while the writer wrote went with its data, set aside now: the
          // stored file, the file again, gets it (below, as any such change of it).
          if (inode.in_store && !inode.removed()) reapply = inode.set_while_written;
        }
        inode.set_while_written = 0;
        changes = inode.metadata_changes;
      }
    }
  }
  if (reapply != 0) {
    const std::shared_ptr<Inode> target = handle->inode;
    auto again = [&](FileAttr& attr, Metadata&) -> Status {
      target->mu.AssertHeld();  // run by MutateMetadata, under the inode's lock
      // A chmod or chown the user made since the lock was dropped (this change counts one)
      // is newer: it stands.
      if (target->metadata_changes != changes + 1) return Status::Ok();
      if (reapply & kSetMode) attr.mode = (attr.mode & S_IFMT) | (changed.mode & 07777);
      if (reapply & kSetUid) attr.uid = changed.uid;
      if (reapply & kSetGid) attr.gid = changed.gid;
      return Status::Ok();
    };
    Result<FileAttr> set = MutateMetadata(handle->ino, again);
    if (!set.ok()) {
      Log(LogLevel::kError,
          "a chmod or chown made while a write failed is lost: " + set.status().message());
    }
  }
  {
    MutexLock lock(&handle->mu);
    handle->prefetcher.reset();
  }
  // An inode the kernel already forgot goes once its last handle closes.
  inodes_.Forget(handle->ino, 0);
  metrics_->open_files.fetch_sub(1, std::memory_order_relaxed);
  return status;
}

}  // namespace objfs
