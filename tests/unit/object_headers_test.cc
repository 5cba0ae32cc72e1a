// The headers S3 requests get for the mount's object settings (backend/s3/object_headers.h),
// request by request; the ones RGW cannot check (SSE-S3, SSE-KMS, requester-pays) are only
// checked here.
#include "backend/s3/object_headers.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/base64.h"
#include "backend/md5.h"

namespace objfs::s3 {
namespace {

std::string Header(const HeaderList& headers, const std::string& name) {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return "<none>";
}

ObjectHeaderOptions Everything() {
  ObjectHeaderOptions o;
  o.storage_class = "STANDARD_IA";
  o.acl = "bucket-owner-full-control";
  o.sse = "aws:kms";
  o.sse_kms_key_id = "arn:aws:kms:eu-west-1:1:key/k";
  o.requester_pays = true;
  o.mime_types = std::make_shared<const MimeTypes>(
      MimeTypes::Parse("# comment\ntext/html html htm\napplication/json json\n"
                       "text/plain txt\ntext/x-other txt\n"));
  return o;
}

TEST(MimeTypesTest, ExtensionOfTheLastComponentAnyCase) {
  MimeTypes types = MimeTypes::Parse("text/html html htm # trailing\n\ntext/plain txt\n");
  EXPECT_EQ(types.TypeOf("a/b/index.HTML"), "text/html");
  EXPECT_EQ(types.TypeOf("x.htm"), "text/html");
  EXPECT_EQ(types.TypeOf("dir.txt/file"), "");
  EXPECT_EQ(types.TypeOf(".txt"), "");  // a hidden file, no extension
  EXPECT_EQ(types.TypeOf("file."), "");
  EXPECT_EQ(types.TypeOf("file.unknown"), "");
}

TEST(MimeTypesTest, AMissingFileIsAnEmptyTable) {
  EXPECT_EQ(MimeTypes::Load("/nonexistent/mime.types").size(), 0u);
  EXPECT_EQ(MimeTypes::Load("/nonexistent/mime.types").TypeOf("a.html"), "");
}

TEST(MimeTypesTest, TheSystemFileKnowsCommonTypes) {
  if (!std::filesystem::exists(MimeTypes::kSystemFile)) GTEST_SKIP() << "no /etc/mime.types";
  MimeTypes types = MimeTypes::Load(MimeTypes::kSystemFile);
  EXPECT_EQ(types.TypeOf("a.html"), "text/html");
  EXPECT_EQ(types.TypeOf("a.json"), "application/json");
}

TEST(ObjectHeadersTest, PutObjectGetsTypeClassAclAndEncryption) {
  HeaderList headers;
  AddObjectHeaders(Everything(), "PUT", "dir/page.html", {}, headers);
  EXPECT_EQ(Header(headers, "content-type"), "text/html");
  EXPECT_EQ(Header(headers, "x-amz-storage-class"), "STANDARD_IA");
  EXPECT_EQ(Header(headers, "x-amz-acl"), "bucket-owner-full-control");
  EXPECT_EQ(Header(headers, "x-amz-server-side-encryption"), "aws:kms");
  EXPECT_EQ(Header(headers, "x-amz-server-side-encryption-aws-kms-key-id"),
            "arn:aws:kms:eu-west-1:1:key/k");
  EXPECT_EQ(Header(headers, "x-amz-request-payer"), "requester");
}

TEST(ObjectHeadersTest, TheFirstTypeOfAnExtensionWinsAndAGivenTypeStays) {
  HeaderList headers;
  AddObjectHeaders(Everything(), "PUT", "notes.txt", {}, headers);
  EXPECT_EQ(Header(headers, "content-type"), "text/plain");
  HeaderList given = {{"content-type", "application/x-mine"}};
  AddObjectHeaders(Everything(), "PUT", "notes.txt", {}, given);
  int types = 0;
  for (const auto& [n, v] : given) types += n == "content-type";
  EXPECT_EQ(types, 1);
  EXPECT_EQ(Header(given, "content-type"), "application/x-mine");
}

TEST(ObjectHeadersTest, CreateMultipartUploadAndCopyObjectCreateObjects) {
  HeaderList initiate;
  AddObjectHeaders(Everything(), "POST", "big.json", {{"uploads", ""}}, initiate);
  EXPECT_EQ(Header(initiate, "content-type"), "application/json");
  EXPECT_EQ(Header(initiate, "x-amz-storage-class"), "STANDARD_IA");
  EXPECT_EQ(Header(initiate, "x-amz-server-side-encryption"), "aws:kms");

  HeaderList copy = {{"x-amz-copy-source", "/b/src.html"}, {"x-amz-metadata-directive", "COPY"}};
  AddObjectHeaders(Everything(), "PUT", "dst.html", {}, copy);
  EXPECT_EQ(Header(copy, "x-amz-storage-class"), "STANDARD_IA");
  EXPECT_EQ(Header(copy, "x-amz-acl"), "bucket-owner-full-control");
  EXPECT_EQ(Header(copy, "x-amz-server-side-encryption"), "aws:kms");
  EXPECT_EQ(Header(copy, "content-type"), "<none>");  // the source's type is copied
}

TEST(ObjectHeadersTest, PartsReadsAndBucketRequestsCreateNothing) {
  for (const auto& [method, key, query] :
       std::vector<std::tuple<std::string, std::string, HeaderList>>{
           {"PUT", "k.html", {{"partNumber", "1"}, {"uploadId", "u"}}},
           {"GET", "k.html", {}},
           {"HEAD", "k.html", {}},
           {"DELETE", "k.html", {}},
           {"POST", "k.html", {{"uploadId", "u"}}},
           {"GET", "", {{"list-type", "2"}}}}) {
    SCOPED_TRACE(method + " " + key);
    HeaderList headers;
    AddObjectHeaders(Everything(), method, key, query, headers);
    EXPECT_EQ(Header(headers, "x-amz-storage-class"), "<none>");
    EXPECT_EQ(Header(headers, "x-amz-acl"), "<none>");
    EXPECT_EQ(Header(headers, "x-amz-server-side-encryption"), "<none>");
    EXPECT_EQ(Header(headers, "content-type"), "<none>");
    EXPECT_EQ(Header(headers, "x-amz-request-payer"), "requester");  // every request
  }
}

TEST(ObjectHeadersTest, NothingAskedNothingSent) {
  HeaderList headers;
  AddObjectHeaders(ObjectHeaderOptions{}, "PUT", "a.html", {}, headers);
  EXPECT_TRUE(headers.empty());
}

TEST(ObjectHeadersTest, SseCustomerKeyOnDataRequestsAndBothSidesOfACopy) {
  ObjectHeaderOptions o;
  o.sse_c_key = std::string(32, 'k');
  const std::string key64 =
      Base64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(o.sse_c_key.data()), 32));
  const Md5Digest md5 = Md5Of(std::string_view(o.sse_c_key));
  const std::string md5_64 = Base64(std::span<const uint8_t>(md5.data(), md5.size()));

