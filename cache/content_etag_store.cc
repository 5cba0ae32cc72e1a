#include "cache/content_etag_store.h"

#include <chrono>
#include <utility>

#include "backend/md5.h"
#include "backend/object_version.h"

namespace objfs {
namespace {

bool IsMarker(std::string_view key) { return !key.empty() && key.back() == '/'; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The digest of a plain-MD5 ETag (whose value is 32 lowercase hex digits).
Md5Digest DigestOf(const ETag& etag) {
  Md5Digest digest{};
  const std::string& hex = etag.value();
  for (size_t i = 0; i < digest.size(); ++i) {
    digest[i] = static_cast<uint8_t>(HexDigit(hex[2 * i]) * 16 + HexDigit(hex[2 * i + 1]));
  }
  return digest;
}

}  // namespace

ContentEtagStore::ContentEtagStore(std::shared_ptr<ObjectStore> inner, std::shared_ptr<StoreDb> db,
                                   Metrics* metrics, int64_t racy_ns, WallClock wall_clock)
    : ForwardingStore(inner),
      inner_(std::move(inner)),
      db_(std::move(db)),
      metrics_(metrics),
      racy_ns_(racy_ns),
      wall_clock_(wall_clock ? std::move(wall_clock) : WallClock([] {
        return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
      })) {}

std::optional<ContentETagRecord> ContentEtagStore::ValidRecord(std::string_view key, uint64_t size,
                                                               int64_t mtime_ns) {
  MutexLock lock(&records_mu_);
  Result<std::optional<ContentETagRecord>> record = db_->Get<ContentETagRecord>(key);
  if (!record.ok() || !record->has_value()) return std::nullopt;
  const ContentETagRecord& r = **record;
  if (r.size == size && r.mtime_ns == mtime_ns) return r;
  // The object changed since the record was made. A record newer than what the caller saw may
  // describe a write that raced with its look-up: that one stays (it is checked at every use).
  if (r.mtime_ns <= mtime_ns) (void)db_->Remove<ContentETagRecord>(key);
  return std::nullopt;
}

void ContentEtagStore::FillETag(ObjectInfo& info) {
  if (IsMarker(info.key)) return;
  if (std::optional<ContentETagRecord> record = ValidRecord(info.key, info.size, info.mtime_ns)) {
    info.etag = ETag::FromMd5(record->md5);
  }
}

Result<ETag> ContentEtagStore::InnerETag(std::string_view key, const ETag& etag,
                                         std::string_view what) {
  if (!etag.is_plain_md5()) return etag;
  Result<std::optional<ContentETagRecord>> record = db_->Get<ContentETagRecord>(key);
  if (!record.ok() || !record->has_value() || ETag::FromMd5((*record)->md5) != etag) {
    return PreconditionFailedError(std::string(what) + " " + std::string(key) +
                                   ": the object changed (" + etag.value() +
                                   " is not the recorded MD5 of its content)");
  }
  return VersionTag((*record)->size, (*record)->mtime_ns);
}

bool ContentEtagStore::Record(const std::string& key, uint64_t size, int64_t mtime_ns,
                              const ETag& md5) {
  ContentETagRecord record;
  record.path = key;
  record.size = size;
  record.mtime_ns = mtime_ns;
  record.md5 = DigestOf(md5);
  MutexLock lock(&records_mu_);
  return db_->Put(record).ok();
}

void ContentEtagStore::Forget(std::string_view key) {
  MutexLock lock(&records_mu_);
  (void)db_->Remove<ContentETagRecord>(key);
}

Result<ObjectInfo> ContentEtagStore::head(std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, inner_->head(key));
  FillETag(info);
  return info;
}

Result<size_t> ContentEtagStore::read(std::string_view key, uint64_t offset,
                                      std::span<std::byte> buf, const ETag* if_match) {
  if (if_match == nullptr || if_match->empty()) return inner_->read(key, offset, buf, if_match);
  OBJFS_ASSIGN_OR_RETURN(ETag version, InnerETag(key, *if_match, "read"));
  return inner_->read(key, offset, buf, &version);
}

Result<Listing> ContentEtagStore::list(const ListOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(Listing listing, inner_->list(options));
  for (ObjectInfo& object : listing.objects) FillETag(object);
  return listing;
}

Result<ObjectInfo> ContentEtagStore::put(std::string_view key, const ByteSource& source,
                                         const PutOptions& options) {
  ForgetCopies(key);
  PutOptions inner_options = options;
  if (options.if_match) {
    OBJFS_ASSIGN_OR_RETURN(inner_options.if_match, InnerETag(key, *options.if_match, "put"));
  }
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, inner_->put(key, source, inner_options));
  // An MD5 without a record could not be checked as a precondition later: report the version
  // instead (the MD5 is then computed again when asked for).
  if (info.etag.is_plain_md5() && !IsMarker(key) &&
      Record(info.key.empty() ? std::string(key) : info.key, info.size, info.mtime_ns, info.etag)) {
    return info;
  }
  Forget(key);
  info.etag = VersionTag(info.size, info.mtime_ns);
  return info;
}

