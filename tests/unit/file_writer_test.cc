// The write side of a file apart from Filesystem: staging, marking dirty, uploading, accepting
// for the write-back window, removing, held metadata changes and the recovery of what a crash
// left, over the in-memory store. One test per rule the part must keep.
#include "fs/file_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"
#include "fs/errno_map.h"
#include "fs/object_metadata.h"

namespace objfs {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// `size` bytes that differ from one position (and `seed`) to the next.
std::string Pattern(size_t size, uint32_t seed) {
  std::string s(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

class FileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-file-writer-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Mount();
  }
  void TearDown() override {
    writer_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A mount over the same cache_dir; what the previous one left there stays (a crash).
  // `reserve`: the bytes staging leaves free on the cache disk (cache_reserve).
  void Mount(double writeback = 0, double hold_metadata = 0, uint64_t reserve = 0) {
    writer_.reset();
    inodes_ = std::make_unique<InodeTable>();
    meta_cache_ =
        std::make_unique<MetaCache>(clock_, std::chrono::seconds(1), std::chrono::seconds(1));
    auto staging = StagingArea::Open(dir_ + "/staging", reserve);
    ASSERT_TRUE(staging.ok());
    staging_ = std::move(*staging);
    FileWriter::Options options;
    options.writeback = writeback;
    options.hold_metadata = hold_metadata;
    options.writeback_thread = false;
    options.log = [this](LogLevel, const std::string& line) { log_.push_back(line); };
    writer_ = std::make_unique<FileWriter>(store_.get(), staging_.get(), inodes_.get(),
                                           meta_cache_.get(), &attrs_, &metrics_, clock_, options);
  }

  // The inode of `key`, with a staged copy of the stored object (or an empty new file).
  std::shared_ptr<Inode> Staged(const std::string& key, bool in_store) {
    const uint64_t ino = inodes_->Acquire(key, 1);
    std::shared_ptr<Inode> inode = inodes_->Get(ino);
    MetaRecord rec;
    if (in_store) {
      auto head = memory_->head(key);
      EXPECT_TRUE(head.ok());
      rec = attrs_.FromInfo(*head, false);
      rec.complete = true;
    } else {
      rec.mode = S_IFREG | 0644;
      rec.complete = true;
    }
    MutexLock lock(&inode->mu);
    EXPECT_TRUE(writer_->Stage(*inode, key, rec, !in_store).ok());
    if (!in_store) inode->in_store = false;
    return inode;
  }

  // Writes `data` at 0 the way Filesystem::Write does.
  Status Write(Inode& inode, const std::string& key, const std::string& data) {
    MutexLock lock(&inode.mu);
    OBJFS_RETURN_IF_ERROR(writer_->MarkDirty(inode, key));
    OBJFS_RETURN_IF_ERROR(inode.staged->WriteAt(0, Bytes(data)));
    inode.attr.size = inode.staged->size();
    return Status::Ok();
  }

  // A write of `data` at `offset` as Filesystem::Write makes it (the edit notes what it touched).
  Status WriteAt(Inode& inode, const std::string& key, uint64_t offset, const std::string& data) {
    MutexLock lock(&inode.mu);
    OBJFS_RETURN_IF_ERROR(writer_->MarkDirty(inode, key));
    OBJFS_RETURN_IF_ERROR(inode.staged->WriteAt(offset, Bytes(data)));
    writer_->Wrote(inode, key, offset, data.size());
    inode.attr.size = inode.staged->size();
    return Status::Ok();
  }

  // "f", stored as `object` (3 MiB), written "hello" at 1 MiB and closed into the write-back
  // window of a mount whose staged file holds only that (sparse), which then "crashes": what it
  // staged stays for the next Mount().
  void AcceptSparseEdit(const std::string& object) {
    Mount(/*writeback=*/60);
    Put("f", object);
    std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->MarkDirty(*inode, "f").ok());
    ASSERT_TRUE(inode->staged->WriteAt(1 << 20, Bytes("hello")).ok());
    ASSERT_TRUE(writer_->DeferUpload(inodes_->InoOf("f"), *inode).ok());
    ASSERT_TRUE(inode->staged->has_base());
  }

  std::vector<StagedLeftover> Leftovers() {
    auto left = staging_->Leftovers();
    EXPECT_TRUE(left.ok());
    return left.ok() ? *left : std::vector<StagedLeftover>{};
  }

  void Put(const std::string& key, const std::string& data) {
    ASSERT_TRUE(memory_->put(key, MemorySource(data), {}).ok());
  }

  // Holds a change of the stored object `key`'s attributes (made by `change`) the way
  // Filesystem::SetAttr does; its record is returned.
  struct Held {
    std::shared_ptr<Inode> inode;
    MetaRecord rec;
  };
  Held Hold(const std::string& key, const std::function<void(FileAttr&)>& change) {
    const uint64_t ino = inodes_->Acquire(key, 1);
    Held held{inodes_->Get(ino), {}};
    auto head = memory_->head(key);
    EXPECT_TRUE(head.ok());
    if (!head.ok()) return held;
    held.rec = attrs_.FromInfo(*head, false);
    held.rec.complete = true;
    MutexLock lock(&held.inode->mu);
    FileAttr attr = ObjectAttrs::ToAttr(ino, held.rec);
    change(attr);
    Metadata metadata;
    SetPosixMetadata(attr.mode, attr.uid, attr.gid, attr.mtime_ns, &metadata);
    EXPECT_TRUE(writer_->HoldMetadata(ino, *held.inode, key, held.rec, attr, {}, metadata));
    return held;
  }

  std::string dir_;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultInjectingStore> faults_ = std::make_shared<FaultInjectingStore>(memory_);
  // What the writer of the next Mount() uses.
  std::shared_ptr<ObjectStore> store_ = faults_;
  ObjectAttrs attrs_{AttrDefaults{}};
  Metrics metrics_;
  std::unique_ptr<InodeTable> inodes_;
  std::unique_ptr<MetaCache> meta_cache_;
  std::unique_ptr<StagingArea> staging_;
  std::unique_ptr<FileWriter> writer_;
  std::vector<std::string> log_;
};

TEST_F(FileWriterTest, StagingCopiesTheStoredObjectAndCachesIt) {
  Put("f", "stored");
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  MutexLock lock(&inode->mu);
  EXPECT_EQ(inode->state, Inode::FileState::kCached);
  ASSERT_NE(inode->staged, nullptr);
  EXPECT_EQ(inode->staged->size(), 6u);
  // A clean copy has no crash record: a crash never uploads a fetched copy.
  EXPECT_TRUE(Leftovers().empty());
}

// Another client replaces the object after it was staged: its bytes are never mixed with the
// older object's. The read of a range not fetched yet fails (EIO), and the log says why.
TEST_F(FileWriterTest, AReadFailsWhenTheObjectWasReplacedSinceItWasStaged) {
  Put("f", "old version");
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  MetaRecord rec = attrs_.FromInfo(*head, false);
  const uint64_t ino = inodes_->Acquire("f", 1);
  std::shared_ptr<Inode> inode = inodes_->Get(ino);
  MutexLock lock(&inode->mu);
  ASSERT_TRUE(writer_->Stage(*inode, "f", rec, /*empty=*/false).ok());
  Put("f", "new version, longer");  // another client, after the open
  Status fetched = writer_->FetchStaged(*inode, "f", 0, 4);
  EXPECT_EQ(fetched.code(), StatusCode::kIoError) << fetched.ToString();
  EXPECT_EQ(ErrnoFromStatus(fetched), EIO);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("changed or was removed on the server"), std::string::npos) << log_[0];
  ASSERT_NE(inode->staged, nullptr);
  EXPECT_TRUE(inode->staged->present().empty());  // nothing of the new object came in
}

