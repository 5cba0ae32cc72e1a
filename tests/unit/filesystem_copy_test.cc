// copy_file_range and extended attributes of the Filesystem, over the in-memory store.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "backend/fake/memory_store.h"
#include "backend/md5.h"
#include "backend/metrics_store.h"
#include "fs/errno_map.h"
#include "fs/filesystem.h"
#include "fs/xattr.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
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
  EXPECT_EQ(ErrnoFromStatus(fs_->RemoveXattr(ino, kEtagXattr)), EPERM);
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, "security.selinux", "v", 0)), EOPNOTSUPP);
  uint64_t heads = metrics_.head_requests.load();
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "security.capability").status()), ENODATA);
  EXPECT_EQ(metrics_.head_requests.load(), heads);
}

TEST_F(FilesystemCopyTest, StatsXattrOnRoot) {
  PutObject("f", "x");
  ASSERT_TRUE(fs_->Lookup(kRootIno, "f").ok());
  auto stats = fs_->GetXattr(kRootIno, kStatsXattr);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(*stats, metrics_.ToText());
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

}  // namespace
}  // namespace objfs
