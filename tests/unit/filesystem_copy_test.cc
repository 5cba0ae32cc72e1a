// copy_file_range and extended attributes of the Filesystem, over the in-memory store, and what
// answers while server work holds a file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "backend/fake/memory_store.h"
#include "backend/md5.h"
#include "backend/metrics_store.h"
#include "cache/content_etag_store.h"
#include "cache/store_db.h"
#include "fs/errno_map.h"
#include "fs/filesystem.h"
#include "fs/xattr.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string PatternOf(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 1000) % 256);
  return s;
}

// The largest length one copy_file_range call passes on (the kernel's MAX_RW_COUNT-like cap),
// scaled down so that tests run on small objects.
constexpr uint64_t kKernelCap = 40000;

class FilesystemCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-copy-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_dir_ = tmpl;
    memory_ = std::make_shared<MemoryStore>();
    store_ = std::make_shared<MetricsStore>(memory_, metrics_);
    options_.cache_dir = cache_dir_ + "/staging";
    options_.prefetch.read_buffer = 16 << 10;
    options_.max_copy_call = kKernelCap;
    fs_ = NewFilesystem();
  }
  void TearDown() override {
    fs_.reset();
    std::filesystem::remove_all(cache_dir_);
  }
  std::unique_ptr<Filesystem> NewFilesystem() {
    auto fs = Filesystem::Create(store_, options_, &metrics_, std::make_shared<FakeClock>());
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    return std::move(fs).value();
  }
  void PutObject(const std::string& key, std::string_view data) {
    ASSERT_TRUE(memory_->put(key, MemorySource(data), PutOptions()).ok());
  }
  uint64_t LookupIno(const std::string& name) {
    auto e = fs_->Lookup(kRootIno, name);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e->attr.ino : 0;
  }
  // Puts `data` at "src", opens it, creates "dst" open with `dst_access` (O_WRONLY or O_RDWR),
  // and makes the kernel's first, cut call of a copy of all of it: one copy on the server.
  void FirstCutCopy(const std::string& data, int dst_access, uint64_t* src_fh, uint64_t* dst_fh) {
    PutObject("src", data);
    auto src = fs_->Open(LookupIno("src"), O_RDONLY);
    ASSERT_TRUE(src.ok());
    auto dst = fs_->Create(kRootIno, "dst", 0600, dst_access | O_CREAT | O_EXCL);
    ASSERT_TRUE(dst.ok());
    *src_fh = *src;
    *dst_fh = dst->fh;
    auto first = fs_->CopyFileRange(*src_fh, 0, *dst_fh, 0, kKernelCap, 0);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    ASSERT_EQ(*first, kKernelCap);
    ASSERT_EQ(metrics_.copy_requests.load(), 1u);  // on the server, whole
  }
  static std::string Pattern(size_t n) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + i / 1000) % 256);
    return s;
  }

  std::string cache_dir_;
  Metrics metrics_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<MetricsStore> store_;
  FilesystemOptions options_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(FilesystemCopyTest, WholeFileCopyIsOneServerCopyWithNoBytesMoved) {
  const std::string data = Pattern(100000);
  PutObject("src", data);
  auto src_fh = fs_->Open(LookupIno("src"), O_RDONLY);
  ASSERT_TRUE(src_fh.ok());
  auto dst = fs_->Create(kRootIno, "dst", 0600, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(dst.ok());

  uint64_t reads = metrics_.read_requests.load();
  uint64_t puts = metrics_.put_requests.load();
  uint64_t copies = metrics_.copy_requests.load();
  uint64_t bytes_read = metrics_.bytes_read.load();
  uint64_t bytes_written = metrics_.bytes_written.load();

  // What cp does: ask for everything; the kernel caps each call and calls again for the rest.
  uint64_t want = uint64_t{1} << 62;
  uint64_t done = 0;
  for (;;) {
    auto n = fs_->CopyFileRange(*src_fh, done, dst->fh, done, std::min(want, kKernelCap), 0);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 0) break;
    done += *n;
  }
  EXPECT_EQ(done, data.size());
  ASSERT_TRUE(fs_->Flush(dst->fh).ok());
  ASSERT_TRUE(fs_->Release(dst->fh).ok());
  ASSERT_TRUE(fs_->Release(*src_fh).ok());

  EXPECT_EQ(metrics_.copy_requests.load(), copies + 1);
  EXPECT_EQ(metrics_.read_requests.load(), reads);
  EXPECT_EQ(metrics_.put_requests.load(), puts);
  EXPECT_EQ(metrics_.bytes_read.load(), bytes_read);
  EXPECT_EQ(metrics_.bytes_written.load(), bytes_written);
  EXPECT_EQ(metrics_.etags_reused.load(), 1u);

  // Release did not upload the empty staging file over the copy.
  EXPECT_EQ(memory_->contents("dst"), data);
  auto src_head = memory_->head("src");
  auto dst_head = memory_->head("dst");
  ASSERT_TRUE(src_head.ok() && dst_head.ok());
  EXPECT_EQ(dst_head->etag, src_head->etag);
  EXPECT_EQ(dst_head->metadata.at("mode"), std::to_string(S_IFREG | 0600));
  auto attr = fs_->GetAttr(dst->entry.attr.ino);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->attr.size, data.size());
}

