#include "cache/extent_set.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace objfs {
namespace {

using Range = ExtentSet::Range;

TEST(ExtentSetTest, AddMergesOverlappingAndTouchingRanges) {
  ExtentSet set;
  set.Add(10, 10);  // [10,20)
  set.Add(30, 5);   // [30,35)
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{10, 20}, {30, 35}}));
  set.Add(20, 10);  // touches both
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{10, 35}}));
  set.Add(0, 0);  // nothing
  set.Add(5, 7);  // overlaps the start
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{5, 35}}));
  set.Add(12, 3);  // inside
  EXPECT_EQ(set.range_count(), 1u);
  EXPECT_EQ(set.TotalBytes(), 30u);
}

TEST(ExtentSetTest, RemoveSplitsAndTrims) {
  ExtentSet set;
  set.Add(0, 100);
  set.Remove(40, 10);
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{0, 40}, {50, 100}}));
  set.Remove(30, 30);
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{0, 30}, {60, 100}}));
  set.TrimFrom(70);
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{0, 30}, {60, 70}}));
  set.TrimFrom(60);
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{0, 30}}));
  set.TrimFrom(0);
  EXPECT_TRUE(set.empty());
}

TEST(ExtentSetTest, CoversAndMissing) {
  ExtentSet set;
  set.Add(10, 10);  // [10,20)
  set.Add(30, 10);  // [30,40)
  EXPECT_TRUE(set.Covers(10, 10));
  EXPECT_TRUE(set.Covers(12, 3));
  EXPECT_TRUE(set.Covers(50, 0));
  EXPECT_FALSE(set.Covers(9, 2));
  EXPECT_FALSE(set.Covers(15, 16));
  EXPECT_EQ(set.Missing(0, 50), (std::vector<Range>{{0, 10}, {20, 30}, {40, 50}}));
  EXPECT_EQ(set.Missing(15, 20), (std::vector<Range>{{20, 30}}));
  EXPECT_TRUE(set.Missing(31, 5).empty());
  EXPECT_EQ(set.Missing(45, 5), (std::vector<Range>{{45, 50}}));
}

TEST(ExtentSetTest, RangesNearTheLargestOffsetDoNotWrap) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  ExtentSet set;
  set.Add(kMax - 10, 100);
  EXPECT_EQ(set.Ranges(), (std::vector<Range>{{kMax - 10, kMax}}));
  EXPECT_TRUE(set.Covers(kMax - 5, 100));
  set.TrimFrom(kMax - 5);
  EXPECT_EQ(set.TotalBytes(), 5u);
}

// Against a byte map: every operation keeps the set equal to the bytes it stands for.
TEST(ExtentSetTest, MatchesAByteModel) {
  std::mt19937 rng(7);
  constexpr uint64_t kSpan = 200;
  ExtentSet set;
  std::vector<bool> model(kSpan, false);
  for (int step = 0; step < 5000; ++step) {
    const uint64_t off = rng() % kSpan;
    const uint64_t len = rng() % (kSpan - off + 1);
    switch (rng() % 3) {
      case 0:
        set.Add(off, len);
        for (uint64_t i = off; i < off + len; ++i) model[i] = true;
        break;
      case 1:
        set.Remove(off, len);
        for (uint64_t i = off; i < off + len; ++i) model[i] = false;
        break;
      default:
        set.TrimFrom(off);
        for (uint64_t i = off; i < kSpan; ++i) model[i] = false;
    }
    // Ranges: merged (never touching), and exactly the model's bytes.
    std::vector<bool> seen(kSpan, false);
    uint64_t last_end = 0;
    bool first = true;
    for (const Range& r : set.Ranges()) {
      ASSERT_LT(r.start, r.end);
      if (!first) {
        ASSERT_GT(r.start, last_end);
      }
      first = false;
      last_end = r.end;
      for (uint64_t i = r.start; i < r.end; ++i) seen[i] = true;
    }
    ASSERT_EQ(seen, model) << "step " << step;
    const uint64_t q_off = rng() % kSpan;
    const uint64_t q_len = rng() % (kSpan - q_off + 1);
    bool all = true;
    std::vector<bool> missing(kSpan, false);
    for (uint64_t i = q_off; i < q_off + q_len; ++i) all = all && model[i];
    for (const Range& r : set.Missing(q_off, q_len)) {
      for (uint64_t i = r.start; i < r.end; ++i) missing[i] = true;
    }
    for (uint64_t i = 0; i < kSpan; ++i) {
      ASSERT_EQ(missing[i], i >= q_off && i < q_off + q_len && !model[i]) << "step " << step;
    }
    ASSERT_EQ(set.Covers(q_off, q_len), all);
  }
}

TEST(ExtentSetTest, OverlapsFindsAnyByteOfARange) {
  ExtentSet touched;
  EXPECT_FALSE(touched.Overlaps(0, UINT64_MAX));
  touched.Add(10, 5);  // [10, 15)
  touched.Add(20, 5);  // [20, 25)
  EXPECT_FALSE(touched.Overlaps(0, 10));
  EXPECT_TRUE(touched.Overlaps(0, 11));
  EXPECT_FALSE(touched.Overlaps(15, 5));
  EXPECT_TRUE(touched.Overlaps(14, 1));
  EXPECT_TRUE(touched.Overlaps(24, 100));
  EXPECT_FALSE(touched.Overlaps(25, 100));
  touched.Add(15, 5);  // joins both
  EXPECT_TRUE(touched.Overlaps(17, 1));
  touched.Add(100, UINT64_MAX);  // to the end
  EXPECT_TRUE(touched.Overlaps(UINT64_MAX - 1, 1));
  EXPECT_FALSE(touched.Overlaps(30, 70));
  touched.Clear();
  EXPECT_TRUE(touched.empty());
}

}  // namespace
}  // namespace objfs
