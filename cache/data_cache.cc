#include "cache/data_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
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

std::string Hex(const Md5Digest& digest) {
  std::string hex;
  hex.reserve(2 * digest.size());
  for (uint8_t b : digest) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

uint32_t Crc(std::span<const std::byte> data) {
  return Crc32c(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
}

// Reads exactly `out.size()` bytes at `offset` of `fd`.
bool ReadFully(int fd, uint64_t offset, std::span<std::byte> out) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

Status WriteFully(int fd, uint64_t offset, std::span<const std::byte> data,
                  const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n =
        ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write", path, n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Frees [offset, offset + length) of the file: reads of it return zeros, which no block's
// checksum matches.
void PunchHole(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                    static_cast<off_t>(length));
}

// Whether `name` is `digits` lowercase hex digits, then nothing or a suffix starting `suffix`.
bool IsCacheName(std::string_view name, size_t digits, std::string_view suffix = {}) {
  if (name.size() < digits) return false;
  for (size_t i = 0; i < digits; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return name.size() == digits || (!suffix.empty() && name.substr(digits).starts_with(suffix));
}

// Calls `visit(subdir_fd, name)` for each file of a cache tree `root`/xx/NAME, where xx is two
// hex digits and NAME a cache name; then removes the subdirectories left empty. Never follows a
// symbolic link (`root` itself included) and never looks at a name the cache does not make:
// a data_cache= pointed at a directory of other files leaves them alone.
template <typename Visit>
void ForEachCacheFile(const std::string& root, Visit visit) {
  const int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root_fd < 0) return;
  DIR* top = ::fdopendir(root_fd);
  if (top == nullptr) {
    ::close(root_fd);
    return;
  }
  std::vector<std::string> subs;
  while (const dirent* entry = ::readdir(top)) {
    if (IsCacheName(entry->d_name, 2)) subs.emplace_back(entry->d_name);
  }
  for (const std::string& sub : subs) {
    const int sub_fd =
        ::openat(root_fd, sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub_fd < 0) continue;
    DIR* dir = ::fdopendir(sub_fd);
    if (dir == nullptr) {
      ::close(sub_fd);
      continue;
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir)) {
      if (IsCacheName(entry->d_name, 32, ".tmp") && sub == std::string_view(entry->d_name, 2)) {
        names.emplace_back(entry->d_name);
      }
    }
    for (const std::string& name : names) visit(sub_fd, name);
    ::closedir(dir);
    ::unlinkat(root_fd, sub.c_str(), AT_REMOVEDIR);  // only if empty
  }
  ::closedir(top);
}

// Removes the earlier layout, a file per block under "blocks/" and its "index.log": what the
// cache made, and only if "blocks/" is a directory of its own.
void RemoveEarlierLayout(const std::string& dir) {
  const std::string blocks = dir + "/blocks";
  struct stat st {};
  if (::lstat(blocks.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  ForEachCacheFile(
      blocks, [](int sub_fd, const std::string& name) { ::unlinkat(sub_fd, name.c_str(), 0); });
  ::rmdir(blocks.c_str());  // only if empty
  if (::lstat((dir + "/index.log").c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    ::unlink((dir + "/index.log").c_str());
  }
}

// Whether the file system of `dir` can free a range of a file (fallocate's PUNCH_HOLE), which
// eviction needs to give a block's space back while other blocks of its file stay: false only
// when it says it cannot (NFSv3, vfat, CIFS, FUSE file systems without fallocate). The probe is
// an empty file with no name (or, where there is no O_TMPFILE, a name of its own removed at
// once), so it needs no free space and leaves nothing behind.
bool CanPunchHoles(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string probe = dir + "/.punch-probe-" + std::to_string(::getpid());
    fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return true;  // cannot tell; blocks are written (or not) as before
    ::unlink(probe.c_str());
  }
  const bool refused = ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) != 0 &&
                       (errno == EOPNOTSUPP || errno == ENOSYS);
  ::close(fd);
  return !refused;
}

}  // namespace

DataCache::Descriptor::~Descriptor() { ::close(fd); }

DataCache::DataCache(DataCacheOptions options, Metrics* metrics, int lock_fd,
                     std::unique_ptr<RecordTable<DataBlockRecord>> table)
    : options_(std::move(options)),
      metrics_(metrics),
      lock_fd_(lock_fd),
      table_(std::move(table)) {}

DataCache::~DataCache() { ::close(lock_fd_); }

Result<std::unique_ptr<DataCache>> DataCache::Open(DataCacheOptions options, Metrics* metrics) {
  if (options.block_size == 0) return InvalidArgumentError("data cache block size is 0");
  if (options.max_open_files == 0) options.max_open_files = 1;
  OBJFS_RETURN_IF_ERROR(MakeDirectory(options.dir));
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
  // The earlier layout, a file per block: removed, never read.
  RemoveEarlierLayout(options.dir);
  if (Status made = MakeDirectory(options.dir + "/objects"); !made.ok()) {
    ::close(lock_fd);
    return made;
  }
  if (!CanPunchHoles(options.dir + "/objects")) {
    ::close(lock_fd);
    return InvalidArgumentError(
        "data cache '" + options.dir +
        "' is on a file system that cannot punch holes in files (fallocate: " +
        std::strerror(EOPNOTSUPP) +
        "), so evicted blocks would keep their space: give -o data_cache= a directory on ext4, "
        "xfs, btrfs or tmpfs");
  }
  StoreDbOptions db_options;
  db_options.compaction_min_bytes = 64 << 10;
  Result<std::unique_ptr<RecordTable<DataBlockRecord>>> table =
      RecordTable<DataBlockRecord>::Open(options.dir + "/objects.log", db_options);
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
  std::unordered_map<std::string, int> files;       // open for the check, -1 when not
  std::unordered_map<std::string, uint64_t> sizes;  // of the regular files among them
  std::vector<Freeing> frees;
  {
    MutexLock lock(&mu_);
    for (const DataBlockRecord& record : records) {
      // A record of another mount's URL (the name is derived from it) is not this one's.
      const bool ours = record.block_size == options_.block_size &&
                        record.offset % options_.block_size == 0 &&
                        NameOf(record.key, record.etag, record.offset) == record.name;
      std::string file = ours ? FileOf(record.key, record.etag) : std::string();
      bool usable = ours;
      if (usable) {
        auto [opened, inserted] = files.try_emplace(file, -1);
        if (inserted) {
          opened->second = ::open(PathOf(file).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
          struct stat st {};
          if (opened->second >= 0 && ::fstat(opened->second, &st) == 0 && S_ISREG(st.st_mode)) {
            sizes[file] = static_cast<uint64_t>(st.st_size);
          }
        }
        auto size = sizes.find(file);
        usable = size != sizes.end() && record.offset + record.length <= size->second;
        // A crash between punching an evicted block out and dropping its record leaves a
        // record of a hole: not a block.
        if (usable) {
          const off_t data = ::lseek(opened->second, static_cast<off_t>(record.offset), SEEK_DATA);
          usable = data == static_cast<off_t>(record.offset) || (data < 0 && errno != ENXIO);
        }
      }
      if (!usable) {
        stale.push_back(record.name);
        continue;
      }
      lru_.push_front(record.name);
      ++files_[file].blocks;
      entries_[record.name] = Entry{.length = record.length,
                                    .crc32c = record.crc32c,
                                    .ready = true,
                                    .offset = record.offset,
                                    .file = std::move(file),
                                    .lru = lru_.begin(),
                                    .generation = ++generations_};
      bytes_ += DiskCost(record.length);
      stamp_ = std::max(stamp_, record.stamp);
    }
    // A smaller data_cache_size than last time: the oldest go now.
    while (bytes_ > options_.max_bytes && !lru_.empty()) {
      std::string name = lru_.back();
      Forget(entries_.find(name), &frees);
      stale.push_back(std::move(name));
    }
    UpdateGauge();
  }
  Free(frees);
  for (const auto& [file, fd] : files) {
    if (fd >= 0) ::close(fd);
  }
  for (const std::string& name : stale) (void)table_->Remove(name);

  // What no record names: files (a crash between writing a block and its record, in a new
  // file) are removed, and ranges of the files kept are punched out.
  std::unordered_map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> kept;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, entry] : entries_) {
      kept[entry.file].emplace_back(entry.offset, entry.offset + options_.block_size);
    }
  }
  ForEachCacheFile(options_.dir + "/objects", [&](int sub_fd, const std::string& name) {
    auto ranges = kept.find(name);
    if (ranges == kept.end()) {
      ::unlinkat(sub_fd, name.c_str(), 0);
      return;
    }
    const int fd = ::openat(sub_fd, name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;  // its blocks are misses, dropped when read
    std::sort(ranges->second.begin(), ranges->second.end());
    uint64_t at = 0;
    for (const auto& [from, to] : ranges->second) {
      if (from > at) PunchHole(fd, at, from - at);
      at = std::max(at, to);
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > at) {
      PunchHole(fd, at, static_cast<uint64_t>(st.st_size) - at);
    }
    ::close(fd);
  });
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
  return Hex(md5.Final());
}

