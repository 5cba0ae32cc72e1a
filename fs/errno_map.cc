#include "fs/errno_map.h"

#include <cerrno>
#include <utility>

namespace objfs {

Status NoXattrError(const std::string& name) {
  return Status(StatusCode::kNoAttribute, "no extended attribute " + name);
}

Status ReservedXattrError(const std::string& name) {
  return Status(StatusCode::kNotPermitted, "extended attribute " + name + " is read-only");
}

Status FileTooLargeError(std::string message) {
  return Status(StatusCode::kFileTooLarge, std::move(message));
}

Status XattrTooLargeError(std::string message) {
  return Status(StatusCode::kTooBig, std::move(message));
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
      return ENOENT;
    case StatusCode::kAlreadyExists:
      return EEXIST;
    case StatusCode::kPreconditionFailed:
      return ESTALE;
    case StatusCode::kPermissionDenied:
      return EACCES;
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
    case StatusCode::kNoAttribute:
      return ENODATA;
    case StatusCode::kNotPermitted:
      return EPERM;
    case StatusCode::kFileTooLarge:
      return EFBIG;
    case StatusCode::kTooBig:
      return E2BIG;
    case StatusCode::kOutOfDescriptors:
      // The file system's own limit, not the caller's (EMFILE would say the caller has too
      // many files open).
      return ENFILE;
  }
  return EIO;
}

}  // namespace objfs
