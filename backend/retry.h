// When and how long to wait before repeating a request that failed for a passing reason.
//
// Object stores throttle (503 SlowDown), connections reset and servers restart; a Transient
// Status says "this may work if asked again". Retrying right away makes a busy server busier,
// so attempts are spaced by exponential back-off with full jitter: the wait before retry n is
// uniform in [0, min(max_delay, base_delay * 2^n)], which spreads many clients' retries apart.
// The sleep is a parameter so that tests record the delays instead of waiting them out.
//
// A call may also have a deadline (operation_timeout): retries stop when it passes, and the
// call then fails with TimedOut, which names how long it tried and the last error. At unmount
// every call is additionally capped by the process-wide shutdown deadline, so that no request
// to a server that stopped answering keeps objfs alive past its budget.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <type_traits>
#include <utility>

#include "backend/status.h"

namespace objfs {

struct RetryPolicy {
  int max_attempts = 6;  // calls in all, the first included; values below 1 mean 1
  std::chrono::milliseconds base_delay{50};
  std::chrono::milliseconds max_delay{5000};
  // All attempts of one call together, waits included (operation_timeout); 0: no limit.
  std::chrono::milliseconds budget{0};
};

using DeadlineClock = std::chrono::steady_clock;

// From now on every call's deadline is at most `deadline` (unmount: what is left to do gets the
// budget once, not once per call). Only ever moves earlier.
void CapCallDeadlines(DeadlineClock::time_point deadline);

// The deadline of a call of `policy` started at `start`: start + budget, at most the cap set
// by CapCallDeadlines; nullopt when neither applies.
std::optional<DeadlineClock::time_point> CallDeadline(const RetryPolicy& policy,
                                                      DeadlineClock::time_point start);

// The deadline CapCallDeadlines set (unmount's), if any.
std::optional<DeadlineClock::time_point> CallDeadlineCap();

// How long a request may go without receiving a byte while the server works on it: a
// server-side copy of `bytes` (CopyObject, UploadPartCopy, SFTP copy-data), the completion of a
// multipart upload of `bytes`, an fsync of a file of `bytes`. Such a request is silent by nature
// until the work is done (minutes for gigabytes), so it is not held to request_timeout: it gets
// at least kServerWorkMinSilence, and the time the work takes at kServerWorkMinRate, so that a
// 5 GiB part copy may be silent for 512 s. Still bounded: a server that never answers is cut.
inline constexpr std::chrono::seconds kServerWorkMinSilence{300};
inline constexpr uint64_t kServerWorkMinRate = 10ull << 20;  // bytes per second
std::chrono::milliseconds ServerWorkSilence(std::chrono::milliseconds request_timeout,
                                            uint64_t bytes);

// The TimedOut Status of a call that tried `attempts` times for `elapsed` and last failed with
// `last`: "gave up after 5.0 s and 3 attempts (operation_timeout); last error: ...".
Status TimedOutAfter(std::chrono::nanoseconds elapsed, int attempts, const Status& last);

// The random waits of one retrying caller. Not thread-safe: each caller holds its own.
class RetryBackoff {
 public:
  // Seeded from std::random_device, at the first Delay(): most calls never retry, and each
  // request has a RetryBackoff of its own.
  explicit RetryBackoff(RetryPolicy policy);
  RetryBackoff(RetryPolicy policy, uint64_t seed);

  // The upper bound of the wait before retry `retry` (0 for the first retry):
  // min(max_delay, base_delay * 2^retry), never negative.
  static std::chrono::milliseconds Ceiling(const RetryPolicy& policy, int retry);

  // A wait uniform in [0, Ceiling(policy, retry)].
  std::chrono::milliseconds Delay(int retry);

  const RetryPolicy& policy() const { return policy_; }

 private:
  RetryPolicy policy_;
  std::optional<uint64_t> seed_;  // unset: from std::random_device when first needed
  std::optional<std::mt19937_64> random_;
};

// True when repeating the same request may succeed: the code is Transient.
bool IsRetryable(const Status& status);

// Waits for the given time; production passes one that calls std::this_thread::sleep_for.
using SleepFn = std::function<void(std::chrono::milliseconds)>;

// Told about each retry before its wait: the retry's number (0 for the first), the error that
// caused it and the wait about to happen. Callers count retries or log them with it.
using OnRetryFn = std::function<void(int retry, const Status& error, std::chrono::milliseconds)>;

// A SleepFn that really sleeps.
SleepFn RealSleep();

namespace retry_internal {

inline Status StatusOf(const Status& status) { return status; }
template <typename T>
Status StatusOf(const Result<T>& result) {
  return result.status();
}

}  // namespace retry_internal

// Calls attempt() (which returns a Status or a Result<T>) until it succeeds, fails with an
// error that is not retryable, or policy.max_attempts calls have been made; between calls it
// sleeps through `sleep` for backoff.Delay(retry). Returns the last call's outcome. With a
// `deadline`, a retryable failure at or after it ends the call with TimedOutAfter(...), and no
// wait goes past it.
template <typename F>
auto RetryCall(RetryBackoff& backoff, F&& attempt, const SleepFn& sleep,
               const OnRetryFn& on_retry = {},
               std::optional<DeadlineClock::time_point> deadline = std::nullopt)
    -> std::invoke_result_t<F&> {
  const int max_attempts = backoff.policy().max_attempts < 1 ? 1 : backoff.policy().max_attempts;
  const DeadlineClock::time_point start = DeadlineClock::now();
  for (int retry = 0;; ++retry) {
    auto outcome = attempt();
    Status status = retry_internal::StatusOf(outcome);
    if (status.ok() || !IsRetryable(status)) return outcome;
    const DeadlineClock::time_point now = DeadlineClock::now();
    if (deadline && now >= *deadline) return TimedOutAfter(now - start, retry + 1, status);
    if (retry + 1 >= max_attempts) return outcome;
    std::chrono::milliseconds delay = backoff.Delay(retry);
    if (deadline) {
      delay = std::min(delay, std::chrono::ceil<std::chrono::milliseconds>(*deadline - now));
    }
    if (on_retry) on_retry(retry, status, delay);
    if (sleep) sleep(delay);
  }
}

// As above, with a freshly seeded RetryBackoff for this one call.
template <typename F>
auto RetryCall(const RetryPolicy& policy, F&& attempt, const SleepFn& sleep,
               const OnRetryFn& on_retry = {},
               std::optional<DeadlineClock::time_point> deadline = std::nullopt)
    -> std::invoke_result_t<F&> {
  RetryBackoff backoff(policy);
  return RetryCall(backoff, std::forward<F>(attempt), sleep, on_retry, deadline);
}

}  // namespace objfs
