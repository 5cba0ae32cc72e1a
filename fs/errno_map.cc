#include "fs/errno_map.h"

#include <cerrno>
#include <utility>

namespace objfs {

namespace {
constexpr char kNoDataMarker[] = "ENODATA";
constexpr char kPermMarker[] = "EPERM";
constexpr char kFileTooLargeMarker[] = "EFBIG";
constexpr char kTooBigMarker[] = "E2BIG";
}  // namespace

Status NoXattrError(std::string name) {
  return Status(StatusCode::kNotFound, "no extended attribute " + name, kNoDataMarker);
}

Status ReservedXattrError(std::string name) {
  return Status(StatusCode::kPermissionDenied, "extended attribute " + name + " is read-only",
                kPermMarker);
}

Status FileTooLargeError(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message), kFileTooLargeMarker);
}

Status XattrTooLargeError(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message), kTooBigMarker);
}

Status UnsupportedXattrError(std::string_view name) {
  return UnsupportedError("extended attribute " + std::string(name) +
                          ": only user. extended attributes are supported");
}

int ErrnoFromStatus(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNotFound:
      return status.server_code() == kNoDataMarker ? ENODATA : ENOENT;
    case StatusCode::kAlreadyExists:
      return EEXIST;
    case StatusCode::kPreconditionFailed:
      return ESTALE;
    case StatusCode::kPermissionDenied:
      return status.server_code() == kPermMarker ? EPERM : EACCES;
    case StatusCode::kInvalidArgument:
      if (status.server_code() == kFileTooLargeMarker) return EFBIG;
      return status.server_code() == kTooBigMarker ? E2BIG : EINVAL;
    case StatusCode::kUnsupported:
      return EOPNOTSUPP;
    case StatusCode::kTransient:
      return EIO;
    case StatusCode::kNotEmpty:
      return ENOTEMPTY;
    case StatusCode::kNoSpace:
      return ENOSPC;
    case StatusCode::kIoError:
      return EIO;
    case StatusCode::kCancelled:
      return EINTR;
    case StatusCode::kInternal:
      return EIO;
    case StatusCode::kNameTooLong:
      return ENAMETOOLONG;
    case StatusCode::kIsDirectory:
      return EISDIR;
    case StatusCode::kNotDirectory:
      return ENOTDIR;
    case StatusCode::kTimedOut:
      return EIO;
  }
  return EIO;
}

}  // namespace objfs
