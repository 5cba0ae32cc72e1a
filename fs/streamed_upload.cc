#include "fs/streamed_upload.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <utility>
#include <vector>

#include "cache/io_pool.h"

namespace objfs {

Result<std::shared_ptr<StreamedUpload>> StreamedUpload::Start(ObjectStore& store,
                                                              const std::string& key,
                                                              const std::string& data_path,
                                                              const UploadOptions& upload,
                                                              const Options& options) {
  if (upload.part_size == 0) return InvalidArgumentError("a streamed upload needs a part size");
  const int fd = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status(StatusCode::kIoError, "opening " + data_path + ": " + std::strerror(errno));
  }
  auto stream = std::make_shared<StreamedUpload>(key, upload.part_size, fd, options);
  options.pool->Submit([stream, &store, upload] { stream->Begin(store, upload); });
  return stream;
}

StreamedUpload::StreamedUpload(std::unique_ptr<Upload> upload, int fd, Options options)
    : key_(upload->key()),
      fd_(fd),
      options_(std::move(options)),
      part_size_(std::max<uint64_t>(upload->part_size(), 1)) {
  MutexLock lock(&mu_);
  upload_ = std::move(upload);
  started_ = true;
}

StreamedUpload::StreamedUpload(std::string key, uint64_t part_size, int fd, Options options)
    : key_(std::move(key)),
      fd_(fd),
      options_(std::move(options)),
      part_size_(std::max<uint64_t>(part_size, 1)) {}

void StreamedUpload::Begin(ObjectStore& store, const UploadOptions& upload) {
  Result<std::unique_ptr<Upload>> started = store.start_upload(key_, upload);
  std::vector<uint64_t> start;
  bool abort = false;
  {
    MutexLock lock(&mu_);
    started_ = true;
    if (!started.ok()) {
      failure_ = started.status().WithContext("starting the upload");
    } else {
      upload_ = std::move(*started);
      if (upload_->part_size() != part_size_) {
        failure_ = Status(StatusCode::kInternal, "the store chose parts of " +
                                                     std::to_string(upload_->part_size()) +
                                                     " bytes, not " + std::to_string(part_size_));
      }
    }
    start = TakeStartableLocked();
    abort = TakeAbortLocked();
    changed_.SignalAll();
  }
  StartParts(start);
  if (abort) RunAbort();
}

StreamedUpload::~StreamedUpload() {
  Upload* abort = nullptr;
  {
    MutexLock lock(&mu_);
    if (!completed_ && !aborting_) abort = upload_.get();
  }
  if (abort != nullptr) (void)abort->abort();  // a failure leaves it in the store's journal
  ::close(fd_);
}

bool StreamedUpload::TakeAbortLocked() {
  if (!abandoned_ || completed_ || aborting_ || !started_ || in_flight_ > 0 || !upload_) {
    return false;
  }
  aborting_ = true;
  return true;
}

void StreamedUpload::RunAbort() {
  Upload* upload = nullptr;
  {
    MutexLock lock(&mu_);
    upload = upload_.get();
  }
  (void)upload->abort();  // a failure leaves it in the store's journal
}

uint64_t StreamedUpload::PartLength(uint64_t index, uint64_t size) const {
  const uint64_t offset = index * part_size_;
  return offset >= size ? 0 : std::min(part_size_, size - offset);
}

void StreamedUpload::Wrote(uint64_t offset, uint64_t length, uint64_t size) {
  std::vector<uint64_t> start;
  {
    MutexLock lock(&mu_);
    if (abandoned_ || completed_) return;
    if (length > 0) {
      const uint64_t last = (offset + length - 1) / part_size_;
      for (auto it = parts_.lower_bound(offset / part_size_);
           it != parts_.end() && it->first <= last; ++it) {
        if (it->second == PartState::kSent) it->second = PartState::kChanged;
        if (it->second == PartState::kInFlight) it->second = PartState::kInFlightChanged;
      }
    }
    size_ = size;
    const uint64_t ready = size / part_size_;
    for (uint64_t i = ready_parts_; i < ready; ++i) parts_.try_emplace(i, PartState::kQueued);
    ready_parts_ = std::max(ready_parts_, ready);
    start = TakeStartableLocked();
  }
  StartParts(start);
}

void StreamedUpload::Truncated(uint64_t size) {
  MutexLock lock(&mu_);
  if (abandoned_ || completed_) return;
  size_ = size;
  const uint64_t end_part = size / part_size_;  // the part holding the new end (or past it)
  for (auto it = parts_.lower_bound(end_part); it != parts_.end();) {
    switch (it->second) {
      case PartState::kInFlight:
      case PartState::kInFlightChanged:
        // Its send reads bytes the file no longer has: sent again if the file grows back.
        it->second = PartState::kInFlightChanged;
        ++it;
        break;
      case PartState::kSent:
      case PartState::kChanged:
        if (it->first == end_part && size % part_size_ != 0) {
          it->second = PartState::kChanged;
          ++it;
        } else {
          it = parts_.erase(it);
        }
        break;
      case PartState::kQueued:
        it = parts_.erase(it);
        break;
    }
  }
  ready_parts_ = std::min(ready_parts_, end_part);
}

