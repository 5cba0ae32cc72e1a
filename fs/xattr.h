// Extended attributes: which names objfs answers itself, and how user attributes are stored.
//
// User attributes ("user.*" set by setfattr) live in the object's user metadata "xattr" in the
// form s3fs writes: a JSON object {"<name>":"<base64 of the value>",...} that is then
// percent-encoded as a whole (URL encoding). Names are stored as given and read back as they
// are once the whole is decoded: decoding them again turned a name objfs wrote with "%" or "+"
// into another one. Reserved names (user.etag, user.objfs.*) are computed by objfs and are
// read-only.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "backend/object_store.h"
#include "backend/status.h"
#include "fs/file_attr.h"

namespace objfs {

inline constexpr char kXattrMetadata[] = "xattr";
inline constexpr char kEtagXattr[] = "user.etag";
inline constexpr char kEtagKindXattr[] = "user.objfs.etag_kind";
inline constexpr char kStatsXattr[] = "user.objfs.stats";

using XattrMap = std::map<std::string, std::string>;

// The longest attribute name the kernel asks for (XATTR_NAME_MAX).
inline constexpr size_t kMaxXattrName = 255;

// user.etag and everything under user.objfs.
bool IsReservedXattr(std::string_view name);
// Names in the "user." namespace (the only one objfs stores).
bool IsUserXattr(std::string_view name);

// The metadata value for `xattrs` (empty map: empty string, and the caller drops the name).
std::string EncodeXattrs(const XattrMap& xattrs);
// Parses a metadata value; nullopt when malformed.
std::optional<XattrMap> DecodeXattrs(std::string_view value);

// The user attributes in `extra` (an object's metadata other than mode, owner and mtime).
// Internal when its "xattr" value is malformed.
Result<XattrMap> XattrsOf(const Metadata& extra);
// The value of user attribute `name`: NoXattrError (ENODATA) when there is none.
Result<std::string> GetUserXattr(const Metadata& extra, const std::string& name);
// Sets user attribute `name` of the object whose attributes are `attr` and other metadata
// `*extra`. `create`: fails with AlreadyExists when it exists (XATTR_CREATE); `replace`: with
// ENODATA when it does not (XATTR_REPLACE). An attribute that would take the metadata over
// `max_metadata` (0: no limit) even as the object's only one is too large (E2BIG, as a local file
// system says of a value over its limit); whether it fits with the others is the caller's check.
Status SetUserXattr(const std::string& name, const std::string& value, bool create, bool replace,
                    size_t max_metadata, const FileAttr& attr, Metadata* extra);
// Removes user attribute `name`: ENODATA when there is none; no "xattr" value is left empty.
Status RemoveUserXattr(const std::string& name, Metadata* extra);

// Base64 decoding (RFC 4648 with padding); nullopt when malformed.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace objfs
