// The XML of the S3 API, read with pugixml and written by hand (the request bodies are tiny).
//
// Every parser rejects a malformed or truncated body with an Internal Status that says which
// response it was; none of them trusts a half-read document. A 200 response whose body is an
// <Error> document (CompleteMultipartUpload and CopyObject can do that) is turned into that
// error's Status.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/etag.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs::s3 {

struct S3Error {
  std::string code;     // "NoSuchKey", "SignatureDoesNotMatch", ...
  std::string message;  // the server's text
  std::string resource;
  std::string request_id;
};

// Parses an <Error> document.
Result<S3Error> ParseError(std::string_view body);

// The Status for an S3 error response: HTTP status and parsed body (or the empty S3Error when
// the body is empty or not XML, as for HEAD). Mapping: NoSuchKey/NoSuchBucket/404 -> NotFound;
// AccessDenied/SignatureDoesNotMatch/InvalidAccessKeyId/403 -> PermissionDenied;
// PreconditionFailed/412 -> PreconditionFailed; 5xx/SlowDown/429/RequestTimeout ->
// Transient; InvalidRange/416 -> InvalidArgument; others 4xx -> InvalidArgument.
// The message keeps the server's code and message; `what` ("GET s3://b/k") leads it.
Status StatusFromS3Error(long http_status, const S3Error& error, std::string_view what);

// ListObjectsV2. With `url_encoded` (the request had encoding-type=url) keys, prefixes and
// StartAfter are percent-decoded. Objects get key, size, etag and mtime_ns (LastModified);
// common prefixes are listed in order; next_token is NextContinuationToken when IsTruncated.
Result<Listing> ParseListObjectsV2(std::string_view body, bool url_encoded);

// InitiateMultipartUploadResult -> UploadId.
Result<std::string> ParseInitiateMultipartUpload(std::string_view body);

// CompleteMultipartUploadResult -> ETag (may be empty: RGW sends an empty <ETag>).
Result<ETag> ParseCompleteMultipartUpload(std::string_view body);

struct CopyResult {
  ETag etag;  // quoted or not, as the server sent it (RGW leaves it unquoted)
  int64_t mtime_ns = 0;
};
// CopyObjectResult and CopyPartResult.
Result<CopyResult> ParseCopyResult(std::string_view body);

struct DeleteFailure {
  std::string key;
  std::string code;
  std::string message;
};
// DeleteResult -> the keys that failed (Quiet mode lists only failures).
Result<std::vector<DeleteFailure>> ParseDeleteResult(std::string_view body);

// <CompleteMultipartUpload> with the parts in order (part number, ETag quoted in the body).
std::string BuildCompleteMultipartUpload(const std::vector<std::pair<int, ETag>>& parts);
// <Delete><Quiet>true</Quiet><Object><Key>..</Key></Object>...</Delete>, keys XML-escaped.
std::string BuildDeleteObjects(const std::vector<std::string>& keys);

// "2015-08-30T12:36:00.000Z" -> ns since the epoch; -1 when malformed.
int64_t ParseIso8601(std::string_view s);
// "Sun, 30 Aug 2015 12:36:00 GMT" (Last-Modified) -> ns since the epoch; -1 when malformed.
int64_t ParseHttpDate(std::string_view s);

std::string XmlEscape(std::string_view s);
// Percent-decoding (for encoding-type=url listings); '+' is left alone.
std::string UrlDecode(std::string_view s);

}  // namespace objfs::s3