// The follow-up calls of a whole copy are answered from its bookkeeping only while the file is
// that copy: after a write in between, a follow-up copies its range for real.
TEST_F(FilesystemCopyTest, AFollowUpAfterAWriteCopiesItsRange) {
  const std::string data = Pattern(100000);
  uint64_t src_fh = 0;
  uint64_t dst_fh = 0;
  ASSERT_NO_FATAL_FAILURE(FirstCutCopy(data, O_RDWR, &src_fh, &dst_fh));
  ASSERT_TRUE(fs_->Write(dst_fh, kKernelCap, Bytes(std::string(50, 'X'))).ok());
  auto next = fs_->CopyFileRange(src_fh, kKernelCap, dst_fh, kKernelCap, kKernelCap, 0);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(*next, kKernelCap);
  ASSERT_TRUE(fs_->Release(dst_fh).ok());
  ASSERT_TRUE(fs_->Release(src_fh).ok());
  const std::string stored = memory_->contents("dst");
  ASSERT_GE(stored.size(), 2 * kKernelCap);
  EXPECT_EQ(stored.substr(0, 2 * kKernelCap), data.substr(0, 2 * kKernelCap))
      << "the X written at " << kKernelCap << " was not copied over";
}

// A caller that asks for less than the whole source, in calls the kernel cut at its longest,
// gets what it asked for: the whole copy made on the server at the first call is cut back at
// close to the bytes the calls reported.
TEST_F(FilesystemCopyTest, ACopyStoppedShortOfTheSourcesEndIsCutToWhatWasAsked) {
  const std::string data = Pattern(100000);
  uint64_t src_fh = 0;
  uint64_t dst_fh = 0;
  ASSERT_NO_FATAL_FAILURE(FirstCutCopy(data, O_WRONLY, &src_fh, &dst_fh));
  auto next = fs_->CopyFileRange(src_fh, kKernelCap, dst_fh, kKernelCap, 20000, 0);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_EQ(*next, 20000u);
  ASSERT_TRUE(fs_->Flush(dst_fh).ok());
  ASSERT_TRUE(fs_->Release(dst_fh).ok());
  ASSERT_TRUE(fs_->Release(src_fh).ok());
  const std::string stored = memory_->contents("dst");
  EXPECT_EQ(stored.size(), kKernelCap + 20000) << "the copy holds more than was asked for";
  EXPECT_TRUE(stored == data.substr(0, kKernelCap + 20000)) << "other bytes";
  auto attr = fs_->GetAttr(LookupIno("dst"));
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->attr.size, kKernelCap + 20000);
}

// The close of a dup of the destination can run while the kernel's follow-up call is under
// way on another thread: whichever comes first, the file ends up holding exactly the bytes the
// calls reported copied (a cut back to the first call's count, made after the follow-up had
// reported more, lost them).
TEST_F(FilesystemCopyTest, ACloseRacingAFollowUpNeverCutsWhatItReported) {
  const std::string data = Pattern(100000);
  PutObject("src", data);
  auto src_fh = fs_->Open(LookupIno("src"), O_RDONLY);
  ASSERT_TRUE(src_fh.ok());
  for (int i = 0; i < 1000; ++i) {
    const std::string name = "dst" + std::to_string(i);
    auto dst = fs_->Create(kRootIno, name, 0600, O_WRONLY | O_CREAT | O_EXCL);
    ASSERT_TRUE(dst.ok());
    auto first = fs_->CopyFileRange(*src_fh, 0, dst->fh, 0, kKernelCap, 0);
    ASSERT_TRUE(first.ok() && *first == kKernelCap);
    std::atomic<bool> go{false};
    uint64_t reported = kKernelCap;
    std::thread closer([&] {
      while (!go.load()) {
      }
      EXPECT_TRUE(fs_->Flush(dst->fh).ok());
    });
    std::thread follow_up([&] {
      while (!go.load()) {
      }
      auto n = fs_->CopyFileRange(*src_fh, kKernelCap, dst->fh, kKernelCap, 60000, 0);
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (n.ok()) reported += *n;
    });
    go = true;
    closer.join();
    follow_up.join();
    ASSERT_TRUE(fs_->Flush(dst->fh).ok());
    ASSERT_TRUE(fs_->Release(dst->fh).ok());
    const std::string stored = memory_->contents(name);
    ASSERT_EQ(stored.size(), reported) << "round " << i << ": told " << reported << " copied";
    ASSERT_TRUE(stored == data.substr(0, reported)) << "round " << i << ": other bytes";
  }
  ASSERT_TRUE(fs_->Release(*src_fh).ok());
}

// A destination removed after the first call has no name to cut back: its close is no error.
TEST_F(FilesystemCopyTest, TheCloseOfACopyRemovedMeanwhileSucceeds) {
  uint64_t src_fh = 0;
  uint64_t dst_fh = 0;
  ASSERT_NO_FATAL_FAILURE(FirstCutCopy(Pattern(100000), O_WRONLY, &src_fh, &dst_fh));
  ASSERT_TRUE(fs_->Unlink(kRootIno, "dst").ok());
  Status closed = fs_->Flush(dst_fh);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(fs_->Release(dst_fh).ok());
  EXPECT_TRUE(fs_->Release(src_fh).ok());
  EXPECT_FALSE(memory_->head("dst").ok());
}

