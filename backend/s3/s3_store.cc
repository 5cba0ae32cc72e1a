#include "backend/s3/s3_store.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "backend/base64.h"
#include "backend/log.h"
#include "backend/md5.h"
#include "backend/mutex.h"
#include "backend/s3/xml.h"
#include "backend/source_md5.h"

namespace objfs::s3 {
namespace {

constexpr std::string_view kMetaPrefix = "x-amz-meta-";
constexpr int kMaxDeleteBatch = 1000;
// What S3 stores for an object put without a Content-Type, and what other clients send for
// bytes of no known type: neither says more than "no type".
bool IsUntyped(std::string_view type) {
  return type.empty() || type == "binary/octet-stream" || type == "application/octet-stream";
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The query string as it goes on the wire; SigV4 canonicalises the same decoded pairs, so both
// sort and encode identically.
std::string EncodeQuery(HeaderList query) {
  for (auto& [k, v] : query) {
    k = UriEncode(k, false);
    v = UriEncode(v, false);
  }
  std::sort(query.begin(), query.end());
  std::string out;
  for (const auto& [k, v] : query) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

// The headers S3 calls system-defined metadata that a client sets: what a REPLACE copy, a copy
// made of parts or a new version would otherwise drop (Content-Type to the type of the name's
// extension). They ride in Metadata as ":<name>" (backend/object_store.h).
constexpr std::array<std::string_view, 7> kHeadersKept = {"cache-control",
                                                          "content-disposition",
                                                          "content-encoding",
                                                          "content-language",
                                                          "content-type",
                                                          "expires",
                                                          "x-amz-website-redirect-location"};

bool IsHeaderKept(std::string_view name) {
  return std::find(kHeadersKept.begin(), kHeadersKept.end(), name) != kHeadersKept.end();
}

// `metadata` as request headers. A Content-Type the request names already (the caller's
// choice) wins over the one kept.
void AddMetadataHeaders(const Metadata& metadata, HeaderList& headers) {
  const bool typed = std::any_of(headers.begin(), headers.end(),
                                 [](const auto& header) { return header.first == "content-type"; });
  for (const auto& [name, value] : metadata) {
    if (!IsHeaderMetadata(name)) {
      headers.emplace_back(std::string(kMetaPrefix) + Lower(name), value);
    } else if (const std::string_view header = std::string_view(name).substr(1);
               IsHeaderKept(header) && !(typed && header == "content-type")) {
      headers.emplace_back(header, value);
    }
  }
}

// The encryption at rest a HEAD, GET or PUT reply names; none when it names none.
AtRestEncryption EncryptionFromHeaders(const HttpResponse& r) {
  AtRestEncryption encryption;
  if (const std::string* v = r.header("x-amz-server-side-encryption")) encryption.algorithm = *v;
  if (const std::string* v = r.header("x-amz-server-side-encryption-aws-kms-key-id")) {
    encryption.kms_key_id = *v;
  }
  return encryption;
}

// A Content-Encoding without "aws-chunked", the transfer coding of a streaming-signed upload
// that RGW before 17 stores and returns as if it were the object's: sent again on a plain PUT it
// would misdescribe the bytes.
std::string WithoutAwsChunked(std::string_view value) {
  std::string out;
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view coding = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    while (!coding.empty() && coding.front() == ' ') coding.remove_prefix(1);
    while (!coding.empty() && coding.back() == ' ') coding.remove_suffix(1);
    if (coding.empty() || Lower(coding) == "aws-chunked") continue;
    if (!out.empty()) out += ", ";
    out += coding;
  }
  return out;
}

// `text` as a number, all of it digits and within 64 bits; nullopt otherwise.
std::optional<uint64_t> WholeNumber(std::string_view text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

// Size, ETag, mtime, content type, user metadata and encryption from a HEAD or GET reply.
Result<ObjectInfo> InfoFromHeaders(std::string_view key, const HttpResponse& r) {
  ObjectInfo info;
  info.key = std::string(key);
  if (const std::string* v = r.header("content-length")) {
    std::optional<uint64_t> size = WholeNumber(*v);
    if (!size) {
      return IoError("HEAD " + std::string(key) + ": the server's Content-Length '" +
                     v->substr(0, 64) + "' is not a size objfs can take");
    }
    info.size = *size;
  }
  if (const std::string* v = r.header("etag")) info.etag = ETag::Parse(*v);
  if (const std::string* v = r.header("last-modified")) {
    int64_t t = ParseHttpDate(*v);
    if (t >= 0) info.mtime_ns = t;
  }
  if (const std::string* v = r.header("content-type")) info.content_type = *v;
  for (const auto& [name, value] : r.headers) {
    if (name.size() > kMetaPrefix.size() && name.compare(0, kMetaPrefix.size(), kMetaPrefix) == 0) {
      info.metadata[name.substr(kMetaPrefix.size())] = value;
    } else if (IsHeaderKept(name)) {
      std::string kept = name == "content-encoding" ? WithoutAwsChunked(value) : value;
      if (!kept.empty()) info.metadata[kHeaderMetadataMark + name] = std::move(kept);
    }
  }
  info.has_metadata = true;
  info.encryption = EncryptionFromHeaders(r);
  if (const std::string* v = r.header("x-amz-tagging-count")) {
    info.tag_count = static_cast<uint32_t>(std::strtoul(v->c_str(), nullptr, 10));
  }
  return info;
}

// The MD5 a plain ETag spells in hex; nothing for the other kinds.
std::optional<std::array<uint8_t, 16>> DigestOf(const ETag& etag) {
  if (!etag.is_plain_md5()) return std::nullopt;
  std::array<uint8_t, 16> digest{};
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  const std::string& hex = etag.value();
  for (size_t i = 0; i < digest.size(); ++i) {
    digest[i] = static_cast<uint8_t>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  }
  return digest;
}

// The ETag a multipart object made of `parts` has (the MD5 of their MD5s, "-N"), where every
// part's ETag is its MD5; nothing otherwise.
std::optional<ETag> ETagOfParts(const std::vector<std::pair<int, ETag>>& parts) {
  std::vector<Md5Digest> digests;
  for (const auto& [number, part_etag] : parts) {
    std::optional<Md5Digest> digest = DigestOf(part_etag);
    if (!digest) return std::nullopt;
    digests.push_back(*digest);
  }
  return MultipartETag(digests);
}

std::string ContentMd5(const std::array<uint8_t, 16>& digest) {
  return Base64(std::span<const uint8_t>(digest.data(), digest.size()));
}

// backend/source_md5.h's, counted in bytes_hashed.
Result<std::array<uint8_t, 16>> Md5OfSource(const ByteSource& source, uint64_t offset,
                                            uint64_t size, Metrics* metrics) {
  OBJFS_ASSIGN_OR_RETURN(Md5Digest digest, objfs::Md5OfSource(source, offset, size));
  if (metrics != nullptr) Bump(metrics->bytes_hashed, size);
  return digest;
}

// The failure of a copy whose source is not the version it was asked to copy: `what` names the
// request, `when` (" while it was copied", or "") says when it was seen.
Status SourceChanged(const std::string& what, const ETag& found, const ETag& expected,
                     std::string_view when = "") {
  return PreconditionFailedError(what + ": the source changed" + std::string(when) + " (ETag " +
                                 (found.empty() ? std::string("none") : found.value()) +
                                 ", expected " + expected.value() + ")");
}

}  // namespace

// One S3 request before signing.
struct S3Store::Request {
  std::string method;
  std::string key;  // empty for bucket-level requests
  bool bucket_level = false;
  bool service_level = false;  // to the service, not the bucket (ListBuckets): path "/"
  HeaderList query;
  HeaderList headers;
  std::string body;
  const ByteSource* body_source = nullptr;
  uint64_t body_offset = 0;
  uint64_t body_size = 0;
  std::span<std::byte> response_buffer;
  std::string what;  // "GET s3://bucket/key", leads error messages
  // The reply waits on work the server does for `server_bytes` bytes (CopyObject,
  // UploadPartCopy, CompleteMultipartUpload): see Execute.
  bool server_works = false;
  uint64_t server_bytes = 0;
  // Any reply comes back as it is, errors too (the region discovery's HEAD).
  bool raw_reply = false;
  // Signed with the access key but a secret known to be wrong: the mount check's question
  // whether the server tells a wrong secret (SignatureDoesNotMatch) from a denial.
  bool wrong_secret = false;
  // Attempts that got no reply, so that the server may have acted on them unseen (a reply
  // lost): failed in transport, or sent again by curl on a fresh connection after the first
  // died. Counted over every Execute of this request. (An error reply, even a 500, is an
  // answer: RGW answers 500 to a PUT racing another of the same key, having stored nothing.)
  mutable int unanswered = 0;
};

Status ApplyEnvironment(S3StoreOptions& options, ChainOptions chain, const LogFunction& log) {
  const GetEnvFn& getenv = chain.getenv;
  auto env = [&getenv](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  OBJFS_ASSIGN_OR_RETURN(AwsProfile profile,
                         LoadAwsProfile(chain.profile, chain.credentials_file, getenv));
  const S3ProfileSettings settings = S3SettingsOf(profile);
  if (options.endpoint.empty()) options.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (options.endpoint.empty()) options.endpoint = env("AWS_ENDPOINT_URL");
  if (options.endpoint.empty()) options.endpoint = settings.endpoint;
  if (options.region.empty()) options.region = env("AWS_REGION");
  if (options.region.empty()) options.region = env("AWS_DEFAULT_REGION");
  if (options.region.empty()) options.region = settings.region;
  if (options.region.empty()) {
    options.region = "us-east-1";
    options.discover_region = true;
  }
  if (options.addressing == Addressing::kAuto && settings.addressing) {
    options.addressing = *settings.addressing;
  }
  if (options.http.ca_bundle.empty()) options.http.ca_bundle = env("AWS_CA_BUNDLE");
  if (options.credentials_holder == nullptr && options.credentials.access_key.empty()) {
    chain.region = options.region;
    OBJFS_ASSIGN_OR_RETURN(options.credentials, ResolveCredentials(chain));
    options.credentials_holder = std::make_shared<CredentialsHolder>(
        options.credentials, [chain] { return ResolveCredentials(chain); }, log);
  }
  return Status::Ok();
}

Status ApplyEnvironment(S3StoreOptions& options, std::string_view profile, const GetEnvFn& getenv) {
  ChainOptions chain;
  chain.profile = std::string(profile);
  chain.getenv = getenv;
  return ApplyEnvironment(options, std::move(chain), nullptr);
}

Result<std::unique_ptr<S3Store>> S3Store::Create(S3StoreOptions options) {
  OBJFS_ASSIGN_OR_RETURN(
      S3Endpoint endpoint,
      S3Endpoint::Create(options.endpoint, options.region, options.bucket, options.addressing));
  if (options.part_size == 0 || options.copy_part_size == 0) {
    return InvalidArgumentError("part sizes must be positive");
  }
  if (options.parallel_parts < 1) options.parallel_parts = 1;
  return std::unique_ptr<S3Store>(new S3Store(std::move(options), std::move(endpoint)));
}

S3Store::S3Store(S3StoreOptions options, S3Endpoint endpoint)
    : options_(std::move(options)),
      endpoint_(std::move(endpoint)),
      credentials_(
          options_.credentials_holder != nullptr
              ? options_.credentials_holder
              : std::make_shared<CredentialsHolder>(options_.credentials, nullptr, nullptr)),
      http_(options_.http),
      metrics_(options_.metrics != nullptr ? options_.metrics : &own_metrics_) {}

std::string S3Store::What(std::string_view verb, std::string_view key) const {
  std::string w(verb);
  w += " s3://";
  w += endpoint_.bucket();
  if (!key.empty()) {
    w += '/';
    w += key;
  }
  return w;
}

std::string S3Store::describe() const {
  return "s3://" + endpoint_.bucket() + " at " + endpoint_.endpoint();
}

Capabilities S3Store::capabilities() const {
  Capabilities c;
  c.scheme = "s3";
  c.server_side_copy = true;
  c.native_etags = true;
  c.multipart_threshold = options_.multipart_threshold;
  c.part_size = options_.part_size;
  c.copy_part_threshold = options_.copy_part_threshold;
  c.attributes_by_copy = true;
  c.stores_owner = true;
  c.max_object_size = kMaxObjectSize;
  c.upload_sessions = true;
  c.copy_ranges = true;
  c.min_part_size = kMinPartSize;
  c.max_parts = kMaxParts;
  c.parts_in_flight = static_cast<size_t>(options_.parallel_parts);
  c.max_key_bytes = kMaxKeyBytes;
  c.utf8_keys = true;
  c.user_xattrs = true;
  c.special_files = true;
  c.keeps_encryption = !MountEncrypts();
  return c;
}

void S3Store::LogRequest(const Request& req, const Result<HttpResponse>& resp,
                         std::chrono::steady_clock::duration took) const {
  // Method, key and query names (their values: upload ids, part numbers, list markers), never
  // headers: they hold the signature and, with SSE-C, the key.
  std::string line = "s3 " + req.method + " ";
  line += req.bucket_level ? "/" : req.key;
  for (size_t i = 0; i < req.query.size(); ++i) {
    line += i == 0 ? '?' : '&';
    line += req.query[i].first;
    if (!req.query[i].second.empty()) line += "=" + req.query[i].second;
  }
  char latency[32];
  std::snprintf(latency, sizeof latency, " %.1fms",
                std::chrono::duration<double, std::milli>(took).count());
  if (!resp.ok()) {
    line += " status=" + std::string(StatusCodeName(resp.status().code())) + " sent=" +
            std::to_string(req.body_source != nullptr ? req.body_size : req.body.size()) + latency;
    line += " (" + resp.status().message() + ")";
  } else {
    const uint64_t sent = req.body_source != nullptr ? req.body_size : req.body.size();
    const uint64_t received = resp->buffer_bytes + resp->body.size();
    line += " status=" + std::to_string(resp->status) + " sent=" + std::to_string(sent) +
            " received=" + std::to_string(received) + latency;
    const std::string* id = resp->header("x-amz-request-id");
    line += " request_id=" + (id != nullptr ? *id : std::string("-"));
  }
  LogDebug(line);
}

Result<HttpResponse> S3Store::ExecuteOnce(const Request& req, long total_timeout_ms,
                                          Credentials* used) {
  std::string path = req.service_level  ? std::string("/")
                     : req.bucket_level ? endpoint_.Path("")
                                        : endpoint_.Path(req.key);
  SigningRequest sreq;
  sreq.method = req.method;
  sreq.canonical_uri = path;
  sreq.query = req.query;
  sreq.headers = req.headers;
  AddObjectHeaders(options_.object_headers, req.method, req.bucket_level ? "" : req.key, req.query,
                   sreq.headers);
  sreq.headers.emplace_back("host",
                            req.service_level ? endpoint_.service_host() : endpoint_.host());
  if (req.body_source != nullptr) {
    sreq.payload_sha256 = std::string(kUnsignedPayload);
    if (options_.sign_payload) {
      std::string data(req.body_size, '\0');
      OBJFS_ASSIGN_OR_RETURN(
          size_t n,
          req.body_source->read_at(
              req.body_offset,
              std::span<std::byte>(reinterpret_cast<std::byte*>(data.data()), data.size())));
      data.resize(n);
      sreq.payload_sha256 = Sha256Hex(data);
    }
  } else {
    sreq.payload_sha256 = Sha256Hex(req.body);
  }
  *used = credentials_->Current();
  Credentials wrong;
  if (req.wrong_secret) {
    wrong = *used;
    wrong.secret_key += "-not-the-secret";
  }
  std::string auth = Sign(sreq, req.wrong_secret ? wrong : *used, options_.region, "s3",
                          std::chrono::system_clock::now(),
                          /*add_content_sha256=*/true);

  HttpRequest hreq;
  hreq.method = req.method;
  hreq.url = req.service_level ? endpoint_.endpoint() + "/" +
                                     (req.query.empty() ? "" : "?" + EncodeQuery(req.query))
                               : endpoint_.Url(path, EncodeQuery(req.query));
  for (auto& [name, value] : sreq.headers) {
    if (name == "host") continue;  // curl sends Host from the URL
    hreq.headers.emplace_back(name, value);
  }
  hreq.headers.emplace_back("Authorization", auth);
  hreq.body_source = req.body_source;
  hreq.body_offset = req.body_offset;
  hreq.body_size = req.body_size;
  hreq.body = req.body;
  hreq.response_buffer = req.response_buffer;
  hreq.total_timeout_ms = total_timeout_ms;
  if (req.server_works) {
    const auto silence = ServerWorkSilence(
        std::chrono::seconds(std::max(options_.http.idle_timeout_s, 0L)), req.server_bytes);
    hreq.silence_timeout_ms = static_cast<long>(silence.count());
    // Unmount's deadline, set while the request is in flight, still cuts it.
    hreq.abandon = []() -> std::string {
      const std::optional<DeadlineClock::time_point> cap = CallDeadlineCap();
      if (cap && DeadlineClock::now() >= *cap) return "the unmount's operation_timeout is spent";
      return "";
    };
  }

  Bump(metrics_->http_requests);
  const auto start = std::chrono::steady_clock::now();
  Result<HttpResponse> performed = http_.Perform(hreq);
  if (LogDebugEnabled()) LogRequest(req, performed, std::chrono::steady_clock::now() - start);
  if (!performed.ok()) ++req.unanswered;
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, std::move(performed));
  if (resp.resent) ++req.unanswered;
  if ((resp.status >= 200 && resp.status < 300) || req.raw_reply) return resp;
  S3Error error;
  if (!resp.body.empty()) {
    Result<S3Error> parsed = ParseError(resp.body);
    if (parsed.ok()) error = *parsed;
  }
  Status st = StatusFromS3Error(resp.status, error, req.what);
  if (resp.status == 416) {
    // Callers that can use the reply (a read past the end) look at the status themselves.
    return resp;
  }
  return st;
}

uint64_t ChoosePartSize(uint64_t size, uint64_t configured) {
  const uint64_t needed = (size + kMaxParts - 1) / kMaxParts;
  if (needed <= configured) return configured;
  constexpr uint64_t kMiB = 1 << 20;
  return std::min(kMaxPartSize, (needed + kMiB - 1) / kMiB * kMiB);
}

namespace {

// A refusal of the credentials themselves rather than of the request: worth resolving the
// chain again (a rotated key, expired temporary credentials). A HEAD's bare 403 is told apart
// by head().
bool IsCredentialRejection(const Status& st) {
  if (st.code() != StatusCode::kPermissionDenied) return false;
  const std::string& code = st.server_code();
  return code == "ExpiredToken" || code == "InvalidAccessKeyId" ||
         code == "SignatureDoesNotMatch" || code == "InvalidToken" ||
         code == "TokenRefreshRequired";
}

// A denial that may be one of the credentials after all (see RenewAfterDenial).
bool IsDenial(const Status& st) {
  return st.code() == StatusCode::kPermissionDenied &&
         (st.server_code() == "AccessDenied" || st.server_code().empty());
}

}  // namespace

Result<HttpResponse> S3Store::Execute(const Request& req) {
  Credentials used;
  Result<HttpResponse> r = ExecuteWithRetries(req, &used);
  if (!r.ok() && IsDenial(r.status()) && credentials_->RenewAfterDenial(used)) {
    r = ExecuteWithRetries(req, &used);
  }
  if (r.ok() || !IsCredentialRejection(r.status())) return r;
  const std::string reason =
      r.status().server_code().empty() ? std::string("HTTP 403") : r.status().server_code();
  if (credentials_->RenewAfterRejection(used, reason)) {
    r = ExecuteWithRetries(req, &used);
    if (r.ok() || !IsCredentialRejection(r.status())) return r;
  }
  if (options_.log && credentials_->refreshing()) {
    options_.log(LogLevel::kError, r.status().message() + " (signed with the credentials from " +
                                       used.source + "; resolving them again gave no others)");
  }
  return r;
}

Result<HttpResponse> S3Store::ExecuteWithRetries(const Request& req, Credentials* used) {
  if (req.key.size() > kMaxKeyBytes) {
    // S3 answers KeyTooLongError (RGW: InvalidArgument) after the body was sent; the key,
    // prefix included, is what the limit counts.
    return Status(StatusCode::kNameTooLong,
                  req.what + ": the key is " + std::to_string(req.key.size()) +
                      " bytes long; S3 keys are at most " + std::to_string(kMaxKeyBytes));
  }
  RetryBackoff backoff(options_.retry);
  const DeadlineClock::time_point start = DeadlineClock::now();
  const std::optional<DeadlineClock::time_point> deadline = CallDeadline(options_.retry, start);
  // Cut short by unmount's deadline rather than by the call's own budget.
  const bool capped =
      deadline && (options_.retry.budget.count() <= 0 || *deadline < start + options_.retry.budget);
  if (capped && *deadline <= start) {
    Status late = TimedOutError(req.what + ": not sent, the unmount's operation_timeout is spent");
    if (options_.log) options_.log(LogLevel::kError, late.message());
    return late;
  }
  auto attempt = [&]() -> Result<HttpResponse> {
    long total_timeout_ms = 0;
    // An upload streamed from a staging file may be large and slow but healthy: the low-speed
    // limit guards it, and the budget is checked between its attempts. So is a request the
    // server works on (a copy, a completion), which may be silent for minutes and is bounded
    // by its silence allowance instead. At unmount both are cut at the deadline too.
    // Everything else (ranged GETs of a read buffer, HEADs, listings, small bodies) is always
    // cut at the deadline.
    if (deadline && (capped || (req.body_source == nullptr && !req.server_works))) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(*deadline - DeadlineClock::now());
      total_timeout_ms = std::max<long>(static_cast<long>(left.count()), 1);
    }
    return ExecuteOnce(req, total_timeout_ms, used);
  };
  Result<HttpResponse> r = RetryCall(
      backoff, attempt, RealSleep(),
      [this](int, const Status&, std::chrono::milliseconds) { Bump(metrics_->retries); }, deadline);
  if (!r.ok() && r.status().code() == StatusCode::kTimedOut) {
    Status timed_out = r.status().WithContext(req.what);
    if (options_.log) options_.log(LogLevel::kError, timed_out.message());
    return timed_out;
  }
  return r;
}

Result<ObjectInfo> S3Store::head(std::string_view key) {
  Request req;
  req.method = "HEAD";
  req.key = std::string(key);
  req.what = What("HEAD", key);
  Result<HttpResponse> resp = Execute(req);
  if (resp.ok()) return InfoFromHeaders(key, *resp);
  const Status& st = resp.status();
  if (st.code() != StatusCode::kPermissionDenied || !st.server_code().empty()) return st;
  // A HEAD reply has no body to say why it is refused, and S3 refuses a HEAD of a missing key
  // to a user who may list the bucket only under a prefix (the HEAD carries no prefix for the
  // policy to match). A one-key listing at the key tells: missing (ENOENT, so files can be
  // created under the prefix), there but unreadable (EACCES), or credentials refused (the
  // listing's reply says so, and Execute renews them, after which the HEAD is asked again).
  ListOptions probe;
  probe.prefix = std::string(key);
  probe.max_keys = 1;
  Result<Listing> listing = list(probe);
  if (!listing.ok()) return st;
  if (listing->objects.empty() || listing->objects.front().key != key) {
    return Status(StatusCode::kNotFound, req.what + ": not found (a listing at the key shows none)",
                  "NoSuchKey");
  }
  OBJFS_ASSIGN_OR_RETURN(HttpResponse again, Execute(req));
  return InfoFromHeaders(key, again);
}

namespace {

// Whether `text` begins with `prefix`, letters in either case (HTTP's range unit is so).
bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

// A ranged GET's body must be the bytes its Content-Range names ("bytes FIRST-LAST/TOTAL"),
// from `offset`, and fill the buffer unless the object ends first: a body cut short (a proxy, a
// broken gateway) would otherwise read as the file's end, and cat would exit 0 with part of it.
// (A server that sends no Content-Range is not checked.)
Status CheckContentRange(const HttpResponse& resp, uint64_t offset, size_t wanted,
                         const std::string& what) {
  const std::string* range = resp.header("content-range");
  if (range == nullptr) return Status::Ok();
  // An empty object's "bytes */0" (older RGW answered a range of one so, not with 416).
  if (resp.buffer_bytes == 0 && StartsWithNoCase(*range, "bytes */")) return Status::Ok();
  // "bytes FIRST-LAST/TOTAL", TOTAL "*" where the server does not know it.
  std::string_view rest = *range;
  const bool unit = StartsWithNoCase(rest, "bytes ");
  if (unit) rest.remove_prefix(6);
  auto take_number = [&rest](uint64_t* value) {
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), *value);
    if (error != std::errc() || end == rest.data()) return false;
    rest.remove_prefix(static_cast<size_t>(end - rest.data()));
    return true;
  };
  auto take = [&rest](std::string_view text) {
    if (!rest.starts_with(text)) return false;
    rest.remove_prefix(text.size());
    return true;
  };
  uint64_t first = 0;
  uint64_t last = 0;
  std::optional<uint64_t> total;
  bool parsed =
      unit && take_number(&first) && take("-") && take_number(&last) && take("/") && last >= first;
  if (parsed && !take("*")) parsed = take_number(&total.emplace()) && last < *total;
  if (!parsed || !rest.empty()) {
    return IoError(what + ": the server's Content-Range '" + range->substr(0, 96) +
                   "' does not parse");
  }
  const uint64_t span = last - first + 1;
  // Short of what was asked only where the object ends (or where its end is not known).
  const bool ends_there = !total || last + 1 == *total;
  if (first != offset || span != resp.buffer_bytes || span > wanted ||
      (span < wanted && !ends_there)) {
    return IoError(what + ": the server sent " + std::to_string(resp.buffer_bytes) +
                   " bytes from " + std::to_string(offset) + " where its Content-Range says '" +
                   range->substr(0, 96) + "' (" + std::to_string(wanted) +
                   " asked): a reply cut short");
  }
  return Status::Ok();
}

}  // namespace

