#include "backend/retry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "backend/status.h"

namespace objfs {
namespace {

using std::chrono::milliseconds;

RetryPolicy TestPolicy() {
  RetryPolicy policy;
  policy.max_attempts = 6;
  policy.base_delay = milliseconds(50);
  policy.max_delay = milliseconds(1000);
  return policy;
}

TEST(RetryBackoffTest, CeilingDoublesUpToTheMaximum) {
  RetryPolicy policy = TestPolicy();
  EXPECT_EQ(RetryBackoff::Ceiling(policy, 0), milliseconds(50));
  EXPECT_EQ(RetryBackoff::Ceiling(policy, 1), milliseconds(100));
  EXPECT_EQ(RetryBackoff::Ceiling(policy, 2), milliseconds(200));
  EXPECT_EQ(RetryBackoff::Ceiling(policy, 4), milliseconds(800));
  EXPECT_EQ(RetryBackoff::Ceiling(policy, 5), milliseconds(1000));
  EXPECT_EQ(RetryBackoff::Ceiling(policy, 1000), milliseconds(1000));
}

TEST(RetryBackoffTest, DelaysStayWithinTheirCeiling) {
  RetryPolicy policy = TestPolicy();
  RetryBackoff backoff(policy, 42);
  for (int round = 0; round < 200; ++round) {
    for (int retry = 0; retry < 10; ++retry) {
      milliseconds delay = backoff.Delay(retry);
      EXPECT_GE(delay, milliseconds(0));
      EXPECT_LE(delay, RetryBackoff::Ceiling(policy, retry)) << "retry " << retry;
    }
  }
}

TEST(RetryBackoffTest, DelaysGrowOnAverageAndAreJittered) {
  RetryPolicy policy = TestPolicy();
  RetryBackoff backoff(policy, 7);
  constexpr int kSamples = 2000;
  std::vector<double> mean(5, 0.0);
  std::vector<int64_t> lowest(5, INT64_MAX);
  std::vector<int64_t> highest(5, 0);
  for (int i = 0; i < kSamples; ++i) {
    for (int retry = 0; retry < 5; ++retry) {
      int64_t d = backoff.Delay(retry).count();
      mean[retry] += static_cast<double>(d) / kSamples;
      lowest[retry] = std::min(lowest[retry], d);
      highest[retry] = std::max(highest[retry], d);
    }
  }
  for (int retry = 0; retry < 5; ++retry) {
    // Full jitter: the mean is half the ceiling, and the range is covered.
    double half_ceiling = RetryBackoff::Ceiling(policy, retry).count() / 2.0;
    EXPECT_NEAR(mean[retry], half_ceiling, half_ceiling * 0.15) << "retry " << retry;
    EXPECT_LT(lowest[retry], RetryBackoff::Ceiling(policy, retry).count() / 10);
    EXPECT_GT(highest[retry], RetryBackoff::Ceiling(policy, retry).count() * 9 / 10);
    if (retry > 0) {
      EXPECT_GT(mean[retry], mean[retry - 1] * 1.5) << "retry " << retry;
    }
  }
}

TEST(RetryBackoffTest, SameSeedSameDelays) {
  RetryBackoff a(TestPolicy(), 99);
  RetryBackoff b(TestPolicy(), 99);
  for (int retry = 0; retry < 20; ++retry) EXPECT_EQ(a.Delay(retry), b.Delay(retry));
}

TEST(RetryBackoffTest, ZeroBaseDelayNeverWaits) {
  RetryPolicy policy = TestPolicy();
  policy.base_delay = milliseconds(0);
  RetryBackoff backoff(policy, 1);
  for (int retry = 0; retry < 10; ++retry) EXPECT_EQ(backoff.Delay(retry), milliseconds(0));
}

TEST(IsRetryableTest, OnlyTransientIsRetryable) {
  EXPECT_TRUE(IsRetryable(TransientError("503 SlowDown")));
  EXPECT_FALSE(IsRetryable(Status::Ok()));
  EXPECT_FALSE(IsRetryable(NotFoundError("no such key")));
  EXPECT_FALSE(IsRetryable(PermissionDeniedError("denied")));
  EXPECT_FALSE(IsRetryable(PreconditionFailedError("changed")));
  EXPECT_FALSE(IsRetryable(IoError("disk")));
  EXPECT_FALSE(IsRetryable(InternalError("bug")));
}

// Records the waits instead of sleeping.
struct SleepRecorder {
  std::vector<milliseconds> delays;
  SleepFn fn() {
    return [this](milliseconds d) { delays.push_back(d); };
  }
};

TEST(RetryCallTest, SucceedsAfterSomeTransientFailures) {
  RetryPolicy policy = TestPolicy();
  RetryBackoff backoff(policy, 3);
  SleepRecorder sleeper;
  int calls = 0;
  int retries_seen = 0;
  Result<int> result = RetryCall(
      backoff,
      [&]() -> Result<int> {
        ++calls;
        if (calls <= 3) return TransientError("reset");
        return 17;
      },
      sleeper.fn(),
      [&](int retry, const Status& error, milliseconds delay) {
        EXPECT_EQ(retry, retries_seen);
        EXPECT_EQ(error.code(), StatusCode::kTransient);
        EXPECT_LE(delay, RetryBackoff::Ceiling(policy, retry));
        ++retries_seen;
      });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(*result, 17);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(retries_seen, 3);
  ASSERT_EQ(sleeper.delays.size(), 3u);
  for (size_t i = 0; i < sleeper.delays.size(); ++i) {
    EXPECT_LE(sleeper.delays[i], RetryBackoff::Ceiling(policy, static_cast<int>(i)));
  }
}

TEST(RetryCallTest, SleepsTheDelaysTheBackoffChooses) {
  RetryPolicy policy = TestPolicy();
  RetryBackoff backoff(policy, 11);
  RetryBackoff twin(policy, 11);
  SleepRecorder sleeper;
  Status status = RetryCall(
      backoff, [] { return TransientError("busy"); }, sleeper.fn());
  EXPECT_EQ(status.code(), StatusCode::kTransient);
  ASSERT_EQ(sleeper.delays.size(), 5u);
  for (int retry = 0; retry < 5; ++retry) EXPECT_EQ(sleeper.delays[retry], twin.Delay(retry));
}

TEST(RetryCallTest, NonRetryableErrorIsReturnedAtOnce) {
  SleepRecorder sleeper;
  int calls = 0;
  Status status = RetryCall(
      TestPolicy(),
      [&] {
        ++calls;
        return NotFoundError("no such key");
      },
      sleeper.fn());
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "no such key");
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(sleeper.delays.empty());
}

TEST(RetryCallTest, GivesUpAfterMaxAttemptsWithTheLastError) {
  RetryPolicy policy = TestPolicy();
  policy.max_attempts = 4;
  SleepRecorder sleeper;
  int calls = 0;
  int retries = 0;
  Result<std::string> result = RetryCall(
      policy,
      [&]() -> Result<std::string> {
        ++calls;
        return TransientError("attempt " + std::to_string(calls));
      },
      sleeper.fn(), [&](int, const Status&, milliseconds) { ++retries; });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "attempt 4");
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(retries, 3);
  EXPECT_EQ(sleeper.delays.size(), 3u);
}

