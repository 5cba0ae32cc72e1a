// The bridge between the kernel's FUSE protocol (libfuse's low-level API) and Filesystem.
//
// Each request becomes one Filesystem call; each non-ok Status becomes an errno through
// fs/errno_map.h. The adapter owns only what the protocol itself needs: directory handles
// (a snapshot of a listing served by offset) and the negotiation of the connection's limits at
// init. A failing or misbehaving request is answered with an error and never ends the process.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/log.h"
#include "backend/mutex.h"
#include "backend/status.h"
#include "fs/filesystem.h"
#include "fs/page_invalidator.h"
#include "fs/reply_log.h"

struct fuse_args;
struct fuse_session;

namespace objfs {

struct FuseAdapterOptions {
  uint32_t max_write = 1u << 20;      // largest write request
  uint32_t max_read = 1u << 20;       // largest read request (also the max_read mount option)
  uint32_t max_readahead = 1u << 20;  // the kernel's read-ahead per file
  int max_threads = 64;               // threads of libfuse's multi-threaded loop
  // Open files without the kernel's page cache: each read(2) and write(2) is a request of its
  // own, served from the read-ahead buffers. A large sequential read then costs one copy less
  // (and no page cache); small reads each cost a request, and MAP_SHARED mmap fails (ENODEV).
  bool direct_io = false;
  // Where failed replies are logged (fs/reply_log.h); standard error when unset.
  LogFunction log;
};

class FuseAdapter {
 public:
  explicit FuseAdapter(FuseAdapterOptions options = {});
  FuseAdapter(const FuseAdapter&) = delete;
  FuseAdapter& operator=(const FuseAdapter&) = delete;

  // The filesystem requests are served by. Must be set before the loop runs (the session may
  // be created and mounted earlier); must outlive the session.
  void set_filesystem(Filesystem* fs) { fs_ = fs; }
  Filesystem* filesystem() const { return fs_; }
  const FuseAdapterOptions& options() const { return options_; }
  // The failed replies so far: counted per operation and logged.
  ReplyLog& reply_log() { return reply_log_; }

  // fuse_session_new with this adapter's operations and `this` as the session's user data.
  // nullptr when libfuse rejects `args` (it prints why).
  fuse_session* NewSession(fuse_args* args);

  // Serves requests on `session` with libfuse's multi-threaded loop until the file system is
  // unmounted or the session is told to exit (signal handlers). Returns libfuse's result: 0, a
  // negative errno, or the number of the signal that ended the loop.
  int Run(fuse_session* session);

  // The first failure of the FlushAll() run by the kernel's destroy request, if any.
  Status destroy_status() const;

  // Called from the destroy request: uploads everything unsaved and remembers a failure.
  void FlushAllOnDestroy();

  // Whether the session may be destroyed: true unless a page drop that Run() gave up waiting
  // for is still in the kernel after another `timeout` (call it after fuse_session_unmount,
  // which ends such a drop). Its thread uses the session until the drop returns.
  bool SessionReleased(std::chrono::milliseconds timeout);

  // Has the kernel drop its cached pages of `ino`, from the thread that Run() starts
  // (fs/page_invalidator.h); nothing outside Run().
  void InvalidatePages(uint64_t ino);
  // Has the kernel forget its entry for `name` in directory `parent`, likewise.
  void InvalidateEntry(uint64_t parent, const std::string& name);

 private:
  FuseAdapterOptions options_;
  Filesystem* fs_ = nullptr;
  ReplyLog reply_log_;
  mutable Mutex mu_;  // lock 21 of fs/lock_order.h
  Status destroy_status_ GUARDED_BY(mu_);
  std::shared_ptr<PageInvalidator> invalidator_ GUARDED_BY(mu_);  // while Run() runs
  // The invalidator whose thread had not ended when Run() returned.
  std::shared_ptr<PageInvalidator> unfinished_ GUARDED_BY(mu_);
};

}  // namespace objfs
