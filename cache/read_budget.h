// The one byte budget for prefetched data, shared by every open file of a mount.
//
// Read-ahead makes sequential reads fast, but each open file could otherwise hold up to
// max_readahead bytes in memory; with many open files that is unbounded. Every prefetched chunk
// is charged here first, and a prefetch that does not fit is simply not made.
//
// The chunks a read needs right now are always fetched, budget or not (ForceAcquire): a read must
// make progress. So in_use() may exceed limit() by the chunks covering one request (one
// read_buffer for a request within one buffer) per concurrent reader; nothing else may exceed it.
#pragma once

#include <atomic>
#include <cstdint>

namespace objfs {

class ReadBudget {
 public:
  explicit ReadBudget(uint64_t limit) : limit_(limit) {}
  ReadBudget(const ReadBudget&) = delete;
  ReadBudget& operator=(const ReadBudget&) = delete;

  // Charges n bytes if that keeps in_use() <= limit(); otherwise charges nothing and returns
  // false. Never blocks.
  bool TryAcquire(uint64_t n);
  // Charges n bytes even beyond the limit (the data a read cannot do without).
  void ForceAcquire(uint64_t n);
  // Returns n bytes charged by TryAcquire or ForceAcquire.
  void Release(uint64_t n);

  uint64_t in_use() const { return in_use_.load(std::memory_order_acquire); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> in_use_{0};
};

}  // namespace objfs
