// An ObjectStore wrapper that confines a store to the keys under one prefix.
//
// `s3://bucket/some/dir` mounts the keys under "some/dir/": every key is mapped to
// prefix + key on the way down, and the prefix is stripped from keys and common prefixes on the
// way up, so the layers above see the prefix as the root of the bucket.
#pragma once

#include <string>

#include "backend/object_store.h"

namespace objfs {

class PrefixStore : public ForwardingStore {
 public:
  // `prefix` is used as given: normally it ends with '/' ("some/dir/"); empty maps nothing.
  PrefixStore(std::shared_ptr<ObjectStore> target, std::string prefix)
      : ForwardingStore(std::move(target)), prefix_(std::move(prefix)) {}

  const std::string& prefix() const { return prefix_; }

  Result<ObjectInfo> head(std::string_view key) override;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;
  Result<Listing> list(const ListOptions& options) override;
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override;
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override;
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override;
  Status remove_many(const std::vector<std::string>& keys) override;
  Status rename(std::string_view from, std::string_view to) override;
  Result<ObjectInfo> symlink(std::string_view key, std::string_view target,
                             const PutOptions& options) override;
  Result<std::string> read_link(std::string_view key) override;
  Result<OptionalMd5> server_md5(std::string_view key, uint64_t size) override;
  // The session's key, its bases' keys and its result are mapped as for put() and copy().
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;
  // The target's, with max_key_bytes less the prefix.
  Capabilities capabilities() const override;
  std::string describe() const override;

 private:
  // prefix_ + key; InvalidArgument for an empty key, which would otherwise name the prefix.
  Result<std::string> Map(std::string_view key) const;
  // The key without prefix_; Internal when the target returned a key outside the prefix.
  Result<std::string> Unmap(std::string_view full_key) const;
  Result<ObjectInfo> UnmapInfo(Result<ObjectInfo> result) const;

  class PrefixUpload;

  std::string prefix_;
};

}  // namespace objfs
