#include "cache/prefetcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/io_pool.h"
#include "cache/read_budget.h"

namespace objfs {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
// A generous deadline for events that, when the code works, happen within milliseconds.
constexpr auto kDeadline = std::chrono::seconds(30);
constexpr char kKey[] = "dir/object";

// Deterministic, position-dependent bytes, so that a byte from the wrong offset shows.
std::string Pattern(uint64_t size, uint32_t seed) {
  std::string out(size, '\0');
  std::mt19937 rng(seed);
  for (uint64_t i = 0; i < size; i += 4) {
    const uint32_t word = rng();
    std::memcpy(out.data() + i, &word, std::min<uint64_t>(4, size - i));
  }
  return out;
}

// One object in memory, with a record of every read: its offset, size, If-Match and thread.
// Reads can be held at a gate (to observe how many are in flight at once) and made to fail.
class RecordingStore : public ObjectStore {
 public:
  struct Call {
    uint64_t offset;
    size_t size;
    std::string if_match;
    std::thread::id thread;
  };

  void SetObject(std::string data) {
    std::lock_guard lock(mu_);
    data_ = std::move(data);
    etag_ = ETag::Parse("\"version-" + std::to_string(++version_) + "\"");
  }
  ETag etag() const {
    std::lock_guard lock(mu_);
    return etag_;
  }

  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  int max_in_flight() const {
    std::lock_guard lock(mu_);
    return max_in_flight_;
  }
  // The next reads at `offset` fail with these statuses, in order.
  void FailReadsAt(uint64_t offset, std::vector<Status> failures) {
    std::lock_guard lock(mu_);
    failures_at_[offset].assign(failures.begin(), failures.end());
  }
  // Called at the start of every read, without the store's lock.
  void OnRead(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    on_read_ = std::move(hook);
  }

  void CloseGate() {
    std::lock_guard lock(mu_);
    gate_open_ = false;
  }
  void OpenGate() {
    std::lock_guard lock(mu_);
    gate_open_ = true;
    changed_.notify_all();
  }
  // Waits until `n` reads are held at the closed gate at once.
  bool WaitForBlocked(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, kDeadline, [&] { return blocked_ >= n; });
  }
  int blocked() const {
    std::lock_guard lock(mu_);
    return blocked_;
  }

  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      hook = on_read_;
    }
    if (hook) hook();
    std::unique_lock lock(mu_);
    calls_.push_back(
        {offset, buf.size(), if_match ? if_match->value() : "", std::this_thread::get_id()});
    ++in_flight_;
    max_in_flight_ = std::max(max_in_flight_, in_flight_);
    ++blocked_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return gate_open_; });
    --blocked_;
    Result<size_t> result = ReadLocked(key, offset, buf, if_match);
    --in_flight_;
    return result;
  }

  Result<ObjectInfo> head(std::string_view key) override {
    std::lock_guard lock(mu_);
    if (key != kKey) return NotFoundError(std::string(key));
    ObjectInfo info;
    info.key = key;
    info.size = data_.size();
    info.etag = etag_;
    return info;
  }
  Result<Listing> list(const ListOptions&) override { return UnsupportedError("list"); }
  Result<ObjectInfo> put(std::string_view, const ByteSource&, const PutOptions&) override {
    return UnsupportedError("put");
  }
  Result<ObjectInfo> copy(const ObjectInfo&, std::string_view, const CopyOptions&) override {
    return UnsupportedError("copy");
  }
  Result<ObjectInfo> set_attributes(std::string_view, const Metadata&,
                                    const SetAttributesOptions&) override {
    return UnsupportedError("set_attributes");
  }
  Status remove(std::string_view) override { return UnsupportedError("remove"); }
  Status remove_many(const std::vector<std::string>&) override {
    return UnsupportedError("remove_many");
  }
  Capabilities capabilities() const override { return {.scheme = "recording"}; }
  std::string describe() const override { return "recording://"; }

 private:
  Result<size_t> ReadLocked(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                            const ETag* if_match) {
    if (auto it = failures_at_.find(offset); it != failures_at_.end() && !it->second.empty()) {
      Status failure = it->second.front();
      it->second.pop_front();
      return failure;
    }
    if (key != kKey) return NotFoundError(std::string(key));
    if (if_match != nullptr && *if_match != etag_) return PreconditionFailedError("etag changed");
    if (offset >= data_.size()) return size_t{0};
    const size_t n = std::min<uint64_t>(buf.size(), data_.size() - offset);
    std::memcpy(buf.data(), data_.data() + offset, n);
    return n;
  }

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::string data_;
  ETag etag_;
  int version_ = 0;
  std::vector<Call> calls_;
  std::map<uint64_t, std::deque<Status>> failures_at_;
  std::function<void()> on_read_;
  bool gate_open_ = true;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  int blocked_ = 0;
};

