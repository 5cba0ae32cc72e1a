// MD5 digests, which S3 uses for ETags and Content-MD5 headers.
//
// objfs hashes what it uploads to check the ETag the server acknowledges, and computes the
// multipart form ("<md5 of the part md5s>-N") to predict what a multipart upload or a copy by
// parts yields. The hashing is OpenSSL's (EVP); this only gives it a small value-typed face.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/etag.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace objfs {

using Md5Digest = std::array<uint8_t, 16>;

// A streaming MD5: Update() any number of times, then Final(). After Final() the hasher starts
// over, so one object can hash several inputs in turn.
class Md5 {
 public:
  Md5();
  Md5(Md5&&) noexcept = default;
  Md5& operator=(Md5&&) noexcept = default;

  void Update(std::span<const std::byte> data);
  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data);
  Md5Digest Final();

 private:
  struct CtxFree {
    void operator()(EVP_MD_CTX* ctx) const;
  };
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx_;
};

// The MD5 of one buffer.
Md5Digest Md5Of(std::span<const std::byte> data);
Md5Digest Md5Of(std::string_view data);

// The ETag S3 gives a multipart upload whose parts have these MD5s: the MD5 of the concatenated
// part digests, in hex, followed by "-<number of parts>".
ETag MultipartETag(const std::vector<Md5Digest>& part_md5s);

}  // namespace objfs
