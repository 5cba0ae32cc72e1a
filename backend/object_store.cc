#include "backend/object_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace objfs {

Result<size_t> MemorySource::read_at(uint64_t offset, std::span<std::byte> buf) const {
  if (offset >= data_.size()) return size_t{0};
  size_t n = std::min<uint64_t>(buf.size(), data_.size() - offset);
  std::memcpy(buf.data(), data_.data() + offset, n);
  return n;
}

Result<size_t> FileSource::read_at(uint64_t offset, std::span<std::byte> buf) const {
  size_t done = 0;
  while (done < buf.size() && offset + done < size_) {
    size_t want = std::min<uint64_t>(buf.size() - done, size_ - offset - done);
    ssize_t n = ::pread(fd_, buf.data() + done, want, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(std::string("reading staged data: ") + std::strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Status ObjectStore::rename(std::string_view from, std::string_view /*to*/) {
  return UnsupportedError("cannot rename " + std::string(from) + " on " + describe() +
                          ": the store has no rename");
}

Status ObjectStore::remove_if_match(std::string_view key, const ETag& etag,
                                    bool /*known_current*/) {
  OBJFS_ASSIGN_OR_RETURN(bool there, HoldsVersion(key, etag));
  return there ? remove(key) : Status::Ok();
}

Result<bool> ObjectStore::HoldsVersion(std::string_view key, const ETag& etag) {
  Result<ObjectInfo> current = head(key);
  if (!current.ok()) {
    if (current.status().code() == StatusCode::kNotFound) return false;
    return current.status();
  }
  if (current->etag != etag) {
    return PreconditionFailedError("remove " + std::string(key) + ": another version is there (" +
                                   current->etag.value() + ", expected " + etag.value() + ")");
  }
  return true;
}

Result<ObjectInfo> ObjectStore::symlink(std::string_view key, std::string_view target,
                                        const PutOptions& options) {
  return put(key, MemorySource(target), options);
}

Result<std::string> ObjectStore::read_link(std::string_view key) {
  // The size asked now, not the one a cache kept: the object may have been replaced since by
  // one of gigabytes, which must not be fetched into memory.
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, head(key));
  if (info.size > kMaxLinkTarget) return LinkTargetTooLong(key, info.size);
  return ReadAllOf(*this, key, info);
}

Status LinkTargetTooLong(std::string_view key, uint64_t size) {
  return Status(StatusCode::kNameTooLong, "the symbolic link " + std::string(key) +
                                              " holds a target of " + std::to_string(size) +
                                              " bytes, longer than a path may be (" +
                                              std::to_string(kMaxLinkTarget) + ")");
}

Result<StoreSpace> ObjectStore::space() {
  return UnsupportedError(describe() + " has no capacity to report");
}

Result<OptionalMd5> ObjectStore::server_md5(std::string_view /*key*/, uint64_t /*size*/) {
  return OptionalMd5();
}

Status Upload::copy_whole(const ObjectInfo& base) {
  return UnsupportedError("copy " + base.key + " into " + key() + ": no whole-object copy");
}

Result<std::unique_ptr<Upload>> ObjectStore::start_upload(std::string_view key,
                                                          const UploadOptions& /*options*/) {
  return UnsupportedError("cannot upload " + std::string(key) + " in pieces to " + describe());
}

Result<std::string> ReadAll(ObjectStore& store, std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, store.head(key));
  return ReadAllOf(store, key, info);
}

Result<std::string> ReadAllOf(ObjectStore& store, std::string_view key, const ObjectInfo& info) {
  std::string out(info.size, '\0');
  size_t done = 0;
  while (done < out.size()) {
    std::span<std::byte> buf(reinterpret_cast<std::byte*>(out.data()) + done, out.size() - done);
    OBJFS_ASSIGN_OR_RETURN(size_t n, store.read(key, done, buf, &info.etag));
    if (n == 0) break;
    done += n;
  }
  out.resize(done);
  return out;
}

Status CheckPutConditions(ObjectStore& store, std::string_view key, const PutOptions& options,
                          const std::string& what) {
  if (!options.if_match && !options.if_none_match) return Status::Ok();
  Result<ObjectInfo> current = store.head(key);
  if (!current.ok() && current.status().code() != StatusCode::kNotFound) return current.status();
  if (options.if_none_match && current.ok()) {
    return PreconditionFailedError(what + ": object exists");
  }
  if (options.if_match && (!current.ok() || current->etag != *options.if_match)) {
    return PreconditionFailedError(what + ": object changed");
  }
  return Status::Ok();
}

}  // namespace objfs
