// The rename of a directory on a store without a native rename: every object under "from/"
// copied to the same place under "to/" (in parallel), and only once all copies succeeded, the
// old objects removed in one batch. A directory over a bound is refused before anything is
// copied, since a rename of a huge tree is no quick metadata change here.
//
// It exists apart from Filesystem because it is a store-level job with its own failure rules
// (nothing removed unless everything copied; the marker goes along even when not listed), tested
// on its own over the in-memory store. Filesystem keeps what the rename means for the mount (its
// inodes, its caches, the unsaved files it uploads first).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "backend/log.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs {

class IoPool;

// Moves the objects under `from` + "/" to `to` + "/". `has_marker`: the directory's marker
// object exists (otherwise the marker key is removed too: that is what removes a plain
// directory of a hierarchical store, and a no-op on an object store). InvalidArgument, before
// any copy, when more than `max_objects` objects are under it, told to `log` too (mv can only
// say "Invalid argument": the log says why); a failed copy is returned with nothing removed
// (copies made stay where they are: the source is whole). NameTooLong, before any copy, when
// a key would grow past the store's max_key_bytes.
Status MoveDirectoryObjects(ObjectStore& store, IoPool& pool, const std::string& from,
                            const std::string& to, bool has_marker, size_t max_objects,
                            const LogFunction& log);

}  // namespace objfs
