#include "cache/data_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/md5.h"
#include "backend/object_version.h"
#include "cache/codec.h"
#include "cache/file_io.h"

namespace objfs {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// What a block of `length` bytes takes on disk, for the size bound: whole file system blocks
// (4 KiB on ext4, xfs and tmpfs), so that many small blocks cannot take many times the bound.
uint64_t DiskCost(uint64_t length) {
  constexpr uint64_t kFsBlock = 4096;
  return (std::max<uint64_t>(length, 1) + kFsBlock - 1) / kFsBlock * kFsBlock;
}

Status MakeDirectory(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus("cannot create", path, errno);
  }
  return Status::Ok();
}

uint32_t Crc(std::span<const std::byte> data) {
  return Crc32c(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
}

// Reads exactly `out.size()` bytes at 0 of `path`, and checks that the file has no more.
bool ReadBlockFile(const std::string& path, std::span<std::byte> out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  size_t done = 0;
  bool ok = true;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (ok) {
    struct stat st {};
    ok = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == out.size();
  }
  ::close(fd);
  return ok;
}

Status WriteBlockFile(const std::string& tmp, const std::string& path,
                      std::span<const std::byte> data) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create", tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename", tmp, err);
  }
  return Status::Ok();
}

}  // namespace

DataCache::DataCache(DataCacheOptions options, Metrics* metrics, int lock_fd,
                     std::unique_ptr<RecordTable<DataBlockRecord>> table)
    : options_(std::move(options)),
      metrics_(metrics),
      lock_fd_(lock_fd),
      table_(std::move(table)) {}

DataCache::~DataCache() { ::close(lock_fd_); }

Result<std::unique_ptr<DataCache>> DataCache::Open(DataCacheOptions options, Metrics* metrics) {
  if (options.block_size == 0) return InvalidArgumentError("data cache block size is 0");
  OBJFS_RETURN_IF_ERROR(MakeDirectory(options.dir));
  OBJFS_RETURN_IF_ERROR(MakeDirectory(options.dir + "/blocks"));
  const std::string lock_path = options.dir + "/lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd < 0) return ErrnoStatus("cannot open", lock_path, errno);
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd);
    if (err == EWOULDBLOCK) {
      return InvalidArgumentError("data cache '" + options.dir +
                                  "' is in use by another objfs mount; give each mount its own "
                                  "-o data_cache=");
    }
    return ErrnoStatus("cannot lock", lock_path, err);
  }
  StoreDbOptions db_options;
  db_options.compaction_min_bytes = 64 << 10;
  Result<std::unique_ptr<RecordTable<DataBlockRecord>>> table =
      RecordTable<DataBlockRecord>::Open(options.dir + "/index.log", db_options);
  if (!table.ok()) {
    ::close(lock_fd);
    return table.status();
  }
  std::unique_ptr<DataCache> cache(
      new DataCache(std::move(options), metrics, lock_fd, std::move(table).value()));
  OBJFS_RETURN_IF_ERROR(cache->Load());
  return cache;
}

