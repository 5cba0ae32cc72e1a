#include "cache/data_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/metrics_store.h"
#include "backend/object_version.h"
#include "cache/codec.h"
#include "cache/store_db.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

constexpr uint32_t kBlock = 4096;

std::string Pattern(size_t size, char seed) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>(seed + i * 7 + i / 4096);
  return s;
}

// "f3" for ("f", 3). Appended, not `"f" + std::to_string(3)`: g++ 12 at -O3 reports a false
// -Wrestrict in that operator+ (GCC bug 105329).
std::string Numbered(std::string_view prefix, int i) {
  return std::string(prefix).append(std::to_string(i));
}

// What the files under `dir` take on disk (their blocks, not their sizes: they are sparse).
uint64_t DiskBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

// This process's descriptors open on files under `dir`, and of them those whose file is gone.
struct OpenUnder {
  size_t open = 0;
  size_t deleted = 0;
};
OpenUnder DescriptorsUnder(const std::string& dir) {
  OpenUnder out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (error || target.rfind(dir, 0) != 0) continue;
    ++out.open;
    if (target.find(" (deleted)") != std::string::npos) ++out.deleted;
  }
  return out;
}

// Disk space still held by files under `dir` that are removed but open in this process.
uint64_t RemovedButOpenBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (error || target.rfind(dir, 0) != 0 || target.find(" (deleted)") == std::string::npos) {
      continue;
    }
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

// Block `i` of `data`.
std::span<const std::byte> BlockOf(const std::string& data, uint64_t i) {
  return std::as_bytes(std::span(data).subspan(i * kBlock, kBlock));
}

// Stops one thread's eviction in the cache's before_free hook, after it left the lock and
// before it frees anything, until Release().
class FreeGate {
 public:
  std::function<void()> Hook() {
    return [this] {
      std::unique_lock<std::mutex> lock(mu_);
      if (std::this_thread::get_id() != held_) return;
      in_free_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return release_; });
    };
  }
  // The calling thread's next eviction is the one held.
  void HoldThisThread() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = std::this_thread::get_id();
  }
  // Whether the held thread reached the hook (bounded: a broken cache fails, not hangs).
  bool WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return in_free_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    release_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool in_free_ = false;
  bool release_ = false;
  std::thread::id held_;
};

class DataCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-data-cache-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    memory_ = std::make_shared<MemoryStore>();
    counted_ = std::make_shared<MetricsStore>(memory_, backend_);
  }
  void TearDown() override {
    store_.reset();
    cache_.reset();
    std::filesystem::remove_all(dir_);
  }

  // (Re)opens the cache in dir_ and the store reading through it.
  void OpenCache(uint64_t max_bytes = 1 << 20, std::function<Status()> before_write = nullptr,
                 size_t max_open_files = 64) {
    store_.reset();
    cache_.reset();
    DataCacheOptions options;
    options.dir = dir_ + "/data";
    options.max_bytes = max_bytes;
    options.block_size = kBlock;
    options.scope = "memory://test";
    options.log = [this](LogLevel, const std::string& line) { log_.push_back(line); };
    options.before_write = std::move(before_write);
    options.before_free = before_free_;
    options.max_open_files = max_open_files;
    Result<std::unique_ptr<DataCache>> opened = DataCache::Open(std::move(options), &metrics_);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    cache_ = std::move(opened).value();
    store_ = std::make_shared<DataCacheStore>(counted_, cache_, &metrics_);
  }

  ETag Put(const std::string& key, const std::string& data) {
    Result<ObjectInfo> info = memory_->put(key, MemorySource(data), {});
    EXPECT_TRUE(info.ok());
    return info->etag;
  }

  // Reads [offset, offset + size) of `key` through the cache with If-Match `etag`.
  std::string Read(const std::string& key, const ETag& etag, uint64_t offset, size_t size) {
    std::string buf(size, '\0');
    Result<size_t> n = store_->read(
        key, offset, std::span(reinterpret_cast<std::byte*>(buf.data()), buf.size()), &etag);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    buf.resize(n.ok() ? *n : 0);
    return buf;
  }

  uint64_t BackendReads() const { return backend_.read_requests.load(); }

  std::string dir_;
  Metrics backend_;  // requests that reached the store under the cache
  Metrics metrics_;  // the cache's own counters
  std::vector<std::string> log_;
  std::function<void()> before_free_;  // given to the cache at OpenCache
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<ObjectStore> counted_;
  std::shared_ptr<DataCache> cache_;
  std::shared_ptr<DataCacheStore> store_;
};