class ContentEtagStore::Session : public ForwardingUpload {
 public:
  Session(std::unique_ptr<Upload> target, ContentEtagStore* store)
      : ForwardingUpload(std::move(target)), store_(store) {}

  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    ObjectInfo inner = base;
    if (base.etag.is_plain_md5()) {
      OBJFS_ASSIGN_OR_RETURN(inner.etag, store_->InnerETag(base.key, base.etag, "copy"));
    }
    return ForwardingUpload::copy(offset, inner, base_offset, length);
  }
  Status copy_whole(const ObjectInfo& base) override {
    ObjectInfo inner = base;
    if (base.etag.is_plain_md5()) {
      OBJFS_ASSIGN_OR_RETURN(inner.etag, store_->InnerETag(base.key, base.etag, "copy"));
    }
    return ForwardingUpload::copy_whole(inner);
  }

  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    const std::string key = this->key();
    store_->ForgetCopies(key);
    PutOptions inner = options;
    if (options.if_match) {
      Result<ETag> version = store_->InnerETag(key, *options.if_match, "complete");
      if (!version.ok()) {
        (void)abort();
        return version.status();
      }
      inner.if_match = *version;
    }
    OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, ForwardingUpload::complete(size, inner));
    if (info.etag.is_plain_md5() && store_->Record(key, info.size, info.mtime_ns, info.etag)) {
      return info;
    }
    store_->Forget(key);
    info.etag = VersionTag(info.size, info.mtime_ns);
    return info;
  }

 private:
  ContentEtagStore* store_;
};

Result<std::unique_ptr<Upload>> ContentEtagStore::start_upload(std::string_view key,
                                                               const UploadOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload, inner_->start_upload(key, options));
  return std::unique_ptr<Upload>(std::make_unique<Session>(std::move(upload), this));
}

void ContentEtagStore::ShareWithCopies(const std::string& key, const ETag& version,
                                       const ETag& md5) {
  std::vector<Copy> copies;
  {
    MutexLock lock(&copies_mu_);
    auto [begin, end] = copies_.equal_range(key);
    for (auto it = begin; it != end; ++it) {
      if (it->second.version == version) copies.push_back(it->second);
    }
  }
  const int64_t now_ns = wall_clock_();
  for (const Copy& copy : copies) {
    Result<ObjectInfo> other = inner_->head(copy.other);
    if (!other.ok() || VersionTag(other->size, other->mtime_ns) != copy.other_version) continue;
    if (other->mtime_ns > now_ns - racy_ns_) continue;  // as for a file hashed itself
    if (ValidRecord(copy.other, other->size, other->mtime_ns)) continue;
    // On to the copies of that one (the source of two copies is the link between them); a
    // file already recorded ends the walk.
    if (Record(copy.other, other->size, other->mtime_ns, md5)) {
      ShareWithCopies(copy.other, copy.other_version, md5);
    }
  }
}

