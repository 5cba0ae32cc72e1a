// Reading the small files an operator names in options: a key, a password, credentials, a token.
//
// objfs runs as root from fstab, so such a name may point anywhere: at a FIFO nobody writes to
// (an open or a read that never returns, and the mount hangs at boot), at /dev/zero or a huge
// file (memory eaten before any check). Every such file is opened without blocking, must be a
// regular file or a FIFO (`sse_c_key=<(vault read ...)`, `password_file=/dev/stdin`), is read
// up to a bound that is far above what it may hold, and a FIFO is waited on for a bounded time.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

// The whole of the regular file or FIFO (a pipe) `path` (symbolic links followed), at most
// `max_bytes`; "" for /dev/null. A FIFO is read until its writer closes it, for at most
// `fifo_wait` in all.
// `what` names the file in messages ("sse_c_key file"). NotFound when it does not exist,
// PermissionDenied when it may not be read, InvalidArgument when it is neither a regular file
// nor a FIFO, holds more than `max_bytes` or its writer did not finish within `fifo_wait`; each
// a one-line message naming `what` and `path`.
Result<std::string> ReadSmallFile(const std::string& path, size_t max_bytes, std::string_view what,
                                  std::chrono::milliseconds fifo_wait = std::chrono::seconds(10));

// For the files a library opens itself (libssh's configuration, keys, known hosts): Ok when
// `path` does not exist, is a regular file or is /dev/null; InvalidArgument otherwise (a FIFO, a
// device, a directory), checked without opening it.
Status CheckRegularFileIfExists(const std::string& path, std::string_view what);

}  // namespace objfs
