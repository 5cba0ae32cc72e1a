#include "fs/errno_map.h"

#include <cerrno>

namespace objfs {

namespace {
constexpr char kNoDataMarker[] = "ENODATA";
constexpr char kPermMarker[] = "EPERM";
}  // namespace

Status NoXattrError(std::string name) {
  return Status(StatusCode::kNotFound, "no extended attribute " + name, kNoDataMarker);
}

Status ReservedXattrError(std::string name) {
  return Status(StatusCode::kPermissionDenied, "extended attribute " + name + " is read-only",
                kPermMarker);
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
      return EINVAL;
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
