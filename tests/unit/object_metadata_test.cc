#include "fs/object_metadata.h"

#include <sys/stat.h>

#include "fs/xattr.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

TEST(ObjectMetadataTest, ParsesS3fsHeaders) {
  Metadata md = {{"mode", "33188"}, {"uid", "1000"}, {"gid", "100"}, {"mtime", "1700000000"}};
  PosixMetadata p = ParsePosixMetadata(md);
  EXPECT_EQ(p.mode, static_cast<uint32_t>(S_IFREG | 0644));
  EXPECT_EQ(p.uid, 1000u);
  EXPECT_EQ(p.gid, 100u);
  EXPECT_EQ(p.mtime_ns, int64_t{1700000000} * 1000000000);
}

TEST(ObjectMetadataTest, MalformedValuesAreIgnored) {
  PosixMetadata p = ParsePosixMetadata({{"mode", "rw-r--r--"}, {"uid", "-1"}, {"mtime", "x"}});
  EXPECT_FALSE(p.mode.has_value());
  EXPECT_FALSE(p.uid.has_value());
  EXPECT_FALSE(p.mtime_ns.has_value());
  EXPECT_FALSE(p.gid.has_value());
}

TEST(ObjectMetadataTest, MtimeFormats) {
  EXPECT_EQ(ParseMtime("123.456789"), int64_t{123456789000});
  EXPECT_EQ(ParseMtime("123.5"), int64_t{123500000000});
  EXPECT_EQ(ParseMtime("123"), int64_t{123000000000});
  EXPECT_FALSE(ParseMtime("123.").has_value());
  EXPECT_FALSE(ParseMtime("").has_value());
  EXPECT_EQ(FormatMtime(int64_t{1700000000} * 1000000000), "1700000000");
  EXPECT_EQ(FormatMtime(int64_t{1700000000} * 1000000000 + 5), "1700000000.000000005");
  EXPECT_EQ(ParseMtime(FormatMtime(-1500000000)), int64_t{-1500000000});
}

TEST(ObjectMetadataTest, TimesPastWhatNanosecondsHoldAreMalformed) {
  // Another writer's metadata: 64-bit nanoseconds end in 2262 (and begin in 1677). Past that
  // the product overflowed, and 99999999999999999 showed as 1889.
  EXPECT_FALSE(ParseMtime("99999999999999999").has_value());
  EXPECT_FALSE(ParseMtime("9223372037").has_value());
  EXPECT_FALSE(ParseMtime("-99999999999").has_value());
  EXPECT_FALSE(ParseMtime("18446744073").has_value());
  EXPECT_FALSE(ParseMtime("9223372036.9").has_value());
  EXPECT_EQ(ParseMtime("9223372036.854775807"), INT64_MAX);
  EXPECT_EQ(ParseMtime("-9223372036.854775807"), -INT64_MAX);
  EXPECT_EQ(ParseMtime(FormatMtime(INT64_MAX)), INT64_MAX);
  // One sign at most, before the digits.
  EXPECT_FALSE(ParseMtime("--5").has_value());
  EXPECT_FALSE(ParseMtime("-+5").has_value());
  EXPECT_FALSE(ParseMtime("+5").has_value());
  EXPECT_FALSE(ParseMtime("5.-1").has_value());
  // The owner no account has ((uid_t)-1, chown's "leave it") is none: the mount's own shows.
  PosixMetadata p = ParsePosixMetadata({{"uid", "4294967295"}, {"gid", "4294967295"}});
  EXPECT_FALSE(p.uid.has_value());
  EXPECT_FALSE(p.gid.has_value());
  EXPECT_EQ(ParsePosixMetadata({{"uid", "4294967294"}}).uid, 4294967294u);
}

TEST(ObjectMetadataTest, AtimeAndCtimeAreTheMtimeUnlessStored) {
  const int64_t mtime = int64_t{1700000000} * 1000000000;
  StoredTimes none = StoredTimesOf({{"mtime", "1700000000"}}, mtime);
  EXPECT_EQ(none.atime_ns, mtime);
  EXPECT_EQ(none.ctime_ns, mtime);
  // s3fs's whole seconds and objfs's nanoseconds; a malformed value is the mtime.
  StoredTimes stored =
      StoredTimesOf({{"atime", "1000000000.000000005"}, {"ctime", "1800000000"}}, mtime);
  EXPECT_EQ(stored.atime_ns, int64_t{1000000000} * 1000000000 + 5);
  EXPECT_EQ(stored.ctime_ns, int64_t{1800000000} * 1000000000);
  EXPECT_EQ(StoredTimesOf({{"ctime", "soon"}}, mtime).ctime_ns, mtime);
  // They travel with the object's other metadata, not with the four POSIX names.
  Metadata extra = WithoutPosixMetadata({{"mode", "1"}, {"atime", "1"}, {"ctime", "2"}});
  EXPECT_EQ(extra, (Metadata{{"atime", "1"}, {"ctime", "2"}}));
}

TEST(ObjectMetadataTest, SetKeepsOtherNames) {
  Metadata md = {{"xattr", "abc"}, {"mode", "1"}};
  SetPosixMetadata(S_IFDIR | 0755, 1, 2, 3000000000, &md);
  EXPECT_EQ(md.at("mode"), std::to_string(S_IFDIR | 0755));
  EXPECT_EQ(md.at("mtime"), "3");
  EXPECT_EQ(md.at("xattr"), "abc");
  Metadata rest = WithoutPosixMetadata(md);
  EXPECT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest.count("xattr"), 1u);
}

TEST(XattrEncodingTest, RoundTripsBinaryValues) {
  XattrMap x = {{"user.a", std::string("\0\xff\n", 3)}, {"user.b c", "plain"}};
  std::string encoded = EncodeXattrs(x);
  EXPECT_EQ(encoded.find('"'), std::string::npos);  // URL-encoded as a whole
  auto decoded = DecodeXattrs(encoded);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(*decoded, x);
  EXPECT_EQ(EncodeXattrs({}), "");
  EXPECT_TRUE(DecodeXattrs("")->empty());
}

TEST(XattrEncodingTest, ReadsTheS3fsForm) {
  // {"user.k":"dmFsdWU="} percent-encoded, as s3fs stores x-amz-meta-xattr.
  auto decoded = DecodeXattrs("%7B%22user.k%22%3A%22dmFsdWU%3D%22%7D");
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->at("user.k"), "value");
  EXPECT_FALSE(DecodeXattrs("%7B%22user.k%22").has_value());
  EXPECT_FALSE(DecodeXattrs("not json").has_value());
}

TEST(XattrEncodingTest, ReservedNames) {
  EXPECT_TRUE(IsReservedXattr("user.etag"));
  EXPECT_TRUE(IsReservedXattr("user.objfs.stats"));
  EXPECT_FALSE(IsReservedXattr("user.etagx"));
  EXPECT_TRUE(IsUserXattr("user.x"));
  EXPECT_FALSE(IsUserXattr("user."));
  EXPECT_FALSE(IsUserXattr("security.capability"));
  EXPECT_EQ(DecodeBase64("aGk="), "hi");
  EXPECT_FALSE(DecodeBase64("a*b").has_value());
}

}  // namespace
}  // namespace objfs