// A store whose server-side copies, puts, ranged reads or removals (`held`), once asked for,
// wait until the test lets them go on: the copy or upload of gigabytes, or a stuck server.
class HeldStore : public ForwardingStore {
 public:
  enum class Call { kCopy, kPut, kRead, kRemove };
  HeldStore(std::shared_ptr<ObjectStore> target, Call held)
      : ForwardingStore(std::move(target)),
        held_(held),
        go_on_(go_on_promise_.get_future().share()) {}
  ~HeldStore() override { GoOn(); }
  // Objects' ETags are not told (a server that gives none).
  void HideETags() { hide_etags_ = true; }
  Result<ObjectInfo> head(std::string_view key) override {
    Result<ObjectInfo> info = ForwardingStore::head(key);
    if (info.ok() && hide_etags_) info->etag = ETag();
    return info;
  }
  Result<Listing> list(const ListOptions& options) override {
    Result<Listing> listing = ForwardingStore::list(options);
    if (listing.ok() && hide_etags_) {
      for (ObjectInfo& info : listing->objects) info.etag = ETag();
    }
    return listing;
  }
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    if (held_ == Call::kRead) Hold();
    return ForwardingStore::read(key, offset, buf, hide_etags_ ? nullptr : if_match);
  }
  Status remove(std::string_view key) override {
    if (held_ == Call::kRemove) Hold();
    return ForwardingStore::remove(key);
  }
  Result<ObjectInfo> copy(const ObjectInfo& src, std::string_view dst,
                          const CopyOptions& options) override {
    if (held_ == Call::kCopy) Hold();
    return ForwardingStore::copy(src, dst, options);
  }
  Result<ObjectInfo> put(std::string_view key, const ByteSource& source,
                         const PutOptions& options) override {
    if (held_ == Call::kPut) Hold();
    return ForwardingStore::put(key, source, options);
  }
  // Ready once the held call was asked for.
  std::future<void> Asked() { return asked_.get_future(); }
  // Lets the held calls go on (again and again: no matter).
  void GoOn() {
    if (!going_on_.exchange(true)) go_on_promise_.set_value();
  }

 private:
  void Hold() {
    if (!asked_once_.exchange(true)) asked_.set_value();
    go_on_.wait();
  }

  const Call held_;
  std::atomic<bool> hide_etags_{false};
  std::promise<void> asked_;
  std::atomic<bool> asked_once_{false};
  std::promise<void> go_on_promise_;
  std::shared_future<void> go_on_;
  std::atomic<bool> going_on_{false};
};

class FilesystemServerWorkTest : public FilesystemCopyTest {
 protected:
  // A Filesystem over a store that holds `call`.
  void HoldCalls(HeldStore::Call call) {
    fs_.reset();
    held_ = std::make_shared<HeldStore>(store_, call);
    auto fs = Filesystem::Create(held_, options_, &metrics_, std::make_shared<FakeClock>());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
  }

  // Makes `work` in a thread until the store holds its call, then a stat, a lookup and a
  // listing of `name` in the root, which must answer while the call is held: the file as it was
  // before, for no time. Then lets the call go on; what `work` returned is in `*done`.
  void ExpectStatAndListingsWhileHeld(uint64_t ino, const std::string& name, uint64_t size,
                                      uint32_t mode, const std::function<Status()>& work,
                                      Status* done) {
    std::future<void> asked = held_->Asked();
    std::future<Status> working = std::async(std::launch::async, work);
    struct Seen {
      Result<Entry> attr = Entry();
      Result<Entry> lookup = Entry();
      Result<std::vector<DirEntry>> listing = std::vector<DirEntry>();
    };
    std::future<Seen> during;
    // However this ends, the work ends too (before the futures wait for their threads).
    struct GoOnAtEnd {
      HeldStore* store;
      ~GoOnAtEnd() { store->GoOn(); }
    } go_on_at_end{held_.get()};
    ASSERT_EQ(asked.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    during = std::async(std::launch::async, [&] {
      Seen seen;
      seen.attr = fs_->GetAttr(ino);
      seen.lookup = fs_->Lookup(kRootIno, name);
      seen.listing = fs_->ReadDir(kRootIno);
      return seen;
    });
    // (A bound for a failure to show as one, not a pause: they answer at once.)
    const bool answered = during.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
    held_->GoOn();
    *done = working.get();
    ASSERT_TRUE(answered) << "stat or the listing waited for the server";
    Seen seen = during.get();
    ASSERT_TRUE(seen.attr.ok()) << seen.attr.status().ToString();
    EXPECT_EQ(seen.attr->attr.ino, ino);
    EXPECT_EQ(seen.attr->attr.size, size);
    EXPECT_EQ(seen.attr->attr.mode & 07777, mode);
    EXPECT_EQ(seen.attr->attr_timeout, 0);
    ASSERT_TRUE(seen.lookup.ok()) << seen.lookup.status().ToString();
    EXPECT_EQ(seen.lookup->attr.ino, ino);
    EXPECT_EQ(seen.lookup->attr.size, size);
    EXPECT_EQ(seen.lookup->entry_timeout, 0);
    ASSERT_TRUE(seen.listing.ok()) << seen.listing.status().ToString();
    const auto listed = std::find_if(seen.listing->begin(), seen.listing->end(),
                                     [&](const DirEntry& e) { return e.name == name; });
    ASSERT_NE(listed, seen.listing->end());
    EXPECT_EQ(listed->entry.attr.size, size);
    // The kernel gets the name only: it may get the listing after the work ended.
    EXPECT_TRUE(listed->name_only);
  }

  std::shared_ptr<HeldStore> held_;
};

// `ls -l` of the directory cp writes into waited for the whole copy on the server (minutes
// for gigabytes, the copy's allowance on a stuck server): the copy held the file's lock, and
// stat, lookups and listings of the file took it.
TEST_F(FilesystemServerWorkTest, StatAndListingsOfTheDestinationDoNotWaitForItsServerCopy) {
  const std::string data = Pattern(100000);
  PutObject("src", data);
  options_.max_copy_call = data.size();  // one call copies it all
  ASSERT_NO_FATAL_FAILURE(HoldCalls(HeldStore::Call::kCopy));
  auto src = fs_->Open(LookupIno("src"), O_RDONLY);
  ASSERT_TRUE(src.ok());
  auto dst = fs_->Create(kRootIno, "dst", 0640, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(dst.ok());
  const uint64_t dst_ino = dst->entry.attr.ino;

  Status copied;
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndListingsWhileHeld(
      dst_ino, "dst", 0, 0640,
      [&]() -> Status {
        Result<uint64_t> n = fs_->CopyFileRange(*src, 0, dst->fh, 0, data.size(), 0);
        if (!n.ok()) return n.status();
        return *n == data.size() ? Status::Ok() : IoError(std::to_string(*n) + " copied");
      },
      &copied));
  ASSERT_TRUE(copied.ok()) << copied.ToString();
  EXPECT_EQ(metrics_.copy_requests.load(), 1u);
  auto after = fs_->GetAttr(dst_ino);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->attr.size, data.size());
  EXPECT_TRUE(fs_->Release(dst->fh).ok());
  EXPECT_TRUE(fs_->Release(*src).ok());
  Result<ObjectInfo> stored = memory_->head("dst");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size, data.size());
}

