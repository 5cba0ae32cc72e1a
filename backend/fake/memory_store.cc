#include "backend/fake/memory_store.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "backend/md5.h"
#include "backend/object_version.h"
#include "backend/upload_ranges.h"

namespace objfs {
namespace {

constexpr size_t kMaxKeyBytes = 1024;
constexpr std::string_view kDefaultContentType = "binary/octet-stream";

Status CheckKey(std::string_view key) {
  if (key.empty()) return InvalidArgumentError("empty object key");
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgumentError("object key of " + std::to_string(key.size()) +
                                " bytes is longer than 1024 bytes");
  }
  return Status::Ok();
}

std::string Quote(std::string_view key) { return "\"" + std::string(key) + "\""; }

// S3's refusal of user metadata over `limit` bytes (0: no limit).
Status CheckMetadata(const Metadata& metadata, size_t limit) {
  size_t size = 0;
  for (const auto& [name, value] : metadata) size += name.size() + value.size();
  if (limit == 0 || size <= limit) return Status::Ok();
  return Status(StatusCode::kInvalidArgument,
                "Your metadata headers exceed the maximum allowed metadata size (" +
                    std::to_string(size) + " > " + std::to_string(limit) + " bytes)",
                "MetadataTooLarge");
}

// Continuation tokens name the last entry of the page: "k<key>" for an object, "p<prefix>" for
// a common prefix (whose whole subtree the next page skips).
constexpr char kKeyToken = 'k';
constexpr char kPrefixToken = 'p';

}  // namespace

MemoryStore::MemoryStore(MemoryStoreOptions options) : options_(options) {}

int64_t MemoryStore::NextMtimeLocked() {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  last_mtime_ns_ = std::max(now, last_mtime_ns_ + 1);
  return last_mtime_ns_;
}

ETag MemoryStore::ETagOf(std::string_view data, bool multipart) const {
  if (!multipart || options_.part_size == 0) return ETag::FromMd5(Md5Of(data));
  std::vector<Md5Digest> parts;
  for (size_t offset = 0; offset < data.size(); offset += options_.part_size) {
    parts.push_back(Md5Of(data.substr(offset, options_.part_size)));
  }
  return MultipartETag(parts);
}

ETag MemoryStore::PartsETag(std::string_view data, uint64_t part_size) {
  std::vector<Md5Digest> parts;
  for (size_t offset = 0; offset < data.size(); offset += part_size) {
    parts.push_back(Md5Of(data.substr(offset, part_size)));
  }
  if (parts.empty()) parts.push_back(Md5Of(std::string_view()));  // one empty part
  return MultipartETag(parts);
}

ETag MemoryStore::CurrentETag(const Object& object) const {
  if (options_.native_etags) return object.info.etag;
  return VersionTag(object.info.size, object.info.mtime_ns);
}

Result<ObjectInfo> MemoryStore::head(std::string_view key) {
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFoundError("no object " + Quote(key));
  ObjectInfo info = it->second.info;
  info.etag = CurrentETag(it->second);
  return info;
}

Result<size_t> MemoryStore::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                                 const ETag* if_match) {
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFoundError("no object " + Quote(key));
  const Object& object = it->second;
  if (if_match != nullptr && *if_match != CurrentETag(object)) {
    return PreconditionFailedError("object " + Quote(key) + " has ETag " +
                                   CurrentETag(object).value() + ", not " + if_match->value());
  }
  if (offset >= object.data.size()) return size_t{0};
  size_t n = std::min<uint64_t>(buf.size(), object.data.size() - offset);
  std::copy_n(reinterpret_cast<const std::byte*>(object.data.data()) + offset, n, buf.data());
  return n;
}

