// An ObjectStore wrapper that counts requests and bytes into a mount's Metrics.
//
// It sits directly above the backend, so every call the filesystem and caches make is counted
// once, whichever backend serves it; `getfattr -n user.objfs.stats` reports the totals. With
// `log_calls`, each call is also a debug line (backend/log.h): for SFTP, whose calls are its
// requests (S3 logs its HTTP requests itself, with their request ids).
#pragma once

#include "backend/metrics.h"
#include "backend/object_store.h"

namespace objfs {

class MetricsStore : public ForwardingStore {
 public:
  // `metrics` must outlive this store.
  MetricsStore(std::shared_ptr<ObjectStore> target, Metrics& metrics, bool log_calls = false)
      : ForwardingStore(std::move(target)), metrics_(metrics), log_calls_(log_calls) {}

  Result<ObjectInfo> head(std::string_view key) override;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;
  Result<Listing> list(const ListOptions& options) override;
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override;
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override;
  // Counted on its own; a self-copy (S3) is also counted as a server copy.
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override;
  Status remove_many(const std::vector<std::string>& keys) override;
  Status rename(std::string_view from, std::string_view to) override;
  Result<ObjectInfo> symlink(std::string_view key, std::string_view target,
                             const PutOptions& options) override;
  Result<std::string> read_link(std::string_view key) override;
  // Its start, complete() and abort() count as upload_requests; write() as a put, copy() as a
  // copy, with their bytes.
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;

 private:
  class Call;
  // Counts a failure when `status` is not ok.
  void CountOutcome(const Status& status);

  Metrics& metrics_;
  const bool log_calls_;
};

}  // namespace objfs
