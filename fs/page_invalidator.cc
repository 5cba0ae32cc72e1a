#include "fs/page_invalidator.h"

#include <utility>

namespace objfs {

PageInvalidator::PageInvalidator(std::function<int(uint64_t ino)> notify)
    : notify_(std::move(notify)), thread_([this] { Run(); }) {}

PageInvalidator::~PageInvalidator() { Stop(); }

void PageInvalidator::Post(uint64_t ino) {
  MutexLock lock(&mu_);
  if (stopping_) return;
  queued_.insert(ino);
  cv_.Signal();
}

void PageInvalidator::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

uint64_t PageInvalidator::sent() const {
  MutexLock lock(&mu_);
  return sent_;
}

void PageInvalidator::Run() {
  MutexLock lock(&mu_);
  while (true) {
    while (queued_.empty() && !stopping_) cv_.Wait(&mu_);
    if (queued_.empty()) return;  // stopping, and nothing left to send
    uint64_t ino = *queued_.begin();
    queued_.erase(queued_.begin());
    lock.Unlock();
    (void)notify_(ino);
    lock.Lock();
    ++sent_;
  }
}

}  // namespace objfs