class PrefetcherTest : public ::testing::Test {
 protected:
  void SetObject(std::string data) {
    source_ = data;
    store_->SetObject(std::move(data));
  }

  std::unique_ptr<Prefetcher> Open(PrefetchOptions options) {
    return std::make_unique<Prefetcher>(store_, kKey, store_->etag(), source_.size(), options,
                                        pool_, budget_, &metrics_);
  }

  // Reads [offset, offset + n) and expects the source's bytes (short at the end of the object).
  void ExpectRead(Prefetcher& p, uint64_t offset, size_t n) {
    std::vector<std::byte> buf(n);
    Result<size_t> got = p.Read(offset, buf);
    ASSERT_TRUE(got.ok()) << got.status().ToString() << " at " << offset;
    const size_t want =
        offset >= source_.size() ? 0 : std::min<uint64_t>(n, source_.size() - offset);
    ASSERT_EQ(*got, want) << "at " << offset;
    ASSERT_EQ(
        std::memcmp(buf.data(), source_.data() + std::min<uint64_t>(offset, source_.size()), want),
        0)
        << "wrong bytes in [" << offset << ", " << offset + want << ")";
  }

  // The most a budget held when a backend read started.
  struct BudgetPeak {
    std::mutex mu;
    uint64_t bytes = 0;
  };
  void RecordPeakAtEachRead(const ReadBudget& budget, BudgetPeak& peak) {
    store_->OnRead([&budget, &peak] {
      std::lock_guard lock(peak.mu);
      peak.bytes = std::max(peak.bytes, budget.in_use());
    });
  }

  uint64_t TotalBackendBytes() const {
    uint64_t total = 0;
    for (const auto& call : store_->calls()) {
      total += std::min<uint64_t>(call.size, source_.size() - call.offset);
    }
    return total;
  }

  std::shared_ptr<RecordingStore> store_ = std::make_shared<RecordingStore>();
  std::string source_;
  Metrics metrics_;
  ReadBudget budget_{256 * kMiB};
  IoPool pool_{16};
};

TEST_F(PrefetcherTest, SequentialReadUsesLargeBackendReadsAndFetchesEachByteOnce) {
  SetObject(Pattern(64 * kMiB, 1));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 64 * kMiB});
  for (uint64_t off = 0; off < source_.size(); off += 128 * kKiB) {
    ExpectRead(*p, off, 128 * kKiB);
  }
  p.reset();
  const auto calls = store_->calls();
  uint64_t largest = 0;
  for (const auto& call : calls) {
    // Whole buffers; read-ahead fetches grow with the window up to 8 MiB.
    EXPECT_EQ(call.size % kMiB, 0u) << "at " << call.offset;
    EXPECT_GE(call.size, 1 * kMiB) << "at " << call.offset;
    EXPECT_LE(call.size, 8 * kMiB) << "at " << call.offset;
    EXPECT_EQ(call.offset % kMiB, 0u);
    EXPECT_EQ(call.if_match, store_->etag().value());
    largest = std::max<uint64_t>(largest, call.size);
  }
  EXPECT_EQ(largest, 8 * kMiB);
  EXPECT_EQ(TotalBackendBytes(), source_.size());
  EXPECT_LE(calls.size(), 24u);
  EXPECT_EQ(budget_.in_use(), 0u);
  EXPECT_GT(metrics_.cache_hits.load(), 400u);  // 512 reads; all but a few come from memory
}

