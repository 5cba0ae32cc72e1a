// The limit on an object's user metadata: MetadataSize, setxattr and other changes refused
// before they reach the store (max_metadata), and a change that a store with a lower limit
// refuses for good, which must never hold the file's data back, nor be retried, nor outlive
// the mount in a crash record. Over the in-memory store given a metadata limit.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/metrics_store.h"
#include "fs/errno_map.h"
#include "fs/filesystem.h"
#include "fs/object_metadata.h"
#include "fs/xattr.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(MetadataSizeTest, CountsNamesAndValuesAndTheLongestMtime) {
  EXPECT_EQ(MetadataSize({}), 0u);
  EXPECT_EQ(MetadataSize({{"mode", "33188"}, {"xattr", "abc"}}), 4u + 5u + 5u + 3u);
  // An mtime in whole seconds counts as one with nanoseconds: a write may add them.
  EXPECT_EQ(MetadataSize({{"mtime", "1700000000"}}), 5u + 21u);
  EXPECT_EQ(MetadataSize({{"mtime", "1700000000.123456789"}}), 5u + 21u);
  EXPECT_EQ(MetadataSize({{"mtime", FormatMtime(INT64_MIN)}}), 5u + 21u);
  // So do the atime and the ctime, which a later touch or chmod may lengthen too.
  EXPECT_EQ(MetadataSize({{"atime", "1700000000"}, {"ctime", "1"}}), 5u + 21u + 5u + 21u);
}

TEST(MetadataSizeTest, HeadersKeptAsMetadataAreNotUserMetadata) {
  EXPECT_EQ(MetadataSize({{"mode", "33188"},
                          {":cache-control", "max-age=60"},
                          {":content-type", "application/x-thing"}}),
            4u + 5u);
}

TEST(MetadataSizeTest, PermanentRefusals) {
  EXPECT_TRUE(IsPermanentRefusal(Status(StatusCode::kInvalidArgument, "x", "MetadataTooLarge")));
  EXPECT_TRUE(IsPermanentRefusal(Status(StatusCode::kInvalidArgument, "x", "InvalidArgument")));
  EXPECT_TRUE(IsPermanentRefusal(InvalidArgumentError("400 without a code")));
  // Bytes damaged on the way are sent again; a changed or removed object is no refusal.
  EXPECT_FALSE(IsPermanentRefusal(Status(StatusCode::kInvalidArgument, "x", "BadDigest")));
  EXPECT_FALSE(IsPermanentRefusal(PreconditionFailedError("x")));
  EXPECT_FALSE(IsPermanentRefusal(NotFoundError("x")));
  EXPECT_FALSE(IsPermanentRefusal(TransientError("503")));
  EXPECT_FALSE(IsPermanentRefusal(PermissionDeniedError("403")));
  // Refusals that a later try may pass never drop a change.
  for (const char* code : {"ExpiredToken", "InvalidToken", "OperationAborted", "TemporaryRedirect",
                           "AuthorizationHeaderMalformed", "EntityTooSmall"}) {
    EXPECT_FALSE(IsPermanentRefusal(Status(StatusCode::kInvalidArgument, "x", code))) << code;
  }
}

class MetadataLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-metalimit-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_dir_ = tmpl;
    clock_ = std::make_shared<FakeClock>();
    options_.cache_dir = cache_dir_ + "/staging";
    options_.uid = 1000;
    options_.gid = 1000;
    options_.writeback_thread = false;
    options_.log = [this](LogLevel, const std::string& line) { logged_.push_back(line); };
    Start(/*store_limit=*/0, /*fs_limit=*/kDefaultMaxMetadata, /*delay=*/1);
  }

  void TearDown() override {
    fs_.reset();
    std::filesystem::remove_all(cache_dir_);
  }

  // A fresh store refusing metadata over `store_limit` bytes (0: none), and a filesystem over
  // it with max_metadata=`fs_limit` and metadata_delay=`delay`.
  void Start(size_t store_limit, size_t fs_limit, double delay) {
    fs_.reset();
    MemoryStoreOptions o;
    o.max_metadata = store_limit;
    memory_ = std::make_shared<MemoryStore>(o);
    store_ = std::make_shared<MetricsStore>(memory_, metrics_);
    options_.max_metadata = fs_limit;
    options_.metadata_delay = delay;
    fs_ = NewFilesystem();
  }

  std::unique_ptr<Filesystem> NewFilesystem() {
    auto fs = Filesystem::Create(store_, options_, &metrics_, clock_);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    return std::move(fs).value();
  }

  // An object "a" as objfs writes it (mode, owner, mtime), looked up; its inode.
  uint64_t StoredFile(std::string_view data = "stored bytes") {
    auto created = fs_->Create(kRootIno, "a", 0644, O_WRONLY | O_CREAT | O_TRUNC);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return 0;
    EXPECT_TRUE(fs_->Write(created->fh, 0, Bytes(data)).ok());
    Status released = fs_->Release(created->fh);
    EXPECT_TRUE(released.ok()) << released.ToString();
    return created->entry.attr.ino;
  }

  // The stored "xattr" metadata of "a", decoded.
  XattrMap StoredXattrs() {
    auto head = memory_->head("a");
    EXPECT_TRUE(head.ok());
    if (!head.ok()) return {};
    auto it = head->metadata.find(kXattrMetadata);
    if (it == head->metadata.end()) return {};
    auto decoded = DecodeXattrs(it->second);
    EXPECT_TRUE(decoded.has_value());
    return decoded.value_or(XattrMap());
  }

  // Log lines containing `text`.
  size_t Logged(std::string_view text) const {
    size_t n = 0;
    for (const std::string& line : logged_) n += line.find(text) != std::string::npos ? 1 : 0;
    return n;
  }

  bool NothingRecorded() const { return std::filesystem::is_empty(options_.cache_dir); }

  std::string cache_dir_;
  Metrics metrics_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<MetricsStore> store_;
  std::shared_ptr<FakeClock> clock_;
  FilesystemOptions options_;
  std::unique_ptr<Filesystem> fs_;
  std::vector<std::string> logged_;
};

TEST_F(MetadataLimitTest, SetxattrOverTheLimitIsE2bigAndChangesNothing) {
  Start(0, kDefaultMaxMetadata, /*delay=*/0);
  uint64_t ino = StoredFile();
  const uint64_t sets = metrics_.set_attributes_requests.load();
  const std::string etag = memory_->head("a")->etag.value();

  Status big = fs_->SetXattr(ino, "user.big", std::string(64 << 10, 'v'), 0);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(ErrnoFromStatus(big), E2BIG) << big.ToString();
  Status just_over = fs_->SetXattr(ino, "user.big", std::string(2048, 'v'), 0);
  EXPECT_EQ(ErrnoFromStatus(just_over), E2BIG) << just_over.ToString();
  EXPECT_EQ(metrics_.set_attributes_requests.load(), sets);
  EXPECT_EQ(memory_->head("a")->etag.value(), etag);
  EXPECT_TRUE(StoredXattrs().empty());
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.big").status()), ENODATA);

  // Up to the limit works: the largest value that fits, found by growing it.
  std::string value;
  for (size_t n = 1; n < 2048; ++n) {
    Metadata metadata = memory_->head("a")->metadata;
    metadata[kXattrMetadata] = EncodeXattrs({{"user.big", std::string(n, 'v')}});
    if (MetadataSize(metadata) > kDefaultMaxMetadata) break;
    value.assign(n, 'v');
  }
  ASSERT_FALSE(value.empty());
  Status fits = fs_->SetXattr(ino, "user.big", value, 0);
  ASSERT_TRUE(fits.ok()) << fits.ToString();
  EXPECT_EQ(StoredXattrs()["user.big"], value);
  Status one_more = fs_->SetXattr(ino, "user.big", value + "v", 0);
  EXPECT_EQ(ErrnoFromStatus(one_more), E2BIG) << one_more.ToString();
  EXPECT_EQ(StoredXattrs()["user.big"], value);
}