// An existing file opened for writing is not downloaded: a 1 MiB append to a 64 MiB object
// reads at most one read_buffer of it before its upload.
TEST_F(FileWriterTest, AnAppendFetchesNothingOfTheObject) {
  const std::string object = Pattern(64 << 20, 1);
  Put("f", object);
  const int reads_before = faults_->calls(StoreOp::kRead);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  const std::string tail = Pattern(1 << 20, 2);
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->MarkDirty(*inode, "f").ok());
    ASSERT_TRUE(inode->staged->WriteAt(object.size(), Bytes(tail)).ok());
    inode->attr.size = inode->staged->size();
    EXPECT_LE(faults_->calls(StoreOp::kRead) - reads_before, 1);
    // On disk: a hole where the object's bytes are, the appended MiB only.
    struct stat st;
    ASSERT_EQ(::stat(inode->staged->data_path().c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), object.size() + tail.size());
    EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{4} << 20);
    // The upload completes it from the object (until uploads copy unchanged parts on the
    // server).
    ASSERT_TRUE(writer_->Upload(*inode, "f").ok());
  }
  EXPECT_TRUE(memory_->contents("f") == object + tail);
}

// A read of a range not fetched yet fetches only that range, rounded out to read_buffer.
TEST_F(FileWriterTest, AReadFetchesOnlyTheRangeRead) {
  const std::string object = Pattern(16 << 20, 3);
  Put("f", object);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  MutexLock lock(&inode->mu);
  const int reads_before = faults_->calls(StoreOp::kRead);
  const uint64_t offset = (10 << 20) + 5;
  ASSERT_TRUE(writer_->FetchStaged(*inode, "f", offset, 100).ok());
  EXPECT_EQ(faults_->calls(StoreOp::kRead) - reads_before, 1);
  EXPECT_EQ(inode->staged->present().Ranges(),
            (std::vector<ExtentSet::Range>{{10 << 20, 11 << 20}}));
  std::string got(100, '\0');
  auto n = inode->staged->ReadAt(offset, std::as_writable_bytes(std::span(got)));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(got, object.substr(offset, 100));
  // Fetched once: a read of the same block asks the store for nothing.
  ASSERT_TRUE(writer_->FetchStaged(*inode, "f", 10 << 20, 1 << 20).ok());
  EXPECT_EQ(faults_->calls(StoreOp::kRead) - reads_before, 1);
}

