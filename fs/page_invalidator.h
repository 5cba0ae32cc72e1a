// Drops the kernel's cached pages of files that changed on the server, from a thread of its own.
//
// Opens keep the kernel's page cache while a file's version is unchanged (keep_cache), so a
// change that lookup or getattr notices must drop those pages for the processes that already
// have the file open or mapped. fuse_lowlevel_notify_inval_inode waits until the kernel has
// dropped them, and the kernel waits for page locks that reads in flight on the same file hold
// until a request thread answers them: sent from a request handler, the notification can stall
// that handler behind requests that need it (libfuse: do not call it from a filesystem
// operation). Handlers only queue the inode here; one thread, holding no objfs lock, sends the
// notifications. The same thread drops the kernel's cached names of files that are gone
// (fuse_lowlevel_notify_inval_entry), which waits for the directory's lock in the kernel, held
// by requests on that directory until they are answered.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "backend/mutex.h"

namespace objfs {

class PageInvalidator {
 public:
  // `notify` drops the pages of one inode (fuse_lowlevel_notify_inval_inode); its result (0 or a
  // negative errno) is ignored: an inode the kernel forgot has no pages left.
  // `notify_entry` drops the kernel's entry for `name` in directory `parent`
  // (fuse_lowlevel_notify_inval_entry); without it, PostEntry does nothing.
  explicit PageInvalidator(
      std::function<int(uint64_t ino)> notify,
      std::function<int(uint64_t parent, const std::string& name)> notify_entry = {});
  // Stop(); a thread that does not end then (or at once, after a Stop that gave up) is left to
  // end on its own, keeping only what it shares with this.
  ~PageInvalidator();
  PageInvalidator(const PageInvalidator&) = delete;
  PageInvalidator& operator=(const PageInvalidator&) = delete;

  // Queues `ino`; an inode already queued is sent once. Never blocks on the kernel.
  void Post(uint64_t ino);
  // Queues the name `name` in directory `parent`, likewise.
  void PostEntry(uint64_t parent, const std::string& name);

  // Sends what is queued and ends the thread, waiting at most `timeout`: a notification the
  // kernel holds up (a read of the file that the stopped request loop will never answer) must
  // not keep the process from unmounting. Returns whether the thread has ended. If it has not,
  // what it had not sent yet is dropped, and Stop may be called again to wait once more: the
  // notification in progress still uses the FUSE session, which must not be destroyed before
  // it returns (it does once the unmount fails the reads it waited for). Posts after Stop are
  // dropped.
  bool Stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Notifications sent so far.
  uint64_t sent() const;

 private:
  // What the thread uses: shared with it, so that a thread left behind by Stop outlives this.
  struct State {
    State(std::function<int(uint64_t)> notify,
          std::function<int(uint64_t, const std::string&)> notify_entry)
        : notify(std::move(notify)), notify_entry(std::move(notify_entry)) {}
    const std::function<int(uint64_t)> notify;
    const std::function<int(uint64_t, const std::string&)> notify_entry;
    Mutex mu;  // lock 28 of fs/lock_order.h: a leaf, never held while the kernel is notified
    CondVar cv;
    std::set<uint64_t> queued GUARDED_BY(mu);
    std::set<std::pair<uint64_t, std::string>> entries GUARDED_BY(mu);
    bool stopping GUARDED_BY(mu) = false;
    bool done GUARDED_BY(mu) = false;  // the thread has returned
    uint64_t sent GUARDED_BY(mu) = 0;
  };
  static void Run(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace objfs