Result<Listing> MemoryStore::list(const ListOptions& options) {
  if (options.max_keys < 1) return InvalidArgumentError("max_keys must be at least 1");
  const int max_keys = std::min(options.max_keys, std::max(options_.max_keys_per_page, 1));
  const std::string& prefix = options.prefix;
  const std::string& delimiter = options.delimiter;

  MutexLock lock(&mu_);
  auto it = objects_.lower_bound(prefix);
  // Positions `it` after `last` (and after its subtree when `skip_subtree`), unless the prefix
  // already starts later.
  auto start_after = [&](std::string_view last, bool skip_subtree) REQUIRES(mu_) {
    if (last < std::string_view(prefix)) return;
    it = objects_.upper_bound(last);
    while (skip_subtree && it != objects_.end() && it->first.starts_with(last)) ++it;
  };
  if (!options.continuation_token.empty()) {
    const std::string& token = options.continuation_token;
    std::string_view last = std::string_view(token).substr(1);
    if (token[0] == kKeyToken) {
      start_after(last, false);
    } else if (token[0] == kPrefixToken) {
      start_after(last, true);
    } else {
      return InvalidArgumentError("malformed continuation token");
    }
  } else if (!options.start_after.empty()) {
    start_after(options.start_after, false);
  }

  Listing listing;
  int count = 0;
  std::string last_token;
  while (it != objects_.end() && it->first.starts_with(prefix)) {
    std::string_view rest = std::string_view(it->first).substr(prefix.size());
    size_t pos = delimiter.empty() ? std::string_view::npos : rest.find(delimiter);
    if (count == max_keys) {
      listing.next_token = std::move(last_token);
      break;
    }
    ++count;
    if (pos != std::string_view::npos) {
      std::string common = prefix + std::string(rest.substr(0, pos + delimiter.size()));
      while (it != objects_.end() && it->first.starts_with(common)) ++it;
      last_token = kPrefixToken + common;
      listing.common_prefixes.push_back(std::move(common));
    } else {
      ObjectInfo info = it->second.info;
      info.etag = CurrentETag(it->second);
      info.content_type.clear();
      info.metadata.clear();
      info.has_metadata = false;
      listing.objects.push_back(std::move(info));
      last_token = kKeyToken + it->first;
      ++it;
    }
  }
  return listing;
}

Result<ObjectInfo> MemoryStore::put(std::string_view key, const ByteSource& source,
                                    const PutOptions& options) {
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  std::string data(source.size(), '\0');
  size_t done = 0;
  while (done < data.size()) {
    std::span<std::byte> buf(reinterpret_cast<std::byte*>(data.data()) + done, data.size() - done);
    OBJFS_ASSIGN_OR_RETURN(size_t n, source.read_at(done, buf));
    if (n == 0) {
      return IoError("upload source of " + Quote(key) + " ended at " + std::to_string(done) +
                     " of " + std::to_string(data.size()) + " bytes");
    }
    done += n;
  }
  bool multipart = options_.native_etags && options_.multipart_threshold > 0 &&
                   data.size() > options_.multipart_threshold;
  ObjectInfo info;
  info.key = std::string(key);
  info.size = data.size();
  info.etag = ETagOf(data, multipart);
  info.content_type =
      options.content_type.empty() ? std::string(kDefaultContentType) : options.content_type;
  info.metadata = options.metadata;
  info.has_metadata = true;
  OBJFS_RETURN_IF_ERROR(CheckMetadata(info.metadata, options_.max_metadata));

  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (options.if_none_match && it != objects_.end()) {
    return PreconditionFailedError("object " + Quote(key) + " already exists");
  }
  if (options.if_match.has_value()) {
    if (it == objects_.end()) {
      return PreconditionFailedError("no object " + Quote(key) + " to match ETag " +
                                     options.if_match->value());
    }
    if (CurrentETag(it->second) != *options.if_match) {
      return PreconditionFailedError("object " + Quote(key) + " has ETag " +
                                     CurrentETag(it->second).value() + ", not " +
                                     options.if_match->value());
    }
  }
  info.mtime_ns = NextMtimeLocked();
  Object& object = objects_[std::string(key)];
  object.data = std::move(data);
  object.info = info;
  return info;
}

