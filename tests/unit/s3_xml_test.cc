#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <pugixml.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/s3/xml.h"

namespace objfs::s3 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kNsPerSec = 1'000'000'000;
// 2015-08-30T12:36:00Z
constexpr int64_t kAug30Sec = 1440938160;

// --- Response bodies as AWS S3 and Ceph RGW send them. ---

constexpr std::string_view kAwsListing = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name>
  <Prefix>photos/</Prefix>
  <KeyCount>4</KeyCount>
  <MaxKeys>1000</MaxKeys>
  <Delimiter>/</Delimiter>
  <IsTruncated>false</IsTruncated>
  <Contents>
    <Key>photos/a.jpg</Key>
    <LastModified>2015-08-30T12:36:00.000Z</LastModified>
    <ETag>&quot;599BAB3ED2C697F1D26842727561FD94&quot;</ETag>
    <Size>142863</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>photos/big.iso</Key>
    <LastModified>2016-02-29T23:59:59.123Z</LastModified>
    <ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag>
    <Size>18446744073709551615</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <CommonPrefixes>
    <Prefix>photos/2014/</Prefix>
  </CommonPrefixes>
  <CommonPrefixes>
    <Prefix>photos/2015/</Prefix>
  </CommonPrefixes>
</ListBucketResult>
)";

constexpr std::string_view kRgwTruncatedListing =
    R"(<?xml version="1.0" encoding="UTF-8"?>)"
    R"(<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name>)"
    R"(<Prefix></Prefix><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated><Contents>)"
    R"(<Key>a</Key><LastModified>2015-08-30T12:36:00.000Z</LastModified>)"
    R"(<ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>0</Size>)"
    R"(<StorageClass>STANDARD</StorageClass><Owner><ID>tester</ID>)"
    R"(<DisplayName>Tester</DisplayName></Owner><Type>Normal</Type></Contents><Contents>)"
    R"(<Key>b/</Key><LastModified>2015-08-30T12:36:00.5Z</LastModified>)"
    R"(<ETag>"d41d8cd98f00b204e9800998ecf8427e"</ETag><Size>0</Size>)"
    R"(<StorageClass>STANDARD</StorageClass><Owner><ID>tester</ID>)"
    R"(<DisplayName>Tester</DisplayName></Owner><Type>Normal</Type></Contents>)"
    R"(<KeyCount>2</KeyCount>)"
    R"(<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=)"
    R"(</NextContinuationToken>)"
    R"(</ListBucketResult>)";

constexpr std::string_view kUrlEncodedListing = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name>
  <Prefix>dir%2F</Prefix>
  <MaxKeys>1000</MaxKeys>
  <Delimiter>%2F</Delimiter>
  <EncodingType>url</EncodingType>
  <IsTruncated>false</IsTruncated>
  <Contents>
    <Key>dir/my+file%20%281%29.txt</Key>
    <LastModified>2015-08-30T12:36:00.000Z</LastModified>
    <ETag>"599bab3ed2c697f1d26842727561fd94"</ETag>
    <Size>3</Size>
  </Contents>
  <Contents>
    <Key>dir/%C3%A9t%C3%A9%20%E2%82%AC%2525</Key>
    <LastModified>2015-08-30T12:36:00.000Z</LastModified>
    <ETag>"599bab3ed2c697f1d26842727561fd94"</ETag>
    <Size>4</Size>
  </Contents>
  <CommonPrefixes>
    <Prefix>dir/sub%20dir%0A/</Prefix>
  </CommonPrefixes>
</ListBucketResult>
)";

constexpr std::string_view kInitiate = R"(<?xml version="1.0" encoding="UTF-8"?>
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>bucket</Bucket>
  <Key>big.iso</Key>
  <UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
</InitiateMultipartUploadResult>
)";

constexpr std::string_view kAwsComplete = R"(<?xml version="1.0" encoding="UTF-8"?>
<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Location>https://bucket.s3.amazonaws.com/big.iso</Location>
  <Bucket>bucket</Bucket>
  <Key>big.iso</Key>
  <ETag>&quot;3858F62230AC3C915F300C664312C11F-9&quot;</ETag>
</CompleteMultipartUploadResult>
)";

constexpr std::string_view kRgwComplete =
    R"(<?xml version="1.0" encoding="UTF-8"?>)"
    R"(<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
    R"(<Location>http://127.0.0.1:8000/bucket/big.iso</Location><Bucket>bucket</Bucket>)"
    R"(<Key>big.iso</Key><ETag></ETag></CompleteMultipartUploadResult>)";

constexpr std::string_view kRgwCopy =
    R"(<?xml version="1.0" encoding="UTF-8"?>)"
    R"(<CopyObjectResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
    R"(<LastModified>2015-08-30T12:36:00.000Z</LastModified>)"
    R"(<ETag>599bab3ed2c697f1d26842727561fd94</ETag></CopyObjectResult>)";

constexpr std::string_view kAwsCopyPart = R"(<?xml version="1.0" encoding="UTF-8"?>
<CopyPartResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <LastModified>2015-08-30T12:36:00.250Z</LastModified>
  <ETag>"b54357faf0632cce46e942fa68356b38"</ETag>
</CopyPartResult>
)";

