// Uploads streamed while a file is written (fs/streamed_upload.h), and FileWriter's use of them,
// over the in-memory store: the part state machine (sent, changed, forgotten by a truncate),
// the bound on parts in flight, and the fallback to a whole put.
#include "fs/streamed_upload.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/md5.h"
#include "cache/io_pool.h"
#include "fs/file_writer.h"
#include "fs/object_metadata.h"

namespace objfs {
namespace {

constexpr uint64_t kPart = 64 << 10;

std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// `n` bytes that differ from part to part and from `seed` to seed.
std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed + (i / 4096) * 7 + i % 251);
  return s;
}

// The "-N" ETag of `data` sent in parts of kPart.
ETag PartsETag(const std::string& data) {
  std::vector<Md5Digest> parts;
  for (size_t offset = 0; offset < data.size(); offset += kPart) {
    parts.push_back(Md5Of(std::string_view(data).substr(offset, kPart)));
  }
  return MultipartETag(parts);
}

// Polls `done` for up to 10 s.
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Part writes wait at a gate the test opens, and may fail; counts how many run at once.
class Gate {
 public:
  void Close() {
    MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }
  void FailWrites(bool fail, StatusCode code = StatusCode::kIoError) {
    MutexLock lock(&mu_);
    fail_ = fail;
    fail_code_ = code;
  }
  Status Enter() {
    MutexLock lock(&mu_);
    ++running_;
    max_running_ = std::max(max_running_, running_);
    while (!open_) cv_.Wait(&mu_);
    --running_;
    ++writes_;
    if (fail_) return Status(fail_code_, "injected part failure");
    return Status::Ok();
  }
  // While held, an upload's abort waits (at most kAbortHold) as one to a stopped server would.
  void HoldAborts(bool hold) {
    MutexLock lock(&mu_);
    hold_aborts_ = hold;
    cv_.SignalAll();
  }
  void EnterAbort() {
    MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + kAbortHold;
    while (hold_aborts_) {
      if (!cv_.WaitUntil(&mu_, deadline)) {
        ++aborts_held_out_;
        return;
      }
    }
  }
  // Aborts that waited out the hold: what waited for them waited for a stopped server.
  int aborts_held_out() const {
    MutexLock lock(&mu_);
    return aborts_held_out_;
  }
  int running() const {
    MutexLock lock(&mu_);
    return running_;
  }
  int max_running() const {
    MutexLock lock(&mu_);
    return max_running_;
  }
  int writes() const {
    MutexLock lock(&mu_);
    return writes_;
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = true;
  bool fail_ GUARDED_BY(mu_) = false;
  StatusCode fail_code_ GUARDED_BY(mu_) = StatusCode::kIoError;
  int running_ GUARDED_BY(mu_) = 0;
  int max_running_ GUARDED_BY(mu_) = 0;
  int writes_ GUARDED_BY(mu_) = 0;
  bool hold_aborts_ GUARDED_BY(mu_) = false;
  int aborts_held_out_ GUARDED_BY(mu_) = 0;
  static constexpr std::chrono::seconds kAbortHold{20};
};

class GatedUpload : public ForwardingUpload {
 public:
  GatedUpload(std::unique_ptr<Upload> target, Gate* gate)
      : ForwardingUpload(std::move(target)), gate_(gate) {}
  Status write(uint64_t offset, const ByteSource& source, uint64_t source_offset,
               uint64_t length) override {
    OBJFS_RETURN_IF_ERROR(gate_->Enter());
    copies_at_write = copies.load();
    return ForwardingUpload::write(offset, source, source_offset, length);
  }
  Status copy(uint64_t offset, const ObjectInfo& base, uint64_t base_offset,
              uint64_t length) override {
    ++copies;
    return ForwardingUpload::copy(offset, base, base_offset, length);
  }
  Status abort() override {
    gate_->EnterAbort();
    return ForwardingUpload::abort();
  }
  static inline std::atomic<int> copies{0};
  // The copies begun when the last write left the gate.
  static inline std::atomic<int> copies_at_write{0};