Result<ObjectInfo> ContentEtagStore::copy(const ObjectInfo& src, std::string_view dst,
                                          const CopyOptions& options) {
  const int64_t started_ns = wall_clock_();
  ObjectInfo inner_src = src;
  std::optional<ETag> md5;  // the MD5 of the source version that the inner store checks
  if (!options.if_match_source) {
    inner_src.etag = ETag();  // nothing is checked: the bytes copied are of no known version
  } else if (src.etag.is_plain_md5()) {
    OBJFS_ASSIGN_OR_RETURN(inner_src.etag, InnerETag(src.key, src.etag, "copy"));
    md5 = src.etag;
  } else if (!src.etag.empty()) {
    // A version: its record, if there is one, knows the content.
    Result<std::optional<ContentETagRecord>> record = db_->Get<ContentETagRecord>(src.key);
    if (record.ok() && record->has_value() &&
        VersionTag((*record)->size, (*record)->mtime_ns) == src.etag) {
      md5 = ETag::FromMd5((*record)->md5);
    }
  }
  if (src.key != dst) ForgetCopies(dst);
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, inner_->copy(inner_src, dst, options));
  // An MD5 from the inner store was computed from the bytes it streamed; else the source's.
  if (!info.etag.is_plain_md5() && md5) info.etag = *md5;
  const std::string key = info.key.empty() ? std::string(dst) : info.key;
  if (info.etag.is_plain_md5() && !IsMarker(key) &&
      Record(key, info.size, info.mtime_ns, info.etag)) {
    return info;
  }
  Forget(key);
  info.etag = VersionTag(info.size, info.mtime_ns);
  // A source whose mtime second had not ended well before the copy could be rewritten in it,
  // by another program, keeping its version: the two would then differ with nothing to show
  // it, so nothing is shared between them.
  if (options.if_match_source && !inner_src.etag.empty() && src.key != key && !IsMarker(key) &&
      src.mtime_ns <= started_ns - racy_ns_) {
    // The bytes of the version the copy checked, which nobody has hashed yet.
    MutexLock lock(&copies_mu_);
    // Only a hint: past the bound, the oldest knowledge goes (those files are hashed again).
    if (copies_.size() >= kMaxCopies) copies_.clear();
    copies_.emplace(key, Copy{info.etag, src.key, inner_src.etag});
    copies_.emplace(src.key, Copy{inner_src.etag, key, info.etag});
  }
  return info;
}

Result<ObjectInfo> ContentEtagStore::set_attributes(std::string_view key, const Metadata& metadata,
                                                    const SetAttributesOptions& options) {
  SetAttributesOptions inner_options = options;
  const ETag& expected = options.expected.etag;
  std::optional<ETag> md5;  // the MD5 of the version the inner store checks
  if (expected.is_plain_md5()) {
    Result<ETag> version = InnerETag(key, expected, "set attributes");
    if (!version.ok()) {
      // No record of that MD5: a file that is gone is NotFound, as from any store.
      Result<ObjectInfo> now = inner_->head(key);
      if (!now.ok() && now.status().code() == StatusCode::kNotFound) return now.status();
      return version.status();
    }
    inner_options.expected.etag = *version;
    md5 = expected;
  } else if (!expected.empty()) {
    Result<std::optional<ContentETagRecord>> record = db_->Get<ContentETagRecord>(key);
    if (record.ok() && record->has_value() &&
        VersionTag((*record)->size, (*record)->mtime_ns) == expected) {
      md5 = ETag::FromMd5((*record)->md5);
    }
  }
  // The copies known of `key` are of its old version: it gets a new one.
  ForgetCopies(key);
  OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, inner_->set_attributes(key, metadata, inner_options));
  if (md5 && !IsMarker(key) && Record(std::string(key), info.size, info.mtime_ns, *md5)) {
    info.etag = *md5;
    return info;
  }
  Forget(key);
  info.etag = VersionTag(info.size, info.mtime_ns);
  return info;
}