constexpr std::string_view kDeleteResult = R"(<?xml version="1.0" encoding="UTF-8"?>
<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Deleted>
    <Key>gone</Key>
  </Deleted>
  <Error>
    <Key>locked &amp; loaded</Key>
    <Code>AccessDenied</Code>
    <Message>Access Denied</Message>
  </Error>
  <Error>
    <Key>busy</Key>
    <Code>InternalError</Code>
    <Message>We encountered an internal error. Please try again.</Message>
  </Error>
</DeleteResult>
)";

constexpr std::string_view kNoSuchKey = R"(<?xml version="1.0" encoding="UTF-8"?>
<Error>
  <Code>NoSuchKey</Code>
  <Message>The resource you requested does not exist</Message>
  <Resource>/bucket/missing</Resource>
  <RequestId>4442587FB7D0A2F9</RequestId>
</Error>
)";

// CompleteMultipartUpload may answer 200 and then fail in the body.
constexpr std::string_view kInternalErrorIn200 = R"(<?xml version="1.0" encoding="UTF-8"?>

<Error>
  <Code>InternalError</Code>
  <Message>We encountered an internal error. Please try again.</Message>
  <RequestId>656c76696e6727732072657175657374</RequestId>
  <HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId>
</Error>
)";

// --- ListObjectsV2 ---

TEST(ParseListObjectsV2, AwsListingWithNamespace) {
  Result<Listing> r = ParseListObjectsV2(kAwsListing, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Listing& l = *r;
  ASSERT_EQ(l.objects.size(), 2u);

  EXPECT_EQ(l.objects[0].key, "photos/a.jpg");
  EXPECT_EQ(l.objects[0].size, 142863u);
  EXPECT_TRUE(l.objects[0].etag.is_plain_md5());
  EXPECT_EQ(l.objects[0].etag.value(), "599bab3ed2c697f1d26842727561fd94");
  EXPECT_EQ(l.objects[0].mtime_ns, kAug30Sec * kNsPerSec);
  EXPECT_FALSE(l.objects[0].has_metadata);

  EXPECT_EQ(l.objects[1].key, "photos/big.iso");
  EXPECT_EQ(l.objects[1].size, 18446744073709551615u);
  EXPECT_TRUE(l.objects[1].etag.is_multipart());
  EXPECT_EQ(l.objects[1].etag.parts(), 9u);
  EXPECT_EQ(l.objects[1].etag.value(), "3858f62230ac3c915f300c664312c11f-9");
  // 2016-02-29T23:59:59.123Z
  EXPECT_EQ(l.objects[1].mtime_ns, 1456790399 * kNsPerSec + 123'000'000);

  EXPECT_THAT(l.common_prefixes, ElementsAre("photos/2014/", "photos/2015/"));
  EXPECT_FALSE(l.truncated());
  EXPECT_EQ(l.next_token, "");
}

TEST(ParseListObjectsV2, RgwTruncatedListingGivesToken) {
  Result<Listing> r = ParseListObjectsV2(kRgwTruncatedListing, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->objects.size(), 2u);
  EXPECT_EQ(r->objects[0].key, "a");
  EXPECT_EQ(r->objects[0].size, 0u);
  EXPECT_EQ(r->objects[0].etag.value(), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_TRUE(r->objects[0].etag.is_plain_md5());
  EXPECT_EQ(r->objects[1].key, "b/");
  EXPECT_EQ(r->objects[1].mtime_ns, kAug30Sec * kNsPerSec + 500'000'000);
  EXPECT_TRUE(r->common_prefixes.empty());
  EXPECT_TRUE(r->truncated());
  EXPECT_EQ(r->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(ParseListObjectsV2, UrlEncodedKeysAreDecoded) {
  Result<Listing> r = ParseListObjectsV2(kUrlEncodedListing, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->objects.size(), 2u);
  // '+' is a plus in a key, never a space.
  EXPECT_EQ(r->objects[0].key, "dir/my+file (1).txt");
  EXPECT_EQ(r->objects[1].key, "dir/\xC3\xA9t\xC3\xA9 \xE2\x82\xAC%25");
  EXPECT_THAT(r->common_prefixes, ElementsAre("dir/sub dir\n/"));
}

TEST(ParseListObjectsV2, EitherTheRequestOrTheResponseSaysUrlEncoding) {
  // Asked for encoding-type=url; the server did not echo <EncodingType>.
  Result<Listing> asked = ParseListObjectsV2(
      R"(<ListBucketResult><Contents><Key>a%20b</Key><Size>1</Size></Contents>)"
      R"(<CommonPrefixes><Prefix>c%2Bd/</Prefix></CommonPrefixes></ListBucketResult>)",
      true);
  ASSERT_TRUE(asked.ok()) << asked.status().ToString();
  ASSERT_EQ(asked->objects.size(), 1u);
  EXPECT_EQ(asked->objects[0].key, "a b");
  EXPECT_THAT(asked->common_prefixes, ElementsAre("c+d/"));

  // Not asked, but the server says it encoded the keys.
  Result<Listing> told = ParseListObjectsV2(
      R"(<ListBucketResult><EncodingType>url</EncodingType>)"
      R"(<Contents><Key>a%20b</Key><Size>1</Size></Contents></ListBucketResult>)",
      false);
  ASSERT_TRUE(told.ok()) << told.status().ToString();
  ASSERT_EQ(told->objects.size(), 1u);
  EXPECT_EQ(told->objects[0].key, "a b");
}

TEST(ParseListObjectsV2, KeysAreTakenVerbatimWithoutUrlEncoding) {
  constexpr std::string_view kBody = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <IsTruncated>false</IsTruncated>
  <Contents><Key>100%25 &amp; a+b &lt;c&gt; &#x1;</Key><Size>1</Size></Contents>
  <Contents><Key> </Key><Size>2</Size></Contents>
  <Contents><Key>  padded  </Key><Size>3</Size></Contents>
  <CommonPrefixes><Prefix>a%2Fb/</Prefix></CommonPrefixes>
</ListBucketResult>
)";
  Result<Listing> r = ParseListObjectsV2(kBody, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->objects.size(), 3u);
  EXPECT_EQ(r->objects[0].key, "100%25 & a+b <c> \x01");
  EXPECT_EQ(r->objects[0].etag.kind(), ETag::Kind::kNone);
  EXPECT_EQ(r->objects[0].mtime_ns, 0);
  // A key made only of white space must not vanish.
  EXPECT_EQ(r->objects[1].key, " ");
  EXPECT_EQ(r->objects[2].key, "  padded  ");
  EXPECT_THAT(r->common_prefixes, ElementsAre("a%2Fb/"));
}

TEST(ParseListObjectsV2, PrefixedNamespaceElementsAreMatchedByLocalName) {
  constexpr std::string_view kBody =
      R"(<s3:ListBucketResult xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">)"
      R"(<s3:IsTruncated>true</s3:IsTruncated>)"
      R"(<s3:NextContinuationToken>t</s3:NextContinuationToken>)"
      R"(<s3:Contents><s3:Key>k</s3:Key><s3:Size>7</s3:Size></s3:Contents>)"
      R"(</s3:ListBucketResult>)";
  Result<Listing> r = ParseListObjectsV2(kBody, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->objects.size(), 1u);
  EXPECT_EQ(r->objects[0].key, "k");
  EXPECT_EQ(r->objects[0].size, 7u);
  EXPECT_EQ(r->next_token, "t");
}

TEST(ParseListObjectsV2, EmptyListing) {
  Result<Listing> r = ParseListObjectsV2(
      R"(<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>)"
      R"(<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>)",
      false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->objects.empty());
  EXPECT_TRUE(r->common_prefixes.empty());
  EXPECT_FALSE(r->truncated());
}

std::string ListingWithSize(std::string_view size) {
  return "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
         "<IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>" +
         std::string(size) + "</Size></Contents></ListBucketResult>";
}

TEST(ParseListObjectsV2, SizeMustBeAnUnsignedNumber) {
  ASSERT_TRUE(ParseListObjectsV2(ListingWithSize("12"), false).ok());
  for (std::string_view bad :
       {"", "abc", "12a", "-1", "+1", "1.5", " 12", "0x10", "18446744073709551616"}) {
    Result<Listing> r = ParseListObjectsV2(ListingWithSize(bad), false);
    ASSERT_FALSE(r.ok()) << "size '" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("Size")) << bad;
  }
  Result<Listing> missing = ParseListObjectsV2(
      R"(<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>)", false);
  EXPECT_EQ(missing.status().code(), StatusCode::kInternal);
}

TEST(ParseListObjectsV2, TruncatedWithoutTokenIsAnError) {
  for (std::string_view body :
       {R"(<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>)",
        R"(<ListBucketResult><IsTruncated>true</IsTruncated>)"
        R"(<NextContinuationToken></NextContinuationToken></ListBucketResult>)"}) {
    Result<Listing> r = ParseListObjectsV2(body, false);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);
    EXPECT_THAT(r.status().message(), HasSubstr("NextContinuationToken"));
  }
}

