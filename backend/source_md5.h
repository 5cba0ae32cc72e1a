// The MD5 of bytes a ByteSource gives: what S3's Content-MD5 of a put or part needs, and what
// tells whether an object holds a staged file's bytes (its plain-MD5 ETag).
#pragma once

#include <cstdint>

#include "backend/md5.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs {

// The MD5 of [offset, offset+size) of `source`, read in bulk. Fails where the source fails or
// ends early.
Result<Md5Digest> Md5OfSource(const ByteSource& source, uint64_t offset, uint64_t size);

}  // namespace objfs
