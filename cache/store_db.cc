#include "cache/store_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "cache/file_io.h"

namespace objfs {
namespace {

// "objfslog", format version u32, record tag u8, three zero bytes.
constexpr char kLogMagic[8] = {'o', 'b', 'j', 'f', 's', 'l', 'o', 'g'};
constexpr uint32_t kLogFormatVersion = 1;
constexpr size_t kLogHeaderBytes = 16;
constexpr size_t kFrameLengthBytes = 4;
// No record comes near this; a frame length above it is corruption, not a record to read.
constexpr uint32_t kMaxRecordBytes = 1 << 20;

uint32_t LoadLe32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

void StoreLe32(char* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof(v));
}

std::string LogHeader(uint8_t record_tag) {
  std::string h(kLogHeaderBytes, '\0');
  std::memcpy(h.data(), kLogMagic, sizeof(kLogMagic));
  StoreLe32(h.data() + 8, kLogFormatVersion);
  h[12] = static_cast<char>(record_tag);
  return h;
}

Status WriteAll(int fd, const std::string& path, uint64_t offset, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Result<std::string> ReadAll(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  std::string buf(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read", path, errno);
    }
    if (n == 0) break;  // shrank under us; replay what there is
    done += static_cast<size_t>(n);
  }
  buf.resize(done);
  return buf;
}

Status SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash + 1);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("fsync", dir, err);
  return Status::Ok();
}

// Frames `encoded_size` bytes that `encode` appends to a string.
template <typename Encode>
std::string Frame(size_t encoded_size, Encode encode) {
  std::string frame;
  frame.reserve(kFrameLengthBytes + encoded_size);
  frame.resize(kFrameLengthBytes);
  encode(frame);
  StoreLe32(frame.data(), static_cast<uint32_t>(frame.size() - kFrameLengthBytes));
  return frame;
}

}  // namespace

template <typename Record>
RecordTable<Record>::RecordTable(std::string path, StoreDbOptions options, int fd)
    : path_(std::move(path)), options_(options), fd_(fd) {}

template <typename Record>
RecordTable<Record>::~RecordTable() {
  if (fd_ >= 0) ::close(fd_);
}

template <typename Record>
Result<std::unique_ptr<RecordTable<Record>>> RecordTable<Record>::Open(std::string path,
                                                                       StoreDbOptions options) {
  // A compaction cut short by a crash leaves its unfinished copy; the log itself is whole.
  ::unlink((path + ".tmp").c_str());
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("open", path, errno);
  std::unique_ptr<RecordTable> table(new RecordTable(std::move(path), options, fd));
  MutexLock lock(&table->mu_);
  OBJFS_RETURN_IF_ERROR(table->Replay());
  OBJFS_RETURN_IF_ERROR(table->CompactIfLarge());
  return table;
}

template <typename Record>
Status RecordTable<Record>::Replay() {
  OBJFS_ASSIGN_OR_RETURN(std::string log, ReadAll(fd_, path_));
  const std::string header = LogHeader(Codec::kTag);
  if (log.size() < kLogHeaderBytes || log.compare(0, kLogHeaderBytes, header) != 0) {
    // Empty, or not a log of ours in this format: start over (everything in it is a cache).
    stats_.dropped_bytes += log.size();
    if (::ftruncate(fd_, 0) != 0) return ErrnoStatus("truncate", path_, errno);
    OBJFS_RETURN_IF_ERROR(WriteAll(fd_, path_, 0, header));
    if (options_.sync_writes && ::fdatasync(fd_) != 0) {
      return ErrnoStatus("fdatasync", path_, errno);
    }
    stats_.log_bytes = kLogHeaderBytes;
    return Status::Ok();
  }

  size_t pos = kLogHeaderBytes;
  size_t good_end = kLogHeaderBytes;  // the end of the last frame that decoded
  while (log.size() - pos >= kFrameLengthBytes) {
    const uint32_t length = LoadLe32(log.data() + pos);
    const size_t record_at = pos + kFrameLengthBytes;
    bool applied = false;
    if (length >= 2 && length <= kMaxRecordBytes && length <= log.size() - record_at) {
      std::string_view encoded(log.data() + record_at, length);
      const uint8_t tag = static_cast<uint8_t>(encoded[0]);
      if (tag == Codec::kTag) {
        Result<Record> record = Codec::Decode(encoded);
        if (record.ok()) {
          std::string key = Codec::Key(*record);
          index_.insert_or_assign(std::move(key), std::move(record).value());
          applied = true;
        }
      } else if (tag == TombstoneCodec::kTag) {
        Result<TombstoneRecord> tombstone = TombstoneCodec::Decode(encoded);
        if (tombstone.ok() && tombstone->record_tag == Codec::kTag) {
          auto it = index_.find(tombstone->key);
          if (it != index_.end()) index_.erase(it);
          applied = true;
        }
      }
    }
    if (!applied) {
      ++pos;  // resynchronise: the next frame may start at any byte
      continue;
    }
    stats_.dropped_bytes += pos - good_end;
    pos = record_at + length;
    good_end = pos;
  }
  if (good_end < log.size()) {
    // A torn or corrupt tail: cut it off so that appends follow the last good frame.
    stats_.dropped_bytes += log.size() - good_end;
    if (::ftruncate(fd_, static_cast<off_t>(good_end)) != 0) {
      return ErrnoStatus("truncate", path_, errno);
    }
  }
  stats_.log_bytes = good_end;
  stats_.live_bytes = 0;
  for (const auto& [key, record] : index_) {
    stats_.live_bytes += kFrameLengthBytes + Codec::EncodedSize(record);
  }
  stats_.records = index_.size();
  return Status::Ok();
}