Result<size_t> S3Store::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                             const ETag* if_match) {
  if (buf.empty()) return size_t{0};
  Request req;
  req.method = "GET";
  req.key = std::string(key);
  req.what = What("GET", key);
  req.headers.emplace_back(
      "range", "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + buf.size() - 1));
  if (if_match != nullptr && !if_match->empty()) {
    req.headers.emplace_back("if-match", if_match->quoted());
  }
  req.response_buffer = buf;
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, Execute(req));
  if (resp.status == 416) {
    // At or past the end. A server that refuses a range that starts inside the object (one
    // running past its end) would make the file read short: its "bytes */TOTAL" tells.
    const std::string* range = resp.header("content-range");
    if (range != nullptr && StartsWithNoCase(*range, "bytes */")) {
      std::optional<uint64_t> total = WholeNumber(std::string_view(*range).substr(8));
      if (total && offset < *total) {
        return IoError(req.what + ": the server refuses a range from " + std::to_string(offset) +
                       " of an object it says holds " + std::to_string(*total) + " bytes");
      }
    }
    return size_t{0};
  }
  if (resp.status == 200 && offset != 0) {
    // The server ignored the range and sent the whole object from 0: never hand those bytes
    // out as if they were at `offset`.
    return InternalError(req.what + ": server ignored the Range header");
  }
  if (resp.status == 206) {
    OBJFS_RETURN_IF_ERROR(CheckContentRange(resp, offset, buf.size(), req.what));
  }
  return resp.buffer_bytes;
}

