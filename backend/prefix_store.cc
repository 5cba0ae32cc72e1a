#include "backend/prefix_store.h"

#include <utility>

namespace objfs {

Result<std::string> PrefixStore::Map(std::string_view key) const {
  if (key.empty()) return InvalidArgumentError("empty object key");
  return prefix_ + std::string(key);
}

Result<std::string> PrefixStore::Unmap(std::string_view full_key) const {
  if (!full_key.starts_with(prefix_)) {
    return InternalError("the store returned key \"" + std::string(full_key) +
                         "\" outside prefix \"" + prefix_ + "\"");
  }
  return std::string(full_key.substr(prefix_.size()));
}

Result<ObjectInfo> PrefixStore::UnmapInfo(Result<ObjectInfo> result) const {
  if (!result.ok()) return result;
  OBJFS_ASSIGN_OR_RETURN(result->key, Unmap(result->key));
  return result;
}

Result<ObjectInfo> PrefixStore::head(std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return UnmapInfo(ForwardingStore::head(full));
}

Result<size_t> PrefixStore::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                                 const ETag* if_match) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return ForwardingStore::read(full, offset, buf, if_match);
}

Result<Listing> PrefixStore::list(const ListOptions& options) {
  ListOptions mapped = options;
  mapped.prefix = prefix_ + options.prefix;
  if (!options.start_after.empty()) mapped.start_after = prefix_ + options.start_after;
  OBJFS_ASSIGN_OR_RETURN(Listing listing, ForwardingStore::list(mapped));
  for (ObjectInfo& object : listing.objects) {
    OBJFS_ASSIGN_OR_RETURN(object.key, Unmap(object.key));
  }
  for (std::string& common : listing.common_prefixes) {
    OBJFS_ASSIGN_OR_RETURN(common, Unmap(common));
  }
  return listing;
}

Result<ObjectInfo> PrefixStore::put(std::string_view key, const ByteSource& source,
                                    const PutOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return UnmapInfo(ForwardingStore::put(full, source, options));
}

Result<ObjectInfo> PrefixStore::copy(const ObjectInfo& src, std::string_view dst,
                                     const CopyOptions& options) {
  ObjectInfo mapped_src = src;
  OBJFS_ASSIGN_OR_RETURN(mapped_src.key, Map(src.key));
  OBJFS_ASSIGN_OR_RETURN(std::string full_dst, Map(dst));
  return UnmapInfo(ForwardingStore::copy(mapped_src, full_dst, options));
}

Result<ObjectInfo> PrefixStore::set_attributes(std::string_view key, const Metadata& metadata,
                                               const SetAttributesOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  SetAttributesOptions mapped = options;
  mapped.expected.key = full;
  return UnmapInfo(ForwardingStore::set_attributes(full, metadata, mapped));
}

Status PrefixStore::remove(std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return ForwardingStore::remove(full);
}

Status PrefixStore::remove_if_match(std::string_view key, const ETag& etag, bool known_current) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return ForwardingStore::remove_if_match(full, etag, known_current);
}

Status PrefixStore::remove_many(const std::vector<std::string>& keys) {
  std::vector<std::string> mapped;
  mapped.reserve(keys.size());
  for (const std::string& key : keys) {
    OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
    mapped.push_back(std::move(full));
  }
  return ForwardingStore::remove_many(mapped);
}

Status PrefixStore::rename(std::string_view from, std::string_view to) {
  OBJFS_ASSIGN_OR_RETURN(std::string full_from, Map(from));
  OBJFS_ASSIGN_OR_RETURN(std::string full_to, Map(to));
  return ForwardingStore::rename(full_from, full_to);
}

Result<ObjectInfo> PrefixStore::symlink(std::string_view key, std::string_view target,
                                        const PutOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return UnmapInfo(ForwardingStore::symlink(full, target, options));
}

Result<std::string> PrefixStore::read_link(std::string_view key) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return ForwardingStore::read_link(full);
}

Result<OptionalMd5> PrefixStore::server_md5(std::string_view key, uint64_t size) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  return ForwardingStore::server_md5(full, size);
}

Capabilities PrefixStore::capabilities() const {
  Capabilities c = ForwardingStore::capabilities();
  // The prefix is part of every key the store counts.
  if (c.max_key_bytes != 0) {
    c.max_key_bytes = c.max_key_bytes > prefix_.size() ? c.max_key_bytes - prefix_.size() : 1;
  }
  return c;
}

std::string PrefixStore::describe() const {
  return ForwardingStore::describe() + " under prefix \"" + prefix_ + "\"";
}

class PrefixStore::PrefixUpload : public ForwardingUpload {
 public:
  PrefixUpload(std::unique_ptr<Upload> target, const PrefixStore* store, std::string key)
      : ForwardingUpload(std::move(target)), store_(store), key_(std::move(key)) {}

  const std::string& key() const override { return key_; }
  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    ObjectInfo mapped = base;
    OBJFS_ASSIGN_OR_RETURN(mapped.key, store_->Map(base.key));
    return ForwardingUpload::copy(offset, mapped, base_offset, length);
  }
  Status copy_whole(const ObjectInfo& base) override {
    ObjectInfo mapped = base;
    OBJFS_ASSIGN_OR_RETURN(mapped.key, store_->Map(base.key));
    return ForwardingUpload::copy_whole(mapped);
  }
  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    return store_->UnmapInfo(ForwardingUpload::complete(size, options));
  }

 private:
  const PrefixStore* store_;
  const std::string key_;  // without the prefix
};

Result<std::unique_ptr<Upload>> PrefixStore::start_upload(std::string_view key,
                                                          const UploadOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(std::string full, Map(key));
  OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload,
                         ForwardingStore::start_upload(full, options));
  return std::unique_ptr<Upload>(
      std::make_unique<PrefixUpload>(std::move(upload), this, std::string(key)));
}

}  // namespace objfs
