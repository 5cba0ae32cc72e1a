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
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_ready_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void IoPool::Submit(std::function<void()> task) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  work_ready_.Signal();
}

void IoPool::RunWorker() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_ready_.Wait(&mu_);
      // When stopping, keep going until the queue is drained: nothing submitted is dropped.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace objfs