Result<Listing> S3Store::list(const ListOptions& options) {
  Request req;
  req.method = "GET";
  req.bucket_level = true;
  req.what = What("LIST", options.prefix);
  req.query.emplace_back("list-type", "2");
  req.query.emplace_back("encoding-type", "url");
  if (!options.prefix.empty()) req.query.emplace_back("prefix", options.prefix);
  if (!options.delimiter.empty()) req.query.emplace_back("delimiter", options.delimiter);
  if (!options.continuation_token.empty()) {
    req.query.emplace_back("continuation-token", options.continuation_token);
  }
  if (!options.start_after.empty()) req.query.emplace_back("start-after", options.start_after);
  req.query.emplace_back("max-keys", std::to_string(std::clamp(options.max_keys, 1, 1000)));
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, Execute(req));
  Result<Listing> listing = ParseListObjectsV2(resp.body, /*url_encoded=*/true);
  if (!listing.ok()) return listing.status().WithContext(req.what);
  return listing;
}

Result<ObjectInfo> S3Store::put(std::string_view key, const ByteSource& source,
                                const PutOptions& options) {
  PutOptions put = options;
  OBJFS_ASSIGN_OR_RETURN(put.keep_encryption,
                         EncryptionToKeep(key, options.keep_encryption, options.replaces_object));
  if (source.size() > options_.multipart_threshold) return PutMultipart(key, source, put);
  return PutSingle(key, source, put);
}

Result<ObjectInfo> S3Store::PutSingle(std::string_view key, const ByteSource& source,
                                      const PutOptions& options) {
  OBJFS_ASSIGN_OR_RETURN(auto digest, Md5OfSource(source, 0, source.size(), metrics_));
  Request req;
  req.method = "PUT";
  req.key = std::string(key);
  req.what = What("PUT", key);
  req.headers.emplace_back("content-md5", ContentMd5(digest));
  if (!options.content_type.empty()) req.headers.emplace_back("content-type", options.content_type);
  const bool unquoted = unquoted_if_match_.load();
  if (options.if_match) {
    req.headers.emplace_back("if-match",
                             unquoted ? options.if_match->value() : options.if_match->quoted());
  }
  if (options.if_none_match) req.headers.emplace_back("if-none-match", "*");
  AddMetadataHeaders(options.metadata, req.headers);
  KeepEncryption(options.keep_encryption, req.headers);
  req.body_source = &source;
  req.body_size = source.size();
  Result<HttpResponse> sent = Execute(req);
  const auto refused = [&] {
    return !sent.ok() && (options.if_match || options.if_none_match) &&
           sent.status().code() == StatusCode::kPreconditionFailed;
  };
  Result<ObjectInfo> current = InternalError("not asked");
  // Asked where it decides something: the If-Match form, or a lost reply's own bytes.
  if (refused() && (options.if_match || req.unanswered > 0)) current = head(key);
  if (refused() && options.if_match && !unquoted && current.ok() &&
      current->etag == *options.if_match) {
    // RGW compares a PUT's If-Match with its stored, unquoted ETag byte for byte, so the quoted
    // form that HTTP prescribes never matches there. When the object does carry the expected
    // ETag, say it the way the server understands (and from now on at once).
    for (auto& [name, value] : req.headers) {
      if (name == "if-match") value = options.if_match->value();
    }
    sent = Execute(req);
    if (sent.ok()) unquoted_if_match_.store(true);
    if (refused()) current = head(key);
  }
  if (refused() && req.unanswered > 0 && current.ok() && current->etag == ETag::FromMd5(digest) &&
      current->size == source.size() && ETagIsMd5(options.keep_encryption, nullptr)) {
    // An attempt of this PUT that took effect, its reply lost: the retry's condition then
    // fails against the very bytes it stored. (Without a retry the same bytes are another
    // writer's: two mounts appending the same line to one version, one of which is refused.)
    return current;
  }
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, std::move(sent));
  ETag expected = ETag::FromMd5(digest);
  ETag got;
  if (const std::string* v = resp.header("etag")) got = ETag::Parse(*v);
  if (got.is_plain_md5() && got != expected && ETagIsMd5(options.keep_encryption, &resp)) {
    return InternalError(req.what + ": the server's ETag " + got.value() +
                         " does not match the MD5 of the data sent " + expected.value());
  }
  ObjectInfo info;
  info.key = std::string(key);
  info.size = source.size();
  info.etag = got.empty() ? expected : got;
  info.mtime_ns = NowNs();
  info.content_type = options.content_type;
  info.metadata = options.metadata;
  info.has_metadata = true;
  NoteContentType(key, /*by_name=*/true, info);
  // A server that encrypts without saying so gets what was asked, not "none".
  const AtRestEncryption replied = EncryptionFromHeaders(resp);
  info.encryption = replied.algorithm.empty() ? PassedOn(options.keep_encryption) : replied;
  CheckEncryptionConfirmed(key, replied);
  return info;
}

