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

// A listing of a huge directory puts one entry per name; those expire after the TTL and must
// not pile up until some fixed, large count.
TEST_F(MetaCacheTest, ExpiredEntriesDoNotAccumulate) {
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 5000; ++i) {
      cache_.Put("d/r" + std::to_string(round) + "-" + std::to_string(i), MetaRecord());
    }
    clock_->Advance(seconds(2));
  }
  EXPECT_LE(cache_.size(), 2u * 5000u);
  cache_.Put("fresh", MetaRecord());
  EXPECT_EQ(cache_.Get("fresh").state, MetaCache::State::kPositive);
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

// attr_timeout=0 keeps no positive entry, but a Put still drops the negative one a lookup made
// before the key came to be: `mkdir d; stat d` must not say "no such file" for negative_timeout.
TEST_F(MetaCacheTest, PutWithoutAttributeCachingStillDropsANegative) {
  MetaCache uncached{clock_, seconds(0), milliseconds(500)};
  uncached.PutNegative("d");
  ASSERT_EQ(uncached.Get("d").state, MetaCache::State::kNegative);
  uncached.Put("d", MetaRecord());
  EXPECT_EQ(uncached.Get("d").state, MetaCache::State::kMiss);
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

TEST_F(MetaCacheTest, ListingAnswersAbsentNamesUntilTheNegativeTtl) {
  EXPECT_EQ(cache_.ListState("d/x"), MetaCache::Listed::kUnknown);
  cache_.PutListing("d", {"a", "sub"}, true, cache_.ListingTicket());
  EXPECT_EQ(cache_.ListState("d/x"), MetaCache::Listed::kAbsent);
  EXPECT_EQ(cache_.ListState("d/a"), MetaCache::Listed::kMaybePresent);
  EXPECT_EQ(cache_.ListState("d/sub"), MetaCache::Listed::kMaybePresent);
  EXPECT_EQ(cache_.ListState("x"), MetaCache::Listed::kUnknown);  // another directory
  EXPECT_EQ(cache_.ListState("d/sub/x"), MetaCache::Listed::kUnknown);
  clock_->Advance(milliseconds(500));
  EXPECT_EQ(cache_.ListState("d/x"), MetaCache::Listed::kUnknown);
}

TEST_F(MetaCacheTest, KeysChangedAfterAListingAreNeverClaimedAbsent) {
  cache_.PutListing("", {"a"}, true, cache_.ListingTicket());
  cache_.PutListing("d", {}, true, cache_.ListingTicket());
  cache_.Put("b", MetaRecord());  // uploaded here
  cache_.Invalidate("c");         // created or changed here
  cache_.PutNegative("e");        // a miss adds nothing
  EXPECT_EQ(cache_.ListState("b"), MetaCache::Listed::kMaybePresent);
  EXPECT_EQ(cache_.ListState("c"), MetaCache::Listed::kMaybePresent);
  EXPECT_EQ(cache_.ListState("e"), MetaCache::Listed::kAbsent);
  // A tree invalidation drops the listings under it and marks its root name.
  cache_.InvalidateTree("d");
  EXPECT_EQ(cache_.ListState("d/x"), MetaCache::Listed::kUnknown);
  EXPECT_EQ(cache_.ListState("d"), MetaCache::Listed::kMaybePresent);
  cache_.Clear();
  EXPECT_EQ(cache_.ListState("e"), MetaCache::Listed::kUnknown);
}

TEST_F(MetaCacheTest, AListingDuringWhichTheDirectoryChangedIsNotKept) {
  uint64_t ticket = cache_.ListingTicket();
  cache_.Put("d/new", MetaRecord());  // created while the LIST was running
  cache_.PutListing("d", {"old"}, true, ticket);
  EXPECT_EQ(cache_.ListState("d/other"), MetaCache::Listed::kUnknown);
  // A change elsewhere does not matter.
  ticket = cache_.ListingTicket();
  cache_.Put("e/new", MetaRecord());
  cache_.PutListing("d", {"old", "new"}, true, ticket);
  EXPECT_EQ(cache_.ListState("d/other"), MetaCache::Listed::kAbsent);
}

TEST_F(MetaCacheTest, KeysPutWithoutAnAttributeTtlStillJoinTheListing) {
  MetaCache uncached(clock_, seconds(0), seconds(5));
  uncached.PutListing("", {}, true, uncached.ListingTicket());
  uncached.Put("made-here", MetaRecord());
  EXPECT_EQ(uncached.ListState("made-here"), MetaCache::Listed::kMaybePresent);
}

TEST_F(MetaCacheTest, AnIncompleteListingClaimsNothing) {
  cache_.PutListing("big", {"a"}, false, cache_.ListingTicket());
  EXPECT_EQ(cache_.ListState("big/zzz"), MetaCache::Listed::kTooLarge);
}

}  // namespace
}  // namespace objfs
