// The one table that turns a Status into the errno the kernel returns to the application.
//
// Nothing else in objfs interprets status codes as errnos. Each errno has a status code of its
// own (kNoAttribute for ENODATA, kNotPermitted for EPERM, kFileTooLarge for EFBIG, kTooBig for
// E2BIG, kOutOfDescriptors for ENFILE), made by the constructors below where a message of their
// own helps.
#pragma once

#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

// 0 for an ok status, otherwise a positive errno value.
int ErrnoFromStatus(const Status& status);

// NoAttribute (ENODATA): the object exists but has no attribute `name`.
Status NoXattrError(const std::string& name);
// NotPermitted (EPERM): `name` is maintained by objfs and cannot be changed.
Status ReservedXattrError(const std::string& name);
// FileTooLarge (EFBIG): a write or truncate past the largest object the store
// can hold.
Status FileTooLargeError(std::string message);
// TooBig (E2BIG): the attribute alone does not fit in the object's metadata.
Status XattrTooLargeError(std::string message);
// Unsupported (EOPNOTSUPP): `name` is outside the user. namespace, the only one objfs keeps.
Status UnsupportedXattrError(std::string_view name);

}  // namespace objfs
