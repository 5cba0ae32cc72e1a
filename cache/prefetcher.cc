#include "cache/prefetcher.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "backend/mutex.h"
#include "cache/buffer_pool.h"
#include "cache/io_pool.h"
#include "cache/read_budget.h"

namespace objfs {
namespace {

constexpr uint64_t kMinReadBuffer = 4 << 10;
// How far from the furthest read a read that no chunk holds may land and still count as
// sequential (the kernel issues its read-ahead requests concurrently, so they arrive out of
// order), and how long a chunk is kept after the reads have passed it: four read buffers, at
// least kMinSlack, at most kMaxSlack unless one buffer is larger.
constexpr uint64_t kMinSlack = 1 << 20;
constexpr uint64_t kMaxSlack = 4 << 20;
// Read-ahead fetches grow with the window so that about this many run at once, each between
// read_buffer and kMaxFetch bytes: a small read_buffer (say 4 KiB, for random reads) does not
// turn a long sequential stream into thousands of page-sized requests.
constexpr uint64_t kFetchesPerWindow = 8;
constexpr uint64_t kMaxFetch = 8 << 20;

enum class ChunkState {
  kQueued,     // charged and in the map; nobody is fetching it yet
  kRunning,    // one thread (a pool worker or a reader) is fetching it
  kReady,      // data holds `filled` bytes of the object from `offset`
  kFailed,     // the fetch failed with `error`; no longer in the map
  kAbandoned,  // dropped before anyone started fetching it
};

// One contiguous range of the object, fetched by exactly one backend read. Chunks start at
// multiples of read_buffer, never overlap, and are read_buffer long (or longer when fetched
// ahead), except the last one of the object.
struct Chunk {
  Chunk(uint64_t offset, uint64_t length) : offset(offset), length(length) {}

  const uint64_t offset;
  const uint64_t length;

  // Guarded by Core::mu.
  ChunkState state = ChunkState::kQueued;
  Status error;
  uint64_t charged = 0;  // bytes held from the ReadBudget
  bool forced = false;   // charged beyond the budget because a read needed it
  bool retired = false;  // removed from Core::chunks

  // Written only by the thread that moved the chunk to kRunning, read only once it is kReady.
  BufferPool::Buffer data;
  uint64_t filled = 0;
};

// The state fetch tasks share with the Prefetcher. Tasks hold it by shared_ptr, so a task still
// queued on the pool when the Prefetcher is destroyed finds it alive: it sees its chunk abandoned
// and returns without touching the store or the budget.
//
// Locking: `mu` is the only mutex here. It is never held across a backend read or
// IoPool::Submit, and the pool runs tasks without holding its own mutex, so the two never nest.
struct Core {
  Core(std::shared_ptr<ObjectStore> store, std::string key, ETag etag, uint64_t size,
       const PrefetchOptions& options, ReadBudget& budget)
      : store(std::move(store)),
        key(std::move(key)),
        etag(std::move(etag)),
        size(size),
        read_buffer(std::max<uint64_t>(options.read_buffer, kMinReadBuffer)),
        max_readahead(std::max<uint64_t>(options.max_readahead, read_buffer)),
        slack(std::max(kMinSlack, std::min(4 * read_buffer, std::max(read_buffer, kMaxSlack)))),
        budget(budget),
        window(read_buffer) {}

  uint64_t AlignDown(uint64_t offset) const { return offset - offset % read_buffer; }
  uint64_t LengthAt(uint64_t pos) const { return std::min(read_buffer, size - pos); }
  // The length of a read-ahead fetch for the current window.
  uint64_t AheadFetchLocked() const REQUIRES(mu) {
    const uint64_t want = std::min(window / kFetchesPerWindow, std::max(kMaxFetch, read_buffer));
    return std::max(read_buffer, AlignDown(want));
  }
  // The chunk holding byte `pos`, or null.
  std::shared_ptr<Chunk> CoveringLocked(uint64_t pos) const REQUIRES(mu);
  // Whether chunks hold (or are fetching) every byte of [offset, end).
  bool HeldLocked(uint64_t offset, uint64_t end) const REQUIRES(mu);