std::string DataCache::FileOf(std::string_view key, const ETag& etag) const {
  Md5 md5;
  md5.Update("object\n" + std::to_string(options_.block_size) + "\n" +
             std::to_string(static_cast<int>(etag.kind())) + "\n");
  md5.Update(std::to_string(options_.scope.size()) + ":" + options_.scope);
  md5.Update(std::to_string(key.size()) + ":");
  md5.Update(key);
  md5.Update(etag.value());
  return Hex(md5.Final());
}

std::string DataCache::PathOf(const std::string& file) const {
  return options_.dir + "/objects/" + file.substr(0, 2) + "/" + file;
}

std::string DataCache::BlockPath(std::string_view key, const ETag& etag, uint64_t offset) const {
  (void)offset;
  return PathOf(FileOf(key, etag));
}

void DataCache::UpdateGauge() {
  if (metrics_ != nullptr) metrics_->data_cache_bytes.store(bytes_, std::memory_order_relaxed);
}

std::shared_ptr<DataCache::Descriptor> DataCache::OpenFile(const std::string& file, bool create) {
  auto it = files_.find(file);
  if (it == files_.end()) {
    errno = ENOENT;
    return nullptr;
  }
  if (it->second.open != nullptr) {
    open_lru_.splice(open_lru_.begin(), open_lru_, it->second.open_lru);
    return it->second.open;
  }
  const std::string path = PathOf(file);
  int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    (void)MakeDirectory(options_.dir + "/objects/" + file.substr(0, 2));
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) return nullptr;
  // Every read here is of one whole block, which the cache's index says is there: the kernel's
  // read-ahead would only add disk reads of the blocks after it, which random reads of small
  // blocks never ask for (4 KiB blocks read at a third of the disk's rate with it on). Sequential
  // reads lose nothing: the prefetcher above asks for the next blocks itself.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  while (open_lru_.size() >= options_.max_open_files) CloseFile(files_.find(open_lru_.back()));
  it->second.open = std::make_shared<Descriptor>(fd);
  open_lru_.push_front(file);
  it->second.open_lru = open_lru_.begin();
  return it->second.open;
}

