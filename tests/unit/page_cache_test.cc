// The page-cache decisions of Filesystem over the in-memory store (whether an open keeps the
// kernel's pages, when lookup and getattr have them dropped), and PageInvalidator's queue.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/metrics.h"
#include "backend/mutex.h"
#include "cache/clock.h"
#include "fs/filesystem.h"
#include "fs/page_invalidator.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

class PageCacheDecisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-page-cache-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_dir_ = tmpl;
    memory_ = std::make_shared<MemoryStore>();
    clock_ = std::make_shared<FakeClock>();
    FilesystemOptions options;
    options.cache_dir = cache_dir_ + "/staging";
    options.writeback_thread = false;
    auto fs = Filesystem::Create(memory_, options, &metrics_, clock_);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
    fs_->set_page_invalidator([this](uint64_t ino) { invalidated_.push_back(ino); });
  }

  void TearDown() override {
    fs_.reset();
    std::filesystem::remove_all(cache_dir_);
  }

  void Put(const std::string& key, std::string_view data) {
    ASSERT_TRUE(memory_->put(key, MemorySource(data), PutOptions{}).ok());
  }

  // Opens `ino` read-only and closes it again; returns whether the open kept the pages.
  bool OpenKeeps(uint64_t ino, int flags = O_RDONLY) {
    bool keep = false;
    Result<uint64_t> fh = fs_->Open(ino, flags, &keep);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    if (fh.ok()) {
      EXPECT_TRUE(fs_->Release(*fh).ok());
    }
    return keep;
  }

  std::string cache_dir_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<FakeClock> clock_;
  Metrics metrics_;
  std::unique_ptr<Filesystem> fs_;
  std::vector<uint64_t> invalidated_;
};

TEST_F(PageCacheDecisionTest, SameVersionKeepsThePagesANewOneDropsThem) {
  Put("f", "first");
  Result<Entry> entry = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(entry.ok());
  const uint64_t ino = entry->attr.ino;
  EXPECT_FALSE(OpenKeeps(ino));  // the kernel's pages, if any, are of no known version
  EXPECT_TRUE(OpenKeeps(ino));
  EXPECT_EQ(metrics_.page_cache_keeps.load(), 1u);

  Put("f", "other");                         // same size, another ETag
  clock_->Advance(std::chrono::seconds(2));  // past attr_timeout
  EXPECT_FALSE(OpenKeeps(ino));
  EXPECT_EQ(metrics_.page_cache_drops.load(), 1u);
  EXPECT_TRUE(OpenKeeps(ino));
  EXPECT_TRUE(invalidated_.empty());  // opens drop the pages themselves
}

TEST_F(PageCacheDecisionTest, GetAttrAndLookupSeeingANewVersionDropThePages) {
  Put("f", "first");
  Result<Entry> entry = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(entry.ok());
  const uint64_t ino = entry->attr.ino;
  EXPECT_FALSE(OpenKeeps(ino));

  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->GetAttr(ino).ok());
  EXPECT_TRUE(invalidated_.empty());  // unchanged

  Put("f", "other");
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->GetAttr(ino).ok());
  EXPECT_EQ(invalidated_, std::vector<uint64_t>{ino});
  EXPECT_EQ(metrics_.page_cache_invalidations.load(), 1u);
  ASSERT_TRUE(fs_->Lookup(kRootIno, "f").ok());
  EXPECT_EQ(invalidated_.size(), 1u);  // once per change
  EXPECT_FALSE(OpenKeeps(ino));        // nor does the next open keep what may be left
  EXPECT_TRUE(OpenKeeps(ino));

  Put("f", "third");
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->Lookup(kRootIno, "f").ok());
  EXPECT_EQ(invalidated_.size(), 2u);
}

// The drop that getattr queues is sent from another thread, maybe after an open has already
// dropped the pages itself and read the new version into them: then it is not sent.
TEST_F(PageCacheDecisionTest, AQueuedDropAnOpenHasDoneIsNotSent) {
  Put("f", "first");
  Result<Entry> entry = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(entry.ok());
  const uint64_t ino = entry->attr.ino;
  EXPECT_FALSE(OpenKeeps(ino));

  Put("f", "other");
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->GetAttr(ino).ok());
  ASSERT_EQ(invalidated_, std::vector<uint64_t>{ino});
  EXPECT_FALSE(OpenKeeps(ino));  // drops the pages itself, and reads "other" into them
  EXPECT_FALSE(fs_->TakeQueuedPageDrop(ino));
  EXPECT_TRUE(OpenKeeps(ino));

  // No open in between (a program that has the file mapped): the drop is sent, once.
  Put("f", "third");
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->GetAttr(ino).ok());
  EXPECT_TRUE(fs_->TakeQueuedPageDrop(ino));
  EXPECT_FALSE(fs_->TakeQueuedPageDrop(ino));
}

TEST_F(PageCacheDecisionTest, WhatTheMountWroteKeepsThePages) {
  Result<CreatedFile> created = fs_->Create(kRootIno, "f", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const std::string data = "written here";
  ASSERT_TRUE(fs_->Write(created->fh, 0, std::as_bytes(std::span(data.data(), data.size()))).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());  // uploaded
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->GetAttr(created->entry.attr.ino).ok());
  EXPECT_TRUE(invalidated_.empty());
  EXPECT_TRUE(OpenKeeps(created->entry.attr.ino));
  EXPECT_EQ(metrics_.page_cache_drops.load(), 0u);
}

