#include "backend/metrics_store.h"

namespace objfs {

void MetricsStore::CountOutcome(const Status& status) {
  // "No such key" is an answer (every lookup of a new name gets it), not a failed request.
  if (!status.ok() && status.code() != StatusCode::kNotFound) Bump(metrics_.failed_requests);
}

Result<ObjectInfo> MetricsStore::head(std::string_view key) {
  Bump(metrics_.head_requests);
  Result<ObjectInfo> result = ForwardingStore::head(key);
  CountOutcome(result.status());
  return result;
}

Result<size_t> MetricsStore::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                                  const ETag* if_match) {
  Bump(metrics_.read_requests);
  Result<size_t> result = ForwardingStore::read(key, offset, buf, if_match);
  CountOutcome(result.status());
  if (result.ok()) Bump(metrics_.bytes_read, *result);
  return result;
}

Result<Listing> MetricsStore::list(const ListOptions& options) {
  Bump(metrics_.list_requests);
  Result<Listing> result = ForwardingStore::list(options);
  CountOutcome(result.status());
  return result;
}

Result<ObjectInfo> MetricsStore::put(std::string_view key, const ByteSource& source,
                                     const PutOptions& options) {
  Bump(metrics_.put_requests);
  Result<ObjectInfo> result = ForwardingStore::put(key, source, options);
  CountOutcome(result.status());
  if (result.ok()) Bump(metrics_.bytes_written, source.size());
  return result;
}

Result<ObjectInfo> MetricsStore::copy(const ObjectInfo& src, std::string_view dst,
                                      const CopyOptions& options) {
  Bump(metrics_.copy_requests);
  Result<ObjectInfo> result = ForwardingStore::copy(src, dst, options);
  CountOutcome(result.status());
  if (result.ok() && capabilities().server_side_copy) {
    Bump(metrics_.server_copies);
    Bump(metrics_.bytes_copied_on_server, result->size);
  }
  return result;
}

Result<ObjectInfo> MetricsStore::set_attributes(std::string_view key, const Metadata& metadata,
                                                const SetAttributesOptions& options) {
  Bump(metrics_.set_attributes_requests);
  Result<ObjectInfo> result = ForwardingStore::set_attributes(key, metadata, options);
  CountOutcome(result.status());
  const Capabilities caps = capabilities();
  // A chmod or touch on SFTP is a SETSTAT, not a copy of the file's bytes.
  if (result.ok() && caps.server_side_copy && caps.attributes_by_copy) {
    Bump(metrics_.server_copies);
    Bump(metrics_.bytes_copied_on_server, result->size);
  }
  return result;
}

Status MetricsStore::remove(std::string_view key) {
  Bump(metrics_.remove_requests);
  Status status = ForwardingStore::remove(key);
  CountOutcome(status);
  return status;
}

// A link is one request, counted with the puts and reads it replaces on object stores.
Result<ObjectInfo> MetricsStore::symlink(std::string_view key, std::string_view target,
                                         const PutOptions& options) {
  Bump(metrics_.put_requests);
  Result<ObjectInfo> result = ForwardingStore::symlink(key, target, options);
  CountOutcome(result.status());
  return result;
}

Result<std::string> MetricsStore::read_link(std::string_view key) {
  Bump(metrics_.read_requests);
  Result<std::string> result = ForwardingStore::read_link(key);
  CountOutcome(result.status());
  return result;
}

Status MetricsStore::rename(std::string_view from, std::string_view to) {
  Bump(metrics_.rename_requests);
  Status status = ForwardingStore::rename(from, to);
  CountOutcome(status);
  return status;
}

Status MetricsStore::remove_many(const std::vector<std::string>& keys) {
  Bump(metrics_.remove_requests);
  Status status = ForwardingStore::remove_many(keys);
  CountOutcome(status);
  return status;
}

}  // namespace objfs