// The same for the upload at close: `ls -l` beside a `cp` into the mount waited for its close
// (the tail of a streamed file, all of a small one; a stuck server's allowance).
TEST_F(FilesystemServerWorkTest, StatAndListingsOfAFileDoNotWaitForItsUploadAtClose) {
  const std::string data = Pattern(100000);
  ASSERT_NO_FATAL_FAILURE(HoldCalls(HeldStore::Call::kPut));
  auto file = fs_->Create(kRootIno, "new", 0640, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(file.ok());
  auto wrote = fs_->Write(file->fh, 0, Bytes(data));
  ASSERT_TRUE(wrote.ok());
  ASSERT_EQ(*wrote, data.size());

  Status closed;
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndListingsWhileHeld(
      file->entry.attr.ino, "new", data.size(), 0640, [&] { return fs_->Flush(file->fh); },
      &closed));
  ASSERT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(fs_->Release(file->fh).ok());
  Result<ObjectInfo> stored = memory_->head("new");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size, data.size());
}

// And for a rename's copy (S3) of a file open here.
TEST_F(FilesystemServerWorkTest, StatAndListingsOfAnOpenFileDoNotWaitForItsRenamesCopy) {
  const std::string data = Pattern(100000);
  PutObject("old", data);
  ASSERT_NO_FATAL_FAILURE(HoldCalls(HeldStore::Call::kCopy));
  const uint64_t ino = LookupIno("old");
  auto open = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(open.ok());
  auto before = fs_->GetAttr(ino);
  ASSERT_TRUE(before.ok());

  Status renamed;
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndListingsWhileHeld(
      ino, "old", data.size(), before->attr.mode & 07777,
      [&] { return fs_->Rename(kRootIno, "old", kRootIno, "new", 0); }, &renamed));
  ASSERT_TRUE(renamed.ok()) << renamed.ToString();
  EXPECT_TRUE(fs_->Release(*open).ok());
  EXPECT_FALSE(memory_->head("old").ok());
  Result<ObjectInfo> stored = memory_->head("new");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size, data.size());
}

// A read of a file open for writing fetches the stored bytes it has not staged yet under the
// file's lock: stat and listings of the file waited for that fetch (a stuck server's read
// allowance, every retry).
TEST_F(FilesystemServerWorkTest, StatAndListingsOfAnEditedFileDoNotWaitForTheFetchOfItsBytes) {
  const std::string data = Pattern(100000);
  PutObject("edited", data);
  ASSERT_NO_FATAL_FAILURE(HoldCalls(HeldStore::Call::kRead));
  const uint64_t ino = LookupIno("edited");
  auto before = fs_->GetAttr(ino);
  ASSERT_TRUE(before.ok());
  auto file = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(file.ok());
  auto wrote = fs_->Write(*file, 0, Bytes("head"));  // staged as a hole: nothing fetched
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();

  Status read;
  std::vector<std::byte> buf(1000);
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndListingsWhileHeld(
      ino, "edited", data.size(), before->attr.mode & 07777,
      [&]() -> Status {
        Result<size_t> n = fs_->Read(*file, 50000, buf);
        if (!n.ok()) return n.status();
        return *n == buf.size() ? Status::Ok() : IoError(std::to_string(*n) + " read");
      },
      &read));
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), buf.size()),
            data.substr(50000, buf.size()));
  EXPECT_TRUE(fs_->Release(*file).ok());
}