 private:
  Gate* gate_;
};

class GatedStore : public ForwardingStore {
 public:
  GatedStore(std::shared_ptr<ObjectStore> target, Gate* gate)
      : ForwardingStore(std::move(target)), gate_(gate) {}
  Result<std::unique_ptr<Upload>> start_upload(std::string_view key,
                                               const UploadOptions& options) override {
    ++starts;
    OBJFS_ASSIGN_OR_RETURN(std::unique_ptr<Upload> upload,
                           ForwardingStore::start_upload(key, options));
    return std::unique_ptr<Upload>(std::make_unique<GatedUpload>(std::move(upload), gate_));
  }
  std::atomic<int> starts{0};

 private:
  Gate* gate_;
};

MemoryStoreOptions SmallParts() {
  MemoryStoreOptions options;
  options.part_size = kPart;
  options.multipart_threshold = kPart;
  return options;
}

class StreamedUploadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-streamed-upload-test-XXXXXX";
    fd_ = ::mkstemp(tmpl);
    ASSERT_GE(fd_, 0);
    path_ = tmpl;
  }
  void TearDown() override {
    stream_.reset();
    pool_.reset();
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  void Start(size_t max_in_flight) {
    auto upload = store_->start_upload("f", {});
    ASSERT_TRUE(upload.ok()) << upload.status().ToString();
    StreamedUpload::Options options;
    options.max_in_flight = max_in_flight;
    options.pool = pool_.get();
    options.metrics = &metrics_;
    stream_ = std::make_shared<StreamedUpload>(
        std::move(*upload), ::open(path_.c_str(), O_RDONLY | O_CLOEXEC), options);
    ASSERT_EQ(stream_->part_size(), kPart);
  }

  // Writes `data` at `offset` of the file and tells the upload, as FileWriter::Wrote does.
  void Write(uint64_t offset, const std::string& data) {
    ASSERT_EQ(::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(data.size()));
    if (offset + data.size() > content_.size()) content_.resize(offset + data.size());
    content_.replace(offset, data.size(), data);
    stream_->Wrote(offset, data.size(), content_.size());
  }
  void Truncate(uint64_t size) {
    ASSERT_EQ(::ftruncate(fd_, static_cast<off_t>(size)), 0);
    content_.resize(size);
    stream_->Truncated(size);
  }
  bool Sent(uint64_t index) { return stream_->state(index) == StreamedUpload::PartState::kSent; }
  void FinishAndCheck() {
    auto done = stream_->Finish(content_.size(), {});
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_TRUE(memory_->contents("f") == content_) << "the stored object differs from the file";
    EXPECT_EQ(done->etag, PartsETag(content_));
    EXPECT_EQ(memory_->uploads_in_progress(), 0);
  }

  Gate gate_;
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>(SmallParts());
  std::shared_ptr<GatedStore> store_ = std::make_shared<GatedStore>(memory_, &gate_);
  std::unique_ptr<IoPool> pool_ = std::make_unique<IoPool>(8);
  Metrics metrics_;
  std::shared_ptr<StreamedUpload> stream_;
  int fd_ = -1;
  std::string path_;
  std::string content_;
};

TEST_F(StreamedUploadTest, PartsTheWriterPassedGoUpBeforeFinish) {
  Start(4);
  Write(0, Pattern(kPart * 3 + 100, 'a'));  // three whole parts and the start of a fourth
  ASSERT_TRUE(Eventually([&] { return Sent(0) && Sent(1) && Sent(2); }));
  EXPECT_EQ(stream_->state(3), std::nullopt) << "the unfinished last part went up";
  EXPECT_EQ(stream_->streamed_parts(), 3u);
  EXPECT_EQ(metrics_.streamed_parts.load(), 3u);
  EXPECT_EQ(memory_->object_count(), 0u) << "visible before Finish";
  FinishAndCheck();
  EXPECT_EQ(gate_.writes(), 4) << "Finish sent more than the last part";
}