TEST(RetryCallTest, TransientThenPermanentStopsAtThePermanentError) {
  SleepRecorder sleeper;
  int calls = 0;
  Status status = RetryCall(
      TestPolicy(),
      [&] {
        ++calls;
        return calls == 1 ? TransientError("reset") : PermissionDeniedError("denied");
      },
      sleeper.fn());
  EXPECT_EQ(status.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(sleeper.delays.size(), 1u);
}

TEST(RetryCallTest, AtLeastOneAttemptEvenWithAZeroLimit) {
  RetryPolicy policy = TestPolicy();
  policy.max_attempts = 0;
  SleepRecorder sleeper;
  int calls = 0;
  Status status = RetryCall(
      policy,
      [&] {
        ++calls;
        return TransientError("busy");
      },
      sleeper.fn());
  EXPECT_EQ(status.code(), StatusCode::kTransient);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(sleeper.delays.empty());
}

TEST(RetryCallTest, FirstSuccessIsNotRepeated) {
  SleepRecorder sleeper;
  int calls = 0;
  Status status = RetryCall(
      TestPolicy(),
      [&] {
        ++calls;
        return Status::Ok();
      },
      sleeper.fn());
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(sleeper.delays.empty());
}

}  // namespace
}  // namespace objfs

namespace objfs {
namespace {

TEST(RetryCallTest, BudgetEndsRetriesWithTimedOutNamingTheLastError) {
  RetryPolicy policy = TestPolicy();
  policy.max_attempts = 1000;
  int calls = 0;
  const auto start = DeadlineClock::now();
  Result<int> result = RetryCall(
      policy,
      [&]() -> Result<int> {
        ++calls;
        std::this_thread::sleep_for(milliseconds(20));
        return TransientError("slow down " + std::to_string(calls));
      },
      RealSleep(), {}, start + milliseconds(200));
  const auto took = DeadlineClock::now() - start;
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kTimedOut);
  EXPECT_NE(result.status().message().find(
                "(operation_timeout); last error: Transient: slow down " + std::to_string(calls)),
            std::string::npos)
      << result.status().message();
  EXPECT_GE(calls, 2);
  EXPECT_LT(took, milliseconds(200 + 20 + 150));
}

TEST(RetryCallTest, NoWaitGoesPastTheDeadline) {
  RetryPolicy policy = TestPolicy();
  policy.base_delay = milliseconds(60000);
  policy.max_delay = milliseconds(60000);
  SleepRecorder sleeper;
  Status status = RetryCall(
      policy, [&] { return TransientError("busy"); },
      [&](milliseconds delay) {
        sleeper.fn()(delay);
        std::this_thread::sleep_for(delay);
      },
      {}, DeadlineClock::now() + milliseconds(100));
  EXPECT_EQ(status.code(), StatusCode::kTimedOut);
  ASSERT_FALSE(sleeper.delays.empty());
  for (milliseconds d : sleeper.delays) EXPECT_LE(d, milliseconds(100));
}

TEST(RetryCallTest, PermanentErrorsAreNotTurnedIntoTimeouts) {
  int calls = 0;
  Status status = RetryCall(
      TestPolicy(),
      [&] {
        ++calls;
        return NotFoundError("gone");
      },
      RealSleep(), {}, DeadlineClock::now() - milliseconds(1));
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(calls, 1);
}

TEST(CallDeadlineTest, BudgetAndCap) {
  RetryPolicy policy;
  const auto start = DeadlineClock::now();
  policy.budget = milliseconds(5000);
  ASSERT_TRUE(CallDeadline(policy, start).has_value());
  EXPECT_EQ(*CallDeadline(policy, start), start + milliseconds(5000));
  // The cap only ever moves earlier, and then bounds every call (last: it is process-wide).
  CapCallDeadlines(start + milliseconds(1000));
  CapCallDeadlines(start + milliseconds(3000));
  EXPECT_EQ(*CallDeadline(policy, start), start + milliseconds(1000));
  policy.budget = milliseconds(0);
  EXPECT_EQ(*CallDeadline(policy, start), start + milliseconds(1000));
}

TEST(ServerWorkSilenceTest, AtLeastFiveMinutesAndTenMiBPerSecond) {
  EXPECT_EQ(ServerWorkSilence(milliseconds(30000), 0), milliseconds(300000));
  EXPECT_EQ(ServerWorkSilence(milliseconds(30000), 1ull << 30), milliseconds(300000));
  // 5 GiB (the largest part copy) at 10 MiB/s.
  EXPECT_EQ(ServerWorkSilence(milliseconds(30000), 5ull << 30), milliseconds(512000));
  // Rounded up to whole seconds.
  EXPECT_EQ(ServerWorkSilence(milliseconds(2000), (5ull << 30) + 1), milliseconds(513000));
  // Never below request_timeout.
  EXPECT_EQ(ServerWorkSilence(milliseconds(900000), 5ull << 30), milliseconds(900000));
}

}  // namespace
}  // namespace objfs
