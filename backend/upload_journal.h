// Where a store notes the uploads the server holds for it until they finish.
//
// An S3 multipart upload and an SFTP upload's temporary file live on the server until the
// upload completes or is aborted. A killed objfs never gets to either, and the server keeps
// them (S3 bills the parts of a multipart upload until it is aborted). A store given a journal
// notes each such upload before it can outlive the process and drops the note once the server
// no longer holds it; the next mount over the same cache directory finds the notes and removes
// exactly those uploads, never another client's (cache/upload_records.h keeps the notes).
#pragma once

#include <string_view>

#include "backend/status.h"

namespace objfs {

class UploadJournal {
 public:
  virtual ~UploadJournal() = default;

  // Notes an upload: `name` is the S3 key or the SFTP temporary file's path, `upload_id` the
  // S3 UploadId (empty on SFTP). An error means the note could not be kept: the store then
  // gives the upload up rather than leave something behind that nobody would remove.
  virtual Status Opened(std::string_view name, std::string_view upload_id) = 0;

  // The server no longer holds the upload (completed, aborted or removed). Unknown uploads are
  // ignored.
  virtual void Closed(std::string_view name, std::string_view upload_id) = 0;

  // Its abort (or removal) failed: the server may still hold it, and nobody uses it any more,
  // so it may be cleared later without waiting for the next mount. Unknown uploads are ignored.
  virtual void Abandoned(std::string_view /*name*/, std::string_view /*upload_id*/) {}
};

}  // namespace objfs
