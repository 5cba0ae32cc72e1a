// The headers an S3 request carries for the mount's object settings: Content-Type from the
// key's extension, storage class, canned ACL, server-side encryption (SSE-S3, SSE-KMS, SSE-C)
// and requester-pays.
//
// They apply to some requests only: what creates an object (PutObject, CopyObject,
// CreateMultipartUpload) takes the storage class, ACL and SSE-S3/KMS; with SSE-C every request
// that reads or writes object data (GET, HEAD, PUT, UploadPart, the multipart calls) carries the
// customer key, and a copy names it for its source too, so that a copy keeps the source's
// encryption. Kept apart from S3Store so that the choice is unit tested request by request.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "backend/s3/sigv4.h"
#include "backend/status.h"

namespace objfs::s3 {

// Content types by file name extension, from a mime.types file ("type ext ext ...").
class MimeTypes {
 public:
  static constexpr char kSystemFile[] = "/etc/mime.types";

  // The table of `path`; an empty table when the file is missing or unreadable.
  static MimeTypes Load(const std::string& path);
  // Parses a mime.types text.
  static MimeTypes Parse(std::string_view text);

  // The type of `key`'s extension (after the last '.' of its last component, any case), or ""
  // when there is none or it is unknown: the server then stores binary/octet-stream.
  std::string TypeOf(std::string_view key) const;
  size_t size() const { return types_.size(); }

 private:
  std::map<std::string, std::string> types_;  // lowercase extension -> type
};

struct ObjectHeaderOptions {
  std::string storage_class;   // empty: none sent (the bucket's default)
  std::string acl;             // canned ACL; empty: none sent
  std::string sse;             // "AES256" or "aws:kms"; empty: none sent
  std::string sse_kms_key_id;  // with sse "aws:kms"
  std::string sse_c_key;       // SSE-C: the 32-byte customer key; empty: none
  bool requester_pays = false;
  std::shared_ptr<const MimeTypes> mime_types;  // null: no Content-Type added
};

// The SSE-C key in `path`: 32 bytes as they are, or their base64 (44 characters, a line end
// allowed). InvalidArgument, one line, otherwise.
Result<std::string> ReadSseCustomerKey(const std::string& path);

// Adds to `headers` what `options` asks for a request `method` on `key` (empty for requests on
// the bucket) with `query`. Headers already present (a Content-Type the caller chose) stay.
void AddObjectHeaders(const ObjectHeaderOptions& options, std::string_view method,
                      std::string_view key, const HeaderList& query, HeaderList& headers);

// "aws:kms" or "aws:kms:dsse": an x-amz-server-side-encryption of SSE-KMS.
bool IsKmsAlgorithm(std::string_view algorithm);

// Whether the ETag S3 gives an object it stores is the MD5 of the bytes, which objfs checks
// against what it sent: not under SSE-KMS or SSE-C, whose ETags AWS documents as something
// else, whatever their shape. `asked`: the algorithm a request named for an object's own
// encryption ("": none); `replied`: the x-amz-server-side-encryption of the reply ("": none),
// and `replied_customer_key` whether it named SSE-C.
bool StoredETagIsMd5(const ObjectHeaderOptions& mount, std::string_view asked,
                     std::string_view replied = {}, bool replied_customer_key = false);

}  // namespace objfs::s3