TEST_F(PrefetcherTest, ReadSegmentsPointIntoTheReadAheadBuffersWithoutCopying) {
  SetObject(Pattern(3 * kMiB + 5, 2));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 4 * kMiB});
  // After the first buffer is in, a read across its end is two pieces; the same bytes read
  // again are the same memory.
  ExpectRead(*p, 0, 100);
  std::vector<ReadSegment> first;
  Result<size_t> n = p->ReadSegments(kMiB - 100, 300, &first);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 300u);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].size, 100u);
  EXPECT_EQ(first[1].size, 200u);
  std::string got;
  for (const ReadSegment& segment : first) {
    got.append(reinterpret_cast<const char*>(segment.data), segment.size);
  }
  EXPECT_EQ(got, source_.substr(kMiB - 100, 300));
  std::vector<ReadSegment> again;
  ASSERT_TRUE(p->ReadSegments(kMiB - 100, 100, &again).ok());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].data, first[0].data);
  // Short at the end of the object; nothing past it.
  std::vector<ReadSegment> tail;
  n = p->ReadSegments(3 * kMiB, kMiB, &tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  std::vector<ReadSegment> past;
  n = p->ReadSegments(4 * kMiB, kMiB, &past);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_TRUE(past.empty());
  // The pieces keep their memory alive after the prefetcher is gone.
  p.reset();
  EXPECT_EQ(std::memcmp(first[1].data, source_.data() + kMiB, 200), 0);
}

TEST_F(PrefetcherTest, ReadBufferConfigurableDownTo4KiB) {
  SetObject(Pattern(1 * kMiB, 2));
  auto p = Open({.read_buffer = 4 * kKiB, .max_readahead = 256 * kKiB});
  for (uint64_t off = 0; off < source_.size(); off += 128 * kKiB) ExpectRead(*p, off, 128 * kKiB);
  p.reset();
  const auto calls = store_->calls();
  ASSERT_FALSE(calls.empty());
  // The first read is one request for exactly its buffers; the rest are read-ahead in multiples
  // of the buffer.
  EXPECT_EQ(calls.front().size, 128 * kKiB);
  for (const auto& call : calls) {
    EXPECT_EQ(call.size % (4 * kKiB), 0u);
    EXPECT_EQ(call.offset % (4 * kKiB), 0u);
  }
  EXPECT_EQ(TotalBackendBytes(), source_.size());
}

TEST_F(PrefetcherTest, SmallReadBufferStillStreamsInLargeFetches) {
  // 4 KiB buffers with a 64 MiB window: a stream must not become 16,384 page-sized requests.
  SetObject(Pattern(64 * kMiB, 2));
  auto p = Open({.read_buffer = 4 * kKiB, .max_readahead = 64 * kMiB});
  for (uint64_t off = 0; off < source_.size(); off += 128 * kKiB) ExpectRead(*p, off, 128 * kKiB);
  p.reset();
  const auto calls = store_->calls();
  uint64_t largest = 0;
  for (const auto& call : calls) largest = std::max<uint64_t>(largest, call.size);
  EXPECT_EQ(largest, 8 * kMiB);
  EXPECT_LT(calls.size(), 200u);
  EXPECT_EQ(TotalBackendBytes(), source_.size());
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PrefetcherTest, RandomReadsWithSmallBufferStaySmall) {
  SetObject(Pattern(16 * kMiB, 2));
  auto p = Open({.read_buffer = 4 * kKiB, .max_readahead = 64 * kMiB});
  for (uint64_t off : {9 * kMiB + 100, 1 * kMiB + 7, 13 * kMiB, 5 * kMiB + 4095}) {
    ExpectRead(*p, off, 4 * kKiB);
  }
  ExpectRead(*p, 3 * kMiB, 100);
  p.reset();
  const auto calls = store_->calls();
  ASSERT_EQ(calls.size(), 5u);
  for (const auto& call : calls) EXPECT_LE(call.size, 8 * kKiB) << "at " << call.offset;
  EXPECT_EQ(calls.back().size, 4 * kKiB);  // never less than one buffer
}