Status ContentEtagStore::remove(std::string_view key) {
  Status status = inner_->remove(key);
  // Not removed (a lost connection, a refusal): the record still names the object, and an
  // edit's If-Match by its MD5 still finds it.
  if (status.ok()) ForgetRemoved(key);
  return status;
}

void ContentEtagStore::ForgetRemoved(std::string_view key) {
  Forget(key);
  ForgetCopies(key);
}

Status ContentEtagStore::remove_if_match(std::string_view key, const ETag& etag,
                                         bool known_current) {
  // An MD5 names the version its record was made for, which the inner store checks. Without
  // such a record the key holds another version, or nothing, which is no failure.
  Result<ETag> version = InnerETag(key, etag, "remove");
  Status status =
      version.ok() ? inner_->remove_if_match(key, *version, known_current) : version.status();
  if (!version.ok() && inner_->head(key).status().code() == StatusCode::kNotFound) {
    status = Status::Ok();
  }
  // Removed, or another version found there (whose record this is not): the record goes.
  // Kept where the store removed nothing and found nothing new (a lock it waited for in vain).
  if (status.ok() || (version.ok() && status.code() == StatusCode::kPreconditionFailed)) {
    ForgetRemoved(key);
  }
  return status;
}

void ContentEtagStore::ForgetCopies(std::string_view key) {
  MutexLock lock(&copies_mu_);
  if (copies_.empty()) return;
  copies_.erase(std::string(key));
  for (auto it = copies_.begin(); it != copies_.end();) {
    it = it->second.other == key ? copies_.erase(it) : std::next(it);
  }
}

std::optional<ETag> ContentEtagStore::FromCopies(const std::string& key, const ETag& version) {
  std::vector<Copy> copies;
  {
    MutexLock lock(&copies_mu_);
    auto [begin, end] = copies_.equal_range(key);
    for (auto it = begin; it != end; ++it) {
      if (it->second.version == version) copies.push_back(it->second);
    }
  }
  for (const Copy& copy : copies) {
    Result<std::optional<ContentETagRecord>> record = db_->Get<ContentETagRecord>(copy.other);
    if (record.ok() && record->has_value() &&
        VersionTag((*record)->size, (*record)->mtime_ns) == copy.other_version) {
      // Still the bytes it had when the copy was made, if it still has that version.
      Result<ObjectInfo> other = inner_->head(copy.other);
      if (other.ok() && VersionTag(other->size, other->mtime_ns) == copy.other_version) {
        return ETag::FromMd5((*record)->md5);
      }
    }
  }
  return std::nullopt;
}

Status ContentEtagStore::rename(std::string_view from, std::string_view to) {
  Result<std::optional<ContentETagRecord>> record = db_->Get<ContentETagRecord>(from);
  OBJFS_RETURN_IF_ERROR(inner_->rename(from, to));
  Forget(from);
  Forget(to);
  ForgetCopies(from);
  ForgetCopies(to);
  if (record.ok() && record->has_value()) {
    ContentETagRecord moved = **record;
    moved.path = std::string(to);
    // Checked against the file's size and mtime whenever it is used, like any record.
    MutexLock lock(&records_mu_);
    (void)db_->Put(moved);
  }
  return Status::Ok();
}

Status ContentEtagStore::remove_many(const std::vector<std::string>& keys) {
  Status status = inner_->remove_many(keys);
  for (const std::string& key : keys) {
    Forget(key);
    ForgetCopies(key);
  }
  return status;
}

