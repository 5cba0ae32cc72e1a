#include "backend/retry.h"

#include <algorithm>
#include <thread>

namespace objfs {

RetryBackoff::RetryBackoff(RetryPolicy policy) : policy_(policy) {}

RetryBackoff::RetryBackoff(RetryPolicy policy, uint64_t seed) : policy_(policy), seed_(seed) {}

std::chrono::milliseconds RetryBackoff::Ceiling(const RetryPolicy& policy, int retry) {
  const int64_t base = std::max<int64_t>(policy.base_delay.count(), 0);
  const int64_t max = std::max<int64_t>(policy.max_delay.count(), 0);
  if (base == 0) return std::chrono::milliseconds(0);
  int64_t ceiling = base;
  // Doubling stops as soon as the cap is reached, so no shift can overflow.
  for (int i = 0; i < retry && ceiling < max; ++i) ceiling *= 2;
  return std::chrono::milliseconds(std::min(ceiling, max));
}

std::chrono::milliseconds RetryBackoff::Delay(int retry) {
  const int64_t ceiling = Ceiling(policy_, retry).count();
  if (!random_) random_.emplace(seed_ ? *seed_ : std::random_device{}());
  std::uniform_int_distribution<int64_t> uniform(0, ceiling);
  return std::chrono::milliseconds(uniform(*random_));
}

bool IsRetryable(const Status& status) { return status.code() == StatusCode::kTransient; }

SleepFn RealSleep() {
  return [](std::chrono::milliseconds delay) { std::this_thread::sleep_for(delay); };
}

}  // namespace objfs