  // Whether a read at `offset` lands within the slack of the stream's furthest read.
  bool NearStreamLocked(uint64_t offset) const REQUIRES(mu);
  // Records a read of [offset, end) and adapts the window. Returns whether it continues the
  // sequential stream.
  bool NoteAccessLocked(uint64_t offset, uint64_t end) REQUIRES(mu);
  // Drops chunks that the read of [offset, end) shows to be no longer useful.
  void DropUselessLocked(uint64_t offset, uint64_t end, bool sequential) REQUIRES(mu);
  // Creates chunks so that `window` bytes after `end` are fetched or being fetched, as far as
  // the budget allows, and appends them to `out` for the pool.
  void ScheduleAheadLocked(uint64_t end, std::vector<std::shared_ptr<Chunk>>* out) REQUIRES(mu);
  // A new queued chunk holding bytes [pos, want_end) as far as the next chunk (and kMaxFetch)
  // allow, in whole buffers, in the map, charged even beyond the budget. There must be no chunk
  // holding `pos`.
  std::shared_ptr<Chunk> NewNeededChunkLocked(uint64_t pos, uint64_t want_end) REQUIRES(mu);
  void RetireLocked(const std::shared_ptr<Chunk>& chunk) REQUIRES(mu);
  void EraseLocked(std::map<uint64_t, std::shared_ptr<Chunk>>::iterator it) REQUIRES(mu);
  void ReleaseChargeLocked(Chunk& chunk) REQUIRES(mu);
  void FinishLocked(const std::shared_ptr<Chunk>& chunk, Status status) REQUIRES(mu);

  // One backend read into the chunk. Called without mu, by the thread that made it kRunning.
  Status Fetch(Chunk& chunk) EXCLUDES(mu);
  // The body of a pool task: fetches the chunk unless a reader claimed it or it was dropped.
  void RunQueued(const std::shared_ptr<Chunk>& chunk) EXCLUDES(mu);
  // Waits until `chunk` (which holds byte `pos`) is ready, fetching it here if nobody has started
  // to, and fetching `pos` again once when it failed with a transient error or was dropped.
  // The chunk returned holds `pos`.
  Result<std::shared_ptr<Chunk>> Await(std::shared_ptr<Chunk> chunk, uint64_t pos) EXCLUDES(mu);

  const std::shared_ptr<ObjectStore> store;
  const std::string key;
  const ETag etag;
  const uint64_t size;
  const uint64_t read_buffer;
  const uint64_t max_readahead;
  const uint64_t slack;
  // Outlives every access: only readers and running fetches touch it, and ~Prefetcher waits for
  // running fetches.
  ReadBudget& budget;