TEST_F(PrefetcherTest, SequentialWindowGrowsIntoParallelFetches) {
  SetObject(Pattern(32 * kMiB, 3));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 8 * kMiB});
  ExpectRead(*p, 0, 128 * kKiB);  // a first read: one synchronous fetch, no read-ahead
  EXPECT_EQ(store_->calls().size(), 1u);
  store_->CloseGate();
  // Served from the first chunk; each doubles the window: 2, 4 then 8 MiB ahead.
  for (uint64_t off = 128 * kKiB; off < 512 * kKiB; off += 128 * kKiB) {
    ExpectRead(*p, off, 128 * kKiB);
  }
  // Chunks 1..8 MiB are fetched ahead, all at once.
  EXPECT_TRUE(store_->WaitForBlocked(8)) << "blocked: " << store_->blocked();
  store_->OpenGate();
  for (uint64_t off = 512 * kKiB; off < source_.size(); off += 128 * kKiB) {
    ExpectRead(*p, off, 128 * kKiB);
  }
  p.reset();
  EXPECT_GE(store_->max_in_flight(), 8);
  // The window never exceeds max_readahead: at most 8 MiB ahead plus the chunk being read.
  EXPECT_LE(store_->max_in_flight(), 9);
  EXPECT_EQ(TotalBackendBytes(), source_.size());
}

TEST_F(PrefetcherTest, RandomReadsFetchOneBufferEachAndNothingAhead) {
  SetObject(Pattern(64 * kMiB, 4));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 64 * kMiB});
  const std::vector<uint64_t> offsets = {
      40 * kMiB + 5,   3 * kMiB + 100,   60 * kMiB + 7,  20 * kMiB,
      10 * kMiB + 999, 50 * kMiB + 4096, 30 * kMiB + 12, 0,
      45 * kMiB + 77};
  for (uint64_t off : offsets) ExpectRead(*p, off, 4 * kKiB);
  p.reset();
  const auto calls = store_->calls();
  ASSERT_EQ(calls.size(), offsets.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].offset, offsets[i] - offsets[i] % kMiB);
    EXPECT_EQ(calls[i].size, 1 * kMiB);
    EXPECT_EQ(calls[i].thread, std::this_thread::get_id()) << "a read-ahead was made";
  }
  EXPECT_EQ(metrics_.cache_misses.load(), offsets.size());
  EXPECT_EQ(metrics_.cache_hits.load(), 0u);
}

TEST_F(PrefetcherTest, BytesAreRightForOddSizesAndOffsets) {
  const uint64_t size = 3 * 64 * kKiB * 5 + 12345;  // not a multiple of the buffer
  SetObject(Pattern(size, 5));
  auto p = Open({.read_buffer = 64 * kKiB, .max_readahead = 512 * kKiB});

  // Sequential with an odd request size, so reads straddle chunk boundaries.
  for (uint64_t off = 0; off < size; off += 7777) ExpectRead(*p, off, 7777);

  // Random offsets and sizes, including reads across several chunks.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const uint64_t off = rng() % (size + 10);
    const size_t n = 1 + rng() % (200 * kKiB);
    ExpectRead(*p, off, n);
  }

  // The tail: a read across EOF is short, and one at or past EOF returns 0 without a request.
  ExpectRead(*p, size - 10, 4096);
  const size_t calls_before = store_->calls().size();
  std::vector<std::byte> buf(4096);
  Result<size_t> at_eof = p->Read(size, buf);
  ASSERT_TRUE(at_eof.ok());
  EXPECT_EQ(*at_eof, 0u);
  Result<size_t> past_eof = p->Read(size + 1 * kMiB, buf);
  ASSERT_TRUE(past_eof.ok());
  EXPECT_EQ(*past_eof, 0u);
  EXPECT_EQ(store_->calls().size(), calls_before);
}

