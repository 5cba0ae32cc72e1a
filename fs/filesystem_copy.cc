// Filesystem: copy_file_range, as one server-side copy for the whole-file case cp makes.
#include <fcntl.h>

#include <algorithm>
#include <vector>

#include "fs/filesystem.h"
#include "fs/object_metadata.h"

namespace objfs {

Result<uint64_t> Filesystem::CopyFileRange(uint64_t fh_in, uint64_t off_in, uint64_t fh_out,
                                           uint64_t off_out, uint64_t len, int flags) {
  if (flags != 0) return InvalidArgumentError("copy_file_range flags must be 0");
  OBJFS_RETURN_IF_ERROR(CheckWritable());
  std::shared_ptr<Handle> in = FindHandle(fh_in);
  std::shared_ptr<Handle> out = FindHandle(fh_out);
  if (in == nullptr || out == nullptr) return InvalidArgumentError("unknown file handle");
  if ((out->flags & O_ACCMODE) == O_RDONLY) {
    return InvalidArgumentError("destination not open for writing");
  }
  if (len == 0) return uint64_t{0};

  // The kernel's follow-up calls for the rest of a range already copied on the server, while
  // the file is still that copy (a write or truncate since stages it).
  {
    MutexLock inode_lock(&out->inode->mu);
    MutexLock lock(&out->mu);
    if (out->copied_from_fh == fh_in && off_in == off_out && off_in == out->copied_reported &&
        off_in <= out->copied_size && !out->inode->staged &&
        out->inode->uploaded_etag == out->copied_etag) {
      uint64_t n = std::min({len, out->copied_size - off_in, options_.max_copy_call});
      out->copied_reported += n;
      Bump(metrics_->cache_hits);
      return n;
    }
  }

  if (off_in == 0 && off_out == 0 && in->ino != out->ino) {
    // The source must be clean: upload its unsaved data first (a metadata change it waits
    // with is no matter: the copy gets the destination's). An unfinished source is never
    // uploaded: its bytes, as its readers see them, are copied through this machine below.
    if (!FileWriter::IsUnfinished(*in->inode)) {
      OBJFS_RETURN_IF_ERROR(writer_->Flush(in->ino, in->inode, /*with_metadata=*/false));
    }
    OBJFS_ASSIGN_OR_RETURN(std::string src_key, KeyOf(in->ino));
    OBJFS_ASSIGN_OR_RETURN(std::string dst_key, KeyOf(out->ino));
    OBJFS_ASSIGN_OR_RETURN(MetaRecord src, Resolve(src_key));
    if (src.is_dir) return Status(StatusCode::kIsDirectory, src_key + " is a directory");
    bool src_clean;
    {
      MutexLock lock(&in->inode->mu);
      // A source removed while open is no object either: its old name may hold another file's
      // by now. Its handle reads its own bytes below.
      src_clean = !in->inode->unsaved() && !in->inode->removed();
    }
    Inode& dst = *out->inode;
    MutexLock dst_lock(&dst.mu);
    // From the start: what comes before the copy may ask the server too.
    ServerWorkScope looking(dst);
    uint64_t dst_size;
    FileAttr dst_attr;
    Metadata dst_extra;
    // The encryption of an existing destination (cp onto a file), which it keeps, as a rewrite
    // does; unset: the copy gets the source's.
    std::optional<AtRestEncryption> dst_encryption;
    bool dst_exists = true;
    if (dst.staged || dst.pending_metadata) {
      dst_size = dst.staged ? dst.staged->size() : dst.pending_metadata->object.size;
      dst_attr = dst.attr;
      dst_extra = dst.extra_metadata;
      if (!dst.staged) {
        dst_encryption = dst.pending_metadata->object.encryption;
      } else {
        dst_exists = dst.in_store;
        if (dst.in_store) dst_encryption = dst.stored_encryption;
      }
    } else {
      OBJFS_ASSIGN_OR_RETURN(MetaRecord rec, Resolve(dst_key));
      dst_size = rec.size;
      dst_attr = AttrFromRecord(out->ino, rec);
      dst_extra = WithoutPosixMetadata(rec.metadata);
      dst_encryption = rec.encryption;
    }
    // (A destination removed while open is no object to copy to: its name may be another
    // file's by now, or nobody's.)
    // Only a copy of all of the source: the server copies whole objects. A call cut at the
    // kernel's longest (options_.max_copy_call), from a larger source, is the start of one;
    // its follow-ups are answered above.
    const bool whole = len >= src.size || len >= options_.max_copy_call;
    if (src_clean && whole && dst_size == 0 && src.size > 0 && !dst.removed()) {
      Metadata metadata = dst_extra;
      metadata.erase(kCtimeMetadata);  // new data: the ctime is the new mtime
      int64_t now = NowNs();
      SetPosixMetadata(dst_attr.mode, dst_attr.uid, dst_attr.gid, now, &metadata);
      ObjectInfo info;
      info.key = src_key;
      info.size = src.size;
      info.etag = src.etag;
      info.encryption = src.encryption;
      CopyOptions copy;
      // The copy describes its bytes with the source's headers kept as metadata (Content-Type,
      // Content-Encoding and the rest), as a server-side copy with other tools does: they are
      // the source's bytes now, even in a file cp'd onto.
      metadata = WithHeaderMetadataOf(std::move(metadata), src.metadata);
      copy.replace_metadata = metadata;
      copy.keep_encryption = dst_encryption;
      copy.replaces_destination = dst_exists;
      // Stat and listings answer without waiting for the server meanwhile.
      ServerWorkScope copying(dst, dst_attr);
      auto copied = store_->copy(info, dst_key, copy);
      if (!copied.ok()) return copied.status().WithContext("copying " + src_key);
      if (copied->etag == src.etag && src.etag.is_plain_md5()) Bump(metrics_->etags_reused);
      // The destination now is the copy: nothing of the (empty) staged file is to be uploaded.
      writer_->DropStaging(dst);
      writer_->ForgetHeldMetadata(dst);  // the copy carries it
      dst.uploaded_etag = copied->etag;
      // The kernel dropped its pages of the copied range, and the file was empty before.
      dst.page_version = copied->etag;
      dst.page_version_settled = true;
      ObjectInfo dst_info = *copied;
      dst_info.key = dst_key;
      dst_info.size = src.size;
      dst_info.metadata = metadata;
      dst_info.has_metadata = true;
      MetaRecord rec = RecordFromInfo(dst_info, false);
      rec.complete = true;
      rec.own_write = true;
      meta_cache_.Put(dst_key, rec);
      // All the file's open handles read the copy from now on, as after a write through this
      // one: what they learnt at open (and prefetched) is of the version it replaced. Under
      // the inode's lock, so that no retag slips in between.
      // (A kernel without the cap passes more: a reply counts at most 32 bits.)
      const uint64_t n = std::min({len, src.size, options_.max_copy_call});
      for (const std::shared_ptr<Handle>& handle : HandlesOf(out->ino)) {
        MutexLock handle_lock(&handle->mu);
        handle->read_key = dst_key;
        handle->read_info = dst_info;
        handle->retags_seen = dst.retag_serial.load();
        handle->prefetcher.reset();
        handle->copied_from_fh = 0;
        if (handle == out) {
          handle->copied_from_fh = fh_in;
          handle->copied_size = src.size;
          handle->copied_reported = n;
          handle->copied_etag = copied->etag;
        }
      }
      return n;
    }
  }

  // Anything else is copied here, in read_buffer-sized pieces. A failure after some pieces
  // were copied gives their count, as write(2) does (a full cache disk: ENOSPC at the next
  // call).
  std::vector<std::byte> buf(std::max<size_t>(options_.prefetch.read_buffer, 4096));
  uint64_t done = 0;
  while (done < len) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), len - done));
    Result<size_t> n = Read(fh_in, off_in + done, std::span<std::byte>(buf.data(), want));
    if (!n.ok()) return done > 0 ? Result<uint64_t>(done) : Result<uint64_t>(n.status());
    if (*n == 0) break;
    // A failure after some pieces is a short count, not a failed write: nothing is missed.
    Result<size_t> written =
        Write(fh_out, off_out + done, std::span<const std::byte>(buf.data(), *n), done == 0);
    if (!written.ok()) {
      return done > 0 ? Result<uint64_t>(done) : Result<uint64_t>(written.status());
    }
    done += *written;
    if (*n < want) break;
  }
  return done;
}

