// ContentEtagStore over the in-memory store in its SFTP-like mode (no native ETags: head() and
// list() report versions): recorded MD5s, preconditions by MD5, invalidation by outside changes,
// hashing in bulk reads, persistence across StoreDb reopenings, and the conformance suite.
#include "cache/content_etag_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"
#include "backend/md5.h"
#include "backend/object_version.h"
#include "tests/conformance/object_store_conformance.h"

namespace objfs {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/objfs-content-etag-test-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

std::shared_ptr<StoreDb> OpenDb(const std::string& dir) {
  auto db = StoreDb::Open(dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::make_shared<StoreDb>(std::move(db).value()) : nullptr;
}

std::string Pattern(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  uint32_t x = seed * 2654435761u + 12345u;
  for (char& c : out) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

std::shared_ptr<MemoryStore> SftpLikeStore() {
  MemoryStoreOptions options;
  options.native_etags = false;
  return std::make_shared<MemoryStore>(options);
}

// Counts the reads that reach the store below, and the smallest buffer one of them asked for.
class ReadCountingStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    ++reads;
    size_t seen = smallest_read.load();
    while (buf.size() < seen && !smallest_read.compare_exchange_weak(seen, buf.size())) {
    }
    return ForwardingStore::read(key, offset, buf, if_match);
  }
  std::atomic<uint64_t> reads{0};
  std::atomic<size_t> smallest_read{SIZE_MAX};
};

// Deleted with the process: the directories of the conformance instantiation's databases.
struct ScratchDirs {
  ~ScratchDirs() {
    std::error_code ignored;
    for (const std::string& dir : dirs) std::filesystem::remove_all(dir, ignored);
  }
  std::vector<std::string> dirs;
};

std::shared_ptr<ObjectStore> FreshContentEtagStore() {
  static ScratchDirs scratch;
  scratch.dirs.push_back(TempDir());
  return std::make_shared<ContentEtagStore>(SftpLikeStore(), OpenDb(scratch.dirs.back() + "/db"),
                                            nullptr);
}

std::shared_ptr<ObjectStore> FreshSftpLikeStore() { return SftpLikeStore(); }

ConformanceBackend Backend(std::string name, std::function<std::shared_ptr<ObjectStore>()> make) {
  ConformanceBackend backend;
  backend.name = std::move(name);
  backend.make_store = std::move(make);
  return backend;
}

INSTANTIATE_TEST_SUITE_P(Memory, ObjectStoreConformance,
                         ::testing::Values(Backend("MemoryWithoutETags", FreshSftpLikeStore),
                                           Backend("ContentEtagOverMemory", FreshContentEtagStore)),
                         ConformanceBackendName);

class ContentEtagStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    inner_ = SftpLikeStore();
    counting_ = std::make_shared<ReadCountingStore>(inner_);
    db_ = OpenDb(dir_ + "/db");
    ASSERT_NE(db_, nullptr);
    store_ = std::make_unique<ContentEtagStore>(counting_, db_, &metrics_, /*racy_ns=*/0);
  }
  void TearDown() override {
    store_.reset();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  Result<ObjectInfo> Put(ObjectStore& store, std::string_view key, std::string_view data,
                         PutOptions options = {}) {
    return store.put(key, MemorySource(data), options);
  }
  static ETag Md5Tag(std::string_view data) { return ETag::FromMd5(Md5Of(data)); }
  std::optional<ContentETagRecord> RecordOf(std::string_view key) {
    auto record = db_->Get<ContentETagRecord>(key);
    EXPECT_TRUE(record.ok());
    return record.ok() ? *record : std::nullopt;
  }
  Result<std::string> Read(std::string_view key, const ETag* if_match) {
    std::string out(1 << 16, '\0');
    OBJFS_ASSIGN_OR_RETURN(
        size_t n,
        store_->read(key, 0,
                     std::span<std::byte>(reinterpret_cast<std::byte*>(out.data()), out.size()),
                     if_match));
    out.resize(n);
    return out;
  }

  std::string dir_;
  Metrics metrics_;
  std::shared_ptr<MemoryStore> inner_;
  std::shared_ptr<ReadCountingStore> counting_;
  std::shared_ptr<StoreDb> db_;
  std::unique_ptr<ContentEtagStore> store_;
};