TEST_F(MetadataLimitTest, AnAttributeThatFitsAloneButNotWithTheOthersIsEnospc) {
  uint64_t ino = StoredFile();
  const std::string half(800, 'h');
  ASSERT_TRUE(fs_->SetXattr(ino, "user.one", half, 0).ok());
  Status second = fs_->SetXattr(ino, "user.two", half, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(ErrnoFromStatus(second), ENOSPC) << second.ToString();
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.two").status()), ENODATA);
  // Removing one makes room; a change that does not grow the metadata is never refused.
  ASSERT_TRUE(fs_->RemoveXattr(ino, "user.one").ok());
  ASSERT_TRUE(fs_->SetXattr(ino, "user.two", half, 0).ok());
  FileAttr attr;
  attr.mode = 0600;
  EXPECT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(StoredXattrs().count("user.two"), 1u);
  EXPECT_EQ(StoredXattrs().count("user.one"), 0u);
}

TEST_F(MetadataLimitTest, NoLimitWhenZero) {
  Start(0, 0, 0);
  uint64_t ino = StoredFile();
  ASSERT_TRUE(fs_->SetXattr(ino, "user.big", std::string(16 << 10, 'v'), 0).ok());
  EXPECT_EQ(StoredXattrs()["user.big"].size(), 16u << 10);
}

// The mount allows more than the server: the held change is refused by the self-copy.
TEST_F(MetadataLimitTest, AHeldChangeTheServerRefusesIsDroppedNotRetried) {
  Start(/*store_limit=*/1000, /*fs_limit=*/16 << 10, /*delay=*/1);
  uint64_t ino = StoredFile();
  ASSERT_TRUE(fs_->SetXattr(ino, "user.small", "kept", 0).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  ASSERT_EQ(StoredXattrs()["user.small"], "kept");
  ASSERT_TRUE(fs_->SetXattr(ino, "user.big", std::string(3000, 'v'), 0).ok());  // held
  EXPECT_FALSE(NothingRecorded());

  clock_->Advance(std::chrono::seconds(2));
  Status due = fs_->UploadDue();
  EXPECT_TRUE(due.ok()) << due.ToString();
  EXPECT_EQ(fs_->pending_uploads(), 0u) << "scheduled for a retry";
  EXPECT_TRUE(NothingRecorded());
  EXPECT_EQ(Logged("MetadataTooLarge"), 1u);
  EXPECT_EQ(Logged("dropping a metadata change of a"), 1u);
  // The mount shows what the object has; its ETag can be read; unmount succeeds.
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.big").status()), ENODATA);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.small"), "kept");
  auto etag = fs_->GetXattr(ino, "user.etag");
  EXPECT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(StoredXattrs().count("user.big"), 0u);
  EXPECT_EQ(StoredXattrs()["user.small"], "kept");
  EXPECT_EQ(Logged("MetadataTooLarge"), 1u);
}

TEST_F(MetadataLimitTest, ReadingTheEtagOfAFileWithARefusedHeldChangeWorks) {
  Start(1000, 16 << 10, 1);
  uint64_t ino = StoredFile();
  ASSERT_TRUE(fs_->SetXattr(ino, "user.big", std::string(3000, 'v'), 0).ok());
  auto etag = fs_->GetXattr(ino, "user.etag");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, memory_->head("a")->etag.value());
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataLimitTest, DataWrittenAfterARefusedChangeReachesTheStore) {
  Start(1000, 16 << 10, 1);
  uint64_t ino = StoredFile("old");
  ASSERT_TRUE(fs_->SetXattr(ino, "user.small", "kept", 0).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  ASSERT_TRUE(fs_->SetXattr(ino, "user.big", std::string(3000, 'v'), 0).ok());  // held
  FileAttr attr;
  attr.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());

  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("new data")).ok());
  Status closed = fs_->Flush(*fh);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(fs_->Release(*fh).ok());

  EXPECT_EQ(memory_->contents("a"), "new data");
  EXPECT_EQ(StoredXattrs().count("user.big"), 0u);
  EXPECT_EQ(StoredXattrs()["user.small"], "kept");
  // The mode, which the server does accept, went with the data.
  EXPECT_EQ(memory_->head("a")->metadata["mode"], std::to_string(S_IFREG | 0600));
  EXPECT_EQ(Logged("MetadataTooLarge"), 1u);
  EXPECT_TRUE(NothingRecorded());
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.big").status()), ENODATA);
  EXPECT_TRUE(fs_->FlushAll().ok());
}

