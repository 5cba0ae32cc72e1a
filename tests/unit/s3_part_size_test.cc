// The part size of a multipart upload: the configured one until a file would need more than
// S3's 10,000 parts, then grown with the file as the AWS CLI does.

#include <gtest/gtest.h>

#include "backend/s3/s3_store.h"

namespace objfs::s3 {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

uint64_t Parts(uint64_t size, uint64_t part_size) { return (size + part_size - 1) / part_size; }

TEST(ChoosePartSizeTest, KeepsTheConfiguredSizeWhileTenThousandPartsSuffice) {
  EXPECT_EQ(ChoosePartSize(100 * kMiB, 16 * kMiB), 16 * kMiB);
  EXPECT_EQ(ChoosePartSize(10000 * 16 * kMiB, 16 * kMiB), 16 * kMiB);  // exactly 10,000 parts
  EXPECT_EQ(ChoosePartSize(0, 5 * kMiB), 5 * kMiB);
}

TEST(ChoosePartSizeTest, GrowsInWholeMiBToStayWithinTenThousandParts) {
  // One byte more than 10,000 parts of 16 MiB hold: the next whole MiB.
  EXPECT_EQ(ChoosePartSize(10000 * 16 * kMiB + 1, 16 * kMiB), 17 * kMiB);
  // 200 GiB: 20.48 MiB per part at least, so 21 MiB.
  const uint64_t size = 200 * kGiB;
  const uint64_t part = ChoosePartSize(size, 16 * kMiB);
  EXPECT_EQ(part, 21 * kMiB);
  EXPECT_LE(Parts(size, part), 10000u);
  EXPECT_GT(Parts(size, part - kMiB), 10000u);  // the smallest such size
  // 5 TiB, S3's largest object: 525 MiB parts, 9,987 of them.
  const uint64_t largest = kMaxObjectSize;
  EXPECT_EQ(ChoosePartSize(largest, 16 * kMiB), 525 * kMiB);
  EXPECT_LE(Parts(largest, ChoosePartSize(largest, 16 * kMiB)), 10000u);
  // A configured size above what is needed stays.
  EXPECT_EQ(ChoosePartSize(200 * kGiB, 64 * kMiB), 64 * kMiB);
}

TEST(ChoosePartSizeTest, EveryFileUpToFiveTiBFitsInTenThousandParts) {
  for (uint64_t size = 150 * kGiB; size <= kMaxObjectSize; size += 97 * kGiB + 12345) {
    SCOPED_TRACE(size);
    const uint64_t part = ChoosePartSize(size, 16 * kMiB);
    EXPECT_EQ(part % kMiB, 0u);
    EXPECT_GE(part, kMinPartSize);
    EXPECT_LE(part, kMaxPartSize);
    EXPECT_LE(Parts(size, part), static_cast<uint64_t>(kMaxParts));
  }
}

}  // namespace
}  // namespace objfs::s3