TEST_F(ContentEtagStoreTest, InnerStoreReportsVersionsNotETags) {
  ASSERT_TRUE(Put(*inner_, "f", "data").ok());
  Result<ObjectInfo> head = inner_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(IsVersionTag(head->etag)) << head->etag.value();
  EXPECT_EQ(head->etag, VersionTag(4, head->mtime_ns));
  EXPECT_FALSE(inner_->capabilities().native_etags);
  EXPECT_FALSE(store_->capabilities().native_etags);
}

TEST_F(ContentEtagStoreTest, PutRecordsTheMd5ItReturns) {
  Result<ObjectInfo> put = Put(*store_, "dir/file", "hello");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->etag, Md5Tag("hello"));
  std::optional<ContentETagRecord> record = RecordOf("dir/file");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->size, 5u);
  EXPECT_EQ(record->mtime_ns, put->mtime_ns);
  EXPECT_EQ(ETag::FromMd5(record->md5), Md5Tag("hello"));

  Result<ObjectInfo> head = store_->head("dir/file");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, Md5Tag("hello"));
  ListOptions list;
  list.prefix = "dir/";
  Result<Listing> listing = store_->list(list);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->objects.size(), 1u);
  EXPECT_EQ(listing->objects[0].etag, Md5Tag("hello"));

  const uint64_t reads = counting_->reads.load();
  Result<ETag> etag = store_->ContentEtag("dir/file");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, Md5Tag("hello"));
  EXPECT_EQ(counting_->reads.load(), reads);
  EXPECT_EQ(metrics_.bytes_hashed.load(), 0u);
}

TEST_F(ContentEtagStoreTest, AFileHashedInTheSecondItWasWrittenIsNotRecorded) {
  // Its version (size, whole-second mtime) could stay the same through another rewrite in that
  // second, so its MD5 is returned but computed again next time.
  ContentEtagStore racy(counting_, db_, &metrics_);  // the default window
  ASSERT_TRUE(Put(*inner_, "fresh", "just written").ok());
  Result<ETag> first = racy.ContentEtag("fresh");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, Md5Tag("just written"));
  EXPECT_FALSE(RecordOf("fresh").has_value());
  Result<ETag> second = racy.ContentEtag("fresh");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(metrics_.bytes_hashed.load(), 2 * std::string("just written").size());
}

TEST_F(ContentEtagStoreTest, ContentEtagHashesOnceInBulkReadsThenServesTheRecord) {
  const std::string data = Pattern((10u << 20) + 5, 3);
  ASSERT_TRUE(Put(*inner_, "big", data).ok());  // written by someone else: no record
  Result<ObjectInfo> head = store_->head("big");
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head->etag.is_plain_md5()) << head->etag.value();
  EXPECT_FALSE(RecordOf("big").has_value());

  Result<ETag> etag = store_->ContentEtag("big");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, Md5Tag(data));
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
  EXPECT_EQ(counting_->reads.load(), 3u);  // 4 MiB + 4 MiB + the rest
  EXPECT_GE(counting_->smallest_read.load(), size_t{1} << 20);

  Result<ETag> again = store_->ContentEtag("big");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *etag);
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
  EXPECT_EQ(counting_->reads.load(), 3u);
  Result<ObjectInfo> after = store_->head("big");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->etag, Md5Tag(data));
}

