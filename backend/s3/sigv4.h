// AWS Signature Version 4 (header signing), with OpenSSL's HMAC-SHA256 and SHA-256.
//
// The signer works on a plain description of the request (method, encoded path, decoded query
// parameters, headers) so that it can be checked against AWS's published SigV4 test suite, and
// so that the S3 client re-signs every retry with a fresh date.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/s3/credentials.h"

namespace objfs::s3 {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

struct SigningRequest {
  std::string method;          // "GET", "PUT", ...
  std::string canonical_uri;   // the URI path exactly as sent, already percent-encoded
  HeaderList query;            // decoded names and values; encoded and sorted by the signer
  HeaderList headers;          // must include "host"; names in any case
  std::string payload_sha256;  // lowercase hex SHA-256 of the body, or kUnsignedPayload
};

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - _ . ~ stay, everything else is
// %XX (uppercase); '/' stays when `keep_slash`.
std::string UriEncode(std::string_view s, bool keep_slash);

std::string Sha256Hex(std::span<const std::byte> data);
std::string Sha256Hex(std::string_view data);

// "20150830T123600Z" for a time point.
std::string AmzDate(std::chrono::system_clock::time_point t);

// The pieces, exposed for the test-suite vectors.
std::string CanonicalRequest(const SigningRequest& req);
std::string StringToSign(std::string_view canonical_request, std::string_view amz_date,
                         std::string_view region, std::string_view service);
std::string SignatureHex(std::string_view secret_key, std::string_view date /* YYYYMMDD */,
                         std::string_view region, std::string_view service,
                         std::string_view string_to_sign);

// Signs `req` in place: adds "x-amz-date" (and "x-amz-security-token" when the credentials
// have a session token) to req.headers, then returns the value of the Authorization header.
// With `add_content_sha256` (S3 always wants it) also adds "x-amz-content-sha256".
// The AWS test suite signs without it (`add_content_sha256` false).
std::string Sign(SigningRequest& req, const Credentials& creds, std::string_view region,
                 std::string_view service, std::chrono::system_clock::time_point now,
                 bool add_content_sha256);

}  // namespace objfs::s3