Result<ObjectInfo> MemoryStore::copy(const ObjectInfo& src, std::string_view dst,
                                     const CopyOptions& options) {
  OBJFS_RETURN_IF_ERROR(CheckKey(src.key));
  OBJFS_RETURN_IF_ERROR(CheckKey(dst));
  if (options.content_type.has_value() && !options.replace_metadata.has_value()) {
    return InvalidArgumentError("a content type can only be set along with replaced metadata");
  }
  if (src.key == dst && !options.replace_metadata.has_value()) {
    return InvalidArgumentError("copying " + Quote(dst) +
                                " onto itself without changing its metadata");
  }
  if (options.replace_metadata.has_value()) {
    OBJFS_RETURN_IF_ERROR(CheckMetadata(*options.replace_metadata, options_.max_metadata));
  }

  MutexLock lock(&mu_);
  auto it = objects_.find(src.key);
  if (it == objects_.end()) return NotFoundError("no copy source " + Quote(src.key));
  const Object& source = it->second;
  bool fail_after_copy = false;
  if (options.if_match_source && !src.etag.empty() && CurrentETag(source) != src.etag) {
    Status changed =
        PreconditionFailedError("copy source " + Quote(src.key) + " has ETag " +
                                CurrentETag(source).value() + ", not " + src.etag.value());
    if (!options_.copy_ignores_source_condition || !options.source_known_current ||
        !src.etag.is_plain_md5()) {
      return changed;
    }
    fail_after_copy = true;
  }
  bool by_parts = options_.native_etags && options_.copy_part_threshold > 0 &&
                  source.data.size() > options_.copy_part_threshold;
  ObjectInfo info;
  info.key = std::string(dst);
  info.size = source.data.size();
  if (options_.native_etags) {
    info.etag = by_parts ? ETagOf(source.data, true) : source.info.etag;
  } else if (src.etag.is_plain_md5()) {
    info.etag = src.etag;  // as SFTP's copy-data: the caller's MD5 of the same bytes
  }
  if (options.replace_metadata.has_value()) {
    info.metadata = *options.replace_metadata;
    info.content_type = options.content_type.value_or(std::string(kDefaultContentType));
  } else {
    info.metadata = source.info.metadata;
    info.content_type = source.info.content_type;
  }
  info.has_metadata = true;
  info.mtime_ns = NextMtimeLocked();
  std::string data = source.data;  // `source` may be the destination itself
  Object& object = objects_[std::string(dst)];
  object.data = std::move(data);
  object.info = info;
  if (fail_after_copy) {
    return PreconditionFailedError("copy source " + Quote(src.key) + " changed (found after " +
                                   "the copy was made)");
  }
  return info;
}

Result<ObjectInfo> MemoryStore::set_attributes(std::string_view key, const Metadata& metadata,
                                               const SetAttributesOptions& options) {
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  OBJFS_RETURN_IF_ERROR(CheckMetadata(metadata, options_.max_metadata));
  const ETag& expected = options.expected.etag;
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFoundError("no object " + Quote(key));
  Object& object = it->second;
  bool fail_after = false;
  if (!expected.empty() && CurrentETag(object) != expected) {
    Status changed =
        PreconditionFailedError("object " + Quote(key) + " has ETag " +
                                CurrentETag(object).value() + ", not " + expected.value());
    // As S3Store on RGW: the self-copy of an object the caller wrote itself is made unchecked.
    if (!options_.copy_ignores_source_condition || !options.source_known_current ||
        !expected.is_plain_md5() || !options_.attributes_by_copy) {
      return changed;
    }
    fail_after = true;
  }
  ObjectInfo& info = object.info;
  const bool by_parts = options_.native_etags && options_.attributes_by_copy &&
                        options_.copy_part_threshold > 0 &&
                        object.data.size() > options_.copy_part_threshold;
  if (by_parts) info.etag = ETagOf(object.data, true);
  info.metadata = metadata;
  if (options.content_type) info.content_type = *options.content_type;
  info.has_metadata = true;
  info.mtime_ns = NextMtimeLocked();
  if (fail_after) {
    return PreconditionFailedError("object " + Quote(key) + " changed (found after its " +
                                   "attributes were set)");
  }
  ObjectInfo result = info;
  result.etag = CurrentETag(object);
  // The version asked for was the one changed (checked above, under the lock), unless the
  // store copies unchecked as RGW does.
  result.same_bytes_as_source = !expected.empty() && !options_.copy_ignores_source_condition;
  return result;
}

