// The S3 client: an ObjectStore over one bucket of AWS S3, Ceph RGW, MinIO or Ozone.
//
// Every request is signed with SigV4 (re-signed on each retry), sent on a pooled keep-alive
// connection, and retried with exponential back-off and jitter on 5xx, SlowDown, 429 and
// transport failures. A 5xx or a timeout is never reported as NotFound. Uploads carry
// Content-MD5 and the returned ETag is checked against what was sent; large uploads and copies
// are multipart with parts in parallel and are aborted on failure.
//
// Quirks of real engines handled here: an empty ETag from CompleteMultipartUpload (RGW) is
// computed from the parts' MD5s (a HEAD could see another writer's newer object); a
// CopyObjectResult ETag may be unquoted; a copy of a multipart object may
// keep its "-N" ETag; x-amz-copy-source-if-match may be ignored; a 200 reply may carry an
// <Error> body.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/log.h"
#include "backend/md5.h"
#include "backend/metrics.h"
#include "backend/object_store.h"
#include "backend/retry.h"
#include "backend/s3/credentials.h"
#include "backend/s3/http_client.h"
#include "backend/s3/object_headers.h"
#include "backend/s3/s3_endpoint.h"
#include "backend/s3/sigv4.h"
#include "backend/upload_journal.h"

namespace objfs::s3 {

// S3's limits (AWS's documented ones; RGW's defaults are the same).
inline constexpr uint64_t kMinPartSize = 5ull << 20;    // every part but the last
inline constexpr uint64_t kMaxPartSize = 5ull << 30;    // also the largest single PUT
inline constexpr int kMaxParts = 10000;                 // parts of one multipart upload
inline constexpr uint64_t kMaxObjectSize = 5ull << 40;  // 5 TiB
inline constexpr size_t kMaxKeyBytes = 1024;            // UTF-8 bytes of a key

// The part size for uploading `size` bytes: `configured`, or, when that would take more than
// kMaxParts parts, the smallest whole number of MiB that keeps them to kMaxParts (the AWS CLI's
// rule), at most kMaxPartSize.
uint64_t ChoosePartSize(uint64_t size, uint64_t configured);

// How each part of a multipart upload is checked (part_checksum=). kMd5: by its MD5, hashed as
// the part is sent and compared with the part ETag the server answers (the MD5 of what it
// received); a part that arrived different is sent again with its Content-MD5, which the server
// checks itself. Where part ETags are not MD5s, every part carries its Content-MD5, hashed
// before it is sent. kNone: nothing; the part is protected in transit by TLS (https) or TCP's
// checksum alone, and its ETag is the server's. Whole PUTs carry Content-MD5 either way: their
// MD5 is the ETag this mount checks and reports.
enum class PartChecksum { kMd5, kNone };

struct S3StoreOptions {
  std::string bucket;
  std::string endpoint;  // "http://127.0.0.1:8000"; empty: AWS's regional endpoint
  std::string region = "us-east-1";
  Addressing addressing = Addressing::kAuto;
  // No region was configured: CheckBucket asks the server for the bucket's (see there).
  bool discover_region = false;
  // Fixed keys; used when credentials_holder is null.
  Credentials credentials;
  // The credentials every request is signed with, renewed as they expire or are refused.
  std::shared_ptr<CredentialsHolder> credentials_holder;

  uint64_t multipart_threshold = 64ull << 20;  // put() above this size is multipart
  uint64_t part_size = 16ull << 20;            // at least 5 MiB on AWS and RGW
  uint64_t copy_part_threshold = 5ull << 30;   // copy() above this uses UploadPartCopy
  uint64_t copy_part_size = 512ull << 20;
  int parallel_parts = 4;  // parts in flight for one upload or copy
  // Sign object bodies with their SHA-256 instead of UNSIGNED-PAYLOAD (Content-MD5 already
  // protects them; signing costs a second pass over the data).
  bool sign_payload = false;
  PartChecksum part_checksum = PartChecksum::kMd5;

  // Content-Type by extension, storage class, ACL, encryption, requester-pays.
  ObjectHeaderOptions object_headers;

  HttpOptions http;
  // retry.budget is operation_timeout: one call's attempts and waits together.
  RetryPolicy retry;
  // Told (one line) when a call runs out of its time budget; may be empty.
  LogFunction log;
  // Protocol-level counters (HTTP requests, retries, bytes hashed) go here; per-call counters
  // are MetricsStore's. Not owned; may be null.
  Metrics* metrics = nullptr;
  // Notes each multipart upload from its creation until it is completed or aborted, so that
  // the next mount can abort the ones a crash left. May be null.
  std::shared_ptr<UploadJournal> journal;
};

// Fills what `options` leaves unset, as the AWS SDKs do: the endpoint (AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, then the profile's [services] s3 endpoint_url or endpoint_url), the region
// (AWS_REGION, AWS_DEFAULT_REGION, the profile's region; else us-east-1 with discover_region),
// the addressing style (the profile's s3 addressing_style), the CA bundle (AWS_CA_BUNDLE) and
// the credentials (the chain of credentials.h, with a holder that renews them once started;
// `log` is told of each renewal).
Status ApplyEnvironment(S3StoreOptions& options, ChainOptions chain, const LogFunction& log);
Status ApplyEnvironment(S3StoreOptions& options, std::string_view profile, const GetEnvFn& getenv);

class S3Store : public ObjectStore {
 public:
  static Result<std::unique_ptr<S3Store>> Create(S3StoreOptions options);

