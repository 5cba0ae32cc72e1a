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

// Seconds before a failed write-back upload is tried again (or the window, when longer).
constexpr double kWritebackRetrySeconds = 10;

// How far the server's clock may run ahead of this machine's before a held metadata change
// left by a crash is taken to be older than the object's last change: 15 minutes, the most
// S3 itself allows between a client's clock and the server's (SigV4 refuses more).
constexpr int64_t kHeldChangeClockSlackNs = int64_t{15 * 60} * 1000000000;

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

// What `to` changes of `from`, for the log: the user extended attributes and the other
// metadata names it sets, changes or removes ("user.big, mode").
std::string ChangedNames(const Metadata& from, const Metadata& to) {
  auto xattrs = [](const Metadata& metadata) {
    auto it = metadata.find(kXattrMetadata);
    if (it == metadata.end()) return XattrMap();
    return DecodeXattrs(it->second).value_or(XattrMap());
  };
  std::vector<std::string> names;
  auto differ = [&names](const auto& before, const auto& after, std::string_view skip) {
    for (const auto& [name, value] : after) {
      auto it = before.find(name);
      if (name != skip && (it == before.end() || it->second != value)) names.push_back(name);
    }
    for (const auto& [name, value] : before) {
      if (name != skip && after.find(name) == after.end()) names.push_back(name);
    }
  };
  differ(xattrs(from), xattrs(to), "");
  differ(from, to, kXattrMetadata);
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
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
  inode.has_local_data.store(true);
  return Status::Ok();
}

void Filesystem::DiscardLocked(Inode& inode) {
  inode.unlinked = true;
  inode.dirty = false;
  DropPendingMetadataLocked(inode);
  DropHeldRecordLocked(inode);
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
  DropHeldRecordLocked(inode);
  if (inode.accepted_copy) {
    inode.accepted_copy->Remove();
    inode.accepted_copy.reset();
  }
  if (!inode.staged) return;
  inode.staged->Remove();
  inode.staged.reset();
  inode.dirty = false;
  inode.has_local_data.store(inode.pending_metadata.has_value());
}

void Filesystem::DropHeldRecordLocked(Inode& inode) {
  if (inode.held_record == nullptr) return;
  inode.held_record->Remove();
  inode.held_record.reset();
  inode.held_metadata.clear();
}

void Filesystem::DropPendingMetadataLocked(Inode& inode) {
  if (!inode.pending_metadata) return;
  if (inode.pending_metadata->record != nullptr) inode.pending_metadata->record->Remove();
  inode.pending_metadata.reset();
  inode.has_local_data.store(inode.staged != nullptr);
}

bool Filesystem::DeferMetadataLocked(uint64_t ino, Inode& inode, const std::string& key,
                                     const MetaRecord& rec, const FileAttr& attr,
                                     const Metadata& extra, const Metadata& metadata) {
  if (rec.etag.empty()) return false;
  auto record = staging_->CreateAttrs(key, rec.etag, metadata);
  if (!record.ok()) return false;  // the cache disk is full: a self-copy now
  Inode::PendingMetadata pending;
  pending.object.key = key;
  pending.object.size = rec.size;
  pending.object.etag = rec.etag;
  pending.object.mtime_ns = rec.mtime_ns;
  pending.object.metadata = rec.metadata;
  pending.object.has_metadata = rec.complete;
  pending.own_write = rec.own_write;
  pending.metadata = metadata;
  pending.record = std::move(*record);
  inode.pending_metadata = std::move(pending);
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
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    // An upload due later (a write-back window, a retry) must not hold the change back.
    auto [it, added] = writeback_due_.try_emplace(ino, due);
    if (!added && due < it->second) it->second = due;
  }
  writeback_cv_.notify_one();  // the thread may wait for a later time
  return true;
}