// Without an ETag the first write fetches the whole stored file, under its lock, before the
// file has local state: stat and listings show it as stored meanwhile.
TEST_F(FilesystemServerWorkTest, StatAndListingsOfAFileDoNotWaitForItsWholeFetchWithoutAnETag) {
  const std::string data = Pattern(100000);
  PutObject("untagged", data);
  ASSERT_NO_FATAL_FAILURE(HoldCalls(HeldStore::Call::kRead));
  held_->HideETags();
  const uint64_t ino = LookupIno("untagged");
  auto before = fs_->GetAttr(ino);
  ASSERT_TRUE(before.ok());
  auto file = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(file.ok());

  Status wrote;
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndListingsWhileHeld(
      ino, "untagged", data.size(), before->attr.mode & 07777,
      [&]() -> Status { return fs_->Write(*file, 0, Bytes("head")).status(); }, &wrote));
  ASSERT_TRUE(wrote.ok()) << wrote.ToString();
  ASSERT_TRUE(fs_->Release(*file).ok());
  std::string stored(data.size(), '\0');
  Result<size_t> n =
      memory_->read("untagged", 0,
                    std::span(reinterpret_cast<std::byte*>(stored.data()), stored.size()), nullptr);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, data.size());
  EXPECT_EQ(stored, "head" + data.substr(4));
}

// An unlink removes the object under the file's lock: stat and listings show the file as it
// was until it is gone.
TEST_F(FilesystemServerWorkTest, StatAndListingsOfAFileDoNotWaitForItsRemoval) {
  const std::string data = Pattern(100000);
  PutObject("removed", data);
  ASSERT_NO_FATAL_FAILURE(HoldCalls(HeldStore::Call::kRemove));
  const uint64_t ino = LookupIno("removed");
  auto open = fs_->Open(ino, O_RDONLY);  // the file has its state here
  ASSERT_TRUE(open.ok());
  auto before = fs_->GetAttr(ino);
  ASSERT_TRUE(before.ok());

  Status removed;
  ASSERT_NO_FATAL_FAILURE(ExpectStatAndListingsWhileHeld(
      ino, "removed", data.size(), before->attr.mode & 07777,
      [&] { return fs_->Unlink(kRootIno, "removed"); }, &removed));
  ASSERT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_FALSE(memory_->head("removed").ok());
  EXPECT_TRUE(fs_->Release(*open).ok());
}

TEST(KernelMaxCopyCallTest, IsTheLargest32BitCountInWholePages) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (page == 4096) {
    EXPECT_EQ(KernelMaxCopyCall(), 0xfffff000u);
  }
  EXPECT_EQ(KernelMaxCopyCall() % page, 0u);
  EXPECT_GT(KernelMaxCopyCall() + page, uint64_t{0xffffffff});
  EXPECT_LE(KernelMaxCopyCall(), uint64_t{0xffffffff});
}

TEST_F(FilesystemCopyTest, CopyOfUnsavedSourceUploadsItFirst) {
  auto src = fs_->Create(kRootIno, "src", 0644, O_RDWR | O_CREAT);
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(fs_->Write(src->fh, 0, Bytes("fresh bytes")).ok());
  auto dst = fs_->Create(kRootIno, "dst", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(dst.ok());
  auto n = fs_->CopyFileRange(src->fh, 0, dst->fh, 0, 1 << 20, 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 11u);
  ASSERT_TRUE(fs_->Release(dst->fh).ok());
  ASSERT_TRUE(fs_->Release(src->fh).ok());
  EXPECT_EQ(memory_->contents("dst"), "fresh bytes");
  EXPECT_EQ(memory_->contents("src"), "fresh bytes");
}

TEST_F(FilesystemCopyTest, PartialCopyIsDoneInTheDaemon) {
  const std::string data = Pattern(50000);
  PutObject("src", data);
  PutObject("dst", "0123456789");
  auto src_fh = fs_->Open(LookupIno("src"), O_RDONLY);
  auto dst_fh = fs_->Open(LookupIno("dst"), O_RDWR);
  ASSERT_TRUE(src_fh.ok() && dst_fh.ok());
  uint64_t copies = metrics_.copy_requests.load();
  auto n = fs_->CopyFileRange(*src_fh, 1000, *dst_fh, 5, 30000, 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 30000u);
  ASSERT_TRUE(fs_->Release(*dst_fh).ok());
  ASSERT_TRUE(fs_->Release(*src_fh).ok());
  EXPECT_EQ(metrics_.copy_requests.load(), copies);
  EXPECT_EQ(memory_->contents("dst"), "01234" + data.substr(1000, 30000));
}

TEST_F(FilesystemCopyTest, CopyOntoNonEmptyDestinationAtZeroIsInDaemon) {
  PutObject("src", "abcdef");
  PutObject("dst", "XYZXYZXYZ");
  auto src_fh = fs_->Open(LookupIno("src"), O_RDONLY);
  auto dst_fh = fs_->Open(LookupIno("dst"), O_RDWR);
  ASSERT_TRUE(src_fh.ok() && dst_fh.ok());
  auto n = fs_->CopyFileRange(*src_fh, 0, *dst_fh, 0, 100, 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 6u);
  ASSERT_TRUE(fs_->Release(*dst_fh).ok());
  ASSERT_TRUE(fs_->Release(*src_fh).ok());
  EXPECT_EQ(memory_->contents("dst"), "abcdefXYZ");
}

TEST_F(FilesystemCopyTest, EtagXattrIsTheMd5OfContent) {
  auto created = fs_->Create(kRootIno, "f", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("hash me")).ok());
  // Never uploaded yet: no ETag.
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(created->entry.attr.ino, kEtagXattr).status()), ENODATA);
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  auto etag = fs_->GetXattr(created->entry.attr.ino, kEtagXattr);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, HexMd5(Md5Of(std::string_view("hash me"))));
  auto kind = fs_->GetXattr(created->entry.attr.ino, kEtagKindXattr);
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, ETagKindName(ETag::Kind::kPlainMd5));
  auto names = fs_->ListXattr(created->entry.attr.ino);
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), kEtagXattr), names->end());
}

