// The write-back queue's schedule rules, its thread and making room, apart from Filesystem.
#include "fs/writeback_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace objfs {
namespace {

using std::chrono::seconds;

class WritebackQueueTest : public ::testing::Test {
 protected:
  WritebackQueue::Options QueueOptions() {
    WritebackQueue::Options options;
    options.clock = clock_;
    options.retry_delay = seconds(30);
    options.work = [this](uint64_t ino) {
      std::lock_guard<std::mutex> lock(mu_);
      ran_.push_back(ino);
      cv_.notify_all();
      return failing_.count(ino) > 0 ? Status(StatusCode::kIoError, "503") : Status::Ok();
    };
    options.done = [this](uint64_t ino) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(ino);
    };
    return options;
  }

  std::vector<uint64_t> Ran() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> ran = ran_;
    ran_.clear();
    return ran;
  }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> ran_;
  std::vector<uint64_t> done_;
  std::set<uint64_t> failing_;
};

TEST_F(WritebackQueueTest, RunsOnlyWhatIsDue) {
  WritebackQueue queue(QueueOptions());
  queue.ScheduleAt(1, clock_->now() + seconds(5));
  queue.ScheduleAt(2, clock_->now() + seconds(10));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_TRUE(Ran().empty());
  clock_->Advance(seconds(5));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_EQ(Ran(), std::vector<uint64_t>{1});
  EXPECT_FALSE(queue.Queued(1));
  EXPECT_TRUE(queue.Queued(2));
  EXPECT_EQ(queue.size(), 1u);
}

// A second close does not postpone the first close's upload.
TEST_F(WritebackQueueTest, AnEarlierScheduleStands) {
  WritebackQueue queue(QueueOptions());
  queue.ScheduleUnlessQueued(1, clock_->now() + seconds(5));
  clock_->Advance(seconds(4));
  queue.ScheduleUnlessQueued(1, clock_->now() + seconds(5));
  clock_->Advance(seconds(1));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_EQ(Ran(), std::vector<uint64_t>{1});
}

// A held metadata change is never held back by an upload queued for later (a retry).
TEST_F(WritebackQueueTest, NoLaterThanBringsAScheduleForward) {
  WritebackQueue queue(QueueOptions());
  queue.ScheduleAt(1, clock_->now() + seconds(30));
  queue.ScheduleNoLaterThan(1, clock_->now() + seconds(2));
  queue.ScheduleNoLaterThan(1, clock_->now() + seconds(20));  // never later
  clock_->Advance(seconds(2));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_EQ(Ran(), std::vector<uint64_t>{1});
}

TEST_F(WritebackQueueTest, AFailureIsReportedAndOnlySuccessIsDone) {
  WritebackQueue queue(QueueOptions());
  failing_ = {2};
  queue.ScheduleAt(1, clock_->now());
  queue.ScheduleAt(2, clock_->now());
  Status status = queue.RunDue();
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_EQ(done_, std::vector<uint64_t>{1});
}

TEST_F(WritebackQueueTest, RetryLaterWaitsTheRetryDelay) {
  WritebackQueue queue(QueueOptions());
  queue.RetryLater(7);
  clock_->Advance(seconds(29));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_TRUE(Ran().empty());
  clock_->Advance(seconds(1));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_EQ(Ran(), std::vector<uint64_t>{7});
}

// A file that keeps failing waits twice as long after each failure, up to max_retry_delay; once
// its work succeeds, its next failure waits retry_delay again. (As the file writer uses it: the
// work itself reschedules its failure.)
TEST_F(WritebackQueueTest, RetriesOfAFileThatKeepsFailingBackOffUntilItSucceeds) {
  WritebackQueue::Options options = QueueOptions();
  options.max_retry_delay = seconds(100);
  WritebackQueue* self = nullptr;
  std::vector<std::chrono::nanoseconds> delays;
  options.work = [&](uint64_t ino) {
    std::lock_guard<std::mutex> lock(mu_);
    ran_.push_back(ino);
    if (failing_.count(ino) == 0) return Status::Ok();
    delays.push_back(self->RetryLater(ino));
    return Status(StatusCode::kIoError, "403");
  };
  WritebackQueue queue(options);
  self = &queue;
  failing_ = {7};
  delays.push_back(queue.RetryLater(7));  // the first failure, of a close's upload
  for (int64_t wait : {30, 60, 100, 100}) {
    clock_->Advance(seconds(wait - 1));
    EXPECT_TRUE(queue.RunDue().ok());
    EXPECT_TRUE(Ran().empty()) << wait;
    clock_->Advance(seconds(1));
    EXPECT_EQ(queue.RunDue().code(), StatusCode::kIoError);
    EXPECT_EQ(Ran(), std::vector<uint64_t>{7});
  }
  EXPECT_EQ(delays, (std::vector<std::chrono::nanoseconds>{seconds(30), seconds(60), seconds(100),
                                                           seconds(100), seconds(100)}));
  failing_.clear();
  clock_->Advance(seconds(100));
  EXPECT_TRUE(queue.RunDue().ok());
  EXPECT_EQ(Ran(), std::vector<uint64_t>{7});
  EXPECT_EQ(queue.RetryLater(7), seconds(30));
  // Success outside the queue starts over too.
  EXPECT_EQ(queue.RetryLater(7), seconds(60));
  queue.Succeeded(7);
  EXPECT_EQ(queue.RetryLater(7), seconds(30));
}

