// Extended attributes: which names objfs answers itself, and how user attributes are stored.
//
// User attributes ("user.*" set by setfattr) live in the object's user metadata "xattr" in the
// form s3fs writes: a JSON object {"<name>":"<base64 of the value>",...} that is then
// percent-encoded as a whole (URL encoding). Names are stored as given; on reading, names are
// percent-decoded too, which is harmless for names s3fs wrote. Reserved names (user.etag,
// user.objfs.*) are computed by objfs and are read-only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace objfs {

inline constexpr char kXattrMetadata[] = "xattr";
inline constexpr char kEtagXattr[] = "user.etag";
inline constexpr char kEtagKindXattr[] = "user.objfs.etag_kind";
inline constexpr char kStatsXattr[] = "user.objfs.stats";

using XattrMap = std::map<std::string, std::string>;

// user.etag and everything under user.objfs.
bool IsReservedXattr(std::string_view name);
// Names in the "user." namespace (the only one objfs stores).
bool IsUserXattr(std::string_view name);

// The metadata value for `xattrs` (empty map: empty string, and the caller drops the name).
std::string EncodeXattrs(const XattrMap& xattrs);
// Parses a metadata value; nullopt when malformed.
std::optional<XattrMap> DecodeXattrs(std::string_view value);

// Base64 decoding (RFC 4648 with padding); nullopt when malformed.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace objfs