TEST_F(PrefetcherTest, EmptyObjectNeedsNoRequest) {
  SetObject("");
  auto p = Open({});
  std::vector<std::byte> buf(4096);
  Result<size_t> got = p->Read(0, buf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 0u);
  EXPECT_TRUE(store_->calls().empty());
}

TEST_F(PrefetcherTest, ChangedObjectFailsWithPreconditionFailedNeverMixedBytes) {
  SetObject(Pattern(16 * kMiB, 6));
  const std::string old_bytes = source_;
  auto p = Open({.read_buffer = 256 * kKiB, .max_readahead = 1 * kMiB});
  uint64_t off = 0;
  for (; off < 2 * kMiB; off += 64 * kKiB) ExpectRead(*p, off, 64 * kKiB);

  store_->SetObject(Pattern(16 * kMiB, 60));  // same size, other bytes, new ETag
  Status failure;
  for (; off < old_bytes.size(); off += 64 * kKiB) {
    std::vector<std::byte> buf(64 * kKiB);
    Result<size_t> got = p->Read(off, buf);
    if (!got.ok()) {
      failure = got.status();
      break;
    }
    // Whatever was read ahead before the change is still the old object, never the new one.
    ASSERT_EQ(*got, buf.size());
    ASSERT_EQ(std::memcmp(buf.data(), old_bytes.data() + off, buf.size()), 0) << "at " << off;
  }
  EXPECT_EQ(failure.code(), StatusCode::kPreconditionFailed) << failure.ToString();
  // It stays failed, even for ranges read before.
  std::vector<std::byte> buf(4096);
  EXPECT_EQ(p->Read(0, buf).status().code(), StatusCode::kPreconditionFailed);
  p.reset();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PrefetcherTest, TransientFailureIsRetriedOnce) {
  SetObject(Pattern(4 * kMiB, 8));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 1 * kMiB});
  store_->FailReadsAt(2 * kMiB, {TransientError("503 SlowDown")});
  ExpectRead(*p, 2 * kMiB, 1000);
  EXPECT_EQ(store_->calls().size(), 2u);

  store_->FailReadsAt(0, {TransientError("503"), TransientError("503 again")});
  std::vector<std::byte> buf(1000);
  Result<size_t> got = p->Read(0, buf);
  EXPECT_EQ(got.status().code(), StatusCode::kTransient);
  auto fetches_of_0 = [&] {
    int n = 0;
    for (const auto& call : store_->calls()) n += call.offset == 0;
    return n;
  };
  EXPECT_EQ(fetches_of_0(), 2);

  store_->FailReadsAt(0, {PermissionDeniedError("403")});
  EXPECT_EQ(p->Read(0, buf).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(fetches_of_0(), 3);  // not retried

  ExpectRead(*p, 0, 1000);  // a failure is not remembered
  p.reset();
  EXPECT_EQ(budget_.in_use(), 0u);
}

// Starts the read-ahead of chunks 1 and 2 MiB, holds it at the gate, and has a reader wait for
// chunk 1 MiB while its fetch is still running. Returns that reader's result.
Result<size_t> ReadWhileReadAheadRuns(RecordingStore& store, Prefetcher& p, Status failure1) {
  std::vector<std::byte> first(512 * 1024);
  EXPECT_TRUE(p.Read(0, first).ok());
  store.CloseGate();
  EXPECT_TRUE(p.Read(512 * 1024, first).ok());  // read-ahead of [1, 3) MiB starts
  EXPECT_TRUE(store.WaitForBlocked(2));
  store.FailReadsAt(1 * kMiB, {std::move(failure1)});
  auto reader = std::async(std::launch::async, [&p] {
    std::vector<std::byte> buf(4096);
    return p.Read(1 * kMiB, buf);
  });
  // The reader schedules chunks 3, 4 and 5 MiB before it waits for chunk 1 MiB.
  EXPECT_TRUE(store.WaitForBlocked(5));
  store.OpenGate();
  return reader.get();
}

