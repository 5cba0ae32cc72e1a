#include "cache/io_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace objfs {
namespace {

// A generous deadline for events that, when the code works, happen within microseconds.
constexpr auto kDeadline = std::chrono::seconds(30);

TEST(IoPoolTest, RunsEveryTask) {
  std::atomic<int> ran{0};
  {
    IoPool pool(4);
    for (int i = 0; i < 1000; ++i) pool.Submit([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST(IoPoolTest, AsyncReturnsTheResult) {
  IoPool pool(3);
  std::vector<std::future<int>> results;
  for (int i = 0; i < 50; ++i) results.push_back(pool.Async([i] { return i * i; }));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(results[i].get(), i * i);
}

TEST(IoPoolTest, AtLeastOneThread) {
  IoPool pool(0);
  EXPECT_EQ(pool.thread_count(), 1u);
  EXPECT_EQ(pool.Async([] { return 7; }).get(), 7);
}

// All `threads` tasks must be running at the same moment for any of them to finish.
TEST(IoPoolTest, RunsAsManyTasksAtOnceAsItHasThreads) {
  constexpr int kThreads = 6;
  IoPool pool(kThreads);
  EXPECT_EQ(pool.thread_count(), static_cast<size_t>(kThreads));
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::vector<std::future<bool>> met;
  for (int i = 0; i < kThreads; ++i) {
    met.push_back(pool.Async([&] {
      std::unique_lock lock(mu);
      ++arrived;
      cv.notify_all();
      return cv.wait_for(lock, kDeadline, [&] { return arrived == kThreads; });
    }));
  }
  for (auto& f : met) EXPECT_TRUE(f.get());
}

TEST(IoPoolTest, NeverRunsMoreTasksAtOnceThanThreads) {
  constexpr int kThreads = 3;
  std::mutex mu;
  int running = 0;
  int max_running = 0;
  {
    IoPool pool(kThreads);
    for (int i = 0; i < 200; ++i) {
      pool.Submit([&] {
        {
          std::lock_guard lock(mu);
          max_running = std::max(max_running, ++running);
        }
        std::this_thread::yield();
        std::lock_guard lock(mu);
        --running;
      });
    }
  }
  EXPECT_GE(max_running, 1);
  EXPECT_LE(max_running, kThreads);
}

TEST(IoPoolTest, DestructorWaitsForRunningAndQueuedTasks) {
  std::promise<void> started;
  std::promise<void> gate;
  std::shared_future<void> gate_open = gate.get_future().share();
  std::atomic<bool> blocked_task_done{false};
  std::atomic<int> queued_done{0};
  auto pool = std::make_unique<IoPool>(1);
  pool->Submit([&] {
    started.set_value();
    gate_open.wait();
    blocked_task_done = true;
  });
  for (int i = 0; i < 10; ++i) pool->Submit([&] { queued_done.fetch_add(1); });
  started.get_future().wait();

  std::thread destroyer([&pool] { pool.reset(); });
  gate.set_value();
  destroyer.join();
  EXPECT_TRUE(blocked_task_done.load());
  EXPECT_EQ(queued_done.load(), 10);
}

TEST(IoPoolTest, TasksMaySubmitMoreWhileDraining) {
  std::atomic<int> ran{0};
  std::function<void(int)> chain;  // outlives the pool whose tasks call it
  {
    IoPool pool(2);
    chain = [&](int left) {
      ran.fetch_add(1);
      if (left > 0) pool.Submit([&chain, left] { chain(left - 1); });
    };
    pool.Submit([&chain] { chain(99); });
    // Destroyed right away: the whole chain of 100 must still run.
  }
  EXPECT_EQ(ran.load(), 100);
}

}  // namespace
}  // namespace objfs