TEST_F(ContentEtagStoreTest, ContentEtagOfEmptyObjectAndOfDirectory) {
  ASSERT_TRUE(Put(*inner_, "empty", "").ok());
  Result<ETag> etag = store_->ContentEtag("empty");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(etag->value(), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(store_->ContentEtag("dir/").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ContentEtag("missing").status().code(), StatusCode::kNotFound);
}

TEST_F(ContentEtagStoreTest, CopyRecordsTheSourceMd5WithoutHashing) {
  const std::string data = Pattern(3u << 20, 5);
  ASSERT_TRUE(Put(*store_, "src", data).ok());
  Result<ObjectInfo> src = store_->head("src");
  ASSERT_TRUE(src.ok());
  ASSERT_EQ(src->etag, Md5Tag(data));
  const uint64_t reads = counting_->reads.load();

  Result<ObjectInfo> copied = store_->copy(*src, "dst", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(copied->etag, src->etag);
  std::optional<ContentETagRecord> record = RecordOf("dst");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->size, data.size());
  EXPECT_EQ(record->mtime_ns, copied->mtime_ns);
  EXPECT_NE(record->mtime_ns, src->mtime_ns);
  Result<ETag> dst_etag = store_->ContentEtag("dst");
  ASSERT_TRUE(dst_etag.ok());
  EXPECT_EQ(*dst_etag, src->etag);
  EXPECT_EQ(metrics_.bytes_hashed.load(), 0u);
  EXPECT_EQ(counting_->reads.load(), reads);
}

TEST_F(ContentEtagStoreTest, CopyOfASourceSeenByItsVersionUsesItsRecord) {
  ASSERT_TRUE(Put(*inner_, "src", "some content").ok());
  Result<ObjectInfo> seen = store_->head("src");  // before any hashing: a version
  ASSERT_TRUE(seen.ok());
  ASSERT_TRUE(IsVersionTag(seen->etag));
  ASSERT_TRUE(store_->ContentEtag("src").ok());
  const uint64_t hashed = metrics_.bytes_hashed.load();

  Result<ObjectInfo> copied = store_->copy(*seen, "dst", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(copied->etag, Md5Tag("some content"));
  Result<ETag> dst = store_->ContentEtag("dst");
  ASSERT_TRUE(dst.ok());
  EXPECT_EQ(*dst, Md5Tag("some content"));
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
}

TEST_F(ContentEtagStoreTest, CopyOfAnUnhashedSourceRecordsNothing) {
  ASSERT_TRUE(Put(*inner_, "src", "unknown content").ok());
  Result<ObjectInfo> src = store_->head("src");
  ASSERT_TRUE(src.ok());
  Result<ObjectInfo> copied = store_->copy(*src, "dst", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_FALSE(copied->etag.is_plain_md5()) << copied->etag.value();
  EXPECT_EQ(copied->etag, VersionTag(copied->size, copied->mtime_ns));
  EXPECT_FALSE(RecordOf("dst").has_value());
  // The version it reports guards reads like any other.
  Result<std::string> read = Read("dst", &copied->etag);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, "unknown content");
}

// A copy of a file nobody has hashed yet: whichever of the two is hashed first gives its MD5 to
// the other, while both keep the versions the copy left them with. The bytes are hashed once.
TEST_F(ContentEtagStoreTest, ACopyOfAnUnhashedFileIsHashedOnceForBoth) {
  const std::string data = Pattern(3 << 20, 9);
  ASSERT_TRUE(Put(*inner_, "src", data).ok());
  ASSERT_TRUE(Put(*inner_, "other", "x").ok());
  Result<ObjectInfo> src = store_->head("src");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(store_->copy(*src, "dst", CopyOptions{}).ok());
  ASSERT_TRUE(store_->copy(*src, "dst2", CopyOptions{}).ok());

  Result<ETag> dst = store_->ContentEtag("dst");
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  EXPECT_EQ(*dst, Md5Tag(data));
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
  ASSERT_TRUE(RecordOf("src").has_value());
  Result<ETag> from_src = store_->ContentEtag("src");
  ASSERT_TRUE(from_src.ok());
  EXPECT_EQ(*from_src, *dst);
  // The second copy learns it from the source once the source is known.
  Result<ETag> dst2 = store_->ContentEtag("dst2");
  ASSERT_TRUE(dst2.ok());
  EXPECT_EQ(*dst2, *dst);
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());

  // A side changed since the copy gets nothing: the bytes may differ.
  Result<ObjectInfo> src2 = store_->head("other");
  ASSERT_TRUE(src2.ok());
  ASSERT_TRUE(store_->copy(*src2, "changed", CopyOptions{}).ok());
  ASSERT_TRUE(Put(*inner_, "changed", "y").ok());  // by someone else
  ASSERT_TRUE(store_->ContentEtag("other").ok());
  EXPECT_FALSE(RecordOf("changed").has_value());
  Result<ETag> changed = store_->ContentEtag("changed");
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(*changed, Md5Tag("y"));
}

// Right after a copy the destination's version is too recent to record (kRacyNs): the MD5
// hashed for the source still serves it, looked up through the copy.
TEST_F(ContentEtagStoreTest, ACopyTooRecentToRecordStillUsesItsSourcesMd5) {
  ContentEtagStore racy(counting_, db_, &metrics_);  // the default window
  const std::string data = Pattern(1 << 20, 4);
  ASSERT_TRUE(Put(*inner_, "src", data).ok());
  inner_->set_mtime("src", 1'600'000'000'000'000'000);  // long ago
  Result<ObjectInfo> src = racy.head("src");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(racy.copy(*src, "dst", CopyOptions{}).ok());
  ASSERT_TRUE(racy.ContentEtag("src").ok());
  EXPECT_FALSE(RecordOf("dst").has_value());  // too recent to record
  Result<ETag> dst = racy.ContentEtag("dst");
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  EXPECT_EQ(*dst, Md5Tag(data));
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
}

// A copy made within its source's mtime second: another program may rewrite the source in
// that second, keeping its version, so the two share nothing.
TEST_F(ContentEtagStoreTest, ACopyOfASourceWrittenInItsSecondSharesNoMd5) {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::atomic<int64_t> wall_ns{now_ns};
  ContentEtagStore racy(counting_, db_, &metrics_, ContentEtagStore::kRacyNs,
                        [&wall_ns] { return wall_ns.load(); });
  const std::string a = Pattern(1 << 20, 63);
  const std::string b = Pattern(1 << 20, 64);
  ASSERT_TRUE(Put(*inner_, "src", a).ok());
  inner_->set_mtime("src", now_ns - 500'000'000);  // half a second ago
  Result<ObjectInfo> src = racy.head("src");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(racy.copy(*src, "dst", CopyOptions{}).ok());
  // Rewritten in the same second, at the same size: the same version.
  ASSERT_TRUE(Put(*inner_, "src", b).ok());
  inner_->set_mtime("src", src->mtime_ns);
  wall_ns += 5'000'000'000;  // both versions old enough to record now
  Result<ETag> dst = racy.ContentEtag("dst");
  ASSERT_TRUE(dst.ok()) << dst.status().ToString();
  EXPECT_EQ(dst->value(), Md5Tag(a).value());
  Result<ETag> from_src = racy.ContentEtag("src");
  ASSERT_TRUE(from_src.ok()) << from_src.status().ToString();
  EXPECT_EQ(from_src->value(), Md5Tag(b).value());
}

// What a copy left behind is forgotten when the destination is written again: a second copy
// onto it with the same size, in the same second as the first (so the same version), must not
// take the first source's MD5.
TEST_F(ContentEtagStoreTest, ACopyOverwrittenByAnotherCopyForgetsTheFirstSource) {
  ASSERT_TRUE(Put(*inner_, "a", "aaaa").ok());
  ASSERT_TRUE(Put(*inner_, "c", "cccc").ok());
  Result<ObjectInfo> a = store_->head("a");
  Result<ObjectInfo> c = store_->head("c");
  ASSERT_TRUE(a.ok() && c.ok());
  Result<ObjectInfo> first = store_->copy(*a, "b", CopyOptions{});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(store_->copy(*c, "b", CopyOptions{}).ok());
  inner_->set_mtime("b", first->mtime_ns);  // the same version as after the first copy
  ASSERT_TRUE(store_->ContentEtag("a").ok());
  Result<ETag> b = store_->ContentEtag("b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*b, Md5Tag("cccc"));
}

TEST_F(ContentEtagStoreTest, CopyOfAReplacedSourceFails) {
  Result<ObjectInfo> old_version = Put(*store_, "src", "old");
  ASSERT_TRUE(old_version.ok());
  ASSERT_TRUE(Put(*store_, "src", "new!").ok());
  Result<ObjectInfo> copied = store_->copy(*old_version, "dst", CopyOptions{});
  EXPECT_EQ(copied.status().code(), StatusCode::kPreconditionFailed) << copied.status().ToString();
  EXPECT_EQ(inner_->head("dst").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(RecordOf("dst").has_value());
}

TEST_F(ContentEtagStoreTest, OutsideChangeInvalidatesTheRecord) {
  Result<ObjectInfo> put = Put(*store_, "f", "objfs wrote this");
  ASSERT_TRUE(put.ok());
  ASSERT_TRUE(RecordOf("f").has_value());

  // Replaced underneath, with a different size.
  ASSERT_TRUE(Put(*inner_, "f", "someone else wrote this").ok());
  Result<ObjectInfo> head = store_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head->etag.is_plain_md5()) << head->etag.value();
  EXPECT_FALSE(RecordOf("f").has_value()) << "a stale record is removed";
  Result<ETag> etag = store_->ContentEtag("f");
  ASSERT_TRUE(etag.ok());
  EXPECT_EQ(*etag, Md5Tag("someone else wrote this"));

  // Touched underneath: same size, another mtime.
  Result<ObjectInfo> before = store_->head("f");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(before->etag.is_plain_md5());
  inner_->set_mtime("f", before->mtime_ns - 1000000000);
  ListOptions list;
  Result<Listing> listing = store_->list(list);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->objects.size(), 1u);
  EXPECT_FALSE(listing->objects[0].etag.is_plain_md5());
  Result<ObjectInfo> touched = store_->head("f");
  ASSERT_TRUE(touched.ok());
  EXPECT_FALSE(touched->etag.is_plain_md5());
}

TEST_F(ContentEtagStoreTest, ReadWithAnMd5TakenBeforeAReplacementFails) {
  ASSERT_TRUE(Put(*store_, "f", "version one").ok());
  Result<ObjectInfo> seen = store_->head("f");
  ASSERT_TRUE(seen.ok());
  ASSERT_TRUE(seen->etag.is_plain_md5());
  Result<std::string> ok = Read("f", &seen->etag);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "version one");

  // Replaced through objfs...
  ASSERT_TRUE(Put(*store_, "f", "version two").ok());
  EXPECT_EQ(Read("f", &seen->etag).status().code(), StatusCode::kPreconditionFailed);
  // ...and underneath it, after its MD5 was seen.
  Result<ObjectInfo> second = store_->head("f");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(Put(*inner_, "f", "version three, longer").ok());
  EXPECT_EQ(Read("f", &second->etag).status().code(), StatusCode::kPreconditionFailed);
  ETag unrelated = Md5Tag("something else");
  EXPECT_EQ(Read("f", &unrelated).status().code(), StatusCode::kPreconditionFailed);
}