TEST(ParseListObjectsV2, TokenIsIgnoredWhenNotTruncated) {
  Result<Listing> r =
      ParseListObjectsV2(R"(<ListBucketResult><IsTruncated>false</IsTruncated>)"
                         R"(<NextContinuationToken>x</NextContinuationToken></ListBucketResult>)",
                         false);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->truncated());
}

TEST(ParseListObjectsV2, BadFieldsAreRejected) {
  for (std::string_view body : {
           R"(<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>)",
           R"(<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>)",
           R"(<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>)",
           R"(<ListBucketResult><Contents><Key>k</Key><Size>1</Size>)"
           R"(<LastModified>yesterday</LastModified></Contents></ListBucketResult>)",
           R"(<ListBucketResult><CommonPrefixes></CommonPrefixes></ListBucketResult>)",
           R"(<ListAllMyBucketsResult></ListAllMyBucketsResult>)",
       }) {
    Result<Listing> r = ParseListObjectsV2(body, false);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << body;
  }
}

TEST(ParseListObjectsV2, ErrorDocumentBecomesItsStatus) {
  constexpr std::string_view kBody =
      R"(<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>)"
      R"(<Message>Access Denied</Message></Error>)";
  Result<Listing> r = ParseListObjectsV2(kBody, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(r.status().server_code(), "AccessDenied");
}

// --- Multipart, copy, delete ---

TEST(ParseInitiateMultipartUpload, ReturnsUploadId) {
  Result<std::string> r = ParseInitiateMultipartUpload(kInitiate);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");

  Result<std::string> missing = ParseInitiateMultipartUpload(
      R"(<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>)");
  EXPECT_EQ(missing.status().code(), StatusCode::kInternal);
}

TEST(ParseCompleteMultipartUpload, AwsQuotedMultipartETag) {
  Result<ETag> r = ParseCompleteMultipartUpload(kAwsComplete);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->is_multipart());
  EXPECT_EQ(r->parts(), 9u);
  EXPECT_EQ(r->value(), "3858f62230ac3c915f300c664312c11f-9");
}