TEST_F(FilesystemCopyTest, UserXattrPersistsAcrossInstances) {
  PutObject("f", "x");
  uint64_t ino = LookupIno("f");
  uint64_t puts = metrics_.put_requests.load();
  ASSERT_TRUE(fs_->SetXattr(ino, "user.color", std::string("bl\0ue", 5), 0).ok());
  EXPECT_EQ(metrics_.put_requests.load(), puts);  // a self-copy, not an upload
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, "user.color", "red", kXattrCreate)), EEXIST);
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, "user.other", "v", kXattrReplace)), ENODATA);
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  ASSERT_TRUE(head->metadata.count("xattr"));
  auto decoded = DecodeXattrs(head->metadata.at("xattr"));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->at("user.color"), std::string("bl\0ue", 5));

  auto fresh = NewFilesystem();
  auto e = fresh->Lookup(kRootIno, "f");
  ASSERT_TRUE(e.ok());
  auto v = fresh->GetXattr(e->attr.ino, "user.color");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, std::string("bl\0ue", 5));
  auto names = fresh->ListXattr(e->attr.ino);
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), "user.color"), names->end());
  ASSERT_TRUE(fresh->RemoveXattr(e->attr.ino, "user.color").ok());
  EXPECT_EQ(ErrnoFromStatus(fresh->GetXattr(e->attr.ino, "user.color").status()), ENODATA);
  EXPECT_EQ(memory_->contents("f"), "x");
}

TEST_F(FilesystemCopyTest, ReservedXattrsAreReadOnly) {
  PutObject("f", "x");
  uint64_t ino = LookupIno("f");
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, kEtagXattr, "forged", 0)), EPERM);
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, "user.objfs.anything", "v", 0)), EPERM);
  // Removing user.etag, or setting it to itself (as rsync -aX does), changes nothing and
  // succeeds; it is still there.
  auto etag = fs_->GetXattr(ino, kEtagXattr);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_TRUE(fs_->RemoveXattr(ino, kEtagXattr).ok());
  EXPECT_TRUE(fs_->SetXattr(ino, kEtagXattr, *etag, 0).ok());
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, kEtagXattr, *etag, kXattrCreate)), EEXIST);
  EXPECT_EQ(fs_->GetXattr(ino, kEtagXattr).value(), *etag);
  EXPECT_EQ(ErrnoFromStatus(fs_->RemoveXattr(kRootIno, kEtagXattr)), ENODATA);
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, "security.selinux", "v", 0)), EOPNOTSUPP);
  uint64_t heads = metrics_.head_requests.load();
  // The kernel asks for security.capability before writes: answered without a request.
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "security.capability").status()), EOPNOTSUPP);
  EXPECT_EQ(metrics_.head_requests.load(), heads);
}

TEST_F(FilesystemCopyTest, StatsXattrOnRoot) {
  PutObject("f", "x");
  ASSERT_TRUE(fs_->Lookup(kRootIno, "f").ok());
  auto stats = fs_->GetXattr(kRootIno, kStatsXattr);
  ASSERT_TRUE(stats.ok());
  // The counters, then what the filesystem adds (pending uploads, staged bytes).
  EXPECT_EQ(stats->rfind(metrics_.ToText(), 0), 0u) << *stats;
  EXPECT_NE(stats->find("\npending_upload_files=0\n"), std::string::npos) << *stats;
  EXPECT_NE(stats->find("head_requests="), std::string::npos);
  auto names = fs_->ListXattr(kRootIno);
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), kStatsXattr), names->end());
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(LookupIno("f"), kStatsXattr).status()), ENODATA);
}

