// Turns the kernel's reads of an open file into few, large backend reads.
//
// A kernel read (4 KiB .. 1 MiB) never becomes a backend call of its own: the prefetcher reads
// whole buffers of at least `read_buffer` bytes and serves following reads from memory. When
// reads are sequential (tolerating the kernel's out-of-order read-ahead requests) the window
// doubles up to `max_readahead` and is fetched ahead by parallel ranged reads on the IoPool, each
// an eighth of the window (at least read_buffer, at most 8 MiB unless read_buffer is larger), so a
// small read_buffer keeps random reads cheap without making a long stream page-sized requests; a
// random read fetches one buffer and resets the window (one that lands in what is already fetched
// is served from it and changes nothing). All prefetch memory comes from one
// ReadBudget shared by every open file, so a thousand open files cannot exhaust memory. Every
// backend read carries If-Match with the ETag seen at open: an object replaced underneath fails
// with PreconditionFailed (ESTALE), never a mix of old and new bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/etag.h"
#include "backend/metrics.h"
#include "backend/object_store.h"
#include "backend/status.h"

namespace objfs {

class IoPool;      // cache/io_pool.h: a bounded thread pool for backend I/O
class ReadBudget;  // cache/read_budget.h: the global byte budget for prefetched data

// A piece of a read, in memory that the prefetcher (or the filesystem) holds: valid while
// `owner` lives. Lets a FUSE reply go out straight from the read-ahead buffers.
struct ReadSegment {
  std::shared_ptr<const void> owner;
  const std::byte* data = nullptr;
  size_t size = 0;
};

struct PrefetchOptions {
  size_t read_buffer = 1 << 20;     // smallest backend read; configurable down to 4 KiB
  size_t max_readahead = 64 << 20;  // the largest sequential window
};

class Prefetcher {
 public:
  // `key`, `etag` and `size` describe the object as seen at open.
  Prefetcher(std::shared_ptr<ObjectStore> store, std::string key, ETag etag, uint64_t size,
             const PrefetchOptions& options, IoPool& pool, ReadBudget& budget, Metrics* metrics);
  ~Prefetcher();  // cancels/waits for reads in flight and returns their budget
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Fills buf with the bytes at offset; returns how many (short only at the end of the object).
  // Thread-safe (the kernel may issue reads of one handle concurrently).
  Result<size_t> Read(uint64_t offset, std::span<std::byte> buf);

  // Read without the copy: appends the pieces holding the `size` bytes at `offset` (fewer only
  // at the end of the object) to `out`, and returns how many bytes they hold.
  Result<size_t> ReadSegments(uint64_t offset, size_t size, std::vector<ReadSegment>* out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace objfs