TEST(ParseCompleteMultipartUpload, RgwEmptyETagIsNone) {
  Result<ETag> r = ParseCompleteMultipartUpload(kRgwComplete);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
}

TEST(ParseCompleteMultipartUpload, KeepAliveWhiteSpaceBeforeTheBody) {
  std::string body = "      \n      \n" + std::string(kAwsComplete);
  Result<ETag> r = ParseCompleteMultipartUpload(body);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parts(), 9u);
}

TEST(ParseCompleteMultipartUpload, ErrorIn200BecomesItsStatus) {
  std::string body = "   \n" + std::string(kInternalErrorIn200);
  Result<ETag> r = ParseCompleteMultipartUpload(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTransient);
  EXPECT_EQ(r.status().server_code(), "InternalError");
  EXPECT_THAT(r.status().message(), HasSubstr("We encountered an internal error"));
  EXPECT_THAT(r.status().message(), HasSubstr("(200 InternalError)"));

  Result<ETag> invalid_part = ParseCompleteMultipartUpload(
      R"(<Error><Code>InvalidPart</Code><Message>One or more of the specified parts could )"
      R"(not be found.</Message></Error>)");
  ASSERT_FALSE(invalid_part.ok());
  EXPECT_EQ(invalid_part.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid_part.status().server_code(), "InvalidPart");
}

TEST(ParseCopyResult, RgwUnquotedETag) {
  Result<CopyResult> r = ParseCopyResult(kRgwCopy);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->etag.is_plain_md5());
  EXPECT_EQ(r->etag.value(), "599bab3ed2c697f1d26842727561fd94");
  EXPECT_EQ(r->mtime_ns, kAug30Sec * kNsPerSec);
}

TEST(ParseCopyResult, AwsCopyPartResult) {
  Result<CopyResult> r = ParseCopyResult(kAwsCopyPart);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->etag.value(), "b54357faf0632cce46e942fa68356b38");
  EXPECT_EQ(r->mtime_ns, kAug30Sec * kNsPerSec + 250'000'000);
}

TEST(ParseCopyResult, ErrorIn200AndWrongRoot) {
  Result<CopyResult> slow =
      ParseCopyResult(R"(<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>)"
                      R"(<Message>Please reduce your request rate.</Message></Error>)");
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kTransient);
  EXPECT_EQ(slow.status().server_code(), "SlowDown");

  Result<CopyResult> wrong = ParseCopyResult(kAwsComplete);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInternal);
  EXPECT_THAT(wrong.status().message(), HasSubstr("CompleteMultipartUploadResult"));
}

TEST(ParseDeleteResult, ListsOnlyFailures) {
  Result<std::vector<DeleteFailure>> r = ParseDeleteResult(kDeleteResult);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].key, "locked & loaded");
  EXPECT_EQ((*r)[0].code, "AccessDenied");
  EXPECT_EQ((*r)[0].message, "Access Denied");
  EXPECT_EQ((*r)[1].key, "busy");
  EXPECT_EQ((*r)[1].code, "InternalError");

  Result<std::vector<DeleteFailure>> quiet_ok = ParseDeleteResult(
      R"(<?xml version="1.0" encoding="UTF-8"?>)"
      R"(<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>)");
  ASSERT_TRUE(quiet_ok.ok());
  EXPECT_TRUE(quiet_ok->empty());
}

// --- Malformed and truncated bodies ---

TEST(Malformed, EveryParserRejectsBrokenXml) {
  for (std::string_view body : {
           "",
           "   \n",
           "not xml at all",
           "<",
           "<ListBucketResult",
           "<ListBucketResult>",
           "<ListBucketResult></ListBucketResul>",
           "<ListBucketResult></ListBucketResult",
           "<ListBucketResult><Contents></ListBucketResult>",
           "<ListBucketResult a=\"1></ListBucketResult>",
           "<?xml version=\"1.0\"?>",
           "<?xml vers",
           "<ListBucketResult/><ListBucketResult/>",
           "<!DOCTYPE x [<!ENTITY e \"v\">]><ListBucketResult/>",
           "\x01\x02\x03\xff\xfe",
       }) {
    EXPECT_EQ(ParseListObjectsV2(body, false).status().code(), StatusCode::kInternal) << body;
    EXPECT_EQ(ParseInitiateMultipartUpload(body).status().code(), StatusCode::kInternal) << body;
    EXPECT_EQ(ParseCompleteMultipartUpload(body).status().code(), StatusCode::kInternal) << body;
    EXPECT_EQ(ParseCopyResult(body).status().code(), StatusCode::kInternal) << body;
    EXPECT_EQ(ParseDeleteResult(body).status().code(), StatusCode::kInternal) << body;
    EXPECT_EQ(ParseError(body).status().code(), StatusCode::kInternal) << body;
  }
}

TEST(Malformed, MessageSaysWhichResponse) {
  Result<Listing> r = ParseListObjectsV2("<ListBucketResult><Contents>", false);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("ListObjectsV2"));
}

// Where the root element's end tag finishes: only a cut after it can leave a complete document.
size_t EndOfRoot(std::string_view body) {
  size_t close = body.rfind("</");
  size_t end = body.find('>', close);
  return end + 1;
}