TEST_F(ContentEtagStoreTest, ReadWithAVersionTakenBeforeAReplacementFails) {
  ASSERT_TRUE(Put(*inner_, "f", "version one").ok());
  Result<ObjectInfo> seen = store_->head("f");
  ASSERT_TRUE(seen.ok());
  ASSERT_TRUE(IsVersionTag(seen->etag));
  ASSERT_TRUE(Read("f", &seen->etag).ok());
  ASSERT_TRUE(Put(*inner_, "f", "version two").ok());
  EXPECT_EQ(Read("f", &seen->etag).status().code(), StatusCode::kPreconditionFailed);
}

TEST_F(ContentEtagStoreTest, PutIfMatchByMd5) {
  Result<ObjectInfo> first = Put(*store_, "f", "first");
  ASSERT_TRUE(first.ok());
  PutOptions guarded;
  guarded.if_match = first->etag;
  Result<ObjectInfo> second = Put(*store_, "f", "second", guarded);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  // The first MD5 is stale now.
  Result<ObjectInfo> third = Put(*store_, "f", "third", guarded);
  EXPECT_EQ(third.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_EQ(inner_->contents("f"), "second");
  Result<ETag> etag = store_->ContentEtag("f");
  ASSERT_TRUE(etag.ok());
  EXPECT_EQ(*etag, Md5Tag("second"));
}

// The MD5 a put returned names that version for a conditional removal too: the inner store
// checks the version its record was made for.
TEST_F(ContentEtagStoreTest, RemoveIfMatchByMd5) {
  Result<ObjectInfo> mine = Put(*store_, "f", "mine");
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->etag, Md5Tag("mine"));
  Status removed = store_->remove_if_match("f", mine->etag, /*known_current=*/false);
  EXPECT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_FALSE(inner_->head("f").ok());
  EXPECT_FALSE(RecordOf("f").has_value());

  mine = Put(*store_, "f", "mine");
  ASSERT_TRUE(mine.ok());
  ASSERT_TRUE(Put(*inner_, "f", "another client's").ok());
  removed = store_->remove_if_match("f", mine->etag, /*known_current=*/false);
  EXPECT_EQ(removed.code(), StatusCode::kPreconditionFailed) << removed.ToString();
  EXPECT_EQ(inner_->contents("f"), "another client's");
}

