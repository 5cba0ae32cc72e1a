// One error type for every layer of objfs.
//
// A Status carries a code that callers branch on, a human message for logs and the one-line
// errors users see, and (for S3) the server's own error code such as "NoSuchKey" or "SlowDown".
// Exactly one table (fs/errno_map) turns a Status into an errno, at the FUSE boundary; nothing
// else interprets codes as errnos. Result<T> is a value or a non-ok Status.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace objfs {

enum class StatusCode {
  kOk = 0,
  kNotFound,            // the key or path does not exist
  kAlreadyExists,       // create-exclusive hit an existing object
  kPreconditionFailed,  // If-Match / If-None-Match failed: the object changed
  kPermissionDenied,    // credentials rejected or access denied
  kInvalidArgument,     // a request the backend cannot express (bad key, bad range)
  kUnsupported,         // the backend has no such operation
  kTransient,           // 5xx, throttling, timeout, reset connection: may succeed later
  kNotEmpty,            // directory not empty
  kNoSpace,             // local disk or server quota full
  kIoError,             // local I/O failed (staging file, pipe)
  kCancelled,           // the caller gave up
  kInternal,            // a bug or a malformed server reply
  kNameTooLong,         // a path component longer than 255 bytes
  kIsDirectory,         // a file operation on a directory
  kNotDirectory,        // a directory operation on a file
  kTimedOut,            // the call's time budget ran out (operation_timeout); never retried
  kNoAttribute,         // the file exists but has no such extended attribute (ENODATA)
  kNotPermitted,        // no one may do this, whatever the credentials (EPERM)
  kFileTooLarge,        // past the largest object the store can hold (EFBIG)
  kTooBig,              // a value larger than its container allows (E2BIG)
  kOutOfDescriptors,    // this process has no file descriptor left (EMFILE, ENFILE): ENFILE
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, std::string server_code = {})
      : code_(code), message_(std::move(message)), server_code_(std::move(server_code)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The server's error code ("NoSuchKey", "SlowDown", an SFTP status name), or empty.
  const std::string& server_code() const { return server_code_; }

  // "NotFound: <message>" (plus " [ServerCode]" when there is one). One line.
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& other) const {
    return code_ == other.code_ && message_ == other.message_ && server_code_ == other.server_code_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string server_code_;
};

inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
inline Status PreconditionFailedError(std::string m) {
  return {StatusCode::kPreconditionFailed, std::move(m)};
}
inline Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status UnsupportedError(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status TransientError(std::string m) { return {StatusCode::kTransient, std::move(m)}; }
inline Status NotEmptyError(std::string m) { return {StatusCode::kNotEmpty, std::move(m)}; }
inline Status NoSpaceError(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status TimedOutError(std::string m) { return {StatusCode::kTimedOut, std::move(m)}; }

// A value of type T, or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result needs a value or a non-ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; an ok Status when there is a value.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace objfs

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define OBJFS_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::objfs::Status objfs_status_ = (expr);        \
    if (!objfs_status_.ok()) return objfs_status_; \
  } while (0)

#define OBJFS_CONCAT_INNER_(a, b) a##b
#define OBJFS_CONCAT_(a, b) OBJFS_CONCAT_INNER_(a, b)
// `OBJFS_ASSIGN_OR_RETURN(auto x, F());` binds the value of a Result or returns its Status.
#define OBJFS_ASSIGN_OR_RETURN(lhs, expr) \
  OBJFS_ASSIGN_OR_RETURN_IMPL_(OBJFS_CONCAT_(objfs_result_, __LINE__), lhs, expr)
#define OBJFS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