std::vector<uint64_t> StreamedUpload::TakeStartableLocked() {
  std::vector<uint64_t> start;
  if (abandoned_ || !started_ || !failure_.ok()) return start;
  const size_t bound = std::max<size_t>(options_.max_in_flight, 1);
  for (auto& [index, state] : parts_) {
    if (in_flight_ >= bound) break;
    if (state == PartState::kQueued) {
      state = PartState::kInFlight;
      ++in_flight_;
      start.push_back(index);
    }
  }
  return start;
}

void StreamedUpload::StartParts(const std::vector<uint64_t>& indices) {
  for (uint64_t index : indices) {
    options_.pool->Submit([self = shared_from_this(), index] { self->RunPart(index); });
  }
}

void StreamedUpload::RunPart(uint64_t index) {
  uint64_t length = 0;
  Upload* upload = nullptr;
  bool abort = false;
  {
    MutexLock lock(&mu_);
    if (!abandoned_) length = PartLength(index, size_);
    upload = upload_.get();  // started: parts start only then
  }
  Status sent;
  if (length > 0) {
    const uint64_t offset = index * part_size_;
    FileSource source(fd_, offset + length);
    sent = upload->write(offset, source, offset, length);
  }
  std::vector<uint64_t> start;
  {
    MutexLock lock(&mu_);
    --in_flight_;
    auto it = parts_.find(index);
    if (it != parts_.end()) {
      const bool changed = it->second == PartState::kInFlightChanged;
      if (length == 0 || !sent.ok()) {
        // A part cut by a truncate meanwhile failed for that: it is sent again when needed.
        if (!changed && !abandoned_ && failure_.ok()) {
          failure_ = length == 0 ? Status(StatusCode::kIoError, "part past the end")
                                 : sent.WithContext("part " + std::to_string(index));
        }
        it->second = PartState::kChanged;
      } else {
        it->second = changed ? PartState::kChanged : PartState::kSent;
        if (!finishing_) {
          ++streamed_;
          if (options_.metrics != nullptr) Bump(options_.metrics->streamed_parts);
        }
      }
    }
    start = TakeStartableLocked();
    abort = TakeAbortLocked();
    changed_.SignalAll();
  }
  StartParts(start);
  if (abort) RunAbort();
}

Result<ObjectInfo> StreamedUpload::Finish(uint64_t size, const PutOptions& options) {
  std::vector<uint64_t> start;
  {
    MutexLock lock(&mu_);
    if (abandoned_ || completed_) {
      return Status(StatusCode::kInvalidArgument, "upload of " + key() + " already finished");
    }
    while (!started_ || in_flight_ > 0) changed_.Wait(&mu_);
    if (!failure_.ok()) return failure_;
    if (upload_->max_size() != 0 && size > upload_->max_size()) {
      return Status(StatusCode::kInvalidArgument,
                    "a file of " + std::to_string(size) + " bytes exceeds the upload's layout");
    }
    finishing_ = true;
    size_ = size;
    const uint64_t count = (size + part_size_ - 1) / part_size_;
    parts_.erase(parts_.lower_bound(count), parts_.end());
    for (uint64_t i = 0; i < count; ++i) {
      auto [it, inserted] = parts_.try_emplace(i, PartState::kQueued);
      // A sent last part shorter than the file's last now is sent again: only whole parts go
      // in the background, so a sent part is whole, and the last one may be shorter.
      if (!inserted && it->second != PartState::kSent) it->second = PartState::kQueued;
    }
    ready_parts_ = count;
    start = TakeStartableLocked();
  }
  StartParts(start);
  {
    MutexLock lock(&mu_);
    auto pending = [&]() REQUIRES(mu_) {
      if (in_flight_ > 0) return true;
      if (!failure_.ok()) return false;
      return std::any_of(parts_.begin(), parts_.end(),
                         [](const auto& p) { return p.second != PartState::kSent; });
    };
    while (pending()) changed_.Wait(&mu_);
    if (!failure_.ok()) return failure_;
  }
  Upload* upload = nullptr;
  {
    MutexLock lock(&mu_);
    upload = upload_.get();
  }
  Result<ObjectInfo> done = upload->complete(size, options);
  MutexLock lock(&mu_);
  // A failed complete() aborted the upload itself.
  completed_ = true;
  return done;
}

void StreamedUpload::Abandon() {
  bool abort = false;
  {
    MutexLock lock(&mu_);
    abandoned_ = true;
    abort = TakeAbortLocked();
  }
  // On the pool: an abort waits for the server like any request, and an owner may give up on
  // an upload because that server stopped answering (a part timed out): its close must not
  // wait operation_timeout once more.
  if (abort) options_.pool->Submit([self = shared_from_this()] { self->RunAbort(); });
}

Status StreamedUpload::failure() const {
  MutexLock lock(&mu_);
  return failure_;
}

size_t StreamedUpload::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

std::optional<StreamedUpload::PartState> StreamedUpload::state(uint64_t index) const {
  MutexLock lock(&mu_);
  auto it = parts_.find(index);
  if (it == parts_.end()) return std::nullopt;
  return it->second;
}

uint64_t StreamedUpload::streamed_parts() const {
  MutexLock lock(&mu_);
  return streamed_;
}

}  // namespace objfs