Status DataCache::Load() {
  std::vector<DataBlockRecord> records = table_->All();
  std::sort(records.begin(), records.end(),
            [](const DataBlockRecord& a, const DataBlockRecord& b) { return a.stamp < b.stamp; });
  std::vector<std::string> stale;
  {
    MutexLock lock(&mu_);
    for (const DataBlockRecord& record : records) {
      struct stat st {};
      const bool usable = record.block_size == options_.block_size &&
                          ::lstat(PathOf(record.name).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
                          static_cast<uint64_t>(st.st_size) == record.length;
      if (!usable) {
        stale.push_back(record.name);
        continue;
      }
      lru_.push_front(record.name);
      entries_[record.name] = Entry{
          .length = record.length, .crc32c = record.crc32c, .ready = true, .lru = lru_.begin()};
      bytes_ += DiskCost(record.length);
      stamp_ = std::max(stamp_, record.stamp);
    }
    // A smaller data_cache_size than last time: the oldest go now.
    while (bytes_ > options_.max_bytes && !lru_.empty()) {
      std::string name = std::move(lru_.back());
      lru_.pop_back();
      bytes_ -= DiskCost(entries_[name].length);
      entries_.erase(name);
      stale.push_back(std::move(name));
    }
    UpdateGauge();
  }
  for (const std::string& name : stale) Discard(name);

  // Files no record names: a crash between writing a block and its record, or a write cut
  // short (".tmp").
  const std::string blocks = options_.dir + "/blocks";
  DIR* top = ::opendir(blocks.c_str());
  if (top == nullptr) return ErrnoStatus("cannot read", blocks, errno);
  while (const dirent* sub = ::readdir(top)) {
    if (sub->d_name[0] == '.') continue;
    const std::string sub_path = blocks + "/" + sub->d_name;
    DIR* dir = ::opendir(sub_path.c_str());
    if (dir == nullptr) continue;
    while (const dirent* file = ::readdir(dir)) {
      if (file->d_name[0] == '.') continue;
      bool known;
      {
        MutexLock lock(&mu_);
        known = entries_.count(file->d_name) != 0;
      }
      if (!known) ::unlink((sub_path + "/" + file->d_name).c_str());
    }
    ::closedir(dir);
  }
  ::closedir(top);
  return Status::Ok();
}

std::string DataCache::NameOf(std::string_view key, const ETag& etag, uint64_t offset) const {
  Md5 md5;
  const std::string fixed = std::to_string(options_.block_size) + "\n" +
                            std::to_string(static_cast<int>(etag.kind())) + "\n" +
                            std::to_string(offset) + "\n";
  md5.Update(fixed);
  md5.Update(std::to_string(options_.scope.size()) + ":" + options_.scope);
  md5.Update(std::to_string(key.size()) + ":");
  md5.Update(key);
  md5.Update(etag.value());
  const Md5Digest digest = md5.Final();
  std::string name;
  name.reserve(32);
  for (uint8_t b : digest) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name;
}

std::string DataCache::PathOf(const std::string& name) const {
  return options_.dir + "/blocks/" + name.substr(0, 2) + "/" + name;
}

std::string DataCache::BlockPath(std::string_view key, const ETag& etag, uint64_t offset) const {
  return PathOf(NameOf(key, etag, offset));
}

void DataCache::UpdateGauge() {
  if (metrics_ != nullptr) metrics_->data_cache_bytes.store(bytes_, std::memory_order_relaxed);
}

void DataCache::Discard(const std::string& name) {
  ::unlink(PathOf(name).c_str());
  (void)table_->Remove(name);  // a record left behind names no file: dropped at the next open
}

void DataCache::Drop(const std::string& name) {
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end() || !it->second.ready) return;
    bytes_ -= DiskCost(it->second.length);
    lru_.erase(it->second.lru);
    entries_.erase(it);
    UpdateGauge();
  }
  Discard(name);
}

bool DataCache::Contains(std::string_view key, const ETag& etag, uint64_t offset) const {
  const std::string name = NameOf(key, etag, offset);
  MutexLock lock(&mu_);
  auto it = entries_.find(name);
  return it != entries_.end() && it->second.ready;
}

std::optional<size_t> DataCache::Get(std::string_view key, const ETag& etag, uint64_t offset,
                                     std::span<std::byte> out) {
  const std::string name = NameOf(key, etag, offset);
  Entry entry;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end() || !it->second.ready) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    entry = it->second;
  }
  if (entry.length > out.size()) return std::nullopt;
  std::span<std::byte> data = out.first(entry.length);
  if (!ReadBlockFile(PathOf(name), data) || Crc(data) != entry.crc32c) {
    {
      MutexLock lock(&mu_);
      ++corrupt_;
    }
    if (metrics_ != nullptr) Bump(metrics_->data_cache_corrupt);
    Drop(name);
    return std::nullopt;
  }
  return static_cast<size_t>(entry.length);
}

void DataCache::StopWriting(const Status& why) {
  if (writing_.exchange(false)) {
    const std::string line =
        "data cache " + options_.dir +
        ": cannot write a block, reads go uncached from now on: " + why.message();
    if (options_.log) options_.log(line);
  }
}

void DataCache::Put(std::string_view key, const ETag& etag, uint64_t offset,
                    std::span<const std::byte> data) {
  if (!writing_.load(std::memory_order_relaxed) || data.empty() ||
      data.size() > options_.block_size || data.size() > options_.max_bytes ||
      offset % options_.block_size != 0) {
    return;
  }
  const std::string name = NameOf(key, etag, offset);
  const auto length = static_cast<uint32_t>(data.size());
  const uint32_t crc = Crc(data);
  std::vector<std::string> evicted;
  uint64_t stamp;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
    while (bytes_ + DiskCost(length) > options_.max_bytes && !lru_.empty()) {
      std::string victim = std::move(lru_.back());
      lru_.pop_back();
      bytes_ -= DiskCost(entries_[victim].length);
      entries_.erase(victim);
      ++evictions_;
      evicted.push_back(std::move(victim));
    }
    lru_.push_front(name);
    entries_[name] = Entry{.length = length, .crc32c = crc, .ready = false, .lru = lru_.begin()};
    bytes_ += DiskCost(length);
    stamp = ++stamp_;
    UpdateGauge();
  }
  if (metrics_ != nullptr && !evicted.empty()) Bump(metrics_->data_cache_evictions, evicted.size());
  for (const std::string& victim : evicted) Discard(victim);

  const std::string path = PathOf(name);
  Status written = options_.before_write ? options_.before_write() : Status::Ok();
  if (written.ok()) written = MakeDirectory(options_.dir + "/blocks/" + name.substr(0, 2));
  if (written.ok()) {
    written = WriteBlockFile(path + ".tmp" + std::to_string(++tmp_counter_), path, data);
  }
  if (written.ok()) {
    written = table_->Put(DataBlockRecord{.name = name,
                                          .key = std::string(key),
                                          .etag = etag,
                                          .offset = offset,
                                          .block_size = options_.block_size,
                                          .length = length,
                                          .crc32c = crc,
                                          .stamp = stamp});
    if (!written.ok()) ::unlink(path.c_str());
  }
  bool gone = false;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (!written.ok()) {
      if (it != entries_.end() && !it->second.ready) {
        bytes_ -= DiskCost(it->second.length);
        lru_.erase(it->second.lru);
        entries_.erase(it);
        UpdateGauge();
      }
    } else if (it == entries_.end()) {
      gone = true;  // evicted while it was written: its file and record go too
    } else {
      it->second.ready = true;
    }
  }
  if (!written.ok()) StopWriting(written);
  if (gone) Discard(name);
}

