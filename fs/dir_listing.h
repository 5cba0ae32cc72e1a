// The names of a directory from the store's delimited listing pages: objects and common
// prefixes merged in key order, each name given once (a marker "name/" and its prefix, or a file
// "name" next to a directory "name/" a few keys later), names that cannot be file names skipped
// (empty, ".", "..", over 255 bytes, from keys like "a//b"), and the names kept for the metadata
// cache's record of the listing while there are few enough.
//
// It exists apart from Filesystem because these rules hold across pages of any size with a
// bounded state (DirCursor, held between ReadDirPage calls by the FUSE adapter), and each is
// easy to get wrong at a page boundary: they have tests of their own on hand-made pages.
// Filesystem keeps what a name becomes (its inode, its cached or HEADed attributes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "backend/object_store.h"
#include "cache/meta_cache.h"
#include "fs/object_attrs.h"

namespace objfs {

// Where the listing of one open directory stands between ReadDirPage calls: the store's
// continuation token and what it takes to give each name once without keeping every name.
// Filled in by Filesystem; a caller makes a fresh one (or resets it to {}) to list from the start.
struct DirCursor {
  bool started = false;
  bool done = false;  // every page, and the files only staged here, were returned
  std::string key;    // the directory's
  std::string token;  // continues the store's listing; empty before the first page
  size_t heads_left = 0;
  uint64_t listing_ticket = 0;
  // Names for the metadata cache's record of the listing, while there are few enough to keep.
  std::vector<std::string> names;
  bool names_overflow = false;
  // Listed file names that a later "name/" prefix (a directory of the same name) may repeat:
  // each is dropped once the listing has passed "name/" in key order.
  std::set<std::string, std::less<>> recent_files;
  std::string last_sort_key;  // of the last listed name ("name" or "name/")
  // Files staged here but not uploaded, given after the last page unless the listing had them.
  std::set<std::string, std::less<>> local_names;
  // The continuation tokens the store's pages gave, hashed (NoteListingToken): 8 bytes a
  // page, however long the tokens.
  std::set<uint64_t> tokens;
};

// Notes `token`, the continuation token a page of the store's listing of `prefix` gave (empty
// on the last page), among those `seen` before. One given a second time makes a listing that
// would never end (a broken server): an IoError, rather than requests for ever.
Status NoteListingToken(const std::string& prefix, const std::string& token,
                        std::set<uint64_t>* seen);

// A directory listing names kept in DirCursor::names at most; past it none are (the cache then
// records no listing: memory stays bounded for huge directories).
inline constexpr size_t kListingNamesKept = 10000;

// A name of a listing page and what the listing says of it: for a file its size, date and, when
// the listing carries it (SFTP's READDIR), its metadata (complete then); for a directory the
// defaults (its marker's date when the marker was listed).
struct ListedName {
  std::string name;
  MetaRecord listed;
};

// The new names of `page`, a delimited listing of `prefix` (the directory's key and "/", or ""
// for the root), in key order, with `cursor`'s record of what was given brought up to date.
// `implicit_mtime_ns` dates a directory known only as a common prefix. Counts the names skipped
// in `*skipped`.
std::vector<ListedName> NamesOfPage(const Listing& page, const std::string& prefix,
                                    const ObjectAttrs& attrs, int64_t implicit_mtime_ns,
                                    DirCursor* cursor, uint64_t* skipped);

// `name` may be a file name: not empty, ".", ".." or over 255 bytes, and without '/' or NUL.
bool IsValidName(std::string_view name);

}  // namespace objfs
