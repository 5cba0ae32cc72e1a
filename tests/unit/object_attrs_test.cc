// How an object becomes a record and attributes: s3fs's metadata where present, the mount's
// defaults where not.
#include "fs/object_attrs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "fs/object_metadata.h"

namespace objfs {
namespace {

ObjectAttrs Defaults() {
  AttrDefaults defaults;
  defaults.uid = 1000;
  defaults.gid = 100;
  defaults.umask = 0027;
  defaults.file_mode = 0666;
  defaults.dir_mode = 0777;
  return ObjectAttrs(defaults);
}

TEST(ObjectAttrsTest, AnObjectWithoutMetadataTakesTheDefaults) {
  ObjectInfo info;
  info.key = "f";
  info.size = 12;
  info.mtime_ns = 5'000'000'000;
  MetaRecord rec = Defaults().FromInfo(info, false);
  EXPECT_FALSE(rec.is_dir);
  EXPECT_FALSE(rec.complete);
  EXPECT_EQ(rec.mode, S_IFREG | 0640u);  // file_mode less umask
  EXPECT_EQ(rec.uid, 1000u);
  EXPECT_EQ(rec.gid, 100u);
  EXPECT_EQ(rec.size, 12u);
  EXPECT_EQ(rec.mtime_ns, 5'000'000'000);
}

TEST(ObjectAttrsTest, TheObjectsOwnMetadataWins) {
  ObjectInfo info;
  info.size = 3;
  info.mtime_ns = 1;
  info.has_metadata = true;
  SetPosixMetadata(S_IFLNK | 0777, 7, 8, 9'000'000'000, &info.metadata);
  MetaRecord rec = Defaults().FromInfo(info, false);
  EXPECT_TRUE(rec.complete);
  EXPECT_EQ(rec.mode, S_IFLNK | 0777u);  // umask is for defaults only
  EXPECT_EQ(rec.uid, 7u);
  EXPECT_EQ(rec.gid, 8u);
  EXPECT_EQ(rec.mtime_ns, 9'000'000'000);
}

TEST(ObjectAttrsTest, ADirectoryModeMakesADirectoryOfSizeZero) {
  ObjectInfo info;
  info.size = 0;
  SetPosixMetadata(S_IFDIR | 0750, 0, 0, 0, &info.metadata);
  MetaRecord rec = Defaults().FromInfo(info, false);
  EXPECT_TRUE(rec.is_dir);
  EXPECT_EQ(rec.mode, S_IFDIR | 0750u);
  FileAttr attr = ObjectAttrs::ToAttr(5, rec);
  EXPECT_EQ(attr.ino, 5u);
  EXPECT_EQ(attr.nlink, 1u);  // its subdirectories are not counted: find must not rely on it
  EXPECT_EQ(attr.size, 4096u);
}

TEST(ObjectAttrsTest, FifosSocketsAndDevicesKeepTheirTypeAndNumber) {
  for (uint32_t type : {S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK}) {
    ObjectInfo info;
    info.has_metadata = true;
    SetPosixMetadata(type | 0640, 0, 0, 0, &info.metadata);
    info.metadata[kRdevMetadata] = "2049";
    MetaRecord rec = Defaults().FromInfo(info, false);
    EXPECT_FALSE(rec.is_dir);
    EXPECT_EQ(rec.mode, type | 0640u);
    FileAttr attr = ObjectAttrs::ToAttr(4, rec);
    EXPECT_EQ(attr.mode, type | 0640u);
    // Only a device has a number.
    EXPECT_EQ(attr.rdev, type == S_IFCHR || type == S_IFBLK ? 2049u : 0u) << type;
  }
  // s3fs writes no number: device 0.
  ObjectInfo s3fs;
  s3fs.has_metadata = true;
  SetPosixMetadata(S_IFCHR | 0600, 0, 0, 0, &s3fs.metadata);
  EXPECT_EQ(ObjectAttrs::ToAttr(4, Defaults().FromInfo(s3fs, false)).rdev, 0u);
}

TEST(ObjectAttrsTest, AnUnknownTypeIsShownAsARegularFile) {
  ObjectInfo info;
  SetPosixMetadata(0160000 | 0600, 0, 0, 0, &info.metadata);  // BSD's whiteout
  EXPECT_EQ(Defaults().FromInfo(info, false).mode, S_IFREG | 0600u);
  // A marker is a directory whatever its mode says.
  SetPosixMetadata(S_IFIFO | 0600, 0, 0, 0, &info.metadata);
  EXPECT_EQ(Defaults().FromInfo(info, true).mode, S_IFDIR | 0600u);
}

TEST(ObjectAttrsTest, AnImplicitDirectoryHasTheDefaultDirectoryAttributes) {
  MetaRecord rec = Defaults().ImplicitDir(42);
  EXPECT_TRUE(rec.is_dir);
  EXPECT_FALSE(rec.has_object);
  EXPECT_EQ(rec.mode, S_IFDIR | 0750u);
  EXPECT_EQ(rec.uid, 1000u);
  EXPECT_EQ(rec.mtime_ns, 42);
}

TEST(ObjectAttrsTest, AFileRecordBecomesStatAttributes) {
  MetaRecord rec;
  rec.mode = S_IFREG | 0644;
  rec.size = 77;
  rec.mtime_ns = 10;
  FileAttr attr = ObjectAttrs::ToAttr(3, rec);
  EXPECT_EQ(attr.size, 77u);
  EXPECT_EQ(attr.nlink, 1u);
  EXPECT_EQ(attr.mtime_ns, 10);
  EXPECT_EQ(attr.ctime_ns, 10);
  EXPECT_EQ(attr.atime_ns, 10);
}

TEST(ObjectAttrsTest, StoredAtimeAndCtimeAreShown) {
  ObjectAttrs attrs(AttrDefaults{});
  ObjectInfo info;
  info.key = "f";
  info.mtime_ns = 5'000'000'000;
  info.metadata = {{"mtime", "20"}, {"atime", "10"}, {"ctime", "30.5"}};
  info.has_metadata = true;
  FileAttr attr = ObjectAttrs::ToAttr(3, attrs.FromInfo(info, false));
  EXPECT_EQ(attr.mtime_ns, 20'000'000'000);
  EXPECT_EQ(attr.atime_ns, 10'000'000'000);
  EXPECT_EQ(attr.ctime_ns, 30'500'000'000);
}

TEST(ObjectAttrsTest, InfoFromRecordKeepsWhatAConditionalRequestNeeds) {
  MetaRecord rec;
  rec.size = 9;
  rec.etag = ETag::Parse("\"abc\"");
  rec.complete = true;
  ObjectInfo info = InfoFromRecord("k", rec);
  EXPECT_EQ(info.key, "k");
  EXPECT_EQ(info.size, 9u);
  EXPECT_EQ(info.etag, rec.etag);
  EXPECT_TRUE(info.has_metadata);
}

}  // namespace
}  // namespace objfs
