#include "cache/read_budget.h"

#include <cassert>

namespace objfs {

bool ReadBudget::TryAcquire(uint64_t n) {
  uint64_t current = in_use_.load(std::memory_order_relaxed);
  do {
    if (current > limit_ || n > limit_ - current) return false;
  } while (!in_use_.compare_exchange_weak(current, current + n, std::memory_order_acq_rel,
                                          std::memory_order_relaxed));
  return true;
}

void ReadBudget::ForceAcquire(uint64_t n) { in_use_.fetch_add(n, std::memory_order_acq_rel); }

void ReadBudget::Release(uint64_t n) {
  [[maybe_unused]] uint64_t before = in_use_.fetch_sub(n, std::memory_order_acq_rel);
  assert(before >= n && "ReadBudget released more than was acquired");
}

}  // namespace objfs