// Cuts `body` at every length and checks that no cut short of the end of the root element
// parses, and that cuts after it (only trailing white space lost) give the full result.
template <typename Parse, typename Same>
void ExpectEveryCutRejected(std::string_view body, Parse parse, Same same_as_full) {
  auto full = parse(body);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const size_t end = EndOfRoot(body);
  for (size_t cut = 0; cut < body.size(); ++cut) {
    auto r = parse(body.substr(0, cut));
    if (cut < end) {
      EXPECT_FALSE(r.ok()) << "a body cut at " << cut << " of " << body.size() << " parsed";
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kInternal) << cut;
      }
    } else {
      ASSERT_TRUE(r.ok()) << cut;
      EXPECT_TRUE(same_as_full(*r, *full)) << cut;
    }
  }
}

bool SameListing(const Listing& a, const Listing& b) {
  if (a.objects.size() != b.objects.size()) return false;
  for (size_t i = 0; i < a.objects.size(); ++i) {
    if (a.objects[i].key != b.objects[i].key || a.objects[i].size != b.objects[i].size ||
        a.objects[i].etag != b.objects[i].etag || a.objects[i].mtime_ns != b.objects[i].mtime_ns) {
      return false;
    }
  }
  return a.common_prefixes == b.common_prefixes && a.next_token == b.next_token;
}

TEST(Truncated, ListingsCutAnywhereAreRejected) {
  for (std::string_view body : {kAwsListing, kRgwTruncatedListing, kUrlEncodedListing}) {
    ExpectEveryCutRejected(
        body, [](std::string_view b) { return ParseListObjectsV2(b, true); }, SameListing);
  }
}

TEST(Truncated, OtherResponsesCutAnywhereAreRejected) {
  ExpectEveryCutRejected(kInitiate, ParseInitiateMultipartUpload,
                         [](const std::string& a, const std::string& b) { return a == b; });
  for (std::string_view body : {kAwsComplete, kRgwComplete}) {
    ExpectEveryCutRejected(body, ParseCompleteMultipartUpload,
                           [](const ETag& a, const ETag& b) { return a == b; });
  }
  for (std::string_view body : {kRgwCopy, kAwsCopyPart}) {
    ExpectEveryCutRejected(body, ParseCopyResult, [](const CopyResult& a, const CopyResult& b) {
      return a.etag == b.etag && a.mtime_ns == b.mtime_ns;
    });
  }
  ExpectEveryCutRejected(
      kDeleteResult, ParseDeleteResult,
      [](const std::vector<DeleteFailure>& a, const std::vector<DeleteFailure>& b) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i) {
          if (a[i].key != b[i].key || a[i].code != b[i].code) return false;
        }
        return true;
      });
  ExpectEveryCutRejected(kNoSuchKey, ParseError, [](const S3Error& a, const S3Error& b) {
    return a.code == b.code && a.message == b.message;
  });
}

TEST(Truncated, ErrorIn200CutAnywhereIsNeverSuccess) {
  // Whether a cut <Error> is reported as malformed or as the error, it must not be a success.
  for (size_t cut = 0; cut < kInternalErrorIn200.size(); ++cut) {
    EXPECT_FALSE(ParseCompleteMultipartUpload(kInternalErrorIn200.substr(0, cut)).ok()) << cut;
  }
}

// --- Errors ---

TEST(ParseError, ReadsAllFields) {
  Result<S3Error> r = ParseError(kNoSuchKey);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->code, "NoSuchKey");
  EXPECT_EQ(r->message, "The resource you requested does not exist");
  EXPECT_EQ(r->resource, "/bucket/missing");
  EXPECT_EQ(r->request_id, "4442587FB7D0A2F9");

  EXPECT_EQ(ParseError(kAwsComplete).status().code(), StatusCode::kInternal);
}

S3Error ParsedError(std::string_view body) {
  Result<S3Error> r = ParseError(body);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : S3Error{};
}

TEST(StatusFromS3Error, NoSuchKey) {
  Status s = StatusFromS3Error(404, ParsedError(kNoSuchKey), "GET s3://bucket/missing");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.server_code(), "NoSuchKey");
  EXPECT_EQ(s.message(),
            "GET s3://bucket/missing: The resource you requested does not exist (404 NoSuchKey)");
}

TEST(StatusFromS3Error, AccessDenied) {
  Status s = StatusFromS3Error(
      403, ParsedError("<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"),
      "PUT s3://b/k");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.server_code(), "AccessDenied");
  EXPECT_EQ(s.message(), "PUT s3://b/k: Access Denied (403 AccessDenied)");
}

TEST(StatusFromS3Error, ExpiredAndInvalidTokensAreAccessErrors) {
  // AWS answers an expired session token with 400 ExpiredToken: EACCES, not EINVAL.
  for (const char* code : {"ExpiredToken", "InvalidToken", "TokenRefreshRequired"}) {
    Status s = StatusFromS3Error(
        400,
        ParsedError(std::string("<Error><Code>") + code +
                    "</Code><Message>The provided token has expired.</Message></Error>"),
        "GET s3://b/k");
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << code;
    EXPECT_EQ(s.server_code(), code);
  }
}

