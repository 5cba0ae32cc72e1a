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

#include "cache/io_pool.h"
#include "cache/read_budget.h"
#include "fs/filesystem.h"
#include "fs/object_metadata.h"
#include "fs/xattr.h"

namespace objfs {

namespace {

bool IsWritable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

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

}  // namespace

Status Filesystem::EnsureStagedLocked(Inode& inode, const std::string& key, const MetaRecord& rec,
                                      bool empty) {
  if (inode.staged) return Status::Ok();
  FileAttr attr = AttrFromRecord(0, rec);
  Metadata extra = WithoutPosixMetadata(rec.metadata);
  if (inode.pending_metadata) {
    // A metadata change not in the store yet: the upload carries it.
    attr.mode = inode.attr.mode;
    attr.uid = inode.attr.uid;
    attr.gid = inode.attr.gid;
    attr.mtime_ns = inode.attr.mtime_ns;
    extra = inode.extra_metadata;
  }
  // No crash record yet: until a write changes it, the copy is only the stored object (a crash
  // in the middle of fetching it must never upload a prefix over the whole).
  auto created = staging_->Create();
  if (!created.ok()) {
    OBJFS_RETURN_IF_ERROR(RetryWithRoom(created.status(), &inode, empty ? 0 : rec.size, [&] {
      created = staging_->Create();
      return created.status();
    }));
  }
  std::unique_ptr<StagedFile> staged = std::move(*created);
  if (!empty && rec.size > 0) {
    // The object's current content, in read_buffer-sized reads.
    std::vector<std::byte> buf(std::max<size_t>(options_.prefetch.read_buffer, 4096));
    uint64_t offset = 0;
    while (offset < rec.size) {
      auto n = store_->read(key, offset, buf, rec.etag.empty() ? nullptr : &rec.etag);
      if (!n.ok()) {
        staged->Remove();
        return n.status().WithContext("fetching " + key + " for writing");
      }
      if (*n == 0) break;
      const std::span<const std::byte> piece(buf.data(), *n);
      Status s = RetryWithRoom(staged->WriteAt(offset, piece), &inode, rec.size - offset,
                               [&] { return staged->WriteAt(offset, piece); });
      if (!s.ok()) {
        staged->Remove();
        return s;
      }
      offset += *n;
    }
  }
  attr.size = staged->size();
  inode.attr = attr;
  inode.extra_metadata = std::move(extra);
  inode.staged = std::move(staged);
  inode.in_store = true;  // staged from the stored object (Create clears it for a new file)
  if (!inode.removed()) inode.state = Inode::FileState::kCached;
  inode.has_local_data.store(true);
  return Status::Ok();
}

void Filesystem::DiscardLocked(Inode& inode) {
  inode.state = Inode::FileState::kRemoved;
  DropPendingMetadataLocked(inode);
  MetadataCoalescer::Forget(inode.carried);
  if (inode.open_handles.load() == 0) {
    DropStagingLocked(inode);
  } else if (inode.staged) {
    inode.staged->Orphan();  // open handles keep the data; a crash must not upload it
    if (inode.accepted_copy) {
      inode.accepted_copy->Remove();
      inode.accepted_copy.reset();
    }
  }
}

void Filesystem::DropStagingLocked(Inode& inode) {
  MetadataCoalescer::Forget(inode.carried);
  if (inode.accepted_copy) {
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  if (!inode.staged) return;
  inode.staged->Remove();
  inode.staged.reset();
  if (!inode.removed()) inode.state = Inode::FileState::kStored;
  inode.has_local_data.store(inode.pending_metadata.has_value());
}

void Filesystem::DropPendingMetadataLocked(Inode& inode) {
  MetadataCoalescer::Forget(inode.pending_metadata);
  inode.has_local_data.store(inode.staged != nullptr);
}

bool Filesystem::DeferMetadataLocked(uint64_t ino, Inode& inode, const std::string& key,
                                     const MetaRecord& rec, const FileAttr& attr,
                                     const Metadata& extra, const Metadata& metadata) {
  std::optional<HeldChange> held =
      coalescer_->Hold(key, InfoFromRecord(key, rec), rec.own_write, metadata);
  if (!held) return false;
  inode.pending_metadata = std::move(held);
  inode.attr = attr;
  inode.extra_metadata = extra;
  inode.has_local_data.store(true);

  ObjectInfo info = inode.pending_metadata->object;
  info.metadata = metadata;
  info.has_metadata = true;
  MetaRecord updated = RecordFromInfo(info, false);
  updated.complete = true;
  updated.own_write = rec.own_write;
  meta_cache_.Put(key, updated);
  Bump(metrics_->metadata_deferred);

  auto due =
      clock_->now() + std::chrono::nanoseconds(static_cast<int64_t>(options_.metadata_delay * 1e9));
  // An upload due later (a write-back window, a retry) must not hold the change back.
  queue_->ScheduleNoLaterThan(ino, due);
  return true;
}

Status Filesystem::ApplyPendingMetadataLocked(Inode& inode, const std::string& key) {
  if (!inode.pending_metadata) return Status::Ok();
  OBJFS_ASSIGN_OR_RETURN(MetadataCoalescer::Applied applied,
                         coalescer_->Apply(*inode.pending_metadata, key));
  switch (applied.outcome) {
    case MetadataCoalescer::Outcome::kRefused:
      DropRefusedMetadataLocked(inode, key, applied.reason);
      return Status::Ok();
    case MetadataCoalescer::Outcome::kGone:
      DropPendingMetadataLocked(inode);
      return Status::Ok();
    case MetadataCoalescer::Outcome::kApplied:
      break;
  }
  MetaRecord updated = RecordFromInfo(applied.info, false);
  updated.complete = true;
  updated.own_write = true;
  meta_cache_.Put(key, updated);
  inode.uploaded_etag = applied.info.etag;
  DropPendingMetadataLocked(inode);
  return Status::Ok();
}

void Filesystem::DropRefusedMetadataLocked(Inode& inode, const std::string& key,
                                           const Status& refusal) {
  if (inode.pending_metadata) {
    const HeldChange& pending = *inode.pending_metadata;
    Log("dropping a metadata change of " + key + " (" +
        ChangedMetadataNames(pending.object.metadata, pending.metadata) +
        "): the server refuses it for good (" + refusal.ToString() +
        "); the object keeps the metadata it has");
  }
  if (inode.pending_metadata && inode.pending_metadata->object.has_metadata) {
    // What the store holds, for a staged copy kept for open handles.
    const ObjectInfo& object = inode.pending_metadata->object;
    const FileAttr stored = AttrFromRecord(0, RecordFromInfo(object, false));
    inode.attr.mode = stored.mode;
    inode.attr.uid = stored.uid;
    inode.attr.gid = stored.gid;
    inode.attr.mtime_ns = stored.mtime_ns;
    inode.extra_metadata = WithoutPosixMetadata(object.metadata);
  }
  meta_cache_.Invalidate(key);
  DropPendingMetadataLocked(inode);
}

Result<ObjectInfo> Filesystem::PutWithAcceptedMetadata(const std::string& key,
                                                       const ByteSource& source, Metadata* metadata,
                                                       const Status& refusal) {
  Metadata accepted;
  Result<ObjectInfo> stored = store_->head(key);
  if (stored.ok()) {
    accepted = WithoutPosixMetadata(stored->metadata);
  } else if (stored.status().code() != StatusCode::kNotFound) {
    return refusal;
  }
  for (const char* name : {kModeMetadata, kUidMetadata, kGidMetadata, kMtimeMetadata}) {
    auto it = metadata->find(name);
    if (it != metadata->end()) accepted[name] = it->second;
  }
  if (accepted == *metadata) return refusal;  // it was not the metadata the server refused
  PutOptions put;
  put.metadata = accepted;
  Result<ObjectInfo> result = store_->put(key, source, put);
  if (!result.ok()) return IsPermanentRefusal(result.status()) ? refusal : result.status();
  Log("uploaded " + key + " without its metadata change (" +
      ChangedMetadataNames(accepted, *metadata) + "), which the server refuses for good (" +
      refusal.ToString() + "): the object keeps the metadata the server last accepted");
  *metadata = std::move(accepted);
  return result;
}

Metadata Filesystem::UploadMetadataLocked(const Inode& inode) {
  Metadata metadata = inode.extra_metadata;
  SetPosixMetadata(inode.attr.mode, inode.attr.uid, inode.attr.gid, inode.attr.mtime_ns, &metadata);
  return metadata;
}

Status Filesystem::UploadLocked(Inode& inode, const std::string& key, bool accept) {
  Metadata metadata = UploadMetadataLocked(inode);
  // A writer's close or an fsync vouches for the data as it is: should objfs die during the
  // upload, the next mount uploads it. (Not synced first: the upload is what keeps it, and a
  // failed one syncs it below.) Any other upload only keeps an existing record current.
  Status described = accept && !inode.removed()
                         ? inode.staged->MarkAccepted(key, metadata, /*sync=*/false)
                         : inode.staged->Describe(key, metadata);
  if (!described.ok()) {
    Log("uploading " + key + " with a stale crash record: " + described.message());
  } else if (accept) {
    MetadataCoalescer::Forget(inode.carried);  // the accepted record carries the change
    if (inode.accepted_copy) {                 // superseded by this version
      inode.accepted_copy->Remove();
      inode.accepted_copy.reset();
    }
  }
  PutOptions put;
  put.metadata = metadata;
  auto result = store_->put(key, inode.staged->Source(), put);
  if (!result.ok() && IsPermanentRefusal(result.status())) {
    result = PutWithAcceptedMetadata(key, inode.staged->Source(), &metadata, result.status());
    if (result.ok()) inode.extra_metadata = WithoutPosixMetadata(metadata);
  }
  if (!result.ok()) {
    meta_cache_.Invalidate(key);
    if (accept && !inode.removed()) {
      // Accepted all the same: kept for a retry, and uploaded by the next mount should objfs
      // die first.
      Status recorded = inode.staged->MarkAccepted(key, metadata);
      if (recorded.ok()) MetadataCoalescer::Forget(inode.carried);
      if (recorded.ok() && inode.accepted_copy) {
        inode.accepted_copy->Remove();
        inode.accepted_copy.reset();
      }
      if (!recorded.ok()) Log("no crash record for " + key + ": " + recorded.message());
    }
    return result.status().WithContext("uploading " + key);
  }
  if (inode.unsaved()) inode.state = Inode::FileState::kCached;
  inode.in_store = true;
  inode.uploaded_etag = result->etag;
  DropPendingMetadataLocked(inode);  // the upload carried it
  MetadataCoalescer::Forget(inode.carried);
  if (inode.accepted_copy) {  // an older version: the store has a newer one now
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  ObjectInfo info = *result;
  info.size = inode.staged->size();
  info.metadata = metadata;
  info.has_metadata = true;
  MetaRecord rec = RecordFromInfo(info, false);
  rec.complete = true;
  rec.own_write = true;
  meta_cache_.Put(key, rec);
  if (inode.open_handles.load() == 0) {
    DropStagingLocked(inode);
  } else {
    // Kept for the open handles, but the store has it: a crash must not upload it again, over
    // whatever changed since (a held chmod applied, another client's write).
    inode.staged->Orphan();
  }
  return Status::Ok();
}

Status Filesystem::MarkDirtyLocked(Inode& inode, const std::string& key, bool keep_content) {
  // (A file removed or replaced while open keeps writing to a copy nothing will upload.)
  if (!inode.staged || inode.removed()) return Status::Ok();
  const std::optional<StagedFile::State> state = inode.staged->state();
  if (state == StagedFile::State::kWriting) {
    inode.state = Inode::FileState::kUnsaved;
    return Status::Ok();
  }
  Metadata metadata = UploadMetadataLocked(inode);
  if (state == StagedFile::State::kAccepted) {
    // Accepted and not uploaded yet: that version stays as it is, with its record, and the
    // writer changes a copy, so that a crash uploads what was closed, never a mix. (An empty
    // one, when the writer empties the file anyway.)
    auto copy = keep_content ? staging_->Clone(*inode.staged) : staging_->Create();
    if (!copy.ok()) {
      const uint64_t needed = keep_content ? inode.staged->size() : 0;
      OBJFS_RETURN_IF_ERROR(RetryWithRoom(copy.status(), &inode, needed, [&] {
        copy = keep_content ? staging_->Clone(*inode.staged) : staging_->Create();
        return copy.status();
      }));
    }
    if (inode.accepted_copy) inode.accepted_copy->Remove();
    inode.accepted_copy = std::move(inode.staged);
    inode.staged = std::move(*copy);
  }
  // A clean copy has no crash record (a fetched object, or one the upload removed); it is about
  // to hold data the store lacks. The record carries the metadata the mount shows, a held
  // change included, whose own record then goes: replayed after the data, it would undo
  // changes made after it.
  Status recorded = RetryWithRoom(inode.staged->MarkWriting(key, metadata), &inode, 4096,
                                  [&] { return inode.staged->MarkWriting(key, metadata); });
  if (!recorded.ok()) {
    if (inode.accepted_copy) {  // back as it was
      inode.staged->Remove();
      inode.staged = std::move(inode.accepted_copy);
    }
    return recorded;
  }
  // ... but its own record stays until this data is accepted: a crash before that sets the data
  // aside, and the change, acknowledged already, still applies to the stored object.
  MetadataCoalescer::Carry(inode.pending_metadata, inode.carried);
  inode.has_local_data.store(true);
  inode.state = Inode::FileState::kUnsaved;
  return Status::Ok();
}

Status Filesystem::FlushInode(uint64_t ino, const std::shared_ptr<Inode>& inode, bool with_metadata,
                              bool accept) {
  std::lock_guard<std::mutex> lock(inode->mu);
  if (inode->removed()) return Status::Ok();
  const bool upload = inode->unsaved();
  if (!upload && !(with_metadata && inode->pending_metadata)) return Status::Ok();
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  if (upload) return UploadLocked(*inode, key, accept);
  return ApplyPendingMetadataLocked(*inode, key);
}

Result<uint64_t> Filesystem::Open(uint64_t ino, int flags) {
  bool writable = IsWritable(flags);
  bool truncate = writable && (flags & O_TRUNC) != 0;
  if (writable) OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(ino));
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  if (inode == nullptr) return NotFoundError("unknown inode " + std::to_string(ino));
  auto handle = std::make_shared<Handle>();
  handle->ino = ino;
  handle->flags = flags;
  handle->inode = inode;
  handle->read_key = key;
  {
    std::lock_guard<std::mutex> lock(inode->mu);
    // The self-copy that applies a pending metadata change keeps a plain-MD5 ETag but may give a
    // multipart object a new one, which would fail this handle's reads: apply it before.
    if (inode->pending_metadata && !inode->staged && !truncate &&
        !inode->pending_metadata->object.etag.is_plain_md5()) {
      OBJFS_RETURN_IF_ERROR(ApplyPendingMetadataLocked(*inode, key));
    }
    if (!inode->staged) {
      OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
      if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
      if (truncate) {
        OBJFS_RETURN_IF_ERROR(EnsureStagedLocked(*inode, key, rec, /*empty=*/true));
        inode->attr.mtime_ns = NowNs();
        OBJFS_RETURN_IF_ERROR(MarkDirtyLocked(*inode, key));
        meta_cache_.Invalidate(key);
      } else {
        handle->read_info = InfoFromRecord(key, rec);
      }
    } else if (truncate && inode->staged->size() > 0) {
      OBJFS_RETURN_IF_ERROR(MarkDirtyLocked(*inode, key, /*keep_content=*/false));
      OBJFS_RETURN_IF_ERROR(inode->staged->Truncate(0));
      inode->attr.size = 0;
      inode->attr.mtime_ns = NowNs();
      meta_cache_.Invalidate(key);
    }
    CountOpenLocked(*inode, flags);
  }
  return AddHandle(std::move(handle));
}

Result<CreatedFile> Filesystem::Create(uint64_t parent, std::string_view name, uint32_t mode,
                                       int flags, std::optional<Owner> caller) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  OBJFS_ASSIGN_OR_RETURN(std::string key, ChildKey(parent, name));
  bool exists = false;
  if (uint64_t known = inodes_.InoOf(key)) {
    if (auto inode = inodes_.Get(known)) exists = LocalAttr(*inode, known).has_value();
  }
  if (!exists) {
    auto rec = Resolve(key);
    if (rec.ok()) {
      exists = true;
      if (rec->is_dir && (flags & O_EXCL) == 0) {
        return Status(StatusCode::kIsDirectory, key + " is a directory");
      }
    } else if (rec.status().code() != StatusCode::kNotFound) {
      return rec.status();
    }
  }
  if (exists) {
    if (flags & O_EXCL) return AlreadyExistsError(key + " exists");
    uint64_t ino = inodes_.Acquire(key, 0);
    OBJFS_ASSIGN_OR_RETURN(uint64_t fh, Open(ino, flags));
    auto entry = GetAttr(ino);
    if (!entry.ok()) {
      (void)Release(fh);
      return entry.status();
    }
    inodes_.AddLookup(ino);
    return CreatedFile{*entry, fh};
  }

  uint64_t ino = inodes_.Acquire(key, 1);
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  auto handle = std::make_shared<Handle>();
  handle->ino = ino;
  handle->flags = flags;
  handle->inode = inode;
  handle->read_key = key;
  FileAttr attr;
  {
    std::lock_guard<std::mutex> lock(inode->mu);
    if (!inode->staged) {
      MetaRecord rec;
      rec.mode = S_IFREG | (mode & 07777);
      const Owner owner = NewOwner(caller);
      rec.uid = owner.uid;
      rec.gid = owner.gid;
      rec.mtime_ns = NowNs();
      rec.complete = true;
      Status s = EnsureStagedLocked(*inode, key, rec, /*empty=*/true);
      if (!s.ok()) {
        inodes_.Forget(ino, 1);
        return s;
      }
      inode->in_store = false;
    }
    if (inode->removed()) {
      inode->state = inode->staged ? Inode::FileState::kCached : Inode::FileState::kStored;
    }
    Status marked = MarkDirtyLocked(*inode, key);
    if (!marked.ok()) {
      inodes_.Forget(ino, 1);
      return marked;
    }
    attr = inode->attr;
    attr.ino = ino;
    attr.size = inode->staged->size();
    CountOpenLocked(*inode, flags);
  }
  meta_cache_.Invalidate(key);
  uint64_t fh = AddHandle(std::move(handle));
  return CreatedFile{MakeEntry(attr, true), fh};
}

Result<std::shared_ptr<Prefetcher>> Filesystem::PrefetcherOf(Handle& handle) {
  std::lock_guard<std::mutex> lock(handle.mu);
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle.ino));
  if (handle.prefetcher == nullptr || handle.read_key != key || handle.read_info.key != key) {
    if (handle.read_info.key != key || handle.read_info.etag.empty()) {
      OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
      if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
      handle.read_info = InfoFromRecord(key, rec);
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

Result<size_t> Filesystem::Read(uint64_t fh, uint64_t offset, std::span<std::byte> buf) {
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  {
    std::lock_guard<std::mutex> lock(handle->inode->mu);
    if (handle->inode->staged) return handle->inode->staged->ReadAt(offset, buf);
  }
  return ReadFromStore(*handle, offset, buf);
}

Result<size_t> Filesystem::ReadSegments(uint64_t fh, uint64_t offset, size_t size,
                                        std::vector<ReadSegment>* out) {
  Bump(metrics_->kernel_reads);
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  {
    std::lock_guard<std::mutex> lock(handle->inode->mu);
    if (handle->inode->staged) {
      std::shared_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
      OBJFS_ASSIGN_OR_RETURN(size_t n,
                             handle->inode->staged->ReadAt(offset, std::span(buf.get(), size)));
      if (n > 0) out->push_back(ReadSegment{buf, buf.get(), n});
      return n;
    }
  }
  OBJFS_ASSIGN_OR_RETURN(std::shared_ptr<Prefetcher> prefetcher, PrefetcherOf(*handle));
  return prefetcher->ReadSegments(offset, size, out);
}

Result<size_t> Filesystem::Write(uint64_t fh, uint64_t offset, std::span<const std::byte> data) {
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  if (!IsWritable(handle->flags)) return InvalidArgumentError("handle not open for writing");
  Inode& inode = *handle->inode;
  std::lock_guard<std::mutex> lock(inode.mu);
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle->ino));
  if (!inode.staged) {
    OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(key));
    if (rec.is_dir) return Status(StatusCode::kIsDirectory, key + " is a directory");
    OBJFS_RETURN_IF_ERROR(EnsureStagedLocked(inode, key, rec, /*empty=*/rec.size == 0));
  }
  if (handle->flags & O_APPEND) offset = inode.staged->size();
  OBJFS_RETURN_IF_ERROR(CheckObjectSize(key, offset + data.size()));
  OBJFS_RETURN_IF_ERROR(MarkDirtyLocked(inode, key));
  OBJFS_RETURN_IF_ERROR(RetryWithRoom(inode.staged->WriteAt(offset, data), &inode, data.size(),
                                      [&] { return inode.staged->WriteAt(offset, data); }));
  inode.attr.size = inode.staged->size();
  inode.attr.mtime_ns = NowNs();
  meta_cache_.Invalidate(key);
  return data.size();
}