Status MemoryStore::remove(std::string_view key) {
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it != objects_.end()) objects_.erase(it);
  return Status::Ok();
}

Status MemoryStore::remove_if_match(std::string_view key, const ETag& etag,
                                    bool /*known_current*/) {
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::Ok();
  if (CurrentETag(it->second) != etag) {
    return PreconditionFailedError("object " + Quote(key) + " has ETag " +
                                   CurrentETag(it->second).value() + ", not " + etag.value());
  }
  objects_.erase(it);
  return Status::Ok();
}

Status MemoryStore::remove_many(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) OBJFS_RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    auto it = objects_.find(key);
    if (it != objects_.end()) objects_.erase(it);
  }
  return Status::Ok();
}

Status MemoryStore::rename(std::string_view from, std::string_view to) {
  if (!options_.native_rename) return ObjectStore::rename(from, to);
  OBJFS_RETURN_IF_ERROR(CheckKey(from));
  OBJFS_RETURN_IF_ERROR(CheckKey(to));
  if (from.ends_with('/') || to.ends_with('/')) {
    return InvalidArgumentError("rename takes keys without a trailing slash");
  }
  const std::string from_dir = std::string(from) + "/";
  const std::string to_dir = std::string(to) + "/";
  MutexLock lock(&mu_);
  auto file = objects_.find(from);
  auto below = [&](const std::string& dir) REQUIRES(mu_) {
    std::vector<std::string> keys;
    for (auto it = objects_.lower_bound(dir); it != objects_.end() && it->first.starts_with(dir);
         ++it) {
      keys.push_back(it->first);
    }
    return keys;
  };
  const std::vector<std::string> tree = below(from_dir);
  if (file == objects_.end() && tree.empty()) return NotFoundError("no object " + Quote(from));
  const std::vector<std::string> target_tree = below(to_dir);
  if (file != objects_.end()) {
    if (!target_tree.empty())
      return Status(StatusCode::kIsDirectory, Quote(to) + " is a directory");
    Object moved = std::move(file->second);
    objects_.erase(file);
    moved.info.key = std::string(to);
    objects_[std::string(to)] = std::move(moved);
    return Status::Ok();
  }
  if (objects_.count(to) > 0) return Status(StatusCode::kNotDirectory, Quote(to) + " is a file");
  for (const std::string& key : target_tree) {
    if (key != to_dir) return NotEmptyError(Quote(to) + " is not empty");
  }
  objects_.erase(to_dir);
  for (const std::string& key : tree) {
    auto node = objects_.extract(key);
    node.key() = to_dir + key.substr(from_dir.size());
    node.mapped().info.key = node.key();
    objects_.insert(std::move(node));
  }
  return Status::Ok();
}

// A session's pieces gather in a buffer that becomes the object at complete(): nothing shows
// under the key before. With native ETags it takes whole parts, as S3 does.
class MemoryStore::MemoryUpload : public Upload {
 public:
  MemoryUpload(MemoryStore* store, std::string key, uint64_t part_size, bool whole_parts)
      : store_(store), key_(std::move(key)), part_size_(part_size), whole_parts_(whole_parts) {
    ++store_->uploads_in_progress_;
  }
  ~MemoryUpload() override { (void)abort(); }