TEST_F(PrefetcherTest, FailedReadAheadReachesTheReaderWaitingForIt) {
  SetObject(Pattern(8 * kMiB, 9));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 4 * kMiB});
  Result<size_t> got = ReadWhileReadAheadRuns(*store_, *p, InternalError("bad reply"));
  EXPECT_EQ(got.status().code(), StatusCode::kInternal);
  ExpectRead(*p, 1 * kMiB, 4096);  // the failed chunk is fetched again by the next read
}

TEST_F(PrefetcherTest, TransientReadAheadFailureIsRetriedByTheReader) {
  SetObject(Pattern(8 * kMiB, 9));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 4 * kMiB});
  Result<size_t> got = ReadWhileReadAheadRuns(*store_, *p, TransientError("timeout"));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, 4096u);
  p.reset();
  int fetches_of_1mib = 0;
  for (const auto& call : store_->calls()) fetches_of_1mib += call.offset == 1 * kMiB;
  EXPECT_EQ(fetches_of_1mib, 2);
}

TEST_F(PrefetcherTest, TinyBudgetMeansNoReadAheadButReadsWork) {
  ReadBudget tiny(1 * kKiB);
  SetObject(Pattern(8 * kMiB + 300, 10));
  auto p = std::make_unique<Prefetcher>(
      store_, kKey, store_->etag(), source_.size(),
      PrefetchOptions{.read_buffer = 1 * kMiB, .max_readahead = 8 * kMiB}, pool_, tiny, &metrics_);
  for (uint64_t off = 0; off < source_.size(); off += 128 * kKiB) {
    ExpectRead(*p, off, 128 * kKiB);
    // Over the budget by at most the one buffer this read needs.
    EXPECT_LE(tiny.in_use(), tiny.limit() + 1 * kMiB);
  }
  const auto calls = store_->calls();
  EXPECT_EQ(calls.size(), 9u);
  for (const auto& call : calls) {
    EXPECT_EQ(call.thread, std::this_thread::get_id()) << "a read-ahead was made";
  }
  EXPECT_GT(tiny.in_use(), 0u);
  p.reset();
  EXPECT_EQ(tiny.in_use(), 0u);
}

TEST_F(PrefetcherTest, ReadAheadStaysWithinTheBudget) {
  ReadBudget budget(4 * kMiB);
  SetObject(Pattern(32 * kMiB, 11));
  const uint64_t buffer = 512 * kKiB;
  BudgetPeak peak;
  RecordPeakAtEachRead(budget, peak);
  {
    Prefetcher p(store_, kKey, store_->etag(), source_.size(),
                 {.read_buffer = buffer, .max_readahead = 16 * kMiB}, pool_, budget, &metrics_);
    for (uint64_t off = 0; off < source_.size(); off += 128 * kKiB) ExpectRead(p, off, 128 * kKiB);
    EXPECT_GT(budget.in_use(), 0u);
  }
  EXPECT_LE(peak.bytes, budget.limit() + buffer);
  EXPECT_GE(peak.bytes, 2 * buffer);  // there was read-ahead
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_EQ(TotalBackendBytes(), source_.size());
}