TEST(StatusFromS3Error, SignatureDoesNotMatchExplainsItself) {
  Status s = StatusFromS3Error(
      403,
      ParsedError("<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we "
                  "calculated does not match the signature you provided. Check your key and "
                  "signing method.</Message><StringToSign>AWS4-HMAC-SHA256\n20150830T123600Z"
                  "</StringToSign></Error>"),
      "GET s3://b/");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.server_code(), "SignatureDoesNotMatch");
  EXPECT_THAT(s.message(), HasSubstr("does not match the signature you provided"));
  EXPECT_THAT(s.message(), HasSubstr("secret key does not match the access key"));
  EXPECT_THAT(s.message(), HasSubstr("(403 SignatureDoesNotMatch)"));

  Status unknown_key = StatusFromS3Error(403, S3Error{"InvalidAccessKeyId", "", "", ""}, "HEAD x");
  EXPECT_EQ(unknown_key.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(unknown_key.message(), HasSubstr("access key"));
}

TEST(StatusFromS3Error, ThrottlingAndServerErrorsAreTransient) {
  Status slow = StatusFromS3Error(
      503,
      ParsedError("<Error><Code>SlowDown</Code><Message>Please reduce your request rate."
                  "</Message></Error>"),
      "PUT s3://b/k");
  EXPECT_EQ(slow.code(), StatusCode::kTransient);
  EXPECT_EQ(slow.server_code(), "SlowDown");
  EXPECT_EQ(slow.message(), "PUT s3://b/k: Please reduce your request rate. (503 SlowDown)");

  Status internal = StatusFromS3Error(500, ParsedError(kInternalErrorIn200), "GET s3://b/k");
  EXPECT_EQ(internal.code(), StatusCode::kTransient);
  EXPECT_EQ(internal.server_code(), "InternalError");

  // RequestTimeout is an HTTP 400.
  EXPECT_EQ(StatusFromS3Error(400, S3Error{"RequestTimeout", "idle", "", ""}, "PUT").code(),
            StatusCode::kTransient);
  EXPECT_EQ(StatusFromS3Error(429, S3Error{}, "GET").code(), StatusCode::kTransient);
  EXPECT_EQ(StatusFromS3Error(502, S3Error{}, "GET").code(), StatusCode::kTransient);
}

TEST(StatusFromS3Error, ServiceUnavailableWithoutBody) {
  Status s = StatusFromS3Error(503, S3Error{}, "HEAD s3://b/k");
  EXPECT_EQ(s.code(), StatusCode::kTransient);
  EXPECT_EQ(s.server_code(), "");
  EXPECT_EQ(s.message(), "HEAD s3://b/k: service unavailable (HTTP 503)");
}

TEST(StatusFromS3Error, BodylessStatusesFromHead) {
  Status missing = StatusFromS3Error(404, S3Error{}, "HEAD s3://b/k");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "HEAD s3://b/k: not found (HTTP 404)");

  Status forbidden = StatusFromS3Error(403, S3Error{}, "HEAD s3://b/k");
  EXPECT_EQ(forbidden.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(forbidden.message(), HasSubstr("(HTTP 403)"));
}

TEST(StatusFromS3Error, PreconditionFailed) {
  Status with_body =
      StatusFromS3Error(412,
                        S3Error{"PreconditionFailed",
                                "At least one of the pre-conditions you specified did not "
                                "hold",
                                "/b/k", "1"},
                        "GET s3://b/k");
  EXPECT_EQ(with_body.code(), StatusCode::kPreconditionFailed);
  EXPECT_EQ(with_body.server_code(), "PreconditionFailed");
  EXPECT_THAT(with_body.message(), HasSubstr("(412 PreconditionFailed)"));

  Status bodyless = StatusFromS3Error(412, S3Error{}, "HEAD s3://b/k");
  EXPECT_EQ(bodyless.code(), StatusCode::kPreconditionFailed);
  EXPECT_THAT(bodyless.message(), HasSubstr("(HTTP 412)"));
}

TEST(StatusFromS3Error, InvalidRange) {
  Status s = StatusFromS3Error(
      416, S3Error{"InvalidRange", "The requested range is not satisfiable", "/b/k", "1"},
      "GET s3://b/k");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.server_code(), "InvalidRange");
  EXPECT_EQ(StatusFromS3Error(416, S3Error{}, "GET").code(), StatusCode::kInvalidArgument);
}

TEST(StatusFromS3Error, OtherClientErrorsAreInvalidArgument) {
  Status s = StatusFromS3Error(400, S3Error{"KeyTooLongError", "Your key is too long", "", ""},
                               "PUT s3://b/long");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.server_code(), "KeyTooLongError");
  // An unknown code on a 404 is still NotFound: the HTTP status decides.
  EXPECT_EQ(
      StatusFromS3Error(404, S3Error{"NoSuchLifecycleConfiguration", "", "", ""}, "GET").code(),
      StatusCode::kNotFound);
  EXPECT_EQ(StatusFromS3Error(404, S3Error{"NoSuchBucket", "", "", ""}, "GET").code(),
            StatusCode::kNotFound);
  // A known code decides even when the HTTP status says something else.
  EXPECT_EQ(StatusFromS3Error(400, S3Error{"NoSuchUpload", "", "", ""}, "POST").code(),
            StatusCode::kNotFound);
}

TEST(StatusFromS3Error, MessageIsOneLine) {
  Status s = StatusFromS3Error(500, S3Error{"InternalError", "line one\r\nline two\n", "", ""},
                               "GET s3://b/k");
  EXPECT_EQ(s.message(), "GET s3://b/k: line one line two (500 InternalError)");
}

// --- Request bodies ---