  const std::string& key() const override { return key_; }
  uint64_t part_size() const override { return part_size_; }
  bool whole_parts() const override { return whole_parts_; }
  uint64_t max_size() const override { return whole_parts_ ? part_size_ * kMaxParts : 0; }

  Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
               uint64_t length) override {
    OBJFS_RETURN_IF_ERROR(CheckRange(offset, length));
    std::string bytes(length, '\0');
    uint64_t done = 0;
    while (done < length) {
      std::span<std::byte> buf(reinterpret_cast<std::byte*>(bytes.data()) + done, length - done);
      OBJFS_ASSIGN_OR_RETURN(size_t n, source.read_at(source_offset + done, buf));
      if (n == 0) return IoError("upload source of " + Quote(key_) + " ended early");
      done += n;
    }
    return Place(offset, bytes);
  }

  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    if (!store_->options_.copy_ranges) {
      return UnsupportedError("copy of a range into " + Quote(key_) + ": the store has none");
    }
    OBJFS_RETURN_IF_ERROR(CheckRange(offset, length));
    std::string bytes;
    {
      MutexLock lock(&store_->mu_);
      auto it = store_->objects_.find(base.key);
      if (it == store_->objects_.end()) return NotFoundError("no copy source " + Quote(base.key));
      const ETag current = store_->CurrentETag(it->second);
      if (!base.etag.empty() && current != base.etag) {
        return PreconditionFailedError("copy source " + Quote(base.key) + " has ETag " +
                                       current.value() + ", not " + base.etag.value());
      }
      if (base_offset > it->second.data.size() || length > it->second.data.size() - base_offset) {
        return InvalidArgumentError("copy of bytes past the end of " + Quote(base.key));
      }
      bytes = it->second.data.substr(base_offset, length);
    }
    return Place(offset, bytes);
  }

  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    std::string data;
    {
      MutexLock lock(&mu_);
      if (finished_) return InvalidArgumentError("upload of " + Quote(key_) + " is finished");
      finished_ = true;  // a failed complete() aborts
      --store_->uploads_in_progress_;
      std::string pieces = std::move(data_);
      if (whole_parts_ && size > max_size()) {
        return InvalidArgumentError("complete " + Quote(key_) + ": " + std::to_string(size) +
                                    " bytes do not fit in the upload's parts");
      }
      if (whole_parts_) {
        const uint64_t count = (size + part_size_ - 1) / part_size_;
        for (uint64_t i = 0; i < count; ++i) {
          auto part = parts_.find(i);
          const uint64_t want = std::min(part_size_, size - i * part_size_);
          if (part == parts_.end() || part->second != want) {
            return InvalidArgumentError("complete " + Quote(key_) + ": part " +
                                        std::to_string(i + 1) + " of " + std::to_string(want) +
                                        " bytes was not uploaded");
          }
        }
      } else if (!covered_.Covers(size)) {
        return InvalidArgumentError("complete " + Quote(key_) + ": nothing was written at " +
                                    std::to_string(covered_.FirstGap(size)));
      }
      pieces.resize(size);
      data = std::move(pieces);
    }
    OBJFS_RETURN_IF_ERROR(CheckMetadata(options.metadata, store_->options_.max_metadata));
    ObjectInfo info;
    info.key = key_;
    info.size = size;
    if (store_->options_.native_etags) info.etag = PartsETag(data, part_size_);
    info.content_type =
        options.content_type.empty() ? std::string(kDefaultContentType) : options.content_type;
    info.metadata = options.metadata;
    info.has_metadata = true;
    MutexLock lock(&store_->mu_);
    auto it = store_->objects_.find(key_);
    if (options.if_none_match && it != store_->objects_.end()) {
      return PreconditionFailedError("object " + Quote(key_) + " already exists");
    }
    if (options.if_match.has_value() &&
        (it == store_->objects_.end() || store_->CurrentETag(it->second) != *options.if_match)) {
      return PreconditionFailedError("object " + Quote(key_) + " does not have ETag " +
                                     options.if_match->value());
    }
    info.mtime_ns = store_->NextMtimeLocked();
    Object& object = store_->objects_[key_];
    object.data = std::move(data);
    object.info = info;
    // Without native ETags, the version: this store hashed nothing in order (as SFTP's).
    info.etag = store_->CurrentETag(object);
    return info;
  }

  Status abort() override {
    MutexLock lock(&mu_);
    if (finished_) return Status::Ok();
    finished_ = true;
    --store_->uploads_in_progress_;
    data_.clear();
    return Status::Ok();
  }

 private:
  static constexpr uint64_t kMaxParts = 10000;

  Status CheckRange(uint64_t offset, uint64_t length) const {
    if (length == 0) return InvalidArgumentError("an empty range of " + Quote(key_));
    if (offset > UINT64_MAX - length) {
      return InvalidArgumentError("a range of " + Quote(key_) + " past 2^64");
    }
    if (whole_parts_ &&
        (offset % part_size_ != 0 || length > part_size_ || offset / part_size_ >= kMaxParts)) {
      return InvalidArgumentError("range " + std::to_string(offset) + "+" + std::to_string(length) +
                                  " of " + Quote(key_) + " is not one part of " +
                                  std::to_string(part_size_) + " bytes");
    }
    return Status::Ok();
  }

  Status Place(uint64_t offset, const std::string& bytes) {
    MutexLock lock(&mu_);
    if (finished_) return InvalidArgumentError("upload of " + Quote(key_) + " is finished");
    if (data_.size() < offset + bytes.size()) data_.resize(offset + bytes.size());
    data_.replace(offset, bytes.size(), bytes);
    covered_.Add(offset, offset + bytes.size());
    if (whole_parts_) parts_[offset / part_size_] = bytes.size();
    return Status::Ok();
  }

  MemoryStore* store_;
  const std::string key_;
  const uint64_t part_size_;
  const bool whole_parts_;
  Mutex mu_;  // lock 25 of fs/lock_order.h: never held with the store's (22)
  bool finished_ GUARDED_BY(mu_) = false;
  std::string data_ GUARDED_BY(mu_);
  UploadRanges covered_ GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> parts_ GUARDED_BY(mu_);  // part index -> bytes (whole parts)
};

