#include "backend/retry.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
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

namespace {
// Nanoseconds of DeadlineClock's epoch; 0: no cap.
std::atomic<int64_t> g_deadline_cap{0};
}  // namespace

void CapCallDeadlines(DeadlineClock::time_point deadline) {
  const int64_t wanted = std::max<int64_t>(deadline.time_since_epoch().count(), 1);
  int64_t current = g_deadline_cap.load();
  while ((current == 0 || wanted < current) &&
         !g_deadline_cap.compare_exchange_weak(current, wanted)) {
  }
}

std::optional<DeadlineClock::time_point> CallDeadline(const RetryPolicy& policy,
                                                      DeadlineClock::time_point start) {
  std::optional<DeadlineClock::time_point> deadline;
  if (policy.budget.count() > 0) deadline = start + policy.budget;
  const int64_t cap = g_deadline_cap.load();
  if (cap != 0) {
    const DeadlineClock::time_point capped{DeadlineClock::duration(cap)};
    if (!deadline || capped < *deadline) deadline = capped;
  }
  return deadline;
}

std::optional<DeadlineClock::time_point> CallDeadlineCap() {
  const int64_t cap = g_deadline_cap.load();
  if (cap == 0) return std::nullopt;
  return DeadlineClock::time_point{DeadlineClock::duration(cap)};
}

std::chrono::milliseconds ServerWorkSilence(std::chrono::milliseconds request_timeout,
                                            uint64_t bytes) {
  // Whole seconds, rounded up: 5 GiB at 10 MiB/s is 512 s.
  const auto work = std::chrono::seconds((bytes + kServerWorkMinRate - 1) / kServerWorkMinRate);
  return std::max({request_timeout, std::chrono::milliseconds(kServerWorkMinSilence),
                   std::chrono::milliseconds(work)});
}

Status TimedOutAfter(std::chrono::nanoseconds elapsed, int attempts, const Status& last) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", std::chrono::duration<double>(elapsed).count());
  return TimedOutError("gave up after " + std::string(seconds) + " s and " +
                       std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") +
                       " (operation_timeout); last error: " + last.ToString());
}

SleepFn RealSleep() {
  return [](std::chrono::milliseconds delay) { std::this_thread::sleep_for(delay); };
}

}  // namespace objfs