TEST(BuildCompleteMultipartUpload, PartsInOrderWithQuotedETags) {
  std::vector<std::pair<int, ETag>> parts = {
      {1, ETag::Parse("\"599BAB3ED2C697F1D26842727561FD94\"")},
      {2, ETag::Parse("b54357faf0632cce46e942fa68356b38")},
  };
  EXPECT_EQ(BuildCompleteMultipartUpload(parts),
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Part><PartNumber>1</PartNumber><ETag>\"599bab3ed2c697f1d26842727561fd94\"</ETag>"
            "</Part>"
            "<Part><PartNumber>2</PartNumber><ETag>\"b54357faf0632cce46e942fa68356b38\"</ETag>"
            "</Part>"
            "</CompleteMultipartUpload>");
}

TEST(BuildCompleteMultipartUpload, IsWellFormedXml) {
  std::vector<std::pair<int, ETag>> parts;
  for (int i = 1; i <= 3; ++i) {
    parts.emplace_back(i, ETag::Parse("opaque<&>" + std::to_string(i)));
  }
  std::string body = BuildCompleteMultipartUpload(parts);
  pugi::xml_document doc;
  ASSERT_EQ(doc.load_buffer(body.data(), body.size()).status, pugi::status_ok) << body;
  pugi::xml_node root = doc.child("CompleteMultipartUpload");
  ASSERT_TRUE(root);
  int expected = 1;
  for (pugi::xml_node part : root.children("Part")) {
    EXPECT_EQ(part.child("PartNumber").text().as_int(), expected);
    EXPECT_EQ(std::string(part.child_value("ETag")),
              "\"opaque<&>" + std::to_string(expected) + "\"");
    ++expected;
  }
  EXPECT_EQ(expected, 4);
}

TEST(BuildDeleteObjects, NastyKeysRoundTrip) {
  const std::vector<std::string> keys = {
      "plain",
      "a & b",
      "<tag>",
      "quote\"s and 'apostrophes'",
      "]]> cdata end",
      "&amp; already escaped",
      "tab\tnewline\ncarriage\rreturn",
      "control \x01\x02\x1f\x7f",
      " ",
      "  leading and trailing  ",
      "\xC3\xA9t\xC3\xA9/\xE2\x82\xAC/\xF0\x9F\x98\x80",
      "100% + more",
  };
  std::string body = BuildDeleteObjects(keys);
  EXPECT_EQ(body.rfind("<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<Quiet>true</Quiet><Object><Key>plain</Key></Object>",
                       0),
            0u)
      << body;

  pugi::xml_document doc;
  pugi::xml_parse_result parsed =
      doc.load_buffer(body.data(), body.size(), pugi::parse_default | pugi::parse_ws_pcdata_single);
  ASSERT_EQ(parsed.status, pugi::status_ok) << parsed.description() << "\n" << body;
  pugi::xml_node root = doc.child("Delete");
  ASSERT_TRUE(root);
  EXPECT_STREQ(root.attribute("xmlns").value(), "http://s3.amazonaws.com/doc/2006-03-01/");
  EXPECT_STREQ(root.child_value("Quiet"), "true");
  std::vector<std::string> parsed_keys;
  for (pugi::xml_node object : root.children("Object")) {
    parsed_keys.emplace_back(object.child_value("Key"));
  }
  EXPECT_EQ(parsed_keys, keys);
}