TEST_F(StreamedUploadTest, AtMostTheBoundIsInFlightAndTheRestWaitsQueued) {
  gate_.Close();
  Start(2);
  Write(0, Pattern(kPart * 6, 'b'));  // returns at once: nothing waits for the network
  ASSERT_TRUE(Eventually([&] { return gate_.running() == 2; }));
  EXPECT_EQ(stream_->in_flight(), 2u);
  for (uint64_t i = 2; i < 6; ++i) {
    EXPECT_EQ(stream_->state(i), StreamedUpload::PartState::kQueued) << "part " << i;
  }
  gate_.Open();
  ASSERT_TRUE(Eventually([&] {
    for (uint64_t i = 0; i < 6; ++i) {
      if (!Sent(i)) return false;
    }
    return true;
  }));
  EXPECT_EQ(gate_.max_running(), 2);
  FinishAndCheck();
}

TEST_F(StreamedUploadTest, AWriteIntoASentPartSendsItAgainAtFinish) {
  Start(4);
  Write(0, Pattern(kPart * 2, 'c'));
  ASSERT_TRUE(Eventually([&] { return Sent(0) && Sent(1); }));
  Write(kPart / 2, "patched");
  EXPECT_EQ(stream_->state(0), StreamedUpload::PartState::kChanged);
  EXPECT_TRUE(Sent(1));
  Write(kPart * 2, Pattern(kPart, 'd'));
  ASSERT_TRUE(Eventually([&] { return Sent(2); }));
  EXPECT_EQ(stream_->state(0), StreamedUpload::PartState::kChanged)
      << "a changed part goes again only at Finish";
  FinishAndCheck();
}

TEST_F(StreamedUploadTest, AWriteIntoAPartInFlightSendsItAgainAtFinish) {
  gate_.Close();
  Start(4);
  Write(0, Pattern(kPart, 'e'));
  ASSERT_TRUE(Eventually([&] { return gate_.running() == 1; }));
  Write(10, "while in flight");
  EXPECT_EQ(stream_->state(0), StreamedUpload::PartState::kInFlightChanged);
  gate_.Open();
  ASSERT_TRUE(Eventually([&] { return stream_->in_flight() == 0; }));
  EXPECT_EQ(stream_->state(0), StreamedUpload::PartState::kChanged);
  FinishAndCheck();
}

TEST_F(StreamedUploadTest, ATruncateForgetsPartsPastTheEndAndChangesTheLastOne) {
  Start(4);
  Write(0, Pattern(kPart * 4, 'f'));
  ASSERT_TRUE(Eventually([&] { return Sent(0) && Sent(1) && Sent(2) && Sent(3); }));
  Truncate(kPart + 1000);
  EXPECT_TRUE(Sent(0));
  EXPECT_EQ(stream_->state(1), StreamedUpload::PartState::kChanged);
  EXPECT_EQ(stream_->state(2), std::nullopt);
  EXPECT_EQ(stream_->state(3), std::nullopt);
  // Growing again: the forgotten parts go up again, with the new bytes.
  Write(kPart + 1000, Pattern(kPart * 2, 'g'));
  ASSERT_TRUE(Eventually([&] { return Sent(2); }));
  FinishAndCheck();
}

TEST_F(StreamedUploadTest, ATruncateOfAPartInFlightIsNoFailure) {
  gate_.Close();
  Start(4);
  Write(0, Pattern(kPart * 2, 'h'));
  ASSERT_TRUE(Eventually([&] { return gate_.running() == 2; }));
  Truncate(kPart / 2);
  EXPECT_EQ(stream_->state(1), StreamedUpload::PartState::kInFlightChanged);
  gate_.Open();
  ASSERT_TRUE(Eventually([&] { return stream_->in_flight() == 0; }));
  EXPECT_TRUE(stream_->failure().ok()) << stream_->failure().ToString();
  Write(kPart / 2, Pattern(kPart, 'i'));
  FinishAndCheck();
}

