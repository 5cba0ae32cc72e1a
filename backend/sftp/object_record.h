// What an SFTP server cannot store for an object: its ETag, content type and user metadata.
//
// objfs computes an object's content MD5 while uploading it and keeps it, with the metadata,
// in a record next to the file: a symbolic link in the hidden directory ".objfs-meta" of the
// file's directory, whose target text is the encoded record (one SFTP round trip to read or
// write, no file handles). The record names the size and mtime of the file it describes; when
// the file has been changed by something other than objfs they no longer match and the record
// is ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backend/etag.h"
#include "backend/object_store.h"

namespace objfs::sftp {

struct ObjectRecord {
  uint64_t size = 0;
  int64_t mtime_s = 0;  // the file's mtime in whole seconds when the record was written
  ETag etag;
  std::string content_type;
  Metadata metadata;

  bool Describes(uint64_t file_size, int64_t file_mtime_s) const {
    return size == file_size && mtime_s == file_mtime_s;
  }
};

// A single line of printable ASCII without NUL, as a symlink target can hold.
std::string EncodeObjectRecord(const ObjectRecord& record);
// Nothing when `text` is not a record this version wrote.
std::optional<ObjectRecord> DecodeObjectRecord(std::string_view text);

}  // namespace objfs::sftp
