// Where a bucket's requests go: the endpoint URL, the addressing style and the encoded paths.
//
// Path-style ("http://host/bucket/key") is chosen by default for endpoints given as an IP
// address or "localhost" (Ceph RGW, MinIO, Ozone on a LAN), virtual-hosted style
// ("https://bucket.host/key") otherwise, as AWS wants; an option forces either. The canonical
// URI that SigV4 signs is exactly the path that goes on the wire, so both come from here.
#pragma once

#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs::s3 {

enum class Addressing { kAuto, kPath, kVirtualHost };

class S3Endpoint {
 public:
  // `endpoint` is "scheme://host[:port]" (a trailing '/' is ignored); empty means AWS's
  // regional endpoint "https://s3.<region>.amazonaws.com". Fails with InvalidArgument and a
  // one-line reason for an unknown scheme, a missing host, a path or a malformed bucket name.
  static Result<S3Endpoint> Create(std::string_view endpoint, std::string_view region,
                                   std::string_view bucket, Addressing addressing);

  bool path_style() const { return path_style_; }
  const std::string& bucket() const { return bucket_; }
  // "127.0.0.1:8000" or "bucket.s3.us-east-1.amazonaws.com": the Host header.
  const std::string& host() const { return host_; }
  // "127.0.0.1:8000" or "s3.us-east-1.amazonaws.com": the Host header of a request to the
  // service rather than the bucket (ListBuckets).
  const std::string& service_host() const { return service_host_; }
  // The endpoint as given (normalised), for messages.
  const std::string& endpoint() const { return endpoint_; }

  // The encoded path of an object ("/bucket/a%20b" or "/a%20b"); of the bucket when key is
  // empty ("/bucket" or "/").
  std::string Path(std::string_view key) const;
  // scheme://host + path + ("?" + query when non-empty).
  std::string Url(std::string_view path, std::string_view query) const;
  // The x-amz-copy-source value for a key of this bucket: "/bucket/encoded-key".
  std::string CopySource(std::string_view key) const;

 private:
  std::string scheme_;
  std::string host_;
  std::string service_host_;
  std::string endpoint_;
  std::string bucket_;
  bool path_style_ = true;
};

}  // namespace objfs::s3
