#include "backend/s3/http_client.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>

namespace objfs::s3 {

// One libcurl easy handle. The handle owns its connection cache, so reusing it for the next
// request to the same host reuses the kept-alive connection.
struct HttpClient::Handle {
  Handle() : easy(curl_easy_init()) { error[0] = '\0'; }
  ~Handle() {
    if (easy != nullptr) curl_easy_cleanup(easy);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  CURL* easy;
  char error[CURL_ERROR_SIZE];
  // The socket of the handle's latest connection (set as curl opens it), for AckNow.
  curl_socket_t socket = CURL_SOCKET_BAD;
};

namespace {

constexpr long kReceiveBufferBytes = 512L << 10;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool HasHeader(const HttpRequest& request, std::string_view lowercase_name) {
  return std::any_of(request.headers.begin(), request.headers.end(),
                     [&](const auto& h) { return Lowercase(h.first) == lowercase_name; });
}

// Frees the request's header list when the request ends.
class HeaderList {
 public:
  HeaderList() = default;
  ~HeaderList() { curl_slist_free_all(list_); }
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;

  bool Append(const std::string& line) {
    curl_slist* grown = curl_slist_append(list_, line.c_str());
    if (grown == nullptr) return false;
    list_ = grown;
    return true;
  }
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

// What one request's callbacks share.
struct Transfer {
  CURL* easy = nullptr;
  const curl_socket_t* socket = nullptr;
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  uint64_t upload_size = 0;
  uint64_t upload_position = 0;
  int sends = 0;  // times curl was about to send the request (OnRequestSending)
  Status upload_error;
  bool buffer_overflow = false;
  // Server work (silence_timeout_ms): bytes moved so far either way and when that last grew.
  curl_off_t moved = 0;
  std::chrono::steady_clock::time_point last_moved;
  std::string stopped;    // why OnProgress stopped the request: silence
  std::string abandoned;  // why OnProgress stopped the request: HttpRequest::abandon
};

// Sends the ACK of what was received so far at once. A server that writes a response's headers
// and its body separately, with Nagle's algorithm on (RGW does for every chunked response:
// listings, copy results), holds the body until the headers are acknowledged; on a kept-alive
// connection Linux delays that ACK by up to 40 ms, since the client has nothing to send. That
// stall was 15-40 ms on every listing, copy and delete: most of the time of small-file work
// like rsync. TCP_QUICKACK flushes the pending ACK (and is harmless when none is pending).
// (CURLINFO_ACTIVESOCKET is not set yet while the first response on a connection is read, so
// the socket comes from CURLOPT_SOCKOPTFUNCTION.)
void AckNow(curl_socket_t fd) {
  if (fd == CURL_SOCKET_BAD) return;
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
}

// Unanswered keep-alive probes after which the kernel drops a connection (Linux's default, 9,
// would let a dead peer hold a silent request for ten intervals).
constexpr int kKeepAliveProbes = 3;

int OnSocketOpened(void* user, curl_socket_t fd, curlsocktype purpose) {
  if (purpose == CURLSOCKTYPE_IPCXN) {
    *static_cast<curl_socket_t*>(user) = fd;
    int probes = kKeepAliveProbes;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  }
  return CURL_SOCKOPT_OK;
}

// Forgets the socket as curl closes it, so that AckNow never touches a reused descriptor.
int OnSocketClosed(void* user, curl_socket_t fd) {
  auto* socket = static_cast<curl_socket_t*>(user);
  if (*socket == fd) *socket = CURL_SOCKET_BAD;
  return ::close(fd);
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t n = size * count;
  std::string_view line = Trim(std::string_view(data, n));
  if (line.starts_with("HTTP/")) {
    // A new status line: the headers of an interim response (100 Continue) are not the answer.
    transfer->response->headers.clear();
    return n;
  }
  if (line.empty()) {
    AckNow(*transfer->socket);
    return n;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  transfer->response->headers.emplace_back(Lowercase(Trim(line.substr(0, colon))),
                                           std::string(Trim(line.substr(colon + 1))));
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(transfer->easy, CURLINFO_RESPONSE_CODE, &status);
  std::span<std::byte> buffer = transfer->request->response_buffer;
  HttpResponse& response = *transfer->response;
  if (status < 300 && !buffer.empty()) {
    if (n > buffer.size() - response.buffer_bytes) {
      transfer->buffer_overflow = true;
      return 0;  // curl aborts the transfer with CURLE_WRITE_ERROR
    }
    std::memcpy(buffer.data() + response.buffer_bytes, data, n);
    response.buffer_bytes += n;
    return n;
  }
  response.body.append(data, n);
  return n;
}

size_t OnUpload(char* out, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  const HttpRequest& request = *transfer->request;
  if (transfer->upload_position >= transfer->upload_size) return 0;
  const size_t want = static_cast<size_t>(
      std::min<uint64_t>(size * count, transfer->upload_size - transfer->upload_position));
  if (request.body_source == nullptr) {
    std::memcpy(out, request.body.data() + transfer->upload_position, want);
    transfer->upload_position += want;
    return want;
  }
  Result<size_t> got =
      request.body_source->read_at(request.body_offset + transfer->upload_position,
                                   std::span<std::byte>(reinterpret_cast<std::byte*>(out), want));
  if (!got.ok()) {
    transfer->upload_error = got.status();
    return CURL_READFUNC_ABORT;
  }
  if (*got == 0) {
    transfer->upload_error =
        IoError("the upload source ended at byte " + std::to_string(transfer->upload_position) +
                " of " + std::to_string(transfer->upload_size));
    return CURL_READFUNC_ABORT;
  }
  transfer->upload_position += *got;
  return *got;
}

// Called by curl about once a second, and as bytes move: the silence rule of server work and
// the caller's abandon check.
int OnProgress(void* user, curl_off_t /*dltotal*/, curl_off_t dlnow, curl_off_t /*ultotal*/,
               curl_off_t ulnow) {
  auto* transfer = static_cast<Transfer*>(user);
  const HttpRequest& request = *transfer->request;
  if (request.abandon) {
    std::string why = request.abandon();
    if (!why.empty()) {
      transfer->abandoned = std::move(why);
      return 1;
    }
  }
  if (request.silence_timeout_ms > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (dlnow + ulnow != transfer->moved) {
      transfer->moved = dlnow + ulnow;
      transfer->last_moved = now;
    } else if (now - transfer->last_moved >=
               std::chrono::milliseconds(request.silence_timeout_ms)) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f",
                    std::chrono::duration<double>(now - transfer->last_moved).count());
      transfer->stopped =
          std::string("the server sent nothing for ") + seconds + " s while working on the request";
      return 1;
    }
  }
  return 0;
}

// Called by curl each time it is about to send the request on a connection: a second time
// when the kept-alive connection it first went out on died before any reply, and curl sends it
// again on a fresh one (for a body in memory, without rewinding anything through OnSeek).
int OnRequestSending(void* user, char*, char*, int, int) {
  auto* transfer = static_cast<Transfer*>(user);
  if (transfer->sends++ > 0) transfer->response->resent = true;
  return CURL_PREREQFUNC_OK;
}

// curl rewinds the upload when it must send the request again (a kept-alive connection that
// the server had closed).
int OnSeek(void* user, curl_off_t offset, int origin) {
  auto* transfer = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > transfer->upload_size) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  transfer->upload_position = static_cast<uint64_t>(offset);
  return CURL_SEEKFUNC_OK;
}

// "host:port" of a URL (the default port of the scheme when none is given), for messages.
std::string HostPort(const std::string& url) {
  std::string out = url;
  CURLU* parsed = curl_url();
  if (parsed == nullptr) return out;
  if (curl_url_set(parsed, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
    char* host = nullptr;
    char* port = nullptr;
    if (curl_url_get(parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(parsed, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
      out = std::string(host) + ":" + port;
    }
    curl_free(host);
    curl_free(port);
  }
  curl_url_cleanup(parsed);
  return out;
}

bool FailedBeforeConnecting(CURLcode code, CURL* easy) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
      return true;
    case CURLE_OPERATION_TIMEDOUT: {
      curl_off_t connected_after = 0;
      curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connected_after);
      return connected_after == 0;
    }
    default:
      return false;
  }
}

// The Status of a request that failed below HTTP: the server was not reached or the
// connection broke. Names the host and port, the system's reason and curl's.
Status TransportError(CURLcode code, CURL* easy, const char* error_buffer,
                      const HttpRequest& request) {
  const std::string where = HostPort(request.url);
  long os_errno = 0;
  curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
  std::string reason =
      os_errno != 0 ? std::strerror(static_cast<int>(os_errno)) : curl_easy_strerror(code);
  std::string detail = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
  if (code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL) {
    return InvalidArgumentError("bad URL for " + where + ": " + detail);
  }
  std::string message = FailedBeforeConnecting(code, easy)
                            ? "cannot reach " + where + ": "
                            : request.method + " to " + where + " failed: ";
  return TransientError(message + reason + " (curl: " + detail + ")");
}

// Sets options on one handle and remembers the first that failed.
class OptionSetter {
 public:
  explicit OptionSetter(CURL* easy) : easy_(easy) {}