TEST_F(MetadataLimitTest, ANewFileWhoseMetadataIsRefusedIsUploadedWithoutIt) {
  Start(1000, 16 << 10, 1);
  auto created = fs_->Create(kRootIno, "a", 0640, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("fresh")).ok());
  ASSERT_TRUE(fs_->SetXattr(created->entry.attr.ino, "user.big", std::string(3000, 'v'), 0).ok());
  Status closed = fs_->Release(created->fh);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_EQ(memory_->contents("a"), "fresh");
  EXPECT_TRUE(StoredXattrs().empty());
  EXPECT_EQ(memory_->head("a")->metadata["mode"], std::to_string(S_IFREG | 0640));
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataLimitTest, ARenameCarryingARefusedChangeMovesTheFileWithoutIt) {
  Start(1000, 16 << 10, 1);
  uint64_t ino = StoredFile("moved");
  ASSERT_TRUE(fs_->SetXattr(ino, "user.big", std::string(3000, 'v'), 0).ok());  // held
  Status renamed = fs_->Rename(kRootIno, "a", kRootIno, "b", 0);
  ASSERT_TRUE(renamed.ok()) << renamed.ToString();
  EXPECT_FALSE(memory_->head("a").ok());
  EXPECT_EQ(memory_->contents("b"), "moved");
  EXPECT_EQ(memory_->head("b")->metadata.count(kXattrMetadata), 0u);
  EXPECT_EQ(Logged("MetadataTooLarge"), 1u);
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataLimitTest, WithoutDelayTheServersRefusalIsE2big) {
  Start(1000, 16 << 10, 0);
  uint64_t ino = StoredFile();
  Status big = fs_->SetXattr(ino, "user.big", std::string(3000, 'v'), 0);
  EXPECT_EQ(ErrnoFromStatus(big), E2BIG) << big.ToString();
  EXPECT_NE(big.message().find("MetadataTooLarge"), std::string::npos) << big.ToString();
  EXPECT_TRUE(StoredXattrs().empty());
}

TEST_F(MetadataLimitTest, TheNextMountDropsARefusedCrashRecordOnce) {
  Start(1000, 16 << 10, 1);
  uint64_t ino = StoredFile();
  const std::string etag = memory_->head("a")->etag.value();
  ASSERT_TRUE(fs_->SetXattr(ino, "user.big", std::string(3000, 'v'), 0).ok());  // held
  EXPECT_FALSE(NothingRecorded());
  // The process dies; the next one over the same cache directory finds the record.
  auto next = NewFilesystem();
  Status recovered = next->RecoverStaged();
  EXPECT_TRUE(recovered.ok()) << recovered.ToString();
  EXPECT_EQ(Logged("MetadataTooLarge"), 1u);
  EXPECT_TRUE(NothingRecorded());
  EXPECT_EQ(memory_->head("a")->etag.value(), etag);
  EXPECT_TRUE(StoredXattrs().empty());
  logged_.clear();
  auto third = NewFilesystem();
  EXPECT_TRUE(third->RecoverStaged().ok());
  EXPECT_TRUE(logged_.empty()) << logged_.front();
}

TEST_F(MetadataLimitTest, TheNextMountUploadsStagedDataWithoutRefusedMetadata) {
  // A write-back window: the closed file's crash record carries the attribute.
  options_.writeback = 5;
  Start(1000, 16 << 10, 1);
  auto created = fs_->Create(kRootIno, "a", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("left by a crash")).ok());
  ASSERT_TRUE(fs_->SetXattr(created->entry.attr.ino, "user.big", std::string(3000, 'v'), 0).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_FALSE(memory_->head("a").ok());
  // The process dies in the window; the next one uploads the data.
  auto next = NewFilesystem();
  Status recovered = next->RecoverStaged();
  EXPECT_TRUE(recovered.ok()) << recovered.ToString();
  // (Uploaded in the background; unmount uploads what is left.)
  Status uploaded = next->FlushAll();
  EXPECT_TRUE(uploaded.ok()) << uploaded.ToString();
  EXPECT_EQ(memory_->contents("a"), "left by a crash");
  EXPECT_TRUE(StoredXattrs().empty());
  EXPECT_EQ(memory_->head("a")->metadata["mode"], std::to_string(S_IFREG | 0644));
  EXPECT_EQ(Logged("MetadataTooLarge"), 1u);
  EXPECT_TRUE(NothingRecorded());
}

}  // namespace
}  // namespace objfs
