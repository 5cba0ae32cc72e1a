// The ETag of an object, classified once so that every layer asks the same question the same way.
//
// objfs reuses a source's ETag for a server-side copy only when it is a plain MD5 of the content
// (32 hex digits). A multipart ETag ("<hex>-<parts>") is an MD5 of part MD5s, not of the content;
// anything else (empty, SFTP, encrypted objects, other vendors' formats) is opaque.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace objfs {

class ETag {
 public:
  enum class Kind {
    kNone,       // no ETag known
    kPlainMd5,   // 32 lowercase hex digits: the MD5 of the content
    kMultipart,  // <32 hex>-<N>: a multipart upload of N parts
    kOpaque,     // anything else
  };

  ETag() = default;

  // Parses an ETag as a server sends it: surrounding quotes, a weak "W/" prefix and white space
  // are removed; hex digits are lowercased for the plain and multipart forms.
  static ETag Parse(std::string_view raw);
  static ETag FromMd5(const std::array<uint8_t, 16>& digest);

  Kind kind() const { return kind_; }
  bool empty() const { return kind_ == Kind::kNone; }
  bool is_plain_md5() const { return kind_ == Kind::kPlainMd5; }
  bool is_multipart() const { return kind_ == Kind::kMultipart; }
  // The number of parts of a multipart ETag; 0 for the other kinds.
  uint32_t parts() const { return parts_; }

  // Without quotes, as `getfattr -n user.etag` prints it.
  const std::string& value() const { return value_; }
  // With double quotes, as HTTP headers (If-Match) want it.
  std::string quoted() const { return '"' + value_ + '"'; }

  bool operator==(const ETag& other) const { return value_ == other.value_; }
  bool operator!=(const ETag& other) const { return !(*this == other); }

 private:
  Kind kind_ = Kind::kNone;
  std::string value_;
  uint32_t parts_ = 0;
};

std::string_view ETagKindName(ETag::Kind kind);

// Lowercase hex of a 16-byte digest.
std::string HexMd5(const std::array<uint8_t, 16>& digest);

}  // namespace objfs