  template <typename T>
  void operator()(CURLoption option, T value) {
    CURLcode code = curl_easy_setopt(easy_, option, value);
    if (code != CURLE_OK && first_error_ == CURLE_OK) first_error_ = code;
  }
  CURLcode first_error() const { return first_error_; }

 private:
  CURL* easy_;
  CURLcode first_error_ = CURLE_OK;
};

}  // namespace

const std::string* HttpResponse::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return &value;
  }
  return nullptr;
}

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
  static std::once_flag curl_initialized;
  std::call_once(curl_initialized, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

HttpClient::~HttpClient() = default;

std::unique_ptr<HttpClient::Handle> HttpClient::Acquire() {
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Handle> handle = std::move(idle_.back());
      idle_.pop_back();
      return handle;
    }
  }
  return std::make_unique<Handle>();
}

void HttpClient::Release(std::unique_ptr<Handle> handle) {
  // Drops the options of the last request but keeps the handle's open connections.
  curl_easy_reset(handle->easy);
  MutexLock lock(&mu_);
  if (idle_.size() < options_.max_idle_handles) idle_.push_back(std::move(handle));
  // Otherwise the handle and its connection close here.
}

Result<HttpResponse> HttpClient::Perform(const HttpRequest& request) {
  const std::string& method = request.method;
  if (method != "GET" && method != "HEAD" && method != "PUT" && method != "POST" &&
      method != "DELETE") {
    return InvalidArgumentError("unsupported HTTP method '" + method + "'");
  }
  uint64_t body_size = request.body.size();
  if (request.body_source != nullptr) {
    const uint64_t source_size = request.body_source->size();
    if (request.body_offset > source_size ||
        request.body_size > source_size - request.body_offset) {
      return InvalidArgumentError("upload slice [" + std::to_string(request.body_offset) + ", +" +
                                  std::to_string(request.body_size) + ") is outside a source of " +
                                  std::to_string(source_size) + " bytes");
    }
    body_size = request.body_size;
  }
  const bool sends_body = method == "PUT" || method == "POST";
  if (!sends_body && body_size != 0) {
    return InvalidArgumentError(method + " request with a body");
  }
  if (body_size > static_cast<uint64_t>(std::numeric_limits<curl_off_t>::max())) {
    return InvalidArgumentError("request body too large");
  }

  std::unique_ptr<Handle> handle = Acquire();
  if (handle->easy == nullptr) return InternalError("curl_easy_init failed");
  CURL* easy = handle->easy;
  handle->error[0] = '\0';

  HttpResponse response;
  Transfer transfer;
  transfer.easy = easy;
  transfer.socket = &handle->socket;
  transfer.request = &request;
  transfer.response = &response;
  transfer.upload_size = body_size;

  HeaderList headers;
  bool headers_ok = true;
  std::string line;  // one buffer for every header line
  for (const auto& [name, value] : request.headers) {
    line = name;
    // "Name;" is curl's way of sending a header with an empty value.
    if (value.empty()) {
      line += ';';
    } else {
      line += ": ";
      line += value;
    }
    headers_ok &= headers.Append(line);
  }
  // No "Expect: 100-continue" round trip before an upload.
  headers_ok &= headers.Append("Expect:");
  // curl would label a POST as a form; the caller names the type it sends, if any.
  if (method == "POST" && !HasHeader(request, "content-type")) {
    headers_ok &= headers.Append("Content-Type:");
  }
  if (!headers_ok) return InternalError("out of memory building request headers");

  OptionSetter set(easy);
  set(CURLOPT_URL, request.url.c_str());
  // Keys are arbitrary: "a/../b" and "a/./b" are names, not paths to normalise.
  set(CURLOPT_PATH_AS_IS, 1L);
  set(CURLOPT_ERRORBUFFER, handle->error);
  set(CURLOPT_NOSIGNAL, 1L);
  set(CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  set(CURLOPT_CONNECTTIMEOUT_MS, options_.connect_timeout_ms);
  if (options_.idle_timeout_s > 0 && request.silence_timeout_ms <= 0) {
    set(CURLOPT_LOW_SPEED_LIMIT, std::max(options_.low_speed_bytes, 1L));
    set(CURLOPT_LOW_SPEED_TIME, options_.idle_timeout_s);
  }
  if (request.silence_timeout_ms > 0 || request.abandon) {
    transfer.last_moved = std::chrono::steady_clock::now();
    set(CURLOPT_NOPROGRESS, 0L);
    set(CURLOPT_XFERINFOFUNCTION, OnProgress);
    set(CURLOPT_XFERINFODATA, static_cast<void*>(&transfer));
  }
  if (request.total_timeout_ms > 0) set(CURLOPT_TIMEOUT_MS, request.total_timeout_ms);
  // A request the server works on may be silent for minutes (see silence_timeout_ms); the
  // connection under it must still be alive: a peer that vanished (host down, path cut) fails
  // kKeepAliveProbes keep-alive probes, request_timeout apart, after request_timeout of quiet.
  set(CURLOPT_TCP_KEEPALIVE, 1L);
  if (options_.idle_timeout_s > 0) {
    set(CURLOPT_TCP_KEEPIDLE, options_.idle_timeout_s);
    set(CURLOPT_TCP_KEEPINTVL, options_.idle_timeout_s);
  }
  // Bulk GETs: receive in large pieces (curl's default is 16 KiB, i.e. 64 receive calls and
  // body callbacks per MiB).
  set(CURLOPT_BUFFERSIZE, kReceiveBufferBytes);
  set(CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
  set(CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
  if (!options_.ca_bundle.empty()) set(CURLOPT_CAINFO, options_.ca_bundle.c_str());
  set(CURLOPT_HTTPHEADER, headers.get());
  set(CURLOPT_SOCKOPTFUNCTION, OnSocketOpened);
  set(CURLOPT_SOCKOPTDATA, static_cast<void*>(&handle->socket));
  set(CURLOPT_CLOSESOCKETFUNCTION, OnSocketClosed);
  set(CURLOPT_CLOSESOCKETDATA, static_cast<void*>(&handle->socket));
  set(CURLOPT_PREREQFUNCTION, OnRequestSending);
  set(CURLOPT_PREREQDATA, static_cast<void*>(&transfer));
  set(CURLOPT_HEADERFUNCTION, OnHeader);
  set(CURLOPT_HEADERDATA, static_cast<void*>(&transfer));
  set(CURLOPT_WRITEFUNCTION, OnBody);
  set(CURLOPT_WRITEDATA, static_cast<void*>(&transfer));

  const auto curl_body_size = static_cast<curl_off_t>(body_size);
  if (method == "GET") {
    set(CURLOPT_HTTPGET, 1L);
  } else if (method == "HEAD") {
    set(CURLOPT_NOBODY, 1L);
  } else if (method == "DELETE") {
    set(CURLOPT_CUSTOMREQUEST, "DELETE");
  } else if (method == "POST" && request.body_source == nullptr) {
    set(CURLOPT_POSTFIELDSIZE_LARGE, curl_body_size);
    set(CURLOPT_POSTFIELDS, request.body.data());
  } else {
    if (method == "PUT") {
      // With a known size (0 included) curl sends Content-Length, never chunked encoding.
      set(CURLOPT_UPLOAD, 1L);
      set(CURLOPT_INFILESIZE_LARGE, curl_body_size);
    } else {
      set(CURLOPT_POST, 1L);
      set(CURLOPT_POSTFIELDSIZE_LARGE, curl_body_size);
    }
    set(CURLOPT_READFUNCTION, OnUpload);
    set(CURLOPT_READDATA, static_cast<void*>(&transfer));
    set(CURLOPT_SEEKFUNCTION, OnSeek);
    set(CURLOPT_SEEKDATA, static_cast<void*>(&transfer));
  }
  if (set.first_error() != CURLE_OK) {
    return InternalError(std::string("cannot set up the request to ") + HostPort(request.url) +
                         ": " + curl_easy_strerror(set.first_error()));
  }

  const CURLcode code = curl_easy_perform(easy);
  if (code != CURLE_OK) {
    // The handle is dropped with whatever connection state the failure left behind.
    if (!transfer.upload_error.ok()) return transfer.upload_error;
    if (!transfer.abandoned.empty()) {
      return TimedOutError(method + " to " + HostPort(request.url) +
                           " abandoned: " + transfer.abandoned);
    }
    if (!transfer.stopped.empty()) {
      return TransientError(method + " to " + HostPort(request.url) +
                            " failed: " + transfer.stopped);
    }
    if (transfer.buffer_overflow) {
      return InternalError("response larger than the buffer: " + method + " to " +
                           HostPort(request.url) + " sent more than " +
                           std::to_string(request.response_buffer.size()) + " bytes");
    }
    return TransportError(code, easy, handle->error, request);
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &response.status);
  Release(std::move(handle));
  return response;
}

}  // namespace objfs::s3