TEST_F(FilesystemCopyTest, XattrOnDirectoryWritesItsMarker) {
  PutObject("d/f", "x");
  uint64_t d = LookupIno("d");
  ASSERT_TRUE(fs_->SetXattr(d, "user.k", "v", 0).ok());
  EXPECT_TRUE(memory_->head("d/").ok());
  auto fresh = NewFilesystem();
  auto e = fresh->Lookup(kRootIno, "d");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(S_ISDIR(e->attr.mode));
  auto v = fresh->GetXattr(e->attr.ino, "user.k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "v");
}

// A store without native ETags (the in-memory store behaving as SFTP) under ContentEtagStore,
// as an sftp:// mount stacks them.
class FilesystemContentEtagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-content-etag-fs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_dir_ = tmpl;
    MemoryStoreOptions memory;
    memory.native_etags = false;
    memory_ = std::make_shared<MemoryStore>(memory);
    auto db = StoreDb::Open(cache_dir_ + "/db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::make_shared<StoreDb>(std::move(db).value());
    etags_ = std::make_shared<ContentEtagStore>(memory_, db_, &metrics_, /*racy_ns=*/0);
    store_ = std::make_shared<MetricsStore>(etags_, metrics_);
    options_.cache_dir = cache_dir_ + "/staging";
    options_.prefetch.read_buffer = 16 << 10;
    options_.prefetch.max_readahead = 16 << 10;
    options_.content_etags = etags_.get();
    fs_ = NewFilesystem();
  }
  // As an sftp:// mount stacks them: ContentEtagStore on top, found by the Filesystem itself.
  void UseContentEtagStoreOnTop() {
    options_.content_etags = nullptr;
    store_.reset();
    fs_ = nullptr;
    auto fs = Filesystem::Create(etags_, options_, &metrics_, std::make_shared<FakeClock>());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
  }
  void TearDown() override {
    fs_.reset();
    std::filesystem::remove_all(cache_dir_);
  }
  std::unique_ptr<Filesystem> NewFilesystem() {
    auto fs = Filesystem::Create(store_, options_, &metrics_, std::make_shared<FakeClock>());
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    return std::move(fs).value();
  }
  uint64_t LookupIno(const std::string& name) {
    auto e = fs_->Lookup(kRootIno, name);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? e->attr.ino : 0;
  }
  uint64_t WriteFile(const std::string& name, std::string_view data) {
    auto created = fs_->Create(kRootIno, name, 0644, O_WRONLY | O_CREAT | O_TRUNC);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return 0;
    EXPECT_TRUE(fs_->Write(created->fh, 0, Bytes(data)).ok());
    EXPECT_TRUE(fs_->Release(created->fh).ok());
    return created->entry.attr.ino;
  }
  static std::string Md5Hex(std::string_view data) { return HexMd5(Md5Of(data)); }
  bool ListsEtag(uint64_t ino) {
    auto names = fs_->ListXattr(ino);
    EXPECT_TRUE(names.ok()) << names.status().ToString();
    return names.ok() && std::find(names->begin(), names->end(), kEtagXattr) != names->end();
  }

  std::string cache_dir_;
  Metrics metrics_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<StoreDb> db_;
  std::shared_ptr<ContentEtagStore> etags_;
  std::shared_ptr<MetricsStore> store_;
  FilesystemOptions options_;
  std::unique_ptr<Filesystem> fs_;
};

// An edit fsynced while open copies its untouched parts on the server; the staged copy kept for
// the handle fetches them later by the new object's version. A touch of the file changes that
// version (SFTP's is its size and mtime) but not its bytes: the handle still reads them all,
// and a later close still uploads.
TEST_F(FilesystemContentEtagTest, AnOpenEditedFileStaysReadableAfterATouch) {
  std::string data = PatternOf(11 << 20);  // more than two 5 MiB parts
  ASSERT_TRUE(memory_->put("f", MemorySource(data), PutOptions()).ok());
  const uint64_t ino = LookupIno("f");
  auto fh = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("X")).ok());
  ASSERT_TRUE(fs_->Fsync(*fh, false).ok());
  data[0] = 'X';
  ASSERT_TRUE(memory_->contents("f") == data);
  FileAttr attr;
  attr.mtime_ns = int64_t{1500000000} * 1000000000;
  auto touched = fs_->SetAttr(ino, kSetMtime, attr, std::nullopt);
  ASSERT_TRUE(touched.ok()) << touched.status().ToString();
  std::string got(4096, '\0');
  auto n = fs_->Read(*fh, 6 << 20, std::as_writable_bytes(std::span(got.data(), got.size())));
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(got == data.substr(6 << 20, 4096));
  // A later write's close uploads the file (its untouched bytes come from the touched object).
  ASSERT_TRUE(fs_->Write(*fh, 1, Bytes("Y")).ok());
  Status closed = fs_->Flush(*fh);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(fs_->Release(*fh).ok());
  data[1] = 'Y';
  EXPECT_TRUE(memory_->contents("f") == data);
}

TEST_F(FilesystemContentEtagTest, EtagOfAFileWrittenElsewhereIsHashedOnceThenRecorded) {
  const std::string data = PatternOf(100000);
  ASSERT_TRUE(memory_->put("outside", MemorySource(data), PutOptions()).ok());
  uint64_t ino = LookupIno("outside");
  EXPECT_TRUE(ListsEtag(ino));
  EXPECT_EQ(metrics_.bytes_hashed.load(), 0u) << "listing the names hashes nothing";

  auto etag = fs_->GetXattr(ino, kEtagXattr);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, Md5Hex(data));
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
  auto kind = fs_->GetXattr(ino, kEtagKindXattr);
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(*kind, ETagKindName(ETag::Kind::kPlainMd5));

  // From the record from now on, in this mount and the next.
  auto again = fs_->GetXattr(ino, kEtagXattr);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *etag);
  fs_ = NewFilesystem();
  auto fresh = fs_->GetXattr(LookupIno("outside"), kEtagXattr);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, *etag);
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());

  // Changed by someone else: hashed anew, never the stale MD5.
  ASSERT_TRUE(memory_->put("outside", MemorySource(std::string_view("new")), PutOptions()).ok());
  fs_ = NewFilesystem();
  auto changed = fs_->GetXattr(LookupIno("outside"), kEtagXattr);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(*changed, Md5Hex("new"));
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size() + 3);
}

TEST_F(FilesystemContentEtagTest, EtagOfAFileWrittenThroughTheMountNeedsNoHashing) {
  uint64_t ino = WriteFile("f", "written by objfs");
  auto etag = fs_->GetXattr(ino, kEtagXattr);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, Md5Hex("written by objfs"));
  fs_ = NewFilesystem();
  auto fresh = fs_->GetXattr(LookupIno("f"), kEtagXattr);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(*fresh, Md5Hex("written by objfs"));
  EXPECT_EQ(metrics_.bytes_hashed.load(), 0u);
}