// A fetch after a write fills only around the written bytes; a truncate cuts the object off
// where it went, so that growing the file again shows zeros, not the object.
TEST_F(FileWriterTest, AFetchNeverOverwritesWrittenBytesNorUndoesATruncate) {
  const std::string object = Pattern(3 << 20, 4);
  Put("f", object);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  MutexLock lock(&inode->mu);
  ASSERT_TRUE(writer_->MarkDirty(*inode, "f").ok());
  ASSERT_TRUE(inode->staged->WriteAt(100, Bytes("WRITTEN")).ok());
  ASSERT_TRUE(inode->staged->Truncate(2 << 20).ok());
  ASSERT_TRUE(inode->staged->Truncate((2 << 20) + 10).ok());
  ASSERT_TRUE(writer_->FetchStaged(*inode, "f", 0, inode->staged->size()).ok());
  EXPECT_FALSE(inode->staged->has_base());  // whole now
  std::string expected = object.substr(0, 2 << 20) + std::string(10, '\0');
  expected.replace(100, 7, "WRITTEN");
  std::string got(expected.size(), '\0');
  auto n = inode->staged->ReadAt(0, std::as_writable_bytes(std::span(got)));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, expected.size());
  EXPECT_TRUE(got == expected);
}

TEST_F(FileWriterTest, AWriteMakesTheFileUnsavedWithAWritingRecord) {
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "data").ok());
  {
    MutexLock lock(&inode->mu);
    EXPECT_TRUE(inode->unsaved());
  }
  std::vector<StagedLeftover> left = Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].key, "f");
  EXPECT_FALSE(left[0].publishable());  // no close accepted it
}

TEST_F(FileWriterTest, AnUploadStoresTheDataAndRemovesItsOwnCrashRecord) {
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "data").ok());
  {
    MutexLock lock(&inode->mu);
    inode->attr.mode = S_IFREG | 0600;
    ASSERT_TRUE(writer_->Upload(*inode, "f").ok());
    EXPECT_EQ(inode->state, Inode::FileState::kStored);  // no open handle: the copy goes
    EXPECT_EQ(inode->staged, nullptr);
  }
  EXPECT_EQ(memory_->contents("f"), "data");
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(ParsePosixMetadata(head->metadata).mode, S_IFREG | 0600u);
  EXPECT_TRUE(Leftovers().empty());
  // The metadata cache knows the object as this mount's own write.
  MetaCache::Hit hit = meta_cache_->Get("f");
  EXPECT_EQ(hit.state, MetaCache::State::kPositive);
  EXPECT_TRUE(hit.record.own_write);
}

TEST_F(FileWriterTest, AFailedUploadKeepsTheStagedDataAccepted) {
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "data").ok());
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  {
    MutexLock lock(&inode->mu);
    EXPECT_FALSE(writer_->Upload(*inode, "f", /*accept=*/true).ok());
    EXPECT_TRUE(inode->unsaved());
    ASSERT_NE(inode->staged, nullptr);
  }
  EXPECT_FALSE(memory_->head("f").ok());
  std::vector<StagedLeftover> left = Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(left[0].publishable());  // the next mount uploads it
  // A retry uploads it.
  ASSERT_TRUE(writer_->Flush(inodes_->InoOf("f"), inode).ok());
  EXPECT_EQ(memory_->contents("f"), "data");
  EXPECT_TRUE(Leftovers().empty());
}

// A store whose upload sessions do not start while `stalled`: the server did not answer
// within operation_timeout.
class StalledUploadStart : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override {
    ++starts;
    if (stalled) {
      return TimedOutError("start_upload " + std::string(key) + ": gave up (operation_timeout)");
    }
    return ForwardingStore::start_upload(key, options);
  }
  bool stalled = true;
  int starts = 0;
};

