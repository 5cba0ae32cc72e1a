#include "fs/writeback_queue.h"

#include <algorithm>
#include <utility>

#include "cache/io_pool.h"

namespace objfs {

WritebackQueue::WritebackQueue(Options options)
    : options_(std::move(options)),
      pool_(std::make_unique<IoPool>(std::max<size_t>(options_.upload_threads, 1))) {
  if (options_.clock == nullptr) options_.clock = std::make_shared<SteadyClock>();
}

WritebackQueue::~WritebackQueue() { Stop(); }

void WritebackQueue::Start() {
  MutexLock lock(&mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Loop(); });
}

void WritebackQueue::Stop() {
  std::thread thread;
  {
    MutexLock lock(&mu_);
    stop_ = true;
    thread = std::move(thread_);
  }
  cv_.SignalAll();
  if (thread.joinable()) thread.join();
}

std::optional<std::chrono::nanoseconds> WritebackQueue::EarliestLocked() const {
  std::optional<std::chrono::nanoseconds> earliest;
  for (const auto& [ino, due] : due_) {
    if (!earliest || due < *earliest) earliest = due;
  }
  return earliest;
}

void WritebackQueue::NotifyIfEarlier(std::optional<std::chrono::nanoseconds> earliest,
                                     std::chrono::nanoseconds due) {
  // Otherwise the thread already waits for a due time no later than the new one.
  if (!earliest || due < *earliest) cv_.Signal();
}

void WritebackQueue::ScheduleUnlessQueued(uint64_t ino, std::chrono::nanoseconds due) {
  std::optional<std::chrono::nanoseconds> earliest;
  {
    MutexLock lock(&mu_);
    earliest = EarliestLocked();
    due_.try_emplace(ino, due);
  }
  NotifyIfEarlier(earliest, due);
}

void WritebackQueue::ScheduleNoLaterThan(uint64_t ino, std::chrono::nanoseconds due) {
  {
    MutexLock lock(&mu_);
    auto [it, added] = due_.try_emplace(ino, due);
    if (!added && due < it->second) it->second = due;
  }
  cv_.Signal();  // the thread may wait for a later time
}

void WritebackQueue::ScheduleAt(uint64_t ino, std::chrono::nanoseconds due) {
  {
    MutexLock lock(&mu_);
    due_[ino] = due;
  }
  cv_.Signal();
}

std::chrono::nanoseconds WritebackQueue::RetryLater(uint64_t ino) {
  std::optional<std::chrono::nanoseconds> earliest;
  const std::chrono::nanoseconds most = std::max(options_.retry_delay, options_.max_retry_delay);
  std::chrono::nanoseconds delay = options_.retry_delay;
  std::chrono::nanoseconds due;
  {
    MutexLock lock(&mu_);
    for (int doubled = failures_[ino]++; doubled > 0 && delay < most; --doubled) delay *= 2;
    delay = std::min(delay, most);
    due = options_.clock->now() + delay;
    earliest = EarliestLocked();
    due_[ino] = due;
  }
  NotifyIfEarlier(earliest, due);
  return delay;
}

void WritebackQueue::Succeeded(uint64_t ino) {
  MutexLock lock(&mu_);
  failures_.erase(ino);
}

bool WritebackQueue::Queued(uint64_t ino) const {
  MutexLock lock(&mu_);
  return due_.count(ino) > 0;
}

bool WritebackQueue::running() const {
  MutexLock lock(&mu_);
  return thread_.joinable();
}

size_t WritebackQueue::size() const {
  MutexLock lock(&mu_);
  return due_.size();
}

Status WritebackQueue::RunAll(const std::vector<uint64_t>& inos,
                              const std::function<Status(uint64_t)>& fn) {
  std::vector<std::future<Status>> runs;
  runs.reserve(inos.size());
  for (uint64_t ino : inos) runs.push_back(pool_->Async([&fn, ino] { return fn(ino); }));
  Status first;
  for (auto& run : runs) {
    Status s = run.get();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status WritebackQueue::RunDue() {
  std::vector<uint64_t> due;
  const std::chrono::nanoseconds now = options_.clock->now();
  {
    MutexLock lock(&mu_);
    for (auto it = due_.begin(); it != due_.end();) {
      if (it->second <= now) {
        due.push_back(it->first);
        it = due_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return RunAll(due, [this](uint64_t ino) {
    Status status = options_.work(ino);
    if (status.ok()) Succeeded(ino);
    if (status.ok() && options_.done) options_.done(ino);
    return status;
  });
}

uint64_t WritebackQueue::MakeRoom(
    uint64_t needed, const std::function<std::optional<Result<uint64_t>>(uint64_t)>& upload_early,
    size_t* uploaded) {
  std::vector<uint64_t> queued;
  {
    MutexLock lock(&mu_);
    for (const auto& [ino, due] : due_) queued.push_back(ino);
  }
  needed = std::max<uint64_t>(needed, 1);
  uint64_t freed = 0;
  size_t count = 0;
  for (uint64_t ino : queued) {
    if (freed >= needed) break;
    std::optional<Result<uint64_t>> result = upload_early(ino);
    if (!result) continue;
    if (!result->ok()) {
      RetryLater(ino);
      continue;
    }
    ++count;
    freed += std::max<uint64_t>(**result, 1);
  }
  if (uploaded != nullptr) *uploaded = count;
  return freed;
}

void WritebackQueue::Loop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    std::chrono::nanoseconds wait = std::chrono::seconds(1);
    if (!due_.empty()) {
      const std::chrono::nanoseconds now = options_.clock->now();
      for (const auto& [ino, due] : due_) wait = std::min(wait, due - now);
    }
    if (wait > std::chrono::nanoseconds::zero()) {
      cv_.WaitFor(&mu_, wait);
      continue;
    }
    lock.Unlock();
    (void)RunDue();  // the work logs and reschedules its own failures
    lock.Lock();
  }
}

void RecoveryProgress::Begin() {
  MutexLock lock(&mu_);
  adopting_ = true;
}

void RecoveryProgress::Add(uint64_t ino, uint64_t bytes) {
  MutexLock lock(&mu_);
  pending_.insert(ino);
  ++files_;
  bytes_ += bytes;
}

void RecoveryProgress::End() {
  {
    MutexLock lock(&mu_);
    adopting_ = false;
  }
  MaybeLog();  // all of them may be uploaded already
}

void RecoveryProgress::Done(uint64_t ino) {
  {
    MutexLock lock(&mu_);
    if (pending_.erase(ino) == 0) return;
  }
  MaybeLog();
}

std::vector<uint64_t> RecoveryProgress::Pending() const {
  MutexLock lock(&mu_);
  return {pending_.begin(), pending_.end()};
}

size_t RecoveryProgress::pending() const {
  MutexLock lock(&mu_);
  return pending_.size();
}

uint64_t RecoveryProgress::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

void RecoveryProgress::MaybeLog() {
  size_t files = 0;
  uint64_t bytes = 0;
  {
    MutexLock lock(&mu_);
    // The write-back thread may upload the first files taken over before the last is: the line
    // waits for all of them.
    if (adopting_ || !pending_.empty() || files_ == 0 || logged_) return;
    logged_ = true;
    files = files_;
    bytes = bytes_;
  }
  log_(LogLevel::kInfo, "recovered " + std::to_string(files) + " files (" + std::to_string(bytes) +
                            " bytes) left by an earlier mount");
}

}  // namespace objfs