template <typename Record>
Status RecordTable<Record>::Append(const std::string& frame) {
  const uint64_t at = stats_.log_bytes;
  Status s = WriteAll(fd_, path_, at, frame);
  if (s.ok() && options_.sync_writes && ::fdatasync(fd_) != 0) {
    s = ErrnoStatus("fdatasync", path_, errno);
  }
  if (!s.ok()) {
    // Take back a partial frame. If even that fails, the next Append writes over it from `at`
    // and the next Open drops what is left of it as a torn tail; the error says so.
    if (::ftruncate(fd_, static_cast<off_t>(at)) != 0) {
      const int err = errno;
      return Status(s.code(), s.message() + "; taking back the partial record failed too (" +
                                  ErrnoStatus("truncate", path_, err).message() +
                                  "): the next open drops it");
    }
    return s;
  }
  stats_.log_bytes = at + frame.size();
  return Status::Ok();
}

template <typename Record>
Status RecordTable<Record>::Put(const Record& record) {
  const size_t encoded_size = Codec::EncodedSize(record);
  if (encoded_size > kMaxRecordBytes) {
    return InvalidArgumentError("record too large to store: " + Codec::Key(record));
  }
  MutexLock lock(&mu_);
  auto it = index_.find(std::string_view(Codec::Key(record)));
  if (it != index_.end() && it->second == record) return Status::Ok();
  const std::string frame =
      Frame(encoded_size, [&](std::string& out) { Codec::Encode(record, out); });
  OBJFS_RETURN_IF_ERROR(Append(frame));
  if (it != index_.end()) {
    stats_.live_bytes -= kFrameLengthBytes + Codec::EncodedSize(it->second);
    it->second = record;
  } else {
    index_.emplace(Codec::Key(record), record);
  }
  stats_.live_bytes += frame.size();
  stats_.records = index_.size();
  return CompactIfLarge();
}

template <typename Record>
Result<std::optional<Record>> RecordTable<Record>::Get(std::string_view key) const {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::optional<Record>();
  return std::optional<Record>(it->second);
}

template <typename Record>
Status RecordTable<Record>::Remove(std::string_view key) {
  MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return Status::Ok();
  TombstoneRecord tombstone{Codec::kTag, std::string(key)};
  const size_t encoded_size = TombstoneCodec::EncodedSize(tombstone);
  if (encoded_size > kMaxRecordBytes) return InvalidArgumentError("key too long");
  const std::string frame =
      Frame(encoded_size, [&](std::string& out) { TombstoneCodec::Encode(tombstone, out); });
  OBJFS_RETURN_IF_ERROR(Append(frame));
  stats_.live_bytes -= kFrameLengthBytes + Codec::EncodedSize(it->second);
  index_.erase(it);
  stats_.records = index_.size();
  return CompactIfLarge();
}

template <typename Record>
Status RecordTable<Record>::Compact() {
  MutexLock lock(&mu_);
  return CompactLocked();
}