  Result<ObjectInfo> head(std::string_view key) override;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override;
  Result<Listing> list(const ListOptions& options) override;
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override;
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override;
  // A copy onto itself with MetadataDirective REPLACE, as copy() makes it.
  Result<ObjectInfo> set_attributes(std::string_view key, const Metadata& metadata,
                                    const SetAttributesOptions& options) override;
  Status remove(std::string_view key) override;
  Status remove_if_match(std::string_view key, const ETag& etag, bool known_current) override;
  Status remove_many(const std::vector<std::string>& keys) override;
  // A multipart upload: write() is UploadPart, copy() UploadPartCopy of a range (with
  // x-amz-copy-source-if-match, and the base HEADed before its first copy and again before
  // CompleteMultipartUpload, for servers that ignore the condition), complete()
  // CompleteMultipartUpload, noted in the journal from creation to completion or abort.
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override;
  Capabilities capabilities() const override;
  std::string describe() const override;

  // Fails fast with a clear message when the bucket is missing, the credentials are wrong or
  // the endpoint does not answer (used before mounting). Lists one key under `prefix` only, so
  // that a user allowed only that prefix can mount it. With discover_region, first learns the
  // bucket's region from the server (the x-amz-bucket-region header of a HEAD on the bucket,
  // which AWS also sends with its 301 and 403 replies) and signs for it from then on.
  Status CheckBucket(std::string_view prefix = {});
  // Creates the bucket (tests, demo).
  Status CreateBucket();
  // AbortMultipartUpload of one upload; ok also when the server holds no such upload.
  Status AbortUpload(std::string_view key, std::string_view upload_id);

  // The region requests are signed for (the bucket's, once CheckBucket learnt it).
  const std::string& region() const { return options_.region; }
  CredentialsHolder& credentials() { return *credentials_; }

 private:
  struct Request;
  class Session;
  explicit S3Store(S3StoreOptions options, S3Endpoint endpoint);

  // Signs, sends and retries one request; a non-2xx reply becomes a Status.
  Result<HttpResponse> Execute(const Request& request);
  // total_timeout_ms: the rest of the call's budget for this one request (0: none).
  // `used` receives the credentials the request was signed with.
  Result<HttpResponse> ExecuteOnce(const Request& request, long total_timeout_ms,
                                   Credentials* used);
  // Execute without the second try after renewing refused credentials.
  Result<HttpResponse> ExecuteWithRetries(const Request& request, Credentials* used);
  // Whether the server answers `probe` signed with a wrong secret with SignatureDoesNotMatch
  // (AWS, MinIO, RGW without STS), rather than a plain AccessDenied (RGW with STS).
  bool TellsWrongSecrets(const Request& probe);
  Status DiscoverRegion();
  // At log level debug: one line for one HTTP request, with the server's request id.
  void LogRequest(const Request& request, const Result<HttpResponse>& response,
                  std::chrono::steady_clock::duration took) const;

