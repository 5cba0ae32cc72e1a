// ListingAttrStore over the in-memory store (S3-like): listed files get the metadata a HEAD
// found while they list unchanged, the precise and whole-second date rules, writes that forget,
// listings and HEADs that overlap a write, persistence across StoreDb reopenings, and the
// conformance suite.
#include "cache/listing_attr_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "backend/fake/memory_store.h"
#include "tests/conformance/object_store_conformance.h"

namespace objfs {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::string TempDir() {
  char tmpl[] = "/tmp/objfs-listing-attr-test-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

std::shared_ptr<StoreDb> OpenDb(const std::string& dir) {
  auto db = StoreDb::Open(dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::make_shared<StoreDb>(std::move(db).value()) : nullptr;
}

struct ScratchDirs {
  ~ScratchDirs() {
    std::error_code ignored;
    for (const std::string& dir : dirs) std::filesystem::remove_all(dir, ignored);
  }
  std::vector<std::string> dirs;
};

std::shared_ptr<ObjectStore> FreshListingAttrStore() {
  static ScratchDirs scratch;
  scratch.dirs.push_back(TempDir());
  return std::make_shared<ListingAttrStore>(std::make_shared<MemoryStore>(),
                                            OpenDb(scratch.dirs.back() + "/db"), nullptr);
}

ConformanceBackend Backend() {
  ConformanceBackend backend;
  backend.name = "ListingAttrOverMemory";
  backend.make_store = FreshListingAttrStore;
  MemoryStoreOptions defaults;
  backend.multipart_threshold = defaults.multipart_threshold;
  backend.part_size = defaults.part_size;
  backend.copy_part_threshold = defaults.copy_part_threshold;
  return backend;
}

INSTANTIATE_TEST_SUITE_P(Memory, ObjectStoreConformance, ::testing::Values(Backend()),
                         ConformanceBackendName);

// Runs a hook after the inner store answered a HEAD, before the answer goes up:
// a write of this mount that overlaps the request.
class HookedStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<ObjectInfo> head(std::string_view key) override {
    Result<ObjectInfo> result = ForwardingStore::head(key);
    if (auto hook = std::exchange(after_head, nullptr)) hook();
    return result;
  }
  std::function<void()> after_head;
};

class ListingAttrStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    memory_ = std::make_shared<MemoryStore>();
    hooked_ = std::make_shared<HookedStore>(memory_);
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A new mount: the records are read back from disk, nothing listed is remembered.
  void Reopen() {
    store_.reset();
    db_.reset();
    db_ = OpenDb(dir_ + "/db");
    store_ =
        std::make_shared<ListingAttrStore>(hooked_, db_, &metrics_, [this] { return now_ns_; });
  }

  void PutObject(const std::string& key, std::string_view data, Metadata metadata,
                 int64_t mtime_ns) {
    PutOptions put;
    put.metadata = std::move(metadata);
    ASSERT_TRUE(memory_->put(key, MemorySource(data), put).ok());
    memory_->set_mtime(key, mtime_ns);
  }

  // The listing entry of `key` under "d/".
  ObjectInfo Listed(const std::string& key) {
    ListOptions options;
    options.prefix = "d/";
    options.want_metadata = true;
    Result<Listing> listing = store_->list(options);
    EXPECT_TRUE(listing.ok()) << listing.status().ToString();
    if (listing.ok()) {
      for (const ObjectInfo& object : listing->objects) {
        if (object.key == key) return object;
      }
    }
    ADD_FAILURE() << key << " not listed";
    return ObjectInfo{};
  }

  bool Recorded(const std::string& key) {
    Result<std::optional<ObjectMetaRecord>> r = db_->Get<ObjectMetaRecord>(key);
    return r.ok() && r->has_value();
  }