void DataCache::CloseFile(std::unordered_map<std::string, File>::iterator it) {
  if (it == files_.end() || it->second.open == nullptr) return;
  open_lru_.erase(it->second.open_lru);
  it->second.open.reset();  // closed once the reads using it are done
}

void DataCache::Forget(std::unordered_map<std::string, Entry>::iterator it,
                       std::vector<Freeing>* later) {
  const Entry& entry = it->second;
  bytes_ -= DiskCost(entry.length);
  lru_.erase(entry.lru);
  auto file = files_.find(entry.file);
  if (file != files_.end()) {
    if (--file->second.blocks == 0) {
      // Its last block: the file goes. A read still holding its descriptor reads what the
      // file held (checked as ever); a block written to it now is lost, and that write's
      // entry is gone too.
      CloseFile(file);
      files_.erase(file);
      ++removing_[entry.file];
      later->push_back(Freeing{.file = entry.file, .remove = true, .cost = DiskCost(entry.length)});
    } else {
      ++punching_[{entry.file, entry.offset}];
      later->push_back(Freeing{.file = entry.file,
                               .offset = entry.offset,
                               .open = file->second.open,
                               .cost = DiskCost(entry.length)});
    }
    freeing_bytes_ += later->back().cost;
  }
  entries_.erase(it);
}

