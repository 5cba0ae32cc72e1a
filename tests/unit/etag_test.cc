// ETag classification: the one place that decides whether a copy may reuse a source's ETag.
#include "backend/etag.h"

#include <gtest/gtest.h>

#include <chrono>

#include "backend/md5.h"
#include "backend/object_version.h"
#include "backend/status.h"

namespace objfs {
namespace {

TEST(ETagTest, PlainMd5IsRecognisedAndNormalised) {
  ETag e = ETag::Parse("\"9B2CF535F27731C974343645A3985328\"");
  EXPECT_EQ(e.kind(), ETag::Kind::kPlainMd5);
  EXPECT_TRUE(e.is_plain_md5());
  EXPECT_EQ(e.value(), "9b2cf535f27731c974343645a3985328");
  EXPECT_EQ(e.quoted(), "\"9b2cf535f27731c974343645a3985328\"");
  EXPECT_EQ(e.parts(), 0u);
  // Unquoted (RGW's CopyObjectResult), weak, XML-escaped quotes and white space: same ETag.
  EXPECT_EQ(ETag::Parse("9b2cf535f27731c974343645a3985328"), e);
  EXPECT_EQ(ETag::Parse("W/\"9b2cf535f27731c974343645a3985328\""), e);
  EXPECT_EQ(ETag::Parse("&quot;9b2cf535f27731c974343645a3985328&quot;"), e);
  EXPECT_EQ(ETag::Parse("  \"9b2cf535f27731c974343645a3985328\"\r\n"), e);
}

TEST(ETagTest, MultipartHasItsPartCount) {
  ETag e = ETag::Parse("\"d41d8cd98f00b204e9800998ecf8427e-12\"");
  EXPECT_EQ(e.kind(), ETag::Kind::kMultipart);
  EXPECT_TRUE(e.is_multipart());
  EXPECT_FALSE(e.is_plain_md5());
  EXPECT_EQ(e.parts(), 12u);
}

TEST(ETagTest, NearMissesAreOpaqueNotMd5) {
  for (const char* raw : {"d41d8cd98f00b204e9800998ecf8427",      // 31 digits
                          "d41d8cd98f00b204e9800998ecf8427e0",    // 33 digits
                          "g41d8cd98f00b204e9800998ecf8427e",     // not hex
                          "d41d8cd98f00b204e9800998ecf8427e-",    // no part count
                          "d41d8cd98f00b204e9800998ecf8427e-0",   // zero parts
                          "d41d8cd98f00b204e9800998ecf8427e-01",  // leading zero
                          "d41d8cd98f00b204e9800998ecf8427e-x", "1-2-3"}) {
    ETag e = ETag::Parse(raw);
    EXPECT_EQ(e.kind(), ETag::Kind::kOpaque) << raw;
    EXPECT_FALSE(e.is_plain_md5()) << raw;
    EXPECT_FALSE(e.is_multipart()) << raw;
  }
}

TEST(ETagTest, EmptyIsNone) {
  EXPECT_EQ(ETag::Parse("").kind(), ETag::Kind::kNone);
  EXPECT_EQ(ETag::Parse("\"\"").kind(), ETag::Kind::kNone);
  EXPECT_TRUE(ETag().empty());
}

TEST(ETagTest, FromMd5MatchesTheDigest) {
  ETag e = ETag::FromMd5(Md5Of(std::string_view("")));
  EXPECT_EQ(e.value(), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_TRUE(e.is_plain_md5());
  EXPECT_EQ(ETagKindName(e.kind()), "md5");
}

TEST(StatusTest, ToStringIsOneLineWithServerCode) {
  Status s(StatusCode::kPermissionDenied, "GET s3://b/k: denied\nretry", "AccessDenied");
  EXPECT_EQ(s.ToString(), "PermissionDenied: GET s3://b/k: denied retry [AccessDenied]");
  EXPECT_EQ(s.WithContext("mount").message(), "mount: GET s3://b/k: denied\nretry");
  EXPECT_TRUE(Status::Ok().ok());
  Result<int> r = NotFoundError("x");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// A size-and-mtime version is trusted to name one content only once its mtime is
// kRecentVersionNs (2 s) past: a rewrite within the same whole second keeps the version. A
// version dated ahead of this clock (a server clock ahead) is not settled either.
TEST(SettledVersionTest, OnlyVersionsTwoSecondsOldAreSettled) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  constexpr int64_t kSecond = 1'000'000'000;
  EXPECT_TRUE(SettledVersion(VersionTag(10, now - 60 * kSecond)));
  EXPECT_TRUE(SettledVersion(VersionTag(10, now - 3 * kSecond)));
  EXPECT_FALSE(SettledVersion(VersionTag(10, now - kSecond)));
  EXPECT_FALSE(SettledVersion(VersionTag(10, now)));
  EXPECT_FALSE(SettledVersion(VersionTag(10, now + 60 * kSecond)));
  // Other ETags are versions of their content.
  EXPECT_TRUE(SettledVersion(ETag::FromMd5(Md5Of(std::string_view("x")))));
}

}  // namespace
}  // namespace objfs
