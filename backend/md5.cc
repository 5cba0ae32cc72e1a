#include "backend/md5.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <string>

namespace objfs {
namespace {

// EVP fails only on allocation failure or a broken OpenSSL installation; neither leaves a
// meaningful way to continue hashing.
void Check(int ok) {
  if (ok != 1) std::abort();
}

}  // namespace

void Md5::CtxFree::operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }

Md5::Md5() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr) std::abort();
  Check(EVP_DigestInit_ex(ctx_.get(), EVP_md5(), nullptr));
}

void Md5::Update(std::span<const std::byte> data) {
  if (data.empty()) return;
  Check(EVP_DigestUpdate(ctx_.get(), data.data(), data.size()));
}

void Md5::Update(std::span<const uint8_t> data) { Update(std::as_bytes(data)); }

void Md5::Update(std::string_view data) {
  Update(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size()));
}

Md5Digest Md5::Final() {
  Md5Digest digest{};
  unsigned int len = 0;
  Check(EVP_DigestFinal_ex(ctx_.get(), digest.data(), &len));
  if (len != digest.size()) std::abort();
  Check(EVP_DigestInit_ex(ctx_.get(), EVP_md5(), nullptr));
  return digest;
}

Md5Digest Md5Of(std::span<const std::byte> data) {
  Md5 md5;
  md5.Update(data);
  return md5.Final();
}

Md5Digest Md5Of(std::string_view data) {
  Md5 md5;
  md5.Update(data);
  return md5.Final();
}

ETag MultipartETag(const std::vector<Md5Digest>& part_md5s) {
  Md5 md5;
  for (const Md5Digest& part : part_md5s) md5.Update(std::span<const uint8_t>(part));
  return ETag::Parse(HexMd5(md5.Final()) + "-" + std::to_string(part_md5s.size()));
}

}  // namespace objfs