  Mutex mu;         // lock 10 of fs/lock_order.h
  CondVar changed;  // a chunk left kQueued/kRunning, or `running` dropped
  // By offset, each aligned to read_buffer.
  std::map<uint64_t, std::shared_ptr<Chunk>> chunks GUARDED_BY(mu);
  int running GUARDED_BY(mu) = 0;             // chunks in kRunning
  bool have_last GUARDED_BY(mu) = false;      // whether a read was seen yet
  uint64_t last_end GUARDED_BY(mu) = 0;       // the end of the furthest read of the current stream
  uint64_t window GUARDED_BY(mu);             // bytes to keep fetched ahead of the stream
  uint64_t prefetched_to GUARDED_BY(mu) = 0;  // chunks below this were already scheduled
  Status stale GUARDED_BY(mu);  // PreconditionFailed once the object changed underneath
};

bool Core::NearStreamLocked(uint64_t offset) const {
  return have_last && offset + slack >= last_end && offset <= last_end + slack;
}

bool Core::NoteAccessLocked(uint64_t offset, uint64_t end) {
  const bool sequential = NearStreamLocked(offset);
  if (sequential) {
    window = std::min(window * 2, max_readahead);
    last_end = std::max(last_end, end);
  } else {
    window = read_buffer;
    last_end = end;
    prefetched_to = 0;
  }
  have_last = true;
  return sequential;
}

void Core::DropUselessLocked(uint64_t offset, uint64_t end, bool sequential) {
  for (auto it = chunks.begin(); it != chunks.end();) {
    const Chunk& chunk = *it->second;
    const bool overlaps = chunk.offset < end && offset < chunk.offset + chunk.length;
    bool drop;
    if (sequential) {
      // Behind the stream by more than the slack, or a forced chunk the read does not need.
      drop = chunk.offset + chunk.length + slack <= offset || (chunk.forced && !overlaps);
    } else {
      drop = !overlaps;
    }
    if (drop) {
      auto next = std::next(it);
      EraseLocked(it);
      it = next;
    } else {
      ++it;
    }
  }
}

std::shared_ptr<Chunk> Core::CoveringLocked(uint64_t pos) const {
  auto it = chunks.upper_bound(pos);
  if (it == chunks.begin()) return nullptr;
  --it;
  if (pos >= it->second->offset + it->second->length) return nullptr;
  return it->second;
}

bool Core::HeldLocked(uint64_t offset, uint64_t end) const {
  for (uint64_t pos = offset; pos < end;) {
    std::shared_ptr<Chunk> chunk = CoveringLocked(pos);
    if (chunk == nullptr) return false;
    pos = chunk->offset + chunk->length;
  }
  return true;
}

void Core::ScheduleAheadLocked(uint64_t end, std::vector<std::shared_ptr<Chunk>>* out) {
  const uint64_t limit = std::min(size, end + window);
  const uint64_t fetch = AheadFetchLocked();
  uint64_t pos = std::max(AlignDown(end), prefetched_to);
  while (pos < limit) {
    auto next = chunks.upper_bound(pos);
    if (std::shared_ptr<Chunk> held = CoveringLocked(pos)) {
      pos = held->offset + held->length;
      continue;
    }
    // Up to `fetch` bytes, stopping at the next chunk (both are multiples of read_buffer).
    uint64_t length = std::min(fetch, size - pos);
    if (next != chunks.end()) length = std::min(length, next->first - pos);
    if (!budget.TryAcquire(length)) break;
    auto chunk = std::make_shared<Chunk>(pos, length);
    chunk->charged = length;
    chunks.emplace(pos, chunk);
    out->push_back(std::move(chunk));
    pos += length;
  }
  prefetched_to = std::max(prefetched_to, pos);
}

std::shared_ptr<Chunk> Core::NewNeededChunkLocked(uint64_t pos, uint64_t want_end) {
  pos = AlignDown(pos);
  want_end = std::min(std::max(want_end, pos + 1), size);
  uint64_t length = AlignDown(want_end - pos + read_buffer - 1);
  length = std::min({length, std::max(kMaxFetch, read_buffer), size - pos});
  auto next = chunks.upper_bound(pos);
  if (next != chunks.end()) length = std::min(length, next->first - pos);
  auto chunk = std::make_shared<Chunk>(pos, length);
  if (!budget.TryAcquire(chunk->length)) {
    budget.ForceAcquire(chunk->length);
    chunk->forced = true;
  }
  chunk->charged = chunk->length;
  chunks.insert_or_assign(pos, chunk);
  return chunk;
}

void Core::RetireLocked(const std::shared_ptr<Chunk>& chunk) {
  chunk->retired = true;
  if (chunk->state == ChunkState::kQueued) {
    chunk->state = ChunkState::kAbandoned;
    changed.SignalAll();
  }
  // A running fetch still fills its buffer: it returns the charge when it finishes.
  if (chunk->state != ChunkState::kRunning) ReleaseChargeLocked(*chunk);
}

void Core::EraseLocked(std::map<uint64_t, std::shared_ptr<Chunk>>::iterator it) {
  RetireLocked(it->second);
  chunks.erase(it);
}

void Core::ReleaseChargeLocked(Chunk& chunk) {
  if (chunk.charged == 0) return;
  budget.Release(chunk.charged);
  chunk.charged = 0;
}

void Core::FinishLocked(const std::shared_ptr<Chunk>& chunk, Status status) {
  --running;
  if (status.ok()) {
    chunk->state = ChunkState::kReady;
  } else {
    chunk->state = ChunkState::kFailed;
    if (status.code() == StatusCode::kPreconditionFailed) stale = status;
    chunk->error = std::move(status);
    chunk->data.reset();
    auto it = chunks.find(chunk->offset);
    if (it != chunks.end() && it->second == chunk) chunks.erase(it);
    chunk->retired = true;
  }
  if (chunk->retired) ReleaseChargeLocked(*chunk);
  changed.SignalAll();
}

Status Core::Fetch(Chunk& chunk) {
  chunk.data = BufferPool::Shared().Get(chunk.length);
  if (chunk.data == nullptr) {
    return Status(StatusCode::kIoError,
                  "no memory for a read buffer of " + std::to_string(chunk.length) + " bytes");
  }
  Result<size_t> n = store->read(key, chunk.offset, std::span(chunk.data.get(), chunk.length),
                                 etag.empty() ? nullptr : &etag);
  if (!n.ok()) return n.status();
  chunk.filled = std::min<uint64_t>(*n, chunk.length);
  return Status::Ok();
}

void Core::RunQueued(const std::shared_ptr<Chunk>& chunk) {
  {
    MutexLock lock(&mu);
    if (chunk->state != ChunkState::kQueued) return;
    chunk->state = ChunkState::kRunning;
    ++running;
  }
  Status status = Fetch(*chunk);
  MutexLock lock(&mu);
  FinishLocked(chunk, std::move(status));
}

Result<std::shared_ptr<Chunk>> Core::Await(std::shared_ptr<Chunk> chunk, uint64_t pos) {
  bool retried = false;
  MutexLock lock(&mu);
  for (;;) {
    if (chunk->state == ChunkState::kQueued) {
      // Nobody has started it (the pool may be busy with other files): fetch it here.
      chunk->state = ChunkState::kRunning;
      ++running;
      lock.Unlock();
      Status status = Fetch(*chunk);
      lock.Lock();
      FinishLocked(chunk, std::move(status));
    }
    while (chunk->state == ChunkState::kRunning) changed.Wait(&mu);
    if (chunk->state == ChunkState::kReady) return chunk;
    if (chunk->state == ChunkState::kFailed) {
      if (chunk->error.code() != StatusCode::kTransient || retried) return chunk->error;
      retried = true;
    }
    // Dropped before it was fetched, or a transient failure worth one more try: join a fetch
    // that another reader already started, or fetch it again.
    chunk = CoveringLocked(pos);
    if (chunk == nullptr) chunk = NewNeededChunkLocked(pos, pos + 1);
  }
}

}  // namespace

struct Prefetcher::State {
  std::shared_ptr<Core> core;
  IoPool& pool;
  Metrics* metrics;
};

Prefetcher::Prefetcher(std::shared_ptr<ObjectStore> store, std::string key, ETag etag,
                       uint64_t size, const PrefetchOptions& options, IoPool& pool,
                       ReadBudget& budget, Metrics* metrics)
    : state_(new State{std::make_shared<Core>(std::move(store), std::move(key), std::move(etag),
                                              size, options, budget),
                       pool, metrics}) {}

Prefetcher::~Prefetcher() {
  Core& core = *state_->core;
  MutexLock lock(&core.mu);
  while (!core.chunks.empty()) core.EraseLocked(core.chunks.begin());
  // Queued tasks are now no-ops; running fetches still write into their chunks and return
  // their charge to the budget, so wait for them.
  while (core.running != 0) core.changed.Wait(&core.mu);
}

Result<size_t> Prefetcher::Read(uint64_t offset, std::span<std::byte> buf) {
  std::vector<ReadSegment> segments;
  OBJFS_ASSIGN_OR_RETURN(size_t n, ReadSegments(offset, buf.size(), &segments));
  size_t done = 0;
  for (const ReadSegment& segment : segments) {
    std::memcpy(buf.data() + done, segment.data, segment.size);
    done += segment.size;
  }
  return n;
}

Result<size_t> Prefetcher::ReadSegments(uint64_t offset, size_t size,
                                        std::vector<ReadSegment>* out) {
  Core& core = *state_->core;
  if (offset >= core.size || size == 0) return size_t{0};
  const uint64_t end = offset + std::min<uint64_t>(size, core.size - offset);

  std::vector<std::shared_ptr<Chunk>> parts;      // the chunks covering [offset, end), in order
  std::vector<std::shared_ptr<Chunk>> to_submit;  // chunks for the pool
  bool hit = true;
  {
    MutexLock lock(&core.mu);
    if (!core.stale.ok()) return core.stale;
    // The kernel's read-ahead requests arrive out of order, by more than the slack when its
    // read-ahead is large. A read that chunks already hold, away from the stream, is served
    // and changes nothing: neither the window, nor what is kept, nor what is fetched ahead
    // (a random reader that lands in the read-ahead does not grow it either). A late one
    // near the stream drops nothing.
    const bool held = core.HeldLocked(offset, end);
    bool sequential = false;
    if (!held || core.NearStreamLocked(offset)) {
      const uint64_t stream_end = core.last_end;
      const bool behind = core.have_last && end <= stream_end;
      sequential = core.NoteAccessLocked(offset, end);
      // What is behind the stream goes, not what is behind a read that arrived early: the
      // reads it overtook still need their chunks.
      if (!(held && behind)) {
        core.DropUselessLocked(sequential ? std::min(offset, stream_end) : offset, end, sequential);
      }
    }
    bool first_missing = true;
    for (uint64_t pos = offset; pos < end;) {
      std::shared_ptr<Chunk> chunk = core.CoveringLocked(pos);
      if (chunk == nullptr) {
        chunk = core.NewNeededChunkLocked(pos, end);
        // This thread fetches the first missing chunk itself; the pool may start the others
        // meanwhile (whichever reaches a queued chunk first fetches it).
        if (!first_missing) to_submit.push_back(chunk);
        first_missing = false;
      }
      if (chunk->state != ChunkState::kReady) hit = false;
      pos = chunk->offset + chunk->length;
      parts.push_back(std::move(chunk));
    }
    if (sequential) core.ScheduleAheadLocked(end, &to_submit);
  }
  if (state_->metrics != nullptr) {
    Bump(hit ? state_->metrics->cache_hits : state_->metrics->cache_misses);
  }
  for (std::shared_ptr<Chunk>& chunk : to_submit) {
    state_->pool.Submit(
        [core = state_->core, chunk = std::move(chunk)] { core->RunQueued(chunk); });
  }

  // Copies chunk by chunk. A chunk fetched again after a failure may be shorter than the part it
  // replaces; the bytes after it then come from whichever chunk holds them by then.
  uint64_t pos = offset;
  size_t next_part = 0;
  while (pos < end) {
    while (next_part < parts.size() && parts[next_part]->offset + parts[next_part]->length <= pos) {
      ++next_part;
    }
    std::shared_ptr<Chunk> want;
    if (next_part < parts.size() && parts[next_part]->offset <= pos) {
      want = std::move(parts[next_part++]);
    } else {
      MutexLock lock(&core.mu);
      want = core.CoveringLocked(pos);
      if (want == nullptr) want = core.NewNeededChunkLocked(pos, end);
    }
    OBJFS_ASSIGN_OR_RETURN(std::shared_ptr<Chunk> chunk, core.Await(std::move(want), pos));
    const uint64_t to = std::min(end, chunk->offset + chunk->filled);
    if (to > pos) {
      const std::byte* data = chunk->data.get() + (pos - chunk->offset);
      out->push_back(ReadSegment{chunk, data, static_cast<size_t>(to - pos)});
      pos = to;
    }
    if (chunk->filled < chunk->length) break;  // the object ended early
  }
  return static_cast<size_t>(pos - offset);
}

}  // namespace objfs