  Result<ObjectInfo> PutSingle(std::string_view key, const ByteSource& source,
                               const PutOptions& options);
  Result<ObjectInfo> PutMultipart(std::string_view key, const ByteSource& source,
                                  const PutOptions& options);
  Result<ObjectInfo> CopySingle(const ObjectInfo& src, std::string_view dst,
                                const CopyOptions& options);
  // source_checked: `src` is what a HEAD just gave (metadata, type, encryption; its ETag
  // checked), so it is not HEADed again.
  Result<ObjectInfo> CopyMultipart(const ObjectInfo& src, std::string_view dst,
                                   const CopyOptions& options, bool source_checked = false);
  // CopyOptions::keep_tags: the tag set (the body of GET ?tagging) of `source`, a version a
  // HEAD described, when the copy keeps tags and it has any; nothing otherwise. Tags that cannot
  // be read are logged and the copy goes on without them: a rename or chmod is not refused
  // for tags.
  std::optional<std::string> TagsToKeep(const ObjectInfo& source, const CopyOptions& options);
  // Puts `tags` (from TagsToKeep) on `key`, the copy just made. A failure is logged: the copy
  // stands.
  void RestoreTags(std::string_view key, const std::optional<std::string>& tags);
  Result<std::string> InitiateMultipart(std::string_view key, const HeaderList& headers);
  // A part sent by UploadPart: the ETag the server gave it; its MD5, hashed here (md5
  // part_checksum) or read from that ETag (none) where the server's part ETags are MD5s; and
  // whether they are not (`opaque`: SSE-KMS, SSE-C), so that no object ETag can be checked.
  struct SentPart {
    ETag etag;
    std::optional<Md5Digest> md5;
    bool opaque = false;
  };
  // UploadPart of part `number` (from 1) of `upload_id`, the bytes [offset, offset + length)
  // of `source`, checked as options.part_checksum says. md5: by the part ETag the server
  // answers, against the MD5 of the bytes as they were sent, where that ETag is an MD5; a part
  // that arrived different, and every part where ETags are not MD5s, is sent with Content-MD5
  // for the server to check. A part ETag that is an MD5 other than the one hashed then fails.
  // One UploadPart request of those bytes of `body`, with `md5` as its Content-MD5 if given.
  Result<HttpResponse> SendPart(std::string_view key, const std::string& upload_id, int number,
                                const ByteSource& body, uint64_t offset, uint64_t length,
                                const std::optional<Md5Digest>& md5);
  Result<SentPart> UploadPart(std::string_view key, const std::string& upload_id, int number,
                              const ByteSource& source, uint64_t offset, uint64_t length,
                              const std::optional<AtRestEncryption>& keep_encryption);
  Result<ETag> CompleteMultipart(std::string_view key, const std::string& upload_id,
                                 const std::vector<std::pair<int, ETag>>& parts,
                                 const HeaderList& conditions, uint64_t size);
  void AbortMultipart(std::string_view key, const std::string& upload_id);

  std::string What(std::string_view verb, std::string_view key) const;
  // Warns once when the mount asks for sse= and the reply to a request that created an object
  // (PUT, CreateMultipartUpload) does not name any: the server did not encrypt it.
  void CheckEncryptionConfirmed(std::string_view key, const AtRestEncryption& replied);
  // The mount sets encryption of its own (sse= or sse_c_key=) on every object it creates.
  bool MountEncrypts() const;
  // Notes in `info`, a version of `key` this mount stored, the Content-Type it was stored with
  // (content_type and the metadata ":content-type"), so that a later copy with new metadata (a
  // chmod of the file just written) names it again without a HEAD: the one named, else the one
  // kept as metadata, else (`by_name`: a put, not a copy) the one of the name's extension that
  // AddObjectHeaders adds. None: the server's default, which such a copy gets anyway.
  void NoteContentType(std::string_view key, bool by_name, ObjectInfo& info) const;
  // CopyOptions::retype_by_name, applied to `copy` (a copy of `src` to `dst`): new metadata
  // with the new name's type where the source's type is its old name's. The metadata is the
  // copy's own, this mount's record of its own write, or else a HEAD's (one request, only
  // where the two names' types differ); PreconditionFailed when that finds another version.
  Status RetypeByName(const ObjectInfo& src, std::string_view dst, CopyOptions& copy);
  // Whether the ETag of an object (or part) stored with `asked` kept, as `reply` (if any) names
  // it, is the MD5 of its bytes (StoredETagIsMd5).
  bool ETagIsMd5(const std::optional<AtRestEncryption>& asked, const HttpResponse* reply) const;
  // The encryption to note in the ObjectInfo of a version this mount made with `kept`, for its
  // own copies to pass on.
  std::optional<AtRestEncryption> PassedOn(const std::optional<AtRestEncryption>& kept) const;
  // Adds `encryption` (an object's, passed on to the one replacing or copying it) to a request
  // that creates an object, unless the mount sets its own.
  void KeepEncryption(const std::optional<AtRestEncryption>& encryption, HeaderList& headers) const;
  // What a put or upload to `key` keeps (PutOptions::keep_encryption): `known`, or, when the
  // mount sets none and an object is replaced whose encryption is unknown, its HEAD's.
  Result<std::optional<AtRestEncryption>> EncryptionToKeep(
      std::string_view key, const std::optional<AtRestEncryption>& known, bool replaces);

  S3StoreOptions options_;
  S3Endpoint endpoint_;
  std::shared_ptr<CredentialsHolder> credentials_;
  HttpClient http_;
  Metrics own_metrics_;
  Metrics* metrics_;
  // The server compares a PUT's If-Match with its ETag unquoted (RGW): learned from one PUT
  // that failed quoted and passed unquoted, so that later ones send their body once.
  std::atomic<bool> unquoted_if_match_{false};
  std::atomic<bool> copy_refused_logged_{false};
  // Part ETags here are not MD5s: a reply said the server encrypts parts (the bucket's default
  // encryption), or a part sent with Content-MD5 got an ETag that is none. Parts then carry
  // Content-MD5 (one damaged reply does not set this: its part is sent again, and that reply
  // has an MD5).
  std::atomic<bool> part_etags_opaque_{false};
  std::atomic<bool> encryption_unconfirmed_logged_{false};
};

}  // namespace objfs::s3
