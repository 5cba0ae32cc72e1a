#include "cache/buffer_pool.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace objfs {
namespace {

// Smaller buffers come from the heap. (Read buffers on SFTP are whole multiples of the
// server's max read length: 1,044,480 bytes for the default 1 MiB on OpenSSH.)
constexpr size_t kPooled = 512 << 10;
constexpr size_t kUnit = 64 << 10;
constexpr size_t kHugePage = 2 << 20;

std::byte* Map(size_t capacity) {
  if (capacity < kHugePage) {
    void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  // Over-map by a huge page and trim both ends, so the buffer starts on a 2 MiB boundary.
  const size_t mapped = capacity + kHugePage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
  if (aligned > start) ::munmap(p, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + capacity) {
    ::munmap(reinterpret_cast<void*>(aligned + capacity), end - (aligned + capacity));
  }
  auto* data = reinterpret_cast<std::byte*>(aligned);
  // Only advice: without transparent huge pages the buffer works as well, in 4 KiB pages.
  (void)::madvise(data, capacity, MADV_HUGEPAGE);
  return data;
}

}  // namespace

BufferPool& BufferPool::Shared() {
  // Enough for the buffers of a few streams between one fetch and the next; never destroyed, so
  // buffers dropped during exit still find it.
  static BufferPool* pool = new BufferPool(64 << 20);
  return *pool;
}

BufferPool::~BufferPool() {
  for (auto& [capacity, buffers] : idle_) {
    for (std::byte* data : buffers) ::munmap(data, capacity);
  }
}

size_t BufferPool::CapacityFor(size_t size) {
  if (size == 0) size = 1;
  if (size < kPooled) return size;
  const size_t unit = size >= kHugePage ? kHugePage : kUnit;
  return (size + unit - 1) / unit * unit;
}

BufferPool::Buffer BufferPool::Get(size_t size) {
  const size_t capacity = CapacityFor(size);
  if (capacity < kPooled) {
    return Buffer(new (std::nothrow) std::byte[capacity], Deleter(nullptr, capacity));
  }
  {
    MutexLock lock(&mu_);
    // The smallest idle buffer that fits, unless it is over half as large again as asked.
    for (auto it = idle_.lower_bound(capacity);
         it != idle_.end() && it->first <= capacity + capacity / 2; ++it) {
      if (it->second.empty()) continue;
      std::byte* data = it->second.back();
      it->second.pop_back();
      idle_bytes_ -= it->first;
      return Buffer(data, Deleter(this, it->first));
    }
  }
  std::byte* data = Map(capacity);
  if (data == nullptr) return Buffer(nullptr, Deleter());
  return Buffer(data, Deleter(this, capacity));
}

void BufferPool::SetKeepBytes(size_t keep_bytes) {
  std::vector<std::pair<std::byte*, size_t>> excess;
  {
    MutexLock lock(&mu_);
    keep_bytes_ = keep_bytes;
    for (auto it = idle_.rbegin(); it != idle_.rend() && idle_bytes_ > keep_bytes_; ++it) {
      while (!it->second.empty() && idle_bytes_ > keep_bytes_) {
        excess.emplace_back(it->second.back(), it->first);
        it->second.pop_back();
        idle_bytes_ -= it->first;
      }
    }
  }
  for (auto [data, capacity] : excess) ::munmap(data, capacity);
}

size_t BufferPool::idle_bytes() const {
  MutexLock lock(&mu_);
  return idle_bytes_;
}

void BufferPool::Put(std::byte* data, size_t capacity) {
  // Idle memory the kernel may take back under pressure; reused before that, it costs nothing.
  (void)::madvise(data, capacity, MADV_FREE);
  {
    MutexLock lock(&mu_);
    if (idle_bytes_ + capacity <= keep_bytes_) {
      idle_[capacity].push_back(data);
      idle_bytes_ += capacity;
      return;
    }
  }
  ::munmap(data, capacity);
}

void BufferPool::Deleter::operator()(std::byte* data) const {
  if (data == nullptr) return;
  if (pool_ == nullptr) {
    delete[] data;  // a heap buffer
  } else {
    pool_->Put(data, capacity_);
  }
}

}  // namespace objfs