void DataCache::Free(std::vector<Freeing>& frees) {
  if (frees.empty()) return;
  if (options_.before_free) options_.before_free();
  for (Freeing& f : frees) {
    if (f.remove) {
      // Emptied first: a descriptor still open on it (a read, another eviction's punch) would
      // otherwise keep its blocks on the disk, uncounted, until closed.
      const int fd = ::open(PathOf(f.file).c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) {
        // (Failing, the unlink still frees it once the last descriptor is closed.)
        const bool emptied = ::ftruncate(fd, 0) == 0;
        static_cast<void>(emptied);
        ::close(fd);
      }
      ::unlink(PathOf(f.file).c_str());
    } else if (f.open != nullptr) {
      PunchHole(f.open->fd, f.offset, options_.block_size);
    } else {
      const int fd = ::open(PathOf(f.file).c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) {
        PunchHole(fd, f.offset, options_.block_size);
        ::close(fd);
      }
    }
    f.open.reset();
  }
  MutexLock lock(&mu_);
  for (const Freeing& f : frees) {
    freeing_bytes_ -= f.cost;
    if (f.remove) {
      auto it = removing_.find(f.file);
      if (it != removing_.end() && --it->second == 0) removing_.erase(it);
    } else {
      auto it = punching_.find({f.file, f.offset});
      if (it != punching_.end() && --it->second == 0) punching_.erase(it);
    }
  }
  frees.clear();
}

bool DataCache::BeingFreed(const std::string& file, uint64_t offset) const {
  return removing_.count(file) != 0 || punching_.count({file, offset}) != 0;
}

bool DataCache::Drop(const std::string& name, uint64_t generation) {
  std::vector<Freeing> frees;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end() || !it->second.ready || it->second.generation != generation) {
      return false;
    }
    Forget(it, &frees);
    UpdateGauge();
  }
  Free(frees);
  (void)table_->Remove(name);  // a record left behind names no block: dropped at the next open
  return true;
}

void DataCache::WillNeed(std::string_view key, const ETag& etag, uint64_t offset, uint64_t length) {
  std::shared_ptr<Descriptor> file;
  {
    MutexLock lock(&mu_);
    file = OpenFile(FileOf(key, etag), false);
  }
  if (file != nullptr) {
    (void)::posix_fadvise(file->fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                          POSIX_FADV_WILLNEED);
  }
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
  uint32_t length;
  uint32_t crc;
  uint64_t generation;
  std::shared_ptr<Descriptor> file;
  bool out_of_descriptors = false;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end() || !it->second.ready) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    length = it->second.length;
    crc = it->second.crc32c;
    generation = it->second.generation;
    if (length <= out.size()) {
      file = OpenFile(it->second.file, false);
      out_of_descriptors = file == nullptr && (errno == EMFILE || errno == ENFILE);
    }
  }
  if (length > out.size()) return std::nullopt;
  // Out of descriptors now: a miss, and the block stays.
  if (out_of_descriptors) return std::nullopt;
  std::span<std::byte> data = out.first(length);
  if (file == nullptr || !ReadFully(file->fd, offset, data) || Crc(data) != crc) {
    // Damage, unless the block was evicted (its range punched out, perhaps cached again since)
    // while it was read: then only a miss.
    if (Drop(name, generation)) {
      {
        MutexLock lock(&mu_);
        ++corrupt_;
      }
      if (metrics_ != nullptr) Bump(metrics_->data_cache_corrupt);
    }
    return std::nullopt;
  }
  return static_cast<size_t>(length);
}

