// The few file operations every persisted record of cache_dir needs, written once: an errno
// turned into a Status that names the file, and a whole-file write that a crash or a full
// disk never leaves half done.
#pragma once

#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

// "WHAT PATH: strerror(err)", as NoSpace for ENOSPC and EDQUOT (so that callers can make room),
// as FileTooLarge for EFBIG (the file size limit), else as IoError.
Status ErrnoStatus(std::string_view what, const std::string& path, int err);

// Writes `bytes` to "PATH.tmp" (created 0600, never through a symbolic link) and renames it over
// `path`, so that `path` is either as it was or whole. On failure nothing is left behind. The
// data is not synced: callers that need it on disk before a rename sync it themselves.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace objfs