TEST(PageInvalidatorTest, SendsEachQueuedInodeOnceAndAllBeforeStopping) {
  Mutex mu;
  CondVar cv;
  bool release = false;
  std::vector<uint64_t> sent;
  PageInvalidator invalidator([&](uint64_t ino) {
    MutexLock lock(&mu);
    while (!release) cv.Wait(&mu);  // a kernel slow to drop the pages
    sent.push_back(ino);
    return 0;
  });
  // Posting never waits for the kernel, and an inode queued twice is sent once.
  invalidator.Post(7);
  for (uint64_t ino : {3, 5, 5, 3}) invalidator.Post(ino);
  {
    MutexLock lock(&mu);
    release = true;
    cv.SignalAll();
  }
  invalidator.Stop();
  invalidator.Post(9);  // after Stop: dropped
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, (std::vector<uint64_t>{3, 5, 7}));
  EXPECT_EQ(invalidator.sent(), 3u);
}

// Names go through the same queue: each queued name once, all before Stop returns; with no
// entry notifier given, PostEntry does nothing.
TEST(PageInvalidatorTest, SendsEachQueuedNameOnceBesideThePages) {
  Mutex mu;
  CondVar cv;
  bool release = false;
  std::vector<std::string> sent;
  auto gate = [&](std::string what) {
    MutexLock lock(&mu);
    while (!release) cv.Wait(&mu);  // a kernel slow to answer
    sent.push_back(std::move(what));
    return 0;
  };
  PageInvalidator invalidator([&](uint64_t ino) { return gate("pages of " + std::to_string(ino)); },
                              [&](uint64_t parent, const std::string& name) {
                                return gate(std::to_string(parent) + "/" + name);
                              });
  // The pages go first, and hold the thread until released: the names queue up behind them.
  invalidator.Post(4);
  for (int i = 0; i < 2; ++i) {
    invalidator.PostEntry(1, "a");
    invalidator.PostEntry(9, "b c");
  }
  {
    MutexLock lock(&mu);
    release = true;
    cv.SignalAll();
  }
  invalidator.Stop();
  invalidator.PostEntry(1, "late");  // after Stop: dropped
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, (std::vector<std::string>{"1/a", "9/b c", "pages of 4"}));
  EXPECT_EQ(invalidator.sent(), 3u);

  PageInvalidator pages_only([](uint64_t) { return 0; });
  pages_only.PostEntry(1, "a");
  pages_only.Stop();
  EXPECT_EQ(pages_only.sent(), 0u);
}

// A notification the kernel never finishes (a read the stopped loop will not answer) must not
// keep Stop, and so the unmount, waiting.
TEST(PageInvalidatorTest, StopGivesUpOnANotificationThatHangs) {
  struct Blocker {
    Mutex mu;
    CondVar cv;
    bool entered GUARDED_BY(mu) = false;
    bool release GUARDED_BY(mu) = false;
    bool returned GUARDED_BY(mu) = false;
  };
  auto blocker = std::make_shared<Blocker>();
  auto invalidator = std::make_unique<PageInvalidator>([blocker](uint64_t) {
    MutexLock lock(&blocker->mu);
    blocker->entered = true;
    blocker->cv.SignalAll();
    while (!blocker->release) blocker->cv.Wait(&blocker->mu);
    blocker->returned = true;
    blocker->cv.SignalAll();
    return 0;
  });
  invalidator->Post(1);
  {
    MutexLock lock(&blocker->mu);
    while (!blocker->entered) blocker->cv.Wait(&blocker->mu);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(invalidator->Stop(std::chrono::milliseconds(200)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  invalidator.reset();  // the thread left behind keeps what it uses
  MutexLock lock(&blocker->mu);
  blocker->release = true;
  blocker->cv.SignalAll();
  while (!blocker->returned) blocker->cv.Wait(&blocker->mu);
}

// The session a hung notification uses must outlive it: after a Stop that gave up, another Stop
// tells when the notification has returned (as the unmount makes it), and only then is the
// thread done with the session.
TEST(PageInvalidatorTest, AStopThatGaveUpCanWaitAgainForTheNotificationToReturn) {
  Mutex mu;
  CondVar cv;
  bool entered = false;
  bool release = false;
  PageInvalidator invalidator([&](uint64_t) {
    MutexLock lock(&mu);
    entered = true;
    cv.SignalAll();
    while (!release) cv.Wait(&mu);
    return 0;
  });
  invalidator.Post(1);
  invalidator.Post(2);
  {
    MutexLock lock(&mu);
    while (!entered) cv.Wait(&mu);
  }
  EXPECT_FALSE(invalidator.Stop(std::chrono::milliseconds(100)));
  EXPECT_FALSE(invalidator.Stop(std::chrono::milliseconds(10)))
      << "ended while still in the kernel";
  {
    MutexLock lock(&mu);
    release = true;
    cv.SignalAll();
  }
  EXPECT_TRUE(invalidator.Stop(std::chrono::seconds(30)));
  EXPECT_EQ(invalidator.sent(), 1u) << "what was queued behind the hung one is dropped";
}

}  // namespace
}  // namespace objfs
