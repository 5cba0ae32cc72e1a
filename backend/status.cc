#include "backend/status.h"

namespace objfs {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kPreconditionFailed:
      return "PreconditionFailed";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kTransient:
      return "Transient";
    case StatusCode::kNotEmpty:
      return "NotEmpty";
    case StatusCode::kNoSpace:
      return "NoSpace";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kNameTooLong:
      return "NameTooLong";
    case StatusCode::kIsDirectory:
      return "IsDirectory";
    case StatusCode::kNotDirectory:
      return "NotDirectory";
    case StatusCode::kTimedOut:
      return "TimedOut";
    case StatusCode::kNoAttribute:
      return "NoAttribute";
    case StatusCode::kNotPermitted:
      return "NotPermitted";
    case StatusCode::kFileTooLarge:
      return "FileTooLarge";
    case StatusCode::kTooBig:
      return "TooBig";
    case StatusCode::kOutOfDescriptors:
      return "OutOfDescriptors";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  if (!server_code_.empty()) {
    out += " [";
    out += server_code_;
    out += "]";
  }
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m), server_code_);
}

}  // namespace objfs