Result<std::string> S3Store::InitiateMultipart(std::string_view key, const HeaderList& headers) {
  Request req;
  req.method = "POST";
  req.key = std::string(key);
  req.what = What("CreateMultipartUpload", key);
  req.query.emplace_back("uploads", "");
  req.headers = headers;
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, Execute(req));
  CheckEncryptionConfirmed(key, EncryptionFromHeaders(resp));
  Result<std::string> id = ParseInitiateMultipartUpload(resp.body);
  if (!id.ok()) return id.status().WithContext(req.what);
  if (options_.journal != nullptr) {
    // Noted before any part is sent: an upload nobody could abort after a crash is not
    // started.
    Status noted = options_.journal->Opened(key, *id);
    if (!noted.ok()) {
      AbortMultipart(key, *id);
      return noted.WithContext(req.what);
    }
  }
  return id;
}

Result<ETag> S3Store::CompleteMultipart(std::string_view key, const std::string& upload_id,
                                        const std::vector<std::pair<int, ETag>>& parts,
                                        const HeaderList& conditions, uint64_t size) {
  Request req;
  req.method = "POST";
  req.key = std::string(key);
  req.what = What("CompleteMultipartUpload", key);
  // The server assembles the parts before it answers.
  req.server_works = true;
  req.server_bytes = size;
  req.query.emplace_back("uploadId", upload_id);
  req.headers = conditions;
  req.headers.emplace_back("content-type", "application/xml");
  req.body = BuildCompleteMultipartUpload(parts);
  Result<HttpResponse> resp = Execute(req);
  if (!resp.ok()) {
    const StatusCode code = resp.status().code();
    if ((code != StatusCode::kNotFound && code != StatusCode::kPreconditionFailed) ||
        req.unanswered == 0) {
      // Refused at the first attempt, the upload was not completed, whatever the key holds
      // (another client's identical edit; a self-copy's own parts): the caller aborts it.
      return resp.status();
    }
    // A completion that took effect and lost its reply is retried, and the retry finds the
    // upload gone (NoSuchUpload, as AWS may answer) or, when conditional, the key no longer
    // as it asked. A key that holds the very object these parts make holds that completion's.
    const std::optional<ETag> made = ETagOfParts(parts);
    if (!made) return resp.status();
    Result<ObjectInfo> now = head(key);
    if (!now.ok() || now->etag != *made || now->size != size) return resp.status();
    if (options_.log) {
      options_.log(LogLevel::kInfo, req.what + ": the key holds the object its parts make (" +
                                        resp.status().message() + "): its reply was lost");
    }
    // Should it still be open after all (an attempt that never arrived, and another writer's
    // identical object), it is aborted rather than left to cost storage: NoSuchUpload once
    // completed, which closes its journal entry too.
    (void)AbortUpload(key, upload_id);
    return *made;
  }
  Result<ETag> etag = ParseCompleteMultipartUpload(resp->body);
  if (!etag.ok()) return etag.status().WithContext(req.what);
  // Completed: the server holds the upload no more (a failure is the caller's to abort).
  if (options_.journal != nullptr) options_.journal->Closed(key, upload_id);
  return etag;  // empty from RGW: the caller computes it from the parts
}

void S3Store::AbortMultipart(std::string_view key, const std::string& upload_id) {
  // Best effort: the upload failed already. One the server still holds stays noted in the
  // journal, and the next mount aborts it.
  (void)AbortUpload(key, upload_id);
}

Status S3Store::AbortUpload(std::string_view key, std::string_view upload_id) {
  Request req;
  req.method = "DELETE";
  req.key = std::string(key);
  req.what = What("AbortMultipartUpload", key);
  req.query.emplace_back("uploadId", std::string(upload_id));
  Result<HttpResponse> resp = Execute(req);
  // NoSuchUpload: aborted or completed already.
  if (!resp.ok() && resp.status().code() != StatusCode::kNotFound) {
    if (options_.journal != nullptr) options_.journal->Abandoned(key, upload_id);
    return resp.status();
  }
  if (options_.journal != nullptr) options_.journal->Closed(key, upload_id);
  return Status::Ok();
}

// Runs `count` part tasks on up to `parallel` threads; stops handing out parts after the first
// failure and returns it.
template <typename PartFn>
static Status RunParts(int count, int parallel, PartFn&& part) {
  Mutex mu;  // lock 17 of fs/lock_order.h; guards the two below
  int next = 0;
  Status first_error;
  auto worker = [&] {
    for (;;) {
      int index;
      {
        MutexLock lock(&mu);
        if (next >= count || !first_error.ok()) return;
        index = next++;
      }
      Status st = part(index);
      if (!st.ok()) {
        MutexLock lock(&mu);
        if (first_error.ok()) first_error = st;
      }
    }
  };
  int threads = std::min(count, parallel);
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return first_error;
}

Result<HttpResponse> S3Store::SendPart(std::string_view key, const std::string& upload_id,
                                       int number, const ByteSource& body, uint64_t offset,
                                       uint64_t length, const std::optional<Md5Digest>& md5) {
  Request req;
  req.method = "PUT";
  req.key = std::string(key);
  req.what = What("UploadPart", key);
  req.query.emplace_back("partNumber", std::to_string(number));
  req.query.emplace_back("uploadId", upload_id);
  if (md5) req.headers.emplace_back("content-md5", ContentMd5(*md5));
  req.body_source = &body;
  req.body_offset = offset;
  req.body_size = length;
  return Execute(req);
}

Result<S3Store::SentPart> S3Store::UploadPart(
    std::string_view key, const std::string& upload_id, int number, const ByteSource& source,
    uint64_t offset, uint64_t length, const std::optional<AtRestEncryption>& keep_encryption) {
  const std::string what = What("UploadPart", key) + ": part " + std::to_string(number);
  auto sent_by = [&](const HttpResponse& resp) {
    SentPart sent;
    if (const std::string* v = resp.header("etag")) sent.etag = ETag::Parse(*v);
    sent.opaque = !ETagIsMd5(keep_encryption, &resp);
    return sent;
  };
  // The part is sent straight from the source, never held whole: parts grow to 5 GiB with the
  // file, and parallel_parts of them in memory could exhaust it.
  if (options_.part_checksum == PartChecksum::kNone) {
    OBJFS_ASSIGN_OR_RETURN(HttpResponse resp,
                           SendPart(key, upload_id, number, source, offset, length, std::nullopt));
    // Unchecked here: the part is what the server says it stored.
    SentPart sent = sent_by(resp);
    if (sent.etag.empty()) return InternalError(what + " has no ETag");
    if (!sent.opaque) sent.md5 = DigestOf(sent.etag);
    return sent;
  }
  if (ETagIsMd5(keep_encryption, nullptr) && !part_etags_opaque_.load()) {
    // The server's part ETag is the MD5 of the bytes it received: hashed here as they are sent,
    // the part is checked by that ETag, in one read of it and with no hashing before its first
    // byte leaves. A part that arrived different is sent again, with Content-MD5 (below), which
    // the server checks itself; it is not completed into the object meanwhile.
    Md5WhileRead hashing(source, offset, length);
    OBJFS_ASSIGN_OR_RETURN(HttpResponse resp,
                           SendPart(key, upload_id, number, hashing, offset, length, std::nullopt));
    SentPart sent = sent_by(resp);
    const std::string etag = sent.etag.empty() ? std::string("none") : sent.etag.value();
    if (sent.opaque) {
      // Encrypted where the mount did not ask for it (the bucket's default): no part ETag of
      // this bucket is an MD5.
      if (!part_etags_opaque_.exchange(true)) {
        LogInfo(what + ": the server encrypts parts (ETag " + etag +
                "), so parts carry Content-MD5 from now on; this one is sent again with it");
      }
    } else if (!sent.etag.is_plain_md5()) {
      // Damaged on the way, or a server whose part ETags are something else: the reply to the
      // send with Content-MD5 tells (below).
      if (metrics_ != nullptr) Bump(metrics_->parts_sent_again);
      LogWarn(what + ": the server's ETag " + etag +
              " is not an MD5: sent again with its Content-MD5");
    } else {
      std::optional<Md5Digest> digest = hashing.TakeDigest();
      if (digest) {
        if (metrics_ != nullptr) Bump(metrics_->bytes_hashed, length);
      } else {
        // Read out of order (a send rewound to its middle): hashed from the source now.
        OBJFS_ASSIGN_OR_RETURN(digest, Md5OfSource(source, offset, length, metrics_));
      }
      const ETag expected = ETag::FromMd5(*digest);
      if (sent.etag == expected) {
        sent.md5 = digest;
        return sent;
      }
      if (metrics_ != nullptr) Bump(metrics_->parts_sent_again);
      LogWarn(what + ": the server's ETag " + sent.etag.value() +
              " is not the MD5 of the bytes sent, " + expected.value() +
              " (damaged on the way?): sent again with its Content-MD5");
    }
  }
  // Hashed, then sent: the server refuses a part that arrived different (BadDigest). A part
  // that changed between the two reads fails the same way rather than storing other bytes.
  OBJFS_ASSIGN_OR_RETURN(Md5Digest digest, Md5OfSource(source, offset, length, metrics_));
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp,
                         SendPart(key, upload_id, number, source, offset, length, digest));
  SentPart sent = sent_by(resp);
  const ETag expected = ETag::FromMd5(digest);
  if (!sent.opaque && sent.etag.is_plain_md5() && sent.etag != expected) {
    return InternalError(what + " ETag does not match its MD5");
  }
  if (!sent.opaque && !sent.etag.is_plain_md5() && ETagIsMd5(keep_encryption, nullptr) &&
      !part_etags_opaque_.exchange(true)) {
    // Twice, or for a part that the server checked by its Content-MD5: this server's part
    // ETags are not MD5s, and parts are hashed before they are sent from now on.
    LogInfo(what + ": the server's part ETags are not MD5s (" +
            (sent.etag.empty() ? std::string("none") : sent.etag.value()) +
            "), so parts carry Content-MD5 from now on");
  }
  if (sent.etag.empty()) sent.etag = expected;
  sent.md5 = digest;
  return sent;
}

