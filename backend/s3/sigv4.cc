#include "backend/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <ctime>
#include <map>

namespace objfs::s3 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";
constexpr char kHexDigitsLower[] = "0123456789abcdef";
constexpr char kHexDigitsUpper[] = "0123456789ABCDEF";

std::string HexLower(const unsigned char* data, size_t len) {
  std::string out;
  out.reserve(len * 2);
  for (size_t i = 0; i < len; ++i) {
    out.push_back(kHexDigitsLower[data[i] >> 4]);
    out.push_back(kHexDigitsLower[data[i] & 0x0f]);
  }
  return out;
}

using Digest = std::array<unsigned char, 32>;

Digest Sha256(const void* data, size_t len) {
  Digest out{};
  unsigned int out_len = 0;
  // EVP_Digest only fails on allocation failure; a zero digest then fails authentication
  // loudly at the server rather than silently here.
  EVP_Digest(data, len, out.data(), &out_len, EVP_sha256(), nullptr);
  return out;
}

// False (and a zero digest) only when OpenSSL fails, e.g. out of memory.
bool HmacSha256(std::string_view key, std::string_view data, Digest* out) {
  *out = Digest{};
  unsigned int out_len = 0;
  return HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
              reinterpret_cast<const unsigned char*>(data.data()), data.size(), out->data(),
              &out_len) != nullptr &&
         out_len == out->size();
}

std::string_view AsView(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

char ToLowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

std::string Lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), ToLowerAscii);
  return out;
}

bool IsHeaderSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Trims the value and collapses each inner run of white space to one space.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool pending_space = false;
  for (char c : v) {
    if (IsHeaderSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

// Sorted lowercase name -> values joined with ','. "authorization" is never signed: a request
// re-signed for a retry may still carry the previous attempt's.
std::map<std::string, std::string> CanonicalHeaderMap(const HeaderList& headers) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : headers) {
    std::string lower = Lowercase(name);
    if (lower == "authorization") continue;
    std::string canonical_value = CanonicalHeaderValue(value);
    auto [it, inserted] = out.try_emplace(std::move(lower), canonical_value);
    if (!inserted) {
      it->second.push_back(',');
      it->second += canonical_value;
    }
  }
  return out;
}

std::string SignedHeaderList(const std::map<std::string, std::string>& headers) {
  std::string out;
  for (const auto& [name, value] : headers) {
    if (!out.empty()) out.push_back(';');
    out += name;
  }
  return out;
}

std::string CredentialScope(std::string_view date, std::string_view region,
                            std::string_view service) {
  std::string out;
  out.append(date).append("/").append(region).append("/").append(service).append("/aws4_request");
  return out;
}

// Replaces every header named `name` (any case) with one `name: value`.
void SetHeader(HeaderList& headers, std::string_view name, std::string value) {
  std::erase_if(headers, [&](const auto& h) { return Lowercase(h.first) == name; });
  headers.emplace_back(std::string(name), std::move(value));
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size() * 3);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHexDigitsUpper[c >> 4]);
      out.push_back(kHexDigitsUpper[c & 0x0f]);
    }
  }
  return out;
}

std::string Sha256Hex(std::span<const std::byte> data) {
  const Digest d = Sha256(data.data(), data.size());
  return HexLower(d.data(), d.size());
}

std::string Sha256Hex(std::string_view data) {
  const Digest d = Sha256(data.data(), data.size());
  return HexLower(d.data(), d.size());
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs =
      std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return std::string(buf, n);
}

std::string CanonicalRequest(const SigningRequest& req) {
  std::string out;
  out.append(req.method).push_back('\n');
  out.append(req.canonical_uri.empty() ? "/" : req.canonical_uri).push_back('\n');

  std::vector<std::pair<std::string, std::string>> query;
  query.reserve(req.query.size());
  for (const auto& [name, value] : req.query) {
    query.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(query.begin(), query.end());
  for (size_t i = 0; i < query.size(); ++i) {
    if (i > 0) out.push_back('&');
    out.append(query[i].first).append("=").append(query[i].second);
  }
  out.push_back('\n');

  const auto headers = CanonicalHeaderMap(req.headers);
  for (const auto& [name, value] : headers) {
    out.append(name).append(":").append(value).push_back('\n');
  }
  out.push_back('\n');
  out.append(SignedHeaderList(headers)).push_back('\n');
  out.append(req.payload_sha256);
  return out;
}

std::string StringToSign(std::string_view canonical_request, std::string_view amz_date,
                         std::string_view region, std::string_view service) {
  std::string out;
  out.append(kAlgorithm).push_back('\n');
  out.append(amz_date).push_back('\n');
  out.append(CredentialScope(amz_date.substr(0, 8), region, service)).push_back('\n');
  out.append(Sha256Hex(canonical_request));
  return out;
}

namespace {

// The signing key depends only on the secret, the day, the region and the service: four HMACs
// that every request of a day would repeat. Each thread keeps the last one it derived.
Digest SigningKey(std::string_view secret_key, std::string_view date, std::string_view region,
                  std::string_view service) {
  struct Cached {
    std::string secret_key, date, region, service;
    Digest key{};
    bool valid = false;
  };
  thread_local Cached cached;
  if (cached.valid && cached.secret_key == secret_key && cached.date == date &&
      cached.region == region && cached.service == service) {
    return cached.key;
  }
  std::string secret = "AWS4";
  secret.append(secret_key);
  Digest k_date, k_region, k_service, k_signing;
  if (!HmacSha256(secret, date, &k_date) || !HmacSha256(AsView(k_date), region, &k_region) ||
      !HmacSha256(AsView(k_region), service, &k_service) ||
      !HmacSha256(AsView(k_service), "aws4_request", &k_signing)) {
    // Not kept: this request fails authentication loudly at the server, the next one derives
    // the key again.
    cached.valid = false;
    return k_signing;
  }
  cached.key = k_signing;
  cached.secret_key.assign(secret_key);
  cached.date.assign(date);
  cached.region.assign(region);
  cached.service.assign(service);
  cached.valid = true;
  return cached.key;
}

}  // namespace

std::string SignatureHex(std::string_view secret_key, std::string_view date,
                         std::string_view region, std::string_view service,
                         std::string_view string_to_sign) {
  const Digest k_signing = SigningKey(secret_key, date, region, service);
  Digest sig;
  (void)HmacSha256(AsView(k_signing), string_to_sign, &sig);  // a zero signature is refused
  return HexLower(sig.data(), sig.size());
}

std::string Sign(SigningRequest& req, const Credentials& creds, std::string_view region,
                 std::string_view service, std::chrono::system_clock::time_point now,
                 bool add_content_sha256) {
  const std::string amz_date = AmzDate(now);
  const std::string date = amz_date.substr(0, 8);
  SetHeader(req.headers, "x-amz-date", amz_date);
  if (!creds.session_token.empty()) {
    SetHeader(req.headers, "x-amz-security-token", creds.session_token);
  }
  if (add_content_sha256) SetHeader(req.headers, "x-amz-content-sha256", req.payload_sha256);

  const std::string canonical = CanonicalRequest(req);
  const std::string sts = StringToSign(canonical, amz_date, region, service);
  const std::string signature = SignatureHex(creds.secret_key, date, region, service, sts);

  std::string auth;
  auth.append(kAlgorithm)
      .append(" Credential=")
      .append(creds.access_key)
      .append("/")
      .append(CredentialScope(date, region, service))
      .append(", SignedHeaders=")
      .append(SignedHeaderList(CanonicalHeaderMap(req.headers)))
      .append(", Signature=")
      .append(signature);
  return auth;
}

}  // namespace objfs::s3
