// The notes of the uploads the server holds for this mount, kept in its cache directory.
//
// A multipart upload on S3, or an upload's temporary file on SFTP, stays on the server when
// objfs dies before completing or aborting it. Other clients, and other mounts of the same
// bucket or directory, have uploads of their own in flight, so the only uploads a mount may
// remove are the ones it can prove are its own: those noted here by the stores
// (backend/upload_journal.h). Each note is one file ("N.upload", an OpenUploadRecord) written
// before the upload can outlive the process (S3: right after CreateMultipartUpload, the first
// moment its UploadId is known; SFTP: before the temporary file is created) and removed once
// the server no longer holds it. The next mount over the same cache directory hands the notes
// it finds to ClearLeftovers before it serves anything.
//
// The notes are not fsynced: a note lost with a power loss leaves an upload behind, as before
// (it loses no data), while an fsync per upload would cost every small SFTP file a disk flush.
// A note is renamed into place whole, so a killed process never leaves a partial one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/mutex.h"
#include "backend/status.h"
#include "backend/upload_journal.h"
#include "cache/records.h"

namespace objfs {

class UploadRecords : public UploadJournal {
 public:
  // Uses (and creates) the directory `dir`; the notes already there are an earlier mount's.
  static Result<std::unique_ptr<UploadRecords>> Open(std::string dir);

  // Notes an upload. On a full disk, the upload is not noted, and the first such time logs it.
  Status Opened(std::string_view name, std::string_view upload_id) override;
  void Closed(std::string_view name, std::string_view upload_id) override;
  void Abandoned(std::string_view name, std::string_view upload_id) override;

  struct ClearResult {
    size_t cleared = 0;  // uploads `clear` removed (or found gone), their notes dropped
    size_t failed = 0;   // uploads `clear` failed on: their notes stay for the next mount
    size_t damaged = 0;  // notes that did not decode: dropped, naming nothing to remove
    Status first_error;  // the first failure of `clear` or of reading a note
  };
  // Hands each note an earlier mount left to `clear` (which aborts or removes that upload on
  // the server, and returns ok when the server no longer holds it).
  ClearResult ClearLeftovers(const std::function<Status(const OpenUploadRecord&)>& clear);

  // The same for this mount's uploads whose abort failed (Abandoned): called once the server
  // answers again, and at the unmount. One whose clearing fails again stays for the next call,
  // and for the next mount.
  ClearResult ClearAbandoned(const std::function<Status(const OpenUploadRecord&)>& clear);

  // Keeps `*gauge` at the number of this mount's uploads whose abort failed and that wait for
  // ClearAbandoned (Metrics::abandoned_uploads). Null: none. Set before the stores use this.
  void CountAbandonedIn(std::atomic<uint64_t>* gauge) {
    MutexLock lock(&mu_);
    abandoned_gauge_ = gauge;
  }

  // Whether an earlier mount left notes that ClearLeftovers has not handed out yet.
  bool HoldsLeftovers() const {
    MutexLock lock(&mu_);
    return !leftovers_.empty();
  }

  // The notes now kept: the earlier mount's that are left, and this mount's open uploads.
  size_t CountForTesting() const;

 private:
  explicit UploadRecords(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(uint64_t n) const;
  void SetGaugeLocked() REQUIRES(mu_);
  // Hands the notes `notes` to `clear`; returns the numbers of those that stay in `kept`.
  ClearResult ClearNotes(const std::vector<uint64_t>& notes,
                         const std::function<Status(const OpenUploadRecord&)>& clear,
                         std::vector<uint64_t>* kept);

  const std::string dir_;
  mutable Mutex mu_;                                 // lock 15 of fs/lock_order.h
  uint64_t next_ GUARDED_BY(mu_) = 1;                // the number of the next note
  std::vector<uint64_t> leftovers_ GUARDED_BY(mu_);  // notes found at Open
  // (name, id) -> note number
  std::map<std::pair<std::string, std::string>, uint64_t> open_ GUARDED_BY(mu_);
  std::vector<uint64_t> abandoned_ GUARDED_BY(mu_);  // this mount's, whose abort failed
  size_t abandoned_clearing_ GUARDED_BY(mu_) = 0;    // of those, the ones ClearAbandoned has out
  std::atomic<uint64_t>* abandoned_gauge_ GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> full_disk_logged_{false};
};

}  // namespace objfs
