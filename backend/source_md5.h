// The MD5 of bytes a ByteSource gives: what S3's Content-MD5 of a put or part needs, and what
// tells whether an object holds a staged file's bytes (its plain-MD5 ETag).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "backend/md5.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs {

// The MD5 of [offset, offset+size) of `source`, read in bulk. Fails where the source fails or
// ends early.
Result<Md5Digest> Md5OfSource(const ByteSource& source, uint64_t offset, uint64_t size);

// `source`, hashing [offset, offset + length) of it as it is read: for an upload that checks
// its bytes by the MD5 the server answers (a part's ETag) instead of hashing them before it
// sends them, so that they are read once, not twice, and the first byte leaves at once. The
// hash covers the bytes handed out, i.e. exactly those sent. It expects one pass in order from
// `offset`; a read at `offset` again (a send rewound and begun afresh) starts the hash over,
// and any other order leaves no digest. One reader at a time.
class Md5WhileRead : public ByteSource {
 public:
  Md5WhileRead(const ByteSource& source, uint64_t offset, uint64_t length)
      : source_(source), start_(offset), end_(offset + length), next_(offset) {}
  uint64_t size() const override { return source_.size(); }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override;
  // The MD5 of the slice, if the last pass read all of it in order; once.
  std::optional<Md5Digest> TakeDigest();

 private:
  const ByteSource& source_;
  const uint64_t start_;
  const uint64_t end_;
  mutable Md5 md5_;
  mutable uint64_t next_;  // where the pass goes on
  mutable bool in_order_ = true;
};

}  // namespace objfs
