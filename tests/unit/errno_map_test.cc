#include "fs/errno_map.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace objfs {
namespace {

TEST(ErrnoMapTest, EveryCodeHasItsErrno) {
  struct Case {
    StatusCode code;
    int err;
  };
  const Case cases[] = {
      {StatusCode::kOk, 0},
      {StatusCode::kNotFound, ENOENT},
      {StatusCode::kAlreadyExists, EEXIST},
      {StatusCode::kPreconditionFailed, ESTALE},
      {StatusCode::kPermissionDenied, EACCES},
      {StatusCode::kInvalidArgument, EINVAL},
      {StatusCode::kUnsupported, EOPNOTSUPP},
      {StatusCode::kTransient, EIO},
      {StatusCode::kNotEmpty, ENOTEMPTY},
      {StatusCode::kNoSpace, ENOSPC},
      {StatusCode::kIoError, EIO},
      {StatusCode::kCancelled, EINTR},
      {StatusCode::kInternal, EIO},
      {StatusCode::kNameTooLong, ENAMETOOLONG},
      {StatusCode::kIsDirectory, EISDIR},
      {StatusCode::kNotDirectory, ENOTDIR},
      {StatusCode::kTimedOut, EIO},
      {StatusCode::kNoAttribute, ENODATA},
      {StatusCode::kNotPermitted, EPERM},
      {StatusCode::kFileTooLarge, EFBIG},
      {StatusCode::kTooBig, E2BIG},
      {StatusCode::kOutOfDescriptors, ENFILE},
  };
  for (const Case& c : cases) {
    Status s = c.code == StatusCode::kOk ? Status::Ok() : Status(c.code, "m");
    EXPECT_EQ(ErrnoFromStatus(s), c.err) << StatusCodeName(c.code);
  }
}

TEST(ErrnoMapTest, XattrErrorsHaveTheirOwnErrnos) {
  EXPECT_EQ(ErrnoFromStatus(NoXattrError("user.x")), ENODATA);
  EXPECT_EQ(ErrnoFromStatus(ReservedXattrError("user.etag")), EPERM);
  EXPECT_EQ(ErrnoFromStatus(FileTooLargeError("f")), EFBIG);
  EXPECT_EQ(ErrnoFromStatus(XattrTooLargeError("x")), E2BIG);
  // A server error code does not turn an ordinary NotFound into ENODATA.
  EXPECT_EQ(ErrnoFromStatus(Status(StatusCode::kNotFound, "m", "NoSuchKey")), ENOENT);
  EXPECT_EQ(ErrnoFromStatus(Status(StatusCode::kPermissionDenied, "m", "AccessDenied")), EACCES);
}

TEST(ErrnoMapTest, NewCodesHaveNames) {
  EXPECT_EQ(StatusCodeName(StatusCode::kNameTooLong), "NameTooLong");
  EXPECT_EQ(StatusCodeName(StatusCode::kIsDirectory), "IsDirectory");
  EXPECT_EQ(StatusCodeName(StatusCode::kNotDirectory), "NotDirectory");
}

}  // namespace
}  // namespace objfs