// The budget is global: files streamed at the same time share it, and none of them fails or
// waits for another to close.
TEST_F(PrefetcherTest, FilesStreamedTogetherShareOneBudget) {
  ReadBudget budget(4 * kMiB);
  SetObject(Pattern(12 * kMiB + 777, 15));
  const uint64_t buffer = 512 * kKiB;
  BudgetPeak peak;
  RecordPeakAtEachRead(budget, peak);
  constexpr int kFiles = 6;
  // Whether the pool gets to read ahead before six readers catch up depends on the scheduler
  // (a loaded machine, a sanitizer build): a round without read-ahead shows nothing about the
  // budget, so it is repeated, up to 5 rounds. Every round must keep within the budget.
  size_t ahead = 0;
  for (int round = 0; round < 5 && ahead == 0; ++round) {
    std::vector<std::unique_ptr<Prefetcher>> files;
    for (int f = 0; f < kFiles; ++f) {
      files.push_back(std::make_unique<Prefetcher>(
          store_, kKey, store_->etag(), source_.size(),
          PrefetchOptions{.read_buffer = buffer, .max_readahead = 16 * kMiB}, pool_, budget,
          &metrics_));
    }
    const size_t calls_before = store_->calls().size();
    std::vector<std::thread> readers;
    std::vector<std::string> errors(kFiles);
    for (int f = 0; f < kFiles; ++f) {
      readers.emplace_back([&, f] {
        std::vector<std::byte> buf(128 * kKiB);
        for (uint64_t off = 0; off < source_.size(); off += buf.size()) {
          const size_t n = std::min<uint64_t>(buf.size(), source_.size() - off);
          Result<size_t> got = files[f]->Read(off, std::span(buf.data(), buf.size()));
          if (!got.ok() || *got != n || std::memcmp(buf.data(), source_.data() + off, n) != 0) {
            errors[f] = "wrong read at " + std::to_string(off);
            return;
          }
        }
      });
    }
    std::set<std::thread::id> reader_ids;
    for (std::thread& t : readers) {
      reader_ids.insert(t.get_id());
      t.join();
    }
    for (int f = 0; f < kFiles; ++f) EXPECT_EQ(errors[f], "") << "file " << f;
    // Each file may go over by the one buffer its own read needs, never by read-ahead.
    EXPECT_LE(peak.bytes, budget.limit() + kFiles * buffer);
    // Read-ahead: backend reads made by the pool, not by a reader.
    const auto calls = store_->calls();
    for (size_t i = calls_before; i < calls.size(); ++i) {
      ahead += reader_ids.count(calls[i].thread) == 0;
    }
    files.clear();
    EXPECT_EQ(budget.in_use(), 0u);
  }
  EXPECT_GT(ahead, 0u) << "no read-ahead in 5 rounds";
}

