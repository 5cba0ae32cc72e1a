// HTTP for the S3 client, through libcurl: a pool of keep-alive easy handles shared by threads.
//
// One call is one request on one pooled connection; retries, signing and error bodies are the
// caller's business (S3Store). Transport failures (refused, reset, timeout, TLS, DNS) come back
// as a Transient Status whose message names the host and port and curl's reason; an HTTP status
// code is never an error here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs::s3 {

struct HttpOptions {
  long connect_timeout_ms = 10'000;
  // A transfer that moves less than low_speed_bytes per second for idle_timeout_s seconds is
  // stuck and aborted (Transient): a server that accepts and never answers, one that was
  // stopped mid-reply, or a trickle. A large transfer that keeps moving is never cut by this.
  long idle_timeout_s = 30;
  long low_speed_bytes = 1024;
  bool verify_tls = true;
  std::string ca_bundle;         // a PEM file (AWS_CA_BUNDLE); empty: the system's store
  size_t max_idle_handles = 32;  // easy handles kept for reuse
};

struct HttpRequest {
  std::string method;  // GET HEAD PUT POST DELETE
  std::string url;     // complete and already percent-encoded
  std::vector<std::pair<std::string, std::string>> headers;

  // The body: a slice of a ByteSource (uploads stream from the staging file), or memory.
  const ByteSource* body_source = nullptr;
  uint64_t body_offset = 0;
  uint64_t body_size = 0;
  std::string body;  // used when body_source is null

  // When non-empty, a 2xx response body is written straight into this buffer (a ranged GET
  // into the caller's memory, no copy); more bytes than fit is an Internal error. Error
  // responses (>= 300) always go to HttpResponse::body.
  std::span<std::byte> response_buffer;

  // When positive, the whole request is aborted (Transient) after this long: the rest of its
  // call's time budget.
  long total_timeout_ms = 0;

  // A request whose reply waits on the server's work (a server-side copy, the completion of a
  // multipart upload) sends and receives nothing for as long as the work takes. When positive,
  // the low-speed rule does not apply to it; instead it is aborted (Transient) once it has
  // received nothing at all for this long (a keep-alive byte from the server restarts the wait).
  long silence_timeout_ms = 0;
  // When set, asked about once a second while the request runs; a non-empty answer abandons
  // the request with TimedOut and that reason (a deadline set while it was in flight: unmount's).
  std::function<std::string()> abandon;
};

struct HttpResponse {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lowercased, values trimmed
  std::string body;         // the body, unless it went into response_buffer
  size_t buffer_bytes = 0;  // bytes written into response_buffer
  // curl sent the request again on a fresh connection after the kept-alive one it went out on
  // died before any reply: the server may have acted on the first (its reply lost).
  bool resent = false;

  // The first header with this (lowercase) name, or nullptr.
  const std::string* header(std::string_view name) const;
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Thread-safe. Takes an idle handle from the pool (or makes one), performs, returns it.
  Result<HttpResponse> Perform(const HttpRequest& request);

  const HttpOptions& options() const { return options_; }

 private:
  struct Handle;
  std::unique_ptr<Handle> Acquire();
  void Release(std::unique_ptr<Handle> handle);

  HttpOptions options_;
  Mutex mu_;  // lock 16 of fs/lock_order.h
  std::vector<std::unique_ptr<Handle>> idle_ GUARDED_BY(mu_);
};

}  // namespace objfs::s3
