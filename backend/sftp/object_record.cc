#include "backend/sftp/object_record.h"

#include <charconv>
#include <vector>

namespace objfs::sftp {
namespace {

constexpr std::string_view kMagic = "objfs-record-1";

// Percent-encodes everything but unreserved URL characters, so fields never contain ' ' or '='.
std::string Encode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : in) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::optional<std::string> Decode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return std::nullopt;
    unsigned value = 0;
    auto [end, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, value, 16);
    if (ec != std::errc() || end != in.data() + i + 3) return std::nullopt;
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

template <typename T>
bool ParseNumber(std::string_view s, T& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string EncodeObjectRecord(const ObjectRecord& record) {
  std::string out(kMagic);
  out += " size=" + std::to_string(record.size);
  out += " mtime=" + std::to_string(record.mtime_s);
  out += " etag=" + Encode(record.etag.value());
  out += " type=" + Encode(record.content_type);
  for (const auto& [name, value] : record.metadata) {
    out += " m." + Encode(name) + "=" + Encode(value);
  }
  return out;
}

std::optional<ObjectRecord> DecodeObjectRecord(std::string_view text) {
  std::vector<std::string_view> fields;
  while (!text.empty()) {
    size_t space = text.find(' ');
    fields.push_back(text.substr(0, space));
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
  }
  if (fields.empty() || fields[0] != kMagic) return std::nullopt;
  ObjectRecord record;
  bool have_size = false;
  bool have_mtime = false;
  for (size_t i = 1; i < fields.size(); ++i) {
    std::string_view field = fields[i];
    size_t eq = field.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    std::string_view name = field.substr(0, eq);
    std::optional<std::string> value = Decode(field.substr(eq + 1));
    if (!value) return std::nullopt;
    if (name == "size") {
      if (!ParseNumber(*value, record.size)) return std::nullopt;
      have_size = true;
    } else if (name == "mtime") {
      if (!ParseNumber(*value, record.mtime_s)) return std::nullopt;
      have_mtime = true;
    } else if (name == "etag") {
      record.etag = ETag::Parse(*value);
    } else if (name == "type") {
      record.content_type = *value;
    } else if (name.substr(0, 2) == "m.") {
      std::optional<std::string> meta_name = Decode(name.substr(2));
      if (!meta_name) return std::nullopt;
      record.metadata[*meta_name] = *value;
    }
  }
  if (!have_size || !have_mtime) return std::nullopt;
  return record;
}

}  // namespace objfs::sftp