// A removal that removed nothing (the connection lost, another client's commit lock waited for
// in vain) keeps the record: an edit's If-Match by the MD5 still names the object, which is
// still there, and a removal tried again by that MD5 goes through.
TEST_F(ContentEtagStoreTest, ARemovalThatFailsKeepsTheRecord) {
  auto faults = std::make_shared<FaultInjectingStore>(inner_);
  ContentEtagStore store(faults, db_, &metrics_, /*racy_ns=*/0);
  Result<ObjectInfo> mine = Put(store, "f", "mine");
  ASSERT_TRUE(mine.ok());
  faults->FailNth(StoreOp::kRemove, 1, TransientError("connection lost"));
  faults->FailNth(StoreOp::kRemove, 2, TransientError("commit lock held"));
  EXPECT_EQ(store.remove("f").code(), StatusCode::kTransient);
  EXPECT_EQ(store.remove_if_match("f", mine->etag, false).code(), StatusCode::kTransient);
  EXPECT_TRUE(RecordOf("f").has_value());
  Result<ObjectInfo> head = store.head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, mine->etag);
  Status removed = store.remove_if_match("f", mine->etag, false);
  EXPECT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_FALSE(inner_->head("f").ok());
  EXPECT_FALSE(RecordOf("f").has_value());
}

