#include "cache/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace objfs {
namespace {

constexpr size_t kMiB = 1 << 20;

TEST(BufferPoolTest, ADroppedBufferIsHandedOutAgain) {
  BufferPool pool(64 * kMiB);
  BufferPool::Buffer first = pool.Get(8 * kMiB);
  ASSERT_NE(first, nullptr);
  std::memset(first.get(), 0x5a, 8 * kMiB);  // all of it is usable
  std::byte* const address = first.get();
  first.reset();
  EXPECT_EQ(pool.idle_bytes(), 8 * kMiB);
  BufferPool::Buffer second = pool.Get(8 * kMiB);
  EXPECT_EQ(second.get(), address);
  EXPECT_EQ(pool.idle_bytes(), 0u);
}

TEST(BufferPoolTest, LargeBuffersStartOnAHugePage) {
  BufferPool pool(64 * kMiB);
  for (size_t size : {2 * kMiB, 3 * kMiB + 5, 8 * kMiB}) {
    BufferPool::Buffer buffer = pool.Get(size);
    ASSERT_NE(buffer, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.get()) % (2 * kMiB), 0u) << size;
  }
  EXPECT_EQ(BufferPool::CapacityFor(3 * kMiB + 5), 4 * kMiB);
  EXPECT_EQ(BufferPool::CapacityFor(kMiB + 1), kMiB + (64 << 10));
}

TEST(BufferPoolTest, SmallBuffersAreExactAndNotKept) {
  BufferPool pool(64 * kMiB);
  EXPECT_EQ(BufferPool::CapacityFor(4096), 4096u);
  BufferPool::Buffer small = pool.Get(4096);
  ASSERT_NE(small, nullptr);
  std::memset(small.get(), 1, 4096);
  small.reset();
  EXPECT_EQ(pool.idle_bytes(), 0u);
}

// An SFTP read buffer (four of OpenSSH's 255 KiB reads) is pooled and reused.
TEST(BufferPoolTest, ABufferOfFourMaxReadLengthsIsPooled) {
  BufferPool pool(64 * kMiB);
  constexpr size_t kSftpBuffer = 4 * 261120;
  BufferPool::Buffer first = pool.Get(kSftpBuffer);
  ASSERT_NE(first, nullptr);
  std::byte* data = first.get();
  first.reset();
  EXPECT_EQ(pool.idle_bytes(), BufferPool::CapacityFor(kSftpBuffer));
  BufferPool::Buffer again = pool.Get(kSftpBuffer);
  EXPECT_EQ(again.get(), data);
}

TEST(BufferPoolTest, ASmallerRequestTakesABufferAtMostHalfAsLargeAgain) {
  BufferPool pool(64 * kMiB);
  BufferPool::Buffer eight = pool.Get(8 * kMiB);
  std::byte* const address = eight.get();
  eight.reset();
  BufferPool::Buffer four = pool.Get(4 * kMiB);  // 8 MiB would waste half
  EXPECT_NE(four.get(), address);
  BufferPool::Buffer six = pool.Get(6 * kMiB);
  EXPECT_EQ(six.get(), address);
  six.reset();  // goes back as the 8 MiB buffer it is
  EXPECT_EQ(pool.idle_bytes(), 8 * kMiB);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsLimit) {
  BufferPool pool(10 * kMiB);
  BufferPool::Buffer a = pool.Get(8 * kMiB);
  BufferPool::Buffer b = pool.Get(8 * kMiB);
  a.reset();
  b.reset();  // would make 16 MiB idle: unmapped instead
  EXPECT_EQ(pool.idle_bytes(), 8 * kMiB);
  pool.SetKeepBytes(4 * kMiB);
  EXPECT_EQ(pool.idle_bytes(), 0u);
  BufferPool::Buffer c = pool.Get(2 * kMiB);
  c.reset();
  EXPECT_EQ(pool.idle_bytes(), 2 * kMiB);
}

}  // namespace
}  // namespace objfs