TEST_F(StreamedUploadTest, AFailedPartStopsTheUploadAndFinishReportsIt) {
  gate_.FailWrites(true);
  Start(1);
  Write(0, Pattern(kPart * 3, 'j'));
  ASSERT_TRUE(Eventually([&] { return !stream_->failure().ok(); }));
  ASSERT_TRUE(Eventually([&] { return stream_->in_flight() == 0; }));
  EXPECT_EQ(gate_.writes(), 1) << "parts went on after a failure";
  gate_.FailWrites(false);
  auto done = stream_->Finish(content_.size(), {});
  EXPECT_FALSE(done.ok());
  EXPECT_EQ(memory_->object_count(), 0u);
  stream_.reset();
  EXPECT_EQ(memory_->uploads_in_progress(), 0) << "the failed upload was not aborted";
}

TEST_F(StreamedUploadTest, AnAbandonedUploadIsAbortedAfterItsPartsInFlight) {
  gate_.Close();
  Start(2);
  Write(0, Pattern(kPart * 4, 'k'));
  ASSERT_TRUE(Eventually([&] { return gate_.running() == 2; }));
  stream_->Abandon();
  stream_.reset();  // the parts in flight hold it
  EXPECT_EQ(memory_->uploads_in_progress(), 1);
  gate_.Open();
  ASSERT_TRUE(Eventually([&] { return memory_->uploads_in_progress() == 0; }));
  EXPECT_EQ(gate_.writes(), 2) << "queued parts started after the upload was abandoned";
  EXPECT_EQ(memory_->object_count(), 0u);
}

// FileWriter's side: when a file streams, and the fallback to a whole put.
class FileWriterStreamTest : public ::testing::Test {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-writer-stream-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto staging = StagingArea::Open(dir_ + "/staging");
    ASSERT_TRUE(staging.ok());
    staging_ = std::move(*staging);
    MakeWriter();
  }
  // A new store, empty, that asks for `n` parts at once (S3's parallel_parts), and its writer.
  void WithPartsInFlight(size_t n) {
    MemoryStoreOptions options = SmallParts();
    options.parts_in_flight = n;
    memory_ = std::make_shared<MemoryStore>(options);
    store_ = std::make_shared<GatedStore>(memory_, &gate_);
    MakeWriter();
  }
  // The writer of store_, which sends at most 2 parts at once unless the store asks otherwise.
  void MakeWriter() {
    writer_.reset();
    FileWriter::Options options;
    options.writeback_thread = false;
    options.stream_parts_in_flight = 2;
    options.log = [this](LogLevel, const std::string& line) {
      MutexLock lock(&log_mu_);
      log_.push_back(line);
    };
    writer_ = std::make_unique<FileWriter>(store_.get(), staging_.get(), &inodes_, &meta_cache_,
                                           &attrs_, &metrics_, clock_, options);
  }
  void TearDown() override {
    writer_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A new file `key`, open for writing as Filesystem::Create leaves it.
  std::shared_ptr<Inode> Create(const std::string& key) {
    std::shared_ptr<Inode> inode = inodes_.Get(inodes_.Acquire(key, 1));
    MetaRecord rec;
    rec.mode = S_IFREG | 0644;
    rec.complete = true;
    MutexLock lock(&inode->mu);
    EXPECT_TRUE(writer_->Stage(*inode, key, rec, /*empty=*/true).ok());
    inode->in_store = false;
    EXPECT_TRUE(writer_->MarkDirty(*inode, key).ok());
    inode->open_handles.fetch_add(1);
    return inode;
  }
  // A write as Filesystem::Write makes it.
  void Write(Inode& inode, const std::string& key, uint64_t offset, const std::string& data) {
    MutexLock lock(&inode.mu);
    ASSERT_TRUE(writer_->MarkDirty(inode, key).ok());
    ASSERT_TRUE(inode.staged->WriteAt(offset, Bytes(data)).ok());
    writer_->Wrote(inode, key, offset, data.size());
    inode.attr.size = inode.staged->size();
  }
  std::vector<std::string> Log() {
    MutexLock lock(&log_mu_);
    return log_;
  }

  std::string dir_;
  Gate gate_;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>(SmallParts());
  std::shared_ptr<GatedStore> store_ = std::make_shared<GatedStore>(memory_, &gate_);
  ObjectAttrs attrs_{AttrDefaults{}};
  Metrics metrics_;
  InodeTable inodes_;
  MetaCache meta_cache_{clock_, std::chrono::seconds(1), std::chrono::seconds(1)};
  std::unique_ptr<StagingArea> staging_;
  std::unique_ptr<FileWriter> writer_;
  Mutex log_mu_;
  std::vector<std::string> log_ GUARDED_BY(log_mu_);
};