void DataCache::StopWriting(const Status& why) {
  if (writing_.exchange(false)) {
    const std::string line =
        "data cache " + options_.dir +
        ": cannot write a block, reads go uncached from now on: " + why.message();
    if (options_.log) options_.log(LogLevel::kWarn, line);
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
  const std::string file = FileOf(key, etag);
  const auto length = static_cast<uint32_t>(data.size());
  const uint32_t crc = Crc(data);
  std::vector<std::string> evicted;
  std::vector<Freeing> frees;
  uint64_t stamp = 0;
  uint64_t generation = 0;
  std::shared_ptr<Descriptor> open;
  bool out_of_descriptors = false;
  bool skipped = false;
  Status written = options_.before_write ? options_.before_write() : Status::Ok();
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
    // Where an eviction still punches or removes, this block would be lost: not cached now.
    if (BeingFreed(file, offset)) return;
    // (What this loop evicts is given back below, before this block is written: only other
    // evictions still under way count.)
    const uint64_t others_freeing = freeing_bytes_;
    while (bytes_ + others_freeing + DiskCost(length) > options_.max_bytes && !lru_.empty()) {
      std::string victim = lru_.back();
      Forget(entries_.find(victim), &frees);
      ++evictions_;
      evicted.push_back(std::move(victim));
    }
    // (Its own file's last other block may just have gone.)
    skipped = BeingFreed(file, offset);
  }
  Free(frees);
  if (metrics_ != nullptr && !evicted.empty()) Bump(metrics_->data_cache_evictions, evicted.size());
  for (const std::string& victim : evicted) (void)table_->Remove(victim);
  if (skipped) return;
  {
    MutexLock lock(&mu_);
    // Another Put took the room evicted for this one meanwhile, or another eviction has not
    // given its space back yet: not cached, the bound holds.
    if (entries_.count(name) != 0 || BeingFreed(file, offset) ||
        bytes_ + freeing_bytes_ + DiskCost(length) > options_.max_bytes) {
      return;
    }
    lru_.push_front(name);
    ++files_[file].blocks;
    entries_[name] = Entry{.length = length,
                           .crc32c = crc,
                           .ready = false,
                           .offset = offset,
                           .file = file,
                           .lru = lru_.begin(),
                           .generation = ++generations_};
    generation = generations_;
    bytes_ += DiskCost(length);
    stamp = ++stamp_;
    UpdateGauge();
    if (written.ok()) {
      open = OpenFile(file, true);
      if (open == nullptr) {
        // Out of descriptors is this moment's: this block is not kept, later ones may be.
        out_of_descriptors = errno == EMFILE || errno == ENFILE;
        written = ErrnoStatus("create", PathOf(file), errno);
      }
    }
  }

  if (written.ok()) written = WriteFully(open->fd, offset, data, PathOf(file));
  if (written.ok()) {
    written = table_->Put(DataBlockRecord{.name = name,
                                          .key = std::string(key),
                                          .etag = etag,
                                          .offset = offset,
                                          .block_size = options_.block_size,
                                          .length = length,
                                          .crc32c = crc,
                                          .stamp = stamp});
  }
  bool gone = false;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      // Evicted while it was written: its range may have been punched out before the write
      // landed, so again, unless the file went with it (the write went to the removed file),
      // and its record goes.
      gone = true;
      if (open != nullptr && files_.count(file) != 0) {
        ++punching_[{file, offset}];
        frees.push_back(
            Freeing{.file = file, .offset = offset, .open = open, .cost = DiskCost(length)});
        freeing_bytes_ += DiskCost(length);
      }
    } else if (it->second.generation != generation) {
      // Evicted, and cached again by another read since: the range, and the record, are that
      // one's now (its write lands the same bytes as this one's did).
    } else if (!written.ok()) {
      if (!it->second.ready) {
        Forget(it, &frees);
        UpdateGauge();
      }
    } else {
      it->second.ready = true;
    }
  }
  Free(frees);
  if (!written.ok() && !out_of_descriptors) StopWriting(written);
  if (gone && written.ok()) (void)table_->Remove(name);
}

DataCache::Stats DataCache::stats() const {
  MutexLock lock(&mu_);
  return Stats{.bytes = bytes_,
               .blocks = entries_.size(),
               .evictions = evictions_,
               .corrupt = corrupt_,
               .files = files_.size(),
               .open_files = open_lru_.size(),
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
  if (end - pos > block) cache_->WillNeed(key, etag, pos, end - pos);
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
