#include "backend/etag.h"

#include <cctype>
#include <charconv>

namespace objfs {
namespace {

bool IsHex(std::string_view s) {
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

ETag ETag::Parse(std::string_view raw) {
  std::string_view s = Trim(raw);
  if (s.size() >= 2 && (s[0] == 'W' || s[0] == 'w') && s[1] == '/') s.remove_prefix(2);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  // Some servers XML-escape the quotes and some clients leave them in: strip those too.
  constexpr std::string_view kQuot = "&quot;";
  if (s.size() >= 2 * kQuot.size() && s.substr(0, kQuot.size()) == kQuot &&
      s.substr(s.size() - kQuot.size()) == kQuot) {
    s = s.substr(kQuot.size(), s.size() - 2 * kQuot.size());
  }
  ETag e;
  if (s.empty()) return e;
  if (s.size() == 32 && IsHex(s)) {
    e.kind_ = Kind::kPlainMd5;
    e.value_ = Lower(s);
    return e;
  }
  if (s.size() > 33 && s[32] == '-' && IsHex(s.substr(0, 32))) {
    std::string_view n = s.substr(33);
    uint32_t parts = 0;
    auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), parts);
    if (ec == std::errc() && ptr == n.data() + n.size() && parts > 0 && n[0] != '0') {
      e.kind_ = Kind::kMultipart;
      e.value_ = Lower(s);
      e.parts_ = parts;
      return e;
    }
  }
  e.kind_ = Kind::kOpaque;
  e.value_ = std::string(s);
  return e;
}

std::string HexMd5(const std::array<uint8_t, 16>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (size_t i = 0; i < digest.size(); ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

ETag ETag::FromMd5(const std::array<uint8_t, 16>& digest) {
  ETag e;
  e.kind_ = Kind::kPlainMd5;
  e.value_ = HexMd5(digest);
  return e;
}

std::string_view ETagKindName(ETag::Kind kind) {
  switch (kind) {
    case ETag::Kind::kNone:
      return "none";
    case ETag::Kind::kPlainMd5:
      return "md5";
    case ETag::Kind::kMultipart:
      return "multipart";
    case ETag::Kind::kOpaque:
      return "opaque";
  }
  return "unknown";
}

}  // namespace objfs
