// ETag classification: the one place that decides whether a copy may reuse a source's ETag.
#include "backend/etag.h"

#include <gtest/gtest.h>

#include <chrono>

#include "backend/md5.h"
#include "backend/object_version.h"
#include "backend/source_md5.h"
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

// What an upload hashes as it sends a part: the bytes handed out, over one pass in order.
TEST(Md5WhileReadTest, HashesOnePassInOrderAndStartsOverWhenRewound) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  const MemorySource source(data);
  const Md5Digest slice = Md5Of(std::string_view(data).substr(100, 500));
  auto read = [](const ByteSource& s, uint64_t offset, size_t n) {
    std::string buf(n, '\0');
    Result<size_t> got =
        s.read_at(offset, std::span(reinterpret_cast<std::byte*>(buf.data()), buf.size()));
    return got.ok() ? *got : 0;
  };

  Md5WhileRead whole(source, 100, 500);
  EXPECT_EQ(read(whole, 100, 200), 200u);
  EXPECT_EQ(read(whole, 300, 300), 300u);
  EXPECT_EQ(whole.TakeDigest(), slice);

  // A send rewound and begun again: the hash is of the second pass only.
  Md5WhileRead rewound(source, 100, 500);
  EXPECT_EQ(read(rewound, 100, 250), 250u);
  EXPECT_EQ(read(rewound, 100, 400), 400u);
  EXPECT_EQ(read(rewound, 500, 100), 100u);
  EXPECT_EQ(rewound.TakeDigest(), slice);

  // A read past the slice's end hashes only up to it.
  Md5WhileRead longer(source, 100, 500);
  EXPECT_EQ(read(longer, 100, 450), 450u);
  EXPECT_EQ(read(longer, 550, 100), 100u);
  EXPECT_EQ(longer.TakeDigest(), slice);

  // Not read to the end, read out of order, or taken twice: no digest.
  Md5WhileRead partial(source, 100, 500);
  EXPECT_EQ(read(partial, 100, 499), 499u);
  EXPECT_EQ(partial.TakeDigest(), std::nullopt);
  Md5WhileRead skipped(source, 100, 500);
  EXPECT_EQ(read(skipped, 100, 100), 100u);
  EXPECT_EQ(read(skipped, 250, 350), 350u);
  EXPECT_EQ(skipped.TakeDigest(), std::nullopt);
  Md5WhileRead twice(source, 100, 500);
  EXPECT_EQ(read(twice, 100, 500), 500u);
  EXPECT_TRUE(twice.TakeDigest().has_value());
  EXPECT_EQ(twice.TakeDigest(), std::nullopt);
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
