#include "cache/upload_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "backend/log.h"
#include "cache/codec.h"
#include "cache/file_io.h"

namespace objfs {

namespace {

constexpr std::string_view kSuffix = ".upload";
constexpr std::string_view kPartial = ".tmp";

// The number of a note's file name "N.upload", or 0 for any other name.
uint64_t NoteNumber(const std::string& file_name) {
  if (file_name.size() <= kSuffix.size() || !file_name.ends_with(kSuffix)) return 0;
  uint64_t n = 0;
  for (size_t i = 0; i < file_name.size() - kSuffix.size(); ++i) {
    const char c = file_name[i];
    if (c < '0' || c > '9' || n > (UINT64_MAX - 9) / 10) return 0;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

}  // namespace

Result<std::unique_ptr<UploadRecords>> UploadRecords::Open(std::string dir) {
  std::error_code ec;
  // Private, as the cache directory it is in: the notes name keys and upload ids.
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return IoError("cannot create " + dir + ": " + std::strerror(errno));
  }
  std::unique_ptr<UploadRecords> records(new UploadRecords(std::move(dir)));
  MutexLock lock(&records->mu_);  // not shared yet: only for the analysis
  for (std::filesystem::directory_iterator it(records->dir_, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.ends_with(kPartial)) {
      // A note the earlier mount was killed while writing: its upload had not started yet.
      ::unlink(it->path().c_str());
      continue;
    }
    if (const uint64_t n = NoteNumber(name); n != 0) {
      records->leftovers_.push_back(n);
      records->next_ = std::max(records->next_, n + 1);
    }
  }
  if (ec) return IoError("cannot list " + records->dir_ + ": " + ec.message());
  std::sort(records->leftovers_.begin(), records->leftovers_.end());
  return records;
}

std::string UploadRecords::PathOf(uint64_t n) const {
  return dir_ + "/" + std::to_string(n) + std::string(kSuffix);
}

Status UploadRecords::Opened(std::string_view name, std::string_view upload_id) {
  OpenUploadRecord record{std::string(name), std::string(upload_id)};
  std::string bytes;
  OpenUploadCodec::Encode(record, bytes);
  uint64_t n;
  {
    MutexLock lock(&mu_);
    n = next_++;
  }
  Status written = WriteFileAtomically(PathOf(n), bytes);
  if (written.code() == StatusCode::kNoSpace) {
    // A full cache disk: the upload goes on un-noted rather than not at all, as with a note
    // lost to a power cut. It must: what fills the disk is most likely a file waiting for this
    // very upload to free its room.
    if (!full_disk_logged_.exchange(true)) {
      LogWarn("no room in " + dir_ + " to note uploads in flight (" + written.message() +
              "): an upload objfs dies in the middle of now stays on the server (S3: an "
              "unfinished multipart upload; SFTP: a temporary file named .objfs-tmp-*)");
    }
    return Status::Ok();
  }
  OBJFS_RETURN_IF_ERROR(written);
  MutexLock lock(&mu_);
  open_[{std::move(record.name), std::move(record.upload_id)}] = n;
  return Status::Ok();
}

void UploadRecords::Closed(std::string_view name, std::string_view upload_id) {
  uint64_t n;
  {
    MutexLock lock(&mu_);
    auto it = open_.find({std::string(name), std::string(upload_id)});
    if (it == open_.end()) return;
    n = it->second;
    open_.erase(it);
  }
  ::unlink(PathOf(n).c_str());
}

void UploadRecords::Abandoned(std::string_view name, std::string_view upload_id) {
  MutexLock lock(&mu_);
  auto it = open_.find({std::string(name), std::string(upload_id)});
  if (it == open_.end()) return;
  abandoned_.push_back(it->second);
  open_.erase(it);
  SetGaugeLocked();
}

void UploadRecords::SetGaugeLocked() {
  if (abandoned_gauge_ != nullptr) {
    abandoned_gauge_->store(abandoned_.size() + abandoned_clearing_, std::memory_order_relaxed);
  }
}

UploadRecords::ClearResult UploadRecords::ClearNotes(
    const std::vector<uint64_t>& notes, const std::function<Status(const OpenUploadRecord&)>& clear,
    std::vector<uint64_t>* kept) {
  ClearResult result;
  for (uint64_t n : notes) {
    const std::string path = PathOf(n);
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      if (result.first_error.ok()) result.first_error = IoError("cannot read " + path);
      ++result.failed;
      kept->push_back(n);
      continue;
    }
    Result<OpenUploadRecord> record = OpenUploadCodec::Decode(bytes);
    if (!record.ok()) {
      ++result.damaged;
      ::unlink(path.c_str());
      continue;
    }
    Status cleared = clear(*record);
    if (!cleared.ok()) {
      if (result.first_error.ok()) result.first_error = cleared;
      ++result.failed;
      kept->push_back(n);
      continue;
    }
    ++result.cleared;
    ::unlink(path.c_str());
  }
  return result;
}

UploadRecords::ClearResult UploadRecords::ClearLeftovers(
    const std::function<Status(const OpenUploadRecord&)>& clear) {
  std::vector<uint64_t> notes;
  {
    MutexLock lock(&mu_);
    notes.swap(leftovers_);
  }
  std::vector<uint64_t> kept;
  ClearResult result = ClearNotes(notes, clear, &kept);
  MutexLock lock(&mu_);
  leftovers_.insert(leftovers_.end(), kept.begin(), kept.end());
  std::sort(leftovers_.begin(), leftovers_.end());
  return result;
}

UploadRecords::ClearResult UploadRecords::ClearAbandoned(
    const std::function<Status(const OpenUploadRecord&)>& clear) {
  std::vector<uint64_t> notes;
  {
    MutexLock lock(&mu_);
    notes.swap(abandoned_);
    abandoned_clearing_ += notes.size();
  }
  if (notes.empty()) return {};
  std::vector<uint64_t> kept;
  ClearResult result = ClearNotes(notes, clear, &kept);
  MutexLock lock(&mu_);
  abandoned_clearing_ -= notes.size();
  abandoned_.insert(abandoned_.end(), kept.begin(), kept.end());
  SetGaugeLocked();
  return result;
}

size_t UploadRecords::CountForTesting() const {
  MutexLock lock(&mu_);
  return leftovers_.size() + open_.size() + abandoned_.size();
}

}  // namespace objfs