Result<ObjectInfo> S3Store::PutMultipart(std::string_view key, const ByteSource& source,
                                         const PutOptions& options) {
  const uint64_t size = source.size();
  if (size > kMaxObjectSize) {
    return Status(
        StatusCode::kInvalidArgument,
        What("PUT", key) + ": " + std::to_string(size) + " bytes; S3 objects are at most 5 TiB",
        "EntityTooLarge");
  }
  const uint64_t part_size = ChoosePartSize(size, options_.part_size);
  const int count = static_cast<int>((size + part_size - 1) / part_size);
  // Conditional multipart completion is not available everywhere: checked before uploading
  // (no part sent in vain), and again right before the completion (below).
  OBJFS_RETURN_IF_ERROR(objfs::CheckPutConditions(*this, key, options, What("PUT", key)));
  HeaderList headers;
  if (!options.content_type.empty()) headers.emplace_back("content-type", options.content_type);
  AddMetadataHeaders(options.metadata, headers);
  KeepEncryption(options.keep_encryption, headers);
  OBJFS_ASSIGN_OR_RETURN(std::string upload_id, InitiateMultipart(key, headers));

  std::vector<std::pair<int, ETag>> parts(count);
  std::vector<std::optional<Md5Digest>> digests(count);
  std::atomic<bool> opaque_etags = !ETagIsMd5(options.keep_encryption, nullptr);
  Status st = RunParts(count, options_.parallel_parts, [&](int index) -> Status {
    const uint64_t offset = static_cast<uint64_t>(index) * part_size;
    OBJFS_ASSIGN_OR_RETURN(SentPart sent,
                           UploadPart(key, upload_id, index + 1, source, offset,
                                      std::min(part_size, size - offset), options.keep_encryption));
    if (sent.opaque) opaque_etags = true;
    parts[index] = {index + 1, sent.etag};
    digests[index] = sent.md5;
    return Status::Ok();
  });
  if (!st.ok()) {
    AbortMultipart(key, upload_id);
    return st;
  }
  // The parts took a while, during which another client may have stored the object.
  if (Status holds = objfs::CheckPutConditions(*this, key, options, What("PUT", key));
      !holds.ok()) {
    AbortMultipart(key, upload_id);
    return holds;
  }
  HeaderList conditions;
  if (options.if_match) conditions.emplace_back("if-match", options.if_match->quoted());
  if (options.if_none_match) conditions.emplace_back("if-none-match", "*");
  Result<ETag> etag = CompleteMultipart(key, upload_id, parts, conditions, size);
  if (!etag.ok()) {
    AbortMultipart(key, upload_id);
    return etag.status();
  }
  // Each part's ETag was checked against its MD5; the object's is the MD5 of theirs. A server
  // that names it (AWS) must agree; one that does not (RGW) gets no HEAD: by then another
  // writer may have replaced the object, which is no failure of this upload.
  std::vector<Md5Digest> known;
  for (const std::optional<Md5Digest>& digest : digests) {
    if (digest) known.push_back(*digest);
  }
  std::optional<ETag> expected;
  if (known.size() == digests.size()) expected = MultipartETag(known);
  if (expected && etag->is_multipart() && *etag != *expected && !opaque_etags) {
    return InternalError(What("PUT", key) + ": the server's ETag " + etag->value() +
                         " does not match the parts sent " + expected->value());
  }
  if (etag->empty() && !expected) {
    OBJFS_ASSIGN_OR_RETURN(ObjectInfo now, head(key));
    *etag = now.etag;
  }
  ObjectInfo info;
  info.key = std::string(key);
  info.size = size;
  info.etag = etag->empty() ? *expected : *etag;
  info.mtime_ns = NowNs();
  info.content_type = options.content_type;
  info.metadata = options.metadata;
  info.has_metadata = true;
  NoteContentType(key, /*by_name=*/true, info);
  info.encryption = PassedOn(options.keep_encryption);
  return info;
}

// A multipart upload whose parts the caller hands in (see Upload in object_store.h).
class S3Store::Session : public Upload {
 public:
  Session(S3Store* store, std::string key, uint64_t part_size, std::string upload_id,
          const UploadOptions& started)
      : store_(store),
        key_(std::move(key)),
        part_size_(part_size),
        upload_id_(std::move(upload_id)),
        started_(started) {}
  ~Session() override { (void)abort(); }

  const std::string& key() const override { return key_; }
  uint64_t part_size() const override { return part_size_; }
  bool whole_parts() const override { return true; }
  uint64_t max_size() const override { return std::min(kMaxObjectSize, part_size_ * kMaxParts); }

  Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
               uint64_t length) override {
    OBJFS_ASSIGN_OR_RETURN(int index, PartOf(offset, length));
    return SendPart(index, source, source_offset, length);
  }

  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    OBJFS_ASSIGN_OR_RETURN(int index, PartOf(offset, length));
    const std::string what = store_->What("UploadPartCopy", base.key) + " to " + key_;
    if (base_offset + length > base.size) {
      return InvalidArgumentError(what + ": bytes past the end of the base");
    }
    if (!base.etag.empty()) OBJFS_RETURN_IF_ERROR(CheckBase(base, what, /*again=*/false));
    Request req;
    req.method = "PUT";
    req.key = key_;
    req.what = what;
    req.server_works = true;
    req.server_bytes = length;
    req.query.emplace_back("partNumber", std::to_string(index + 1));
    req.query.emplace_back("uploadId", upload_id_);
    req.headers.emplace_back("x-amz-copy-source", store_->endpoint_.CopySource(base.key));
    req.headers.emplace_back(
        "x-amz-copy-source-range",
        "bytes=" + std::to_string(base_offset) + "-" + std::to_string(base_offset + length - 1));
    if (!base.etag.empty()) {
      req.headers.emplace_back("x-amz-copy-source-if-match", base.etag.quoted());
    }
    OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, store_->Execute(req));
    Result<CopyResult> result = ParseCopyResult(resp.body);
    if (!result.ok()) return result.status().WithContext(req.what);
    const bool md5 = store_->ETagIsMd5(started_.keep_encryption, &resp);
    MutexLock lock(&mu_);
    parts_[index] =
        Part{length, result->etag, md5 ? DigestOf(result->etag) : std::optional<Md5Digest>()};
    return Status::Ok();
  }

  Result<ObjectInfo> complete(uint64_t size, const PutOptions& options) override {
    std::vector<std::pair<int, ETag>> parts;
    std::vector<Md5Digest> digests;
    bool digests_known = true;
    std::map<std::string, ETag> bases;
    {
      MutexLock lock(&mu_);
      if (finished_) return InvalidArgumentError(store_->What("complete", key_) + ": finished");
      finished_ = true;  // completed now, or aborted
      bases = bases_;
      if (size > max_size()) {
        Status too_large =
            InvalidArgumentError(store_->What("CompleteMultipartUpload", key_) + ": " +
                                 std::to_string(size) + " bytes do not fit in the upload's parts");
        lock.Unlock();
        (void)store_->AbortUpload(key_, upload_id_);
        return too_large;
      }
      const uint64_t count = (size + part_size_ - 1) / part_size_;
      for (uint64_t i = 0; i < count; ++i) {
        auto part = parts_.find(static_cast<int>(i));
        const uint64_t want = std::min(part_size_, size - i * part_size_);
        if (part == parts_.end() || part->second.length != want) {
          Status missing = InvalidArgumentError(store_->What("CompleteMultipartUpload", key_) +
                                                ": part " + std::to_string(i + 1) + " of " +
                                                std::to_string(want) + " bytes was not uploaded");
          lock.Unlock();
          (void)store_->AbortUpload(key_, upload_id_);
          return missing;
        }
        parts.emplace_back(static_cast<int>(i + 1), part->second.etag);
        if (part->second.digest) {
          digests.push_back(*part->second.digest);
        } else {
          digests_known = false;
        }
      }
    }
    Result<ObjectInfo> info = Finish(size, options, parts, digests, digests_known, bases);
    // NoSuchUpload once the upload completed (and only its metadata failed): nothing to drop.
    if (!info.ok()) (void)store_->AbortUpload(key_, upload_id_);
    return info;
  }

  Status abort() override {
    {
      MutexLock lock(&mu_);
      if (finished_) return Status::Ok();
      finished_ = true;
    }
    return store_->AbortUpload(key_, upload_id_);
  }

 private:
  struct Part {
    uint64_t length = 0;
    ETag etag;
    std::optional<Md5Digest> digest;  // known for uploaded parts and plain-MD5 copies
  };

  // The part index of a whole-part range.
  Result<int> PartOf(uint64_t offset, uint64_t length) const {
    if (length == 0 || offset % part_size_ != 0 || length > part_size_ ||
        offset / part_size_ >= static_cast<uint64_t>(kMaxParts)) {
      return InvalidArgumentError(store_->What("UploadPart", key_) + ": bytes " +
                                  std::to_string(offset) + "+" + std::to_string(length) +
                                  " are not one part of " + std::to_string(part_size_));
    }
    return static_cast<int>(offset / part_size_);
  }

  Status SendPart(int index, const ByteSource& source, uint64_t source_offset, uint64_t length) {
    OBJFS_ASSIGN_OR_RETURN(SentPart sent,
                           store_->UploadPart(key_, upload_id_, index + 1, source, source_offset,
                                              length, started_.keep_encryption));
    MutexLock lock(&mu_);
    // An opaque part ETag leaves the object's unchecked: the server's, or a HEAD's.
    parts_[index] = Part{length, sent.etag, sent.opaque ? std::nullopt : sent.md5};
    return Status::Ok();
  }

  // Checks that the base still has its ETag: before its first copy, and (`again`) before the
  // upload completes. Servers that ignore x-amz-copy-source-if-match (RGW) would otherwise copy
  // a replaced base's bytes unnoticed.
  Status CheckBase(const ObjectInfo& base, const std::string& what, bool again) {
    if (!again) {
      MutexLock lock(&mu_);
      auto seen = bases_.find(base.key);
      if (seen != bases_.end() && seen->second == base.etag) return Status::Ok();
    }
    Result<ObjectInfo> current = store_->head(base.key);
    if (!current.ok() && current.status().code() != StatusCode::kNotFound) {
      return current.status().WithContext(what);
    }
    if (!current.ok() || current->etag != base.etag) {
      return PreconditionFailedError(what + ": the base changed (ETag " +
                                     (current.ok() ? current->etag.value() : "none") +
                                     ", expected " + base.etag.value() + ")");
    }
    if (!again) {
      MutexLock lock(&mu_);
      bases_.emplace(base.key, base.etag);
    }
    return Status::Ok();
  }

  Result<ObjectInfo> Finish(uint64_t size, const PutOptions& options,
                            std::vector<std::pair<int, ETag>>& parts,
                            std::vector<Md5Digest>& digests, bool digests_known,
                            const std::map<std::string, ETag>& bases) {
    const std::string what = store_->What("CompleteMultipartUpload", key_);
    if (parts.empty()) {
      // S3 needs one part: an empty object is one empty part.
      MemorySource empty(std::string_view{});
      OBJFS_RETURN_IF_ERROR(SendPart(0, empty, 0, 0));
      parts.emplace_back(1, ETag::FromMd5(Md5Of(std::string_view{})));
      digests.push_back(Md5Of(std::string_view{}));
    }
    for (const auto& [base_key, etag] : bases) {
      // (The key's own version, named by the completion's If-Match: checked just below.)
      if (base_key == key_ && options.if_match && etag == *options.if_match) continue;
      ObjectInfo base;
      base.key = base_key;
      base.etag = etag;
      OBJFS_RETURN_IF_ERROR(CheckBase(base, what, /*again=*/true));
    }
    // Conditional completion is not available everywhere: checked first, as put() does.
    OBJFS_RETURN_IF_ERROR(objfs::CheckPutConditions(*store_, key_, options, what));
    HeaderList conditions;
    if (options.if_match) conditions.emplace_back("if-match", options.if_match->quoted());
    if (options.if_none_match) conditions.emplace_back("if-none-match", "*");
    OBJFS_ASSIGN_OR_RETURN(ETag etag,
                           store_->CompleteMultipart(key_, upload_id_, parts, conditions, size));
    if (digests_known) {
      const ETag expected = MultipartETag(digests);
      if (etag.is_multipart() && etag != expected) {
        return InternalError(what + ": the server's ETag " + etag.value() +
                             " does not match the parts sent " + expected.value());
      }
      if (etag.empty()) etag = expected;
    }
    if (etag.empty()) {
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo now, store_->head(key_));
      etag = now.etag;
    }
    ObjectInfo info;
    info.key = key_;
    info.size = size;
    info.etag = etag;
    info.mtime_ns = NowNs();
    info.content_type = started_.content_type;
    info.metadata = started_.metadata;
    info.has_metadata = true;
    info.encryption = store_->PassedOn(started_.keep_encryption);
    if (options.metadata == started_.metadata && options.content_type == started_.content_type) {
      store_->NoteContentType(key_, /*by_name=*/true, info);
      return info;
    }
    // Metadata belongs to CreateMultipartUpload, which came before it was known: a self-copy
    // gives the object its final metadata.
    SetAttributesOptions attributes;
    attributes.expected = info;
    attributes.content_type = options.content_type;
    attributes.source_known_current = true;
    return store_->set_attributes(key_, options.metadata, attributes);
  }

  S3Store* store_;
  const std::string key_;
  const uint64_t part_size_;
  const std::string upload_id_;
  const UploadOptions started_;  // the metadata and content type the upload was created with
  Mutex mu_;                     // lock 25 of fs/lock_order.h: guards the two below
  bool finished_ GUARDED_BY(mu_) = false;
  std::map<int, Part> parts_ GUARDED_BY(mu_);
  std::map<std::string, ETag> bases_ GUARDED_BY(mu_);  // bases checked, by key
};