TEST_F(FileWriterStreamTest, ANewFileStreamsPastOnePartAndCloseCompletesIt) {
  std::shared_ptr<Inode> inode = Create("big");
  const std::string data = Pattern(kPart * 5 + 123, 'm');
  for (size_t offset = 0; offset < data.size(); offset += 4096) {
    Write(*inode, "big", offset, data.substr(offset, 4096));
  }
  ASSERT_TRUE(Eventually([&] { return metrics_.streamed_parts.load() == 5; }));
  EXPECT_EQ(memory_->object_count(), 0u) << "visible before close";
  MutexLock lock(&inode->mu);
  ASSERT_TRUE(writer_->Upload(*inode, "big").ok());
  EXPECT_TRUE(memory_->contents("big") == data);
  EXPECT_EQ(inode->uploaded_etag, PartsETag(data)) << "not the upload's ETag";
  EXPECT_EQ(store_->starts.load(), 1);
  EXPECT_EQ(inode->stream, nullptr);
  EXPECT_EQ(metrics_.streamed_fallbacks.load(), 0u);
}

TEST_F(FileWriterStreamTest, TheStoresPartsInFlightBoundTheStreamAndItsThreads) {
  // S3's parallel_parts=6: more parts at once than the writer's own bound and its threads.
  WithPartsInFlight(6);
  gate_.Close();
  std::shared_ptr<Inode> inode = Create("wide");
  const std::string data = Pattern(kPart * 8, 'w');
  Write(*inode, "wide", 0, data);
  const bool six = Eventually([&] { return gate_.running() == 6; });
  gate_.Open();  // (the parts held would keep the writer's end waiting)
  EXPECT_TRUE(six) << gate_.running() << " parts in flight";
  EXPECT_EQ(gate_.max_running(), 6);
  MutexLock lock(&inode->mu);
  ASSERT_TRUE(writer_->Upload(*inode, "wide").ok());
  EXPECT_TRUE(memory_->contents("wide") == data);
}

TEST_F(FileWriterStreamTest, ASmallFileIsOnePut) {
  std::shared_ptr<Inode> inode = Create("small");
  Write(*inode, "small", 0, Pattern(kPart - 1, 'n'));
  MutexLock lock(&inode->mu);
  EXPECT_EQ(inode->stream, nullptr);
  ASSERT_TRUE(writer_->Upload(*inode, "small").ok());
  EXPECT_EQ(store_->starts.load(), 0);
  EXPECT_EQ(memory_->contents("small").size(), kPart - 1);
}

TEST_F(FileWriterStreamTest, AnEditOfAStoredFileDoesNotStream) {
  ASSERT_TRUE(memory_->put("old", MemorySource(Pattern(kPart * 3, 'o')), {}).ok());
  std::shared_ptr<Inode> inode = inodes_.Get(inodes_.Acquire("old", 1));
  {
    MutexLock lock(&inode->mu);
    auto head = memory_->head("old");
    ASSERT_TRUE(head.ok());
    MetaRecord rec = attrs_.FromInfo(*head, false);
    ASSERT_TRUE(writer_->Stage(*inode, "old", rec, /*empty=*/false).ok());
  }
  Write(*inode, "old", kPart * 3, Pattern(kPart, 'p'));
  MutexLock lock(&inode->mu);
  EXPECT_EQ(inode->stream, nullptr);
}

