#include "backend/s3/object_headers.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "backend/base64.h"
#include "backend/md5.h"
#include "backend/small_file.h"

namespace objfs::s3 {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool Has(const HeaderList& list, std::string_view name) {
  return std::any_of(list.begin(), list.end(),
                     [name](const auto& entry) { return Lower(entry.first) == name; });
}

}  // namespace

MimeTypes MimeTypes::Load(const std::string& path) {
  // Debian's is 60 KB.
  Result<std::string> text = ReadSmallFile(path, 16 << 20, "MIME types file");
  if (!text.ok()) return MimeTypes();
  return Parse(*text);
}

MimeTypes MimeTypes::Parse(std::string_view text) {
  MimeTypes table;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string type;
    if (!(words >> type)) continue;
    std::string ext;
    // The first type listed for an extension wins, as in mailcap's readers.
    while (words >> ext) table.types_.emplace(Lower(ext), type);
  }
  return table;
}

std::string MimeTypes::TypeOf(std::string_view key) const {
  const size_t slash = key.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? key : key.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == name.size()) return "";
  auto it = types_.find(Lower(name.substr(dot + 1)));
  return it == types_.end() ? "" : it->second;
}

Result<std::string> ReadSseCustomerKey(const std::string& path) {
  // 32 bytes, or 44 of base64 and a line end: anything much longer is not a key.
  OBJFS_ASSIGN_OR_RETURN(std::string data, ReadSmallFile(path, 1024, "sse_c_key file"));
  if (data.size() == 32) return data;
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r')) data.pop_back();
  if (data.size() == 44) {
    unsigned char decoded[33];
    const int n = EVP_DecodeBlock(decoded, reinterpret_cast<const unsigned char*>(data.data()), 44);
    // EVP_DecodeBlock counts the padding's zero byte: 33 for 32 bytes and one '='.
    if (n == 33 && data[43] == '=' && data[42] != '=') {
      return std::string(reinterpret_cast<const char*>(decoded), 32);
    }
  }
  return InvalidArgumentError("sse_c_key file '" + path +
                              "' must hold a 256-bit key: 32 bytes, or their base64");
}

bool IsKmsAlgorithm(std::string_view algorithm) { return algorithm.rfind("aws:kms", 0) == 0; }

bool StoredETagIsMd5(const ObjectHeaderOptions& mount, std::string_view asked,
                     std::string_view replied, bool replied_customer_key) {
  if (!mount.sse_c_key.empty() || replied_customer_key) return false;
  return !IsKmsAlgorithm(mount.sse) && !IsKmsAlgorithm(asked) && !IsKmsAlgorithm(replied);
}

void AddObjectHeaders(const ObjectHeaderOptions& options, std::string_view method,
                      std::string_view key, const HeaderList& query, HeaderList& headers) {
  if (options.requester_pays) headers.emplace_back("x-amz-request-payer", "requester");
  if (key.empty()) return;  // a request on the bucket
  const bool part = Has(query, "partnumber");
  const bool initiate = method == "POST" && Has(query, "uploads");
  const bool complete = method == "POST" && Has(query, "uploadid");
  const bool copy = Has(headers, "x-amz-copy-source");
  // PutObject, CopyObject, CreateMultipartUpload.
  const bool creates = (method == "PUT" && !part) || initiate;
  if (creates) {
    if (!copy && options.mime_types != nullptr && !Has(headers, "content-type")) {
      std::string type = options.mime_types->TypeOf(key);
      if (!type.empty()) headers.emplace_back("content-type", std::move(type));
    }
    if (!options.storage_class.empty()) {
      headers.emplace_back("x-amz-storage-class", options.storage_class);
    }
    if (!options.acl.empty()) headers.emplace_back("x-amz-acl", options.acl);
    if (!options.sse.empty()) {
      headers.emplace_back("x-amz-server-side-encryption", options.sse);
      if (!options.sse_kms_key_id.empty()) {
        headers.emplace_back("x-amz-server-side-encryption-aws-kms-key-id", options.sse_kms_key_id);
      }
    }
  }
  if (options.sse_c_key.empty()) return;
  const bool data = method == "GET" || method == "HEAD" || method == "PUT" || initiate || complete;
  if (!data) return;
  const auto* bytes = reinterpret_cast<const uint8_t*>(options.sse_c_key.data());
  const std::string key64 = Base64(std::span<const uint8_t>(bytes, options.sse_c_key.size()));
  const Md5Digest md5 = Md5Of(std::string_view(options.sse_c_key));
  const std::string md5_64 = Base64(std::span<const uint8_t>(md5.data(), md5.size()));
  // A copy's source is an object of this mount: encrypted with the same key.
  const bool copies = copy && method == "PUT";
  // UploadPartCopy needs the destination's key like UploadPart; CopyObject too.
  headers.emplace_back("x-amz-server-side-encryption-customer-algorithm", "AES256");
  headers.emplace_back("x-amz-server-side-encryption-customer-key", key64);
  headers.emplace_back("x-amz-server-side-encryption-customer-key-md5", md5_64);
  if (copies) {
    headers.emplace_back("x-amz-copy-source-server-side-encryption-customer-algorithm", "AES256");
    headers.emplace_back("x-amz-copy-source-server-side-encryption-customer-key", key64);
    headers.emplace_back("x-amz-copy-source-server-side-encryption-customer-key-md5", md5_64);
  }
}

}  // namespace objfs::s3
