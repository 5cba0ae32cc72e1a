#include "fs/page_invalidator.h"

#include <utility>

namespace objfs {

PageInvalidator::PageInvalidator(
    std::function<int(uint64_t ino)> notify,
    std::function<int(uint64_t parent, const std::string& name)> notify_entry)
    : state_(std::make_shared<State>(std::move(notify), std::move(notify_entry))),
      thread_([state = state_] { Run(state); }) {}

PageInvalidator::~PageInvalidator() {
  bool gave_up;
  {
    MutexLock lock(&state_->mu);
    gave_up = state_->stopping;
  }
  if (!Stop(gave_up ? std::chrono::milliseconds(0) : std::chrono::seconds(5)) &&
      thread_.joinable()) {
    thread_.detach();
  }
}

void PageInvalidator::Post(uint64_t ino) {
  MutexLock lock(&state_->mu);
  if (state_->stopping) return;
  state_->queued.insert(ino);
  state_->cv.SignalAll();
}

void PageInvalidator::PostEntry(uint64_t parent, const std::string& name) {
  if (!state_->notify_entry) return;
  MutexLock lock(&state_->mu);
  if (state_->stopping) return;
  state_->entries.emplace(parent, name);
  state_->cv.SignalAll();
}

bool PageInvalidator::Stop(std::chrono::milliseconds timeout) {
  if (!thread_.joinable()) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool done = false;
  {
    MutexLock lock(&state_->mu);
    state_->stopping = true;
    state_->cv.SignalAll();
    while (!state_->done && state_->cv.WaitUntil(&state_->mu, deadline)) {
    }
    done = state_->done;
    if (!done) {
      state_->queued.clear();
      state_->entries.clear();
    }
  }
  if (done) thread_.join();
  return done;
}

uint64_t PageInvalidator::sent() const {
  MutexLock lock(&state_->mu);
  return state_->sent;
}

void PageInvalidator::Run(const std::shared_ptr<State>& state) {
  MutexLock lock(&state->mu);
  while (true) {
    while (state->queued.empty() && state->entries.empty() && !state->stopping) {
      state->cv.Wait(&state->mu);
    }
    if (!state->queued.empty()) {
      uint64_t ino = *state->queued.begin();
      state->queued.erase(state->queued.begin());
      lock.Unlock();
      (void)state->notify(ino);
    } else if (!state->entries.empty()) {
      std::pair<uint64_t, std::string> entry = *state->entries.begin();
      state->entries.erase(state->entries.begin());
      lock.Unlock();
      (void)state->notify_entry(entry.first, entry.second);
    } else {
      break;  // stopping, and nothing left to send
    }
    lock.Lock();
    ++state->sent;
  }
  state->done = true;
  state->cv.SignalAll();
}

}  // namespace objfs