TEST_F(FileWriterStreamTest, AFailedPartFallsBackToAWholePutLoggedOnce) {
  gate_.FailWrites(true);
  for (const std::string key : {"a", "b"}) {
    std::shared_ptr<Inode> inode = Create(key);
    const std::string data = Pattern(kPart * 3, key[0]);
    Write(*inode, key, 0, data);
    ASSERT_TRUE(Eventually([&] {
      MutexLock lock(&inode->mu);
      return inode->stream != nullptr && !inode->stream->failure().ok();
    }));
    MutexLock lock(&inode->mu);
    ASSERT_TRUE(writer_->Upload(*inode, key).ok());
    EXPECT_TRUE(memory_->contents(key) == data) << key;
  }
  EXPECT_EQ(metrics_.streamed_fallbacks.load(), 2u);
  const std::vector<std::string> log = Log();
  EXPECT_EQ(std::count_if(log.begin(), log.end(),
                          [](const std::string& l) {
                            return l.find("whole: a part of its streamed upload failed") !=
                                   std::string::npos;
                          }),
            1)
      << "logged per file, not once";
  EXPECT_TRUE(Eventually([&] { return memory_->uploads_in_progress() == 0; }));
}

// A part that timed out: the server did not answer within operation_timeout, and a whole put
// now would wait as long again. The close reports it at once; the data stays staged and
// accepted, and the next try (the background's) puts it whole.
TEST_F(FileWriterStreamTest, APartThatTimedOutFailsTheCloseWithoutAWholePut) {
  gate_.FailWrites(true, StatusCode::kTimedOut);
  std::shared_ptr<Inode> inode = Create("slow");
  const std::string data = Pattern(kPart * 3, 's');
  Write(*inode, "slow", 0, data);
  ASSERT_TRUE(Eventually([&] {
    MutexLock lock(&inode->mu);
    return inode->stream != nullptr && !inode->stream->failure().ok();
  }));
  MutexLock lock(&inode->mu);
  // Nor does it wait for the abort of the upload, which would wait as long too.
  gate_.HoldAborts(true);
  Status closed = writer_->Upload(*inode, "slow");
  EXPECT_EQ(gate_.aborts_held_out(), 0) << "the close waited for the upload's abort";
  gate_.HoldAborts(false);
  EXPECT_EQ(closed.code(), StatusCode::kTimedOut) << closed.ToString();
  EXPECT_FALSE(memory_->head("slow").ok()) << "put whole after the server timed out";
  EXPECT_TRUE(inode->unsaved());
  EXPECT_EQ(inode->staged->state(), StagedFile::State::kAccepted);
  // The server answers again: the retry puts the file whole.
  gate_.FailWrites(false);
  ASSERT_TRUE(writer_->Upload(*inode, "slow").ok());
  EXPECT_TRUE(memory_->contents("slow") == data);
  EXPECT_TRUE(Eventually([&] { return memory_->uploads_in_progress() == 0; }));
}

TEST_F(FileWriterStreamTest, DiscardAbortsTheUpload) {
  std::shared_ptr<Inode> inode = Create("gone");
  Write(*inode, "gone", 0, Pattern(kPart * 2, 'q'));
  {
    MutexLock lock(&inode->mu);
    ASSERT_NE(inode->stream, nullptr);
    writer_->Discard(*inode);
    EXPECT_EQ(inode->stream, nullptr);
  }
  EXPECT_TRUE(Eventually([&] { return memory_->uploads_in_progress() == 0; }));
  EXPECT_EQ(memory_->object_count(), 0u);
}