TEST_F(ContentEtagStoreTest, RemoveDropsRecords) {
  for (const char* key : {"a", "b", "c"}) ASSERT_TRUE(Put(*store_, key, key).ok());
  ASSERT_TRUE(store_->remove("a").ok());
  EXPECT_FALSE(RecordOf("a").has_value());
  ASSERT_TRUE(store_->remove_many({"b", "c"}).ok());
  EXPECT_FALSE(RecordOf("b").has_value());
  EXPECT_FALSE(RecordOf("c").has_value());
  EXPECT_EQ(db_->Table<ContentETagRecord>().size(), 0u);
}

TEST_F(ContentEtagStoreTest, RecordsSurviveReopeningTheDatabase) {
  const std::string data = Pattern(1 << 20, 9);
  ASSERT_TRUE(Put(*inner_, "kept", data).ok());
  ASSERT_TRUE(store_->ContentEtag("kept").ok());
  ASSERT_EQ(metrics_.bytes_hashed.load(), data.size());
  store_.reset();
  db_.reset();

  db_ = OpenDb(dir_ + "/db");
  ASSERT_NE(db_, nullptr);
  store_ = std::make_unique<ContentEtagStore>(counting_, db_, &metrics_, /*racy_ns=*/0);
  Result<ObjectInfo> head = store_->head("kept");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, Md5Tag(data));
  Result<ETag> etag = store_->ContentEtag("kept");
  ASSERT_TRUE(etag.ok());
  EXPECT_EQ(*etag, Md5Tag(data));
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
}

