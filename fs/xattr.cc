#include "fs/xattr.h"

#include <cstdint>
#include <span>

#include "backend/base64.h"
#include "fs/errno_map.h"
#include "fs/object_metadata.h"

namespace objfs {

namespace {

std::string UrlEncode(std::string_view s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '-' || c == '_' || c == '.' || c == '~';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

// Reads a JSON string starting at text[*pos] == '"' (no escapes other than \" and \\ are
// produced by s3fs: names and base64 values have none).
std::optional<std::string> ReadJsonString(std::string_view text, size_t* pos) {
  if (*pos >= text.size() || text[*pos] != '"') return std::nullopt;
  std::string out;
  for (size_t i = *pos + 1; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      out += text[++i];
    } else if (text[i] == '"') {
      *pos = i + 1;
      return out;
    } else {
      out += text[i];
    }
  }
  return std::nullopt;
}

void SkipSpaces(std::string_view text, size_t* pos) {
  while (*pos < text.size() && (text[*pos] == ' ' || text[*pos] == '\t' || text[*pos] == '\n')) {
    ++*pos;
  }
}

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace

bool IsReservedXattr(std::string_view name) {
  return name == kEtagXattr || name.starts_with("user.objfs.");
}

bool IsUserXattr(std::string_view name) { return name.starts_with("user.") && name.size() > 5; }

std::string EncodeXattrs(const XattrMap& xattrs) {
  if (xattrs.empty()) return "";
  std::string json = "{";
  bool first = true;
  for (const auto& [name, value] : xattrs) {
    if (!first) json += ',';
    first = false;
    json += JsonQuote(name);
    json += ':';
    json += JsonQuote(Base64(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(value.data()), value.size())));
  }
  json += '}';
  return UrlEncode(json);
}

std::optional<XattrMap> DecodeXattrs(std::string_view value) {
  XattrMap out;
  if (value.empty()) return out;
  auto decoded = UrlDecode(value);
  if (!decoded) return std::nullopt;
  std::string_view text = *decoded;
  size_t pos = 0;
  SkipSpaces(text, &pos);
  if (pos >= text.size() || text[pos] != '{') return std::nullopt;
  ++pos;
  SkipSpaces(text, &pos);
  if (pos < text.size() && text[pos] == '}') return out;
  while (true) {
    SkipSpaces(text, &pos);
    auto name = ReadJsonString(text, &pos);
    if (!name) return std::nullopt;
    SkipSpaces(text, &pos);
    if (pos >= text.size() || text[pos] != ':') return std::nullopt;
    ++pos;
    SkipSpaces(text, &pos);
    auto encoded = ReadJsonString(text, &pos);
    if (!encoded) return std::nullopt;
    auto raw = DecodeBase64(*encoded);
    if (!raw) return std::nullopt;
    out[*name] = std::move(*raw);
    SkipSpaces(text, &pos);
    if (pos >= text.size()) return std::nullopt;
    if (text[pos] == '}') return out;
    if (text[pos] != ',') return std::nullopt;
    ++pos;
  }
}

std::optional<std::string> DecodeBase64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] != '='; ++i) {
    int v = value(text[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  for (; i < text.size(); ++i) {
    if (text[i] != '=') return std::nullopt;
  }
  return out;
}

Result<XattrMap> XattrsOf(const Metadata& extra) {
  auto it = extra.find(kXattrMetadata);
  if (it == extra.end()) return XattrMap();
  auto parsed = DecodeXattrs(it->second);
  if (!parsed) return InternalError("malformed xattr metadata");
  return *parsed;
}

Result<std::string> GetUserXattr(const Metadata& extra, const std::string& name) {
  OBJFS_ASSIGN_OR_RETURN(XattrMap xattrs, XattrsOf(extra));
  auto it = xattrs.find(name);
  if (it == xattrs.end()) return NoXattrError(name);
  return it->second;
}

Status SetUserXattr(const std::string& name, const std::string& value, bool create, bool replace,
                    size_t max_metadata, const FileAttr& attr, Metadata* extra) {
  OBJFS_ASSIGN_OR_RETURN(XattrMap xattrs, XattrsOf(*extra));
  bool exists = xattrs.count(name) > 0;
  if (create && exists) return AlreadyExistsError(name + " exists");
  if (replace && !exists) return NoXattrError(name);
  if (max_metadata > 0) {
    Metadata alone = *extra;
    alone[kXattrMetadata] = EncodeXattrs(XattrMap{{name, value}});
    SetPosixMetadata(attr.mode, attr.uid, attr.gid, attr.mtime_ns, &alone);
    const size_t size = MetadataSize(alone);
    if (size > max_metadata) {
      return XattrTooLargeError(
          name + " would give the object " + std::to_string(size) +
          " bytes of metadata, over max_metadata=" + std::to_string(max_metadata));
    }
  }
  xattrs[name] = value;
  (*extra)[kXattrMetadata] = EncodeXattrs(xattrs);
  return Status::Ok();
}

Status RemoveUserXattr(const std::string& name, Metadata* extra) {
  OBJFS_ASSIGN_OR_RETURN(XattrMap xattrs, XattrsOf(*extra));
  if (xattrs.erase(name) == 0) return NoXattrError(name);
  if (xattrs.empty()) {
    extra->erase(kXattrMetadata);
  } else {
    (*extra)[kXattrMetadata] = EncodeXattrs(xattrs);
  }
  return Status::Ok();
}

}  // namespace objfs
