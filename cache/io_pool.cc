#include "cache/io_pool.h"

#include <algorithm>

namespace objfs {

IoPool::IoPool(size_t threads) {
  threads = std::max<size_t>(threads, 1);
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { RunWorker(); });
}

IoPool::~IoPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void IoPool::Submit(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  work_ready_.notify_one();
}

void IoPool::RunWorker() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mu_);
      work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // When stopping, keep going until the queue is drained: nothing submitted is dropped.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace objfs
