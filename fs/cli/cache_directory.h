// A mount's cache directory: where its writes are staged, whose it is, and who may change it.
#pragma once

#include <string>
#include <string_view>

#include "backend/status.h"

namespace objfs {

class UploadRecords;

// Creates `dir` and the parents it lacks, each private (0700): staged data and the records
// naming their keys live there.
Status CreatePrivateDirectories(const std::string& dir);

// What a cache directory's staged writes, crash records, notes of uploads and store state (db/:
// the ETags and metadata known of its files) belong to: its file .store names the store, a
// first line with its URL (with any prefix: CanonicalUrl) and, where the URL does not name its
// server (S3: a bucket of one name on another endpoint is another bucket), a second line
// "server NAME" (ServerName). The first mount of the directory writes it once its store opened
// (so a mistyped URL claims nothing). Crash records name keys only, so the mount of another
// store over them would upload one bucket's files into another, over its objects there:
// refused with a one-line error instead, the data left for the mount it belongs to. The same
// URL on another server is refused only while the directory holds something an earlier mount
// left for its server (the default cache directory is named after the URL alone, and one
// server's address may be spelt in several ways); otherwise the directory becomes that
// server's. (A directory of an objfs before .store, or before its server line, is taken as
// this store's.)
struct CacheScope {
  std::string url;     // CanonicalUrl
  std::string server;  // ServerName; empty where the URL names the server, or not yet known
  // .store's content.
  std::string Text() const;
  // "URL" or "URL on SERVER", for messages.
  std::string Describe() const;
};

// An S3 endpoint as a cache directory's .store names it: the scheme and host in lower case,
// without a default port or a trailing slash; "AWS" for AWS's own (no endpoint given).
std::string ServerName(std::string_view endpoint);

// What .store in `dir` names; NotFound where it is missing.
Result<CacheScope> ReadCacheScope(const std::string& dir);

// Refuses `dir` when its .store names another URL than `scope`'s; and, once `scope.server` is
// known, another server while the directory holds what an earlier mount left for that one:
// staged data, held metadata changes (`dir`'s records), or uploads noted in `uploads` (null:
// none known yet). `claim`: write .store when it is missing or names less or another server
// (not synced: lost to a power cut, it is written again by the next mount).
Status CheckCacheScope(const std::string& dir, const CacheScope& scope,
                       const UploadRecords* uploads, bool claim);

// What the cache directory holds is uploaded under the mounting user's credentials, and a
// crash record there names the key: another user who can write there could have their data
// uploaded, or a staged file swapped for a symbolic link to a private file. As ssh does with
// its keys, the directory must belong to the user and be writable by nobody else; so must a
// symbolic link naming it, and each directory above it, unless root owns that one or (like
// /tmp) its sticky bit keeps others from renaming what they do not own. `option` names the
// option that gave it, for the message.
Status CheckCacheDirectory(const std::string& dir, std::string_view option = "cache_dir");

}  // namespace objfs