// Files due together are uploaded in parallel: two uploads that each wait for the other finish.
TEST_F(WritebackQueueTest, DueFilesRunInParallel) {
  WritebackQueue::Options options = QueueOptions();
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  options.work = [&](uint64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ++started;
    cv.notify_all();
    bool both = cv.wait_for(lock, seconds(20), [&] { return started == 2; });
    return both ? Status::Ok() : Status(StatusCode::kTimedOut, "ran one at a time");
  };
  WritebackQueue queue(std::move(options));
  queue.ScheduleAt(1, clock_->now());
  queue.ScheduleAt(2, clock_->now());
  EXPECT_TRUE(queue.RunDue().ok());
}

TEST_F(WritebackQueueTest, TheThreadRunsWorkAsItFallsDue) {
  WritebackQueue queue(QueueOptions());
  queue.Start();
  queue.ScheduleAt(3, clock_->now());
  std::unique_lock<std::mutex> lock(mu_);
  EXPECT_TRUE(cv_.wait_for(lock, seconds(20), [&] { return !ran_.empty(); }));
  EXPECT_EQ(ran_, std::vector<uint64_t>{3});
}

TEST_F(WritebackQueueTest, StopLeavesQueuedWorkQueued) {
  WritebackQueue queue(QueueOptions());
  queue.Start();
  queue.ScheduleAt(4, clock_->now() + seconds(60));
  queue.Stop();
  queue.Start();  // a stopped queue stays stopped
  EXPECT_FALSE(queue.running());
  clock_->Advance(seconds(60));
  EXPECT_TRUE(queue.Queued(4));
  EXPECT_TRUE(Ran().empty());
  EXPECT_TRUE(queue.RunDue().ok());  // still runs work when asked
  EXPECT_EQ(Ran(), std::vector<uint64_t>{4});
}

TEST_F(WritebackQueueTest, MakeRoomUploadsUntilEnoughIsFreed) {
  WritebackQueue queue(QueueOptions());
  for (uint64_t ino = 1; ino <= 5; ++ino) queue.ScheduleAt(ino, clock_->now() + seconds(10));
  std::vector<uint64_t> asked;
  size_t uploaded = 0;
  const uint64_t freed = queue.MakeRoom(
      250,
      [&](uint64_t ino) -> std::optional<Result<uint64_t>> {
        asked.push_back(ino);
        if (ino == 1) return std::nullopt;  // busy: skipped
        if (ino == 2) return Result<uint64_t>(Status(StatusCode::kIoError, "503"));
        return Result<uint64_t>(uint64_t{200});
      },
      &uploaded);
  EXPECT_EQ(freed, 400u);
  EXPECT_EQ(uploaded, 2u);
  EXPECT_EQ(asked, (std::vector<uint64_t>{1, 2, 3, 4}));
  // The failed one is retried after the retry delay (30 s), not at its old due time.
  clock_->Advance(seconds(10));
  EXPECT_TRUE(queue.RunDue().ok());
  std::vector<uint64_t> ran = Ran();
  EXPECT_EQ(std::set<uint64_t>(ran.begin(), ran.end()), (std::set<uint64_t>{1, 3, 4, 5}));
}

TEST(RecoveryProgressTest, LogsOnceWhenEveryFileIsDone) {
  std::vector<std::string> lines;
  RecoveryProgress progress([&](LogLevel, const std::string& line) { lines.push_back(line); });
  progress.Begin();
  progress.Add(1, 10);
  progress.Done(1);  // done before the last is taken over: not yet
  progress.Add(2, 5);
  EXPECT_TRUE(lines.empty());
  progress.End();
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(progress.pending(), 1u);
  progress.Done(9);  // not taken over
  progress.Done(2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "recovered 2 files (15 bytes) left by an earlier mount");
  progress.Done(2);
  EXPECT_EQ(lines.size(), 1u);
}

TEST(RecoveryProgressTest, NothingTakenOverLogsNothing) {
  std::vector<std::string> lines;
  RecoveryProgress progress([&](LogLevel, const std::string& line) { lines.push_back(line); });
  progress.Begin();
  progress.End();
  EXPECT_TRUE(lines.empty());
}

}  // namespace
}  // namespace objfs
