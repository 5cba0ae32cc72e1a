#include "backend/metrics_store.h"

#include <chrono>
#include <cstdio>

#include "backend/log.h"

namespace objfs {

// One backend call: in flight while it lives; at its end, with log_calls at level debug, a line
// "sftp GET key status=ok bytes=N 1.2ms" (the store's scheme first).
class MetricsStore::Call {
 public:
  Call(MetricsStore& store, const char* method, std::string_view key)
      : store_(store), method_(method), key_(key), start_(std::chrono::steady_clock::now()) {
    Bump(store_.metrics_.in_flight_requests);
  }
  ~Call() { store_.metrics_.in_flight_requests.fetch_sub(1, std::memory_order_relaxed); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  void Done(const Status& status, uint64_t bytes = 0) const {
    if (!store_.log_calls_ || !LogDebugEnabled()) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    char latency[32];
    std::snprintf(latency, sizeof latency, "%.1fms", ms);
    std::string line = store_.capabilities().scheme;
    line += ' ';
    line += method_;
    line += ' ';
    line += key_.empty() ? "/" : key_;
    line += " status=";
    line += status.ok() ? "ok" : std::string(StatusCodeName(status.code()));
    line += " bytes=" + std::to_string(bytes) + " " + latency;
    LogDebug(line);
  }

 private:
  MetricsStore& store_;
  const char* method_;
  std::string key_;
  std::chrono::steady_clock::time_point start_;
};

void MetricsStore::CountOutcome(const Status& status) {
  // "No such key" is an answer (every lookup of a new name gets it), not a failed request.
  if (!status.ok() && status.code() != StatusCode::kNotFound) Bump(metrics_.failed_requests);
}

Result<ObjectInfo> MetricsStore::head(std::string_view key) {
  Bump(metrics_.head_requests);
  Call call(*this, "HEAD", key);
  Result<ObjectInfo> result = ForwardingStore::head(key);
  CountOutcome(result.status());
  call.Done(result.status(), 0);
  return result;
}

Result<size_t> MetricsStore::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                                  const ETag* if_match) {
  Bump(metrics_.read_requests);
  Call call(*this, "GET", key);
  Result<size_t> result = ForwardingStore::read(key, offset, buf, if_match);
  CountOutcome(result.status());
  if (result.ok()) Bump(metrics_.bytes_read, *result);
  call.Done(result.status(), result.ok() ? *result : 0);
  return result;
}

Result<Listing> MetricsStore::list(const ListOptions& options) {
  Bump(metrics_.list_requests);
  Call call(*this, "LIST", options.prefix);
  Result<Listing> result = ForwardingStore::list(options);
  CountOutcome(result.status());
  call.Done(result.status(), 0);
  return result;
}

Result<ObjectInfo> MetricsStore::put(std::string_view key, const ByteSource& source,
                                     const PutOptions& options) {
  Bump(metrics_.put_requests);
  Call call(*this, "PUT", key);
  Result<ObjectInfo> result = ForwardingStore::put(key, source, options);
  CountOutcome(result.status());
  if (result.ok()) Bump(metrics_.bytes_written, source.size());
  call.Done(result.status(), result.ok() ? source.size() : 0);
  return result;
}

Result<ObjectInfo> MetricsStore::copy(const ObjectInfo& src, std::string_view dst,
                                      const CopyOptions& options) {
  Bump(metrics_.copy_requests);
  Call call(*this, "COPY", dst);
  Result<ObjectInfo> result = ForwardingStore::copy(src, dst, options);
  CountOutcome(result.status());
  if (result.ok() && capabilities().server_side_copy) {
    Bump(metrics_.server_copies);
    Bump(metrics_.bytes_copied_on_server, result->size);
  }
  call.Done(result.status(), 0);
  return result;
}

Result<ObjectInfo> MetricsStore::set_attributes(std::string_view key, const Metadata& metadata,
                                                const SetAttributesOptions& options) {
  Bump(metrics_.set_attributes_requests);
  Call call(*this, "SETSTAT", key);
  Result<ObjectInfo> result = ForwardingStore::set_attributes(key, metadata, options);
  CountOutcome(result.status());
  const Capabilities caps = capabilities();
  // A chmod or touch on SFTP is a SETSTAT, not a copy of the file's bytes.
  if (result.ok() && caps.server_side_copy && caps.attributes_by_copy) {
    Bump(metrics_.server_copies);
    Bump(metrics_.bytes_copied_on_server, result->size);
  }
  call.Done(result.status(), 0);
  return result;
}

Status MetricsStore::remove(std::string_view key) {
  Bump(metrics_.remove_requests);
  Call call(*this, "REMOVE", key);
  Status status = ForwardingStore::remove(key);
  CountOutcome(status);
  call.Done(status, 0);
  return status;
}

Status MetricsStore::remove_if_match(std::string_view key, const ETag& etag, bool known_current) {
  Bump(metrics_.remove_requests);
  Call call(*this, "REMOVE", key);
  Status status = ForwardingStore::remove_if_match(key, etag, known_current);
  CountOutcome(status);
  call.Done(status, 0);
  return status;
}

// A link is one request, counted with the puts and reads it replaces on object stores.
Result<ObjectInfo> MetricsStore::symlink(std::string_view key, std::string_view target,
                                         const PutOptions& options) {
  Bump(metrics_.put_requests);
  Call call(*this, "SYMLINK", key);
  Result<ObjectInfo> result = ForwardingStore::symlink(key, target, options);
  CountOutcome(result.status());
  call.Done(result.status(), 0);
  return result;
}

Result<std::string> MetricsStore::read_link(std::string_view key) {
  Bump(metrics_.read_requests);
  Call call(*this, "READLINK", key);
  Result<std::string> result = ForwardingStore::read_link(key);
  CountOutcome(result.status());
  call.Done(result.status(), 0);
  return result;
}

Status MetricsStore::rename(std::string_view from, std::string_view to) {
  Bump(metrics_.rename_requests);
  Call call(*this, "RENAME", from);
  Status status = ForwardingStore::rename(from, to);
  CountOutcome(status);
  call.Done(status, 0);
  return status;
}

Status MetricsStore::remove_many(const std::vector<std::string>& keys) {
  Bump(metrics_.remove_requests);
  Call call(*this, "REMOVE", keys.empty() ? std::string_view() : std::string_view(keys.front()));
  Status status = ForwardingStore::remove_many(keys);
  CountOutcome(status);
  call.Done(status, 0);
  return status;
}

namespace {

class MetricsUpload : public ForwardingUpload {
 public:
  MetricsUpload(std::unique_ptr<Upload> target, Metrics& metrics)
      : ForwardingUpload(std::move(target)), metrics_(metrics) {}

  Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
               uint64_t length) override {
    Bump(metrics_.put_requests);
    Status status = ForwardingUpload::write(offset, source, source_offset, length);
    Count(status);
    if (status.ok()) Bump(metrics_.bytes_written, length);
    return status;
  }
  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    Bump(metrics_.copy_requests);
    Status status = ForwardingUpload::copy(offset, base, base_offset, length);
    Count(status);
    if (status.ok()) Bump(metrics_.bytes_copied_on_server, length);
    return status;
  }
  Status copy_whole(const ObjectInfo& base) override {
    Status status = ForwardingUpload::copy_whole(base);
    if (status.code() == StatusCode::kUnsupported) return status;  // nothing was asked
    Bump(metrics_.copy_requests);
    Count(status);
    if (status.ok()) Bump(metrics_.bytes_copied_on_server, base.size);
    return status;
  }
  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    done_ = true;
    Bump(metrics_.upload_requests);
    Result<ObjectInfo> result = ForwardingUpload::complete(size, options);
    Count(result.status());
    return result;
  }
  Status abort() override {
    if (done_) return Status::Ok();
    done_ = true;
    Bump(metrics_.upload_requests);
    Status status = ForwardingUpload::abort();
    Count(status);
    return status;
  }

 private:
  void Count(const Status& status) {
    if (!status.ok() && status.code() != StatusCode::kNotFound) Bump(metrics_.failed_requests);
  }

  Metrics& metrics_;
  bool done_ = false;  // complete() or abort() came (once, after the parts: see Upload)
};

}  // namespace

Result<std::unique_ptr<Upload>> MetricsStore::start_upload(std::string_view key,
                                                           const UploadOptions& options) {
  Bump(metrics_.upload_requests);
  Result<std::unique_ptr<Upload>> result = ForwardingStore::start_upload(key, options);
  CountOutcome(result.status());
  if (!result.ok()) return result.status();
  return std::unique_ptr<Upload>(
      std::make_unique<MetricsUpload>(std::move(result).value(), metrics_));
}

}  // namespace objfs