Result<std::unique_ptr<Upload>> S3Store::start_upload(std::string_view key,
                                                      const UploadOptions& options) {
  if (options.size_hint > kMaxObjectSize) {
    return Status(StatusCode::kFileTooLarge,
                  What("CreateMultipartUpload", key) + ": " + std::to_string(options.size_hint) +
                      " bytes; S3 objects are at most 5 TiB",
                  "EntityTooLarge");
  }
  uint64_t part_size = options.part_size != 0 ? options.part_size : options_.part_size;
  part_size = std::clamp(part_size, kMinPartSize, kMaxPartSize);
  part_size = ChoosePartSize(options.size_hint, part_size);
  OBJFS_ASSIGN_OR_RETURN(std::optional<AtRestEncryption> encryption,
                         EncryptionToKeep(key, options.keep_encryption, options.replaces_object));
  HeaderList headers;
  if (!options.content_type.empty()) headers.emplace_back("content-type", options.content_type);
  AddMetadataHeaders(options.metadata, headers);
  KeepEncryption(encryption, headers);
  OBJFS_ASSIGN_OR_RETURN(std::string upload_id, InitiateMultipart(key, headers));
  UploadOptions started = options;
  started.keep_encryption = encryption;
  return std::unique_ptr<Upload>(
      std::make_unique<Session>(this, std::string(key), part_size, std::move(upload_id), started));
}

void S3Store::CheckEncryptionConfirmed(std::string_view key, const AtRestEncryption& replied) {
  const std::string& asked = options_.object_headers.sse;
  if (asked.empty() || !replied.algorithm.empty()) return;
  if (!encryption_unconfirmed_logged_.exchange(true)) {
    LogWarn(What("PUT", key) + ": the server's reply does not confirm sse=" + asked +
            ", so objects this mount writes may be stored unencrypted");
  }
}

bool S3Store::ETagIsMd5(const std::optional<AtRestEncryption>& asked,
                        const HttpResponse* reply) const {
  std::string_view replied;
  bool customer_key = false;
  if (reply != nullptr) {
    if (const std::string* v = reply->header("x-amz-server-side-encryption")) replied = *v;
    customer_key = reply->header("x-amz-server-side-encryption-customer-algorithm") != nullptr;
  }
  return StoredETagIsMd5(options_.object_headers,
                         asked && !MountEncrypts() ? asked->algorithm : std::string_view(), replied,
                         customer_key);
}

std::optional<AtRestEncryption> S3Store::PassedOn(
    const std::optional<AtRestEncryption>& kept) const {
  if (MountEncrypts()) return std::nullopt;  // its own setting goes with every copy anyway
  // None named: the bucket's default, which a copy naming none gets too.
  return kept.value_or(AtRestEncryption{});
}

bool S3Store::MountEncrypts() const {
  return !options_.object_headers.sse.empty() || !options_.object_headers.sse_c_key.empty();
}

void S3Store::NoteContentType(std::string_view key, bool by_name, ObjectInfo& info) const {
  std::string type = info.content_type;
  if (type.empty()) {
    if (auto kept = info.metadata.find(kContentTypeMetadata); kept != info.metadata.end()) {
      type = kept->second;
    }
  }
  if (type.empty() && by_name && options_.object_headers.mime_types != nullptr) {
    type = options_.object_headers.mime_types->TypeOf(key);
  }
  if (type.empty()) return;
  info.content_type = type;
  info.metadata[kContentTypeMetadata] = std::move(type);
}

void S3Store::KeepEncryption(const std::optional<AtRestEncryption>& encryption,
                             HeaderList& headers) const {
  // The mount's own setting, added to every request that creates an object, wins.
  if (MountEncrypts() || !encryption || encryption->algorithm.empty()) return;
  headers.emplace_back("x-amz-server-side-encryption", encryption->algorithm);
  if (!encryption->kms_key_id.empty()) {
    headers.emplace_back("x-amz-server-side-encryption-aws-kms-key-id", encryption->kms_key_id);
  }
}

Result<std::optional<AtRestEncryption>> S3Store::EncryptionToKeep(
    std::string_view key, const std::optional<AtRestEncryption>& known, bool replaces) {
  if (MountEncrypts() || known || !replaces) return known;
  // The object replaced was seen only in a listing: ask.
  Result<ObjectInfo> current = head(key);
  if (current.ok()) return current->encryption;
  if (current.status().code() == StatusCode::kNotFound) return std::optional<AtRestEncryption>();
  return current.status();
}

Status S3Store::RetypeByName(const ObjectInfo& src, std::string_view dst, CopyOptions& copy) {
  const MimeTypes* mime = options_.object_headers.mime_types.get();
  if (mime == nullptr) return Status::Ok();
  const std::string by_old = mime->TypeOf(src.key);
  const std::string by_new = mime->TypeOf(dst);
  if (by_new == by_old) return Status::Ok();  // the type stays what it is
  Metadata metadata;
  std::string type = src.content_type;
  if (copy.replace_metadata) {
    metadata = *copy.replace_metadata;
  } else if (copy.source_known_current && src.has_metadata) {
    metadata = src.metadata;  // this mount's own write, as it stored it
  } else {
    // Another client's object: its metadata as it is now. New metadata from a cached record
    // would revert a change made since that keeps the ETag (another client's chmod).
    OBJFS_ASSIGN_OR_RETURN(ObjectInfo now, head(src.key));
    if (copy.if_match_source && !src.etag.empty() && now.etag != src.etag) {
      return SourceChanged(What("COPY", src.key), now.etag, src.etag);
    }
    metadata = std::move(now.metadata);
    type = now.content_type;
  }
  if (auto kept = metadata.find(kContentTypeMetadata); kept != metadata.end()) type = kept->second;
  if (copy.content_type) type = *copy.content_type;
  // The old name gives none: the server's default, stored or noted as none.
  const bool by_name = by_old.empty() ? IsUntyped(type) : type == by_old;
  if (!by_name) return Status::Ok();
  if (by_new.empty()) {
    // `mv page.html page.orig`: the old name's type no longer describes the file, and the new
    // name gives none. The copy names none, as a new file of that name would: the server's
    // default.
    metadata.erase(kContentTypeMetadata);
  } else {
    metadata[kContentTypeMetadata] = by_new;
  }
  copy.replace_metadata = std::move(metadata);
  copy.content_type = by_new;
  return Status::Ok();
}

Result<ObjectInfo> S3Store::copy(const ObjectInfo& src, std::string_view dst,
                                 const CopyOptions& options) {
  CopyOptions resolved = options;
  if (options.retype_by_name) OBJFS_RETURN_IF_ERROR(RetypeByName(src, dst, resolved));
  if (options.replaces_destination && !options.keep_encryption && !MountEncrypts()) {
    // The destination's own encryption, unknown to the caller, is what it keeps.
    Result<ObjectInfo> current = head(dst);
    if (current.ok()) {
      resolved.keep_encryption = current->encryption;
    } else if (current.status().code() != StatusCode::kNotFound) {
      return current.status();
    }
  }
  if (src.size > options_.copy_part_threshold) return CopyMultipart(src, dst, resolved);
  return CopySingle(src, dst, resolved);
}

Result<ObjectInfo> S3Store::set_attributes(std::string_view key, const Metadata& metadata,
                                           const SetAttributesOptions& options) {
  ObjectInfo src = options.expected;
  src.key = std::string(key);
  CopyOptions copy;
  copy.replace_metadata = metadata;
  copy.content_type = options.content_type;
  copy.if_match_source = !src.etag.empty();
  copy.source_known_current = options.source_known_current;
  copy.keep_tags = true;
  return this->copy(src, key, copy);
}

