#include "backend/s3/s3_endpoint.h"

#include <arpa/inet.h>

#include <cctype>

#include "backend/s3/sigv4.h"

namespace objfs::s3 {
namespace {

bool IsIpAddress(std::string_view host) {
  std::string h(host);
  if (!h.empty() && h.front() == '[') return true;  // [::1]
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

// S3 bucket naming rules (the lenient legacy set: RGW and MinIO accept underscores and
// uppercase in some setups, so only what can never work is rejected).
bool ValidBucketName(std::string_view b) {
  if (b.size() < 3 || b.size() > 255) return false;
  for (char c : b) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<S3Endpoint> S3Endpoint::Create(std::string_view endpoint, std::string_view region,
                                      std::string_view bucket, Addressing addressing) {
  S3Endpoint e;
  if (!ValidBucketName(bucket)) {
    return InvalidArgumentError("invalid bucket name '" + std::string(bucket) +
                                "': 3-255 characters of letters, digits, '-', '.', '_'");
  }
  e.bucket_ = std::string(bucket);
  std::string ep(endpoint);
  if (ep.empty())
    ep = "https://s3." + std::string(region.empty() ? "us-east-1" : region) + ".amazonaws.com";
  while (!ep.empty() && ep.back() == '/') ep.pop_back();
  size_t sep = ep.find("://");
  if (sep == std::string::npos) {
    return InvalidArgumentError("endpoint '" + ep + "' needs a scheme: http:// or https://");
  }
  e.scheme_ = ep.substr(0, sep);
  for (char& c : e.scheme_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (e.scheme_ != "http" && e.scheme_ != "https") {
    return InvalidArgumentError("endpoint '" + ep + "': unsupported scheme '" + e.scheme_ +
                                "' (use http:// or https://)");
  }
  std::string hostport = ep.substr(sep + 3);
  if (hostport.empty()) return InvalidArgumentError("endpoint '" + ep + "' has no host");
  if (hostport.find_first_of("/?#@ ") != std::string::npos) {
    return InvalidArgumentError("endpoint '" + ep +
                                "' must be scheme://host[:port] without a path");
  }
  std::string host_only = hostport;
  if (host_only.front() != '[') {
    size_t colon = host_only.rfind(':');
    if (colon != std::string::npos) {
      std::string port = host_only.substr(colon + 1);
      if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
        return InvalidArgumentError("endpoint '" + ep + "' has an invalid port");
      }
      host_only = host_only.substr(0, colon);
    }
  }
  switch (addressing) {
    case Addressing::kPath:
      e.path_style_ = true;
      break;
    case Addressing::kVirtualHost:
      e.path_style_ = false;
      break;
    case Addressing::kAuto:
      e.path_style_ = IsIpAddress(host_only) || host_only == "localhost" ||
                      // A dotted bucket breaks the TLS wildcard of virtual hosts.
                      (e.scheme_ == "https" && e.bucket_.find('.') != std::string::npos);
      break;
  }
  e.host_ = e.path_style_ ? hostport : e.bucket_ + "." + hostport;
  e.service_host_ = hostport;
  e.endpoint_ = e.scheme_ + "://" + hostport;
  return e;
}

std::string S3Endpoint::Path(std::string_view key) const {
  std::string path = "/";
  if (path_style_) {
    path += bucket_;
    if (!key.empty()) path += '/';
  }
  path += UriEncode(key, /*keep_slash=*/true);
  return path;
}

std::string S3Endpoint::Url(std::string_view path, std::string_view query) const {
  std::string url = scheme_ + "://" + host_;
  url += path;
  if (!query.empty()) {
    url += '?';
    url += query;
  }
  return url;
}

std::string S3Endpoint::CopySource(std::string_view key) const {
  return "/" + bucket_ + "/" + UriEncode(key, /*keep_slash=*/true);
}

}  // namespace objfs::s3