TEST_F(FileWriterStreamTest, TruncateToZeroLetsAnEditedFileStream) {
  ASSERT_TRUE(memory_->put("t", MemorySource(Pattern(kPart * 3, 'r')), {}).ok());
  std::shared_ptr<Inode> inode = inodes_.Get(inodes_.Acquire("t", 1));
  {
    MutexLock lock(&inode->mu);
    auto head = memory_->head("t");
    ASSERT_TRUE(head.ok());
    ASSERT_TRUE(writer_->Stage(*inode, "t", attrs_.FromInfo(*head, false), false).ok());
    ASSERT_TRUE(writer_->MarkDirty(*inode, "t").ok());
    EXPECT_FALSE(inode->may_stream);
    ASSERT_TRUE(inode->staged->Truncate(0).ok());
    writer_->Truncated(*inode, 0);
  }
  const std::string data = Pattern(kPart * 2, 's');
  Write(*inode, "t", 0, data);
  MutexLock lock(&inode->mu);
  EXPECT_NE(inode->stream, nullptr);
  ASSERT_TRUE(writer_->Upload(*inode, "t").ok());
  EXPECT_TRUE(memory_->contents("t") == data);
}

// A stored object staged for writing (as Filesystem::Write does), its base noted by Stage.
std::shared_ptr<Inode> StageStored(FileWriterStreamTest& t, const std::string& key) {
  std::shared_ptr<Inode> inode = t.inodes_.Get(t.inodes_.Acquire(key, 1));
  MutexLock lock(&inode->mu);
  auto head = t.memory_->head(key);
  EXPECT_TRUE(head.ok());
  MetaRecord rec = t.attrs_.FromInfo(*head, false);
  EXPECT_TRUE(t.writer_->Stage(*inode, key, rec, /*empty=*/false).ok());
  inode->open_handles.fetch_add(1);
  return inode;
}

TEST_F(FileWriterStreamTest, AnEditCopiesTheUntouchedPartsOfItsBase) {
  std::string model = Pattern(kPart * 6, 'u');
  ASSERT_TRUE(memory_->put("edit", MemorySource(model), {}).ok());
  std::shared_ptr<Inode> inode = StageStored(*this, "edit");
  GatedUpload::copies = 0;
  const int writes_before = gate_.writes();
  Write(*inode, "edit", kPart * 2 + 100, "patch");  // part 2
  model.replace(kPart * 2 + 100, 5, "patch");
  const std::string tail = Pattern(kPart / 2, 'v');
  Write(*inode, "edit", kPart * 6, tail);  // a new, short part 6
  model += tail;
  MutexLock lock(&inode->mu);
  EXPECT_EQ(inode->stream, nullptr) << "an edit streamed";
  ASSERT_TRUE(writer_->Upload(*inode, "edit").ok());
  EXPECT_TRUE(memory_->contents("edit") == model);
  EXPECT_EQ(GatedUpload::copies.load(), 5) << "parts 0, 1, 3, 4 and 5 are the base's";
  EXPECT_EQ(gate_.writes() - writes_before, 2) << "only parts 2 and 6 were written";
  EXPECT_EQ(inode->uploaded_etag, PartsETag(model));
  // Edited again (kept for the open handle): the new object is the base.
  ASSERT_TRUE(writer_->MarkDirty(*inode, "edit").ok());
  ASSERT_TRUE(inode->staged->WriteAt(0, Bytes("front")).ok());
  writer_->Wrote(*inode, "edit", 0, 5);
  model.replace(0, 5, "front");
  ASSERT_TRUE(writer_->Upload(*inode, "edit").ok());
  EXPECT_TRUE(memory_->contents("edit") == model);
  EXPECT_EQ(GatedUpload::copies.load(), 5 + 6);
}

// parallel_parts=1, for a server that throttles: an edit's pieces go one at a time too.
TEST_F(FileWriterStreamTest, AnEditSendsNoMorePiecesAtOnceThanTheStoreSays) {
  WithPartsInFlight(1);
  std::string model = Pattern(kPart * 6, 'x');
  ASSERT_TRUE(memory_->put("edit", MemorySource(model), {}).ok());
  std::shared_ptr<Inode> inode = StageStored(*this, "edit");
  Write(*inode, "edit", kPart * 2 + 100, "patch");  // pieces: copies of 0, 1, 3, 4, 5; write 2
  model.replace(kPart * 2 + 100, 5, "patch");
  GatedUpload::copies = 0;
  gate_.Close();
  Status uploaded;
  std::thread close([&] {
    MutexLock lock(&inode->mu);
    uploaded = writer_->Upload(*inode, "edit");
  });
  const bool waiting = Eventually([&] { return gate_.running() == 1; });  // the write
  gate_.Open();
  close.join();
  ASSERT_TRUE(waiting);
  ASSERT_TRUE(uploaded.ok()) << uploaded.ToString();
  EXPECT_TRUE(memory_->contents("edit") == model);
  // The copy after the write starts once the write is done, not while it waits.
  EXPECT_EQ(GatedUpload::copies_at_write.load(), 2) << "pieces of the edit sent at once";
  EXPECT_EQ(GatedUpload::copies.load(), 5);
}