Result<ETag> ContentEtagStore::ContentEtag(std::string_view key) {
  if (key.empty() || IsMarker(key)) {
    // Appended, not `"'" + std::string(key)`: g++ 12 at -O3 takes that insert at the front for
    // an overlapping copy (-Wrestrict, GCC bug 105329).
    std::string message = "'";
    message.append(key).append("' is a directory, not a file");
    return InvalidArgumentError(std::move(message));
  }
  std::vector<std::byte> buf;
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // Whether the version can be trusted is decided by the time hashing began: a same-second
    // rewrite during a long hash keeps the version, and the bytes read would be a mix.
    const int64_t started_ns = wall_clock_();
    OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, inner_->head(key));
    if (std::optional<ContentETagRecord> record = ValidRecord(key, info.size, info.mtime_ns)) {
      return ETag::FromMd5(record->md5);
    }
    // A copy of a file hashed since: the same bytes, while both keep their versions. (Right
    // after the copy its version is too recent to record; it is looked up each time.)
    const ETag version = VersionTag(info.size, info.mtime_ns);
    if (std::optional<ETag> shared = FromCopies(std::string(key), version)) {
      if (metrics_ != nullptr) Bump(metrics_->etags_reused);
      if (info.mtime_ns <= started_ns - racy_ns_) {
        (void)Record(std::string(key), info.size, info.mtime_ns, *shared);
      }
      return *shared;
    }
    Status status;
    std::optional<Md5Digest> digest;
    // The server's own MD5 where it can make one: no byte of the file comes here. The same
    // version before and after, or it is tried again.
    Result<OptionalMd5> on_server = inner_->server_md5(key, info.size);
    if (on_server.ok() && on_server->has_value()) {
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo after, inner_->head(key));
      if (after.size != info.size || after.mtime_ns != info.mtime_ns || after.etag != info.etag) {
        status = PreconditionFailedError("hashing " + std::string(key) +
                                         " on the server: the object changed");
      } else {
        digest = **on_server;
      }
    } else {
      // Hash the version head() saw: every read checks it, so a replacement meanwhile fails.
      if (buf.empty()) buf.resize(kHashReadBytes);
      const ETag* if_match = info.etag.empty() ? nullptr : &info.etag;
      Md5 md5;
      uint64_t offset = 0;
      while (true) {
        Result<size_t> n = inner_->read(key, offset, buf, if_match);
        if (!n.ok()) {
          status = n.status();
          break;
        }
        if (*n == 0) break;
        md5.Update(std::span<const std::byte>(buf.data(), *n));
        if (metrics_ != nullptr) Bump(metrics_->bytes_hashed, *n);
        offset += *n;
        if (*n < buf.size()) break;
      }
      if (status.ok() && offset != info.size) {
        status = PreconditionFailedError("hashing " + std::string(key) + ": the object changed (" +
                                         std::to_string(offset) + " bytes, expected " +
                                         std::to_string(info.size) + ")");
      }
      if (status.ok() && if_match == nullptr) {
        // No version to read against: the object must be the same after the reads.
        OBJFS_ASSIGN_OR_RETURN(ObjectInfo after, inner_->head(key));
        if (after.size != info.size || after.mtime_ns != info.mtime_ns) {
          status = PreconditionFailedError("hashing " + std::string(key) + ": the object changed");
        }
      }
      if (status.ok()) digest = md5.Final();
    }
    if (!status.ok()) {
      if (status.code() != StatusCode::kPreconditionFailed) return status;
      last = status;
      continue;
    }
    ETag etag = ETag::FromMd5(*digest);
    // Too recent, when the hashing began, to trust its version (see kRacyNs): returned, not
    // recorded.
    if (info.mtime_ns > started_ns - racy_ns_) return etag;
    ContentETagRecord record;
    record.path = std::string(key);
    record.size = info.size;
    record.mtime_ns = info.mtime_ns;
    record.md5 = DigestOf(etag);
    MutexLock lock(&records_mu_);
    // A put of the same version that recorded meanwhile knows best what it wrote.
    Result<std::optional<ContentETagRecord>> existing = db_->Get<ContentETagRecord>(key);
    if (existing.ok() && existing->has_value() && (*existing)->size == info.size &&
        (*existing)->mtime_ns == info.mtime_ns) {
      return ETag::FromMd5((*existing)->md5);
    }
    (void)db_->Put(record);
    lock.Unlock();
    ShareWithCopies(record.path, version, etag);
    return etag;
  }
  return last;
}

}  // namespace objfs