Result<std::unique_ptr<Upload>> MemoryStore::start_upload(std::string_view key,
                                                          const UploadOptions& options) {
  if (!options_.upload_sessions) return ObjectStore::start_upload(key, options);
  OBJFS_RETURN_IF_ERROR(CheckKey(key));
  const bool whole_parts = options_.native_etags;
  uint64_t part_size = options.part_size != 0 ? options.part_size : options_.part_size;
  if (part_size == 0) part_size = 5 << 20;
  if (whole_parts) {
    part_size = std::max<uint64_t>(part_size, options_.part_size);
    // Enough parts for the hint, as S3 allows them.
    while (options.size_hint > part_size * 10000) part_size *= 2;
  }
  return std::unique_ptr<Upload>(
      std::make_unique<MemoryUpload>(this, std::string(key), part_size, whole_parts));
}

Capabilities MemoryStore::capabilities() const {
  Capabilities caps;
  caps.scheme = "fake";
  caps.server_side_copy = true;
  caps.native_etags = options_.native_etags;
  caps.multipart_threshold = options_.multipart_threshold;
  caps.part_size = options_.part_size;
  caps.copy_part_threshold = options_.copy_part_threshold;
  caps.native_rename = options_.native_rename;
  caps.attributes_by_copy = options_.attributes_by_copy;
  caps.stores_owner = options_.stores_owner;
  caps.upload_sessions = options_.upload_sessions;
  caps.copy_ranges = options_.upload_sessions && options_.copy_ranges;
  caps.max_key_bytes = kMaxKeyBytes;
  caps.special_files = options_.special_files;
  caps.utf8_keys = options_.utf8_keys;
  caps.user_xattrs = options_.user_xattrs;
  caps.max_object_size = options_.max_object_size;
  caps.parts_in_flight = options_.parts_in_flight;
  if (options_.native_etags) {
    caps.min_part_size = options_.part_size;
    caps.max_parts = 10000;
  }
  return caps;
}

std::string MemoryStore::contents(std::string_view key) const {
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? std::string() : it->second.data;
}

size_t MemoryStore::object_count() const {
  MutexLock lock(&mu_);
  return objects_.size();
}

void MemoryStore::set_mtime(std::string_view key, int64_t mtime_ns) {
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it != objects_.end()) it->second.info.mtime_ns = mtime_ns;
}

}  // namespace objfs
