// The upload of a file that runs while the file is still being written.
//
// A sequential writer (cp, dd, a download) would otherwise wait at close for the whole file to
// go up. Here the file's parts go up through the store's upload (ObjectStore::start_upload) as
// soon as the writer has written past their end, in the background, read from the staged file
// (a ByteSource: memory stays what the store buffers for the parts in flight, not whole parts),
// and close only sends what is left and completes. The staged file stays complete on local disk
// all along, so whatever this cannot follow ends in the whole put of before, nothing lost.
//
// Part i is [i * part_size(), (i + 1) * part_size()). Its states:
//   (none)    not ready (the file does not reach its end yet), or forgotten by a truncate;
//   kQueued   ready, waiting for a place among the parts in flight;
//   kInFlight being sent; kInFlightChanged: written to since it started;
//   kSent     on the server as the file has it;
//   kChanged  written to after it was sent (or while in flight), or its send failed: sent again
//             at Finish (a repeated range replaces what was there).
// A changed part is not sent again in the background (a writer going back and forth would send
// it over and over); Finish does. At most max_in_flight parts are in flight; ready parts beyond
// that wait as indices, so Wrote never blocks on the network.
//
// Threads: every method may be called from any thread; the owner (FileWriter, under the file's
// Inode::mu) calls Wrote, Truncated and Finish one at a time. The parts run on an IoPool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/metrics.h"
#include "backend/mutex.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs {

class IoPool;

class StreamedUpload : public std::enable_shared_from_this<StreamedUpload> {
 public:
  enum class PartState { kQueued, kInFlight, kInFlightChanged, kSent, kChanged };

  struct Options {
    size_t max_in_flight = 4;  // parts sent at once by this upload (at least 1)
    IoPool* pool = nullptr;    // runs the parts; must outlive every part (required)
    Metrics* metrics = nullptr;
    // What the owner started the upload with (UploadOptions::metadata) and when, for its
    // decision at Finish.
    Metadata metadata;
    int64_t started_ns = 0;
  };

  // Opens `data_path` (the staged file) for reading, the parts' own descriptor, which outlives
  // a staged file removed meanwhile; and starts the upload of `key` in parts of
  // upload.part_size (required) on the pool, so that the writer never waits for it. A store
  // that starts it with another part size fails it (failure()).
  static Result<std::shared_ptr<StreamedUpload>> Start(ObjectStore& store, const std::string& key,
                                                       const std::string& data_path,
                                                       const UploadOptions& upload,
                                                       const Options& options);
  // Over an upload already started; takes `fd` (closed by the destructor).
  StreamedUpload(std::unique_ptr<Upload> upload, int fd, Options options);
  // Not started yet: Start's.
  StreamedUpload(std::string key, uint64_t part_size, int fd, Options options);
  // Aborts the upload unless it completed or Abandon's abort ran.
  ~StreamedUpload();
  StreamedUpload(const StreamedUpload&) = delete;
  StreamedUpload& operator=(const StreamedUpload&) = delete;

  const std::string& key() const { return key_; }
  uint64_t part_size() const { return part_size_; }
  const Metadata& metadata() const { return options_.metadata; }
  int64_t started_ns() const { return options_.started_ns; }

  // [offset, offset + length) of the file was written and the file is `size` bytes: parts sent
  // or in flight there become changed, parts the file now reaches past are queued, and queued
  // parts start while there is room. Never waits for the network.
  void Wrote(uint64_t offset, uint64_t length, uint64_t size);
  // The file was cut (or extended) to `size`: parts past it are forgotten (those in flight
  // become changed), and the part holding the new end becomes changed.
  void Truncated(uint64_t size);
  // Waits for the parts in flight, sends every part of [0, size) not on the server as the file
  // has it now (in parallel, within the bound), then completes the object. Once.
  Result<ObjectInfo> Finish(uint64_t size, const PutOptions& options);
  // No part starts any more; the upload is aborted on the pool once no part is in flight (or
  // by the destructor, of an upload never abandoned nor completed). Never waits for it.
  void Abandon();

  // The first failure of a part (Ok while none failed).
  Status failure() const;
  size_t in_flight() const;
  std::optional<PartState> state(uint64_t index) const;
  // Parts sent in the background, before Finish.
  uint64_t streamed_parts() const;

 private:
  // Moves queued parts in flight while there is room; returns the indices to start (outside
  // mu_).
  std::vector<uint64_t> TakeStartableLocked() REQUIRES(mu_);
  void StartParts(const std::vector<uint64_t>& indices);
  void RunPart(uint64_t index);
  uint64_t PartLength(uint64_t index, uint64_t size) const;

  // True once, when the upload is abandoned, started, idle and neither completed nor aborted:
  // the caller then runs RunAbort (on the pool).
  bool TakeAbortLocked() REQUIRES(mu_);
  void RunAbort();

  // Start's work on the pool: the upload, or the failure.
  void Begin(ObjectStore& store, const UploadOptions& upload);

  const std::string key_;
  const int fd_;
  const Options options_;
  const uint64_t part_size_;

  mutable Mutex mu_;  // lock 26 of fs/lock_order.h: a leaf
  CondVar changed_;   // a part left flight, or the upload started
  // Set once, under mu_, when the upload started (read without mu_ only after `started_`).
  std::unique_ptr<Upload> upload_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;  // started, or failed to (failure_)
  std::map<uint64_t, PartState> parts_ GUARDED_BY(mu_);
  // Parts below this are ready (the file reaches their end), each with a state.
  uint64_t ready_parts_ GUARDED_BY(mu_) = 0;
  // The bytes parts in flight read up to: a part reads [offset, offset + length) of the file.
  uint64_t size_ GUARDED_BY(mu_) = 0;
  size_t in_flight_ GUARDED_BY(mu_) = 0;
  bool abandoned_ GUARDED_BY(mu_) = false;
  bool finishing_ GUARDED_BY(mu_) = false;  // Finish sends changed and last parts too
  bool completed_ GUARDED_BY(mu_) = false;
  bool aborting_ GUARDED_BY(mu_) = false;  // the abort ran, or is on its way
  Status failure_ GUARDED_BY(mu_);
  uint64_t streamed_ GUARDED_BY(mu_) = 0;
};

}  // namespace objfs