// The server does not answer the start of the upload that would copy an edited file's
// untouched parts: the upload fails with that timeout at once, fetching nothing for a whole
// put (which would wait as long again on a silent server); the data stays accepted, and the
// retry copies the untouched parts.
TEST_F(FileWriterTest, AnEditWhoseUploadDidNotStartInTimeFailsWithoutAWholePut) {
  const std::string object = Pattern(24 << 20, 30);
  Put("f", object);
  auto stalled = std::make_shared<StalledUploadStart>(faults_);
  store_ = stalled;
  Mount();
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  const int reads_before = faults_->calls(StoreOp::kRead);
  const int puts_before = faults_->calls(StoreOp::kPut);
  const uint64_t at = (12 << 20) + 5;
  std::string edited = object;
  edited.replace(at, 5, "PATCH");
  ASSERT_TRUE(WriteAt(*inode, "f", at, "PATCH").ok());
  {
    MutexLock lock(&inode->mu);
    Status closed = writer_->Upload(*inode, "f", /*accept=*/true);
    EXPECT_EQ(closed.code(), StatusCode::kTimedOut) << closed.ToString();
    EXPECT_EQ(stalled->starts, 1);
    EXPECT_EQ(faults_->calls(StoreOp::kRead), reads_before);  // nothing fetched
    EXPECT_EQ(faults_->calls(StoreOp::kPut), puts_before);
    EXPECT_TRUE(inode->unsaved());
  }
  EXPECT_EQ(metrics_.streamed_fallbacks.load(), 0u);
  EXPECT_TRUE(memory_->contents("f") == object);
  std::vector<StagedLeftover> left = Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(left[0].publishable());

  // The server answers again: the retry is an edit again, no whole put.
  stalled->stalled = false;
  ASSERT_TRUE(writer_->Flush(inodes_->InoOf("f"), inode).ok());
  EXPECT_EQ(stalled->starts, 2);
  EXPECT_EQ(faults_->calls(StoreOp::kPut), puts_before);
  EXPECT_TRUE(memory_->contents("f") == edited);
}

// An upload whose every write() and copy() gives up as on a server that stopped answering
// after the upload started; counts the calls.
class SilentPieces : public ForwardingUpload {
 public:
  SilentPieces(std::unique_ptr<Upload> target, std::atomic<int>* calls)
      : ForwardingUpload(std::move(target)), calls_(calls) {}
  Status write(uint64_t offset, const ByteSource&, uint64_t, uint64_t) override {
    ++*calls_;
    return TimedOutError("write at " + std::to_string(offset) + ": gave up (operation_timeout)");
  }
  Status copy(uint64_t offset, const ObjectInfo&, uint64_t, uint64_t) override {
    ++*calls_;
    return TimedOutError("copy at " + std::to_string(offset) + ": gave up (operation_timeout)");
  }

 private:
  std::atomic<int>* calls_;
};

class SilentAfterStart : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override {
    OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<Upload> started,
                           ForwardingStore::start_upload(key, options));
    return std::unique_ptr<Upload>(std::make_unique<SilentPieces>(std::move(started), &calls));
  }
  std::atomic<int> calls{0};
};

// The server stops answering once the edit's upload started: the first piece to give up ends
// the close (each piece would wait operation_timeout, four at a time: a 512 MiB edit in 16 MiB
// parts, 8 x 120 s). Only the pieces already under way run: at most one per pool thread.
TEST_F(FileWriterTest, AnEditStopsSendingPiecesOnceOneGaveUp) {
  const std::string object = Pattern(80 << 20, 31);  // 16 parts of 5 MiB
  Put("f", object);
  auto silent = std::make_shared<SilentAfterStart>(faults_);
  store_ = silent;
  Mount();
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  ASSERT_TRUE(WriteAt(*inode, "f", (12 << 20) + 5, "PATCH").ok());
  MutexLock lock(&inode->mu);
  Status closed = writer_->Upload(*inode, "f", /*accept=*/true);
  EXPECT_EQ(closed.code(), StatusCode::kTimedOut) << closed.ToString();
  EXPECT_TRUE(inode->unsaved());
  EXPECT_LE(silent->calls.load(), static_cast<int>(FileWriter::Options().stream_threads));
  EXPECT_TRUE(memory_->contents("f") == object);
}

// An upload whose copy_whole() copies the whole base at once, as SFTP's cp on the server does
// (emulated by copies of its parts), or fails as a cp whose end is unknown; counts the calls.
class WholeCopies : public ForwardingUpload {
 public:
  WholeCopies(std::unique_ptr<Upload> target, std::atomic<int>* wholes, std::atomic<int>* copies,
              bool fail)
      : ForwardingUpload(std::move(target)), wholes_(wholes), copies_(copies), fail_(fail) {}
  Status copy_whole(const ObjectInfo& base) override {
    ++*wholes_;
    if (fail_) return TransientError("cp on the server: the connection broke");
    for (uint64_t at = 0; at < base.size; at += part_size()) {
      OBJFS_RETURN_IF_ERROR(
          ForwardingUpload::copy(at, base, at, std::min(part_size(), base.size - at)));
    }
    return Status::Ok();
  }
  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    ++*copies_;
    return ForwardingUpload::copy(offset, base, base_offset, length);
  }

 private:
  std::atomic<int>* wholes_;
  std::atomic<int>* copies_;
  bool fail_;
};