// A store below whose file is rewritten by another program while it is hashed, within its
// mtime's second (the same size and mtime: the same version), on the second read; the hashing
// takes `hashing_ns` of the fake wall clock.
class RewrittenWhileHashedStore : public ForwardingStore {
 public:
  RewrittenWhileHashedStore(std::shared_ptr<MemoryStore> target, std::string rewrite_to,
                            std::atomic<int64_t>* wall_ns, int64_t hashing_ns)
      : ForwardingStore(target),
        memory_(std::move(target)),
        rewrite_to_(std::move(rewrite_to)),
        wall_ns_(wall_ns),
        hashing_ns_(hashing_ns) {}
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    if (++reads == 2) {
      OBJFS_ASSIGN_OR_RETURN(ObjectInfo before, memory_->head(key));
      OBJFS_RETURN_IF_ERROR(memory_->put(key, MemorySource(rewrite_to_), PutOptions{}).status());
      memory_->set_mtime(key, before.mtime_ns);
      wall_ns_->fetch_add(hashing_ns_);
    }
    return ForwardingStore::read(key, offset, buf, if_match);
  }
  int reads = 0;

 private:
  std::shared_ptr<MemoryStore> memory_;
  std::string rewrite_to_;
  std::atomic<int64_t>* wall_ns_;
  int64_t hashing_ns_;
};

TEST_F(ContentEtagStoreTest, AFileRewrittenInItsSecondWhileHashedIsNotRecorded) {
  // Hashing began within the file's mtime second and took long: a rewrite by another program
  // in that second kept its version, so what was read may be a mix. Whether the version can be
  // trusted is decided by when the hashing began, not when it ended.
  const std::string old_data = Pattern(2 * ContentEtagStore::kHashReadBytes, 61);
  const std::string new_data = Pattern(2 * ContentEtagStore::kHashReadBytes, 62);
  ASSERT_TRUE(Put(*inner_, "f", old_data).ok());
  std::atomic<int64_t> wall_ns{1'800'000'000'000'000'000};
  inner_->set_mtime("f", wall_ns.load() - 1'000'000'000);  // written a second ago
  auto rewriting = std::make_shared<RewrittenWhileHashedStore>(inner_, new_data, &wall_ns,
                                                               /*hashing_ns=*/5'000'000'000);
  ContentEtagStore store(rewriting, db_, &metrics_, ContentEtagStore::kRacyNs,
                         [&wall_ns] { return wall_ns.load(); });
  Result<ETag> first = store.ContentEtag("f");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(rewriting->reads, 3);  // the rewrite came between the reads
  EXPECT_FALSE(RecordOf("f").has_value());
  // Hashed again, now that nothing rewrites it: the bytes the server has.
  Result<ETag> second = store.ContentEtag("f");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->value(), Md5Tag(new_data).value());
}

// A store below whose server computes MD5s (as SFTP's md5sum), and whose file changes while the
// first one is computed.
class ServerMd5Store : public ForwardingStore {
 public:
  ServerMd5Store(std::shared_ptr<MemoryStore> target, std::string change_to)
      : ForwardingStore(target), memory_(std::move(target)), change_to_(std::move(change_to)) {}
  Result<OptionalMd5> server_md5(std::string_view key, uint64_t /*size*/) override {
    ++calls;
    std::string data(1 << 20, '\0');
    OBJFS_ASSIGN_OR_RETURN(
        size_t n,
        memory_->read(key, 0,
                      std::span<std::byte>(reinterpret_cast<std::byte*>(data.data()), data.size()),
                      nullptr));
    data.resize(n);
    if (calls == 1) {  // replaced as it was hashed
      OBJFS_RETURN_IF_ERROR(memory_->put(key, MemorySource(change_to_), PutOptions{}).status());
    }
    return OptionalMd5(Md5Of(data));
  }
  int calls = 0;

 private:
  std::shared_ptr<MemoryStore> memory_;
  std::string change_to_;
};

TEST_F(ContentEtagStoreTest, AnMd5TheServerComputedIsTakenOnlyForTheVersionBeforeAndAfter) {
  ASSERT_TRUE(Put(*inner_, "f", "the old content").ok());
  auto server = std::make_shared<ServerMd5Store>(inner_, "new content, another size");
  ContentEtagStore store(server, db_, &metrics_, /*racy_ns=*/0);
  Result<ETag> etag = store.ContentEtag("f");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  // The first answer was of the content replaced meanwhile: asked again.
  EXPECT_EQ(*etag, Md5Tag("new content, another size"));
  EXPECT_EQ(server->calls, 2);
  EXPECT_EQ(metrics_.bytes_hashed.load(), 0u);  // nothing read here
}

}  // namespace
}  // namespace objfs