TEST_F(DataCacheTest, AReopenedCacheServesAReadWithNoBackendRead) {
  const std::string data = Pattern(5 * kBlock + 1000, 'a');
  const ETag etag = Put("dir/file", data);
  OpenCache();
  EXPECT_EQ(Read("dir/file", etag, 0, 8 * kBlock), data);
  EXPECT_EQ(BackendReads(), 1u);  // the six missing blocks in one ranged read
  EXPECT_EQ(metrics_.data_cache_miss_bytes.load(), data.size());
  // What the blocks take on disk: whole 4 KiB file system blocks, the last one partly used.
  EXPECT_EQ(metrics_.data_cache_bytes.load(), 6u * kBlock);

  OpenCache();  // as after a remount
  EXPECT_EQ(Read("dir/file", etag, 0, 8 * kBlock), data);
  EXPECT_EQ(Read("dir/file", etag, 100, 5000), data.substr(100, 5000));
  EXPECT_EQ(Read("dir/file", etag, 5 * kBlock + 10, 4096), data.substr(5 * kBlock + 10));
  EXPECT_EQ(BackendReads(), 1u);
  EXPECT_EQ(metrics_.data_cache_hit_bytes.load(), data.size() + 5000 + 990);
}

TEST_F(DataCacheTest, AChangedObjectNeverServesTheOldBlocks) {
  const std::string old_data = Pattern(3 * kBlock, 'a');
  const ETag old_etag = Put("f", old_data);
  OpenCache();
  EXPECT_EQ(Read("f", old_etag, 0, 3 * kBlock), old_data);
  const std::string new_data = Pattern(3 * kBlock, 'x');
  const ETag new_etag = Put("f", new_data);
  ASSERT_NE(old_etag, new_etag);
  EXPECT_EQ(Read("f", new_etag, 0, 3 * kBlock), new_data);
  EXPECT_EQ(BackendReads(), 2u);
  EXPECT_EQ(Read("f", new_etag, 0, 3 * kBlock), new_data);
  EXPECT_EQ(BackendReads(), 2u);
}

TEST_F(DataCacheTest, AdjacentMissingBlocksAreFetchedInOneRead) {
  const std::string data = Pattern(8 * kBlock, 'c');
  const ETag etag = Put("f", data);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data.substr(0, 2 * kBlock));
  EXPECT_EQ(Read("f", etag, 4 * kBlock, kBlock), data.substr(4 * kBlock, kBlock));
  EXPECT_EQ(BackendReads(), 2u);
  // Blocks 2-3 and 5-7 are missing: two reads, not five.
  EXPECT_EQ(Read("f", etag, 0, 8 * kBlock), data);
  EXPECT_EQ(BackendReads(), 4u);
  EXPECT_EQ(backend_.bytes_read.load(), 8u * kBlock);
}

TEST_F(DataCacheTest, EvictsTheLeastRecentlyUsedToStayUnderTheBound) {
  const std::string data = Pattern(10 * kBlock, 'e');
  const ETag etag = Put("f", data);
  OpenCache(4 * kBlock);
  for (uint64_t b = 0; b < 4; ++b) Read("f", etag, b * kBlock, kBlock);
  Read("f", etag, 0, kBlock);  // block 0 is now the most recently used
  Read("f", etag, 4 * kBlock, kBlock);
  EXPECT_TRUE(cache_->Contains("f", etag, 0));
  EXPECT_FALSE(cache_->Contains("f", etag, kBlock));
  for (uint64_t b = 5; b < 10; ++b) {
    EXPECT_EQ(Read("f", etag, b * kBlock, kBlock), data.substr(b * kBlock, kBlock));
    EXPECT_LE(cache_->stats().bytes, 4u * kBlock);
    EXPECT_LE(DiskBytes(dir_ + "/data/objects"), 4u * kBlock);
  }
  EXPECT_EQ(cache_->stats().blocks, 4u);
  EXPECT_EQ(metrics_.data_cache_evictions.load(), 6u);
  EXPECT_EQ(metrics_.data_cache_bytes.load(), 4u * kBlock);

  // A smaller bound at the next open evicts the oldest at once.
  OpenCache(2 * kBlock);
  EXPECT_EQ(cache_->stats().bytes, 2u * kBlock);
  EXPECT_TRUE(cache_->Contains("f", etag, 9 * kBlock));
  EXPECT_LE(DiskBytes(dir_ + "/data/objects"), 2u * kBlock);
}