class WholeCopyStore : public ForwardingStore {
 public:
  WholeCopyStore(std::shared_ptr<ObjectStore> target, bool fail)
      : ForwardingStore(std::move(target)), fail_(fail) {}
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override {
    OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<Upload> started,
                           ForwardingStore::start_upload(key, options));
    return std::unique_ptr<Upload>(
        std::make_unique<WholeCopies>(std::move(started), &wholes, &copies, fail_));
  }
  std::atomic<int> wholes{0};
  std::atomic<int> copies{0};

 private:
  bool fail_;
};

class WholeCopyEditTest : public FileWriterTest {
 protected:
  // Patches a stored 24 MiB file "f" in its middle through a WholeCopyStore (whose
  // copy_whole() fails, or not) and closes it; returns the store. `edited_` is what "f" must
  // then hold, and `puts_before_` the puts made before the close.
  std::shared_ptr<WholeCopyStore> PatchAndClose(bool fail) {
    const std::string object = Pattern(24 << 20, 32);
    Put("f", object);
    auto whole = std::make_shared<WholeCopyStore>(faults_, fail);
    store_ = whole;
    Mount();
    std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
    puts_before_ = faults_->calls(StoreOp::kPut);
    const uint64_t at = (12 << 20) + 5;
    edited_ = object;
    edited_.replace(at, 5, "PATCH");
    EXPECT_TRUE(WriteAt(*inode, "f", at, "PATCH").ok());
    MutexLock lock(&inode->mu);
    Status closed = writer_->Upload(*inode, "f", /*accept=*/true);
    EXPECT_TRUE(closed.ok()) << closed.ToString();
    return whole;
  }
  std::string edited_;
  int puts_before_ = 0;
};

// Where the server copies the whole base at once (SFTP's cp), an edit does that first and
// copies no range of its own; only the touched part goes up.
TEST_F(WholeCopyEditTest, AnEditCopiesTheWholeBaseAtOnceWhereTheServerCan) {
  std::shared_ptr<WholeCopyStore> whole = PatchAndClose(/*fail=*/false);
  EXPECT_EQ(whole->wholes.load(), 1);
  EXPECT_EQ(whole->copies.load(), 0);
  EXPECT_EQ(faults_->calls(StoreOp::kPut), puts_before_);
  EXPECT_EQ(metrics_.streamed_fallbacks.load(), 0u);
  EXPECT_TRUE(memory_->contents("f") == edited_);
}

// A whole copy whose end is unknown leaves that upload unused (a copy may still be running
// into it): the edit starts again on a new upload, with copies of the untouched ranges, and
// nothing is fetched for a whole put.
TEST_F(WholeCopyEditTest, AnEditWhoseWholeCopyFailedCopiesItsRangesOnANewUpload) {
  std::shared_ptr<WholeCopyStore> whole = PatchAndClose(/*fail=*/true);
  EXPECT_EQ(whole->wholes.load(), 1);  // not tried on the new upload
  EXPECT_GE(whole->copies.load(), 4);  // 24 MiB in parts of 5 MiB: the untouched ones
  EXPECT_EQ(faults_->calls(StoreOp::kPut), puts_before_);  // no whole put
  EXPECT_EQ(metrics_.streamed_fallbacks.load(), 0u);
  EXPECT_TRUE(memory_->contents("f") == edited_);
}

TEST_F(FileWriterTest, AnUploadNotAcceptedLeavesNoAcceptedRecordOnFailure) {
  // A rename uploading a file still being written must not vouch for it.
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "half").ok());
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  {
    MutexLock lock(&inode->mu);
    EXPECT_FALSE(writer_->Upload(*inode, "f", /*accept=*/false).ok());
  }
  std::vector<StagedLeftover> left = Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_FALSE(left[0].publishable());
}

TEST_F(FileWriterTest, ARemovedFileIsNeverUploaded) {
  Mount(/*writeback=*/5);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "data").ok());
  const uint64_t ino = inodes_->InoOf("f");
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->DeferUpload(ino, *inode).ok());
    writer_->Discard(*inode);
    EXPECT_EQ(inode->state, Inode::FileState::kRemoved);
    EXPECT_EQ(inode->staged, nullptr);
  }
  clock_->Advance(std::chrono::seconds(10));
  EXPECT_TRUE(writer_->UploadDue().ok());
  EXPECT_TRUE(writer_->FlushAll().ok());
  EXPECT_EQ(faults_->calls(StoreOp::kPut), 0);
  EXPECT_TRUE(Leftovers().empty());  // nor by the next mount
}