DataCache::Stats DataCache::stats() const {
  MutexLock lock(&mu_);
  return Stats{.bytes = bytes_,
               .blocks = entries_.size(),
               .evictions = evictions_,
               .corrupt = corrupt_,
               .writing = writing_.load()};
}

// ---- DataCacheStore -----------------------------------------------------------------------

DataCacheStore::DataCacheStore(std::shared_ptr<ObjectStore> target,
                               std::shared_ptr<DataCache> cache, Metrics* metrics)
    : ForwardingStore(std::move(target)), cache_(std::move(cache)), metrics_(metrics) {}

Result<size_t> DataCacheStore::read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                                    const ETag* if_match) {
  if (if_match == nullptr || if_match->empty() || buf.empty() || !SettledVersion(*if_match)) {
    return target().read(key, offset, buf, if_match);
  }
  const ETag& etag = *if_match;
  const uint64_t block = cache_->block_size();
  const uint64_t end = offset + buf.size();
  uint64_t hit_bytes = 0;
  uint64_t miss_bytes = 0;
  auto count = [&] {
    if (metrics_ == nullptr) return;
    if (hit_bytes != 0) Bump(metrics_->data_cache_hit_bytes, hit_bytes);
    if (miss_bytes != 0) Bump(metrics_->data_cache_miss_bytes, miss_bytes);
  };
  // Copies what [from, from + n) of the object holds of [offset, end) into buf.
  auto deliver = [&](uint64_t from, const std::byte* data, uint64_t n) -> uint64_t {
    const uint64_t lo = std::max(from, offset);
    const uint64_t hi = std::min(from + n, end);
    if (hi <= lo) return 0;
    std::memcpy(buf.data() + (lo - offset), data + (lo - from), hi - lo);
    return hi - lo;
  };
  std::vector<std::byte> scratch;

  uint64_t pos = offset - offset % block;
  while (pos < end) {
    // Whole blocks inside buf are read in place; the blocks at its edges through scratch.
    const bool inside = pos >= offset && pos + block <= end;
    std::span<std::byte> target_span;
    if (inside) {
      target_span = buf.subspan(pos - offset, block);
    } else {
      scratch.resize(block);
      target_span = std::span(scratch);
    }
    if (std::optional<size_t> got = cache_->Get(key, etag, pos, target_span)) {
      hit_bytes += inside ? *got : deliver(pos, scratch.data(), *got);
      if (*got < block) {  // the object's last block
        count();
        return static_cast<size_t>(std::max(offset, std::min(end, pos + *got)) - offset);
      }
      pos += block;
      continue;
    }
    // A run of missing blocks, up to the next cached one: one backend read.
    uint64_t run_end = pos + block;
    while (run_end < end && !cache_->Contains(key, etag, run_end)) run_end += block;
    const uint64_t run = run_end - pos;
    const bool run_inside = pos >= offset && run_end <= end;
    std::span<std::byte> into;
    if (run_inside) {
      into = buf.subspan(pos - offset, run);
    } else {
      scratch.resize(run);
      into = std::span(scratch);
    }
    Result<size_t> n = target().read(key, pos, into, if_match);
    if (!n.ok()) {
      count();
      return n.status();
    }
    const uint64_t got = std::min<uint64_t>(*n, run);
    for (uint64_t at = 0; at < got; at += block) {
      const uint64_t length = std::min(block, got - at);
      // A part of a block is cached only as the object's last one (the read came back short).
      if (length == block || got < run) cache_->Put(key, etag, pos + at, into.subspan(at, length));
    }
    miss_bytes += run_inside ? got : deliver(pos, scratch.data(), got);
    if (got < run) {
      count();
      return static_cast<size_t>(std::max(offset, std::min(end, pos + got)) - offset);
    }
    pos = run_end;
  }
  count();
  return buf.size();
}

}  // namespace objfs
