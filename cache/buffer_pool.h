// Memory for read-ahead buffers, reused instead of returned to the kernel.
//
// A sequential read moves every byte through a freshly allocated buffer: the backend fills it,
// the kernel copies it into the reader's pages. Buffers of several MiB come from mmap, so each
// one costs page faults (zeroed pages) when filled and an munmap when dropped, and the reply to
// the kernel pins each of its 4 KiB pages. Buffers from this pool are kept for the next fetch
// once dropped, and large ones are aligned to 2 MiB and advised as transparent huge pages,
// which the kernel pins and copies from a huge page at a time.
//
// Buffers under 512 KiB are plain heap memory of the exact size, not pooled. Thread-safe. The pool
// keeps at most `keep_bytes` of idle buffers; beyond that a dropped buffer is unmapped.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "backend/mutex.h"

namespace objfs {

class BufferPool {
 public:
  explicit BufferPool(size_t keep_bytes) : keep_bytes_(keep_bytes) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The pool every prefetcher shares.
  static BufferPool& Shared();

  class Deleter {
   public:
    Deleter() = default;
    Deleter(BufferPool* pool, size_t capacity) : pool_(pool), capacity_(capacity) {}
    void operator()(std::byte* data) const;

   private:
    BufferPool* pool_ = nullptr;
    size_t capacity_ = 0;
  };
  using Buffer = std::unique_ptr<std::byte[], Deleter>;

  // A buffer of at least `size` bytes (not zeroed), null when memory is exhausted. A pooled one
  // may be an idle buffer up to half as large again.
  Buffer Get(size_t size);

  // Changes the limit on idle buffers, unmapping those beyond it.
  void SetKeepBytes(size_t keep_bytes);

  // Bytes of idle buffers held for reuse (for tests).
  size_t idle_bytes() const;

  // The size Get(size) allocates: `size` below 1 MiB, else whole 64 KiB units, or whole 2 MiB
  // huge pages from 2 MiB.
  static size_t CapacityFor(size_t size);

 private:
  void Put(std::byte* data, size_t capacity);

  mutable Mutex mu_;  // lock 19 of fs/lock_order.h
  size_t keep_bytes_ GUARDED_BY(mu_);
  // Idle buffers by capacity.
  std::map<size_t, std::vector<std::byte*>> idle_ GUARDED_BY(mu_);
  size_t idle_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace objfs