std::optional<std::string> S3Store::TagsToKeep(const ObjectInfo& source,
                                               const CopyOptions& options) {
  if (!options.keep_tags || source.tag_count == 0) return std::nullopt;
  Request req;
  req.method = "GET";
  req.key = source.key;
  req.query.emplace_back("tagging", "");
  req.what = What("GetObjectTagging", source.key);
  Result<HttpResponse> resp = Execute(req);
  if (!resp.ok()) {
    LogWarn(resp.status().message() + "; the copy goes on without the object's " +
            std::to_string(source.tag_count) + " tag(s)");
    return std::nullopt;
  }
  return std::move(resp->body);
}

void S3Store::RestoreTags(std::string_view key, const std::optional<std::string>& tags) {
  if (!tags) return;
  Request req;
  req.method = "PUT";
  req.key = std::string(key);
  req.query.emplace_back("tagging", "");
  req.what = What("PutObjectTagging", key);
  req.body = *tags;
  auto digest = Md5Of(std::span<const std::byte>(
      reinterpret_cast<const std::byte*>(req.body.data()), req.body.size()));
  req.headers.emplace_back("content-md5", ContentMd5(digest));
  req.headers.emplace_back("content-type", "application/xml");
  Result<HttpResponse> resp = Execute(req);
  if (!resp.ok()) LogWarn(resp.status().message() + "; the copy has lost its source's tags");
}

Result<ObjectInfo> S3Store::CopySingle(const ObjectInfo& src, std::string_view dst,
                                       const CopyOptions& options) {
  // New metadata replaces the old, Content-Type included: without one given, the object keeps
  // its own, which the caller's `src` may not know (the HEAD below learns it).
  std::string type_seen = src.content_type;
  // Without encryption of its own, a copy must name the source's, or it gets the bucket's
  // default (AWS) or none (RGW): a file another client encrypted would be decrypted by a cp,
  // mv or chmod.
  std::optional<AtRestEncryption> encryption = src.encryption;
  std::optional<ObjectInfo> current;  // the source as a HEAD here saw it
  const bool check_source = options.if_match_source && !src.etag.empty() &&
                            !(options.source_known_current && src.etag.is_plain_md5());
  // A plain-MD5 source known to be current skips this: a copy of other bytes shows in the
  // result's ETag (below). Other ETags could not tell.
  if (check_source || (!encryption && !MountEncrypts() && !options.keep_encryption)) {
    // Some servers (RGW) ignore x-amz-copy-source-if-match: check the source ourselves so that
    // a copy of a changed source fails before it has touched the destination.
    OBJFS_ASSIGN_OR_RETURN(current, head(src.key));
    if (options.if_match_source && !src.etag.empty() && current->etag != src.etag) {
      return SourceChanged(What("COPY", src.key), current->etag, src.etag);
    }
    if (type_seen.empty()) type_seen = current->content_type;
    encryption = current->encryption;
  }
  const std::optional<AtRestEncryption> named =
      options.keep_encryption ? options.keep_encryption : encryption;
  // Made of parts with UploadPartCopy, from the source as checked here (not HEADed again).
  auto from_parts = [&] {
    ObjectInfo source = current.value_or(src);
    source.key = src.key;
    source.encryption = encryption;
    if (source.content_type.empty()) source.content_type = type_seen;
    CopyOptions again = options;
    again.if_match_source = options.if_match_source && !src.etag.empty();
    return CopyMultipart(source, dst, again, /*source_checked=*/current.has_value());
  };
  // RGW 16.2 stores a CopyObject in the clear whatever SSE-KMS it names, and refuses one from
  // an SSE-KMS source with 501, but encrypts an upload created with SSE-KMS and copies ranges
  // into it: a copy that is to be SSE-KMS is made of parts, on every server.
  if (IsKmsAlgorithm(options_.object_headers.sse) ||
      (!MountEncrypts() && named && IsKmsAlgorithm(named->algorithm))) {
    return from_parts();
  }
  // A copy with the COPY directive keeps the tags itself (S3's x-amz-tagging-directive defaults
  // to COPY; RGW too). One with new metadata may drop them (RGW does): read them before it,
  // since onto itself it replaces the version that has them.
  const std::optional<std::string> tags = !options.replace_metadata ? std::nullopt
                                          : current                 ? TagsToKeep(*current, options)
                                                                    : TagsToKeep(src, options);
  Request req;
  req.method = "PUT";
  req.key = std::string(dst);
  req.what = What("COPY", src.key) + " to " + std::string(dst);
  req.server_works = true;
  req.server_bytes = src.size;
  req.headers.emplace_back("x-amz-copy-source", endpoint_.CopySource(src.key));
  if (options.if_match_source && !src.etag.empty()) {
    req.headers.emplace_back("x-amz-copy-source-if-match", src.etag.quoted());
  }
  if (options.replace_metadata) {
    req.headers.emplace_back("x-amz-metadata-directive", "REPLACE");
    std::string type = options.content_type.value_or(type_seen);
    if (!type.empty()) req.headers.emplace_back("content-type", type);
    AddMetadataHeaders(*options.replace_metadata, req.headers);
  } else {
    req.headers.emplace_back("x-amz-metadata-directive", "COPY");
  }
  KeepEncryption(named, req.headers);
  Result<HttpResponse> sent = Execute(req);
  if (!sent.ok() && sent.status().code() == StatusCode::kUnsupported) {
    if (!copy_refused_logged_.exchange(true)) {
      LogInfo(sent.status().message() + "; such copies are made with UploadPartCopy");
    }
    return from_parts();
  }
  OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, std::move(sent));
  Result<CopyResult> result = ParseCopyResult(resp.body);
  if (!result.ok()) return result.status().WithContext(req.what);
  if (options.if_match_source && src.etag.is_plain_md5() && result->etag.is_plain_md5() &&
      result->etag != src.etag && ETagIsMd5(named, &resp) &&
      (!encryption || StoredETagIsMd5(ObjectHeaderOptions{}, encryption->algorithm))) {
    // The source changed between the check above and the copy: a plain-MD5 copy of the
    // expected source has the source's ETag, so a different one means other bytes.
    return SourceChanged(req.what, result->etag, src.etag);
  }
  ObjectInfo info;
  info.key = std::string(dst);
  info.size = src.size;
  info.etag = result->etag;
  info.mtime_ns = result->mtime_ns > 0 ? result->mtime_ns : NowNs();
  if (options.replace_metadata) {
    info.metadata = *options.replace_metadata;
    info.content_type = options.content_type.value_or(type_seen);
    info.has_metadata = true;
    NoteContentType(dst, /*by_name=*/false, info);
  } else {
    info.metadata = src.metadata;
    info.content_type = src.content_type;
    info.has_metadata = src.has_metadata;
  }
  info.encryption = PassedOn(named);
  RestoreTags(dst, tags);
  if (info.etag.empty()) {
    OBJFS_ASSIGN_OR_RETURN(info, head(dst));
  }
  return info;
}

Result<ObjectInfo> S3Store::CopyMultipart(const ObjectInfo& src, std::string_view dst,
                                          const CopyOptions& options, bool source_checked) {
  ObjectInfo source = src;
  if (!source_checked &&
      ((!options.replace_metadata && !source.has_metadata) || options.if_match_source ||
       (!source.encryption && !MountEncrypts() && !options.keep_encryption))) {
    // The new upload must carry the source's metadata and encryption itself (COPY has no
    // meaning here), and since some servers ignore x-amz-copy-source-if-match, check the
    // source first.
    OBJFS_ASSIGN_OR_RETURN(source, head(src.key));
    if (options.if_match_source && !src.etag.empty() && source.etag != src.etag) {
      return SourceChanged(What("COPY", src.key), source.etag, src.etag);
    }
  }
  const Metadata& metadata = options.replace_metadata ? *options.replace_metadata : source.metadata;
  std::string type = options.content_type.value_or(source.content_type);
  const std::optional<AtRestEncryption> named =
      options.keep_encryption ? options.keep_encryption : source.encryption;
  if (source.size == 0) {
    // No range to copy: an empty object with the same attributes. Onto itself, only over the
    // version seen: another client's write since must not be emptied.
    PutOptions put;
    put.metadata = metadata;
    put.content_type = type;
    put.keep_encryption = named;
    if (dst == src.key && !source.etag.empty()) put.if_match = source.etag;
    const std::optional<std::string> tags = TagsToKeep(source, options);
    Result<ObjectInfo> put_info = PutSingle(dst, MemorySource(std::string_view()), put);
    if (put_info.ok()) RestoreTags(dst, tags);
    return put_info;
  }
  HeaderList headers;
  if (!type.empty()) headers.emplace_back("content-type", type);
  AddMetadataHeaders(metadata, headers);
  KeepEncryption(named, headers);
  OBJFS_ASSIGN_OR_RETURN(std::string upload_id, InitiateMultipart(dst, headers));

  const uint64_t part_size = options_.copy_part_size;
  const int count = static_cast<int>((source.size + part_size - 1) / part_size);
  std::vector<std::pair<int, ETag>> parts(count);
  Status st = RunParts(count, options_.parallel_parts, [&](int index) -> Status {
    uint64_t first = static_cast<uint64_t>(index) * part_size;
    uint64_t last = std::min(first + part_size, source.size) - 1;
    Request req;
    req.method = "PUT";
    req.key = std::string(dst);
    req.what = What("UploadPartCopy", src.key) + " to " + std::string(dst);
    req.server_works = true;
    req.server_bytes = last - first + 1;
    req.query.emplace_back("partNumber", std::to_string(index + 1));
    req.query.emplace_back("uploadId", upload_id);
    req.headers.emplace_back("x-amz-copy-source", endpoint_.CopySource(src.key));
    req.headers.emplace_back("x-amz-copy-source-range",
                             "bytes=" + std::to_string(first) + "-" + std::to_string(last));
    if (options.if_match_source && !src.etag.empty()) {
      req.headers.emplace_back("x-amz-copy-source-if-match", src.etag.quoted());
    }
    OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, Execute(req));
    Result<CopyResult> result = ParseCopyResult(resp.body);
    if (!result.ok()) return result.status().WithContext(req.what);
    parts[index] = {index + 1, result->etag};
    return Status::Ok();
  });
  if (!st.ok()) {
    AbortMultipart(dst, upload_id);
    return st;
  }
  // Each part is copied from whatever version is there when it runs (RGW ignores the
  // condition above): another client's write in between would make the copy a mix of two
  // versions. A version keeps its ETag for life, so the same one now as before the first part
  // means every part came from it. With a version to match, one part is checked too: the copy
  // then has that version's bytes, whatever its new ETag (set_attributes' self-copy).
  const bool match = options.if_match_source && !src.etag.empty() && source.etag == src.etag;
  // The tags are read last, just before the upload completes (onto itself, that replaces the
  // version that has them): tags another client set while the parts were copied are kept too.
  ObjectInfo tagged = source;
  if ((count > 1 || match) && !source.etag.empty()) {
    Result<ObjectInfo> after = head(src.key);
    if (!after.ok()) {
      AbortMultipart(dst, upload_id);
      return after.status();
    }
    if (after->etag != source.etag) {
      AbortMultipart(dst, upload_id);
      return SourceChanged(What("COPY", src.key), after->etag, source.etag, " while it was copied");
    }
    tagged.tag_count = after->tag_count;
  }
  const std::optional<std::string> tags = TagsToKeep(tagged, options);
  Result<ETag> etag = CompleteMultipart(dst, upload_id, parts, {}, source.size);
  if (!etag.ok()) {
    AbortMultipart(dst, upload_id);
    return etag.status();
  }
  if (etag->empty()) {
    // RGW names no ETag; UploadPartCopy results are the parts' MD5s, which give it.
    if (std::optional<ETag> made = ETagOfParts(parts)) {
      etag = *made;
    } else {
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo info, head(dst));
      etag = info.etag;
    }
  }
  ObjectInfo info;
  info.key = std::string(dst);
  info.size = source.size;
  info.etag = *etag;
  info.mtime_ns = NowNs();
  info.content_type = type;
  info.metadata = metadata;
  info.has_metadata = true;
  NoteContentType(dst, /*by_name=*/false, info);
  info.encryption = PassedOn(named);
  info.same_bytes_as_source = match;
  RestoreTags(dst, tags);
  return info;
}

