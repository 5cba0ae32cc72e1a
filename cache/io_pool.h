// A fixed set of threads that run blocking backend I/O: prefetch reads, multipart parts.
//
// Backend calls block for a network round trip, so running several at once is how objfs gets
// bandwidth out of one object store. The pool is bounded so that many open files cannot start
// an unbounded number of connections; work beyond the thread count waits in a FIFO queue.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/mutex.h"

namespace objfs {

class IoPool {
 public:
  static constexpr size_t kDefaultThreads = 8;

  // Starts `threads` workers (at least one).
  explicit IoPool(size_t threads = kDefaultThreads);
  // Runs every task submitted so far (tasks may still submit more while it drains), then joins
  // the workers. A task must not destroy the pool that runs it.
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  // Queues `task` to run on one of the workers. Never blocks on the queue.
  void Submit(std::function<void()> task);

  // Queues `fn` and returns a future for its result.
  template <typename F>
  std::future<std::invoke_result_t<F&>> Async(F fn) {
    using R = std::invoke_result_t<F&>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
    std::future<R> result = task->get_future();
    Submit([task] { (*task)(); });
    return result;
  }

  size_t thread_count() const { return threads_.size(); }

 private:
  void RunWorker();

  Mutex mu_;  // lock 18 of fs/lock_order.h
  CondVar work_ready_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace objfs