TEST_F(FileWriterTest, ARemovedFileStaysReadableForOpenHandlesWithoutARecord) {
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  inode->open_handles.store(1);
  ASSERT_TRUE(Write(*inode, "f", "data").ok());
  MutexLock lock(&inode->mu);
  writer_->Discard(*inode);
  ASSERT_NE(inode->staged, nullptr);
  EXPECT_TRUE(Leftovers().empty());
  // Writes after the removal change the copy only.
  EXPECT_TRUE(writer_->MarkDirty(*inode, "f").ok());
  EXPECT_EQ(inode->state, Inode::FileState::kRemoved);
  EXPECT_TRUE(Leftovers().empty());
}

TEST_F(FileWriterTest, TheWindowUploadsWhenDueAndNotBefore) {
  Mount(/*writeback=*/5);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "data").ok());
  const uint64_t ino = inodes_->InoOf("f");
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->Close(ino, *inode).ok());
  }
  EXPECT_EQ(writer_->pending_uploads(), 1u);
  EXPECT_TRUE(writer_->UploadDue().ok());
  EXPECT_FALSE(memory_->head("f").ok());
  clock_->Advance(std::chrono::seconds(6));
  EXPECT_TRUE(writer_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "data");
  EXPECT_EQ(writer_->pending_uploads(), 0u);
}

TEST_F(FileWriterTest, AcceptedDataSurvivesACrashAndIsUploadedByTheNextMount) {
  Mount(/*writeback=*/60);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "closed").ok());
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->DeferUpload(inodes_->InoOf("f"), *inode).ok());
  }
  inode.reset();
  Mount();  // the crash: nothing uploaded
  EXPECT_FALSE(memory_->head("f").ok());
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  EXPECT_EQ(writer_->recovering_files(), 1u);
  ASSERT_TRUE(writer_->UploadDue().ok());  // due at once, without a window
  EXPECT_EQ(memory_->contents("f"), "closed");
  EXPECT_EQ(writer_->recovering_files(), 0u);
  EXPECT_TRUE(Leftovers().empty());
}

TEST_F(FileWriterTest, DataNoCloseAcceptedIsSetAsideNotUploaded) {
  Put("f", "stored");
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  ASSERT_TRUE(Write(*inode, "f", "HALF").ok());
  inode.reset();
  Mount();
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  ASSERT_TRUE(writer_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_EQ(faults_->calls(StoreOp::kPut), 0);
}

TEST_F(FileWriterTest, AWriterAfterAcceptanceLeavesTheAcceptedVersionForACrash) {
  Mount(/*writeback=*/60);
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*inode, "f", "closed").ok());
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->DeferUpload(inodes_->InoOf("f"), *inode).ok());
  }
  ASSERT_TRUE(Write(*inode, "f", "HALF").ok());  // written again, not closed
  {
    MutexLock lock(&inode->mu);
    ASSERT_NE(inode->accepted_copy, nullptr);
  }
  inode.reset();
  Mount();
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  ASSERT_TRUE(writer_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "closed");  // never the mix
}

TEST_F(FileWriterTest, OfTwoAcceptedVersionsTheNewerOneIsUploaded) {
  Mount(/*writeback=*/60);
  // Two inodes of one key: the file was replaced while its first version waited.
  std::shared_ptr<Inode> older = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*older, "f", "older").ok());
  {
    MutexLock lock(&older->mu);
    ASSERT_TRUE(writer_->DeferUpload(inodes_->InoOf("f"), *older).ok());
  }
  inodes_->Unbind("f");
  std::shared_ptr<Inode> newer = Staged("f", /*in_store=*/false);
  ASSERT_TRUE(Write(*newer, "f", "newer").ok());
  // The newer data file is modified later (mtime decides).
  struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};
  {
    MutexLock lock(&newer->mu);
    ASSERT_TRUE(writer_->DeferUpload(inodes_->InoOf("f"), *newer).ok());
    const std::string path = newer->staged->data_path();
    MutexLock lock2(&older->mu);
    struct timespec old_times[2] = {{1, 0}, {1, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, older->staged->data_path().c_str(), old_times, 0), 0);
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  older.reset();
  newer.reset();
  Mount();
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  ASSERT_TRUE(writer_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "newer");
  EXPECT_EQ(faults_->calls(StoreOp::kPut), 1);
}