// An eviction gives its block's space back after it has left the lock. Until it has, another
// insert must still count that space, or the directory outgrows the bound by a block for every
// thread evicting at that moment.
TEST_F(DataCacheTest, AnEvictionNotYetFreedStillCountsAgainstTheBound) {
  FreeGate gate;
  before_free_ = gate.Hook();
  OpenCache(/*max_bytes=*/3 * kBlock);
  // Two objects, so that no eviction below takes a file's last block (a file removed is
  // emptied at once, whoever holds it open).
  const std::string f = Pattern(4 * kBlock, 'e');
  const std::string g = Pattern(2 * kBlock, 'g');
  const ETag f_etag = Put("f", f);
  const ETag g_etag = Put("g", g);
  cache_->Put("f", f_etag, 0, BlockOf(f, 0));
  cache_->Put("f", f_etag, kBlock, BlockOf(f, 1));
  cache_->Put("f", f_etag, 2 * kBlock, BlockOf(f, 2));
  const std::string objects = dir_ + "/data/objects";
  ASSERT_EQ(DiskBytes(objects), 3 * kBlock);

  // A block of g evicts f's first block, and stops before punching it out.
  std::thread evicting([&] {
    gate.HoldThisThread();
    cache_->Put("g", g_etag, 0, BlockOf(g, 0));
  });
  EXPECT_TRUE(gate.WaitUntilHeld()) << "the eviction never reached its punch";
  // Another block of g, meanwhile, must make room of its own: f's second block goes, while
  // f's first still holds its space.
  cache_->Put("g", g_etag, kBlock, BlockOf(g, 1));
  EXPECT_TRUE(cache_->Contains("g", g_etag, kBlock));
  EXPECT_FALSE(cache_->Contains("f", f_etag, kBlock));
  EXPECT_LE(DiskBytes(objects), 3 * kBlock);
  gate.Release();
  evicting.join();
  EXPECT_TRUE(cache_->Contains("g", g_etag, 0));
  EXPECT_TRUE(cache_->Contains("f", f_etag, 2 * kBlock));
  EXPECT_LE(DiskBytes(objects), 3 * kBlock);
  EXPECT_LE(cache_->stats().bytes, 3 * kBlock);
  // What is held reads back right.
  std::string got(kBlock, '\0');
  ASSERT_TRUE(cache_->Get("g", g_etag, kBlock, std::as_writable_bytes(std::span(got))));
  EXPECT_EQ(got, g.substr(kBlock, kBlock));
  ASSERT_TRUE(cache_->Get("f", f_etag, 2 * kBlock, std::as_writable_bytes(std::span(got))));
  EXPECT_EQ(got, f.substr(2 * kBlock, kBlock));
}

