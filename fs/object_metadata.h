// The POSIX attributes of a file as user metadata, in the names and formats s3fs uses, so that
// a bucket written by either tool shows the same modes, owners and times in the other.
//
//   "mode"  decimal st_mode including the type bits (33188 for a 0644 regular file)
//   "uid", "gid"  decimal
//   "mtime" decimal seconds since the epoch; objfs writes "<s>.<9-digit ns>" when the
//           nanoseconds are not zero (s3fs reads both forms), integer seconds otherwise
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs {

inline constexpr char kModeMetadata[] = "mode";
inline constexpr char kUidMetadata[] = "uid";
inline constexpr char kGidMetadata[] = "gid";
inline constexpr char kMtimeMetadata[] = "mtime";
// An atime set explicitly (utimensat, touch -a), in mtime's format; none: st_atime is the mtime.
// On SFTP the server's own atime, which a later change of the file carries back.
inline constexpr char kAtimeMetadata[] = "atime";

struct PosixMetadata {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<int64_t> mtime_ns;
};

// Reads the attributes present (and well-formed) in `metadata`.
PosixMetadata ParsePosixMetadata(const Metadata& metadata);
// Sets the four names in `metadata`, leaving other names as they are.
void SetPosixMetadata(uint32_t mode, uint32_t uid, uint32_t gid, int64_t mtime_ns,
                      Metadata* metadata);
// Drops the four names, leaving the rest (xattrs, names of other tools).
Metadata WithoutPosixMetadata(const Metadata& metadata);

// The size S3 counts against its limit on user metadata (AWS: 2 KiB): the bytes of every name
// (without the "x-amz-meta-" prefix) and value. "mtime" counts at its longest form, so that a
// later write or touch, whose mtime has nanoseconds, never takes metadata accepted under the
// limit over it.
size_t MetadataSize(const Metadata& metadata);

// AWS's limit on the user metadata of an object, the default of -o max_metadata.
inline constexpr size_t kDefaultMaxMetadata = 2048;

// True when the store refused a put or copy for a reason that will not go away by trying
// again: S3's 400 MetadataTooLarge or InvalidArgument, or a 400 with no error code at all
// (RGW over its metadata limit). Not any other coded refusal (an expired token, a conflict,
// a digest that does not match: damaged on the way), which a later try may pass.
bool IsPermanentRefusal(const Status& status);

std::string FormatMtime(int64_t mtime_ns);
// Accepts "123", "123.5", "123.456789012", "-5". nullopt when malformed.
std::optional<int64_t> ParseMtime(std::string_view text);

}  // namespace objfs