TEST(XmlEscape, Characters) {
  EXPECT_EQ(XmlEscape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&apos;f");
  EXPECT_EQ(XmlEscape("t\tn\n"), "t\tn\n");
  EXPECT_EQ(XmlEscape("\r"), "&#xD;");
  EXPECT_EQ(XmlEscape(std::string_view("\x00\x01\x1f", 3)), "&#x0;&#x1;&#x1F;");
  EXPECT_EQ(XmlEscape("\xC3\xA9\x7f"), "\xC3\xA9\x7f");
  EXPECT_EQ(XmlEscape(""), "");
}

// --- Percent-decoding ---

TEST(UrlDecode, Cases) {
  EXPECT_EQ(UrlDecode("a%20b"), "a b");
  EXPECT_EQ(UrlDecode("%2f%2F"), "//");
  EXPECT_EQ(UrlDecode("%C3%a9"), "\xC3\xA9");
  EXPECT_EQ(UrlDecode("a+b"), "a+b");
  EXPECT_EQ(UrlDecode("%2525"), "%25");
  EXPECT_EQ(UrlDecode("%00"), std::string(1, '\0'));
  EXPECT_EQ(UrlDecode(""), "");
  // Malformed sequences are left as they are.
  EXPECT_EQ(UrlDecode("%"), "%");
  EXPECT_EQ(UrlDecode("%4"), "%4");
  EXPECT_EQ(UrlDecode("100%"), "100%");
  EXPECT_EQ(UrlDecode("%zz%4g%g4"), "%zz%4g%g4");
  EXPECT_EQ(UrlDecode("%%41"), "%A");
}

// --- Dates ---

TEST(ParseIso8601, Forms) {
  EXPECT_EQ(ParseIso8601("2015-08-30T12:36:00.000Z"), kAug30Sec * kNsPerSec);
  EXPECT_EQ(ParseIso8601("2015-08-30T12:36:00Z"), kAug30Sec * kNsPerSec);
  EXPECT_EQ(ParseIso8601("2015-08-30T12:36:00.5Z"), kAug30Sec * kNsPerSec + 500'000'000);
  EXPECT_EQ(ParseIso8601("2015-08-30T12:36:00.123456Z"), kAug30Sec * kNsPerSec + 123'456'000);
  EXPECT_EQ(ParseIso8601("2015-08-30T12:36:00.123456789Z"), kAug30Sec * kNsPerSec + 123'456'789);
  // Digits beyond nanoseconds are dropped.
  EXPECT_EQ(ParseIso8601("2015-08-30T12:36:00.1234567891234Z"),
            kAug30Sec * kNsPerSec + 123'456'789);
  EXPECT_EQ(ParseIso8601("2015-08-30T14:36:00+02:00"), kAug30Sec * kNsPerSec);
  EXPECT_EQ(ParseIso8601("2015-08-30T10:36:00.000-02:00"), kAug30Sec * kNsPerSec);
  EXPECT_EQ(ParseIso8601("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseIso8601("1970-01-01T00:00:01.000Z"), kNsPerSec);
  EXPECT_EQ(ParseIso8601("2000-02-29T00:00:00Z"), 951782400 * kNsPerSec);
  EXPECT_EQ(ParseIso8601("2038-01-19T03:14:08Z"), 2147483648 * kNsPerSec);
  EXPECT_EQ(ParseIso8601("2262-04-11T23:47:15Z"), 9223372035 * kNsPerSec);
}

TEST(ParseIso8601, Malformed) {
  for (std::string_view bad : {
           "",
           "2015",
           "2015-08-30",
           "2015-08-30T12:36",
           "2015-08-30T12:36:00",
           "2015-08-30 12:36:00Z",
           "2015-08-30T12:36:00.Z",
           "2015-08-30T12:36:00.000",
           "2015-08-30T12:36:00.000ZZ",
           "2015-08-30T12:36:00.000Z ",
           " 2015-08-30T12:36:00Z",
           "2015-13-01T00:00:00Z",
           "2015-00-01T00:00:00Z",
           "2015-08-00T00:00:00Z",
           "2015-08-32T00:00:00Z",
           "2015-02-29T00:00:00Z",
           "1900-02-29T00:00:00Z",
           "2015-04-31T00:00:00Z",
           "2015-08-30T24:00:00Z",
           "2015-08-30T12:60:00Z",
           "2015-08-30T12:36:61Z",
           "15-08-30T12:36:00Z",
           "2015-8-30T12:36:00Z",
           "2015-08-30T12:36:00+0200",
           "2015-08-30T12:36:00+24:00",
           "9999-12-31T23:59:59Z",
           "Sun, 30 Aug 2015 12:36:00 GMT",
           "2015-08-30T12:36:0aZ",
       }) {
    EXPECT_EQ(ParseIso8601(bad), -1) << "'" << bad << "'";
  }
}

TEST(ParseIso8601, AgreesWithTimegm) {
  // Every 7th day and an hour that moves through the day, 1970..2200.
  int64_t checked = 0;
  for (int64_t day = 0; day < 84000; day += 7) {
    const int64_t secs = day * 86400 + (day % 24) * 3600 + (day % 60) * 60 + day % 59;
    time_t t = static_cast<time_t>(secs);
    struct tm tm {};
    ASSERT_NE(gmtime_r(&t, &tm), nullptr);
    char buf[64];
    snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.000Z", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    ASSERT_EQ(ParseIso8601(buf), static_cast<int64_t>(timegm(&tm)) * kNsPerSec) << buf;
    ++checked;
  }
  EXPECT_EQ(checked, 12000);
}

TEST(ParseHttpDate, Forms) {
  EXPECT_EQ(ParseHttpDate("Sun, 30 Aug 2015 12:36:00 GMT"), kAug30Sec * kNsPerSec);
  EXPECT_EQ(ParseHttpDate("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  EXPECT_EQ(ParseHttpDate("Thu, 1 Jan 1970 00:00:01 GMT"), kNsPerSec);
  EXPECT_EQ(ParseHttpDate("Tue, 29 Feb 2000 00:00:00 GMT"), 951782400 * kNsPerSec);
  EXPECT_EQ(ParseHttpDate("Fri, 31 Dec 2100 23:59:59 GMT"), 4133980799 * kNsPerSec);
}

TEST(ParseHttpDate, Malformed) {
  for (std::string_view bad : {
           "",
           "Sun",
           "Sun, 30 Aug 2015 12:36:00",
           "Sun, 30 Aug 2015 12:36:00 UTC",
           "Sun, 30 Aug 2015 12:36:00 GMT ",
           "Sun 30 Aug 2015 12:36:00 GMT",
           "Sunday, 30-Aug-15 12:36:00 GMT",
           "Sun Aug 30 12:36:00 2015",
           "Xyz, 30 Aug 2015 12:36:00 GMT",
           "Sun, 30 Foo 2015 12:36:00 GMT",
           "Sun, 30 aug 2015 12:36:00 GMT",
           "Sun, 31 Sep 2015 12:36:00 GMT",
           "Sun, 29 Feb 2015 12:36:00 GMT",
           "Sun, 30 Aug 15 12:36:00 GMT",
           "Sun, 30 Aug 2015 25:36:00 GMT",
           "Sun, 300 Aug 2015 12:36:00 GMT",
           "2015-08-30T12:36:00Z",
       }) {
    EXPECT_EQ(ParseHttpDate(bad), -1) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace objfs::s3