TEST_F(FilesystemContentEtagTest, CopyFileRangeCarriesTheSourceEtagWithoutHashing) {
  const std::string data = PatternOf(100000);
  ASSERT_TRUE(memory_->put("src", MemorySource(data), PutOptions()).ok());
  uint64_t src_ino = LookupIno("src");
  auto src_etag = fs_->GetXattr(src_ino, kEtagXattr);
  ASSERT_TRUE(src_etag.ok()) << src_etag.status().ToString();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  ASSERT_EQ(hashed, data.size());

  auto src_fh = fs_->Open(src_ino, O_RDONLY);
  ASSERT_TRUE(src_fh.ok());
  auto dst = fs_->Create(kRootIno, "dst", 0600, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(dst.ok());
  const uint64_t reads = metrics_.read_requests.load();
  auto n = fs_->CopyFileRange(*src_fh, 0, dst->fh, 0, data.size(), 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  ASSERT_TRUE(fs_->Release(dst->fh).ok());
  ASSERT_TRUE(fs_->Release(*src_fh).ok());
  EXPECT_EQ(memory_->contents("dst"), data);

  auto dst_etag = fs_->GetXattr(dst->entry.attr.ino, kEtagXattr);
  ASSERT_TRUE(dst_etag.ok()) << dst_etag.status().ToString();
  EXPECT_EQ(*dst_etag, *src_etag);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  EXPECT_EQ(metrics_.read_requests.load(), reads);
}

TEST_F(FilesystemContentEtagTest, RenameCarriesTheRecord) {
  const std::string data = PatternOf(50000);
  ASSERT_TRUE(memory_->put("old", MemorySource(data), PutOptions()).ok());
  auto etag = fs_->GetXattr(LookupIno("old"), kEtagXattr);
  ASSERT_TRUE(etag.ok());
  const uint64_t hashed = metrics_.bytes_hashed.load();
  ASSERT_TRUE(fs_->Rename(kRootIno, "old", kRootIno, "new", 0).ok());
  auto renamed = fs_->GetXattr(LookupIno("new"), kEtagXattr);
  ASSERT_TRUE(renamed.ok()) << renamed.status().ToString();
  EXPECT_EQ(*renamed, *etag);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  auto old_record = db_->Get<ContentETagRecord>("old");
  ASSERT_TRUE(old_record.ok());
  EXPECT_FALSE(old_record->has_value());
  auto new_record = db_->Get<ContentETagRecord>("new");
  ASSERT_TRUE(new_record.ok());
  ASSERT_TRUE(new_record->has_value());
  EXPECT_EQ(HexMd5((*new_record)->md5), *etag);
}

TEST_F(FilesystemContentEtagTest, ReadOfAFileReplacedUnderneathFails) {
  const std::string data = PatternOf(100000);
  for (const char* name : {"by-version", "by-md5"}) {
    SCOPED_TRACE(name);
    // Written elsewhere, the mount knows its version; written through the mount, its MD5.
    uint64_t ino;
    if (std::string_view(name) == "by-version") {
      ASSERT_TRUE(memory_->put(name, MemorySource(data), PutOptions()).ok());
      ino = LookupIno(name);
    } else {
      ino = WriteFile(name, data);
    }
    auto fh = fs_->Open(ino, O_RDONLY);
    ASSERT_TRUE(fh.ok());
    std::string buf(4096, '\0');
    std::span<std::byte> span(reinterpret_cast<std::byte*>(buf.data()), buf.size());
    auto first = fs_->Read(*fh, 0, span);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    // Same size, new content and mtime, written by someone else.
    std::string other = data;
    other[90000] ^= 1;
    ASSERT_TRUE(memory_->put(name, MemorySource(other), PutOptions()).ok());
    auto later = fs_->Read(*fh, 90000, span);
    ASSERT_FALSE(later.ok());
    EXPECT_EQ(ErrnoFromStatus(later.status()), ESTALE) << later.status().ToString();
    ASSERT_TRUE(fs_->Release(*fh).ok());
  }
}

TEST_F(FilesystemContentEtagTest, AContentEtagStoreOnTopIsUsedForEtags) {
  UseContentEtagStoreOnTop();
  ASSERT_TRUE(memory_->put("outside", MemorySource(std::string_view("x")), PutOptions()).ok());
  uint64_t ino = LookupIno("outside");
  EXPECT_TRUE(ListsEtag(ino));
  auto etag = fs_->GetXattr(ino, kEtagXattr);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, Md5Hex("x"));
  EXPECT_EQ(metrics_.bytes_hashed.load(), 1u);
}

TEST_F(FilesystemContentEtagTest, WithoutContentEtagsAVersionIsNeverShown) {
  options_.content_etags = nullptr;
  fs_ = NewFilesystem();
  ASSERT_TRUE(memory_->put("outside", MemorySource(std::string_view("x")), PutOptions()).ok());
  uint64_t ino = LookupIno("outside");
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, kEtagXattr).status()), ENODATA);
  EXPECT_FALSE(ListsEtag(ino));
  uint64_t written = WriteFile("written", "by objfs");
  auto etag = fs_->GetXattr(written, kEtagXattr);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, Md5Hex("by objfs"));
}

}  // namespace
}  // namespace objfs