  std::string dir_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<HookedStore> hooked_;
  std::shared_ptr<StoreDb> db_;
  Metrics metrics_;
  int64_t now_ns_ = int64_t{1'700'000'000} * kSecond;
  std::shared_ptr<ListingAttrStore> store_;
};

TEST_F(ListingAttrStoreTest, AListedFileUnchangedSinceItsHeadComesWithItsMetadata) {
  const int64_t listed_ns = now_ns_ - 60 * kSecond + 123'000'000;  // RGW: milliseconds
  PutObject("d/a", "aaa", {{"mode", "33152"}, {"mtime", "1500000000"}}, listed_ns);
  EXPECT_FALSE(Listed("d/a").has_metadata);
  Result<ObjectInfo> head = store_->head("d/a");
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(Recorded("d/a"));

  Reopen();
  ObjectInfo a = Listed("d/a");
  EXPECT_TRUE(a.has_metadata);
  EXPECT_EQ(a.metadata, (Metadata{{"mode", "33152"}, {"mtime", "1500000000"}}));
  EXPECT_EQ(a.mtime_ns, head->mtime_ns);
  EXPECT_EQ(a.size, 3u);
  EXPECT_EQ(metrics_.attrs_kept.load(), 1u);

  // Another client's chmod: same bytes and ETag, a new LastModified. No longer matched.
  PutObject("d/a", "aaa", {{"mode", "33188"}}, listed_ns + kSecond);
  Reopen();
  EXPECT_FALSE(Listed("d/a").has_metadata);
  EXPECT_EQ(metrics_.attrs_kept.load(), 1u);
  // Its HEAD records it again.
  ASSERT_TRUE(store_->head("d/a").ok());
  EXPECT_EQ(Listed("d/a").metadata, (Metadata{{"mode", "33188"}}));
}

TEST_F(ListingAttrStoreTest, APreciseListingDateMustMatchExactly) {
  const int64_t listed_ns = now_ns_ - 60 * kSecond + 123'000'000;
  PutObject("d/a", "aaa", {{"mode", "33152"}}, listed_ns);
  ASSERT_FALSE(Listed("d/a").has_metadata);
  ASSERT_TRUE(store_->head("d/a").ok());  // recorded against the listed date
  ASSERT_TRUE(Recorded("d/a"));
  // The same second, another millisecond: a change within that second.
  memory_->set_mtime("d/a", listed_ns + 1'000'000);
  EXPECT_FALSE(Listed("d/a").has_metadata);
}

TEST_F(ListingAttrStoreTest, APreciseDateIsKeptAtOnce) {
  // A listing with fractions of seconds tells a chmod in the same second apart.
  const int64_t listed_ns = now_ns_ - 1'000'000;
  PutObject("d/a", "aaa", {{"mode", "33152"}}, listed_ns);
  ASSERT_FALSE(Listed("d/a").has_metadata);
  ASSERT_TRUE(store_->head("d/a").ok());
  EXPECT_TRUE(Listed("d/a").has_metadata);
}

TEST_F(ListingAttrStoreTest, WholeSecondDatesAreKeptOnlyOnceTheirSecondHasPassed) {
  // A store whose listings have whole seconds (AWS): a chmod later in the same second would
  // list exactly as the object the HEAD saw.
  const int64_t this_second = now_ns_ - now_ns_ % kSecond;
  PutObject("d/fresh", "x", {{"mode", "33152"}}, this_second - kSecond);
  PutObject("d/old", "y", {{"mode", "33152"}}, this_second - 60 * kSecond);
  EXPECT_FALSE(Listed("d/fresh").has_metadata);
  ASSERT_TRUE(store_->head("d/fresh").ok());
  ASSERT_TRUE(store_->head("d/old").ok());
  EXPECT_FALSE(Recorded("d/fresh"));
  EXPECT_TRUE(Recorded("d/old"));
  Reopen();
  EXPECT_FALSE(Listed("d/fresh").has_metadata);
  EXPECT_TRUE(Listed("d/old").has_metadata);
  // Two seconds on, a HEAD records it.
  now_ns_ += 2 * kSecond;
  ASSERT_TRUE(store_->head("d/fresh").ok());
  EXPECT_TRUE(Listed("d/fresh").has_metadata);
}

TEST_F(ListingAttrStoreTest, AHeadWithoutAListingRecordsItsOwnDateInWholeSeconds) {
  const int64_t modified_ns = now_ns_ - 60 * kSecond + 250'000'000;
  PutObject("d/a", "aaa", {{"mode", "33152"}}, modified_ns);
  ASSERT_TRUE(store_->head("d/a").ok());  // a lookup, no listing before it
  Result<std::optional<ObjectMetaRecord>> r = db_->Get<ObjectMetaRecord>("d/a");
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->listed_ns, modified_ns);
  EXPECT_TRUE(Listed("d/a").has_metadata);
}

TEST_F(ListingAttrStoreTest, WritesForgetTheirRecords) {
  const int64_t old_ns = now_ns_ - 60 * kSecond + 5'000'000;
  for (const char* key : {"d/put", "d/copied", "d/set", "d/removed", "d/many"}) {
    PutObject(key, "x", {{"mode", "33152"}}, old_ns);
    ASSERT_TRUE(store_->head(key).ok());
    ASSERT_TRUE(Recorded(key)) << key;
  }
  ASSERT_TRUE(store_->put("d/put", MemorySource("y"), PutOptions{}).ok());
  Result<ObjectInfo> src = store_->head("d/set");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(store_->copy(*src, "d/copied", CopyOptions{}).ok());
  SetAttributesOptions set;
  set.expected = *src;
  ASSERT_TRUE(store_->set_attributes("d/set", {{"mode", "33188"}}, set).ok());
  ASSERT_TRUE(store_->remove("d/removed").ok());
  ASSERT_TRUE(store_->remove_many({"d/many"}).ok());
  for (const char* key : {"d/put", "d/copied", "d/set", "d/removed", "d/many"}) {
    EXPECT_FALSE(Recorded(key)) << key;
  }
}

TEST_F(ListingAttrStoreTest, AHeadUnderWayDuringAWriteRecordsNothing) {
  const int64_t old_ns = now_ns_ - 60 * kSecond;
  PutObject("d/a", "aaa", {{"mode", "33152"}}, old_ns);
  Result<ObjectInfo> before = memory_->head("d/a");
  ASSERT_TRUE(before.ok());
  // The HEAD saw the old metadata; this mount's chmod lands before its answer is used.
  hooked_->after_head = [&] {
    SetAttributesOptions set;
    set.expected = *before;
    ASSERT_TRUE(store_->set_attributes("d/a", {{"mode", "33188"}}, set).ok());
  };
  Result<ObjectInfo> head = store_->head("d/a");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), "33152");
  EXPECT_FALSE(Recorded("d/a")) << "the HEAD's view predates the chmod";
}

TEST_F(ListingAttrStoreTest, AListingOfNamesOnlyIsLeftAlone) {
  PutObject("d/a", "aaa", {{"mode", "33152"}}, now_ns_ - 60 * kSecond);
  ASSERT_TRUE(store_->head("d/a").ok());
  ASSERT_TRUE(Listed("d/a").has_metadata);
  ListOptions names;
  names.prefix = "d/";
  Result<Listing> listing = store_->list(names);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->objects.size(), 1u);
  EXPECT_FALSE(listing->objects[0].has_metadata);
  EXPECT_EQ(metrics_.attrs_kept.load(), 1u);
}

TEST_F(ListingAttrStoreTest, DirectoryMarkersAreNeverRecorded) {
  PutObject("d/sub/", "", {{"mode", "16877"}}, now_ns_ - 60 * kSecond);
  ASSERT_TRUE(store_->head("d/sub/").ok());
  EXPECT_FALSE(Recorded("d/sub/"));
  EXPECT_FALSE(Listed("d/sub/").has_metadata);
}

}  // namespace
}  // namespace objfs
