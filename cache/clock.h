// The time source of the metadata cache, injected so that tests expire entries by advancing a
// fake clock instead of sleeping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace objfs {

class Clock {
 public:
  virtual ~Clock() = default;
  // A monotonic time; only differences between two calls are meaningful.
  virtual std::chrono::nanoseconds now() const = 0;
};

// std::chrono::steady_clock.
class SteadyClock : public Clock {
 public:
  std::chrono::nanoseconds now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch());
  }
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  std::chrono::nanoseconds now() const override {
    return std::chrono::nanoseconds(now_ns_.load(std::memory_order_relaxed));
  }
  void Advance(std::chrono::nanoseconds d) { now_ns_.fetch_add(d.count()); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace objfs