// A sparse file accepted by a close and left by a crash: the next mount completes it from the
// object it was staged from and uploads it whole.
TEST_F(FileWriterTest, ASparseAcceptedLeftoverIsCompletedFromItsBase) {
  const std::string object = Pattern(3 << 20, 5);
  ASSERT_NO_FATAL_FAILURE(AcceptSparseEdit(object));
  Mount();  // the crash: nothing uploaded
  std::vector<StagedLeftover> left = Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].base_key, "f");
  EXPECT_EQ(left[0].present.Ranges(), (std::vector<ExtentSet::Range>{{1 << 20, (1 << 20) + 5}}));
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  ASSERT_TRUE(writer_->UploadDue().ok());
  std::string expected = object;
  expected.replace(1 << 20, 5, "hello");
  EXPECT_TRUE(memory_->contents("f") == expected);
  EXPECT_TRUE(Leftovers().empty());
}

// ... and when another client replaced that object meanwhile, the leftover cannot be
// completed: it is set aside, never uploaded, and the log says which ranges it holds.
TEST_F(FileWriterTest, ASparseLeftoverWhoseBaseChangedIsSetAside) {
  ASSERT_NO_FATAL_FAILURE(AcceptSparseEdit(Pattern(3 << 20, 6)));
  Mount();
  Put("f", "another client's");
  log_.clear();
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  ASSERT_TRUE(writer_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "another client's");
  EXPECT_EQ(writer_->recovering_files(), 0u);
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/staging/unfinished/f"));
  bool said = false;
  for (const std::string& line : log_) {
    // The written bytes, as the record of the close names them: the rest is a hole.
    said = said || (line.find("cannot be completed") != std::string::npos &&
                    line.find("by its close is at [1048576, 1048581),") != std::string::npos);
  }
  EXPECT_TRUE(said) << ::testing::PrintToString(log_);
}

// ... and when cache_dir has no room for the bytes it lacks, its upload reads them from the
// object as it sends them, by the version the edit was made to. (The next mount once waited
// for room, "for the next mount", at every start.)
TEST_F(FileWriterTest, ASparseLeftoverOnAFullCacheDiskIsUploadedWithItsBaseReadFromTheServer) {
  const std::string object = Pattern(3 << 20, 7);
  ASSERT_NO_FATAL_FAILURE(AcceptSparseEdit(object));
  Mount(/*writeback=*/0, /*hold_metadata=*/0, /*reserve=*/UINT64_MAX / 2);  // no room at all
  ASSERT_TRUE(writer_->RecoverStaged().ok());
  ASSERT_TRUE(writer_->UploadDue().ok());
  std::string expected = object;
  expected.replace(1 << 20, 5, "hello");
  EXPECT_TRUE(memory_->contents("f") == expected) << ::testing::PrintToString(log_);
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/staging/unfinished"));
}

TEST_F(FileWriterTest, ARefusedMetadataChangeIsUploadedWithoutIt) {
  Put("f", "stored");
  std::shared_ptr<Inode> inode = Staged("f", /*in_store=*/true);
  ASSERT_TRUE(Write(*inode, "f", "new data").ok());
  faults_->FailNth(StoreOp::kPut, 1,
                   Status(StatusCode::kInvalidArgument, "too large", "MetadataTooLarge"));
  {
    MutexLock lock(&inode->mu);
    inode->extra_metadata["big"] = std::string(100, 'x');
    ASSERT_TRUE(writer_->Upload(*inode, "f").ok());
  }
  EXPECT_EQ(memory_->contents("f"), "new data");
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.count("big"), 0u);
  ASSERT_FALSE(log_.empty());
  EXPECT_NE(log_.back().find("without its metadata change (big)"), std::string::npos)
      << log_.back();
}

TEST_F(FileWriterTest, AnUploadCarriesAHeldMetadataChangeAndDropsItsRecord) {
  Mount(/*writeback=*/0, /*hold_metadata=*/30);
  Put("f", "stored");
  auto [inode, rec] = Hold("f", [](FileAttr& attr) { attr.mode = S_IFREG | 0600; });
  ASSERT_TRUE(inode);
  EXPECT_EQ(faults_->calls(StoreOp::kSetAttributes), 0);
  auto held = staging_->AttrsLeftovers();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->size(), 1u);
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->Stage(*inode, "f", rec, /*empty=*/false).ok());
  }
  ASSERT_TRUE(Write(*inode, "f", "STORED").ok());
  {
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->Upload(*inode, "f").ok());
    EXPECT_FALSE(inode->pending_metadata.has_value());
  }
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(memory_->contents("f"), "STORED");
  EXPECT_EQ(ParsePosixMetadata(head->metadata).mode, S_IFREG | 0600u);
  EXPECT_EQ(faults_->calls(StoreOp::kSetAttributes), 0);  // no self-copy
  held = staging_->AttrsLeftovers();
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(held->empty());
}

