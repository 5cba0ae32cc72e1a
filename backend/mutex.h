// objfs's mutex, its scoped lock and its condition variable: std::mutex and
// std::condition_variable with Clang's thread-safety annotations (backend/thread_annotations.h).
//
// libstdc++'s std::mutex carries no annotations, so the analysis cannot see what it guards.
// Every mutex of objfs is an objfs::Mutex: fields name it in GUARDED_BY and functions in
// REQUIRES, and a clang build checks them. The wrappers add nothing at run time (the condition
// variable waits on the std::mutex inside), so ThreadSanitizer sees plain pthread mutexes.
// fs/lock_order.h lists every mutex with its place in the lock order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "backend/thread_annotations.h"

namespace objfs {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds this mutex where it cannot see it (a callback
  // run under the lock). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock and Lock let a scope drop it around a slow call.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (locked_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->Unlock();
    locked_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    locked_ = true;
  }

 private:
  Mutex* const mu_;
  bool locked_ = true;
};

// A condition variable waited on with a Mutex held. Waits may wake spuriously: callers loop
// on their condition, e.g. `while (!ready_) cv_.Wait(&mu_);`, so that the analysis sees the
// guarded fields read with the mutex held (a predicate lambda would be checked as a function
// of its own, holding nothing).
class CondVar {
 public:
  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // False when `deadline` passed before a notification.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  // False when `timeout` passed before a notification.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace objfs