Status S3Store::remove(std::string_view key) {
  Request req;
  req.method = "DELETE";
  req.key = std::string(key);
  req.what = What("DELETE", key);
  Result<HttpResponse> resp = Execute(req);
  if (!resp.ok() && resp.status().code() != StatusCode::kNotFound) return resp.status();
  return Status::Ok();
}

Status S3Store::remove_if_match(std::string_view key, const ETag& etag, bool known_current) {
  const std::string what = What("DELETE", key);
  if (!known_current) {
    // Looked at first, as RGW (16) ignores If-Match on DELETE: that leaves another client the
    // round trip up to the DELETE. AWS (and RGW since 2025) checks it where it deletes.
    OBJFS_ASSIGN_OR_RETURN(bool there, HoldsVersion(key, etag));
    if (!there) return Status::Ok();
  }
  Request req;
  req.method = "DELETE";
  req.key = std::string(key);
  req.what = what;
  const bool unquoted = unquoted_if_match_.load();
  req.headers.emplace_back("if-match", unquoted ? etag.value() : etag.quoted());
  Result<HttpResponse> resp = Execute(req);
  if (!resp.ok() && resp.status().code() == StatusCode::kPreconditionFailed && !unquoted) {
    // A server that compares the stored, unquoted ETag byte for byte (as RGW's PUT does) is
    // asked again that way when the object still carries it.
    Result<ObjectInfo> again = head(key);
    if (again.ok() && again->etag == etag) {
      req.headers.back().second = etag.value();
      resp = Execute(req);
      if (resp.ok()) unquoted_if_match_.store(true);
    }
  }
  // NoSuchKey: gone already, or by an attempt whose reply was lost.
  if (!resp.ok() && resp.status().code() != StatusCode::kNotFound) return resp.status();
  return Status::Ok();
}

Status S3Store::remove_many(const std::vector<std::string>& keys) {
  for (size_t start = 0; start < keys.size(); start += kMaxDeleteBatch) {
    size_t end = std::min(keys.size(), start + kMaxDeleteBatch);
    std::vector<std::string> batch(keys.begin() + static_cast<long>(start),
                                   keys.begin() + static_cast<long>(end));
    Request req;
    req.method = "POST";
    req.bucket_level = true;
    req.what = What("DeleteObjects", "");
    req.query.emplace_back("delete", "");
    req.body = BuildDeleteObjects(batch);
    auto digest = Md5Of(std::span<const std::byte>(
        reinterpret_cast<const std::byte*>(req.body.data()), req.body.size()));
    req.headers.emplace_back("content-md5", ContentMd5(digest));
    req.headers.emplace_back("content-type", "application/xml");
    OBJFS_ASSIGN_OR_RETURN(HttpResponse resp, Execute(req));
    Result<std::vector<DeleteFailure>> failures = ParseDeleteResult(resp.body);
    if (!failures.ok()) return failures.status().WithContext(req.what);
    std::string failed;
    for (const DeleteFailure& f : *failures) {
      if (f.code == "NoSuchKey") continue;
      if (!failed.empty()) failed += ", ";
      failed += f.key + " (" + f.code + ": " + f.message + ")";
    }
    if (!failed.empty()) {
      return Status(StatusCode::kIoError, req.what + ": could not delete " + failed,
                    failures->front().code);
    }
  }
  return Status::Ok();
}

Status S3Store::DiscoverRegion() {
  Request req;
  req.method = "HEAD";
  req.bucket_level = true;
  req.raw_reply = true;
  req.what = "HEAD s3://" + endpoint_.bucket() + " at " + endpoint_.endpoint();
  Result<HttpResponse> resp = Execute(req);
  // Every HTTP reply comes back; a failure is the endpoint's (unreachable, timed out), which
  // the listing would only meet again after as long a wait.
  if (!resp.ok()) return resp.status();
  const std::string* region = resp->header("x-amz-bucket-region");
  if (region == nullptr || region->empty() || *region == options_.region) return Status::Ok();
  // AWS's own endpoint names the region; one given explicitly is kept.
  OBJFS_ASSIGN_OR_RETURN(endpoint_, S3Endpoint::Create(options_.endpoint, *region,
                                                       endpoint_.bucket(), options_.addressing));
  options_.region = *region;
  return Status::Ok();
}

Status S3Store::CheckBucket(std::string_view prefix) {
  if (options_.discover_region) OBJFS_RETURN_IF_ERROR(DiscoverRegion());
  // A one-key listing rather than HEAD: its error replies carry a body with the server's code
  // (SignatureDoesNotMatch, InvalidAccessKeyId, NoSuchBucket), which a HEAD reply cannot.
  // Only the mount's prefix: a user may be allowed that and nothing else of the bucket.
  Request req;
  req.method = "GET";
  req.bucket_level = true;
  req.what =
      "LIST s3://" + endpoint_.bucket() + "/" + std::string(prefix) + " at " + endpoint_.endpoint();
  req.query.emplace_back("list-type", "2");
  req.query.emplace_back("max-keys", "1");
  if (!prefix.empty()) req.query.emplace_back("prefix", std::string(prefix));
  Result<HttpResponse> resp = Execute(req);
  if (resp.ok()) return Status::Ok();
  Status st = resp.status();
  if (st.code() == StatusCode::kNotFound) {
    return Status(st.code(),
                  "bucket '" + endpoint_.bucket() + "' does not exist at " + endpoint_.endpoint(),
                  st.server_code());
  }
  if (st.code() == StatusCode::kPermissionDenied) {
    const std::string& code = st.server_code();
    if (code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId") {
      return Status(st.code(),
                    "access to bucket '" + endpoint_.bucket() + "' at " + endpoint_.endpoint() +
                        " denied: check the access key and secret (" + st.message() + ")",
                    code);
    }
    if (code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired") {
      return Status(st.code(),
                    "access to bucket '" + endpoint_.bucket() + "' at " + endpoint_.endpoint() +
                        " denied: the temporary credentials are no longer valid (" + st.message() +
                        ")",
                    code);
    }
    std::string scope = "arn:aws:s3:::" + endpoint_.bucket();
    if (!prefix.empty()) scope += " (for the prefix '" + std::string(prefix) + "')";
    const std::string denied = "the mount's check, ListObjectsV2 of s3://" + endpoint_.bucket() +
                               "/" + std::string(prefix) + ", was denied: ";
    // Some servers deny unknown keys and wrong secrets with a plain AccessDenied too (Ceph RGW
    // with STS enabled). A ListBuckets, which any valid key may send to RGW (AWS wants
    // s3:ListAllMyBuckets), tells the keys' fault from the policy's where it can. Where that is
    // denied too (a user scoped to one bucket, on AWS or MinIO), one more ListBuckets, signed
    // with a wrong secret, asks whether the server says SignatureDoesNotMatch to a wrong
    // secret: if it does, it did not say so to ours, and the keys are right.
    Request probe;
    probe.method = "GET";
    probe.service_level = true;
    probe.what = "ListBuckets at " + endpoint_.endpoint();
    Result<HttpResponse> keys = Execute(probe);
    const std::string keys_code = keys.ok() ? std::string() : keys.status().server_code();
    if (keys_code == "SignatureDoesNotMatch" || keys_code == "InvalidAccessKeyId") {
      return Status(st.code(),
                    "access to bucket '" + endpoint_.bucket() + "' at " + endpoint_.endpoint() +
                        " denied: check the access key and secret (" + keys.status().message() +
                        ")",
                    keys_code);
    }
    if (!keys.ok() && keys.status().code() == StatusCode::kPermissionDenied &&
        !TellsWrongSecrets(probe)) {
      return Status(st.code(),
                    denied + "either the user needs s3:ListBucket on " + scope +
                        ", or the access key or secret is wrong: ListBuckets was denied too, and "
                        "the server does not say which (" +
                        st.message() + ")",
                    code);
    }
    // The keys were accepted; the user's policy does not allow the listing.
    return Status(st.code(),
                  denied + "the user needs s3:ListBucket on " + scope + " (" + st.message() + ")",
                  code);
  }
  return st;
}

bool S3Store::TellsWrongSecrets(const Request& probe) {
  Request wrong = probe;
  wrong.wrong_secret = true;
  wrong.what = probe.what + " (signed with a wrong secret, to learn how the server answers one)";
  Credentials used;
  // Sent once, without the chain's renewal after a denial: the answer is the point.
  Result<HttpResponse> told = ExecuteWithRetries(wrong, &used);
  return !told.ok() && told.status().server_code() == "SignatureDoesNotMatch";
}

Status S3Store::CreateBucket() {
  Request req;
  req.method = "PUT";
  req.bucket_level = true;
  req.what = "CreateBucket s3://" + endpoint_.bucket();
  if (options_.region != "us-east-1" && !options_.region.empty()) {
    req.body =
        "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<LocationConstraint>" +
        XmlEscape(options_.region) + "</LocationConstraint></CreateBucketConfiguration>";
  }
  Result<HttpResponse> resp = Execute(req);
  return resp.status();
}

}  // namespace objfs::s3
