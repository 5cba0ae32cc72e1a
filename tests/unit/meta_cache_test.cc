#include "cache/meta_cache.h"

#include <memory>

#include "gtest/gtest.h"

namespace objfs {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class MetaCacheTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  MetaCache cache_{clock_, seconds(1), milliseconds(500)};
};

TEST_F(MetaCacheTest, PositiveEntryExpiresAfterTtl) {
  MetaRecord rec;
  rec.size = 42;
  rec.complete = true;
  cache_.Put("a", rec);
  auto hit = cache_.Get("a");
  ASSERT_EQ(hit.state, MetaCache::State::kPositive);
  EXPECT_EQ(hit.record.size, 42u);
  EXPECT_TRUE(hit.record.complete);
  clock_->Advance(milliseconds(999));
  EXPECT_EQ(cache_.Get("a").state, MetaCache::State::kPositive);
  clock_->Advance(milliseconds(1));
  EXPECT_EQ(cache_.Get("a").state, MetaCache::State::kMiss);
}

TEST_F(MetaCacheTest, NegativeEntryUsesItsOwnTtl) {
  cache_.PutNegative("gone");
  EXPECT_EQ(cache_.Get("gone").state, MetaCache::State::kNegative);
  clock_->Advance(milliseconds(500));
  EXPECT_EQ(cache_.Get("gone").state, MetaCache::State::kMiss);
}

TEST_F(MetaCacheTest, PutReplacesNegative) {
  cache_.PutNegative("k");
  cache_.Put("k", MetaRecord());
  EXPECT_EQ(cache_.Get("k").state, MetaCache::State::kPositive);
}

TEST_F(MetaCacheTest, InvalidateTreeDropsKeyAndDescendantsOnly) {
  cache_.Put("d", MetaRecord());
  cache_.Put("d/a", MetaRecord());
  cache_.Put("d/b/c", MetaRecord());
  cache_.Put("dx", MetaRecord());
  cache_.InvalidateTree("d");
  EXPECT_EQ(cache_.Get("d").state, MetaCache::State::kMiss);
  EXPECT_EQ(cache_.Get("d/a").state, MetaCache::State::kMiss);
  EXPECT_EQ(cache_.Get("d/b/c").state, MetaCache::State::kMiss);
  EXPECT_EQ(cache_.Get("dx").state, MetaCache::State::kPositive);
  cache_.Invalidate("dx");
  EXPECT_EQ(cache_.size(), 0u);
}

TEST(MetaCacheZeroTtlTest, CachesNothing) {
  auto clock = std::make_shared<FakeClock>();
  MetaCache cache(clock, seconds(0), seconds(0));
  cache.Put("a", MetaRecord());
  cache.PutNegative("b");
  EXPECT_EQ(cache.Get("a").state, MetaCache::State::kMiss);
  EXPECT_EQ(cache.Get("b").state, MetaCache::State::kMiss);
}

}  // namespace
}  // namespace objfs
