// The one table that turns a Status into the errno the kernel returns to the application.
//
// Nothing else in objfs interprets status codes as errnos. Four errnos have no status code of
// their own and are told apart by the status's server_code: ENODATA (a missing extended
// attribute, a NotFound made by NoXattrError), EPERM (a read-only objfs attribute, a
// PermissionDenied made by ReservedXattrError), and two InvalidArguments: EFBIG (a write past
// the largest object, FileTooLargeError) and E2BIG (an attribute too large for the object's
// metadata, XattrTooLargeError).
#pragma once

#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

// 0 for an ok status, otherwise a positive errno value.
int ErrnoFromStatus(const Status& status);

// NotFound that maps to ENODATA: the object exists but has no attribute `name`.
Status NoXattrError(std::string name);
// PermissionDenied that maps to EPERM: `name` is maintained by objfs and cannot be changed.
Status ReservedXattrError(std::string name);
// InvalidArgument that maps to EFBIG: a write or truncate past the largest object the store
// can hold.
Status FileTooLargeError(std::string message);
// InvalidArgument that maps to E2BIG: the attribute alone does not fit in the object's metadata.
Status XattrTooLargeError(std::string message);
// Unsupported (EOPNOTSUPP): `name` is outside the user. namespace, the only one objfs keeps.
Status UnsupportedXattrError(std::string_view name);

}  // namespace objfs