Status Filesystem::TrimUnaskedCopy(Handle& handle) {
  Inode& inode = *handle.inode;
  MutexLock inode_lock(&inode.mu);
  uint64_t asked;
  {
    MutexLock lock(&handle.mu);
    if (handle.copied_from_fh == 0 || handle.copied_reported >= handle.copied_size) {
      return Status::Ok();
    }
    // Removed: its name may be another file's by now. Written, truncated or replaced since:
    // the file is no longer the copy, and what it holds is what that made of it (unless it is
    // this cut, begun and failed, that staged it).
    if (inode.removed() ||
        (!handle.trim_started && (inode.staged || inode.uploaded_etag != handle.copied_etag))) {
      handle.copied_from_fh = 0;
      return Status::Ok();
    }
    handle.trim_started = true;
    asked = handle.copied_reported;
  }
  OBJFS_ASSIGN_OR_RETURN(std::string key, KeyOf(handle.ino));
  Status trimmed = TruncateLocked(inode, key, asked, /*new_mtime=*/false);
  if (!trimmed.ok()) {  // the next close tries again
    return trimmed.WithContext("cutting a copy to the " + std::to_string(asked) + " bytes asked");
  }
  MutexLock lock(&handle.mu);
  handle.copied_from_fh = 0;
  return Status::Ok();
}

}  // namespace objfs