Status Filesystem::DeferUploadLocked(uint64_t ino, Inode& inode) {
  auto key = KeyOf(ino);
  if (!key.ok()) return key.status();
  const Metadata metadata = UploadMetadataLocked(inode);
  // The record names what a crash before the upload must still upload at the next mount; the
  // data is on disk first, so that after a power loss no record describes lost data. (As with a
  // local file, only fsync, which uploads, makes the data safe from a power loss.)
  Status recorded = inode.staged->MarkAccepted(*key, metadata);
  if (recorded.ok()) MetadataCoalescer::Forget(inode.carried);  // this record carries the change
  if (recorded.ok() && inode.accepted_copy) {                   // superseded by this version
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  if (!recorded.ok()) {
    // Without that record (the cache disk is full) the window would hold data a crash loses:
    // upload it now, as without a window.
    Log("uploading " + *key + " at close: " + recorded.message());
    Status uploaded = UploadLocked(inode, *key);
    if (!uploaded.ok()) RetryUploadLater(ino, uploaded);
    return uploaded;
  }
  auto due =
      clock_->now() + std::chrono::nanoseconds(static_cast<int64_t>(options_.writeback * 1e9));
  queue_->ScheduleUnlessQueued(ino, due);  // an earlier close's schedule stands
  return Status::Ok();
}

void Filesystem::NoteUploadFailure(const Status& failure) {
  Bump(metrics_->writeback_failures);
  char when[64];
  std::snprintf(when, sizeof(when), "; kept in cache_dir, retrying in %.0f s", retry_seconds());
  Log(failure.ToString() + when);
}

void Filesystem::RetryUploadLater(uint64_t ino, const Status& failure) {
  NoteUploadFailure(failure);
  queue_->RetryLater(ino);
}

uint64_t Filesystem::MakeRoomInStaging(const Inode* busy, uint64_t needed) {
  auto upload_early = [&](uint64_t ino) -> std::optional<Result<uint64_t>> {
    std::shared_ptr<Inode> inode = inodes_.Get(ino);
    if (inode == nullptr || inode.get() == busy) return std::nullopt;
    // Never waits for another inode's lock while holding `busy`'s.
    std::unique_lock<std::mutex> lock(inode->mu, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    if (!inode->unsaved() || inode->open_handles.load() > 0) {
      return std::nullopt;
    }
    auto key = KeyOf(ino);
    if (!key.ok()) return std::nullopt;
    const uint64_t size = inode->staged->size();
    Status s = UploadLocked(*inode, *key);
    if (!s.ok()) {
      NoteUploadFailure(s);  // the queue retries it
      return s;
    }
    return size;
  };
  size_t uploaded = 0;
  const uint64_t freed = queue_->MakeRoom(needed, upload_early, &uploaded);
  if (uploaded > 0) {
    Log("cache_dir is full: uploaded " + std::to_string(uploaded) +
        " file(s) of the write-back window early");
  }
  return freed;
}

Status Filesystem::ReportedAtClose(std::string_view call, uint64_t ino, Status failed) {
  if (failed.ok()) return failed;
  Result<std::string> key = KeyOf(ino);
  Log(std::string(call) + " of " + (key.ok() ? *key : "inode " + std::to_string(ino)) +
      " failed: " + failed.ToString() + "; kept for a retry");
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
      (handle->inode->open_writers.load() > 0 || queue_->Queued(handle->ino))) {
    return Status::Ok();
  }
  if (writeback()) {
    Inode& inode = *handle->inode;
    std::lock_guard<std::mutex> lock(inode.mu);
    if (!inode.unsaved()) return Status::Ok();
    // (Without a crash record, on a full cache disk, this uploads at once.)
    return ReportedAtClose("close", handle->ino, DeferUploadLocked(handle->ino, inode));
  }
  // close(2) uploads unsaved data; a pending metadata change keeps waiting (fsync applies it).
  return ReportedAtClose("close", handle->ino,
                         FlushInode(handle->ino, handle->inode, /*with_metadata=*/false,
                                    /*accept=*/IsWritable(handle->flags)));
}

Status Filesystem::Fsync(uint64_t fh, bool /*datasync*/) {
  std::shared_ptr<Handle> handle = FindHandle(fh);
  if (handle == nullptr) return InvalidArgumentError("unknown file handle");
  return ReportedAtClose("fsync", handle->ino,
                         FlushInode(handle->ino, handle->inode, /*with_metadata=*/true,
                                    /*accept=*/true));
}

Status Filesystem::Release(uint64_t fh) {
  std::shared_ptr<Handle> handle;
  {
    std::lock_guard<std::mutex> lock(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return InvalidArgumentError("unknown file handle");
    handle = std::move(it->second);
    handles_.erase(it);
  }
  Inode& inode = *handle->inode;
  Status status;
  {
    std::lock_guard<std::mutex> lock(inode.mu);
    int remaining = inode.open_handles.fetch_sub(1) - 1;
    const bool writer = IsWritable(handle->flags);
    const int writers = writer ? inode.open_writers.fetch_sub(1) - 1 : inode.open_writers.load();
    if (inode.removed()) {
      if (remaining == 0) DropStagingLocked(inode);
    } else if (!writer && (writers > 0 || queue_->Queued(handle->ino))) {
      // A reader's release: the writer's close or the queued upload decides (see Flush). A
      // clean copy kept only for open handles goes with the last of them.
      if (remaining == 0 && !inode.unsaved()) DropStagingLocked(inode);
    } else if (inode.unsaved()) {
      if (writeback()) {
        status = DeferUploadLocked(handle->ino, inode);
      } else {
        auto key = KeyOf(handle->ino);
        status = key.ok() ? UploadLocked(inode, *key) : key.status();
        // close(2) reported the failure; the data stays staged and is tried again in the
        // background (and at unmount at the latest).
        if (!status.ok()) RetryUploadLater(handle->ino, status);
      }
    } else if (remaining == 0) {
      DropStagingLocked(inode);
    }
  }
  {
    std::lock_guard<std::mutex> lock(handle->mu);
    handle->prefetcher.reset();
  }
  // An inode the kernel already forgot goes once its last handle closes.
  inodes_.Forget(handle->ino, 0);
  metrics_->open_files.fetch_sub(1, std::memory_order_relaxed);
  return status;
}

Status Filesystem::FlushAll() {
  // In parallel: at unmount a write-back window may have left many small files to upload.
  std::unordered_map<uint64_t, std::shared_ptr<Inode>> local;
  std::vector<uint64_t> inos;
  for (auto& [ino, inode] : inodes_.WithLocalData("")) {
    inos.push_back(ino);
    local.emplace(ino, std::move(inode));
  }
  Status first = queue_->RunAll(inos, [&](uint64_t ino) { return FlushInode(ino, local.at(ino)); });
  // Files taken over from an earlier mount that this uploaded (or that were removed or
  // uploaded meanwhile) are done: the log says so when they were the last.
  for (uint64_t ino : recovery_.Pending()) {
    bool done = true;
    if (std::shared_ptr<Inode> inode = inodes_.Find(ino)) {
      std::lock_guard<std::mutex> lock(inode->mu);
      done = !inode->unsaved();
    }
    if (done) recovery_.Done(ino);
  }
  return first;
}

void Filesystem::Log(const std::string& message) const {
  if (options_.log) {
    options_.log(message);
  } else {
    std::fprintf(stderr, "objfs: %s\n", message.c_str());
  }
}

Status Filesystem::UploadDue() {
  // (Without a write-back window or held metadata changes, the queue holds only the files
  // RecoverStaged took over and failed uploads to retry.)
  return queue_->RunDue();
}

Status Filesystem::UploadDueFile(uint64_t ino) {
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  if (inode == nullptr) return Status::Ok();
  Status status;
  {
    std::lock_guard<std::mutex> lock(inode->mu);
    if (inode->removed()) return Status::Ok();
    if (inode->unsaved()) {
      // Open again: its last release schedules it anew.
      if (inode->open_handles.load() > 0) return Status::Ok();
      auto key = KeyOf(ino);
      status = key.ok() ? UploadLocked(*inode, *key) : key.status();
    } else if (inode->pending_metadata) {
      auto key = KeyOf(ino);
      status = key.ok() ? ApplyPendingMetadataLocked(*inode, *key) : key.status();
    } else {
      return Status::Ok();  // clean: uploaded, renamed or removed meanwhile
    }
    if (!status.ok()) RetryUploadLater(ino, status);
  }
  inodes_.Forget(ino, 0);  // an inode the kernel forgot goes once it is clean
  return status;
}

size_t Filesystem::recovering_files() { return recovery_.pending(); }

size_t Filesystem::pending_uploads() { return queue_->size(); }

namespace {
int64_t ModifiedNs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}
}  // namespace

bool Filesystem::AdoptLeftover(const StagedLeftover& left) {
  Result<std::unique_ptr<StagedFile>> file = staging_->Adopt(left);
  if (!file.ok()) {
    Log("staged data of " + left.key + " stays in " + left.data_path +
        " for the next mount: " + file.status().message());
    return false;
  }
  const uint64_t size = (*file)->size();
  ObjectInfo info;
  info.key = left.key;
  info.size = size;
  info.metadata = left.metadata;
  info.has_metadata = true;
  info.mtime_ns = ModifiedNs(left.data_path);  // when the metadata names no mtime
  const MetaRecord rec = RecordFromInfo(info, false);
  const uint64_t ino = inodes_.Acquire(left.key, 0);
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  {
    std::lock_guard<std::mutex> lock(inode->mu);
    inode->attr = AttrFromRecord(ino, rec);
    inode->extra_metadata = WithoutPosixMetadata(left.metadata);
    inode->staged = std::move(*file);
    inode->state = Inode::FileState::kUnsaved;
    // Whether the store has an older object there is not known: a rename before the upload
    // removes the old name, which costs nothing when there is none.
    inode->in_store = true;
    inode->has_local_data.store(true);
  }
  meta_cache_.Invalidate(left.key);
  recovery_.Add(ino, size);
  queue_->ScheduleAt(ino, clock_->now());  // due at once, window or not
  return true;
}

Status Filesystem::RecoverStaged() {
  std::vector<std::string> unreadable;
  OBJFS_ASSIGN_OR_RETURN(auto leftovers, staging_->Leftovers(&unreadable));
  for (const std::string& data_path : unreadable) {
    Log("staged data " + data_path +
        " is not uploaded: the record naming its object is damaged; the data is left there");
  }
  // Kept for the user to look at, never uploaded.
  auto set_aside = [this](const StagedLeftover& left, const std::string& why) {
    struct stat st;
    const uint64_t bytes =
        ::stat(left.data_path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    Result<std::string> kept = staging_->SetAside(left);
    if (!kept.ok()) {
      Log("unfinished data of " + left.key + " stays in " + left.data_path + ": " +
          kept.status().message());
      return;
    }
    Log(left.key + why + ": not uploaded; its " + std::to_string(bytes) + " bytes are in " + *kept);
  };
  Status first;
  // The files to take over, one per key: should two accepted versions name the same key, the
  // newer one is the file.
  std::map<std::string, size_t> adopt;
  for (size_t i = 0; i < leftovers.size(); ++i) {
    const StagedLeftover& left = leftovers[i];
    if (!left.publishable()) {
      // Written and never closed or synced (or cut short since): not what its writer meant the
      // file to be, so it never replaces the object.
      set_aside(left,
                " was being written when objfs stopped, and no close or fsync had accepted it");
      continue;
    }
    auto [it, inserted] = adopt.try_emplace(left.key, i);
    if (inserted) continue;
    size_t older = i;
    if (ModifiedNs(left.data_path) > ModifiedNs(leftovers[it->second].data_path)) {
      older = it->second;
      it->second = i;
    }
    set_aside(leftovers[older], " has a newer accepted version");
  }
  // Metadata changes that had not reached the store, applied here rather than in the
  // background: they move no data (a HEAD and a self-copy each, and only the changes of the
  // last metadata_delay seconds), and until then nothing would show them. The uploads of the
  // files taken over below carry their own metadata.
  Status held = coalescer_->Recover();
  if (!held.ok() && first.ok()) first = held;
  // Staged copies no record names were already in the store, or belonged to removed files.
  size_t unrecorded = 0;
  Result<uint64_t> freed = staging_->RemoveUnrecorded(&unrecorded);
  if (freed.ok() && unrecorded > 0) {
    Log("removed " + std::to_string(unrecorded) + " staged copies (" + std::to_string(*freed) +
        " bytes) that an earlier mount had already uploaded or whose files were removed");
  }
  // The accepted files are served from cache_dir at once and uploaded in the background: a
  // large backlog would otherwise keep the mount from answering for as long as it uploads.
  size_t adopted = 0;
  recovery_.Begin();
  for (const auto& [key, index] : adopt) {
    if (AdoptLeftover(leftovers[index])) ++adopted;
  }
  if (adopted > 0) {
    Log("uploading " + std::to_string(adopted) + " files (" + std::to_string(recovery_.bytes()) +
        " bytes) left by an earlier mount in the background");
    if (options_.writeback_thread) queue_->Start();
  }
  recovery_.End();  // logs at once when all of them are uploaded already
  return first;
}

}  // namespace objfs