TEST_F(FileWriterTest, AHeldChangeIsAppliedWhenDue) {
  Mount(/*writeback=*/0, /*hold_metadata=*/30);
  Put("f", "stored");
  ASSERT_TRUE(Hold("f", [](FileAttr& attr) { attr.uid = 42; }).inode);
  ASSERT_TRUE(writer_->UploadDue().ok());
  EXPECT_EQ(faults_->calls(StoreOp::kSetAttributes), 0);
  clock_->Advance(std::chrono::seconds(31));
  ASSERT_TRUE(writer_->UploadDue().ok());
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(ParsePosixMetadata(head->metadata).uid, 42u);
  EXPECT_EQ(memory_->contents("f"), "stored");
}

// ---- EditPieces: the layout of an edit assembled on the server ----

constexpr uint64_t kMiB = 1 << 20;

}  // namespace

void PrintTo(const EditPiece& piece, std::ostream* out) {
  *out << (piece.copy ? "copy " : "upload ") << piece.offset << "+" << piece.length;
}

namespace {

ExtentSet Touched(std::initializer_list<std::pair<uint64_t, uint64_t>> ranges) {
  ExtentSet set;
  for (auto [offset, length] : ranges) set.Add(offset, length);
  return set;
}

TEST(EditPiecesTest, WholePartsCopyEachUntouchedPartAndUploadTheOthersWhole) {
  const std::vector<EditPiece> want = {
      {0, 16 * kMiB, true}, {16 * kMiB, 16 * kMiB, false}, {32 * kMiB, 8 * kMiB, true}};
  EXPECT_EQ(EditPieces(Touched({{20 * kMiB, 1}}), 40 * kMiB, 40 * kMiB, 16 * kMiB, true), want);
}

TEST(EditPiecesTest, AnyRangeUploadsOnlyWhatWasWritten) {
  // 4 KiB written into the middle of 100 MiB: the rest is copied, in pieces of 64 MiB at most.
  const uint64_t at = 50 * kMiB;
  const std::vector<EditPiece> want = {
      {0, at, true}, {at, 4096, false}, {at + 4096, 50 * kMiB - 4096, true}};
  EXPECT_EQ(EditPieces(Touched({{at, 4096}}), 100 * kMiB, 100 * kMiB, 8 * kMiB, false), want);
}

TEST(EditPiecesTest, AnAppendCopiesTheBaseAndUploadsTheTail) {
  std::vector<EditPiece> want;
  for (uint64_t offset = 0; offset < 512 * kMiB; offset += kEditCopyPiece) {
    want.push_back({offset, kEditCopyPiece, true});
  }
  want.push_back({512 * kMiB, kMiB, false});
  EXPECT_EQ(EditPieces(Touched({{512 * kMiB, kMiB}}), 512 * kMiB, 513 * kMiB, 8 * kMiB, false),
            want);
  // Bytes past the base are uploaded even where no write touched them (an extending truncate).
  EXPECT_EQ(EditPieces(ExtentSet(), 16 * kMiB, 17 * kMiB, 8 * kMiB, false),
            (std::vector<EditPiece>{{0, 16 * kMiB, true}, {16 * kMiB, kMiB, false}}));
}

TEST(EditPiecesTest, ShortUntouchedGapsAreUploadedWithTheirNeighbours) {
  const uint64_t at = 10 * kMiB;
  // Two writes 100 KiB apart, one near the start, one near the end: four uploads would need
  // three copies of less than kMinEditCopy between them.
  const ExtentSet touched =
      Touched({{100 << 10, 10}, {at, 10}, {at + (100 << 10), 10}, {20 * kMiB - (100 << 10), 10}});
  const std::vector<EditPiece> want = {{0, (100 << 10) + 10, false},
                                       {(100 << 10) + 10, at - (100 << 10) - 10, true},
                                       {at, (100 << 10) + 10, false},
                                       {at + (100 << 10) + 10, 10 * kMiB - (200 << 10) - 10, true},
                                       {20 * kMiB - (100 << 10), 100 << 10, false}};
  EXPECT_EQ(EditPieces(touched, 20 * kMiB, 20 * kMiB, 8 * kMiB, false), want);
}

TEST(EditPiecesTest, ATruncatedFileCopiesOnlyUpToItsNewSize) {
  ExtentSet touched;
  touched.Add(30 * kMiB, UINT64_MAX - 30 * kMiB);  // as a truncate to 30 MiB notes it
  EXPECT_EQ(EditPieces(touched, 100 * kMiB, 30 * kMiB, 8 * kMiB, false),
            (std::vector<EditPiece>{{0, 30 * kMiB, true}}));
  // Grown back to 40 MiB since: the bytes past 30 MiB are the file's own, not the base's.
  EXPECT_EQ(EditPieces(touched, 100 * kMiB, 40 * kMiB, 8 * kMiB, false),
            (std::vector<EditPiece>{
                {0, 30 * kMiB, true}, {30 * kMiB, 8 * kMiB, false}, {38 * kMiB, 2 * kMiB, false}}));
}

}  // namespace
}  // namespace objfs