Status Filesystem::ApplyPendingMetadataLocked(Inode& inode, const std::string& key) {
  if (!inode.pending_metadata) return Status::Ok();
  Inode::PendingMetadata& pending = *inode.pending_metadata;
  SetAttributesOptions set;
  set.source_known_current = pending.own_write;
  Result<ObjectInfo> result = InternalError("unreachable");
  for (int attempt = 0;; ++attempt) {
    set.expected = pending.object;
    set.expected.key = key;
    result = store_->set_attributes(key, pending.metadata, set);
    if (result.ok() || result.status().code() != StatusCode::kPreconditionFailed || attempt > 0) {
      break;
    }
    // Replaced elsewhere since: the change applies to what is there now.
    meta_cache_.Invalidate(key);
    Result<ObjectInfo> now = store_->head(key);
    if (!now.ok()) {
      result = now.status();
      break;
    }
    pending.object = *now;
    set.source_known_current = false;
    // The crash record follows: with the old ETag the next mount would drop the change.
    if (pending.record != nullptr) (void)pending.record->Describe(key, now->etag, pending.metadata);
  }
  if (!result.ok()) {
    meta_cache_.Invalidate(key);
    if (IsPermanentRefusal(result.status())) {
      DropRefusedMetadataLocked(inode, key, result.status());
      return Status::Ok();
    }
    if (result.status().code() == StatusCode::kNotFound) {
      // Removed elsewhere: nothing is left to change.
      Log("dropping a metadata change of " + key + ": " + result.status().message());
      DropPendingMetadataLocked(inode);
      return Status::Ok();
    }
    return result.status().WithContext("changing the metadata of " + key);
  }
  ObjectInfo info = *result;
  info.size = pending.object.size;
  info.metadata = pending.metadata;
  info.has_metadata = true;
  MetaRecord updated = RecordFromInfo(info, false);
  updated.complete = true;
  updated.own_write = true;
  meta_cache_.Put(key, updated);
  inode.uploaded_etag = info.etag;
  DropPendingMetadataLocked(inode);
  return Status::Ok();
}