// A file removed with its last block while another eviction still holds it open (to punch
// its earlier block) gives its space back at once: it is emptied before it is removed.
TEST_F(DataCacheTest, AFileRemovedWhileStillOpenHoldsNoSpace) {
  FreeGate gate;
  before_free_ = gate.Hook();
  OpenCache(/*max_bytes=*/2 * kBlock);
  const std::string f = Pattern(2 * kBlock, 'f');
  const std::string g = Pattern(2 * kBlock, 'g');
  const ETag f_etag = Put("f", f);
  const ETag g_etag = Put("g", g);
  cache_->Put("f", f_etag, 0, BlockOf(f, 0));
  cache_->Put("f", f_etag, kBlock, BlockOf(f, 1));
  // g's first block evicts f's first, whose punch holds f's file open and waits.
  std::thread evicting([&] {
    gate.HoldThisThread();
    cache_->Put("g", g_etag, 0, BlockOf(g, 0));
  });
  EXPECT_TRUE(gate.WaitUntilHeld()) << "the eviction never reached its punch";
  // g's second block evicts f's last one: f's file is removed, still open for that punch.
  cache_->Put("g", g_etag, kBlock, BlockOf(g, 1));
  EXPECT_FALSE(cache_->Contains("f", f_etag, kBlock));
  EXPECT_EQ(DescriptorsUnder(dir_).deleted, 1u);
  EXPECT_EQ(RemovedButOpenBytes(dir_), 0u);
  gate.Release();
  evicting.join();
  EXPECT_TRUE(cache_->Contains("g", g_etag, 0));
  EXPECT_TRUE(cache_->Contains("g", g_etag, kBlock));
}

TEST_F(DataCacheTest, ABlockCorruptedOnDiskIsDetectedAndFetchedAgain) {
  const std::string data = Pattern(2 * kBlock, 'k');
  const ETag etag = Put("f", data);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  const std::string path = cache_->BlockPath("f", etag, kBlock);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << path;
    file.seekp(kBlock + 100);  // the second block's, in the object's file
    file.put(static_cast<char>(data[kBlock + 100] ^ 0x20));
  }
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  EXPECT_EQ(BackendReads(), 2u);
  EXPECT_EQ(metrics_.data_cache_corrupt.load(), 1u);
  // Cached again, intact.
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  EXPECT_EQ(BackendReads(), 2u);

  // A truncated block too.
  ASSERT_EQ(::truncate(path.c_str(), 10), 0);
  EXPECT_EQ(Read("f", etag, kBlock, kBlock), data.substr(kBlock));
  EXPECT_EQ(BackendReads(), 3u);
  EXPECT_EQ(metrics_.data_cache_corrupt.load(), 2u);
}

// Blocks of one object share a file: a damaged byte costs that block, and only that block, one
// backend read; its neighbours in the file are still served.
TEST_F(DataCacheTest, ADamagedByteDropsOnlyItsBlockOfTheObjectsFile) {
  const std::string data = Pattern(4 * kBlock, 'g');
  const ETag etag = Put("f", data);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 4 * kBlock), data);
  const std::string path = cache_->BlockPath("f", etag, 2 * kBlock);
  EXPECT_EQ(path, cache_->BlockPath("f", etag, 0));
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << path;
    file.seekp(2 * kBlock + kBlock - 1);  // the last byte of the third block
    file.put(static_cast<char>(data[3 * kBlock - 1] ^ 0x01));
  }
  // Within the mount too: the open descriptor reads what is on disk now.
  EXPECT_EQ(Read("f", etag, 0, 4 * kBlock), data);
  EXPECT_EQ(metrics_.data_cache_corrupt.load(), 1u);
  EXPECT_EQ(BackendReads(), 2u);
  EXPECT_EQ(backend_.bytes_read.load(), 5u * kBlock);  // the whole object, then that block
  EXPECT_EQ(Read("f", etag, 0, 4 * kBlock), data);
  EXPECT_EQ(BackendReads(), 2u);
  EXPECT_EQ(cache_->stats().blocks, 4u);
}