// An edit that holds every byte (read here) but is still built on the version it was opened
// from: another client's version stored since is not undone by it. Its copies fail, the whole
// put is conditional on the old version too, and the edit becomes unfinished, for its release
// to set aside.
TEST_F(FileWriterStreamTest, AnEditWhoseBaseChangedMeanwhileIsNotStoredOverTheNewVersion) {
  std::string model = Pattern(kPart * 4, 'w');
  ASSERT_TRUE(memory_->put("raced", MemorySource(model), {}).ok());
  std::shared_ptr<Inode> inode = StageStored(*this, "raced");
  {
    MutexLock lock(&inode->mu);  // a reader read it all: every byte is local
    ASSERT_TRUE(writer_->FetchStaged(*inode, "raced", 0, kPart * 4).ok());
  }
  Write(*inode, "raced", 10, "mine");
  model.replace(10, 4, "mine");
  const std::string theirs = Pattern(kPart * 4, 'x');
  ASSERT_TRUE(memory_->put("raced", MemorySource(theirs), {}).ok());
  MutexLock lock(&inode->mu);
  const Status uploaded = writer_->Upload(*inode, "raced");
  EXPECT_EQ(uploaded.code(), StatusCode::kIoError) << uploaded.ToString();
  EXPECT_TRUE(FileWriter::Unfinished(*inode));
  EXPECT_TRUE(memory_->contents("raced") == theirs) << "the other client's version was replaced";
  std::string staged(model.size(), '\0');
  Result<size_t> read = inode->staged->ReadAt(0, std::as_writable_bytes(std::span(staged)));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(*read, model.size());
  EXPECT_TRUE(staged == model);
  EXPECT_EQ(metrics_.streamed_fallbacks.load(), 1u);
  EXPECT_TRUE(Eventually([&] { return memory_->uploads_in_progress() == 0; }));
}

// ... and its data stays staged, unfinished (never to be uploaded: the caller's release sets it
// aside), with no accepted record that a crash would try to complete.
TEST_F(FileWriterStreamTest, AnEditWhoseBaseChangedBeforeItsBytesWereFetchedFailsAndStaysStaged) {
  ASSERT_TRUE(memory_->put("gone", MemorySource(Pattern(kPart * 4, 'w')), {}).ok());
  std::shared_ptr<Inode> inode = StageStored(*this, "gone");
  Write(*inode, "gone", 10, "mine");
  // Another client replaces the object before the bytes around "mine" were ever fetched: they
  // exist nowhere any more, so the close cannot make the file whole.
  const std::string theirs = Pattern(kPart * 4, 'x');
  ASSERT_TRUE(memory_->put("gone", MemorySource(theirs), {}).ok());
  MutexLock lock(&inode->mu);
  Status uploaded = writer_->Upload(*inode, "gone");
  EXPECT_EQ(uploaded.code(), StatusCode::kIoError) << uploaded.ToString();
  EXPECT_TRUE(memory_->contents("gone") == theirs) << "a mix was stored";
  EXPECT_TRUE(inode->unsaved()) << "the written bytes were dropped";
  EXPECT_TRUE(FileWriter::Unfinished(*inode));
  ASSERT_NE(inode->staged, nullptr);
  EXPECT_EQ(inode->staged->state(), StagedFile::State::kWriting);
  EXPECT_TRUE(Eventually([&] { return memory_->uploads_in_progress() == 0; }));
}

}  // namespace
}  // namespace objfs