void Filesystem::DropRefusedMetadataLocked(Inode& inode, const std::string& key,
                                           const Status& refusal) {
  if (inode.pending_metadata) {
    const Inode::PendingMetadata& pending = *inode.pending_metadata;
    Log("dropping a metadata change of " + key + " (" +
        ChangedNames(pending.object.metadata, pending.metadata) +
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
  Log("uploaded " + key + " without its metadata change (" + ChangedNames(accepted, *metadata) +
      "), which the server refuses for good (" + refusal.ToString() +
      "): the object keeps the metadata the server last accepted");
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
  Status described = accept && !inode.unlinked
                         ? inode.staged->MarkAccepted(key, metadata, /*sync=*/false)
                         : inode.staged->Describe(key, metadata);
  if (!described.ok()) {
    Log("uploading " + key + " with a stale crash record: " + described.message());
  } else if (accept) {
    DropHeldRecordLocked(inode);  // the accepted record carries the change
    if (inode.accepted_copy) {    // superseded by this version
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
    if (accept && !inode.unlinked) {
      // Accepted all the same: kept for a retry, and uploaded by the next mount should objfs
      // die first.
      Status recorded = inode.staged->MarkAccepted(key, metadata);
      if (recorded.ok()) DropHeldRecordLocked(inode);
      if (recorded.ok() && inode.accepted_copy) {
        inode.accepted_copy->Remove();
        inode.accepted_copy.reset();
      }
      if (!recorded.ok()) Log("no crash record for " + key + ": " + recorded.message());
    }
    return result.status().WithContext("uploading " + key);
  }
  inode.dirty = false;
  inode.in_store = true;
  inode.uploaded_etag = result->etag;
  DropPendingMetadataLocked(inode);  // the upload carried it
  DropHeldRecordLocked(inode);
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
  if (!inode.staged || inode.unlinked) {
    inode.dirty = true;
    return Status::Ok();
  }
  const std::optional<StagedFile::State> state = inode.staged->state();
  if (state == StagedFile::State::kWriting) {
    inode.dirty = true;
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
  if (inode.pending_metadata && inode.pending_metadata->record != nullptr) {
    // ... but its own record stays until this data is accepted: a crash before that sets the
    // data aside, and the change, acknowledged already, still applies to the stored object.
    DropHeldRecordLocked(inode);
    inode.held_record = std::move(inode.pending_metadata->record);
    inode.held_etag = inode.pending_metadata->object.etag;
    inode.held_metadata = inode.pending_metadata->metadata;
  }
  DropPendingMetadataLocked(inode);
  inode.dirty = true;
  return Status::Ok();
}

Status Filesystem::FlushInode(uint64_t ino, const std::shared_ptr<Inode>& inode, bool with_metadata,
                              bool accept) {
  std::lock_guard<std::mutex> lock(inode->mu);
  if (inode->unlinked) return Status::Ok();
  const bool upload = inode->dirty && inode->staged;
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
    inode->unlinked = false;
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
  if (recorded.ok()) DropHeldRecordLocked(inode);  // this record carries the change
  if (recorded.ok() && inode.accepted_copy) {      // superseded by this version
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
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    was_empty = writeback_due_.empty();
    writeback_due_.try_emplace(ino, due);  // an earlier close's schedule stands
  }
  // Otherwise the thread already waits for an earlier due time than this one.
  if (was_empty) writeback_cv_.notify_one();
  return Status::Ok();
}

void Filesystem::RetryUploadLater(uint64_t ino, const Status& failure) {
  Bump(metrics_->writeback_failures);
  const double retry = std::max(options_.writeback, kWritebackRetrySeconds);
  char when[64];
  std::snprintf(when, sizeof(when), "; kept in cache_dir, retrying in %.0f s", retry);
  Log(failure.ToString() + when);
  bool was_empty;
  {
    std::lock_guard<std::mutex> queue(writeback_mu_);
    was_empty = writeback_due_.empty();
    writeback_due_[ino] =
        clock_->now() + std::chrono::nanoseconds(static_cast<int64_t>(retry * 1e9));
  }
  if (was_empty) writeback_cv_.notify_one();
}

uint64_t Filesystem::MakeRoomInStaging(const Inode* busy, uint64_t needed) {
  std::vector<uint64_t> pending;
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    for (const auto& [ino, due] : writeback_due_) pending.push_back(ino);
  }
  needed = std::max<uint64_t>(needed, 1);
  uint64_t freed = 0;
  size_t uploaded = 0;
  for (uint64_t ino : pending) {
    if (freed >= needed) break;
    std::shared_ptr<Inode> inode = inodes_.Get(ino);
    if (inode == nullptr || inode.get() == busy) continue;
    // Never waits for another inode's lock while holding `busy`'s.
    std::unique_lock<std::mutex> lock(inode->mu, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    if (!inode->dirty || inode->unlinked || !inode->staged || inode->open_handles.load() > 0) {
      continue;
    }
    auto key = KeyOf(ino);
    if (!key.ok()) continue;
    const uint64_t size = inode->staged->size();
    Status s = UploadLocked(*inode, *key);
    if (!s.ok()) {
      RetryUploadLater(ino, s);
      continue;
    }
    ++uploaded;
    freed += std::max<uint64_t>(size, 1);
  }
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
      (handle->inode->open_writers.load() > 0 || UploadQueued(handle->ino))) {
    return Status::Ok();
  }
  if (writeback()) {
    Inode& inode = *handle->inode;
    std::lock_guard<std::mutex> lock(inode.mu);
    if (!inode.dirty || inode.unlinked || !inode.staged) return Status::Ok();
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
    if (inode.unlinked) {
      if (remaining == 0) DropStagingLocked(inode);
    } else if (!writer && (writers > 0 || UploadQueued(handle->ino))) {
      // A reader's release: the writer's close or the queued upload decides (see Flush). A
      // clean copy kept only for open handles goes with the last of them.
      if (remaining == 0 && !inode.dirty) DropStagingLocked(inode);
    } else if (inode.dirty && inode.staged) {
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
  std::vector<std::future<Status>> uploads;
  for (const auto& [ino, inode] : inodes_.WithLocalData("")) {
    uploads.push_back(
        upload_pool_->Async([this, ino = ino, inode = inode] { return FlushInode(ino, inode); }));
  }
  Status first;
  for (auto& upload : uploads) {
    Status s = upload.get();
    if (!s.ok() && first.ok()) first = s;
  }
  // Files taken over from an earlier mount that this uploaded (or that were removed or
  // uploaded meanwhile) are done: the log says so when they were the last.
  std::vector<uint64_t> recovering;
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    recovering.assign(recovering_.begin(), recovering_.end());
  }
  for (uint64_t ino : recovering) {
    bool done = true;
    if (std::shared_ptr<Inode> inode = inodes_.Find(ino)) {
      std::lock_guard<std::mutex> lock(inode->mu);
      done = inode->unlinked || !inode->dirty || !inode->staged;
    }
    if (done) RecoveryDone(ino);
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
  std::vector<uint64_t> due;
  const std::chrono::nanoseconds now = clock_->now();
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    for (auto it = writeback_due_.begin(); it != writeback_due_.end();) {
      if (it->second <= now) {
        due.push_back(it->first);
        it = writeback_due_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::vector<std::future<Status>> uploads;
  uploads.reserve(due.size());
  for (uint64_t ino : due) {
    uploads.push_back(upload_pool_->Async([this, ino]() -> Status {
      Status status = UploadDueFile(ino);
      if (status.ok()) RecoveryDone(ino);
      return status;
    }));
  }
  Status first;
  for (auto& upload : uploads) {
    Status s = upload.get();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Filesystem::UploadDueFile(uint64_t ino) {
  std::shared_ptr<Inode> inode = inodes_.Get(ino);
  if (inode == nullptr) return Status::Ok();
  Status status;
  {
    std::lock_guard<std::mutex> lock(inode->mu);
    if (inode->unlinked) return Status::Ok();
    if (inode->dirty && inode->staged) {
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

void Filesystem::RecoveryDone(uint64_t ino) {
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    if (recovering_.erase(ino) == 0) return;
  }
  LogRecovered();
}

void Filesystem::LogRecovered() {
  size_t files = 0;
  uint64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    // The write-back thread may upload the first files taken over before the last is: the line
    // waits for all of them.
    if (recovery_adopting_ || !recovering_.empty() || recovered_files_ == 0 || recovery_logged_) {
      return;
    }
    recovery_logged_ = true;
    files = recovered_files_;
    bytes = recovered_bytes_;
  }
  Log("recovered " + std::to_string(files) + " files (" + std::to_string(bytes) +
      " bytes) left by an earlier mount");
}

bool Filesystem::UploadQueued(uint64_t ino) {
  std::lock_guard<std::mutex> lock(writeback_mu_);
  return writeback_due_.count(ino) > 0;
}

size_t Filesystem::recovering_files() {
  std::lock_guard<std::mutex> lock(writeback_mu_);
  return recovering_.size();
}

size_t Filesystem::pending_uploads() {
  std::lock_guard<std::mutex> lock(writeback_mu_);
  return writeback_due_.size();
}

void Filesystem::WritebackLoop() {
  std::unique_lock<std::mutex> lock(writeback_mu_);
  while (!writeback_stop_) {
    std::chrono::nanoseconds wait = std::chrono::seconds(1);
    if (!writeback_due_.empty()) {
      const std::chrono::nanoseconds now = clock_->now();
      for (const auto& [ino, due] : writeback_due_) wait = std::min(wait, due - now);
    }
    if (wait > std::chrono::nanoseconds::zero()) {
      writeback_cv_.wait_for(lock, wait);
      continue;
    }
    lock.unlock();
    (void)UploadDue();  // failures are logged and rescheduled there
    lock.lock();
  }
}

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
    inode->dirty = true;
    // Whether the store has an older object there is not known: a rename before the upload
    // removes the old name, which costs nothing when there is none.
    inode->in_store = true;
    inode->has_local_data.store(true);
  }
  meta_cache_.Invalidate(left.key);
  std::lock_guard<std::mutex> lock(writeback_mu_);
  writeback_due_[ino] = clock_->now();  // due at once, window or not
  recovering_.insert(ino);
  ++recovered_files_;
  recovered_bytes_ += size;
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
  // last metadata_delay seconds), and until then nothing would show them. Each applies only to
  // the object it was made to: one removed or replaced since stands as it is; the uploads of
  // the files taken over below carry their own metadata.
  std::vector<std::string> dropped;
  OBJFS_ASSIGN_OR_RETURN(auto changes, staging_->AttrsLeftovers(&dropped));
  for (const std::string& path : dropped) {
    Log("a metadata change held by an earlier mount is lost: its record " + path + " is damaged");
  }
  for (const AttrsLeftover& left : changes) {
    Result<ObjectInfo> now = store_->head(left.key);
    if (!now.ok() && now.status().code() != StatusCode::kNotFound) {
      if (first.ok())
        first = now.status().WithContext("recovering a metadata change of " + left.key);
      continue;
    }
    // A self-copy (another client's chmod) keeps a single-part ETag, so the ETag alone cannot
    // tell that the object changed after this record was written: its Last-Modified can. The
    // slack allows for this machine's clock running behind the server's.
    if (now.ok() && left.changed_ns > 0 &&
        now->mtime_ns > left.changed_ns + kHeldChangeClockSlackNs) {
      Log("dropping a metadata change of " + left.key +
          " held by an earlier mount: the object was changed after it");
      ::unlink(left.path.c_str());
      continue;
    }
    if (now.ok() && (left.etag.empty() || now->etag == left.etag)) {
      SetAttributesOptions set;
      set.expected = *now;
      Result<ObjectInfo> copied = store_->set_attributes(left.key, left.metadata, set);
      if (!copied.ok() && IsPermanentRefusal(copied.status())) {
        Log("dropping a metadata change of " + left.key + " (" +
            ChangedNames(now->metadata, left.metadata) +
            ") held by an earlier mount: the server refuses it for good (" +
            copied.status().ToString() + ")");
      } else if (!copied.ok() && copied.status().code() != StatusCode::kPreconditionFailed &&
                 copied.status().code() != StatusCode::kNotFound) {
        if (first.ok()) first = copied.status().WithContext("recovering a metadata change");
        continue;
      }
      meta_cache_.Invalidate(left.key);
    }
    ::unlink(left.path.c_str());
  }
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
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    recovery_adopting_ = true;
  }
  for (const auto& [key, index] : adopt) {
    if (AdoptLeftover(leftovers[index])) ++adopted;
  }
  if (adopted > 0) {
    uint64_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(writeback_mu_);
      bytes = recovered_bytes_;
    }
    Log("uploading " + std::to_string(adopted) + " files (" + std::to_string(bytes) +
        " bytes) left by an earlier mount in the background");
    if (options_.writeback_thread && !writeback_thread_.joinable()) {
      writeback_thread_ = std::thread([this] { WritebackLoop(); });
    }
    writeback_cv_.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(writeback_mu_);
    recovery_adopting_ = false;
  }
  LogRecovered();  // all of them may be uploaded already
  return first;
}

}  // namespace objfs
