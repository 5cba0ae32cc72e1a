// The rules of user extended attributes on an object's metadata: get, set with XATTR_CREATE
// and XATTR_REPLACE, the size limit, remove.
#include "fs/xattr.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "fs/errno_map.h"

namespace objfs {
namespace {

FileAttr Attr() {
  FileAttr attr;
  attr.mode = S_IFREG | 0644;
  attr.mtime_ns = 1'700'000'000'000'000'000;
  return attr;
}

TEST(UserXattrTest, SetThenGet) {
  Metadata extra{{"other", "kept"}};
  ASSERT_TRUE(SetUserXattr("user.a", "1", false, false, 0, Attr(), &extra).ok());
  auto value = GetUserXattr(extra, "user.a");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, "1");
  EXPECT_EQ(extra.at("other"), "kept");
  auto decoded = DecodeXattrs(extra.at(kXattrMetadata));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->at("user.a"), "1");
}

// Names are kept as given: percent signs and plus signs in them are not decoded a second time
// (user.%65tag was read back as user.etag, user.a+b as "user.a b", user.x%00y split in two).
TEST(UserXattrTest, NamesWithPercentAndPlusRoundTrip) {
  Metadata extra;
  for (const char* name : {"user.a+b", "user.%41", "user.%65tag", "user.x%00y", "user.100%"}) {
    ASSERT_TRUE(SetUserXattr(name, name, false, false, 0, Attr(), &extra).ok()) << name;
  }
  auto decoded = DecodeXattrs(extra.at(kXattrMetadata));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->size(), 5u);
  for (const char* name : {"user.a+b", "user.%41", "user.%65tag", "user.x%00y", "user.100%"}) {
    auto value = GetUserXattr(extra, name);
    ASSERT_TRUE(value.ok()) << name;
    EXPECT_EQ(*value, name);
  }
}

TEST(UserXattrTest, AMissingNameIsNoData) {
  auto value = GetUserXattr({}, "user.none");
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(ErrnoFromStatus(value.status()), ENODATA);
}

TEST(UserXattrTest, CreateAndReplaceFlags) {
  Metadata extra;
  ASSERT_TRUE(SetUserXattr("user.a", "1", /*create=*/true, false, 0, Attr(), &extra).ok());
  Status again = SetUserXattr("user.a", "2", /*create=*/true, false, 0, Attr(), &extra);
  EXPECT_EQ(ErrnoFromStatus(again), EEXIST);
  Status absent = SetUserXattr("user.b", "2", false, /*replace=*/true, 0, Attr(), &extra);
  EXPECT_EQ(ErrnoFromStatus(absent), ENODATA);
  ASSERT_TRUE(SetUserXattr("user.a", "3", false, /*replace=*/true, 0, Attr(), &extra).ok());
  EXPECT_EQ(*GetUserXattr(extra, "user.a"), "3");
}

TEST(UserXattrTest, AnAttributeTooLargeAloneIsE2big) {
  Metadata extra{{kXattrMetadata, EncodeXattrs({{"user.big", std::string(500, 'x')}})}};
  // Fits alone under 300 bytes with the mode, owner and mtime; the existing one is not counted.
  ASSERT_TRUE(SetUserXattr("user.small", "v", false, false, 300, Attr(), &extra).ok());
  Status large =
      SetUserXattr("user.huge", std::string(400, 'y'), false, false, 300, Attr(), &extra);
  EXPECT_EQ(ErrnoFromStatus(large), E2BIG);
  EXPECT_FALSE(GetUserXattr(extra, "user.huge").ok());
}

TEST(UserXattrTest, RemovingTheLastLeavesNoXattrValue) {
  Metadata extra;
  ASSERT_TRUE(SetUserXattr("user.a", "1", false, false, 0, Attr(), &extra).ok());
  ASSERT_TRUE(SetUserXattr("user.b", "2", false, false, 0, Attr(), &extra).ok());
  ASSERT_TRUE(RemoveUserXattr("user.a", &extra).ok());
  EXPECT_TRUE(extra.count(kXattrMetadata) > 0);
  ASSERT_TRUE(RemoveUserXattr("user.b", &extra).ok());
  EXPECT_EQ(extra.count(kXattrMetadata), 0u);
  EXPECT_EQ(ErrnoFromStatus(RemoveUserXattr("user.b", &extra)), ENODATA);
}

TEST(UserXattrTest, MalformedStorageIsAnError) {
  Metadata extra{{kXattrMetadata, "%zz{not json"}};
  EXPECT_FALSE(XattrsOf(extra).ok());
  EXPECT_FALSE(SetUserXattr("user.a", "1", false, false, 0, Attr(), &extra).ok());
}

}  // namespace
}  // namespace objfs
