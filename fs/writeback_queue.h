// The write-back queue: which files have work waiting for the background (the upload of a
// closed file whose write-back window runs, a held metadata change, a failed upload to retry, a
// file an earlier mount left), when each is due, and the thread that does the work once it is.
//
// It exists apart from Filesystem so that the schedule's rules (an earlier due time stands, a
// held change is never held back by a later upload, a failure is retried after a delay, a
// full cache_dir makes room by uploading early) are one small part with tests of their own,
// while Filesystem keeps only what one file's work is (WorkFn) and what uploading early means
// for one file (MakeRoom's callback).
//
// Threading: every method may be called from any thread. The queue's mutex is a leaf of
// fs/lock_order.h: no callback runs under it, so WorkFn may call back into the queue.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/log.h"
#include "backend/mutex.h"
#include "backend/status.h"
#include "cache/clock.h"

namespace objfs {

class IoPool;

class WritebackQueue {
 public:
  // The background work of one file; a failure is retried (RetryLater) by the queue's caller
  // or by the work itself, never by the queue. Runs on the upload pool, several at once.
  using WorkFn = std::function<Status(uint64_t ino)>;

  struct Options {
    std::shared_ptr<Clock> clock;
    WorkFn work;
    // Told of each file whose due work succeeded (may be null).
    std::function<void(uint64_t ino)> done;
    // Threads of the pool that runs due work (and RunAll): a pool of its own, so that
    // hundreds of files falling due at once never queue reads behind them.
    size_t upload_threads = 4;
    // Delay before a failed file is tried again. It doubles with each failure of the same file
    // in a row, up to the larger of the two, and starts over once the file's work succeeds: a
    // server that refuses a file for hours (a bucket policy, an ETag it rejects) is asked
    // a few times an hour, not every retry_delay, and a short outage is still retried soon.
    std::chrono::nanoseconds retry_delay = std::chrono::seconds(30);
    std::chrono::nanoseconds max_retry_delay = std::chrono::minutes(5);
  };

  explicit WritebackQueue(Options options);
  ~WritebackQueue();  // stops the thread; due work that has not started is left undone
  WritebackQueue(const WritebackQueue&) = delete;
  WritebackQueue& operator=(const WritebackQueue&) = delete;

  // Starts the thread that runs work as it falls due (at most one; later calls do nothing).
  void Start();
  // Stops the thread and waits for the work it runs. Work still queued stays queued.
  void Stop();

  // Schedules `ino` at `due`, unless it is queued already: an earlier close's schedule stands.
  void ScheduleUnlessQueued(uint64_t ino, std::chrono::nanoseconds due);
  // Schedules `ino` at `due` or earlier: what is queued for a later time is brought forward.
  void ScheduleNoLaterThan(uint64_t ino, std::chrono::nanoseconds due);
  // Schedules `ino` at `due` whatever was queued.
  void ScheduleAt(uint64_t ino, std::chrono::nanoseconds due);
  // Schedules `ino` again after the retry delay for its failures in a row (Options), which it
  // returns.
  std::chrono::nanoseconds RetryLater(uint64_t ino);
  // The work of `ino` succeeded outside the queue (a close's or an fsync's upload): its next
  // failure waits the first retry delay again.
  void Succeeded(uint64_t ino);

  bool Queued(uint64_t ino) const;
  // The thread is running (Start was called, Stop was not).
  bool running() const;
  size_t size() const;

  // Runs the work of every file due now, in parallel on the upload pool, and returns the first
  // failure; the thread calls it when something falls due.
  Status RunDue();

  // Runs `fn` for each of `inos` in parallel on the upload pool; the first failure.
  Status RunAll(const std::vector<uint64_t>& inos, const std::function<Status(uint64_t)>& fn);

  // cache_dir is full: asks `upload_early` to upload queued files, one after another, until
  // `needed` bytes are freed. `upload_early` returns the bytes it freed, nullopt for a file it
  // skipped (busy, open, clean), or a failure (the file is retried later). Returns the bytes
  // freed and, in `*uploaded`, how many files were uploaded.
  uint64_t MakeRoom(
      uint64_t needed,
      const std::function<std::optional<Result<uint64_t>>(uint64_t ino)>& upload_early,
      size_t* uploaded);

 private:
  void Loop();
  // Wakes the thread when `due` is earlier than everything queued before it (`earliest`).
  void NotifyIfEarlier(std::optional<std::chrono::nanoseconds> earliest,
                       std::chrono::nanoseconds due);
  // The earliest due time queued, if any. REQUIRES: mu_ held.
  std::optional<std::chrono::nanoseconds> EarliestLocked() const REQUIRES(mu_);

  Options options_;
  std::unique_ptr<IoPool> pool_;
  mutable Mutex mu_;  // lock 7 of fs/lock_order.h: a leaf
  CondVar cv_;
  // inode -> due time (clock time)
  std::map<uint64_t, std::chrono::nanoseconds> due_ GUARDED_BY(mu_);
  // inode -> failures of its work in a row (RetryLater), until it succeeds
  std::map<uint64_t, int> failures_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_ GUARDED_BY(mu_);
};

// What a mount's recovery took over from an earlier one, and the one "recovered N files" line
// logged once each of those files is done (uploaded, or removed, renamed or written again, so
// that the usual paths own it).
class RecoveryProgress {
 public:
  explicit RecoveryProgress(LogFunction log) : log_(std::move(log)) {}

  // Recovery is taking files over: until End, a file done early is not the last.
  void Begin();
  void Add(uint64_t ino, uint64_t bytes);
  // Taking over is done; logs the line when every file is done already.
  void End();
  // `ino`'s background upload is done; logs the line when it was the last.
  void Done(uint64_t ino);

  std::vector<uint64_t> Pending() const;
  size_t pending() const;
  uint64_t bytes() const;

 private:
  void MaybeLog();

  LogFunction log_;
  mutable Mutex mu_;  // lock 7 of fs/lock_order.h: a leaf, like the queue's
  std::set<uint64_t> pending_ GUARDED_BY(mu_);
  size_t files_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  bool adopting_ GUARDED_BY(mu_) = false;
  bool logged_ GUARDED_BY(mu_) = false;
};

}  // namespace objfs
