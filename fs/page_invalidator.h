// Drops the kernel's cached pages of files that changed on the server, from a thread of its own.
//
// Opens keep the kernel's page cache while a file's version is unchanged (keep_cache), so a
// change that lookup or getattr notices must drop those pages for the processes that already
// have the file open or mapped. fuse_lowlevel_notify_inval_inode waits until the kernel has
// dropped them, and the kernel waits for page locks that reads in flight on the same file hold
// until a request thread answers them: sent from a request handler, the notification can stall
// that handler behind requests that need it (libfuse: do not call it from a filesystem
// operation). Handlers only queue the inode here; one thread, holding no objfs lock, sends the
// notifications.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <thread>

#include "backend/mutex.h"

namespace objfs {

class PageInvalidator {
 public:
  // `notify` drops the pages of one inode (fuse_lowlevel_notify_inval_inode); its result (0 or a
  // negative errno) is ignored: an inode the kernel forgot has no pages left.
  explicit PageInvalidator(std::function<int(uint64_t ino)> notify);
  ~PageInvalidator();  // Stop()
  PageInvalidator(const PageInvalidator&) = delete;
  PageInvalidator& operator=(const PageInvalidator&) = delete;

  // Queues `ino`; an inode already queued is sent once. Never blocks on the kernel.
  void Post(uint64_t ino);

  // Sends what is queued and ends the thread. Posts after it are dropped.
  void Stop();

  // Notifications sent so far.
  uint64_t sent() const;

 private:
  void Run();

  std::function<int(uint64_t)> notify_;
  mutable Mutex mu_;  // a leaf of fs/lock_order.h: held only to edit the queue
  CondVar cv_;
  std::set<uint64_t> queued_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  uint64_t sent_ GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace objfs