TEST_F(PrefetcherTest, ConcurrentReadersOfDisjointRangesGetTheirBytes) {
  SetObject(Pattern(24 * kMiB + 4321, 12));
  auto p = Open({.read_buffer = 256 * kKiB, .max_readahead = 4 * kMiB});
  constexpr int kReaders = 4;
  const uint64_t quarter = source_.size() / kReaders;
  std::vector<std::thread> readers;
  std::vector<std::string> errors(kReaders);
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      const uint64_t begin = r * quarter;
      const uint64_t end = r == kReaders - 1 ? source_.size() : begin + quarter;
      std::vector<std::byte> buf(100 * kKiB + 3);
      for (uint64_t off = begin; off < end; off += buf.size()) {
        const size_t n = std::min<uint64_t>(buf.size(), end - off);
        Result<size_t> got = p->Read(off, std::span(buf.data(), n));
        if (!got.ok() || *got != n || std::memcmp(buf.data(), source_.data() + off, n) != 0) {
          errors[r] = "reader " + std::to_string(r) + " wrong at " + std::to_string(off);
          return;
        }
      }
    });
  }
  for (auto& t : readers) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  p.reset();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PrefetcherTest, DestroyWithFetchesRunning) {
  SetObject(Pattern(32 * kMiB, 13));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 8 * kMiB});
  ExpectRead(*p, 0, 128 * kKiB);
  store_->CloseGate();
  for (uint64_t off = 128 * kKiB; off < 512 * kKiB; off += 128 * kKiB) {
    ExpectRead(*p, off, 128 * kKiB);
  }
  ASSERT_TRUE(store_->WaitForBlocked(2));
  EXPECT_GT(budget_.in_use(), 0u);
  std::thread destroyer([&p] { p.reset(); });
  store_->OpenGate();
  destroyer.join();
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PrefetcherTest, DestroyWithFetchesQueued) {
  SetObject(Pattern(32 * kMiB, 14));
  // The only worker is busy, so every read-ahead stays queued behind it.
  IoPool pool(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  pool.Submit([released] { released.wait(); });
  auto p = std::make_unique<Prefetcher>(
      store_, kKey, store_->etag(), source_.size(),
      PrefetchOptions{.read_buffer = 1 * kMiB, .max_readahead = 8 * kMiB}, pool, budget_,
      &metrics_);
  for (uint64_t off = 0; off < 512 * kKiB; off += 128 * kKiB) ExpectRead(*p, off, 128 * kKiB);
  EXPECT_GT(budget_.in_use(), 1 * kMiB);  // read-ahead was charged
  p.reset();
  EXPECT_EQ(budget_.in_use(), 0u);
  release.set_value();
  pool.Async([] {}).wait();  // the queued tasks have run by now
  // They found their chunks abandoned and did not fetch.
  EXPECT_EQ(store_->calls().size(), 1u);
}

TEST_F(PrefetcherTest, ReaderFetchesAQueuedChunkItselfWhenThePoolIsBusy) {
  SetObject(Pattern(8 * kMiB, 15));
  IoPool pool(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  pool.Submit([released] { released.wait(); });
  Prefetcher p(store_, kKey, store_->etag(), source_.size(),
               {.read_buffer = 1 * kMiB, .max_readahead = 4 * kMiB}, pool, budget_, &metrics_);
  // Every chunk past the first is read ahead but stuck in the queue; the reads still finish.
  for (uint64_t off = 0; off < source_.size(); off += 256 * kKiB) ExpectRead(p, off, 256 * kKiB);
  EXPECT_EQ(TotalBackendBytes(), source_.size());
  release.set_value();
}

TEST_F(PrefetcherTest, ReadAheadRequestsArrivingOutOfOrderFetchEachByteOnce) {
  // With a large read-ahead the kernel has several requests of one file in flight, served by
  // different threads: a request can arrive megabytes ahead of the ones it overtook, which
  // arrive late. Neither may restart the stream and fetch again what was fetched.
  SetObject(Pattern(64 * kMiB, 9));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 64 * kMiB});
  for (uint64_t off = 0; off < 8 * kMiB; off += kMiB) ExpectRead(*p, off, kMiB);
  for (uint64_t group = 8 * kMiB; group < source_.size(); group += 8 * kMiB) {
    for (uint64_t piece = 8; piece-- > 0;) ExpectRead(*p, group + piece * kMiB, kMiB);
  }
  p.reset();
  EXPECT_EQ(TotalBackendBytes(), source_.size());
  EXPECT_EQ(budget_.in_use(), 0u);
}

TEST_F(PrefetcherTest, RandomReadsInsideTheReadAheadDoNotGrowIt) {
  // Reads that land in chunks already fetched ahead, far from the stream, are served from them
  // and fetch nothing more: a reader jumping around a file it started reading sequentially does
  // not pull in a new window at every jump.
  SetObject(Pattern(128 * kMiB, 10));
  auto p = Open({.read_buffer = 1 * kMiB, .max_readahead = 64 * kMiB});
  for (uint64_t off = 0; off < 8 * kMiB; off += kMiB) ExpectRead(*p, off, kMiB);
  for (uint64_t off : {40 * kMiB, 20 * kMiB + 4096, 60 * kMiB, 30 * kMiB, 50 * kMiB + 1}) {
    ExpectRead(*p, off, 4 * kKiB);
  }
  // The window scheduled by the sequential reads reaches about 75 MiB (whole fetches); a read at
  // 60 MiB treated as part of the stream would have scheduled (and charged) up to 124 MiB.
  EXPECT_LE(budget_.in_use(), 80 * kMiB);
  p.reset();
  EXPECT_LE(TotalBackendBytes(), 80 * kMiB);
  EXPECT_EQ(budget_.in_use(), 0u);
}

}  // namespace
}  // namespace objfs
