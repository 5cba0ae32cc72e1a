// A directory's names from listing pages made by hand: order, each name once across pages,
// skipped names, and the names kept for the metadata cache.
#include "fs/dir_listing.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "fs/object_metadata.h"

namespace objfs {
namespace {

ObjectInfo Object(const std::string& key, uint64_t size = 1) {
  ObjectInfo info;
  info.key = key;
  info.size = size;
  info.mtime_ns = 77;
  return info;
}

class DirListingTest : public ::testing::Test {
 protected:
  std::vector<std::string> Names(const Listing& page, const std::string& prefix = "d/") {
    std::vector<std::string> names;
    for (const ListedName& named : NamesOfPage(page, prefix, attrs_, 5, &cursor_, &skipped_)) {
      names.push_back(named.name + (named.listed.is_dir ? "/" : ""));
    }
    return names;
  }

  ObjectAttrs attrs_{AttrDefaults{}};
  DirCursor cursor_;
  uint64_t skipped_ = 0;
};

TEST_F(DirListingTest, ObjectsAndPrefixesAreMergedInKeyOrder) {
  Listing page;
  page.objects = {Object("d/"), Object("d/a"), Object("d/c")};
  page.common_prefixes = {"d/b/", "d/d/"};
  EXPECT_EQ(Names(page), (std::vector<std::string>{"a", "b/", "c", "d/"}));
  EXPECT_EQ(cursor_.names, (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST_F(DirListingTest, AMarkerAndItsPrefixAreOneDirectory) {
  Listing page;
  page.objects = {Object("d/sub/")};
  page.common_prefixes = {"d/sub/"};
  std::vector<ListedName> names = NamesOfPage(page, "d/", attrs_, 5, &cursor_, &skipped_);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(names[0].listed.is_dir);
  EXPECT_EQ(names[0].listed.mtime_ns, 77);  // the marker's date
}

TEST_F(DirListingTest, AFileAndADirectoryOfOneNameAreGivenOnceEvenAcrossPages) {
  Listing first;
  first.objects = {Object("d/x"), Object("d/x-1")};
  Listing second;
  second.objects = {Object("d/x.txt")};
  second.common_prefixes = {"d/x/"};  // "x/" sorts after "x-1" and "x.txt"
  EXPECT_EQ(Names(first), (std::vector<std::string>{"x", "x-1"}));
  EXPECT_EQ(Names(second), (std::vector<std::string>{"x.txt"}));
  // Once the listing passed "x/", a file "x" is forgotten: nothing keeps growing.
  Listing third;
  third.objects = {Object("d/y")};
  EXPECT_EQ(Names(third), (std::vector<std::string>{"y"}));
  EXPECT_TRUE(cursor_.recent_files.count("x") == 0);
}

TEST_F(DirListingTest, NamesThatCannotBeFileNamesAreSkippedAndCounted) {
  Listing page;
  page.objects = {Object("d//"), Object("d/./"), Object("d/ok"),
                  Object("d/" + std::string(256, 'n'))};
  page.common_prefixes = {"d/../"};
  EXPECT_EQ(Names(page), (std::vector<std::string>{"ok"}));
  EXPECT_EQ(skipped_, 4u);
}

TEST_F(DirListingTest, AListedNameIsNoLongerALocalOne) {
  cursor_.local_names = {"a", "b"};
  Listing page;
  page.objects = {Object("d/a")};
  Names(page);
  EXPECT_EQ(cursor_.local_names, (std::set<std::string, std::less<>>{"b"}));
}

TEST_F(DirListingTest, TooManyNamesKeepNone) {
  Listing page;
  for (size_t i = 0; i <= kListingNamesKept; ++i) {
    char key[32];
    std::snprintf(key, sizeof(key), "d/%08zu", i);
    page.objects.push_back(Object(key));
  }
  EXPECT_EQ(Names(page).size(), kListingNamesKept + 1);
  EXPECT_TRUE(cursor_.names_overflow);
  EXPECT_TRUE(cursor_.names.empty());
}

TEST_F(DirListingTest, ListedMetadataMakesACompleteRecord) {
  Listing page;
  ObjectInfo with = Object("d/with");
  with.has_metadata = true;
  SetPosixMetadata(S_IFREG | 0600, 1, 2, 3, &with.metadata);
  ObjectInfo dir_mode = Object("d/z");
  SetPosixMetadata(S_IFDIR | 0700, 1, 2, 3, &dir_mode.metadata);
  page.objects = {Object("d/bare"), with, dir_mode};
  std::vector<ListedName> names = NamesOfPage(page, "d/", attrs_, 5, &cursor_, &skipped_);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_FALSE(names[0].listed.complete);
  EXPECT_TRUE(names[1].listed.complete);
  EXPECT_EQ(names[1].listed.mode, S_IFREG | 0600u);
  EXPECT_TRUE(names[2].listed.is_dir);  // its mode says so
}

TEST_F(DirListingTest, ThePrefixOnlyDirectoryHasTheGivenDate) {
  Listing page;
  page.common_prefixes = {"sub/"};
  std::vector<ListedName> names = NamesOfPage(page, "", attrs_, 5, &cursor_, &skipped_);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].name, "sub");
  EXPECT_EQ(names[0].listed.mtime_ns, 5);
  EXPECT_FALSE(names[0].listed.complete);
}

TEST(IsValidNameTest, Rules) {
  EXPECT_TRUE(IsValidName("a"));
  EXPECT_FALSE(IsValidName(""));
  EXPECT_FALSE(IsValidName("."));
  EXPECT_FALSE(IsValidName(".."));
  EXPECT_FALSE(IsValidName("a/b"));
  EXPECT_TRUE(IsValidName(std::string(255, 'a')));
  EXPECT_FALSE(IsValidName(std::string(256, 'a')));
  EXPECT_FALSE(IsValidName(std::string("a\0b", 3)));  // no POSIX name holds one
}

TEST_F(DirListingTest, AKeyHoldingANulIsSkippedAndTheRestListed) {
  // A server may list one (url-encoded as %00); readdir of the whole directory failed on it.
  Listing page;
  page.objects = {Object("d/a"), Object(std::string("d/b\0c", 6)), Object("d/d")};
  std::vector<ListedName> names = NamesOfPage(page, "d/", attrs_, 5, &cursor_, &skipped_);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].name, "a");
  EXPECT_EQ(names[1].name, "d");
  EXPECT_EQ(skipped_, 1u);
}

}  // namespace
}  // namespace objfs