template <typename Record>
Status RecordTable<Record>::CompactIfLarge() {
  if (stats_.log_bytes < options_.compaction_min_bytes ||
      stats_.log_bytes <= 2 * (kLogHeaderBytes + stats_.live_bytes)) {
    return Status::Ok();
  }
  // The log is intact whether or not this works; a failure is retried at the next write.
  (void)CompactLocked();
  return Status::Ok();
}

template <typename Record>
Status RecordTable<Record>::CompactLocked() {
  const std::string tmp_path = path_ + ".tmp";
  int tmp_fd = ::open(tmp_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (tmp_fd < 0) return ErrnoStatus("create", tmp_path, errno);
  auto fail = [&](Status s) {
    ::close(tmp_fd);
    ::unlink(tmp_path.c_str());
    return s;
  };

  constexpr size_t kFlushBytes = 1 << 20;
  std::string buf = LogHeader(Codec::kTag);
  uint64_t written = 0;
  for (const auto& [key, record] : index_) {
    const size_t at = buf.size();
    buf.resize(at + kFrameLengthBytes);
    Codec::Encode(record, buf);
    StoreLe32(buf.data() + at, static_cast<uint32_t>(buf.size() - at - kFrameLengthBytes));
    if (buf.size() >= kFlushBytes) {
      if (Status s = WriteAll(tmp_fd, tmp_path, written, buf); !s.ok()) return fail(s);
      written += buf.size();
      buf.clear();
    }
  }
  if (Status s = WriteAll(tmp_fd, tmp_path, written, buf); !s.ok()) return fail(s);
  written += buf.size();
  if (::fdatasync(tmp_fd) != 0) return fail(ErrnoStatus("fdatasync", tmp_path, errno));
  if (::rename(tmp_path.c_str(), path_.c_str()) != 0) {
    return fail(ErrnoStatus("rename", tmp_path, errno));
  }
  ::close(fd_);
  fd_ = tmp_fd;
  stats_.log_bytes = written;
  ++stats_.compactions;
  // The new log is in place; a failed directory sync only risks finding the old one after a
  // crash, which holds the same live records.
  (void)SyncDirectoryOf(path_);
  return Status::Ok();
}

template <typename Record>
std::vector<Record> RecordTable<Record>::All() const {
  MutexLock lock(&mu_);
  std::vector<Record> records;
  records.reserve(index_.size());
  for (const auto& [key, record] : index_) records.push_back(record);
  return records;
}

template <typename Record>
size_t RecordTable<Record>::size() const {
  MutexLock lock(&mu_);
  return index_.size();
}

template <typename Record>
typename RecordTable<Record>::Stats RecordTable<Record>::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

template class RecordTable<ContentETagRecord>;
template class RecordTable<ObjectMetaRecord>;
template class RecordTable<DataBlockRecord>;

// ---- StoreDb ------------------------------------------------------------------------------

Result<StoreDb> StoreDb::Open(const std::string& dir, StoreDbOptions options) {
  // Private, as the cache directory holding it: the records name the mount's keys.
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string path = dir.substr(0, i);
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir", path, errno);
    }
  }
  StoreDb db;
  const std::string lock_path = dir + "/LOCK";
  db.lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (db.lock_fd_ < 0) return ErrnoStatus("open", lock_path, errno);
  if (::flock(db.lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return IoError("record store " + dir + " is in use by another mount");
    return ErrnoStatus("lock", lock_path, errno);
  }
  OBJFS_ASSIGN_OR_RETURN(db.content_etags_,
                         RecordTable<ContentETagRecord>::Open(dir + "/content_etags.log", options));
  OBJFS_ASSIGN_OR_RETURN(db.object_meta_,
                         RecordTable<ObjectMetaRecord>::Open(dir + "/object_meta.log", options));
  return db;
}

StoreDb::StoreDb(StoreDb&& other) noexcept
    : lock_fd_(std::exchange(other.lock_fd_, -1)),
      content_etags_(std::move(other.content_etags_)),
      object_meta_(std::move(other.object_meta_)) {}

StoreDb& StoreDb::operator=(StoreDb&& other) noexcept {
  if (this != &other) {
    content_etags_ = std::move(other.content_etags_);
    object_meta_ = std::move(other.object_meta_);
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
  }
  return *this;
}

StoreDb::~StoreDb() {
  // Tables first, then the lock that let us write them.
  content_etags_.reset();
  object_meta_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

}  // namespace objfs