// Reads keep object files open, never more than max_open_files of them; a file whose last block
// is evicted is closed and removed, and nothing stays open after the cache closes.
TEST_F(DataCacheTest, OpenFilesStayBoundedAndEvictionClosesThem) {
  const std::string cache_dir = dir_ + "/data/";
  std::vector<std::string> data;
  std::vector<ETag> etags;
  for (int i = 0; i < 6; ++i) {
    data.push_back(Pattern(2 * kBlock, static_cast<char>('a' + i)));
    etags.push_back(Put(Numbered("f", i), data.back()));
  }
  OpenCache(8 * kBlock, nullptr, /*max_open_files=*/2);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(Read(Numbered("f", i), etags[i], 0, 2 * kBlock), data[i]);
      EXPECT_LE(cache_->stats().open_files, 2u);
      EXPECT_LE(DescriptorsUnder(cache_dir + "objects/").open, 2u);
    }
  }
  EXPECT_EQ(BackendReads(), 4u);  // the second round from the cache
  EXPECT_EQ(cache_->stats().files, 4u);
  // f4 and f5 evict f0 and f1 whole: their files are closed and removed.
  const std::string f0 = cache_->BlockPath("f0", etags[0], 0);
  ASSERT_TRUE(std::filesystem::exists(f0));
  for (int i = 4; i < 6; ++i) {
    EXPECT_EQ(Read(Numbered("f", i), etags[i], 0, 2 * kBlock), data[i]);
  }
  EXPECT_EQ(cache_->stats().files, 4u);
  EXPECT_FALSE(std::filesystem::exists(f0));
  EXPECT_FALSE(cache_->Contains("f0", etags[0], 0));
  const OpenUnder open = DescriptorsUnder(cache_dir + "objects/");
  EXPECT_LE(open.open, 2u);
  EXPECT_EQ(open.deleted, 0u) << "a removed file is still held open";
  EXPECT_EQ(DiskBytes(cache_dir + "objects"), 8u * kBlock);
  cache_.reset();
  store_.reset();
  EXPECT_EQ(DescriptorsUnder(cache_dir).open, 0u);
}

// Reads of many objects from several threads, with a bound that evicts all along and fewer open
// files than objects: every read returns the object's bytes, no eviction is taken for damage,
// and the bounds hold.
TEST_F(DataCacheTest, ConcurrentReadsAndEvictionsServeOnlyTheRightBytes) {
  constexpr int kObjects = 8;
  std::vector<std::string> data;
  std::vector<ETag> etags;
  for (int i = 0; i < kObjects; ++i) {
    data.push_back(Pattern(6 * kBlock, static_cast<char>('A' + i)));
    etags.push_back(Put(Numbered("o", i), data.back()));
  }
  OpenCache(10 * kBlock, nullptr, /*max_open_files=*/3);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      uint64_t seed = 12345 + t;
      for (int n = 0; n < 400; ++n) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const int i = static_cast<int>((seed >> 33) % kObjects);
        const uint64_t block = (seed >> 20) % 6;
        const uint64_t size = (seed >> 40) % 2 == 0 ? kBlock : 2 * kBlock;
        const std::string got = Read(Numbered("o", i), etags[i], block * kBlock, size);
        if (got != data[i].substr(block * kBlock, size)) ++wrong;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  const DataCache::Stats stats = cache_->stats();
  // A block evicted (punched out) while a read had it is a miss for that read, never damage.
  EXPECT_EQ(stats.corrupt, 0u);
  EXPECT_LE(stats.bytes, 10u * kBlock);
  EXPECT_LE(stats.open_files, 3u);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_LE(DiskBytes(dir_ + "/data/objects"), 10u * kBlock);
  EXPECT_EQ(DescriptorsUnder(dir_ + "/data/objects/").deleted, 0u);
}

// A cache written by the earlier layout (a file per block, "index.log") is removed at open,
// never read: its blocks are not served, and the directory holds only the new layout.
TEST_F(DataCacheTest, ACacheOfTheEarlierLayoutIsRemovedNotRead) {
  const std::string data = Pattern(2 * kBlock, 'o');
  const ETag etag = Put("f", data);
  const std::string cache_dir = dir_ + "/data";
  std::filesystem::create_directories(cache_dir + "/blocks/ab");
  {
    Result<std::unique_ptr<RecordTable<DataBlockRecord>>> old =
        RecordTable<DataBlockRecord>::Open(cache_dir + "/index.log", StoreDbOptions{});
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    const std::string bogus(kBlock, 'z');
    ASSERT_TRUE((*old)
                    ->Put(DataBlockRecord{.name = "ab" + std::string(30, '0'),
                                          .key = "f",
                                          .etag = etag,
                                          .offset = 0,
                                          .block_size = kBlock,
                                          .length = kBlock,
                                          .crc32c = Crc32c(bogus),
                                          .stamp = 1})
                    .ok());
    std::ofstream(cache_dir + "/blocks/ab/ab" + std::string(30, '0')) << bogus;
  }
  OpenCache();
  EXPECT_EQ(cache_->stats().blocks, 0u);
  EXPECT_FALSE(std::filesystem::exists(cache_dir + "/index.log"));
  EXPECT_FALSE(std::filesystem::exists(cache_dir + "/blocks"));
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  EXPECT_EQ(BackendReads(), 1u);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  EXPECT_EQ(BackendReads(), 1u);
}

