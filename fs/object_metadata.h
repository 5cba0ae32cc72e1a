// The POSIX attributes of a file as user metadata, in the names and formats s3fs uses, so that
// a bucket written by either tool shows the same modes, owners and times in the other.
//
//   "mode"  decimal st_mode including the type bits (33188 for a 0644 regular file)
//   "uid", "gid"  decimal
//   "mtime" decimal seconds since the epoch; objfs writes "<s>.<9-digit ns>" when the
//           nanoseconds are not zero (s3fs reads both forms), integer seconds otherwise
//   "atime", "ctime"  the same form. Unlike the four above they are not rewritten by every
//           upload: they travel with the object's other metadata. An object without them shows
//           its mtime: "atime" is written only by an explicit utimensat (reads never update it),
//           "ctime" by a change of the metadata alone (chmod, chown, utimensat, setxattr, rename);
//           a change of the data drops it, so that the ctime is the new mtime again.
//   "rdev"  decimal device number of a character or block device (the st_rdev that mknod was
//           given). s3fs keeps the device's type in "mode" but drops the number: its devices
//           read back here as device 0, and objfs's show their type, with device 0, in s3fs.
//           Not one of SetPosixMetadata's four names: it rides along with the other metadata
//           (through chmod, rename, a remount), as extended attributes do.
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
inline constexpr char kAtimeMetadata[] = "atime";
inline constexpr char kCtimeMetadata[] = "ctime";
inline constexpr char kRdevMetadata[] = "rdev";

struct PosixMetadata {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<int64_t> mtime_ns;
};

// The device number in `metadata` ("rdev"), 0 when absent or malformed.
uint64_t ParseRdev(const Metadata& metadata);
// Reads the attributes present (and well-formed) in `metadata`.
PosixMetadata ParsePosixMetadata(const Metadata& metadata);
// Sets the four names in `metadata`, leaving other names as they are.
void SetPosixMetadata(uint32_t mode, uint32_t uid, uint32_t gid, int64_t mtime_ns,
                      Metadata* metadata);
// Drops the four names, leaving the rest (atime, ctime, xattrs, names of other tools).
Metadata WithoutPosixMetadata(const Metadata& metadata);
// The access and change times of an object whose mtime is `mtime_ns` and whose metadata is
// `metadata` (the whole or only what WithoutPosixMetadata leaves): "atime" and "ctime" where
// present and well-formed, else the mtime.
struct StoredTimes {
  int64_t atime_ns = 0;
  int64_t ctime_ns = 0;
};
StoredTimes StoredTimesOf(const Metadata& metadata, int64_t mtime_ns);

// The size S3 counts against its limit on user metadata (AWS: 2 KiB): the bytes of every name
// (without the "x-amz-meta-" prefix) and value. "mtime" (and "atime" and "ctime" where present)
// counts at its longest form, so that a later write or touch, whose mtime has nanoseconds, never
// takes metadata accepted under the limit over it. Headers kept as metadata (IsHeaderMetadata)
// are not user metadata and do not count.
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
