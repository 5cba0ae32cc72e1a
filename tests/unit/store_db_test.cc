#include "cache/store_db.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace objfs {
namespace {

constexpr size_t kLogHeaderBytes = 16;
constexpr size_t kFrameLengthBytes = 4;

ContentETagRecord ETagRecord(int i, uint64_t size = 100) {
  ContentETagRecord r;
  r.path = "/data/file-" + std::to_string(i);
  r.size = size;
  r.mtime_ns = 1700000000000000000 + i;
  for (size_t b = 0; b < r.md5.size(); ++b) r.md5[b] = static_cast<uint8_t>(i + b);
  return r;
}

size_t FrameSize(const ContentETagRecord& r) {
  return kFrameLengthBytes + ContentETagCodec::EncodedSize(r);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

class StoreDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-store-db-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  StoreDb OpenDb(StoreDbOptions options = {}) {
    auto db = StoreDb::Open(dir_ + "/db", options);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return std::move(db).value();
  }
  std::string EtagLog() const { return dir_ + "/db/content_etags.log"; }

  static std::optional<ContentETagRecord> GetETag(const StoreDb& db, std::string_view path) {
    auto r = db.Get<ContentETagRecord>(path);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : std::nullopt;
  }

  std::string dir_;
};

TEST_F(StoreDbTest, PutsGetsAndRemovesEachRecordType) {
  StoreDb db = OpenDb();
  EXPECT_EQ(GetETag(db, "/data/file-1"), std::nullopt);

  ASSERT_TRUE(db.Put(ETagRecord(1)).ok());
  EXPECT_EQ(GetETag(db, "/data/file-1"), ETagRecord(1));
  ASSERT_TRUE(db.Put(ETagRecord(1, 200)).ok());  // replaces
  EXPECT_EQ(GetETag(db, "/data/file-1"), ETagRecord(1, 200));

  ObjectMetaRecord meta{"k/obj",
                        5,
                        6,
                        7,
                        {{"mode", "33152"}, {"uid", "1"}},
                        ETag::Parse("\"0123456789ABCDEF0123456789abcdef\"")};
  ASSERT_TRUE(db.Put(meta).ok());
  auto got_meta = db.Get<ObjectMetaRecord>("k/obj");
  ASSERT_TRUE(got_meta.ok());
  EXPECT_EQ(*got_meta, meta);
  // The key spaces of the record types are separate.
  EXPECT_EQ(*db.Get<ContentETagRecord>("k/obj"), std::nullopt);

  ContentETagRecord content{"k/obj", 9, 10, {}};
  ASSERT_TRUE(db.Put(content).ok());
  EXPECT_EQ(*db.Get<ContentETagRecord>("k/obj"), content);

  ASSERT_TRUE(db.Remove<ObjectMetaRecord>("k/obj").ok());
  EXPECT_EQ(*db.Get<ObjectMetaRecord>("k/obj"), std::nullopt);
  EXPECT_EQ(*db.Get<ContentETagRecord>("k/obj"), content);
  EXPECT_TRUE(db.Remove<ObjectMetaRecord>("never/there").ok());
}

TEST_F(StoreDbTest, ReopenSeesPutsOverwritesAndRemoves) {
  ObjectMetaRecord meta{"up", 1, 2, 3, {{"mode", "33188"}}, ETag::Parse("opaque")};
  {
    StoreDb db = OpenDb({.sync_writes = true});
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(db.Put(ETagRecord(i)).ok());
    ASSERT_TRUE(db.Put(ETagRecord(3, 333)).ok());
    ASSERT_TRUE(db.Remove<ContentETagRecord>("/data/file-5").ok());
    ASSERT_TRUE(db.Put(meta).ok());
  }
  StoreDb db = OpenDb();
  EXPECT_EQ(db.Table<ContentETagRecord>().size(), 9u);
  for (int i = 0; i < 10; ++i) {
    std::optional<ContentETagRecord> want;
    if (i == 3) {
      want = ETagRecord(3, 333);
    } else if (i != 5) {
      want = ETagRecord(i);
    }
    EXPECT_EQ(GetETag(db, "/data/file-" + std::to_string(i)), want) << i;
  }
  EXPECT_EQ(*db.Get<ObjectMetaRecord>("up"), meta);
  EXPECT_EQ(db.Table<ContentETagRecord>().stats().dropped_bytes, 0u);
}

TEST_F(StoreDbTest, AnUnchangedRecordIsNotRewritten) {
  StoreDb db = OpenDb();
  ASSERT_TRUE(db.Put(ETagRecord(1)).ok());
  const uint64_t log_bytes = db.Table<ContentETagRecord>().stats().log_bytes;
  ASSERT_TRUE(db.Put(ETagRecord(1)).ok());
  EXPECT_EQ(db.Table<ContentETagRecord>().stats().log_bytes, log_bytes);
}

TEST_F(StoreDbTest, ATornTailDropsOnlyTheLastRecord) {
  const size_t last_frame = FrameSize(ETagRecord(2));
  for (size_t cut = 1; cut < last_frame; ++cut) {
    {
      std::filesystem::remove_all(dir_ + "/db");
      StoreDb db = OpenDb();
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(db.Put(ETagRecord(i)).ok());
    }
    const std::string log = ReadFile(EtagLog());
    ASSERT_EQ(::truncate(EtagLog().c_str(), static_cast<off_t>(log.size() - cut)), 0);
    {
      StoreDb db = OpenDb();
      EXPECT_EQ(GetETag(db, "/data/file-0"), ETagRecord(0)) << cut;
      EXPECT_EQ(GetETag(db, "/data/file-1"), ETagRecord(1)) << cut;
      EXPECT_EQ(GetETag(db, "/data/file-2"), std::nullopt) << cut;
      EXPECT_EQ(db.Table<ContentETagRecord>().stats().dropped_bytes, last_frame - cut);
      EXPECT_EQ(ReadFile(EtagLog()).size(), log.size() - last_frame) << cut;
      // The torn bytes are cut off, so a new record follows the last good one.
      ASSERT_TRUE(db.Put(ETagRecord(7)).ok());
    }
    StoreDb db = OpenDb();
    EXPECT_EQ(GetETag(db, "/data/file-7"), ETagRecord(7)) << cut;
    EXPECT_EQ(db.Table<ContentETagRecord>().size(), 3u) << cut;
    EXPECT_EQ(db.Table<ContentETagRecord>().stats().dropped_bytes, 0u) << cut;
  }
}

TEST_F(StoreDbTest, ACorruptMiddleRecordIsSkippedAndTheOthersSurvive) {
  {
    StoreDb db = OpenDb();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(db.Put(ETagRecord(i)).ok());
  }
  const std::string log = ReadFile(EtagLog());
  const size_t middle_at = kLogHeaderBytes + FrameSize(ETagRecord(0));
  const size_t middle_size = FrameSize(ETagRecord(1));
  // Every byte of the middle frame, its length field included.
  for (size_t i = 0; i < middle_size; ++i) {
    std::string damaged = log;
    damaged[middle_at + i] ^= 0x5a;
    WriteFile(EtagLog(), damaged);
    StoreDb db = OpenDb();
    EXPECT_EQ(GetETag(db, "/data/file-0"), ETagRecord(0)) << i;
    EXPECT_EQ(GetETag(db, "/data/file-1"), std::nullopt) << i;
    EXPECT_EQ(GetETag(db, "/data/file-2"), ETagRecord(2)) << i;
    EXPECT_EQ(db.Table<ContentETagRecord>().stats().dropped_bytes, middle_size) << i;
  }
}

TEST_F(StoreDbTest, AForeignOrDamagedHeaderStartsAnEmptyLog) {
  {
    StoreDb db = OpenDb();
    ASSERT_TRUE(db.Put(ETagRecord(1)).ok());
  }
  std::string log = ReadFile(EtagLog());
  log[0] = 'X';
  WriteFile(EtagLog(), log);
  {
    StoreDb db = OpenDb();
    EXPECT_EQ(db.Table<ContentETagRecord>().size(), 0u);
    ASSERT_TRUE(db.Put(ETagRecord(2)).ok());
  }
  StoreDb db = OpenDb();
  EXPECT_EQ(GetETag(db, "/data/file-2"), ETagRecord(2));
  EXPECT_EQ(GetETag(db, "/data/file-1"), std::nullopt);
}

TEST_F(StoreDbTest, CompactionKeepsLiveRecordsAndBoundsTheLog) {
  const StoreDbOptions options{.sync_writes = false, .compaction_min_bytes = 4096};
  {
    StoreDb db = OpenDb(options);
    for (int round = 0; round < 50; ++round) {
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(db.Put(ETagRecord(i, round)).ok());
      ASSERT_TRUE(db.Remove<ContentETagRecord>("/data/file-19").ok());
    }
    auto stats = db.Table<ContentETagRecord>().stats();
    EXPECT_GT(stats.compactions, 0u);
    EXPECT_EQ(stats.records, 19u);
    EXPECT_LE(stats.log_bytes, 2 * (kLogHeaderBytes + stats.live_bytes) + 4096);
    EXPECT_EQ(ReadFile(EtagLog()).size(), stats.log_bytes);
  }
  StoreDb db = OpenDb(options);
  EXPECT_EQ(db.Table<ContentETagRecord>().size(), 19u);
  for (int i = 0; i < 19; ++i) {
    EXPECT_EQ(GetETag(db, "/data/file-" + std::to_string(i)), ETagRecord(i, 49)) << i;
  }
  EXPECT_EQ(GetETag(db, "/data/file-19"), std::nullopt);
  EXPECT_EQ(db.Table<ContentETagRecord>().stats().dropped_bytes, 0u);
}

TEST_F(StoreDbTest, ExplicitCompactionLeavesExactlyTheLiveFrames) {
  StoreDb db = OpenDb();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(db.Put(ETagRecord(i)).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(db.Put(ETagRecord(i, 7)).ok());
  ASSERT_TRUE(db.Remove<ContentETagRecord>("/data/file-0").ok());
  ASSERT_TRUE(db.Table<ContentETagRecord>().Compact().ok());
  size_t expected = kLogHeaderBytes;
  for (int i = 1; i < 5; ++i) expected += FrameSize(ETagRecord(i, 7));
  EXPECT_EQ(ReadFile(EtagLog()).size(), expected);
  EXPECT_FALSE(std::filesystem::exists(EtagLog() + ".tmp"));
  // Writes after a compaction go to the new log.
  ASSERT_TRUE(db.Put(ETagRecord(9)).ok());
  StoreDb moved = std::move(db);
  EXPECT_EQ(GetETag(moved, "/data/file-9"), ETagRecord(9));
}

TEST_F(StoreDbTest, OpenRemovesTheCopyOfAnUnfinishedCompaction) {
  {
    StoreDb db = OpenDb();
    ASSERT_TRUE(db.Put(ETagRecord(1)).ok());
  }
  WriteFile(EtagLog() + ".tmp", "half a compaction");
  StoreDb db = OpenDb();
  EXPECT_FALSE(std::filesystem::exists(EtagLog() + ".tmp"));
  EXPECT_EQ(GetETag(db, "/data/file-1"), ETagRecord(1));
}

TEST_F(StoreDbTest, OneProcessAtATime) {
  {
    StoreDb db = OpenDb();
    auto second = StoreDb::Open(dir_ + "/db");
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("in use"), std::string::npos);
  }
  EXPECT_TRUE(StoreDb::Open(dir_ + "/db").ok());
}

TEST_F(StoreDbTest, RejectsARecordTooLargeToStore) {
  StoreDb db = OpenDb();
  ContentETagRecord huge = ETagRecord(1);
  huge.path.assign(2 << 20, 'x');
  EXPECT_EQ(db.Put(huge).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(db.Table<ContentETagRecord>().size(), 0u);
}

}  // namespace
}  // namespace objfs