// A data_cache= pointed at a directory of other files, or holding links out of it: opening
// the cache removes only names it makes, and follows no symbolic link.
TEST_F(DataCacheTest, OpeningTheCacheTouchesOnlyItsOwnFilesAndFollowsNoLink) {
  namespace fs = std::filesystem;
  const std::string cache_dir = dir_ + "/data";
  const std::string victim = dir_ + "/victim";
  const std::string victim2 = dir_ + "/victim2";
  const std::string hex(32, 'a');
  fs::create_directories(cache_dir + "/objects/ab");
  fs::create_directories(victim + "/sub");
  fs::create_directories(victim2);
  std::ofstream(victim + "/notes.txt") << "mine";
  std::ofstream(victim + "/sub/" + hex) << "mine";
  std::ofstream(victim2 + "/" + hex) << "mine";
  std::ofstream(cache_dir + "/objects/ab/notes.txt") << "mine";
  // Links where the earlier layout's tree and an objects/ subdirectory would be.
  fs::create_directory_symlink(victim, cache_dir + "/blocks");
  fs::create_directory_symlink(victim2, cache_dir + "/objects/aa");
  OpenCache();
  EXPECT_TRUE(fs::exists(victim + "/notes.txt"));
  EXPECT_TRUE(fs::exists(victim + "/sub/" + hex));
  EXPECT_TRUE(fs::exists(victim2 + "/" + hex));
  EXPECT_TRUE(fs::exists(cache_dir + "/objects/ab/notes.txt"));
  EXPECT_TRUE(fs::is_symlink(cache_dir + "/blocks"));
  // An index.log with no blocks/ directory beside it is not the earlier layout's.
  cache_.reset();
  fs::remove(cache_dir + "/blocks");
  std::ofstream(cache_dir + "/index.log") << "someone's log";
  OpenCache();
  EXPECT_TRUE(fs::exists(cache_dir + "/index.log"));
}

// A block whose file cannot be opened for want of descriptors is a miss, not damage: it stays
// cached, and is served once descriptors are free again.
TEST_F(DataCacheTest, OutOfDescriptorsIsAMissThatKeepsTheBlock) {
  const std::string data = Pattern(kBlock, 'd');
  const ETag etag = Put("f", data);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, kBlock), data);
  OpenCache();  // no descriptor open
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;  // every descriptor the limit allows, taken
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) filler.push_back(fd);
  std::vector<std::byte> buf(kBlock);
  const std::optional<size_t> got = cache_->Get("f", etag, 0, buf);
  for (int fd : filler) ::close(fd);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(cache_->stats().corrupt, 0u);
  EXPECT_EQ(cache_->stats().blocks, 1u);
  EXPECT_EQ(Read("f", etag, 0, kBlock), data);
  EXPECT_EQ(BackendReads(), 1u);
}

// A kill between punching an evicted block out of its file and dropping its record leaves a
// record of a hole: the next open drops it, rather than counting it and finding it damaged.
TEST_F(DataCacheTest, ARecordOfAPunchedOutBlockIsDroppedAtOpen) {
  const std::string data = Pattern(2 * kBlock, 'h');
  const ETag etag = Put("f", data);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  const std::string path = cache_->BlockPath("f", etag, 0);
  cache_.reset();
  store_.reset();
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kBlock), 0);
  ::close(fd);
  OpenCache();
  EXPECT_EQ(cache_->stats().blocks, 1u);
  EXPECT_EQ(Read("f", etag, 0, 2 * kBlock), data);
  EXPECT_EQ(cache_->stats().corrupt, 0u);
  EXPECT_EQ(BackendReads(), 2u);  // the first read, then the punched block alone
}