  for (const auto& [method, query] : std::vector<std::pair<std::string, HeaderList>>{
           {"PUT", {}},
           {"GET", {}},
           {"HEAD", {}},
           {"POST", {{"uploads", ""}}},
           {"PUT", {{"partNumber", "2"}, {"uploadId", "u"}}},
           {"POST", {{"uploadId", "u"}}}}) {
    SCOPED_TRACE(method);
    HeaderList headers;
    AddObjectHeaders(o, method, "k", query, headers);
    EXPECT_EQ(Header(headers, "x-amz-server-side-encryption-customer-algorithm"), "AES256");
    EXPECT_EQ(Header(headers, "x-amz-server-side-encryption-customer-key"), key64);
    EXPECT_EQ(Header(headers, "x-amz-server-side-encryption-customer-key-md5"), md5_64);
    EXPECT_EQ(Header(headers, "x-amz-copy-source-server-side-encryption-customer-key"), "<none>");
  }
  for (const HeaderList& query :
       {HeaderList{}, HeaderList{{"partNumber", "1"}, {"uploadId", "u"}}}) {
    HeaderList copy = {{"x-amz-copy-source", "/b/src"}};
    AddObjectHeaders(o, "PUT", "dst", query, copy);
    EXPECT_EQ(Header(copy, "x-amz-server-side-encryption-customer-key"), key64);
    EXPECT_EQ(Header(copy, "x-amz-copy-source-server-side-encryption-customer-algorithm"),
              "AES256");
    EXPECT_EQ(Header(copy, "x-amz-copy-source-server-side-encryption-customer-key"), key64);
    EXPECT_EQ(Header(copy, "x-amz-copy-source-server-side-encryption-customer-key-md5"), md5_64);
  }
  HeaderList remove;
  AddObjectHeaders(o, "DELETE", "k", {}, remove);
  EXPECT_TRUE(remove.empty());
}

TEST(ObjectHeadersTest, SseCustomerKeyFileRawOrBase64) {
  const std::string dir = ::testing::TempDir();
  const std::string raw = dir + "/raw.key";
  const std::string b64 = dir + "/b64.key";
  const std::string bad = dir + "/bad.key";
  const std::string key(32, '\x07');
  std::ofstream(raw, std::ios::binary) << key;
  std::ofstream(b64) << Base64(std::span<const uint8_t>(
                            reinterpret_cast<const uint8_t*>(key.data()), key.size()))
                     << "\n";
  std::ofstream(bad) << "too short\n";
  EXPECT_EQ(*ReadSseCustomerKey(raw), key);
  EXPECT_EQ(*ReadSseCustomerKey(b64), key);
  Result<std::string> refused = ReadSseCustomerKey(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("must hold a 256-bit key"), std::string::npos);
  EXPECT_FALSE(ReadSseCustomerKey(dir + "/missing.key").ok());
  for (const std::string& path : {raw, b64, bad}) std::remove(path.c_str());
}

// AWS documents that the ETags of SSE-KMS and SSE-C objects are not their MD5: objfs checks an
// ETag against the MD5 it sent only where neither the mount, nor the encryption it keeps, nor
// the server's reply names them.
TEST(ObjectHeadersTest, StoredETagsAreTheMd5OnlyWithoutKmsOrCustomerKeys) {
  ObjectHeaderOptions plain;
  EXPECT_TRUE(StoredETagIsMd5(plain, ""));
  EXPECT_TRUE(StoredETagIsMd5(plain, "AES256", "AES256"));
  EXPECT_FALSE(StoredETagIsMd5(plain, "aws:kms"));
  EXPECT_FALSE(StoredETagIsMd5(plain, "aws:kms:dsse"));
  EXPECT_FALSE(StoredETagIsMd5(plain, "", "aws:kms"));  // the bucket's default
  EXPECT_FALSE(StoredETagIsMd5(plain, "", "", /*replied_customer_key=*/true));
  ObjectHeaderOptions kms;
  kms.sse = "aws:kms";
  EXPECT_FALSE(StoredETagIsMd5(kms, ""));
  ObjectHeaderOptions customer;
  customer.sse_c_key = std::string(32, 'k');
  EXPECT_FALSE(StoredETagIsMd5(customer, ""));
  ObjectHeaderOptions s3;
  s3.sse = "AES256";
  EXPECT_TRUE(StoredETagIsMd5(s3, "", "AES256"));
}

}  // namespace
}  // namespace objfs::s3