TEST_F(DataCacheTest, ADamagedIndexDropsItsBlocksAndReadsStayRight) {
  const std::string data = Pattern(3 * kBlock, 'i');
  const ETag etag = Put("f", data);
  OpenCache();
  EXPECT_EQ(Read("f", etag, 0, 3 * kBlock), data);
  cache_.reset();
  store_.reset();
  {
    std::fstream log(dir_ + "/data/objects.log", std::ios::in | std::ios::out | std::ios::binary);
    log.seekp(40);
    log.put('\xff');  // inside the first record
  }
  OpenCache();
  EXPECT_EQ(cache_->stats().blocks, 2u);
  EXPECT_EQ(DiskBytes(dir_ + "/data/objects"), 2u * kBlock);  // the orphan's range is freed
  EXPECT_EQ(Read("f", etag, 0, 3 * kBlock), data);
  EXPECT_EQ(BackendReads(), 2u);
}

TEST_F(DataCacheTest, AFailingDiskDegradesToUncachedReadsWithOneLogLine) {
  const std::string data = Pattern(4 * kBlock, 'n');
  const ETag etag = Put("f", data);
  OpenCache(1 << 20, [] { return NoSpaceError("write /cache/block: No space left on device"); });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Read("f", etag, 0, 4 * kBlock), data);
  EXPECT_EQ(BackendReads(), 3u);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("No space left on device"), std::string::npos) << log_[0];
  EXPECT_FALSE(cache_->stats().writing);
  EXPECT_EQ(cache_->stats().bytes, 0u);
  EXPECT_EQ(metrics_.data_cache_bytes.load(), 0u);
}

TEST_F(DataCacheTest, TheDirectoryServesOneCacheAtATime) {
  OpenCache();
  DataCacheOptions options;
  options.dir = dir_ + "/data";
  options.block_size = kBlock;
  Result<std::unique_ptr<DataCache>> second = DataCache::Open(options);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("in use by another objfs mount"), std::string::npos)
      << second.status().ToString();
}

TEST_F(DataCacheTest, ReadsWithoutAVersionBypassIt) {
  const std::string data = Pattern(2 * kBlock, 'b');
  const ETag etag = Put("f", data);
  OpenCache();
  std::string buf(2 * kBlock, '\0');
  for (int i = 0; i < 2; ++i) {
    Result<size_t> n = store_->read(
        "f", 0, std::span(reinterpret_cast<std::byte*>(buf.data()), buf.size()), nullptr);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(buf, data);
  }
  EXPECT_EQ(BackendReads(), 2u);
  EXPECT_EQ(cache_->stats().blocks, 0u);
}

// On SFTP a version is the size and an mtime of whole seconds: a file rewritten with the same size
// within that second keeps it, so a version that recent never reaches the cache.
TEST_F(DataCacheTest, ARecentSizeAndMtimeVersionIsNeitherCachedNorServed) {
  memory_ = std::make_shared<MemoryStore>(MemoryStoreOptions{.native_etags = false});
  counted_ = std::make_shared<MetricsStore>(memory_, backend_);
  const std::string data = Pattern(2 * kBlock, 's');
  ASSERT_TRUE(memory_->put("f", MemorySource(data), {}).ok());
  Result<ObjectInfo> info = memory_->head("f");
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(IsVersionTag(info->etag)) << info->etag.value();
  OpenCache();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Read("f", info->etag, 0, 2 * kBlock), data);
  EXPECT_EQ(BackendReads(), 2u);
  EXPECT_EQ(cache_->stats().blocks, 0u);

  // A version of three seconds ago is settled: no write can share it any more. (The store here
  // ignores If-Match: it only has the version of now.)
  struct AnyVersion : ForwardingStore {
    using ForwardingStore::ForwardingStore;
    Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                        const ETag*) override {
      return target().read(key, offset, buf, nullptr);
    }
  };
  store_ =
      std::make_shared<DataCacheStore>(std::make_shared<AnyVersion>(counted_), cache_, &metrics_);
  const ETag settled = VersionTag(data.size(), info->mtime_ns - 3'000'000'000);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(Read("f", settled, 0, 2 * kBlock), data);
  EXPECT_EQ(BackendReads(), 3u);
  EXPECT_EQ(cache_->stats().blocks, 2u);
}

}  // namespace
}  // namespace objfs
