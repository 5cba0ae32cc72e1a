// Filesystem over the in-memory store: names, attributes, listings, staged writes and renames.
#include "fs/filesystem.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"
#include "backend/md5.h"
#include "backend/metrics_store.h"
#include "cache/listing_attr_store.h"
#include "cache/staging.h"
#include "fs/errno_map.h"
#include "fs/object_metadata.h"
#include "fs/xattr.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class FilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-fs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    cache_dir_ = tmpl;
    memory_ = std::make_shared<MemoryStore>();
    faults_ = std::make_shared<FaultInjectingStore>(memory_);
    store_ = std::make_shared<MetricsStore>(faults_, metrics_);
    clock_ = std::make_shared<FakeClock>();
    options_.cache_dir = cache_dir_ + "/staging";
    options_.uid = 1000;
    options_.gid = 1000;
    options_.prefetch.read_buffer = 64 << 10;
    options_.prefetch.max_readahead = 1 << 20;
    fs_ = NewFilesystem();
  }

  void TearDown() override {
    fs_.reset();
    std::filesystem::remove_all(cache_dir_);
  }

  std::unique_ptr<Filesystem> NewFilesystem() {
    auto fs = Filesystem::Create(kept_attrs_ ? kept_attrs_ : std::shared_ptr<ObjectStore>(store_),
                                 options_, &metrics_, clock_);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    return std::move(fs).value();
  }

  // What a crash at this instant leaves in cache_dir: a copy of it, for RecoverImage.
  std::string CrashImage() {
    std::string image = cache_dir_ + "/crash-" + std::to_string(++crash_images_);
    std::filesystem::copy(options_.cache_dir, image, std::filesystem::copy_options::recursive);
    return image;
  }

  // The next mount after that crash: a Filesystem over the image recovers it. Returns its log.
  std::vector<std::string> RecoverImage(const std::string& image) {
    std::vector<std::string> log;
    FilesystemOptions o = options_;
    o.cache_dir = image;
    o.writeback_thread = false;
    o.log = [&log](LogLevel, const std::string& line) { log.push_back(line); };
    auto fs = Filesystem::Create(store_, o, &metrics_, clock_);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    if (fs.ok()) {
      Status s = (*fs)->RecoverStaged();
      EXPECT_TRUE(s.ok()) << s.ToString();
      // The recovered files go up in the background; that mount's unmount at the latest.
      s = (*fs)->FlushAll();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return log;
  }

  // The files a recovery of `image` set aside, path -> content.
  std::map<std::string, std::string> SetAside(const std::string& image) {
    std::map<std::string, std::string> out;
    const std::string dir = image + "/unfinished";
    if (!std::filesystem::exists(dir)) return out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      out[e.path().filename().string()] =
          std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
  }

  // A fresh store whose objects hold at most `limit` bytes: a write past it fails (EFBIG) after
  // earlier writes were taken, as one on a full cache disk does (ENOSPC).
  void UseMaxObjectSize(uint64_t limit) {
    MemoryStoreOptions o;
    o.max_object_size = limit;
    UseStore(o);
  }

  // "f", stored as "stored" on a store of 64-byte objects, opened with O_TRUNC, `written`
  // written at 0, and then a write past the limit refused (EFBIG): an unfinished file. Returns
  // its handle (0 after a failure).
  uint64_t UnfinishedF(std::string_view written) {
    UseMaxObjectSize(64);
    PutObject("f", "stored");
    auto fh = fs_->Open(LookupIno(kRootIno, "f"), O_WRONLY | O_TRUNC);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    if (!fh.ok()) return 0;
    if (!written.empty()) {
      EXPECT_TRUE(fs_->Write(*fh, 0, Bytes(written)).ok());
    }
    EXPECT_EQ(fs_->Write(*fh, written.size(), Bytes(std::string(100, 'x'))).status().code(),
              StatusCode::kFileTooLarge);
    return *fh;
  }

  // Two handles open for writing "f", stored as "stored" on a store of 64-byte objects.
  std::pair<Result<uint64_t>, Result<uint64_t>> TwoWritersOfF() {
    UseMaxObjectSize(64);
    PutObject("f", "stored");
    const uint64_t ino = LookupIno(kRootIno, "f");
    auto first = fs_->Open(ino, O_WRONLY);
    return {std::move(first), fs_->Open(ino, O_WRONLY)};
  }

  // The release of `fh`, the last writer of the unfinished "f" made by UnfinishedF, fails;
  // "f" is still "stored", and `data` is set aside.
  void ReleaseSetsAside(uint64_t fh, std::string_view data) {
    EXPECT_FALSE(fs_->Release(fh).ok());
    EXPECT_EQ(memory_->contents("f"), "stored");
    EXPECT_EQ(SetAside(options_.cache_dir),
              (std::map<std::string, std::string>{{"f", std::string(data)}}));
  }

  // A fresh store whose copies behave as S3Store's on RGW (see MemoryStoreOptions).
  void UseRgwLikeCopies() {
    MemoryStoreOptions o;
    o.copy_ignores_source_condition = true;
    UseStore(o);
  }

  // A fresh, empty store of `options`, and a new mount over it.
  void UseStore(const MemoryStoreOptions& options) {
    fs_.reset();
    memory_ = std::make_shared<MemoryStore>(options);
    faults_ = std::make_shared<FaultInjectingStore>(memory_);
    store_ = std::make_shared<MetricsStore>(faults_, metrics_);
    fs_ = NewFilesystem();
  }

  // Opens the stored `key` with O_TRUNC and writes `data`, then closes it (the flush) while
  // every put fails with `failure`: the close fails, and the file is kept for a retry. The
  // puts still fail on return; the handle stays open. Returns it (0 on failure).
  uint64_t WriteAnewAndFailTheClose(const std::string& key, std::string_view data,
                                    Status failure = TransientError("connection lost")) {
    auto fh = fs_->Open(LookupIno(kRootIno, key), O_WRONLY | O_TRUNC);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    if (!fh.ok()) return 0;
    EXPECT_TRUE(fs_->Write(*fh, 0, Bytes(data)).ok());
    faults_->FailAll(StoreOp::kPut, std::move(failure));
    EXPECT_EQ(ErrnoFromStatus(fs_->Flush(*fh)), EIO);
    return *fh;
  }

  // The attributes this mount's put gives a regular file of `perms`: what an object it stored
  // itself carries (and another client's put of the same bytes may lack).
  Metadata OwnFileAttributes(uint32_t perms) const {
    return {{"mode", std::to_string(S_IFREG | perms)},
            {"uid", std::to_string(options_.uid)},
            {"gid", std::to_string(options_.gid)}};
  }

  void PutObject(const std::string& key, std::string_view data, Metadata metadata = {}) {
    PutOptions put;
    put.metadata = std::move(metadata);
    ASSERT_TRUE(memory_->put(key, MemorySource(data), put).ok());
  }

  // Creates parent/name with `data` through the filesystem; returns its inode.
  uint64_t WriteFile(uint64_t parent, const std::string& name, std::string_view data) {
    auto created = fs_->Create(parent, name, 0644, O_WRONLY | O_CREAT | O_TRUNC);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return 0;
    if (!data.empty()) {
      auto n = fs_->Write(created->fh, 0, Bytes(data));
      EXPECT_TRUE(n.ok()) << n.status().ToString();
    }
    Status s = fs_->Release(created->fh);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return created->entry.attr.ino;
  }

  std::string ReadFile(Filesystem& fs, uint64_t ino) {
    auto fh = fs.Open(ino, O_RDONLY);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    if (!fh.ok()) return "";
    std::string out;
    std::string buf(7000, '\0');
    for (;;) {
      auto n = fs.Read(*fh, out.size(),
                       std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), buf.size()));
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok() || *n == 0) break;
      out.append(buf.data(), *n);
    }
    EXPECT_TRUE(fs.Release(*fh).ok());
    return out;
  }

  // Opens `ino` with O_TRUNC, writes `data` and closes it.
  void Overwrite(uint64_t ino, std::string_view data) {
    auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
    ASSERT_TRUE(fh.ok()) << fh.status().ToString();
    ASSERT_TRUE(fs_->Write(*fh, 0, Bytes(data)).ok());
    ASSERT_TRUE(fs_->Release(*fh).ok());
  }

  uint64_t LookupIno(uint64_t parent, const std::string& name) {
    auto e = fs_->Lookup(parent, name);
    EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
    return e.ok() ? e->attr.ino : 0;
  }

  // A new mount over S3's stack: the listing-attribute store on top (as fs/main.cc stacks it),
  // its records read back from cache_dir.
  void RemountKeepingAttributes() {
    fs_.reset();
    kept_attrs_.reset();
    attr_db_.reset();
    Result<StoreDb> db = StoreDb::Open(cache_dir_ + "/db");
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    attr_db_ = std::make_shared<StoreDb>(std::move(db).value());
    kept_attrs_ = std::make_shared<ListingAttrStore>(store_, attr_db_, &metrics_);
    fs_ = NewFilesystem();
  }

  std::string cache_dir_;
  int crash_images_ = 0;
  Metrics metrics_;
  std::shared_ptr<MemoryStore> memory_;
  std::shared_ptr<FaultInjectingStore> faults_;
  std::shared_ptr<MetricsStore> store_;
  std::shared_ptr<StoreDb> attr_db_;
  std::shared_ptr<ListingAttrStore> kept_attrs_;  // set by RemountKeepingAttributes
  std::shared_ptr<FakeClock> clock_;
  FilesystemOptions options_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(FilesystemTest, RootIsADirectory) {
  auto root = fs_->GetAttr(kRootIno);
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(S_ISDIR(root->attr.mode));
  EXPECT_EQ(root->attr.mode & 07777, 0755u);
  EXPECT_EQ(root->attr.uid, 1000u);
}

TEST_F(FilesystemTest, LookupFileWithS3fsMetadata) {
  PutObject("a.txt", "hello",
            {{"mode", std::to_string(S_IFREG | 0600)},
             {"uid", "42"},
             {"gid", "43"},
             {"mtime", "1700000000"}});
  auto e = fs_->Lookup(kRootIno, "a.txt");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(S_ISREG(e->attr.mode));
  EXPECT_EQ(e->attr.mode & 07777, 0600u);
  EXPECT_EQ(e->attr.uid, 42u);
  EXPECT_EQ(e->attr.gid, 43u);
  EXPECT_EQ(e->attr.size, 5u);
  EXPECT_EQ(e->attr.mtime_ns, int64_t{1700000000} * 1000000000);
  EXPECT_EQ(e->attr_timeout, 1.0);
}

// -o umask applies where the store says nothing: objects without a mode, directories that are
// only prefixes, and the root. A stored mode stands as it is.
TEST_F(FilesystemTest, UmaskAppliesToObjectsWithoutAMode) {
  options_.umask = 077;
  fs_ = NewFilesystem();
  PutObject("plain", "x");
  PutObject("d/f", "y");
  PutObject("kept", "z", {{"mode", std::to_string(S_IFREG | 0664)}});
  auto root = fs_->GetAttr(kRootIno);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->attr.mode, static_cast<uint32_t>(S_IFDIR | 0700));
  auto plain = fs_->Lookup(kRootIno, "plain");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  auto dir = fs_->Lookup(kRootIno, "d");
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->attr.mode, static_cast<uint32_t>(S_IFDIR | 0700));
  auto kept = fs_->Lookup(kRootIno, "kept");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->attr.mode, static_cast<uint32_t>(S_IFREG | 0664));
}

TEST_F(FilesystemTest, LookupWithoutMetadataUsesDefaults) {
  PutObject("plain", "x");
  auto e = fs_->Lookup(kRootIno, "plain");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.mode, static_cast<uint32_t>(S_IFREG | 0644));
  EXPECT_EQ(e->attr.uid, 1000u);
  auto head = memory_->head("plain");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(e->attr.mtime_ns, head->mtime_ns);
}

TEST_F(FilesystemTest, ImplicitAndExplicitDirectories) {
  PutObject("implicit/file", "x");
  PutObject("explicit/", "", {{"mode", std::to_string(S_IFDIR | 0700)}});
  auto imp = fs_->Lookup(kRootIno, "implicit");
  ASSERT_TRUE(imp.ok());
  EXPECT_TRUE(S_ISDIR(imp->attr.mode));
  auto exp = fs_->Lookup(kRootIno, "explicit");
  ASSERT_TRUE(exp.ok());
  EXPECT_TRUE(S_ISDIR(exp->attr.mode));
  EXPECT_EQ(exp->attr.mode & 07777, 0700u);
  auto file = fs_->Lookup(imp->attr.ino, "file");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->attr.size, 1u);
}

TEST_F(FilesystemTest, MissingNameIsNotFoundAndCachedNegatively) {
  auto e = fs_->Lookup(kRootIno, "nope");
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoFromStatus(e.status()), ENOENT);
  uint64_t heads = metrics_.head_requests.load();
  uint64_t lists = metrics_.list_requests.load();
  EXPECT_FALSE(fs_->Lookup(kRootIno, "nope").ok());
  EXPECT_EQ(metrics_.head_requests.load(), heads);
  EXPECT_EQ(metrics_.list_requests.load(), lists);
  // After the negative TTL the store is asked again and sees the new object.
  PutObject("nope", "now");
  clock_->Advance(std::chrono::seconds(2));
  EXPECT_TRUE(fs_->Lookup(kRootIno, "nope").ok());
}

TEST_F(FilesystemTest, MissingNamesOfAListedDirectoryCostNoRequest) {
  fs_.reset();
  options_.negative_timeout = 10;  // listings outlive the 1 s attribute TTL
  fs_ = NewFilesystem();
  PutObject("dir/present", "x");
  // The first miss in a directory lists it (HEAD, then one LIST of the directory)...
  EXPECT_EQ(fs_->Lookup(LookupIno(kRootIno, "dir"), "first-miss").status().code(),
            StatusCode::kNotFound);
  uint64_t dir = LookupIno(kRootIno, "dir");
  uint64_t requests = metrics_.head_requests.load() + metrics_.list_requests.load();
  // ...and later misses there are answered from the listing.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(fs_->Lookup(dir, "tmp" + std::to_string(i)).status().code(), StatusCode::kNotFound);
  }
  EXPECT_EQ(metrics_.head_requests.load() + metrics_.list_requests.load(), requests);
  // Names listed, and names created here since, are still looked up.
  EXPECT_TRUE(fs_->Lookup(dir, "present").ok());
  WriteFile(dir, "made-here", "y");
  clock_->Advance(std::chrono::milliseconds(1100));  // past the entry TTL, not the listing's
  EXPECT_TRUE(fs_->Lookup(dir, "made-here").ok());
  // A file another client adds shows once the listing expired (negative_timeout).
  PutObject("dir/from-elsewhere", "z");
  EXPECT_FALSE(fs_->Lookup(dir, "from-elsewhere").ok());
  clock_->Advance(std::chrono::seconds(10));
  EXPECT_TRUE(fs_->Lookup(dir, "from-elsewhere").ok());
}

TEST_F(FilesystemTest, NameLengthLimit) {
  std::string ok_name(255, 'n');
  std::string long_name(256, 'n');
  EXPECT_NE(WriteFile(kRootIno, ok_name, "x"), 0u);
  EXPECT_TRUE(fs_->Lookup(kRootIno, ok_name).ok());
  auto e = fs_->Lookup(kRootIno, long_name);
  EXPECT_EQ(ErrnoFromStatus(e.status()), ENAMETOOLONG);
  auto c = fs_->Create(kRootIno, long_name, 0644, O_WRONLY | O_CREAT);
  EXPECT_EQ(ErrnoFromStatus(c.status()), ENAMETOOLONG);
}

// A server whose listing never ends: every page says another follows, with the same token.
class EndlessListingStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<Listing> list(const ListOptions& options) override {
    // (Where the mount would go on for ever, the test ends.)
    if (++calls > 100) return IoError("the test's store was listed 100 times");
    ListOptions first = options;  // the first page, whatever the token
    first.continuation_token.clear();
    OBJFS_ASSIGN_OR_RETURN(Listing page, ForwardingStore::list(first));
    page.next_token = "again";
    return page;
  }
  std::atomic<int> calls{0};
};

TEST_F(FilesystemTest, AListingThatNeverEndsFailsWithoutGoingOnForEver) {
  ASSERT_TRUE(memory_->put("d/a", MemorySource("x"), {}).ok());
  auto endless = std::make_shared<EndlessListingStore>(memory_);
  FilesystemOptions options = options_;
  options.cache_dir = cache_dir_ + "/endless";
  auto fs = Filesystem::Create(endless, options, &metrics_, clock_);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  auto d = (*fs)->Lookup(kRootIno, "d");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  endless->calls = 0;
  auto listed = (*fs)->ReadDir(d->attr.ino);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(ErrnoFromStatus(listed.status()), EIO) << listed.status().ToString();
  EXPECT_NE(listed.status().message().find("a second time"), std::string::npos)
      << listed.status().ToString();
  EXPECT_LE(endless->calls.load(), 2);
  // So does a directory's rename, which lists every key under it first.
  endless->calls = 0;
  Status moved = (*fs)->Rename(kRootIno, "d", kRootIno, "e", 0);
  EXPECT_EQ(ErrnoFromStatus(moved), EIO) << moved.ToString();
  EXPECT_NE(moved.message().find("a second time"), std::string::npos) << moved.ToString();
  EXPECT_LE(endless->calls.load(), 4);
  EXPECT_EQ(memory_->contents("d/a"), "x");
}

TEST_F(FilesystemTest, NamesWithSpacesAndUnicode) {
  const std::string name = "r\xc3\xa9sum\xc3\xa9 final \xe2\x9c\x93.txt";
  uint64_t ino = WriteFile(kRootIno, name, "content");
  EXPECT_EQ(memory_->contents(name), "content");
  EXPECT_EQ(ReadFile(*fs_, ino), "content");
  auto list = fs_->ReadDir(kRootIno);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, name);
}

// S3 keys are UTF-8: a file made under another name could never be uploaded (the PUT's
// InvalidObjectName, retried for ever), and could then be neither removed nor renamed. Such a
// new name fails at once with EINVAL; a store that takes any bytes (SFTP) takes it.
TEST_F(FilesystemTest, ANewNameThatIsNotUtf8FailsAtOnceWhereKeysAreUtf8) {
  const std::string bad = "bad\xff\xfe";
  for (const std::string& name :
       {bad, std::string("overlong\xc0\xaf"), std::string("surrogate\xed\xa0\x80"),
        std::string("cut\xe2\x9c")}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ErrnoFromStatus(fs_->Create(kRootIno, name, 0644, O_WRONLY | O_CREAT).status()),
              EINVAL);
    EXPECT_EQ(ErrnoFromStatus(fs_->MkDir(kRootIno, name, 0755).status()), EINVAL);
    EXPECT_EQ(ErrnoFromStatus(fs_->Symlink("target", kRootIno, name).status()), EINVAL);
    EXPECT_EQ(ErrnoFromStatus(fs_->MkNod(kRootIno, name, S_IFIFO | 0644, 0).status()), EINVAL);
  }
  const uint64_t ok = WriteFile(kRootIno, "ok-\xe2\x9c\x93", "x");
  ASSERT_NE(ok, 0u);
  EXPECT_EQ(ErrnoFromStatus(fs_->Rename(kRootIno, "ok-\xe2\x9c\x93", kRootIno, bad, 0)), EINVAL);
  EXPECT_EQ(memory_->contents("ok-\xe2\x9c\x93"), "x");
  EXPECT_EQ(fs_->pending_uploads(), 0u);

  MemoryStoreOptions any_bytes;
  any_bytes.utf8_keys = false;
  UseStore(any_bytes);
  EXPECT_NE(WriteFile(kRootIno, bad, "y"), 0u);
  EXPECT_EQ(memory_->contents(bad), "y");
}

// A store with nowhere to keep user attributes (SFTP): setting one fails, rather than show it
// for a moment and lose it.
TEST_F(FilesystemTest, AUserXattrTheStoreCannotKeepIsRefused) {
  MemoryStoreOptions no_xattrs;
  no_xattrs.user_xattrs = false;
  UseStore(no_xattrs);
  const uint64_t ino = WriteFile(kRootIno, "f", "x");
  ASSERT_NE(ino, 0u);
  EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, "user.color", "blue", 0)), EOPNOTSUPP);
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.color").status()), ENODATA);
  EXPECT_EQ(memory_->head("f")->metadata.count("xattr"), 0u);
}

TEST_F(FilesystemTest, ReadDirWithoutHeadsLeavesListingOnlyEntriesToLookup) {
  options_.readdir_heads = 0;
  fs_ = NewFilesystem();
  PutObject("d/b", "bb", {{"mode", std::to_string(S_IFREG | 0600)}});
  uint64_t d = LookupIno(kRootIno, "d");
  uint64_t heads = metrics_.head_requests.load();
  auto list = fs_->ReadDir(d);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load(), heads);
  ASSERT_EQ(list->size(), 1u);
  // Listing-only attributes are not cached by the kernel: it asks Lookup, which HEADs once.
  EXPECT_EQ(list->front().entry.attr_timeout, 0);
  auto b = fs_->Lookup(d, "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->attr.mode & 07777, 0600u);
  EXPECT_EQ(metrics_.head_requests.load(), heads + 1);
}

TEST_F(FilesystemTest, ListingAttrsListWithoutAHeadAndTheKernelCachesThem) {
  options_.listing_attrs = true;
  fs_ = NewFilesystem();
  PutObject("d/b", "bb", {{"mode", std::to_string(S_IFREG | 0600)}});
  PutObject("d/c", "ccc");
  uint64_t d = LookupIno(kRootIno, "d");
  uint64_t heads = metrics_.head_requests.load();
  auto list = fs_->ReadDir(d);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load(), heads);
  ASSERT_EQ(list->size(), 2u);
  for (const DirEntry& e : *list) {
    // The listing's size and the mount's default mode, cached by the kernel like exact ones.
    EXPECT_GT(e.entry.attr_timeout, 0) << e.name;
    EXPECT_EQ(e.entry.attr.mode, static_cast<uint32_t>(S_IFREG | 0644)) << e.name;
    EXPECT_EQ(e.entry.attr.size, e.name == "b" ? 2u : 3u);
  }
  EXPECT_EQ(metrics_.head_requests.load(), heads);
  // A lookup reads the headers.
  auto b = fs_->Lookup(d, "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->attr.mode & 07777, 0600u);
  EXPECT_EQ(metrics_.head_requests.load(), heads + 1);
}

TEST_F(FilesystemTest, ALaterMountListsObjectsUnchangedSinceAHeadWithoutOne) {
  auto remount = [&] { RemountKeepingAttributes(); };
  auto mode_of = [](const std::vector<DirEntry>& list, const std::string& name) -> uint32_t {
    for (const DirEntry& e : list) {
      if (e.name == name) return e.entry.attr.mode & 07777;
    }
    return 0;
  };
  PutObject("d/a", "aaa", {{"mode", std::to_string(S_IFREG | 0600)}, {"mtime", "1500000000"}});
  PutObject("d/b", "bb");
  remount();
  uint64_t heads = metrics_.head_requests.load();
  auto first = fs_->ReadDir(LookupIno(kRootIno, "d"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load() - heads, 2u + 1u);  // a, b and the lookup of d

  remount();
  heads = metrics_.head_requests.load();
  uint64_t kept = metrics_.attrs_kept.load();
  auto second = fs_->ReadDir(LookupIno(kRootIno, "d"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load() - heads, 1u);  // the lookup of d only
  EXPECT_EQ(metrics_.attrs_kept.load() - kept, 2u);
  ASSERT_EQ(second->size(), first->size());
  for (size_t i = 0; i < first->size(); ++i) {
    const Entry& a = (*first)[i].entry;
    const Entry& b = (*second)[i].entry;
    EXPECT_EQ((*second)[i].name, (*first)[i].name);
    EXPECT_EQ(b.attr.mode, a.attr.mode) << (*first)[i].name;
    EXPECT_EQ(b.attr.uid, a.attr.uid);
    EXPECT_EQ(b.attr.size, a.attr.size);
    EXPECT_EQ(b.attr.mtime_ns, a.attr.mtime_ns) << (*first)[i].name;
    EXPECT_GT(b.attr_timeout, 0) << "exact attributes";
  }
  EXPECT_EQ(mode_of(*second, "a"), 0600u);

  // Another client's chmod rewrites the object (same bytes and ETag, a new LastModified): the
  // kept record no longer matches, and that one object is HEADed again.
  PutObject("d/a", "aaa", {{"mode", std::to_string(S_IFREG | 0640)}});
  remount();
  heads = metrics_.head_requests.load();
  auto third = fs_->ReadDir(LookupIno(kRootIno, "d"));
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load() - heads, 1u + 1u);
  EXPECT_EQ(mode_of(*third, "a"), 0640u);
}

TEST_F(FilesystemTest, WholeSecondDatesAreKeptOnlyOnceTheirSecondHasPassed) {
  auto remount = [&] { RemountKeepingAttributes(); };
  // A store whose listings have whole seconds (AWS): a chmod later in the same second would
  // list exactly as the object the HEAD saw, so such a fresh object is not kept.
  PutObject("d/fresh", "x");
  PutObject("d/old", "y");
  const int64_t now_s = static_cast<int64_t>(::time(nullptr));
  memory_->set_mtime("d/fresh", now_s * 1000000000);
  memory_->set_mtime("d/old", (now_s - 60) * 1000000000);
  remount();
  ASSERT_TRUE(fs_->ReadDir(LookupIno(kRootIno, "d")).ok());
  remount();
  uint64_t kept = metrics_.attrs_kept.load();
  uint64_t heads = metrics_.head_requests.load();
  ASSERT_TRUE(fs_->ReadDir(LookupIno(kRootIno, "d")).ok());
  EXPECT_EQ(metrics_.attrs_kept.load() - kept, 1u);           // old
  EXPECT_EQ(metrics_.head_requests.load() - heads, 1u + 1u);  // fresh, and the lookup of d

  // Unlinked through the mount: its record goes too.
  ASSERT_TRUE(fs_->Unlink(LookupIno(kRootIno, "d"), "old").ok());
  EXPECT_EQ(*attr_db_->Get<ObjectMetaRecord>("d/old"), std::nullopt);
}

TEST_F(FilesystemTest, ReadDirFetchesMissingMetadataInOneParallelRound) {
  PutObject("d/a", "aaa");
  PutObject("d/b", "bb", {{"mode", std::to_string(S_IFREG | 0600)}});
  PutObject("d/sub/c", "c");
  PutObject("d/", "");
  PutObject("d/x//y", "bad");
  uint64_t d = LookupIno(kRootIno, "d");
  uint64_t heads = metrics_.head_requests.load();
  auto list = fs_->ReadDir(d);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  // One HEAD per file (a, b), none per directory; the entries are then exact.
  EXPECT_EQ(metrics_.head_requests.load(), heads + 2);
  std::map<std::string, Entry> by_name;
  for (const auto& e : *list) by_name[e.name] = e.entry;
  ASSERT_EQ(by_name.size(), 4u);  // a, b, sub, x
  EXPECT_EQ(by_name["a"].attr.size, 3u);
  EXPECT_TRUE(S_ISREG(by_name["a"].attr.mode));
  EXPECT_TRUE(S_ISDIR(by_name["sub"].attr.mode));
  EXPECT_TRUE(S_ISDIR(by_name["x"].attr.mode));
  EXPECT_EQ(by_name["b"].attr.mode & 07777, 0600u);
  EXPECT_GT(by_name["b"].attr_timeout, 0);
  // `ls -l` then stats each name: served from the metadata cache.
  auto b = fs_->Lookup(d, "b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->attr.mode & 07777, 0600u);
  EXPECT_EQ(metrics_.head_requests.load(), heads + 2);
  // The "x//y" key gives an empty name inside "x": skipped, not fatal.
  uint64_t x = LookupIno(d, "x");
  auto xs = fs_->ReadDir(x);
  ASSERT_TRUE(xs.ok());
  EXPECT_TRUE(xs->empty());
  EXPECT_EQ(fs_->skipped_names(), 1u);
}

TEST_F(FilesystemTest, ReadDirPrefersCompleteCachedMetadata) {
  PutObject("f", "x", {{"mode", std::to_string(S_IFREG | 0640)}});
  ASSERT_TRUE(fs_->Lookup(kRootIno, "f").ok());
  auto list = fs_->ReadDir(kRootIno);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].entry.attr.mode & 07777, 0640u);
  EXPECT_EQ((*list)[0].entry.attr_timeout, 1.0);
}

TEST_F(FilesystemTest, ReadDirOfManyEntriesReadsAllPages) {
  for (int i = 0; i < 2500; ++i) PutObject("big/f" + std::to_string(i), "x");
  uint64_t big = LookupIno(kRootIno, "big");
  uint64_t lists = metrics_.list_requests.load();
  auto list = fs_->ReadDir(big);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2500u);
  EXPECT_EQ(metrics_.list_requests.load(), lists + 3);
  std::set<std::string> names;
  for (const auto& e : *list) names.insert(e.name);
  EXPECT_EQ(names.size(), 2500u);
  EXPECT_TRUE(names.count("f2499"));
}

// A huge directory is listed one page at a time: each ReadDirPage makes one list request and
// returns at most a page of entries, and the cursor keeps no list of the names given so far, yet
// every name comes once (a file and a directory of the same name, a file staged here).
TEST_F(FilesystemTest, ReadDirPageHoldsOnePageAtATime) {
  constexpr int kPage = 100;
  constexpr int kFiles = 1050;
  options_.list_page_keys = kPage;
  fs_ = NewFilesystem();
  for (int i = 0; i < kFiles; ++i) PutObject("big/f" + std::to_string(1000 + i), "x");
  // f1499 ends the fifth page; "f1499-a" and the directory "f1499/" open the sixth.
  PutObject("big/f1499", "same name as a directory");
  PutObject("big/f1499/inside", "y");
  PutObject("big/f1499-a", "sorted between the file and the directory");
  uint64_t big = LookupIno(kRootIno, "big");
  auto staged = fs_->Create(big, "local", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();

  DirCursor cursor;
  std::multiset<std::string> names;
  uint64_t lists = metrics_.list_requests.load();
  int pages = 0;
  while (!cursor.done) {
    auto page = fs_->ReadDirPage(big, &cursor);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    ++pages;
    EXPECT_EQ(metrics_.list_requests.load() - lists, static_cast<uint64_t>(pages));
    EXPECT_LE(page->size(), static_cast<size_t>(kPage) + (cursor.done ? 1 : 0));
    EXPECT_LE(cursor.recent_files.size(), 2u);
    EXPECT_TRUE(cursor.local_names.empty() || cursor.local_names.count("local") == 1);
    for (const DirEntry& e : *page) names.insert(e.name);
  }
  EXPECT_EQ(pages, 11);                                      // 1,052 keys and prefixes
  EXPECT_EQ(names.size(), static_cast<size_t>(kFiles) + 2);  // + f1499-a, local
  EXPECT_EQ(names.count("f1499"), 1u);
  EXPECT_EQ(names.count("f1499-a"), 1u);
  EXPECT_EQ(names.count("local"), 1u);
  EXPECT_EQ(names.count("f2049"), 1u);
  ASSERT_TRUE(fs_->Release(staged->fh).ok());
}

// Files past readdir_heads are HEADed by the kernel's lookups, not the listing: those lookups
// keep what they find as the listing's HEADs would, whether the metadata cache's record of the
// listing is still fresh or has expired, so the next mount lists every file without a HEAD.
TEST_F(FilesystemTest, LookupsPastReaddirHeadsKeepAttributesForTheNextMount) {
  auto remount = [&] { RemountKeepingAttributes(); };
  options_.readdir_heads = 2;
  constexpr int kFiles = 5;
  const int64_t old_ns = (static_cast<int64_t>(::time(nullptr)) - 60) * 1000000000 + 123456789;
  for (int i = 0; i < kFiles; ++i) {
    const std::string name = "f" + std::to_string(i);
    PutObject("fresh/" + name, "x", {{"mode", std::to_string(S_IFREG | 0600)}});
    PutObject("old/" + name, "x", {{"mode", std::to_string(S_IFREG | 0604)}});
    memory_->set_mtime("old/" + name, old_ns);
  }
  remount();
  for (const std::string dir : {"fresh", "old"}) {
    uint64_t d = LookupIno(kRootIno, dir);
    uint64_t heads = metrics_.head_requests.load();
    auto list = fs_->ReadDir(d);
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    EXPECT_EQ(metrics_.head_requests.load(), heads) << "more files than readdir_heads";
    // The kernel looks each name up; for "old", after the listing's records expired.
    if (dir == "old") clock_->Advance(std::chrono::seconds(5));
    for (const DirEntry& e : *list) {
      EXPECT_EQ(e.entry.attr_timeout, 0) << e.name;
      ASSERT_TRUE(fs_->Lookup(d, e.name).ok()) << e.name;
    }
    EXPECT_EQ(metrics_.head_requests.load() - heads, static_cast<uint64_t>(kFiles));
  }

  remount();
  for (const std::string dir : {"fresh", "old"}) {
    uint64_t d = LookupIno(kRootIno, dir);
    uint64_t heads = metrics_.head_requests.load();
    uint64_t kept = metrics_.attrs_kept.load();
    auto list = fs_->ReadDir(d);
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    EXPECT_EQ(metrics_.attrs_kept.load() - kept, static_cast<uint64_t>(kFiles)) << dir;
    EXPECT_EQ(metrics_.head_requests.load(), heads) << dir;
    for (const DirEntry& e : *list) {
      EXPECT_GT(e.entry.attr_timeout, 0) << dir << "/" << e.name;
      EXPECT_EQ(e.entry.attr.mode & 07777, dir == "old" ? 0604u : 0600u) << e.name;
    }
  }
}

TEST_F(FilesystemTest, CreateWriteReleaseUploadsOnceWithMetadata) {
  uint64_t puts = metrics_.put_requests.load();
  auto created = fs_->Create(kRootIno, "new.txt", 0640, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("hello ")).ok());
  ASSERT_TRUE(fs_->Write(created->fh, 6, Bytes("world")).ok());
  // Visible before the upload, with its local size.
  auto attr = fs_->GetAttr(created->entry.attr.ino);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->attr.size, 11u);
  EXPECT_EQ(metrics_.put_requests.load(), puts);
  ASSERT_TRUE(fs_->Flush(created->fh).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_EQ(metrics_.put_requests.load(), puts + 1);
  EXPECT_EQ(memory_->contents("new.txt"), "hello world");
  auto head = memory_->head("new.txt");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0640));
  EXPECT_EQ(head->metadata.at("uid"), "1000");
  EXPECT_EQ(head->metadata.at("gid"), "1000");
  EXPECT_TRUE(ParseMtime(head->metadata.at("mtime")).has_value());
  // Staging files are gone after a clean upload.
  EXPECT_TRUE(std::filesystem::is_empty(options_.cache_dir));
}

TEST_F(FilesystemTest, NewObjectsBelongToTheirCreator) {
  const Owner caller{4321, 8765};
  auto created = fs_->Create(kRootIno, "mine", 0644, O_WRONLY | O_CREAT, caller);
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(created->entry.attr.uid, 4321u);
  EXPECT_EQ(created->entry.attr.gid, 8765u);
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  ASSERT_TRUE(fs_->MkDir(kRootIno, "my-dir", 0755, caller).ok());
  ASSERT_TRUE(fs_->Symlink("mine", kRootIno, "my-link", caller).ok());
  for (const char* key : {"mine", "my-dir/", "my-link"}) {
    auto head = memory_->head(key);
    ASSERT_TRUE(head.ok()) << key;
    EXPECT_EQ(head->metadata.at("uid"), "4321") << key;
    EXPECT_EQ(head->metadata.at("gid"), "8765") << key;
  }
  // Without a caller: the mount's owner.
  WriteFile(kRootIno, "theirs", "x");
  EXPECT_EQ(memory_->head("theirs")->metadata.at("uid"), "1000");
}

TEST_F(FilesystemTest, TouchCreatesAnEmptyObject) {
  auto created = fs_->Create(kRootIno, "empty", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  auto head = memory_->head("empty");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, 0u);
}

TEST_F(FilesystemTest, CreateExclusiveOnExistingFails) {
  PutObject("exists", "x");
  auto c = fs_->Create(kRootIno, "exists", 0644, O_WRONLY | O_CREAT | O_EXCL);
  EXPECT_EQ(ErrnoFromStatus(c.status()), EEXIST);
}

// A lock file another client made after this mount cached the name as missing: the exclusive
// create fails, and the other client's file stays as it was.
TEST_F(FilesystemTest, AnExclusiveCreateAsksTheServerPastACachedMissingName) {
  PutObject("d/other", "x");
  EXPECT_EQ(ErrnoFromStatus(fs_->Lookup(kRootIno, "lock").status()), ENOENT);  // cached
  std::vector<std::string> forgotten;  // names whose kernel entry is dropped
  fs_->set_entry_invalidator([&](uint64_t parent, const std::string& name) {
    if (parent == kRootIno) forgotten.push_back(name);
  });
  ASSERT_TRUE(memory_->put("lock", MemorySource("theirs"), PutOptions{}).ok());
  auto c = fs_->Create(kRootIno, "lock", 0644, O_WRONLY | O_CREAT | O_EXCL);
  EXPECT_EQ(ErrnoFromStatus(c.status()), EEXIST);
  // The kernel's negative entry too: a stat of the name right after sees the file.
  EXPECT_EQ(forgotten, std::vector<std::string>{"lock"});
  fs_->set_entry_invalidator(nullptr);
  if (c.ok()) {
    ASSERT_TRUE(fs_->Release(c->fh).ok());
  }
  auto head = memory_->head("lock");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, 6u);
  // And the name is no longer cached as missing.
  EXPECT_TRUE(fs_->Lookup(kRootIno, "lock").ok());

  // A name the cache knows nothing of: the lookup that finds it missing is the server's, and
  // no HEAD more is sent.
  const uint64_t d = LookupIno(kRootIno, "d");
  const uint64_t heads = metrics_.head_requests.load();
  auto fresh = fs_->Create(d, "new-lock", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load(), heads + 1);
  ASSERT_TRUE(fs_->Release(fresh->fh).ok());
}

// What a new file's owner takes from its directory (a set-group-ID directory's group) comes
// from the directory's record as last seen: a create sends no request for the directory, even
// once that record is out of date, which every file of a bulk copy would pay.
TEST_F(FilesystemTest, ACreateAsksNothingOfItsDirectory) {
  PutObject("d/x", "x");
  const uint64_t d = LookupIno(kRootIno, "d");
  clock_->Advance(std::chrono::seconds(10));  // past every TTL
  const uint64_t heads = metrics_.head_requests.load();
  const uint64_t lists = metrics_.list_requests.load();
  auto created = fs_->Create(d, "new", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load(), heads + 1);  // of d/new, which O_EXCL asks
  EXPECT_EQ(metrics_.list_requests.load(), lists + 1);  // of d, for d/new's lookup
  ASSERT_TRUE(fs_->Release(created->fh).ok());
}

// The kernel creates only a name it saw missing, and checks the caller against the directory
// alone (default_permissions). A file another client made there since is opened by such a
// create only as the kernel would open it: another local user of an allow_other mount gets
// EACCES for root's 0600 file, not a handle that truncates it.
TEST_F(FilesystemTest, ACreateThatFindsAnotherUsersFileChecksItsMode) {
  PutObject("private", "secret",
            {{"mode", std::to_string(S_IFREG | 0600)}, {"uid", "0"}, {"gid", "0"}});
  PutObject("open", "shared",
            {{"mode", std::to_string(S_IFREG | 0666)}, {"uid", "0"}, {"gid", "0"}});
  const Owner nobody{65534, 65534};
  for (int flags : {O_WRONLY | O_CREAT | O_TRUNC, O_RDONLY | O_CREAT, O_RDWR | O_CREAT}) {
    auto refused = fs_->Create(kRootIno, "private", 0644, flags, nobody);
    EXPECT_EQ(ErrnoFromStatus(refused.status()), EACCES) << flags;
  }
  auto head = memory_->head("private");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, 6u);
  // What the mode grants: opened, as by the kernel.
  auto granted = fs_->Create(kRootIno, "open", 0644, O_WRONLY | O_CREAT, nobody);
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  ASSERT_TRUE(fs_->Release(granted->fh).ok());
  // The mount's owner (and root) as before.
  auto own = fs_->Create(kRootIno, "private", 0644, O_RDONLY | O_CREAT, Owner{0, 0});
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ASSERT_TRUE(fs_->Release(own->fh).ok());
}

// As the kernel's check, the caller's supplementary groups count: a member of the file's group
// by one of them opens a group-writable file; a caller in neither its primary nor a
// supplementary group of the file's does not.
TEST_F(FilesystemTest, ACreateThatFindsAnotherUsersFileCountsTheCallersSupplementaryGroups) {
  PutObject("team", "shared",
            {{"mode", std::to_string(S_IFREG | 0660)}, {"uid", "0"}, {"gid", "50"}});
  Owner member{1001, 1001};
  std::vector<uint32_t> asked;
  member.in_group = [&asked](uint32_t gid) {
    asked.push_back(gid);
    return gid == 50;
  };
  auto opened = fs_->Create(kRootIno, "team", 0644, O_WRONLY | O_CREAT | O_TRUNC, member);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_TRUE(fs_->Release(opened->fh).ok());
  EXPECT_EQ(asked, std::vector<uint32_t>{50});
  Owner outsider{1002, 1002};
  outsider.in_group = [](uint32_t gid) { return gid == 60; };
  auto refused = fs_->Create(kRootIno, "team", 0644, O_WRONLY | O_CREAT, outsider);
  EXPECT_EQ(ErrnoFromStatus(refused.status()), EACCES);
}

// A create that finds a file and truncates it drops the file's set-ID bits, as an open with
// O_TRUNC does, unless the caller is root: `: > f` by another user left a root 06777 file
// -rwsrwsrwx when the kernel sent CREATE (a name it had seen missing).
TEST_F(FilesystemTest, ACreateThatTruncatesAnotherUsersFileDropsItsSetIdBits) {
  for (const auto& [caller, mode] :
       {std::pair<Owner, uint32_t>{Owner{65534, 65534}, 0777}, {Owner{0, 0}, 06777}}) {
    SCOPED_TRACE(caller.uid);
    const std::string name = "setid-of-" + std::to_string(caller.uid);
    PutObject(name, "program",
              {{"mode", std::to_string(S_IFREG | 06777)}, {"uid", "0"}, {"gid", "0"}});
    auto created = fs_->Create(kRootIno, name, 0644, O_WRONLY | O_CREAT | O_TRUNC, caller);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    EXPECT_EQ(created->entry.attr.mode & 07777, mode);
    ASSERT_TRUE(fs_->Release(created->fh).ok());
    auto stored = memory_->head(name);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->size, 0u);
    EXPECT_EQ(stored->metadata["mode"], std::to_string(S_IFREG | mode));
  }
}

// Linux reads no user. attribute of a link, FIFO or device (ENODATA): listing user.etag there
// failed rsync -aX and cp --preserve=xattr on every link of a tree.
TEST_F(FilesystemTest, OnlyARegularFileListsAnEtag) {
  PutObject("f", "x");
  auto link = fs_->Symlink("f", kRootIno, "link");
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  auto names = fs_->ListXattr(link->attr.ino);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(std::find(names->begin(), names->end(), "user.etag"), names->end());
  names = fs_->ListXattr(LookupIno(kRootIno, "f"));
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_NE(std::find(names->begin(), names->end(), "user.etag"), names->end());
}

// An append opened after another client changed the file, while this mount still cached the
// version before: it goes on the end of the file as it is now, not fail at close with EIO.
TEST_F(FilesystemTest, AnEditStartsFromTheServersVersionNotACachedOne) {
  PutObject("log", "one\n");
  const uint64_t ino = LookupIno(kRootIno, "log");  // cached: 4 bytes
  ASSERT_TRUE(memory_->put("log", MemorySource("one\ntwo\n"), PutOptions{}).ok());
  auto fh = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  const std::string line = "three\n";
  auto wrote = fs_->Write(*fh, 4, std::as_bytes(std::span(line)));
  ASSERT_TRUE(wrote.ok()) << wrote.status().ToString();
  Status closed = fs_->Release(*fh);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_EQ(memory_->contents("log"), "one\ntwo\nthree\n");
}

// A file created here exclusively and left empty (`: > name` of another user, O_EXCL), whose
// name another client took before its upload: the close fails (EIO), the other client's file
// stands, and nothing is tried again (every 10 s, and by the next mount without the
// condition, over that file).
TEST_F(FilesystemTest, AnEmptyFileCreatedHereWhoseNameWasTakenIsNotRetried) {
  auto created = fs_->Create(kRootIno, "new", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(memory_->put("new", MemorySource("theirs"), PutOptions{}).ok());
  EXPECT_EQ(ErrnoFromStatus(fs_->Flush(created->fh)), EIO);
  (void)fs_->Release(created->fh);
  EXPECT_EQ(memory_->contents("new"), "theirs");
  EXPECT_EQ(fs_->pending_uploads(), 0u);
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// Another client replaced a file while this mount appended to it: the bytes of the old version
// the append never fetched exist nowhere now. The close fails (EIO) and the release sets the
// append aside in cache_dir/unfinished/ at once, rather than retrying a hopeless upload every
// 10 s and failing the file's reads until unmount: it reads as the other client's file, and a
// later append goes on the end of that.
TEST_F(FilesystemTest, AnEditWhoseStoredFileChangedIsSetAsideNotRetried) {
  const std::string old_bytes(256 << 10, 'o');  // several read_buffer blocks, never fetched
  PutObject("log", old_bytes);
  const uint64_t ino = LookupIno(kRootIno, "log");
  auto fh = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, old_bytes.size(), Bytes("mine\n")).ok());
  ASSERT_TRUE(memory_->put("log", MemorySource("theirs\n"), PutOptions{}).ok());
  const Status closed = fs_->Flush(*fh);
  EXPECT_EQ(ErrnoFromStatus(closed), EIO) << closed.ToString();
  EXPECT_NE(closed.message().find("log is not uploaded: log changed or was removed on the server"),
            std::string::npos)
      << closed.ToString();
  EXPECT_EQ(ErrnoFromStatus(fs_->Release(*fh)), EIO);
  EXPECT_EQ(memory_->contents("log"), "theirs\n");
  EXPECT_EQ(fs_->pending_uploads(), 0u);  // nothing is retried in vain
  std::map<std::string, std::string> aside = SetAside(options_.cache_dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside["log"].size(), old_bytes.size() + 5);
  EXPECT_EQ(aside["log"].substr(old_bytes.size()), "mine\n");
  EXPECT_EQ(metrics_.unfinished_set_aside.load(), 1u);
  EXPECT_EQ(fs_->GetAttr(ino)->attr.size, 7u);
  EXPECT_EQ(ReadFile(*fs_, ino), "theirs\n");
  auto again = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(fs_->Write(*again, 7, Bytes("mine again\n")).ok());
  const Status released = fs_->Release(*again);
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_EQ(memory_->contents("log"), "theirs\nmine again\n");
}

// An edit that holds every byte of the version it was opened from (appended to, then read
// here) is no less built on that version: another client's version stored before its upload
// would be undone by it. The upload is conditional on the old version, so the close fails
// (EIO) and the edit is set aside, whole, where the other client's change would otherwise be
// lost with both closes returning 0 (two mounts appending to one log).
TEST_F(FilesystemTest, AnEditOfAVersionAnotherClientReplacedIsSetAsideNotStoredOverIt) {
  PutObject("log", "one\n");
  const uint64_t ino = LookupIno(kRootIno, "log");
  auto fh = fs_->Open(ino, O_RDWR | O_APPEND);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 4, Bytes("mine\n")).ok());
  std::string read(9, '\0');
  ASSERT_TRUE(fs_->Read(*fh, 0, std::as_writable_bytes(std::span(read))).ok());
  ASSERT_EQ(read, "one\nmine\n");
  ASSERT_TRUE(memory_->put("log", MemorySource("one\ntheirs\n"), PutOptions{}).ok());
  const Status closed = fs_->Flush(*fh);
  EXPECT_EQ(ErrnoFromStatus(closed), EIO) << closed.ToString();
  EXPECT_NE(closed.message().find("keeps bytes of the version it was opened from"),
            std::string::npos)
      << closed.ToString();
  EXPECT_EQ(ErrnoFromStatus(fs_->Release(*fh)), EIO);
  EXPECT_EQ(memory_->contents("log"), "one\ntheirs\n");
  EXPECT_EQ(fs_->pending_uploads(), 0u);
  std::map<std::string, std::string> aside = SetAside(options_.cache_dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside["log"], "one\nmine\n");
  EXPECT_EQ(ReadFile(*fs_, ino), "one\ntheirs\n");

  // Written over every old byte, it keeps none of that version: the last writer wins, as with
  // `cp` onto the file.
  auto over = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  ASSERT_TRUE(fs_->Write(*over, 0, Bytes("all of it mine\n")).ok());
  ASSERT_TRUE(memory_->put("log", MemorySource("theirs again\n"), PutOptions{}).ok());
  const Status stored = fs_->Release(*over);
  EXPECT_TRUE(stored.ok()) << stored.ToString();
  EXPECT_EQ(memory_->contents("log"), "all of it mine\n");
}

// `>>` on an empty file, or on a name that was free: what it wrote was to go on nothing, so
// another client's file stored there meanwhile is not replaced by it. An exclusive create is
// the same; `>` (O_TRUNC) replaces, as the last writer.
TEST_F(FilesystemTest, AnAppendOntoNothingDoesNotReplaceAnotherClientsFile) {
  PutObject("empty", "");
  struct Case {
    const char* name;
    int flags;
    bool kept;  // the other client's file stays
  };
  for (const Case& c : {Case{"empty", O_WRONLY | O_CREAT | O_APPEND, true},
                        Case{"new", O_WRONLY | O_CREAT | O_APPEND, true},
                        Case{"exclusive", O_WRONLY | O_CREAT | O_EXCL, true},
                        Case{"truncated", O_WRONLY | O_CREAT | O_TRUNC, false}}) {
    SCOPED_TRACE(c.name);
    auto created = fs_->Create(kRootIno, c.name, 0644, c.flags);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("mine\n")).ok());
    ASSERT_TRUE(memory_->put(c.name, MemorySource("theirs\n"), PutOptions{}).ok());
    const Status released = fs_->Release(created->fh);
    EXPECT_EQ(ErrnoFromStatus(released), c.kept ? EIO : 0) << released.ToString();
    EXPECT_EQ(memory_->contents(c.name), c.kept ? "theirs\n" : "mine\n");
    std::map<std::string, std::string> aside = SetAside(options_.cache_dir);
    EXPECT_EQ(aside.count(c.name), c.kept ? 1u : 0u);
    if (c.kept) {
      EXPECT_EQ(aside[c.name], "mine\n");
    }
  }
}

// A file another client replaced while this mount cached its version: the read of an open
// made in that window fails (ESTALE), and the next open reads the new version at once, rather
// than fail the same way until the attributes expire.
TEST_F(FilesystemTest, AStaleReadHasTheNextOpenLearnTheNewVersion) {
  PutObject("f", "old bytes");
  const uint64_t ino = LookupIno(kRootIno, "f");
  std::vector<uint64_t> dropped;  // what the kernel is told to drop (pages and attributes)
  fs_->set_page_invalidator([&](uint64_t i) {
    if (fs_->TakeQueuedPageDrop(i)) dropped.push_back(i);
  });
  ASSERT_TRUE(memory_->put("f", MemorySource("new bytes"), PutOptions{}).ok());
  std::string buf(9, '\0');
  auto first = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto stale = fs_->Read(*first, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(ErrnoFromStatus(stale.status()), ESTALE);
  EXPECT_EQ(dropped, std::vector<uint64_t>{ino});
  fs_->set_page_invalidator(nullptr);
  ASSERT_TRUE(fs_->Release(*first).ok());
  auto second = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto fresh = fs_->Read(*second, 0, std::as_writable_bytes(std::span(buf)));
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(buf, "new bytes");
  ASSERT_TRUE(fs_->Release(*second).ok());
}

TEST_F(FilesystemTest, RandomWritesMatchALocalModel) {
  std::mt19937 rng(7);
  std::string initial(100000, '\0');
  for (char& c : initial) c = static_cast<char>('a' + rng() % 26);
  PutObject("model", initial);
  std::string model = initial;
  uint64_t ino = LookupIno(kRootIno, "model");
  auto fh = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(fh.ok());
  for (int i = 0; i < 50; ++i) {
    int op = static_cast<int>(rng() % 4);
    if (op == 0) {  // overwrite in the middle
      size_t off = rng() % (model.size() + 1);
      std::string data(rng() % 5000, static_cast<char>('A' + i % 26));
      ASSERT_TRUE(fs_->Write(*fh, off, Bytes(data)).ok());
      if (model.size() < off + data.size()) model.resize(off + data.size(), '\0');
      model.replace(off, data.size(), data);
    } else if (op == 1) {  // append
      std::string data(rng() % 3000, static_cast<char>('0' + i % 10));
      ASSERT_TRUE(fs_->Write(*fh, model.size(), Bytes(data)).ok());
      model += data;
    } else if (op == 2) {  // truncate down or up
      size_t size = rng() % (model.size() + 20000);
      FileAttr attr;
      attr.size = size;
      ASSERT_TRUE(fs_->SetAttr(ino, kSetSize, attr, *fh).ok());
      model.resize(size, '\0');
    } else {  // write past the end, leaving a hole
      size_t off = model.size() + rng() % 1000;
      ASSERT_TRUE(fs_->Write(*fh, off, Bytes("tail")).ok());
      model.resize(off, '\0');
      model += "tail";
    }
  }
  // Reads of the open handle see the staged data.
  std::string buf(model.size() + 10, '\0');
  auto n =
      fs_->Read(*fh, 0, std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), buf.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(buf.substr(0, *n), model);
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("model"), model);
  auto fresh = NewFilesystem();
  auto e = fresh->Lookup(kRootIno, "model");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.size, model.size());
  EXPECT_EQ(ReadFile(*fresh, e->attr.ino), model);
}

TEST_F(FilesystemTest, TruncateWithoutOpenFileUploadsAtOnce) {
  PutObject("t", "0123456789");
  uint64_t ino = LookupIno(kRootIno, "t");
  FileAttr attr;
  attr.size = 4;
  auto e = fs_->SetAttr(ino, kSetSize, attr, std::nullopt);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->attr.size, 4u);
  EXPECT_EQ(memory_->contents("t"), "0123");
}

// The same while only readers have the file open (tail, a backup tool): the truncate waited
// for the last reader's close, unaccepted, and a crash before it lost the new size.
TEST_F(FilesystemTest, TruncateWhileOnlyReadersHaveTheFileOpenUploadsAtOnce) {
  PutObject("t", "important content");
  uint64_t ino = LookupIno(kRootIno, "t");
  auto reader = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  FileAttr attr;
  attr.size = 0;
  auto e = fs_->SetAttr(ino, kSetSize, attr, std::nullopt);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->attr.size, 0u);
  EXPECT_EQ(memory_->contents("t"), "");
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("t"), "");
  EXPECT_TRUE(SetAside(image).empty());
  // The reader reads the file as it is now.
  std::string buf(10, '\0');
  auto n = fs_->Read(*reader, 0,
                     std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), buf.size()));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  ASSERT_TRUE(fs_->Release(*reader).ok());
  EXPECT_EQ(memory_->contents("t"), "");
}

TEST_F(FilesystemTest, OpenWithTruncEmptiesTheFile) {
  PutObject("t", "0123456789");
  uint64_t ino = LookupIno(kRootIno, "t");
  ASSERT_NO_FATAL_FAILURE(Overwrite(ino, "ab"));
  EXPECT_EQ(memory_->contents("t"), "ab");
}

TEST_F(FilesystemTest, ReadThroughPrefetcherEqualsContent) {
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 % 251);
  PutObject("big.bin", data);
  uint64_t ino = LookupIno(kRootIno, "big.bin");
  uint64_t reads = metrics_.read_requests.load();
  EXPECT_EQ(ReadFile(*fs_, ino), data);
  // 7000-byte reads of a 300000-byte file: far fewer backend reads than kernel reads.
  EXPECT_LT(metrics_.read_requests.load() - reads, 300000u / 7000u);
}

TEST_F(FilesystemTest, ChmodChownUtimensAreSelfCopies) {
  PutObject("m", "data");
  uint64_t ino = LookupIno(kRootIno, "m");
  uint64_t puts = metrics_.put_requests.load();
  uint64_t copies = metrics_.copy_requests.load();
  uint64_t sets = metrics_.set_attributes_requests.load();
  FileAttr attr;
  attr.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());
  EXPECT_EQ(metrics_.set_attributes_requests.load(), sets + 1);
  attr.uid = 7;
  attr.gid = 8;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetUid | kSetGid, attr, std::nullopt).ok());
  attr.mtime_ns = int64_t{1600000000} * 1000000000 + 123456789;
  auto e = fs_->SetAttr(ino, kSetMtime, attr, std::nullopt);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.mtime_ns, attr.mtime_ns);
  EXPECT_EQ(metrics_.set_attributes_requests.load(), sets + 3);
  EXPECT_EQ(metrics_.copy_requests.load(), copies);
  EXPECT_EQ(metrics_.put_requests.load(), puts);
  EXPECT_EQ(memory_->contents("m"), "data");

  auto fresh = NewFilesystem();
  auto got = fresh->Lookup(kRootIno, "m");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(got->attr.uid, 7u);
  EXPECT_EQ(got->attr.gid, 8u);
  EXPECT_EQ(got->attr.mtime_ns, attr.mtime_ns);
}

TEST_F(FilesystemTest, ChmodOfUnsavedFileRidesWithTheUpload) {
  auto created = fs_->Create(kRootIno, "pending", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("x")).ok());
  FileAttr attr;
  attr.mode = 0700;
  uint64_t sets = metrics_.set_attributes_requests.load();
  ASSERT_TRUE(fs_->SetAttr(created->entry.attr.ino, kSetMode, attr, created->fh).ok());
  EXPECT_EQ(metrics_.set_attributes_requests.load(), sets);
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  auto head = memory_->head("pending");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0700));
}

TEST_F(FilesystemTest, MkdirAndRmdir) {
  auto d = fs_->MkDir(kRootIno, "dir", 0750);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(S_ISDIR(d->attr.mode));
  auto marker = memory_->head("dir/");
  ASSERT_TRUE(marker.ok());
  EXPECT_EQ(marker->metadata.at("mode"), std::to_string(S_IFDIR | 0750));
  EXPECT_EQ(ErrnoFromStatus(fs_->MkDir(kRootIno, "dir", 0755).status()), EEXIST);

  WriteFile(d->attr.ino, "f", "x");
  Status s = fs_->RmDir(kRootIno, "dir");
  EXPECT_EQ(s.code(), StatusCode::kNotEmpty);
  EXPECT_EQ(ErrnoFromStatus(s), ENOTEMPTY);
  ASSERT_TRUE(fs_->Unlink(d->attr.ino, "f").ok());
  ASSERT_TRUE(fs_->RmDir(kRootIno, "dir").ok());
  EXPECT_EQ(memory_->object_count(), 0u);
  EXPECT_EQ(fs_->Lookup(kRootIno, "dir").status().code(), StatusCode::kNotFound);
}

TEST_F(FilesystemTest, RmdirOfFileAndUnlinkOfDirectory) {
  PutObject("file", "x");
  PutObject("dir/", "");
  EXPECT_EQ(ErrnoFromStatus(fs_->RmDir(kRootIno, "file")), ENOTDIR);
  EXPECT_EQ(ErrnoFromStatus(fs_->Unlink(kRootIno, "dir")), EISDIR);
}

TEST_F(FilesystemTest, RenameFileIsCopyAndDeleteKeepingTheEtag) {
  uint64_t ino = WriteFile(kRootIno, "src", "payload");
  auto before = memory_->head("src");
  ASSERT_TRUE(before.ok());
  uint64_t puts = metrics_.put_requests.load();
  ASSERT_TRUE(fs_->Rename(kRootIno, "src", kRootIno, "dst", 0).ok());
  EXPECT_EQ(metrics_.put_requests.load(), puts);
  EXPECT_FALSE(memory_->head("src").ok());
  auto after = memory_->head("dst");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->etag, before->etag);
  EXPECT_EQ(after->metadata.at("mode"), before->metadata.at("mode"));
  // The inode follows the rename.
  auto e = fs_->Lookup(kRootIno, "dst");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.ino, ino);
  EXPECT_EQ(ReadFile(*fs_, ino), "payload");
}

// A rename copies the source, then removes it: a version another client stored in between is
// not the one copied, and stays, as though it came after the rename.
TEST_F(FilesystemTest, ARenameLeavesAVersionAnotherClientStoredDuringItsCopy) {
  PutObject("src", "copied");
  const uint64_t ino = LookupIno(kRootIno, "src");
  faults_->BeforeNth(StoreOp::kRemove, 1, [this] { PutObject("src", "theirs"); });
  ASSERT_TRUE(fs_->Rename(kRootIno, "src", kRootIno, "dst", 0).ok());
  EXPECT_EQ(memory_->contents("dst"), "copied");
  EXPECT_EQ(memory_->contents("src"), "theirs");
  EXPECT_EQ(ReadFile(*fs_, ino), "copied");
  EXPECT_EQ(ReadFile(*fs_, LookupIno(kRootIno, "src")), "theirs");
}

TEST_F(FilesystemTest, RenameAndChmodOfOwnWritesAskNothingFirst) {
  UseRgwLikeCopies();
  WriteFile(kRootIno, "src", "mine");
  ASSERT_EQ(fs_->Lookup(kRootIno, "dst").status().code(), StatusCode::kNotFound);
  // Both names are cached and the source is this mount's own upload: the chmod and the rename
  // ask the store nothing before they copy.
  auto e = fs_->Lookup(kRootIno, "src");
  ASSERT_TRUE(e.ok());
  uint64_t heads = metrics_.head_requests.load();
  uint64_t lists = metrics_.list_requests.load();
  FileAttr mode;
  mode.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(e->attr.ino, kSetMode, mode, std::nullopt).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "src", kRootIno, "dst", 0).ok());
  EXPECT_EQ(metrics_.head_requests.load(), heads);
  EXPECT_EQ(metrics_.list_requests.load(), lists);
  EXPECT_EQ(memory_->contents("dst"), "mine");
  EXPECT_EQ(memory_->head("dst")->metadata.at("mode"), std::to_string(S_IFREG | 0600));
}

TEST_F(FilesystemTest, RenameOfAnOwnWriteReplacedElsewhereCopiesWhatItIsNow) {
  UseRgwLikeCopies();
  WriteFile(kRootIno, "src", "old");
  PutObject("src", "replaced elsewhere");  // while this mount's record is fresh
  ASSERT_TRUE(fs_->Rename(kRootIno, "src", kRootIno, "dst", 0).ok());
  EXPECT_EQ(memory_->contents("dst"), "replaced elsewhere");
  EXPECT_FALSE(memory_->head("src").ok());
  auto e = fs_->Lookup(kRootIno, "dst");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.size, std::string_view("replaced elsewhere").size());
}

TEST_F(FilesystemTest, ChmodOfAFileReplacedElsewhereKeepsItsNewMetadata) {
  UseRgwLikeCopies();
  PutObject("f", "one", {{"mtime", "1000"}});
  auto e = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(e.ok());
  // Another client rewrites it, with its own mtime, while this mount's record is fresh.
  PutObject("f", "two", {{"mtime", "2000"}});
  FileAttr mode;
  mode.mode = 0640;
  ASSERT_TRUE(fs_->SetAttr(e->attr.ino, kSetMode, mode, std::nullopt).ok());
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(memory_->contents("f"), "two");
  EXPECT_EQ(head->metadata.at("mtime"), "2000");
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0640));
}

// Only user. attributes exist: other namespaces are unsupported (EOPNOTSUPP), not merely
// absent (ENODATA), so that ls -l stops asking for them after the first file.
TEST_F(FilesystemTest, ExtendedAttributesOutsideUserAreUnsupported) {
  PutObject("f", "data");
  auto e = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(e.ok());
  const uint64_t ino = e->attr.ino;
  for (const char* name : {"security.selinux", "system.posix_acl_access", "trusted.x"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, name).status()), EOPNOTSUPP);
    EXPECT_EQ(ErrnoFromStatus(fs_->SetXattr(ino, name, "v", 0)), EOPNOTSUPP);
    EXPECT_EQ(ErrnoFromStatus(fs_->RemoveXattr(ino, name)), EOPNOTSUPP);
  }
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.missing").status()), ENODATA);
  EXPECT_EQ(ErrnoFromStatus(fs_->RemoveXattr(ino, "user.missing")), ENODATA);
}

// Another writer's "xattr" metadata may hold names of other namespaces, or objfs's own: listed,
// getfattr -d, rsync -aX and cp --preserve=xattr then failed on reading them.
TEST_F(FilesystemTest, OnlyTheAttributesAReadGivesAreListed) {
  PutOptions put;
  put.metadata = {{"xattr", EncodeXattrs({{"security.capability", "c"},
                                          {"trusted.x", "t"},
                                          {"user.a", "1"},
                                          {"user.etag", "not it"},
                                          {"user.objfs.stats", "s"},
                                          {"user." + std::string(251, 'n'), "long"},
                                          {std::string("user.b\0c", 8), "nul"}})}};
  ASSERT_TRUE(memory_->put("f", MemorySource("data"), put).ok());
  const uint64_t ino = LookupIno(kRootIno, "f");
  auto names = fs_->ListXattr(ino);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(*names, (std::vector<std::string>{"user.etag", "user.a"}));
  for (const std::string& name : *names) {
    EXPECT_TRUE(fs_->GetXattr(ino, name).ok()) << name;
  }
}

TEST_F(FilesystemTest, RenameNoReplaceAndExchange) {
  PutObject("a", "1");
  PutObject("b", "2");
  EXPECT_EQ(ErrnoFromStatus(fs_->Rename(kRootIno, "a", kRootIno, "b", kRenameNoReplace)), EEXIST);
  EXPECT_EQ(fs_->Rename(kRootIno, "a", kRootIno, "b", kRenameExchange).code(),
            StatusCode::kUnsupported);
  ASSERT_TRUE(fs_->Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  EXPECT_EQ(memory_->contents("b"), "1");
}

TEST_F(FilesystemTest, RenameOfUnsavedFileUploadsFirst) {
  auto created = fs_->Create(kRootIno, "draft", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("text")).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "draft", kRootIno, "final", 0).ok());
  ASSERT_TRUE(fs_->Write(created->fh, 4, Bytes("+more")).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_FALSE(memory_->head("draft").ok());
  EXPECT_EQ(memory_->contents("final"), "text+more");
}

TEST_F(FilesystemTest, RenameDirectoryMovesEveryObject) {
  PutObject("old/", "");
  PutObject("old/a", "A");
  PutObject("old/sub/b", "B");
  uint64_t old_ino = LookupIno(kRootIno, "old");
  ASSERT_TRUE(fs_->Rename(kRootIno, "old", kRootIno, "new", 0).ok());
  EXPECT_EQ(memory_->object_count(), 3u);
  EXPECT_TRUE(memory_->head("new/").ok());
  EXPECT_EQ(memory_->contents("new/a"), "A");
  EXPECT_EQ(memory_->contents("new/sub/b"), "B");
  EXPECT_FALSE(memory_->head("old/a").ok());
  EXPECT_EQ(LookupIno(kRootIno, "new"), old_ino);
  EXPECT_EQ(fs_->Lookup(kRootIno, "old").status().code(), StatusCode::kNotFound);
}

// A directory that lists as empty because its only key can be no name ("dd//x"): rmdir says
// which key keeps it, which `ls` cannot show.
TEST_F(FilesystemTest, RmDirOfADirectoryHoldingOnlyAHiddenKeyNamesIt) {
  PutObject("dd/", "");
  PutObject("dd//x", "x");
  ASSERT_NE(LookupIno(kRootIno, "dd"), 0u);
  const Status removed = fs_->RmDir(kRootIno, "dd");
  EXPECT_EQ(ErrnoFromStatus(removed), ENOTEMPTY);
  EXPECT_NE(removed.message().find("dd//x"), std::string::npos) << removed.ToString();
}

// Directories of old s3fs's kind: an object "dir" without the slash whose mode says directory.
// rmdir removes that object, and mv moves its attributes to a marker of the new name and
// removes it, rather than both answering success and leaving the directory where it was. One
// that holds bytes is another client's data: not removed, not moved.
TEST_F(FilesystemTest, ADirectoryObjectWithoutTheSlashIsRemovedAndMovedWithTheDirectory) {
  const Metadata dir_mode = {{"mode", std::to_string(S_IFDIR | 0750)}};
  PutObject("legacy", "", dir_mode);
  PutObject("legacy2", "", dir_mode);
  PutObject("legacy2/f", "F");
  PutObject("data", "bytes", dir_mode);
  ASSERT_EQ(LookupIno(kRootIno, "legacy") != 0, true);
  ASSERT_TRUE(fs_->RmDir(kRootIno, "legacy").ok());
  EXPECT_FALSE(memory_->head("legacy").ok());
  EXPECT_EQ(fs_->Lookup(kRootIno, "legacy").status().code(), StatusCode::kNotFound);

  ASSERT_NE(LookupIno(kRootIno, "legacy2"), 0u);
  ASSERT_TRUE(fs_->Rename(kRootIno, "legacy2", kRootIno, "moved", 0).ok());
  EXPECT_FALSE(memory_->head("legacy2").ok());
  EXPECT_EQ(memory_->contents("moved/f"), "F");
  auto marker = memory_->head("moved/");
  ASSERT_TRUE(marker.ok()) << marker.status().ToString();
  EXPECT_EQ(marker->metadata["mode"], std::to_string(S_IFDIR | 0750));
  EXPECT_EQ(fs_->Lookup(kRootIno, "legacy2").status().code(), StatusCode::kNotFound);

  ASSERT_NE(LookupIno(kRootIno, "data"), 0u);
  EXPECT_EQ(ErrnoFromStatus(fs_->RmDir(kRootIno, "data")), ENOTEMPTY);
  EXPECT_EQ(ErrnoFromStatus(fs_->Rename(kRootIno, "data", kRootIno, "data2", 0)), ENOTEMPTY);
  EXPECT_EQ(memory_->contents("data"), "bytes");
}

// A directory moved onto one of old s3fs's kind: an empty one goes, its object too, so that
// the name shows the moved directory's attributes; one whose object holds bytes is another
// client's data, and the move fails with ENOTEMPTY.
TEST_F(FilesystemTest, ADirectoryMovedOntoADirectoryObjectWithoutTheSlashReplacesOnlyAnEmptyOne) {
  PutObject("src/", "", {{"mode", std::to_string(S_IFDIR | 0700)}});
  PutObject("src/f", "F");
  PutObject("empty", "", {{"mode", std::to_string(S_IFDIR | 0755)}});
  PutObject("full", "bytes", {{"mode", std::to_string(S_IFDIR | 0755)}});
  ASSERT_NE(LookupIno(kRootIno, "src"), 0u);
  ASSERT_NE(LookupIno(kRootIno, "full"), 0u);
  EXPECT_EQ(ErrnoFromStatus(fs_->Rename(kRootIno, "src", kRootIno, "full", 0)), ENOTEMPTY);
  EXPECT_EQ(memory_->contents("full"), "bytes");
  EXPECT_EQ(memory_->contents("src/f"), "F");
  ASSERT_NE(LookupIno(kRootIno, "empty"), 0u);
  ASSERT_TRUE(fs_->Rename(kRootIno, "src", kRootIno, "empty", 0).ok());
  EXPECT_FALSE(memory_->head("empty").ok());
  EXPECT_EQ(memory_->contents("empty/f"), "F");
  auto moved = fs_->Lookup(kRootIno, "empty");
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->attr.mode, S_IFDIR | 0700);
}

// A large file edited in place and fsynced while open: the upload copies its untouched parts on
// the server, so its staged copy still lacks them and would fetch them from the object under the
// directory's old name. After the directory's rename its handle still reads every byte, and a
// later write and close upload the file under the new name.
TEST_F(FilesystemTest, AnEditedFileOpenInARenamedDirectoryStaysReadableAndUploadable) {
  std::string data((11 << 20), '\0');  // more than two 5 MiB parts
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + (i / 4096) % 26);
  PutObject("d/", "");
  PutObject("d/f", data);
  const uint64_t ino = LookupIno(LookupIno(kRootIno, "d"), "f");
  auto fh = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("X")).ok());
  ASSERT_TRUE(fs_->Fsync(*fh, false).ok());
  data[0] = 'X';
  ASSERT_EQ(memory_->contents("d/f"), data);
  Status moved = fs_->Rename(kRootIno, "d", kRootIno, "e", 0);
  ASSERT_TRUE(moved.ok()) << moved.ToString();
  std::string got(4096, '\0');
  auto n = fs_->Read(*fh, 6 << 20, std::as_writable_bytes(std::span(got.data(), got.size())));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(got == data.substr(6 << 20, 4096));
  ASSERT_TRUE(fs_->Write(*fh, 1, Bytes("Y")).ok());
  Status closed = fs_->Flush(*fh);
  EXPECT_TRUE(closed.ok()) << closed.ToString();
  EXPECT_TRUE(fs_->Release(*fh).ok());
  data[1] = 'Y';
  EXPECT_TRUE(memory_->contents("e/f") == data);
}

TEST_F(FilesystemTest, RenameDirectoryAboveTheLimitIsRefused) {
  options_.max_rename_objects = 5;
  std::vector<std::string> logged;
  options_.log = [&](LogLevel, const std::string& line) { logged.push_back(line); };
  fs_ = NewFilesystem();
  for (int i = 0; i < 6; ++i) PutObject("many/f" + std::to_string(i), "x");
  Status s = fs_->Rename(kRootIno, "many", kRootIno, "moved", 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_rename_objects"), std::string::npos);
  // mv shows only EINVAL: the reason is in the log.
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("raise -o max_rename_objects"), std::string::npos) << logged[0];
  EXPECT_EQ(memory_->object_count(), 6u);
  EXPECT_TRUE(memory_->head("many/f0").ok());
}

TEST_F(FilesystemTest, SymlinkAndReadlink) {
  auto e = fs_->Symlink("../target/file", kRootIno, "link");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(S_ISLNK(e->attr.mode));
  EXPECT_EQ(memory_->contents("link"), "../target/file");
  auto fresh = NewFilesystem();
  auto l = fresh->Lookup(kRootIno, "link");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(S_ISLNK(l->attr.mode));
  auto target = fresh->ReadLink(l->attr.ino);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "../target/file");
}

// Another writer's object whose mode says symbolic link, of any size: none longer than a path
// (4,095 bytes) is fetched, where 100 MB of one took 100 MB of memory and then failed in the
// kernel with EIO and a log line that named nothing.
TEST_F(FilesystemTest, ALinkTargetLongerThanAPathIsRefusedWithoutFetchingIt) {
  PutOptions link;
  link.metadata = {{"mode", std::to_string(S_IFLNK | 0777)}};
  ASSERT_TRUE(memory_->put("long", MemorySource(std::string(5000, 'x')), link).ok());
  ASSERT_TRUE(memory_->put("longest", MemorySource(std::string(4095, 'y')), link).ok());
  const uint64_t ino = LookupIno(kRootIno, "long");
  const uint64_t reads = metrics_.read_requests.load();
  auto refused = fs_->ReadLink(ino);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(ErrnoFromStatus(refused.status()), ENAMETOOLONG) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("long"), std::string::npos);
  EXPECT_EQ(metrics_.read_requests.load(), reads) << "fetched a target no path can be";
  auto longest = fs_->ReadLink(LookupIno(kRootIno, "longest"));
  ASSERT_TRUE(longest.ok()) << longest.status().ToString();
  EXPECT_EQ(*longest, std::string(4095, 'y'));
  // Replaced by a long one after the mount looked it up: the store's readlink asks the size
  // again before it fetches.
  const uint64_t replaced = LookupIno(kRootIno, "longest");
  ASSERT_TRUE(memory_->put("longest", MemorySource(std::string(1 << 20, 'z')), link).ok());
  auto stale = memory_->read_link("longest");
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kNameTooLong) << stale.status().ToString();
  EXPECT_EQ(ErrnoFromStatus(fs_->ReadLink(replaced).status()), ENAMETOOLONG);
}

// mknod of a FIFO, socket or device: a zero-byte object with the type in "mode" (and a
// device's number in "rdev"), seen the same by the next mount.
TEST_F(FilesystemTest, MkNodMakesAnEmptyObjectOfThatType) {
  struct Case {
    const char* name;
    uint32_t mode;
    uint64_t rdev;
  };
  for (const Case& c : {Case{"fifo", S_IFIFO | 0640, 0}, Case{"sock", S_IFSOCK | 0755, 0},
                        Case{"chr", S_IFCHR | 0600, 259}, Case{"blk", S_IFBLK | 0660, 2049}}) {
    SCOPED_TRACE(c.name);
    auto e = fs_->MkNod(kRootIno, c.name, c.mode, c.rdev, Owner{7, 8});
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->attr.mode, c.mode);
    EXPECT_EQ(e->attr.rdev, c.rdev);
    EXPECT_EQ(e->attr.uid, 7u);
    auto head = memory_->head(c.name);
    ASSERT_TRUE(head.ok());
    EXPECT_EQ(head->size, 0u);
    EXPECT_EQ(head->metadata.at("mode"), std::to_string(c.mode));
    EXPECT_EQ(head->metadata.count("rdev"), c.rdev != 0 ? 1u : 0u);
    auto fresh = NewFilesystem()->Lookup(kRootIno, c.name);
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(fresh->attr.mode, c.mode);
    EXPECT_EQ(fresh->attr.rdev, c.rdev);
    EXPECT_EQ(ErrnoFromStatus(fs_->MkNod(kRootIno, c.name, c.mode, 0).status()), EEXIST);
  }
  // A chmod and a rename keep the type and the number.
  const uint64_t ino = LookupIno(kRootIno, "chr");
  FileAttr wanted;
  wanted.mode = 0644;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, wanted, std::nullopt).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "chr", kRootIno, "chr2", 0).ok());
  auto moved = NewFilesystem()->Lookup(kRootIno, "chr2");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->attr.mode, S_IFCHR | 0644u);
  EXPECT_EQ(moved->attr.rdev, 259u);
  // Nothing else is made by mknod here: regular files are creates, directories mkdir.
  EXPECT_EQ(ErrnoFromStatus(fs_->MkNod(kRootIno, "dir", S_IFDIR | 0755, 0).status()), EPERM);
}

TEST_F(FilesystemTest, MkNodOnAStoreWithoutSpecialFilesIsNotPermitted) {
  fs_.reset();
  MemoryStoreOptions o;
  o.special_files = false;
  memory_ = std::make_shared<MemoryStore>(o);
  store_ = std::make_shared<MetricsStore>(memory_, metrics_);
  fs_ = NewFilesystem();
  EXPECT_EQ(ErrnoFromStatus(fs_->MkNod(kRootIno, "fifo", S_IFIFO | 0644, 0).status()), EPERM);
  EXPECT_FALSE(memory_->head("fifo").ok());
}

// A name whose key the store cannot take (1,024 bytes, a directory's marker with its "/")
// fails at once with NameTooLong, with no request; lookups of such names too.
TEST_F(FilesystemTest, KeysOverTheStoresLimitAreNamesTooLong) {
  uint64_t dir = kRootIno;
  for (char c : {'a', 'b', 'c', 'd'}) {
    auto e = fs_->MkDir(dir, std::string(250, c), 0755);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    dir = e->attr.ino;
  }
  // The directory's key is 1,003 bytes: a child name of 20 bytes makes a key of 1,024.
  const std::string fits(20, 'f'), too_long(21, 'l');
  const uint64_t src = WriteFile(kRootIno, "src", "x");
  ASSERT_NE(src, 0u);
  const uint64_t requests =
      metrics_.head_requests.load() + metrics_.put_requests.load() + metrics_.list_requests.load();
  auto name_too_long = [](const Status& s) { return ErrnoFromStatus(s) == ENAMETOOLONG; };
  EXPECT_TRUE(name_too_long(fs_->Lookup(dir, too_long).status()));
  EXPECT_TRUE(name_too_long(fs_->MkDir(dir, fits, 0755).status()));  // "…/" is 1,025 bytes
  EXPECT_TRUE(name_too_long(fs_->Create(dir, too_long, 0644, O_CREAT | O_WRONLY).status()));
  EXPECT_TRUE(name_too_long(fs_->Symlink("t", dir, too_long).status()));
  EXPECT_TRUE(name_too_long(fs_->MkNod(dir, too_long, S_IFIFO | 0644, 0).status()));
  EXPECT_TRUE(name_too_long(fs_->Rename(kRootIno, "src", dir, too_long, 0)));
  EXPECT_EQ(
      metrics_.head_requests.load() + metrics_.put_requests.load() + metrics_.list_requests.load(),
      requests);
  // A directory whose marker or whose files' keys would pass the limit stays where it is.
  auto small = fs_->MkDir(kRootIno, "s", 0755);
  ASSERT_TRUE(small.ok());
  ASSERT_EQ(WriteFile(small->attr.ino, std::string(200, 'x'), "y") != 0, true);
  EXPECT_TRUE(name_too_long(fs_->Rename(kRootIno, "s", dir, fits, 0)));
  EXPECT_TRUE(name_too_long(fs_->Rename(kRootIno, "s", dir, "s", 0)));
  EXPECT_TRUE(memory_->head("s/" + std::string(200, 'x')).ok());
  // At the limit.
  auto created = fs_->Create(dir, fits, 0644, O_CREAT | O_WRONLY);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(fs_->Release(created->fh).ok());
}

TEST_F(FilesystemTest, FailedUploadKeepsDataAndRetries) {
  auto created = fs_->Create(kRootIno, "precious", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("do not lose me")).ok());
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  Status s = fs_->Flush(created->fh);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(ErrnoFromStatus(s), EIO);
  EXPECT_FALSE(memory_->head("precious").ok());
  EXPECT_FALSE(std::filesystem::is_empty(options_.cache_dir));
  auto attr = fs_->GetAttr(created->entry.attr.ino);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->attr.size, 14u);
  ASSERT_TRUE(fs_->Flush(created->fh).ok());
  EXPECT_EQ(memory_->contents("precious"), "do not lose me");
  ASSERT_TRUE(fs_->Release(created->fh).ok());
}

TEST_F(FilesystemTest, FailedReleaseIsRetriedByFlushAll) {
  auto created = fs_->Create(kRootIno, "late", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("eventually")).ok());
  faults_->FailNth(StoreOp::kPut, 1, TransientError("timeout"));
  EXPECT_FALSE(fs_->Release(created->fh).ok());
  EXPECT_FALSE(memory_->head("late").ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("late"), "eventually");
  EXPECT_TRUE(std::filesystem::is_empty(options_.cache_dir));
}

// A mount with neither a write-back window nor held metadata (an sftp:// mount's defaults) has
// no background work until an upload fails: the retry its log promises must still happen, not
// wait for the unmount.
TEST_F(FilesystemTest, FailedReleaseIsRetriedInTheBackgroundWithoutAWindow) {
  fs_.reset();
  options_.writeback = 0;
  options_.metadata_delay = 0;
  options_.writeback_thread = true;
  fs_ = NewFilesystem();
  auto created = fs_->Create(kRootIno, "later", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("not at unmount")).ok());
  faults_->FailAll(StoreOp::kPut, TransientError("connection lost"));
  EXPECT_FALSE(fs_->Release(created->fh).ok());
  faults_->Clear();
  clock_->Advance(std::chrono::seconds(11));
  // The thread looks at the clock at least once a second; wait for its upload, not a time.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!memory_->head("later").ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(memory_->contents("later"), "not at unmount");
}

// The upload of a file written anew whose close failed is tried again later, and by then
// another client may have stored the file anew: that version is the newer (this one's writer was
// told its close failed), and stands. The retry sets this file aside rather than go over it.
TEST_F(FilesystemTest, ARetryAfterAFailedCloseDoesNotGoOverANewerVersion) {
  PutObject("f", "old");
  const uint64_t fh = WriteAnewAndFailTheClose("f", "mine");
  ASSERT_NE(fh, 0u);
  faults_->Clear();
  PutObject("f", "theirs");
  (void)fs_->Release(fh);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "theirs");
  std::ifstream aside(options_.cache_dir + "/unfinished/f", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(aside), std::istreambuf_iterator<char>()),
            "mine");

  // Nobody else stored it: the retry stores it.
  PutObject("g", "old");
  const uint64_t fh2 = WriteAnewAndFailTheClose("g", "mine");
  ASSERT_NE(fh2, 0u);
  faults_->Clear();
  ASSERT_TRUE(fs_->Release(fh2).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("g"), "mine");
}

// A copy kept for a reader shows this mount's version until its last close, though another
// client stored a new one meanwhile; a write through a writer's handle goes onto that copy, an
// edit of the version the server no longer has. Its close fails (EIO) and sets the edit aside,
// and the other client's file stands; an rm of it meanwhile leaves that file too.
TEST_F(FilesystemTest, AnEditOfACopyKeptForAReaderAfterAnotherClientsPutIsSetAside) {
  PutObject("b", "ours");
  const uint64_t ino = LookupIno(kRootIno, "b");
  auto writer = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_TRUE(fs_->Write(*writer, 4, Bytes(" and more")).ok());
  ASSERT_TRUE(fs_->Flush(*writer).ok());
  auto reader = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE(fs_->Release(*writer).ok());  // the copy stays for the reader
  auto again = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE(memory_->put("b", MemorySource("theirs"), PutOptions{}).ok());
  ASSERT_TRUE(fs_->Write(*again, 13, Bytes("!")).ok());
  EXPECT_EQ(ErrnoFromStatus(fs_->Flush(*again)), EIO);
  (void)fs_->Release(*again);
  (void)fs_->Release(*reader);
  EXPECT_EQ(memory_->contents("b"), "theirs");
  EXPECT_EQ(SetAside(options_.cache_dir)["b"], "ours and more!");
}

// A file another client removed while this mount (and the kernel) still knew it: opening it
// for writing is ESTALE, on which the kernel looks the name up again and, for `>>` or `>`
// (O_CREAT), makes the file anew, rather than ENOENT until its cached entry expires.
TEST_F(FilesystemTest, OpeningForWritingAFileRemovedOnTheServerIsStale) {
  PutObject("gone", "old");
  const uint64_t ino = LookupIno(kRootIno, "gone");
  ASSERT_TRUE(memory_->remove("gone").ok());
  auto appended = fs_->Open(ino, O_WRONLY | O_APPEND);
  EXPECT_EQ(ErrnoFromStatus(appended.status()), ESTALE) << appended.status().ToString();
  auto made = fs_->Create(kRootIno, "gone", 0644, O_WRONLY | O_CREAT | O_APPEND);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_TRUE(fs_->Write(made->fh, 0, Bytes("new")).ok());
  ASSERT_TRUE(fs_->Release(made->fh).ok());
  EXPECT_EQ(memory_->contents("gone"), "new");
}

// Two `> a` at once: the second O_TRUNC finds the file emptied already and changes nothing, so
// the first one's release still stores the empty file its close accepted (a crash after it
// must not bring back the old bytes), while the second goes on writing.
TEST_F(FilesystemTest, ASecondTruncatingOpenLeavesTheEmptyingToTheFirst) {
  PutObject("a", "old");
  const uint64_t ino = LookupIno(kRootIno, "a");
  auto first = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE(fs_->Flush(*first).ok());
  ASSERT_TRUE(fs_->Release(*first).ok());
  EXPECT_EQ(memory_->contents("a"), "");
  EXPECT_EQ(fs_->pending_uploads(), 0u);
  ASSERT_TRUE(fs_->Write(*second, 0, Bytes("second")).ok());
  ASSERT_TRUE(fs_->Release(*second).ok());
  EXPECT_EQ(memory_->contents("a"), "second");
}

// `cp` over a file, or `>`, without a write-back window: the close's upload goes over whatever
// the name holds, so the O_TRUNC open asks the server nothing the lookup just answered.
TEST_F(FilesystemTest, ATruncatingOpenOfALookedUpFileCostsNoRequest) {
  PutObject("f", "old");
  const uint64_t ino = LookupIno(kRootIno, "f");
  const uint64_t heads = metrics_.head_requests.load();
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  EXPECT_EQ(metrics_.head_requests.load(), heads);
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("mine")).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("f"), "mine");
}

// The put of a failed close may reach the server after all (a server that stalled carries out
// the request it had): the retry's If-Match then fails on this file's own bytes, which is no
// other client's change. It finds them there, and the file is stored, not set aside.
TEST_F(FilesystemTest, ARetryFindingItsOwnLatePutStoresTheFile) {
  PutObject("f", "old");
  const uint64_t ino = LookupIno(kRootIno, "f");
  const uint64_t fh = WriteAnewAndFailTheClose("f", "mine");
  ASSERT_NE(fh, 0u);
  faults_->Clear();
  auto attr = fs_->GetAttr(ino);
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  // The lost put, carried out late, with the attributes it carried.
  PutObject("f", "mine",
            {{"mode", std::to_string(attr->attr.mode)},
             {"uid", std::to_string(attr->attr.uid)},
             {"gid", std::to_string(attr->attr.gid)}});
  EXPECT_TRUE(fs_->Release(fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "mine");
  EXPECT_FALSE(std::filesystem::exists(options_.cache_dir + "/unfinished/f"));
  EXPECT_EQ(fs_->pending_uploads(), 0u);
}

// A chmod and a setfattr made after a failed close whose put the server carried out late: the
// retry finds the bytes there, with the attributes of that put, and sets this file's since.
TEST_F(FilesystemTest, ARetryFindingItsOwnLatePutKeepsTheChangesMadeSince) {
  PutObject("f", "old");
  const uint64_t ino = LookupIno(kRootIno, "f");
  const uint64_t fh = WriteAnewAndFailTheClose("f", "mine");
  ASSERT_NE(fh, 0u);
  auto attr = fs_->GetAttr(ino);
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  PutObject("f", "mine", OwnFileAttributes(attr->attr.mode & 07777));  // the lost put, late
  FileAttr changed;
  changed.mode = S_IFREG | 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, changed, fh).ok());
  ASSERT_TRUE(fs_->SetXattr(ino, "user.tag", "v", 0).ok());
  faults_->Clear();
  EXPECT_TRUE(fs_->Release(fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "mine");
  auto stored = memory_->head("f");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->metadata["mode"], std::to_string(S_IFREG | 0600));
  EXPECT_EQ(stored->metadata.count("xattr"), 1u);  // user.tag
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// The ETag of a file whose close failed, kept for a retry, is the one its upload will give it:
// asking for it tries the upload, and fails as that does, rather than answering the ETag of the
// version the file replaces.
TEST_F(FilesystemTest, TheEtagOfAFileWhoseCloseFailedIsAskedOfItsUpload) {
  PutObject("f", "old");
  const uint64_t ino = LookupIno(kRootIno, "f");
  const uint64_t fh = WriteAnewAndFailTheClose("f", "mine");
  ASSERT_NE(fh, 0u);
  (void)fs_->Release(fh);
  EXPECT_EQ(ErrnoFromStatus(fs_->GetXattr(ino, "user.etag").status()), EIO);
  faults_->Clear();
  auto etag = fs_->GetXattr(ino, "user.etag");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, "918b81db5e91d031548b963c93845e5b");  // md5("mine")
  EXPECT_EQ(memory_->contents("f"), "mine");
}

// Another client made a directory where the file was (SFTP refuses the upload: "a directory has
// that name"): the close fails with EIO and the file is set aside at once, not retried in vain
// every 10 s until unmount.
TEST_F(FilesystemTest, AFileWhoseNameADirectoryTookIsSetAsideNotRetried) {
  PutObject("k", "old");
  const uint64_t fh = WriteAnewAndFailTheClose(
      "k", "mine", Status(StatusCode::kIsDirectory, "put k: a directory has that name"));
  ASSERT_NE(fh, 0u);
  (void)fs_->Release(fh);
  faults_->Clear();
  EXPECT_EQ(fs_->pending_uploads(), 0u);
  EXPECT_EQ(SetAside(options_.cache_dir)["k"], "mine");
}

TEST_F(FilesystemTest, RecoverStagedUploadsLeftovers) {
  auto created = fs_->Create(kRootIno, "crash", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("survives")).ok());
  faults_->FailAll(StoreOp::kPut, TransientError("down"));
  EXPECT_FALSE(fs_->Flush(created->fh).ok());
  faults_->Clear();
  // A new process over the same cache directory finds and uploads the data.
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  ASSERT_TRUE(next->FlushAll().ok());  // uploaded in the background
  EXPECT_EQ(memory_->contents("crash"), "survives");
}

TEST_F(FilesystemTest, UnlinkWhileOpenDiscardsData) {
  auto created = fs_->Create(kRootIno, "gone", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("x")).ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "gone").ok());
  auto attr = fs_->GetAttr(created->entry.attr.ino);
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  EXPECT_EQ(attr->attr.nlink, 0u);
  EXPECT_EQ(attr->attr.size, 1u);
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_FALSE(memory_->head("gone").ok());
  EXPECT_EQ(fs_->Lookup(kRootIno, "gone").status().code(), StatusCode::kNotFound);
}

// fchmod of a file removed while open changed the object of its old name: the metadata of
// another file made there since.
TEST_F(FilesystemTest, ChmodOfARemovedOpenFileLeavesTheNewFileOfItsNameAlone) {
  PutObject("f", "removed");
  const uint64_t ino = LookupIno(kRootIno, "f");
  auto fh = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "f").ok());
  WriteFile(kRootIno, "f", "the new f");
  const uint64_t sets = metrics_.set_attributes_requests.load();
  FileAttr attr;
  attr.mode = 0600;
  (void)fs_->SetAttr(ino, kSetMode, attr, *fh);
  EXPECT_EQ(metrics_.set_attributes_requests.load(), sets);
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(memory_->contents("f"), "the new f");
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0644));
  EXPECT_TRUE(fs_->Release(*fh).ok());
}

// cp onto a file that was removed while cp had it open: the server-side copy went to the
// removed name and brought it back.
TEST_F(FilesystemTest, CopyFileRangeOntoARemovedFileDoesNotBringItBack) {
  PutObject("src", "source bytes");
  auto src = fs_->Open(LookupIno(kRootIno, "src"), O_RDONLY);
  ASSERT_TRUE(src.ok());
  auto dst = fs_->Create(kRootIno, "dst", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "dst").ok());
  auto copied = fs_->CopyFileRange(*src, 0, dst->fh, 0, 12, 0);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(*copied, 12u);
  EXPECT_TRUE(fs_->Release(dst->fh).ok());
  EXPECT_TRUE(fs_->Release(*src).ok());
  EXPECT_FALSE(memory_->head("dst").ok()) << "the removed file is back";
  EXPECT_EQ(fs_->Lookup(kRootIno, "dst").status().code(), StatusCode::kNotFound);
}

// cp from a file removed while open, after another client stored a new file of its name: the
// copy must not be served by the new file's object (the old handle still reads its own bytes).
TEST_F(FilesystemTest, CopyFileRangeFromARemovedFileDoesNotCopyTheNewFileOfItsName) {
  uint64_t ino = WriteFile(kRootIno, "src", "source bytes");
  auto src = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  // Staged locally so that the open handle keeps the data after the removal.
  ASSERT_TRUE(fs_->Write(*src, 0, Bytes("S")).ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "src").ok());
  PutObject("src", "OTHER bytes!");
  auto dst = fs_->Create(kRootIno, "dst", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(dst.ok());
  auto copied = fs_->CopyFileRange(*src, 0, dst->fh, 0, 12, 0);
  EXPECT_TRUE(fs_->Release(dst->fh).ok());
  EXPECT_TRUE(fs_->Release(*src).ok());
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(*copied, 12u);
  EXPECT_EQ(ReadFile(*fs_, LookupIno(kRootIno, "dst")), "Source bytes")
      << "copy_file_range copied the object now under the removed file's name";
  EXPECT_EQ(memory_->contents("dst"), "Source bytes");
}

// fstat and fchmod on a file removed while open (read only, nothing staged), after another
// client stored a new file of its name: they answered for the new file, or failed.
TEST_F(FilesystemTest, AttributesOfARemovedOpenFileAreNotTheNewFileOfItsName) {
  PutObject("f", "old");
  uint64_t ino = LookupIno(kRootIno, "f");
  auto fh = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Unlink(kRootIno, "f").ok());
  PutObject("f", "a new and longer file");
  const uint64_t sets = metrics_.set_attributes_requests.load();
  auto attr = fs_->GetAttr(ino);
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  EXPECT_EQ(attr->attr.size, 3u) << "fstat shows the new file of that name";
  EXPECT_EQ(attr->attr.nlink, 0u) << "no name leads to it";
  FileAttr wanted;
  wanted.mode = 0600;
  auto changed = fs_->SetAttr(ino, kSetMode, wanted, *fh);
  ASSERT_TRUE(changed.ok()) << "fchmod of an open removed file: " << changed.status().ToString();
  EXPECT_EQ(changed->attr.mode & 07777, 0600u);
  EXPECT_EQ(changed->attr.size, 3u);
  EXPECT_EQ(fs_->GetAttr(ino)->attr.mode & 07777, 0600u);
  EXPECT_EQ(metrics_.set_attributes_requests.load(), sets)
      << "the new file of that name was changed";
  EXPECT_EQ(memory_->contents("f"), "a new and longer file");
  EXPECT_TRUE(fs_->Release(*fh).ok());
}

// As on a local file system: a file removed while still open no longer holds its directory.
TEST_F(FilesystemTest, RmDirOfDirectoryWhoseOnlyFileWasRemovedWhileOpen) {
  auto dir = fs_->MkDir(kRootIno, "d", 0755);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto created = fs_->Create(dir->attr.ino, "f", 0644, O_RDWR | O_CREAT);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("unsaved")).ok());
  ASSERT_TRUE(fs_->Unlink(dir->attr.ino, "f").ok());
  Status removed = fs_->RmDir(kRootIno, "d");
  EXPECT_TRUE(removed.ok()) << removed.ToString();
  EXPECT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_EQ(fs_->Lookup(kRootIno, "d").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(memory_->object_count(), 0u);
}

// A file created and not uploaded yet is in its directory as much as a stored one.
TEST_F(FilesystemTest, RenameOntoADirectoryHoldingAnUnsavedFileIsNotEmpty) {
  ASSERT_TRUE(fs_->MkDir(kRootIno, "a", 0755).ok());
  auto c = fs_->MkDir(kRootIno, "c", 0755);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto created = fs_->Create(c->attr.ino, "f", 0644, O_RDWR | O_CREAT);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(fs_->Rename(kRootIno, "a", kRootIno, "c", 0).code(), StatusCode::kNotEmpty);
  EXPECT_TRUE(memory_->head("a/").ok());
  EXPECT_TRUE(memory_->head("c/").ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_TRUE(memory_->head("c/f").ok());
}

TEST(EffectiveReadBufferTest, RoundsDownToWholeUnitsOnlyWhenLarger) {
  EXPECT_EQ(EffectiveReadBuffer(1 << 20, 0), size_t{1} << 20);
  EXPECT_EQ(EffectiveReadBuffer(1 << 20, 261120), size_t{4 * 261120});
  EXPECT_EQ(EffectiveReadBuffer(8 << 20, 261120), size_t{32 * 261120});
  EXPECT_EQ(EffectiveReadBuffer(4096, 261120), size_t{4096});  // one short request anyway
  EXPECT_EQ(EffectiveReadBuffer(261120, 261120), size_t{261120});
}

TEST_F(FilesystemTest, StatFsReportsLargeConstants) {
  Result<FsStats> stats = fs_->StatFs();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const FsStats& st = *stats;
  EXPECT_EQ(st.block_size, 4096u);
  EXPECT_EQ(st.name_max, 255u);
  EXPECT_GT(st.blocks_free, uint64_t{1} << 40);
}

TEST_F(FilesystemTest, ReadOnlyMountRefusesChanges) {
  options_.read_only = true;
  fs_ = NewFilesystem();
  EXPECT_EQ(ErrnoFromStatus(fs_->Create(kRootIno, "x", 0644, O_WRONLY | O_CREAT).status()), EACCES);
  EXPECT_EQ(ErrnoFromStatus(fs_->MkDir(kRootIno, "d", 0755).status()), EACCES);
}

}  // namespace
}  // namespace objfs

namespace objfs {
namespace {

TEST_F(FilesystemTest, ConcurrentWritersAndReadersOfDistinctFiles) {
  constexpr int kThreads = 8;
  constexpr int kFilesPerThread = 10;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kFilesPerThread; ++i) {
        std::string name =
            std::string("t").append(std::to_string(t)).append("-").append(std::to_string(i));
        std::string data(1000 + 37 * i, static_cast<char>('a' + t));
        auto created = fs_->Create(kRootIno, name, 0644, O_RDWR | O_CREAT);
        if (!created.ok()) {
          ++failures;
          continue;
        }
        if (!fs_->Write(created->fh, 0, Bytes(data)).ok()) ++failures;
        std::string back(data.size(), '\0');
        auto n =
            fs_->Read(created->fh, 0,
                      std::span<std::byte>(reinterpret_cast<std::byte*>(back.data()), back.size()));
        if (!n.ok() || back != data) ++failures;
        if (!fs_->Release(created->fh).ok()) ++failures;
        if (!fs_->ReadDir(kRootIno).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(memory_->object_count(), static_cast<size_t>(kThreads * kFilesPerThread));
  EXPECT_EQ(memory_->contents("t3-4"), std::string(1000 + 37 * 4, 'd'));
  auto list = fs_->ReadDir(kRootIno);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), static_cast<size_t>(kThreads * kFilesPerThread));
}

TEST_F(FilesystemTest, ForgottenInodeIsDroppedAfterItsLastHandle) {
  uint64_t ino = WriteFile(kRootIno, "f", "x");
  auto fh = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  fs_->Forget(ino, 1);
  // Still usable through the open handle.
  EXPECT_TRUE(fs_->GetAttr(ino).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(fs_->GetAttr(ino).status().code(), StatusCode::kNotFound);
  // A new lookup gives the name a (new) inode again.
  EXPECT_TRUE(fs_->Lookup(kRootIno, "f").ok());
}

// Readdirplus hands each entry of a page built earlier to the kernel with a lookup reference.
// An inode number forgotten in between (the kernel's forget of an earlier lookup) was sent as
// it was, its reference lost: the kernel held a number this mount no longer knew, and stat of
// the name failed until the kernel forgot it. It goes as its name only now; a number still
// known gets its reference counted.
TEST_F(FilesystemTest, AListingsEntryWhoseInodeWasForgottenGoesToTheKernelAsItsNameOnly) {
  WriteFile(kRootIno, "kept", "k");
  WriteFile(kRootIno, "forgotten", "f");
  auto looked_up = fs_->Lookup(kRootIno, "forgotten");  // the kernel's reference
  ASSERT_TRUE(looked_up.ok());
  const uint64_t forgotten = looked_up->attr.ino;
  auto listing = fs_->ReadDir(kRootIno);
  ASSERT_TRUE(listing.ok());
  auto entry_of = [&](const std::string& name) {
    auto it = std::find_if(listing->begin(), listing->end(),
                           [&](const DirEntry& e) { return e.name == name; });
    EXPECT_NE(it, listing->end()) << name;
    return it == listing->end() ? DirEntry() : *it;
  };
  const DirEntry kept = entry_of("kept");
  const DirEntry gone = entry_of("forgotten");
  ASSERT_EQ(gone.entry.attr.ino, forgotten);
  ASSERT_FALSE(gone.name_only);

  fs_->Forget(forgotten, 2);  // its reference from the lookup (and more)
  ASSERT_EQ(fs_->GetAttr(forgotten).status().code(), StatusCode::kNotFound);
  const std::optional<std::string> prefix = fs_->ListingPrefix(kRootIno);
  ASSERT_TRUE(prefix.has_value());
  const DirEntry sent = fs_->EntryForKernel(prefix, gone);
  EXPECT_TRUE(sent.name_only) << "the kernel got inode " << sent.entry.attr.ino
                              << ", which this mount no longer knows";
  EXPECT_EQ(sent.name, "forgotten");
  const DirEntry sent_plain = fs_->EntryForKernel(std::nullopt, gone);
  EXPECT_TRUE(sent_plain.name_only);

  const DirEntry handed = fs_->EntryForKernel(prefix, kept);
  ASSERT_FALSE(handed.name_only);
  EXPECT_EQ(handed.entry.attr.ino, kept.entry.attr.ino);
  // The reference the kernel took keeps the number known until the kernel forgets it (with
  // the one the create gave).
  fs_->Forget(handed.entry.attr.ino, 1);
  auto attr = fs_->GetAttr(handed.entry.attr.ino);
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  fs_->Forget(handed.entry.attr.ino, 1);
  EXPECT_EQ(fs_->GetAttr(handed.entry.attr.ino).status().code(), StatusCode::kNotFound);
  // The name itself is found again by a lookup.
  EXPECT_TRUE(fs_->Lookup(kRootIno, "forgotten").ok());
}

// With a write-back window (-o writeback=SECONDS) the upload waits; the test drives the due
// uploads itself (UploadDue after advancing the fake clock) instead of the background thread.
class WritebackTest : public FilesystemTest {
 protected:
  void SetUp() override {
    FilesystemTest::SetUp();
    fs_.reset();
    options_.writeback = 60;
    options_.writeback_thread = false;
    fs_ = NewFilesystem();
  }

  // Creates `name` with `data` and closes it; returns its inode.
  uint64_t WriteAndClose(const std::string& name, std::string_view data) {
    auto created = fs_->Create(kRootIno, name, 0644, O_WRONLY | O_CREAT | O_EXCL);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return 0;
    EXPECT_TRUE(fs_->Write(created->fh, 0, Bytes(data)).ok());
    EXPECT_TRUE(fs_->Flush(created->fh).ok());
    EXPECT_TRUE(fs_->Release(created->fh).ok());
    return created->entry.attr.ino;
  }

  // "f" closed into the window as "first version" on a store of 64-byte objects, then opened
  // with O_TRUNC, "second" written and a write past the limit refused. Returns the handle (0
  // after a failure) and sets `*ino`.
  uint64_t ClosedThenUnfinished(uint64_t* ino) {
    UseMaxObjectSize(64);
    *ino = WriteAndClose("f", "first version");
    auto fh = fs_->Open(*ino, O_WRONLY | O_TRUNC);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    if (!fh.ok()) return 0;
    EXPECT_TRUE(fs_->Write(*fh, 0, Bytes("second")).ok());
    EXPECT_FALSE(fs_->Write(*fh, 6, Bytes(std::string(100, 'x'))).ok());
    return *fh;
  }

  // Opens the stored `name`, writes "changed" at 100 and closes it into the window.
  void ChangeAndClose(const std::string& name) {
    auto fh = fs_->Open(LookupIno(kRootIno, name), O_WRONLY);
    ASSERT_TRUE(fh.ok()) << fh.status().ToString();
    ASSERT_TRUE(fs_->Write(*fh, 100, Bytes("changed")).ok());
    ASSERT_TRUE(fs_->Flush(*fh).ok());
    ASSERT_TRUE(fs_->Release(*fh).ok());
  }

  uint64_t Requests() const {
    return metrics_.put_requests.load() + metrics_.copy_requests.load() +
           metrics_.set_attributes_requests.load() + metrics_.remove_requests.load();
  }
};

// A stored file changed and closed into the window, then renamed: the rename removes the old
// name's object, which the staged file was staged from and still lacks most of. Its bytes are
// fetched before they go; the upload under the new name is whole.
TEST_F(WritebackTest, ARenameBeforeTheUploadKeepsTheBytesOfTheRemovedObject) {
  const std::string stored = std::string(200 << 10, 's');  // more than one read_buffer
  PutObject("a", stored);
  ASSERT_NO_FATAL_FAILURE(ChangeAndClose("a"));
  ASSERT_TRUE(fs_->Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  EXPECT_FALSE(memory_->head("a").ok());
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  std::string expected = stored;
  expected.replace(100, 7, "changed");
  EXPECT_TRUE(memory_->contents("b") == expected);
}

// An edit closed into the window whose stored file another client replaced before its upload:
// the upload sets it aside once, rather than retrying every 10 s until unmount.
TEST_F(WritebackTest, AnEditWhoseStoredFileChangedIsSetAsideByItsUpload) {
  PutObject("a", std::string(200 << 10, 's'));  // more than one read_buffer
  const uint64_t ino = LookupIno(kRootIno, "a");
  ASSERT_NO_FATAL_FAILURE(ChangeAndClose("a"));
  ASSERT_TRUE(memory_->put("a", MemorySource("theirs"), PutOptions{}).ok());
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("a"), "theirs");
  EXPECT_EQ(fs_->pending_uploads(), 0u);
  std::map<std::string, std::string> aside = SetAside(options_.cache_dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside["a"].substr(100, 7), "changed");
  EXPECT_EQ(ReadFile(*fs_, ino), "theirs");
}

// The same at unmount: the edit is set aside there, and the unmount succeeds rather than fail
// and leave it to the next mount.
TEST_F(WritebackTest, AnEditWhoseStoredFileChangedIsSetAsideAtUnmount) {
  PutObject("a", std::string(200 << 10, 's'));
  ASSERT_NO_FATAL_FAILURE(ChangeAndClose("a"));
  ASSERT_TRUE(memory_->put("a", MemorySource("theirs"), PutOptions{}).ok());
  const Status unmounted = fs_->FlushAll();
  EXPECT_TRUE(unmounted.ok()) << unmounted.ToString();
  EXPECT_EQ(memory_->contents("a"), "theirs");
  std::map<std::string, std::string> aside = SetAside(options_.cache_dir);
  ASSERT_EQ(aside.size(), 1u);
  EXPECT_EQ(aside["a"].substr(100, 7), "changed");
}

// An append accepted into the window, then a crash, and another client replaced the file before
// the next mount: the append cannot be completed and is set aside, and the log names the ranges
// it holds to the byte (from its record), not as the file system reports them, rounded to its
// blocks (or, for a file copied whole as here, all of it), which names zeros as written bytes.
TEST_F(WritebackTest, ASetAsideSparseFileNamesItsRangesToTheByte) {
  const std::string stored(200 << 10, 's');
  PutObject("a", stored);
  auto fh = fs_->Open(LookupIno(kRootIno, "a"), O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, stored.size(), Bytes("appended")).ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  const std::string image = CrashImage();
  ASSERT_TRUE(memory_->put("a", MemorySource("theirs"), PutOptions{}).ok());
  const std::vector<std::string> log = RecoverImage(image);
  const auto line = std::find_if(log.begin(), log.end(), [](const std::string& l) {
    return l.find("cannot be completed") != std::string::npos;
  });
  ASSERT_NE(line, log.end()) << ::testing::PrintToString(log);
  const std::string range =
      "[" + std::to_string(stored.size()) + ", " + std::to_string(stored.size() + 8) + ")";
  EXPECT_NE(line->find("what was written or fetched by its close is at " + range + ", the rest"),
            std::string::npos)
      << *line;
  EXPECT_EQ(memory_->contents("a"), "theirs");
}

TEST_F(WritebackTest, RsyncPatternCostsOnePutOfTheFinalName) {
  // rsync: write a temporary file, close it, set its times and mode, rename it into place.
  uint64_t before = Requests();
  uint64_t ino = WriteAndClose(".f.XXXXXX", "content of f");
  EXPECT_FALSE(memory_->head(".f.XXXXXX").ok());
  FileAttr attr;
  attr.mtime_ns = int64_t{1500000000} * 1000000000;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMtime, attr, std::nullopt).ok());
  attr.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, ".f.XXXXXX", kRootIno, "f", 0).ok());
  EXPECT_EQ(Requests(), before);  // nothing reached the store yet
  // The file is visible under its new name with its new attributes, and readable.
  auto e = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.size, 12u);
  EXPECT_EQ(e->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(e->attr.mtime_ns, attr.mtime_ns);
  EXPECT_EQ(ReadFile(*fs_, e->attr.ino), "content of f");
  EXPECT_EQ(fs_->Lookup(kRootIno, ".f.XXXXXX").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fs_->pending_uploads(), 1u);

  ASSERT_TRUE(fs_->UploadDue().ok());  // not due yet
  EXPECT_EQ(Requests(), before);
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(metrics_.put_requests.load() + metrics_.copy_requests.load(), before + 1);
  EXPECT_EQ(memory_->contents("f"), "content of f");
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0600));
  EXPECT_EQ(ParseMtime(head->metadata.at("mtime")), attr.mtime_ns);
  EXPECT_FALSE(memory_->head(".f.XXXXXX").ok());
  EXPECT_EQ(fs_->pending_uploads(), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(options_.cache_dir));
}

// A large file written from empty streams its parts under the name it had; renamed in the
// window (rsync's temporary file), another file then takes that name before the upload. The
// streamed upload must not complete over that file, nor remove it when it moves to the new name.
TEST_F(WritebackTest, AStreamedFileRenamedInTheWindowLeavesTheFileNowAtItsOldName) {
  PutObject("c", "the file that moved to .t");
  const std::string big = std::string((5 << 20) + (1 << 20), 'b');  // past one 5 MiB part
  WriteAndClose(".t", big);
  ASSERT_TRUE(fs_->Rename(kRootIno, ".t", kRootIno, "b", 0).ok());
  Status moved = fs_->Rename(kRootIno, "c", kRootIno, ".t", 0);
  ASSERT_TRUE(moved.ok()) << moved.ToString();
  ASSERT_EQ(memory_->contents(".t"), "the file that moved to .t");
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_TRUE(memory_->contents("b") == big);
  ASSERT_TRUE(memory_->head(".t").ok()) << ".t was removed by the upload of b";
  EXPECT_EQ(memory_->contents(".t"), "the file that moved to .t");
}

// A large file streams its parts while written; before the upload completes, its mtime is set
// to a time after the stream started (touch -d, a clock ahead of this one). The object's
// Last-Modified does not stand for that mtime: the object carries it.
TEST_F(WritebackTest, AStreamedFileKeepsAnMtimeSetAfterItsStreamStarted) {
  const std::string big = std::string((5 << 20) + (1 << 20), 'm');  // past one 5 MiB part
  const uint64_t ino = WriteAndClose("m", big);
  FileAttr attr;
  attr.mtime_ns = (std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count() +
                   86400) *
                  int64_t{1000000000};  // tomorrow, whole seconds
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMtime, attr, std::nullopt).ok());
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  ASSERT_TRUE(memory_->contents("m") == big);
  auto head = memory_->head("m");
  ASSERT_TRUE(head.ok());
  ASSERT_TRUE(head->metadata.count("mtime")) << "the set mtime is not stored";
  EXPECT_EQ(ParseMtime(head->metadata.at("mtime")), attr.mtime_ns);
}

TEST_F(WritebackTest, RenameOfAnEditedStoredFileRemovesTheOldName) {
  PutObject("old", "v1");
  uint64_t ino = LookupIno(kRootIno, "old");
  ASSERT_NO_FATAL_FAILURE(Overwrite(ino, "v2"));
  EXPECT_EQ(memory_->contents("old"), "v1");
  ASSERT_TRUE(fs_->Rename(kRootIno, "old", kRootIno, "new", 0).ok());
  EXPECT_FALSE(memory_->head("old").ok());
  EXPECT_FALSE(memory_->head("new").ok());
  ASSERT_TRUE(fs_->FlushAll().ok());  // what unmount does
  EXPECT_EQ(memory_->contents("new"), "v2");
  EXPECT_FALSE(memory_->head("old").ok());
}

TEST_F(WritebackTest, RenameNoReplaceSeesAPendingTarget) {
  WriteAndClose("a", "1");
  WriteAndClose("b", "2");
  EXPECT_EQ(fs_->Rename(kRootIno, "a", kRootIno, "b", kRenameNoReplace).code(),
            StatusCode::kAlreadyExists);
  // A plain rename replaces the pending target: only "b" with a's data is uploaded.
  ASSERT_TRUE(fs_->Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("b"), "1");
  EXPECT_FALSE(memory_->head("a").ok());
  EXPECT_EQ(metrics_.put_requests.load(), 1u);
}

TEST_F(WritebackTest, FsyncUploadsAtOnce) {
  auto created = fs_->Create(kRootIno, "synced", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("durable")).ok());
  ASSERT_TRUE(fs_->Fsync(created->fh, false).ok());
  EXPECT_EQ(memory_->contents("synced"), "durable");
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_EQ(fs_->pending_uploads(), 0u);
}

TEST_F(WritebackTest, ReadingTheEtagUploadsThePendingFile) {
  uint64_t ino = WriteAndClose("tagged", "hello");
  auto etag = fs_->GetXattr(ino, "user.etag");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, "5d41402abc4b2a76b9719d911017c592");  // md5("hello")
  EXPECT_EQ(memory_->contents("tagged"), "hello");
}

TEST_F(WritebackTest, FailedUploadStaysStagedAndIsRetried) {
  WriteAndClose("precious", "do not lose me");
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  clock_->Advance(std::chrono::seconds(61));
  EXPECT_FALSE(fs_->UploadDue().ok());
  EXPECT_FALSE(memory_->head("precious").ok());
  EXPECT_FALSE(std::filesystem::is_empty(options_.cache_dir));
  EXPECT_EQ(fs_->pending_uploads(), 1u);  // scheduled again
  auto e = fs_->Lookup(kRootIno, "precious");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(ReadFile(*fs_, e->attr.ino), "do not lose me");
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("precious"), "do not lose me");
}

TEST_F(WritebackTest, ACrashInTheWindowIsUploadedUnderTheFinalNameByTheNextMount) {
  uint64_t ino = WriteAndClose(".tmp", "survives");
  FileAttr attr;
  attr.mode = 0640;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, ".tmp", kRootIno, "final", 0).ok());
  // No upload happened; a new process over the same cache directory finds the data.
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  ASSERT_TRUE(next->UploadDue().ok());  // due at once, in the background
  EXPECT_EQ(memory_->contents("final"), "survives");
  auto head = memory_->head("final");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0640));
  EXPECT_FALSE(memory_->head(".tmp").ok());
}

TEST_F(WritebackTest, UnlinkInTheWindowUploadsNothing) {
  WriteAndClose("scratch", "temporary");
  ASSERT_TRUE(fs_->Unlink(kRootIno, "scratch").ok());
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(metrics_.put_requests.load(), 0u);
  EXPECT_FALSE(memory_->head("scratch").ok());
  EXPECT_TRUE(std::filesystem::is_empty(options_.cache_dir));
}

// A file created here and removed before its upload put nothing on the server: a file another
// client made of its name meanwhile is that client's, and the rm leaves it, whether the create
// was exclusive or truncating.
TEST_F(WritebackTest, AnUnlinkInTheWindowLeavesAFileAnotherClientMadeOfItsName) {
  WriteAndClose("exclusive", "mine");
  WriteFile(kRootIno, "truncating", "mine");
  for (const char* name : {"exclusive", "truncating"}) {
    PutObject(name, "theirs");
    ASSERT_TRUE(fs_->Unlink(kRootIno, name).ok());
  }
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(metrics_.put_requests.load() + metrics_.remove_requests.load(), 0u);
  for (const char* name : {"exclusive", "truncating"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(memory_->contents(name), "theirs");
    EXPECT_EQ(ReadFile(*fs_, LookupIno(kRootIno, name)), "theirs");
  }
}

// An edit removed or renamed before its upload goes with the version it was made to, and only
// that one, as its upload would have replaced only that one: another client's version stored
// since stays at the name, as though it came after the rm or mv. The renamed edit is stored
// under its new name.
TEST_F(WritebackTest, AnEditRemovedOrRenamedInTheWindowLeavesAVersionAnotherClientStoredSince) {
  for (const char* name : {"removed", "renamed", "removed alone", "renamed alone"}) {
    PutObject(name, "one\n");
    auto fh = fs_->Open(LookupIno(kRootIno, name), O_RDWR | O_APPEND);
    ASSERT_TRUE(fh.ok()) << fh.status().ToString();
    ASSERT_TRUE(fs_->Write(*fh, 4, Bytes("mine\n")).ok());
    std::string read(9, '\0');  // all of it here: the rename needs nothing more of it
    ASSERT_TRUE(fs_->Read(*fh, 0, std::as_writable_bytes(std::span(read))).ok());
    ASSERT_TRUE(fs_->Release(*fh).ok());
  }
  PutObject("removed", "one\ntheirs\n");
  PutObject("renamed", "one\ntheirs\n");
  ASSERT_TRUE(fs_->Unlink(kRootIno, "removed").ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "removed alone").ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "renamed", kRootIno, "moved", 0).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "renamed alone", kRootIno, "moved alone", 0).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("removed"), "one\ntheirs\n");
  EXPECT_EQ(memory_->contents("renamed"), "one\ntheirs\n");
  EXPECT_EQ(memory_->contents("moved"), "one\nmine\n");
  // With no other client, the version the edit was made to goes.
  EXPECT_EQ(memory_->head("removed alone").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(memory_->head("renamed alone").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(memory_->contents("moved alone"), "one\nmine\n");
  EXPECT_EQ(ReadFile(*fs_, LookupIno(kRootIno, "removed")), "one\ntheirs\n");
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// An edit moved away and back before its upload: the first mv removed the version it was made
// to, so the upload under the old name again asks nothing of that version, and is stored.
TEST_F(WritebackTest, AnEditMovedAwayAndBackIsStoredUnderItsName) {
  PutObject("log", "one\n");
  auto fh = fs_->Open(LookupIno(kRootIno, "log"), O_RDWR | O_APPEND);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 4, Bytes("mine\n")).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "log", kRootIno, "log.1", 0).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "log.1", kRootIno, "log", 0).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("log"), "one\nmine\n");
  EXPECT_EQ(memory_->head("log.1").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// Whether thread `tid` of this process sleeps in futex(2), as on a mutex another thread holds.
bool SleepsOnAFutex(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;  // the file says "running" while the thread runs
  return static_cast<bool>(in >> nr) && nr == SYS_futex;
}

// An rm racing the upload of the same file: the store's next PUT starts Unlink(kRootIno, name)
// on a thread of its own and goes on only once that thread is as far as it gets while the PUT is
// in flight: done, or asleep on a lock (bounded: 10 s).
class UnlinkDuringPut {
 public:
  UnlinkDuringPut(Filesystem& fs, FaultInjectingStore& faults, const std::string& name) {
    faults.BeforeNth(StoreOp::kPut, 1, [this, &fs, name] {
      thread_ = std::thread([this, &fs, name] {
        tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
        status_ = fs.Unlink(kRootIno, name);
        done_ = true;
        cv_.notify_all();
      });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      std::unique_lock<std::mutex> lock(mu_);
      while (!done_ && !(tid_ != 0 && SleepsOnAFutex(tid_)) &&
             std::chrono::steady_clock::now() < deadline) {
        cv_.wait_for(lock, std::chrono::milliseconds(1));
      }
    });
  }
  ~UnlinkDuringPut() {
    if (thread_.joinable()) thread_.join();
  }
  UnlinkDuringPut(const UnlinkDuringPut&) = delete;
  UnlinkDuringPut& operator=(const UnlinkDuringPut&) = delete;

  // What Unlink returned, once it has; NotFound if the PUT never came.
  Status Join() {
    if (!thread_.joinable()) return NotFoundError("no upload started the unlink");
    thread_.join();
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> done_{false};
  Status status_;
};

// rm of a file whose upload was in flight once removed the object and returned, and the PUT,
// landing after the DELETE, put the removed file back on the server.
TEST_F(WritebackTest, AnUnlinkDuringTheUploadIsNotUndoneByIt) {
  PutObject("f", "stored");
  ASSERT_NO_FATAL_FAILURE(Overwrite(LookupIno(kRootIno, "f"), "closed into the window"));
  UnlinkDuringPut unlink(*fs_, *faults_, "f");
  clock_->Advance(std::chrono::seconds(61));
  EXPECT_TRUE(fs_->UploadDue().ok());
  Status unlinked = unlink.Join();
  EXPECT_TRUE(unlinked.ok()) << unlinked.ToString();
  EXPECT_EQ(faults_->calls(StoreOp::kPut), 1);
  EXPECT_FALSE(memory_->head("f").ok()) << "the removed file is back: " << memory_->contents("f");
  EXPECT_EQ(fs_->Lookup(kRootIno, "f").status().code(), StatusCode::kNotFound);
  // Nor does a crash now bring it back.
  RecoverImage(CrashImage());
  EXPECT_FALSE(memory_->head("f").ok());
}

// The same for a new file: the unlink waited for the upload, then found no staged data and no
// object it had looked for before, and failed with ENOENT, leaving the uploaded file there.
TEST_F(WritebackTest, AnUnlinkDuringTheFirstUploadOfANewFileRemovesIt) {
  WriteAndClose("new", "never stored before");
  UnlinkDuringPut unlink(*fs_, *faults_, "new");
  clock_->Advance(std::chrono::seconds(61));
  EXPECT_TRUE(fs_->UploadDue().ok());
  Status unlinked = unlink.Join();
  EXPECT_TRUE(unlinked.ok()) << unlinked.ToString();
  EXPECT_EQ(faults_->calls(StoreOp::kPut), 1);
  EXPECT_FALSE(memory_->head("new").ok()) << "the removed file is still there";
  EXPECT_EQ(fs_->Lookup(kRootIno, "new").status().code(), StatusCode::kNotFound);
}

// A crash between the DELETE and the forgetting of the staged data once left the closed
// version's crash record, and the next mount uploaded the removed file again.
TEST_F(WritebackTest, ACrashDuringAnUnlinkDoesNotBringTheFileBack) {
  PutObject("f", "stored");
  ASSERT_NO_FATAL_FAILURE(Overwrite(LookupIno(kRootIno, "f"), "closed into the window"));
  std::string image;
  faults_->BeforeNth(StoreOp::kRemove, 1, [&] { image = CrashImage(); });
  ASSERT_TRUE(fs_->Unlink(kRootIno, "f").ok());
  ASSERT_FALSE(image.empty());
  RecoverImage(image);
  EXPECT_FALSE(memory_->head("f").ok()) << "the removed file is back: " << memory_->contents("f");
}

// An unlink the store refuses leaves the file as it was, closed version and crash record too.
TEST_F(WritebackTest, AFailedUnlinkKeepsWhatCloseAccepted) {
  PutObject("f", "stored");
  ASSERT_NO_FATAL_FAILURE(Overwrite(LookupIno(kRootIno, "f"), "closed into the window"));
  faults_->FailNth(StoreOp::kRemove, 1, TransientError("503 SlowDown"));
  EXPECT_FALSE(fs_->Unlink(kRootIno, "f").ok());
  EXPECT_EQ(ReadFile(*fs_, LookupIno(kRootIno, "f")), "closed into the window");
  RecoverImage(CrashImage());  // a crash now uploads it
  EXPECT_EQ(memory_->contents("f"), "closed into the window");
}

TEST_F(WritebackTest, AFileOpenAgainIsUploadedAfterItsLastClose) {
  uint64_t ino = WriteAndClose("busy", "one");
  auto fh = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok());
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_FALSE(memory_->head("busy").ok());  // still open: not uploaded half-written
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes(" two")).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("busy"), "one two");
}

TEST_F(WritebackTest, AFailedRenameKeepsThePendingTarget) {
  PutObject("a", "stored a");
  uint64_t a = LookupIno(kRootIno, "a");
  ASSERT_NO_FATAL_FAILURE(Overwrite(a, "new a"));
  WriteAndClose("b", "pending b");
  // Renaming the edited "a" over "b" must remove the stored "a": make that fail.
  faults_->FailNth(StoreOp::kRemove, 1, TransientError("503 SlowDown"));
  EXPECT_FALSE(fs_->Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  auto b = fs_->Lookup(kRootIno, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(ReadFile(*fs_, b->attr.ino), "pending b");
  // And a crash now still uploads both under their own names.
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  ASSERT_TRUE(next->UploadDue().ok());  // due at once, in the background
  EXPECT_EQ(memory_->contents("b"), "pending b");
  EXPECT_EQ(memory_->contents("a"), "new a");
}

TEST_F(WritebackTest, AReplacedTargetStillOpenIsNotRecoveredOverTheNewFile) {
  WriteAndClose("target", "old target");
  uint64_t target = LookupIno(kRootIno, "target");
  auto reader = fs_->Open(target, O_RDONLY);  // keeps the replaced data alive
  ASSERT_TRUE(reader.ok());
  WriteAndClose("source", "new content");
  ASSERT_TRUE(fs_->Rename(kRootIno, "source", kRootIno, "target", 0).ok());
  auto next = NewFilesystem();  // a crash now
  ASSERT_TRUE(next->RecoverStaged().ok());
  ASSERT_TRUE(next->UploadDue().ok());  // due at once, in the background
  EXPECT_EQ(memory_->contents("target"), "new content");
  ASSERT_TRUE(fs_->Release(*reader).ok());
}

// A stored file renamed while being written (no close since): the rename removes its old name
// from the store, so a crash must find it under the new one. Renamed only here, it would be
// under neither: its stored version gone, and its data never accepted (set aside).
TEST_F(WritebackTest, AFileRenamedWhileBeingWrittenSurvivesACrashUnderItsNewName) {
  uint64_t ino = WriteAndClose("c", "accepted");
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  ASSERT_EQ(memory_->contents("c"), "accepted");
  auto fh = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("being written")).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "c", kRootIno, "d", 0).ok());
  RecoverImage(CrashImage());
  EXPECT_FALSE(memory_->head("c").ok());
  ASSERT_TRUE(memory_->head("d").ok()) << "the file is under neither name after the crash";
  const std::string content = memory_->contents("d");
  EXPECT_TRUE(content == "accepted" || content == "being written") << content;
  EXPECT_TRUE(fs_->Release(*fh).ok());
}

TEST_F(WritebackTest, AChmodInTheWindowSurvivesACrash) {
  uint64_t ino = WriteAndClose("f", "data");
  FileAttr attr;
  attr.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  ASSERT_TRUE(next->UploadDue().ok());  // due at once, in the background
  auto head = memory_->head("f");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0600));
}

// ---- Recovery in the background: accepted files are served from cache_dir before upload ----

class BackgroundRecoveryTest : public WritebackTest {
 protected:
  // What the next mount logs; its write-back thread may log too.
  struct Log {
    std::mutex mu;
    std::vector<std::string> lines;
    bool Has(const std::string& text) {
      std::lock_guard<std::mutex> lock(mu);
      return std::any_of(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(text) != std::string::npos; });
    }
  };

  // Leaves "a" and "d/b" closed in the write-back window, then "crashes": the image of
  // cache_dir then.
  // "a" is created with O_EXCL: its recovered upload replaces no file of that name; with
  // `a_replaces`, it is the stored "the old a" opened with O_TRUNC: it replaces that.
  std::string CrashWithTwoFiles(bool a_replaces = false) {
    if (a_replaces) PutObject("a", "the old a");  // what the recovered "a" replaces
    EXPECT_TRUE(fs_->MkDir(kRootIno, "d", 0755).ok());
    if (a_replaces) {
      auto fh = fs_->Open(LookupIno(kRootIno, "a"), O_WRONLY | O_TRUNC);
      EXPECT_TRUE(fh.ok()) << fh.status().ToString();
      EXPECT_TRUE(fs_->Write(*fh, 0, Bytes("recovered a")).ok());
      EXPECT_TRUE(fs_->Release(*fh).ok());
    } else {
      WriteAndClose("a", "recovered a");
    }
    auto d = fs_->Lookup(kRootIno, "d");
    EXPECT_TRUE(d.ok());
    auto created = fs_->Create(d->attr.ino, "b", 0640, O_WRONLY | O_CREAT | O_EXCL);
    EXPECT_TRUE(created.ok());
    EXPECT_TRUE(fs_->Write(created->fh, 0, Bytes("recovered b!")).ok());
    EXPECT_TRUE(fs_->Release(created->fh).ok());
    return CrashImage();
  }

  // "log" ("one\n" in the store) appended "mine\n" to and closed, and read whole (so that its
  // staged copy holds every byte, and its record names the version it was made to); then the
  // crash. Returns the image.
  std::string CrashWithAWholeEdit() {
    PutObject("log", "one\n");
    const uint64_t ino = LookupIno(kRootIno, "log");
    auto fh = fs_->Open(ino, O_RDWR | O_APPEND);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    EXPECT_TRUE(fs_->Write(*fh, 4, Bytes("mine\n")).ok());
    EXPECT_EQ(ReadFile(*fs_, ino), "one\nmine\n");
    EXPECT_TRUE(fs_->Release(*fh).ok());
    return CrashImage();
  }

  // `key` ("one\n" in the store) appended "mine\n" to and closed, never read (so that its
  // staged copy is sparse: the edit's bytes only); then the crash. Returns the image, and the
  // metadata its record gives the upload in *metadata.
  // With `mtime_ns`, the file's mtime is set to it before the close (touch -d).
  std::string CrashWithASparseEdit(const std::string& key, Metadata* metadata,
                                   int64_t mtime_ns = 0) {
    PutObject(key, "one\n");
    const uint64_t ino = LookupIno(kRootIno, key);
    auto fh = fs_->Open(ino, O_WRONLY | O_APPEND);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    EXPECT_TRUE(fs_->Write(*fh, 4, Bytes("mine\n")).ok());
    if (mtime_ns != 0) {
      FileAttr attr;
      attr.mtime_ns = mtime_ns;
      EXPECT_TRUE(fs_->SetAttr(ino, kSetMtime, attr, *fh).ok());
    }
    EXPECT_TRUE(fs_->Release(*fh).ok());
    const std::string image = CrashImage();
    auto staging = StagingArea::Open(image);
    EXPECT_TRUE(staging.ok());
    if (!staging.ok()) return image;
    auto left = (*staging)->Leftovers();
    EXPECT_TRUE(left.ok());
    if (!left.ok()) return image;
    for (const StagedLeftover& l : *left) {
      if (l.key != key) continue;
      EXPECT_EQ(l.base_key, key);  // sparse
      *metadata = l.metadata;
    }
    return image;
  }

  // The next mount over `image`, recovered, with write-back window `writeback`.
  std::unique_ptr<Filesystem> NextMount(const std::string& image, double writeback, bool thread,
                                        Log* log) {
    FilesystemOptions o = options_;
    o.cache_dir = image;
    o.writeback = writeback;
    o.writeback_thread = thread;
    o.log = [log](LogLevel, const std::string& line) {
      std::lock_guard<std::mutex> lock(log->mu);
      log->lines.push_back(line);
    };
    auto fs = Filesystem::Create(store_, o, &metrics_, clock_);
    EXPECT_TRUE(fs.ok()) << fs.status().ToString();
    if (!fs.ok()) return nullptr;
    Status s = (*fs)->RecoverStaged();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return std::move(fs).value();
  }

  static std::set<std::string> Names(Filesystem& fs, uint64_t dir) {
    std::set<std::string> names;
    auto entries = fs.ReadDir(dir);
    EXPECT_TRUE(entries.ok()) << entries.status().ToString();
    if (entries.ok()) {
      for (const DirEntry& e : *entries) names.insert(e.name);
    }
    return names;
  }

  static size_t StagedDataFiles(const std::string& dir) {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      n += e.path().extension() == ".data" ? 1 : 0;
    }
    return n;
  }
};

TEST_F(BackgroundRecoveryTest, RecoveredFilesAreServedFromStagingBeforeTheirUpload) {
  const std::string image = CrashWithTwoFiles();
  // The store takes no upload: recovery must not wait for one.
  faults_->FailAll(StoreOp::kPut, TransientError("503 SlowDown"));
  Log log;
  auto next = NextMount(image, /*writeback=*/0, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->recovering_files(), 2u);
  EXPECT_FALSE(memory_->head("a").ok());
  EXPECT_FALSE(memory_->head("d/b").ok());

  auto a = next->Lookup(kRootIno, "a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->attr.size, 11u);
  EXPECT_EQ(ReadFile(*next, a->attr.ino), "recovered a");
  auto d = next->Lookup(kRootIno, "d");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto b = next->Lookup(d->attr.ino, "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->attr.mode, static_cast<uint32_t>(S_IFREG | 0640));  // from its record
  EXPECT_EQ(b->attr.uid, 1000u);
  EXPECT_EQ(ReadFile(*next, b->attr.ino), "recovered b!");
  auto attr = next->GetAttr(b->attr.ino);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->attr.size, 12u);
  EXPECT_EQ(Names(*next, kRootIno), (std::set<std::string>{"a", "d"}));
  EXPECT_EQ(Names(*next, d->attr.ino), (std::set<std::string>{"b"}));

  // The background upload fails: both stay staged and are retried.
  EXPECT_FALSE(next->UploadDue().ok());
  EXPECT_EQ(next->pending_uploads(), 2u);
  EXPECT_EQ(ReadFile(*next, a->attr.ino), "recovered a");
  EXPECT_FALSE(log.Has("recovered 2 files"));

  faults_->Clear();
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(next->UploadDue().ok());
  EXPECT_EQ(memory_->contents("a"), "recovered a");
  EXPECT_EQ(memory_->contents("d/b"), "recovered b!");
  auto head = memory_->head("d/b");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata.at("mode"), std::to_string(S_IFREG | 0640));
  EXPECT_EQ(next->recovering_files(), 0u);
  EXPECT_TRUE(log.Has("recovered 2 files (23 bytes) left by an earlier mount"));
  EXPECT_EQ(StagedDataFiles(image), 0u);
}

TEST_F(BackgroundRecoveryTest, TheWriteBackThreadUploadsThemWithoutAWindow) {
  const std::string image = CrashWithTwoFiles();
  Log log;
  auto next = NextMount(image, /*writeback=*/0, /*thread=*/true, &log);
  ASSERT_NE(next, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!log.Has("recovered 2 files") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(log.Has("recovered 2 files (23 bytes) left by an earlier mount"));
  EXPECT_EQ(memory_->contents("a"), "recovered a");
  EXPECT_EQ(memory_->contents("d/b"), "recovered b!");
}

TEST_F(BackgroundRecoveryTest, UnmountUploadsWhatIsStillPending) {
  const std::string image = CrashWithTwoFiles();
  faults_->FailAll(StoreOp::kPut, TransientError("503 SlowDown"));
  Log log;
  auto next = NextMount(image, /*writeback=*/0, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(memory_->head("a").ok());
  faults_->Clear();
  ASSERT_TRUE(next->FlushAll().ok());
  EXPECT_EQ(memory_->contents("a"), "recovered a");
  EXPECT_EQ(memory_->contents("d/b"), "recovered b!");
  EXPECT_EQ(StagedDataFiles(image), 0u);
  // The log says so at unmount too.
  EXPECT_TRUE(log.Has("recovered 2 files (23 bytes) left by an earlier mount"));
}

// The line saying that the files an earlier mount left are in the store came as soon as the
// write-back thread had uploaded the first one taken over, before the next one was: "recovered
// 1 files", and later again "recovered 3 files". It comes once, when all of them are done,
// whether uploaded at the first try, after a failed one, or removed before their upload.
TEST_F(BackgroundRecoveryTest, TheRecoveredLineComesOnceWhenAllAreDone) {
  for (const char* name : {"a1", "b2", "c3", "d4"}) WriteAndClose(name, std::string(name) + "!");
  const std::string image = CrashImage();
  // b2's staged data is a symbolic link (to a copy of it): it is not taken over, and its
  // log line is the moment between a1's adoption and c3's.
  const std::string elsewhere = cache_dir_ + "/elsewhere";
  for (const auto& e : std::filesystem::directory_iterator(image)) {
    if (e.path().extension() != ".data") continue;
    std::ifstream in(e.path(), std::ios::binary);
    if (std::string(std::istreambuf_iterator<char>(in), {}) != "b2!") continue;
    std::filesystem::copy_file(e.path(), elsewhere);
    std::filesystem::remove(e.path());
    std::filesystem::create_symlink(elsewhere, e.path());
  }
  ASSERT_TRUE(std::filesystem::exists(elsewhere));

  FilesystemOptions o = options_;
  o.cache_dir = image;
  o.writeback = 0;
  o.writeback_thread = false;
  std::vector<std::string> lines;
  Filesystem* next = nullptr;
  o.log = [&](LogLevel, const std::string& line) {
    lines.push_back(line);
    // What the write-back thread may do at that moment: upload what is due.
    if (line.find("staged data of b2 stays in") != std::string::npos) {
      EXPECT_TRUE(next->UploadDue().ok());
    }
  };
  auto fs = Filesystem::Create(store_, o, &metrics_, clock_);
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  next = fs->get();
  ASSERT_TRUE(next->RecoverStaged().ok());
  EXPECT_EQ(memory_->contents("a1"), "a1!");
  EXPECT_EQ(next->recovering_files(), 2u);

  ASSERT_TRUE(next->Unlink(kRootIno, "d4").ok());  // before its upload
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  EXPECT_FALSE(next->UploadDue().ok());  // c3's fails
  EXPECT_EQ(next->recovering_files(), 1u);
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(next->UploadDue().ok());  // and is retried
  EXPECT_EQ(memory_->contents("c3"), "c3!");
  EXPECT_FALSE(memory_->head("d4").ok());
  EXPECT_EQ(next->recovering_files(), 0u);
  ASSERT_TRUE(next->FlushAll().ok());

  std::vector<std::string> recovered;
  size_t uploading = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("left by an earlier mount in the background") != std::string::npos) {
      uploading = i;
    }
    if (lines[i].rfind("recovered ", 0) == 0) {
      recovered.push_back(lines[i]);
      EXPECT_GT(i, uploading) << "before the line saying what is uploaded";
    }
  }
  EXPECT_EQ(recovered,
            std::vector<std::string>{"recovered 3 files (9 bytes) left by an earlier mount"});
}

// "a" was created with O_EXCL before the crash, and another client has made a file of that name
// since: the next mount's upload of "a" asks for the name to be free, as the crashed mount's
// did, and sets "a" aside instead of replacing that file. "d/b" goes up.
TEST_F(BackgroundRecoveryTest, ARecoveredNewFileNeverReplacesAnotherClientsFileOfItsName) {
  const std::string image = CrashWithTwoFiles();
  PutObject("a", "theirs");
  Log log;
  auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->UploadDue().ok());
  EXPECT_EQ(memory_->contents("a"), "theirs");
  EXPECT_EQ(memory_->contents("d/b"), "recovered b!");
  EXPECT_EQ(SetAside(image), (std::map<std::string, std::string>{{"a", "recovered a"}}));
  EXPECT_TRUE(log.Has("was made on the server by another client"));
  ASSERT_TRUE(next->FlushAll().ok());
  EXPECT_EQ(memory_->contents("a"), "theirs");
}

// "a", created before the crash, was stored by that mount just before it stopped (its record not
// dropped yet): the name holds its very bytes. That is no other client's file: nothing is set
// aside, and the log blames nobody.
TEST_F(BackgroundRecoveryTest, ARecoveredNewFileTheCrashedMountHadStoredIsNotSetAside) {
  const std::string image = CrashWithTwoFiles();
  PutObject("a", "recovered a", OwnFileAttributes(0644));
  Log log;
  auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->UploadDue().ok());
  EXPECT_EQ(memory_->contents("a"), "recovered a");
  EXPECT_EQ(memory_->contents("d/b"), "recovered b!");
  EXPECT_TRUE(SetAside(image).empty());
  EXPECT_FALSE(log.Has("another client"));
  EXPECT_EQ(next->recovering_files(), 0u);
}

// An edit of "log" accepted before the crash, which that mount stored just before it stopped (its
// record not dropped yet): the object holds the edit's very bytes, under an ETag the record does
// not know. That is no other client's version: nothing is set aside, and the log blames nobody.
// (Staged whole, so that its MD5 can be checked; staged sparse: below.)
TEST_F(BackgroundRecoveryTest, ARecoveredEditTheCrashedMountHadStoredIsNotSetAside) {
  const std::string image = CrashWithAWholeEdit();
  PutObject("log", "one\nmine\n", OwnFileAttributes(0644));  // what its upload stored
  Log log;
  auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->UploadDue().ok());
  EXPECT_EQ(memory_->contents("log"), "one\nmine\n");
  EXPECT_TRUE(SetAside(image).empty());
  EXPECT_FALSE(log.Has("another client"));
  EXPECT_EQ(next->recovering_files(), 0u);
  ASSERT_TRUE(next->FlushAll().ok());
  EXPECT_EQ(memory_->contents("log"), "one\nmine\n");
}

// The same of an edit staged sparse (an append) cannot be told: the bytes it lacks are gone with
// the version it was made to, and another client's version can have its size, its mtime (copied,
// `touch -d`) and its bytes where it wrote. It is set aside, never dropped (which lost the edit of
// a version another client replaced), and never uploaded over the file there. Where the file
// there matches all that, the log says the stopped mount may have stored it.
TEST_F(BackgroundRecoveryTest,
       ARecoveredSparseEditWhoseBaseIsGoneIsSetAsideWithAHintWhereItMatches) {
  struct Case {
    const char* name;
    std::string there;
    bool same_mtime;
    bool hint;
    int64_t mtime_ns = 0;  // set before the close
  };
  for (const Case& c :
       {Case{"stored", "one\nmine\n", true, true}, Case{"mtime", "ONE\nmine\n", false, false},
        Case{"bytes", "one\nMINE\n", true, false},
        Case{"copied", "ONE\nmine\n", true, true, 1700000000123456789LL}}) {
    SCOPED_TRACE(c.name);
    Metadata metadata;
    const std::string image = CrashWithASparseEdit(c.name, &metadata, c.mtime_ns);
    ASSERT_FALSE(metadata.empty());
    if (!c.same_mtime) metadata[kMtimeMetadata] = "1234567890.5";
    PutObject(c.name, c.there, metadata);
    const int puts = faults_->calls(StoreOp::kPut);
    Log log;
    auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
    ASSERT_NE(next, nullptr);
    (void)next->UploadDue();
    ASSERT_TRUE(next->FlushAll().ok());
    EXPECT_EQ(memory_->contents(c.name), c.there);
    EXPECT_EQ(faults_->calls(StoreOp::kPut), puts);
    const std::map<std::string, std::string> aside = SetAside(image);
    ASSERT_EQ(aside.count(c.name), 1u);
    EXPECT_EQ(aside.at(c.name).substr(4), "mine\n");  // a hole where "one\n" was
    EXPECT_TRUE(log.Has(std::string(c.name) + " was accepted by a close, but " + c.name));
    bool hinted = false;
    for (const std::string& line : log.lines) {
      hinted = hinted || (line.rfind(std::string(c.name) + " was accepted", 0) == 0 &&
                          line.find("the mount that stopped may have stored it") != line.npos);
    }
    EXPECT_EQ(hinted, c.hint);
    EXPECT_EQ(next->recovering_files(), 0u);
    next.reset();
    std::filesystem::remove_all(image);
  }
}

// An edit of "log" accepted before the crash, of a version another client has replaced since, and
// not with the edit's bytes: set aside, the other client's version kept.
TEST_F(BackgroundRecoveryTest, ARecoveredEditOfAVersionAnotherClientReplacedIsSetAside) {
  const std::string image = CrashWithAWholeEdit();
  PutObject("log", "one\ntheir\n");  // as long as the edit, other bytes
  Log log;
  auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  (void)next->UploadDue();
  ASSERT_TRUE(next->FlushAll().ok());
  EXPECT_EQ(memory_->contents("log"), "one\ntheir\n");
  EXPECT_EQ(SetAside(image), (std::map<std::string, std::string>{{"log", "one\nmine\n"}}));
}

// An edit of "log" accepted before the crash, of a version another client has replaced since,
// then written over in every byte by the next mount before its upload: nothing of the old version
// is left in it, and the last writer wins, as without the crash.
TEST_F(BackgroundRecoveryTest, ARecoveredEditWrittenOverWholeIsStoredOverAnotherClientsVersion) {
  PutObject("log", "one\n");
  const uint64_t ino = LookupIno(kRootIno, "log");
  auto fh = fs_->Open(ino, O_RDWR | O_APPEND);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 4, Bytes("mine\n")).ok());
  EXPECT_EQ(ReadFile(*fs_, ino), "one\nmine\n");  // all of it here: the record names no base
  ASSERT_TRUE(fs_->Release(*fh).ok());
  const std::string image = CrashImage();
  PutObject("log", "one\ntheirs\n");
  Log log;
  auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  auto entry = next->Lookup(kRootIno, "log");
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  const uint64_t recovered = entry->attr.ino;
  auto over = next->Open(recovered, O_WRONLY);
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  ASSERT_TRUE(next->Write(*over, 0, Bytes("123456789")).ok());
  ASSERT_TRUE(next->Release(*over).ok());
  ASSERT_TRUE(next->UploadDue().ok());
  ASSERT_TRUE(next->FlushAll().ok());
  EXPECT_EQ(memory_->contents("log"), "123456789");
  EXPECT_TRUE(SetAside(image).empty());
}

TEST_F(BackgroundRecoveryTest, ARenameOrUnlinkBeforeTheUploadIsWhatReachesTheStore) {
  const std::string image = CrashWithTwoFiles(/*a_replaces=*/true);
  faults_->FailAll(StoreOp::kPut, TransientError("503 SlowDown"));
  Log log;
  auto next = NextMount(image, /*writeback=*/60, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->Rename(kRootIno, "a", kRootIno, "moved", 0).ok());
  auto d = next->Lookup(kRootIno, "d");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(next->Unlink(d->attr.ino, "b").ok());
  EXPECT_EQ(Names(*next, kRootIno), (std::set<std::string>{"d", "moved"}));
  EXPECT_EQ(Names(*next, d->attr.ino), std::set<std::string>{});
  auto moved = next->Lookup(kRootIno, "moved");
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(ReadFile(*next, moved->attr.ino), "recovered a");

  faults_->Clear();
  ASSERT_TRUE(next->UploadDue().ok());
  EXPECT_EQ(memory_->contents("moved"), "recovered a");
  EXPECT_FALSE(memory_->head("a").ok());  // the old object went with the rename
  EXPECT_FALSE(memory_->head("d/b").ok());
  EXPECT_EQ(next->recovering_files(), 0u);
  EXPECT_TRUE(log.Has("recovered 2 files"));
  EXPECT_EQ(StagedDataFiles(image), 0u);
}

TEST_F(BackgroundRecoveryTest, AWriteBeforeTheUploadIsWhatReachesTheStore) {
  const std::string image = CrashWithTwoFiles();
  faults_->FailAll(StoreOp::kPut, TransientError("503 SlowDown"));
  Log log;
  auto next = NextMount(image, /*writeback=*/0, /*thread=*/false, &log);
  ASSERT_NE(next, nullptr);
  auto a = next->Lookup(kRootIno, "a");
  ASSERT_TRUE(a.ok());
  auto fh = next->Open(a->attr.ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(next->Write(*fh, 11, Bytes(", then more")).ok());
  faults_->Clear();
  ASSERT_TRUE(next->Flush(*fh).ok());  // close(2) uploads, as for any file without a window
  ASSERT_TRUE(next->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("a"), "recovered a, then more");
  ASSERT_TRUE(next->UploadDue().ok());
  EXPECT_EQ(memory_->contents("a"), "recovered a, then more");
  EXPECT_EQ(memory_->contents("d/b"), "recovered b!");
}

// ---- What a crash may publish: only what close, fsync or the write-back window accepted ----

// Opening an existing object for writing fetches nothing of it: the close that uploads it
// fetches what the file lacks. (When open fetched the whole object, a crash in the middle of
// that once uploaded the prefix fetched so far over the whole object.) A crash in the middle of
// the close's fetch: the close accepted the data, so the next mount completes it from the
// object and uploads it whole.
TEST_F(FilesystemTest, ACrashWhileFetchingForTheUploadPublishesTheWholeFile) {
  const std::string whole = std::string(300 << 10, 'w');  // five reads of 64 KiB
  PutObject("big.log", whole);
  uint64_t ino = LookupIno(kRootIno, "big.log");
  std::string image;
  faults_->BeforeNth(StoreOp::kRead, 3, [&] { image = CrashImage(); });
  auto fh = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("x")).ok());
  EXPECT_TRUE(image.empty());                               // nothing fetched for the append
  faults_->FailAll(StoreOp::kPut, TransientError("down"));  // the crash: no upload
  EXPECT_FALSE(fs_->Release(*fh).ok());
  faults_->Clear();
  ASSERT_FALSE(image.empty());
  EXPECT_EQ(memory_->contents("big.log"), whole);
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("big.log"), whole + "x");
  EXPECT_TRUE(SetAside(image).empty());
}

TEST_F(FilesystemTest, ACrashBeforeCloseKeepsTheOldObjectAndSetsTheNewDataAside) {
  PutObject("doc", "the complete old content");
  uint64_t ino = LookupIno(kRootIno, "doc");
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("a torn pre")).ok());
  auto created = fs_->Create(kRootIno, "new", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("never closed")).ok());
  const std::string image = CrashImage();
  std::vector<std::string> log = RecoverImage(image);
  EXPECT_EQ(memory_->contents("doc"), "the complete old content");
  EXPECT_FALSE(memory_->head("new").ok());
  EXPECT_EQ(SetAside(image),
            (std::map<std::string, std::string>{{"doc", "a torn pre"}, {"new", "never closed"}}));
  ASSERT_EQ(log.size(), 2u);
  for (const std::string& line : log) {
    EXPECT_NE(line.find("no close or fsync had accepted it"), std::string::npos) << line;
    EXPECT_NE(line.find(image + "/unfinished/"), std::string::npos) << line;
  }
  ASSERT_TRUE(fs_->Release(*fh).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
}

// `cmd > doc`: the shell opens doc with O_TRUNC, hands the command a duplicate and closes its
// own descriptor (a flush) before the command writes a byte. That close once stored the empty
// file: the old content was gone while the command ran, and for good should the mount die
// before the command's close. Now the release stores a file only emptied, and a close that
// finds data stores that.
TEST_F(FilesystemTest, ACloseOfAFileOnlyEmptiedLeavesItsUploadToTheRelease) {
  PutObject("doc", "the complete old content");
  const uint64_t ino = LookupIno(kRootIno, "doc");
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());  // the shell's close
  EXPECT_EQ(memory_->contents("doc"), "the complete old content");
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("the command's first")).ok());
  // The mount dies before the command's close: the next keeps the old content.
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("doc"), "the complete old content");
  EXPECT_EQ(SetAside(image), (std::map<std::string, std::string>{{"doc", "the command's first"}}));
  // Or the command ends: its close stores its output.
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "the command's first");
  ASSERT_TRUE(fs_->Release(*fh).ok());

  // Another writer's open file closed meanwhile (`touch doc`) stores nothing either: the
  // command is still at work.
  fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  auto other = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(fs_->Flush(*other).ok());
  ASSERT_TRUE(fs_->Release(*other).ok());
  EXPECT_EQ(memory_->contents("doc"), "the command's first");
  // Nor does unmount while the command is at work: the stored file stays.
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("doc"), "the command's first");
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("the second command's")).ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "the second command's");
  ASSERT_TRUE(fs_->Release(*fh).ok());

  // `: > doc`, while a writer that has written nothing keeps the file open (a program holding
  // it O_RDWR): the release of the open file that emptied it stores the empty file.
  auto holder = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(holder.ok());
  fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "the second command's");
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "");
  ASSERT_TRUE(fs_->Release(*holder).ok());
  // `truncate -s 0 doc` (by path) is done as it returns: unmount stores it, though a writer
  // holds the file, even one that emptied it once (O_TRUNC) and wrote since.
  holder = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(holder.ok());
  ASSERT_TRUE(fs_->Write(*holder, 0, Bytes("some")).ok());
  ASSERT_TRUE(fs_->Fsync(*holder, false).ok());
  EXPECT_EQ(memory_->contents("doc"), "some");
  FileAttr zero;
  zero.size = 0;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetSize, zero, std::nullopt).ok());
  EXPECT_EQ(memory_->contents("doc"), "some");
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("doc"), "");
  ASSERT_TRUE(fs_->Release(*holder).ok());
  // So does ftruncate(fd, 0)'s (logrotate's copytruncate).
  ASSERT_NO_FATAL_FAILURE(Overwrite(ino, "a log"));
  holder = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(holder.ok());
  fh = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->SetAttr(ino, kSetSize, zero, *fh).ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "a log");
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "");
  ASSERT_TRUE(fs_->Release(*holder).ok());

  // `: > doc`: the release stores the empty file.
  ASSERT_NO_FATAL_FAILURE(Overwrite(ino, "the second command's"));
  fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "the second command's");
  // Its ETag, asked for before the release, is the empty file's (as the close once stored).
  auto etag = fs_->GetXattr(ino, "user.etag");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, "d41d8cd98f00b204e9800998ecf8427e");
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("doc"), "");
}

// The same of a new file closed into the write-back window, not uploaded yet: `cmd > new` once
// made the empty file the accepted version at the shell's close, and a crash then stored it in
// place of the content the earlier close accepted.
TEST_F(WritebackTest, ACloseOfANewFileOnlyEmptiedKeepsTheVersionACloseAccepted) {
  const uint64_t ino = WriteAndClose("new", "accepted");
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());  // the shell's close
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("the command's first")).ok());
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("new"), "accepted");
  ASSERT_TRUE(fs_->Release(*fh).ok());
}

// A file created, or emptied by O_TRUNC, and never written when the mount died is empty: the
// next mount keeps the stored file and says so, but sets no empty file aside in
// cache_dir/unfinished (cp within the mount, killed during its copy on the server, left one).
TEST_F(FilesystemTest, ACrashBeforeAnyWriteSetsNothingAside) {
  PutObject("doc", "the complete old content");
  auto fh = fs_->Open(LookupIno(kRootIno, "doc"), O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok());
  auto created = fs_->Create(kRootIno, "new", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  const std::string image = CrashImage();
  std::vector<std::string> log = RecoverImage(image);
  EXPECT_EQ(memory_->contents("doc"), "the complete old content");
  EXPECT_FALSE(memory_->head("new").ok());
  EXPECT_TRUE(SetAside(image).empty());
  EXPECT_EQ(metrics_.unfinished_set_aside.load(), 0u);
  ASSERT_EQ(log.size(), 2u);
  for (const std::string& line : log) {
    EXPECT_NE(line.find("not uploaded; it was empty, so nothing is set aside"), std::string::npos)
        << line;
  }
  // Nothing of them is left for the mount after.
  auto staging = StagingArea::Open(image);
  ASSERT_TRUE(staging.ok());
  auto leftovers = (*staging)->Leftovers();
  ASSERT_TRUE(leftovers.ok());
  EXPECT_TRUE(leftovers->empty());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
}

// An accepted version that a power loss left empty (its record says more bytes than its data
// file has) is not one "never written": it is set aside, and the log says it was not uploaded.
TEST_F(FilesystemTest, AnAcceptedVersionLeftEmptyByAPowerLossIsSetAsideNotDropped) {
  fs_.reset();
  options_.writeback = 600;
  options_.writeback_thread = false;
  fs_ = NewFilesystem();
  WriteFile(kRootIno, "closed", "accepted bytes");
  const std::string image = CrashImage();
  size_t emptied = 0;
  for (const auto& e : std::filesystem::directory_iterator(image)) {
    if (e.is_regular_file() && e.file_size() == std::string("accepted bytes").size()) {
      std::filesystem::resize_file(e.path(), 0);  // what ext4 may leave after a power loss
      ++emptied;
    }
  }
  ASSERT_EQ(emptied, 1u);
  std::vector<std::string> log = RecoverImage(image);
  EXPECT_FALSE(memory_->head("closed").ok());
  EXPECT_EQ(SetAside(image), (std::map<std::string, std::string>{{"closed", ""}}));
  bool said = false;
  for (const std::string& line : log) {
    said =
        said || (line.find("closed was accepted by a close, fsync or the write-back window with 14 "
                           "bytes, but its staged file holds 0 bytes now") != std::string::npos &&
                 line.find("not uploaded") != std::string::npos &&
                 line.find("nothing is set aside") == std::string::npos);
  }
  EXPECT_TRUE(said) << ::testing::PrintToString(log);
}

// A reader opening and closing the file while a writer is at work (tail, a backup tool) once
// uploaded the writer's half-written data at its close, and made it what a crash uploads.
TEST_F(FilesystemTest, AReadersCloseNeverPublishesAWritersUnfinishedData) {
  PutObject("log", "complete");
  uint64_t ino = LookupIno(kRootIno, "log");
  auto writer = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(fs_->Write(*writer, 0, Bytes("half")).ok());
  EXPECT_EQ(ReadFile(*fs_, ino), "half");  // the reader sees the writer's data, as locally
  EXPECT_EQ(memory_->contents("log"), "complete");
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("log"), "complete");
  ASSERT_TRUE(fs_->Write(*writer, 4, Bytes(" and whole")).ok());
  ASSERT_TRUE(fs_->Flush(*writer).ok());
  ASSERT_TRUE(fs_->Release(*writer).ok());
  EXPECT_EQ(memory_->contents("log"), "half and whole");
}

// Uploads made for someone other than the writer (a copy_file_range of the file, a rename of
// its directory, unmount with the writer still at work) publish what the file holds, but never
// vouch for it: should the upload fail, a crash must not upload the writer's unfinished data.
TEST_F(FilesystemTest, AFailedUploadForACopyDoesNotAcceptAWritersUnfinishedData) {
  PutObject("src", "complete");
  uint64_t ino = LookupIno(kRootIno, "src");
  auto writer = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(fs_->Write(*writer, 0, Bytes("unfinis")).ok());
  auto reader = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  auto created = fs_->Create(kRootIno, "copy", 0644, O_WRONLY | O_CREAT);
  ASSERT_TRUE(created.ok());
  faults_->FailAll(StoreOp::kPut, TransientError("down"));
  EXPECT_FALSE(fs_->CopyFileRange(*reader, 0, created->fh, 0, 100, 0).ok());
  faults_->Clear();
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("src"), "complete");
  EXPECT_EQ(SetAside(image).count("src"), 1u);
  ASSERT_TRUE(fs_->Release(*reader).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  ASSERT_TRUE(fs_->Release(*writer).ok());
}

// fsync accepted the data even though the upload failed: the next mount uploads it.
TEST_F(FilesystemTest, ACrashAfterAFailedFsyncUploadsWhatFsyncAccepted) {
  // (O_TRUNC: the recovery below plays another process, whose upload this file replaces.)
  auto created = fs_->Create(kRootIno, "synced", 0644, O_WRONLY | O_CREAT | O_TRUNC);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("synced part")).ok());
  faults_->FailNth(StoreOp::kPut, 1, TransientError("down"));
  EXPECT_FALSE(fs_->Fsync(created->fh, false).ok());
  // Written on after the fsync, never closed: that part is not accepted...
  ASSERT_TRUE(fs_->Write(created->fh, 11, Bytes(" and more")).ok());
  const std::string image = CrashImage();
  RecoverImage(image);
  // ...so the next mount uploads what fsync accepted, and keeps the rest aside.
  EXPECT_EQ(memory_->contents("synced"), "synced part");
  EXPECT_EQ(SetAside(image),
            (std::map<std::string, std::string>{{"synced", "synced part and more"}}));
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_EQ(memory_->contents("synced"), "synced part and more");
}

// A file closed into the write-back window and opened again to be changed: the closed version
// is what a crash uploads, never the half-changed one.
TEST_F(WritebackTest, ACrashWhileAClosedFileIsChangedAgainUploadsTheClosedVersion) {
  uint64_t ino = WriteAndClose("f", "closed version");
  auto fh = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("XX")).ok());
  EXPECT_EQ(ReadFile(*fs_, ino), "XXosed version");  // the mount shows the change at once
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("f"), "closed version");
  EXPECT_EQ(SetAside(image), (std::map<std::string, std::string>{{"f", "XXosed version"}}));
  // Closed again: that version replaces the kept one, in the window and after a crash.
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  const std::string later = CrashImage();
  // (Another course of events than the crash before: "f", created here, is not there yet. Were
  // it, that would be another client's, which no recovered create replaces.)
  ASSERT_TRUE(memory_->remove("f").ok());
  RecoverImage(later);
  EXPECT_EQ(memory_->contents("f"), "XXosed version");
  EXPECT_TRUE(SetAside(later).empty());
}

// Emptying a closed file of the window (O_TRUNC, as `>` does) keeps its closed version
// without copying it: the new staged file starts empty. (Were it copied first, a cache_dir
// without room for a second copy would fail the open.)
TEST_F(WritebackTest, TruncatingAClosedFileKeepsItsClosedVersionWithoutACopy) {
  uint64_t ino = WriteAndClose("f", std::string(100000, 'c'));
  Result<uint64_t> fh = InvalidArgumentError("not opened");
  {
    // No file of this process may grow past 50,000 bytes meanwhile: a copy cannot be made.
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    sighandler_t old_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limited = old;
    limited.rlim_cur = 50000;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
  }
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("f"), std::string(100000, 'c'));
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("new")).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "new");
}

// The same, renamed while being changed (rsync --inplace does not, editors do): the closed
// version follows the new name.
TEST_F(WritebackTest, TheClosedVersionFollowsARenameWhileTheFileIsChangedAgain) {
  uint64_t ino = WriteAndClose("draft", "closed version");
  auto fh = fs_->Open(ino, O_WRONLY | O_APPEND);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes(" + more")).ok());
  ASSERT_TRUE(fs_->Rename(kRootIno, "draft", kRootIno, "final", 0).ok());
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("final"), "closed version");
  EXPECT_FALSE(memory_->head("draft").ok());
  // Back to the mount that did not crash: the server as it left it ("final" free, which its
  // upload after the close asks; the recovery above was another process's).
  ASSERT_TRUE(memory_->remove("final").ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("final"), "closed version + more");
}

// Another client's put between this mount's lookup (still cached) and its O_TRUNC open came
// before the open: the file written anew goes over it at the end of the window, as it would
// at its close, rather than being set aside as though that put were newer.
TEST_F(WritebackTest, AVersionStoredBeforeTheTruncatingOpenIsWrittenOver) {
  PutObject("f", "old");
  const uint64_t ino = LookupIno(kRootIno, "f");
  PutObject("f", "theirs, before the open");
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("mine")).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "mine");
  EXPECT_FALSE(std::filesystem::exists(options_.cache_dir + "/unfinished/f"));
}

// Another client stored the same bytes after this file's close, without its mode: the name holds
// this file's bytes, and only its attributes are left to set, lest the chmod its writer made be
// lost. Nothing is set aside.
TEST_F(WritebackTest, SameBytesAnotherClientStoredGetThisFilesAttributes) {
  PutObject("f", "0000");
  const uint64_t ino = LookupIno(kRootIno, "f");
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("AAAA")).ok());
  ASSERT_TRUE(fs_->Release(*fh).ok());
  FileAttr attr;
  attr.mode = S_IFREG | 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMode, attr, std::nullopt).ok());
  ASSERT_TRUE(memory_->put("f", MemorySource("AAAA"), PutOptions{}).ok());  // no metadata
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "AAAA");
  EXPECT_EQ(memory_->head("f")->metadata["mode"], std::to_string(S_IFREG | 0600));
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

TEST_F(WritebackTest, RenameNoReplaceOntoADirectoryIsAlreadyExists) {
  WriteAndClose("f", "x");
  ASSERT_TRUE(fs_->MkDir(kRootIno, "d", 0755).ok());
  EXPECT_EQ(fs_->Rename(kRootIno, "f", kRootIno, "d", kRenameNoReplace).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(fs_->Rename(kRootIno, "f", kRootIno, "d", 0).code(), StatusCode::kIsDirectory);
}

// A write that fails part way (the file size limit here; a cache disk that another process
// filled meanwhile) may have put some of its bytes into a part already streamed up. That part
// is sent again at the end, so the object holds what the mount shows, not the part as sent.
TEST_F(FilesystemTest, AWriteFailingPartWayIntoAStreamedPartSendsThatPartAgain) {
  constexpr uint64_t kPartBytes = 5 << 20;  // the store's parts
  auto created = fs_->Create(kRootIno, "f", 0644, O_WRONLY | O_CREAT | O_TRUNC);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const uint64_t fh = created->fh;
  const std::string piece(1 << 20, 'a');
  for (uint64_t at = 0; at < 2 * kPartBytes; at += piece.size()) {
    ASSERT_TRUE(fs_->Write(fh, at, Bytes(piece)).ok());
  }
  // Both parts went up (polled, up to 10 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (metrics_.streamed_parts.load() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(metrics_.streamed_parts.load(), 2u);
  {
    // No file of this process may grow past the two parts: the write puts its first 100 bytes
    // into the second part, then fails.
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    sighandler_t old_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limited = old;
    limited.rlim_cur = 2 * kPartBytes;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    Result<size_t> failed = fs_->Write(fh, 2 * kPartBytes - 100, Bytes(std::string(200, 'b')));
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
    ASSERT_FALSE(failed.ok());
  }
  // The writer goes on (its failed write forgotten by the next one through the same handle).
  ASSERT_TRUE(fs_->Write(fh, 2 * kPartBytes, Bytes("tail")).ok());
  ASSERT_TRUE(fs_->Release(fh).ok());
  const std::string shown = ReadFile(*fs_, created->entry.attr.ino);
  ASSERT_EQ(shown.size(), 2 * kPartBytes + 4);
  EXPECT_EQ(shown.substr(2 * kPartBytes - 100, 104), std::string(100, 'b') + "tail");
  const std::string stored = memory_->contents("f");
  ASSERT_EQ(stored.size(), shown.size());
  EXPECT_EQ(stored.substr(2 * kPartBytes - 100, 104), shown.substr(2 * kPartBytes - 100, 104));
  EXPECT_TRUE(stored == shown);
}

// A write that fails (here past the largest object; on a full cache disk, ENOSPC) leaves the
// file unfinished: neither fsync nor close uploads it over the complete stored file. Its data
// is set aside in cache_dir/unfinished/, and the file is the stored one again.
TEST_F(FilesystemTest, AFailedWriteNeverReplacesTheStoredFile) {
  const uint64_t fh = UnfinishedF("the start");
  ASSERT_NE(fh, 0u);
  const uint64_t ino = LookupIno(kRootIno, "f");
  const Status synced = fs_->Fsync(fh, false);
  EXPECT_EQ(synced.code(), StatusCode::kFileTooLarge) << synced.ToString();
  EXPECT_NE(synced.message().find("f is not uploaded: a write to it failed"), std::string::npos)
      << synced.ToString();
  const Status closed = fs_->Flush(fh);
  EXPECT_EQ(closed.code(), StatusCode::kFileTooLarge) << closed.ToString();
  EXPECT_TRUE(SetAside(options_.cache_dir).empty()) << "set aside before the release";
  EXPECT_EQ(fs_->Release(fh).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_EQ(SetAside(options_.cache_dir), (std::map<std::string, std::string>{{"f", "the start"}}));
  EXPECT_EQ(metrics_.unfinished_set_aside.load(), 1u);
  EXPECT_EQ(fs_->GetAttr(ino)->attr.size, 6u);
  EXPECT_EQ(ReadFile(*fs_, ino), "stored");
  // Nothing of it is left to upload.
  fs_.reset();
  EXPECT_EQ(memory_->contents("f"), "stored");
}

// Data that cannot move to unfinished/ (there a file stands in the directory's way; a full
// disk may refuse even the directory) stays in the staging area, and the file is the stored
// one all the same: its readers never see the unfinished data, and the next mount sets the
// data aside.
TEST_F(FilesystemTest, AnUnfinishedFileThatCannotMoveIsSetAsideByTheNextMount) {
  const uint64_t fh = UnfinishedF("the start");
  ASSERT_NE(fh, 0u);
  const uint64_t ino = LookupIno(kRootIno, "f");
  const std::string blocked = options_.cache_dir + "/unfinished";
  std::filesystem::remove_all(blocked);
  std::ofstream(blocked) << "not a directory";
  EXPECT_EQ(fs_->Release(fh).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(fs_->GetAttr(ino)->attr.size, 6u);
  EXPECT_EQ(ReadFile(*fs_, ino), "stored");
  fs_.reset();
  EXPECT_EQ(memory_->contents("f"), "stored");
  std::filesystem::remove(blocked);
  (void)RecoverImage(options_.cache_dir);
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_EQ(SetAside(options_.cache_dir), (std::map<std::string, std::string>{{"f", "the start"}}));
}

// A version a close accepted but could not upload, then rewritten by a writer whose write
// failed: the release sets the rewrite aside and uploads the accepted version. The kernel's
// pages still hold the rewrite until the queued drop is done, so the upload does not claim
// them for its version: an open in between drops them instead of showing the rewrite.
TEST_F(FilesystemTest, TheUploadAfterASetAsideKeepsNoPagesOfTheDataSetAside) {
  UseMaxObjectSize(64);
  PutObject("f", "stored");
  const uint64_t ino = LookupIno(kRootIno, "f");
  auto first = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(fs_->Write(*first, 0, Bytes("accepted")).ok());
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  EXPECT_FALSE(fs_->Release(*first).ok());  // accepted, staged, not uploaded
  auto second = fs_->Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(fs_->Write(*second, 0, Bytes("rewrite")).ok());
  EXPECT_FALSE(fs_->Write(*second, 7, Bytes(std::string(100, 'x'))).ok());
  EXPECT_EQ(fs_->Release(*second).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(memory_->contents("f"), "accepted");
  bool keep = true;
  auto reader = fs_->Open(ino, O_RDONLY, &keep);
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(keep) << "the pages of the data set aside were kept";
  EXPECT_TRUE(fs_->Release(*reader).ok());
}

// A rename onto an unfinished file fails with its write's error and changes nothing: the
// replaced file's state would go before the store's rename, which may still fail.
TEST_F(FilesystemTest, ARenameOntoAnUnfinishedFileChangesNothing) {
  const uint64_t fh = UnfinishedF("the start");
  ASSERT_NE(fh, 0u);
  PutObject("g", "other");
  EXPECT_EQ(fs_->Rename(kRootIno, "g", kRootIno, "f", 0).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(memory_->contents("g"), "other");
  ReleaseSetsAside(fh, "the start");
}

// copy_file_range from an unfinished file copies what its readers see, through this machine,
// instead of failing with the write's error: the source is never uploaded for a copy.
TEST_F(FilesystemTest, ACopyFromAnUnfinishedFileCopiesWhatItHolds) {
  const uint64_t fh = UnfinishedF("the start");
  ASSERT_NE(fh, 0u);
  auto reader = fs_->Open(LookupIno(kRootIno, "f"), O_RDONLY);
  ASSERT_TRUE(reader.ok());
  auto created = fs_->Create(kRootIno, "g", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok());
  auto copied = fs_->CopyFileRange(*reader, 0, created->fh, 0, 100, 0);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(*copied, 9u);
  EXPECT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_EQ(memory_->contents("g"), "the start");
  EXPECT_TRUE(fs_->Release(*reader).ok());
  EXPECT_FALSE(fs_->Release(fh).ok());
  EXPECT_EQ(memory_->contents("f"), "stored");
}

// Of two writers' failures, the one left after the other writer carried on is what the close
// names: not the first failure, mended since.
TEST_F(FilesystemTest, TheCloseOfAnUnfinishedFileNamesTheFailureLeft) {
  auto [mended, left] = TwoWritersOfF();
  ASSERT_TRUE(mended.ok() && left.ok());
  ASSERT_TRUE(fs_->Write(*mended, 0, Bytes("S")).ok());
  EXPECT_FALSE(fs_->Write(*mended, 6, Bytes(std::string(100, 'x'))).ok());  // 106 bytes
  EXPECT_FALSE(fs_->Write(*left, 10, Bytes(std::string(100, 'x'))).ok());   // 110 bytes
  ASSERT_TRUE(fs_->Write(*mended, 6, Bytes("!")).ok());                     // carries on
  EXPECT_TRUE(fs_->Release(*mended).ok());
  const Status closed = fs_->Flush(*left);
  EXPECT_EQ(closed.code(), StatusCode::kFileTooLarge);
  EXPECT_NE(closed.message().find("110 bytes"), std::string::npos) << closed.ToString();
  EXPECT_FALSE(fs_->Release(*left).ok());
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_EQ(SetAside(options_.cache_dir).size(), 1u);
}

// A new file whose write failed is not created by its close either.
TEST_F(FilesystemTest, AFailedWriteLeavesNoNewFile) {
  UseMaxObjectSize(64);
  auto created = fs_->Create(kRootIno, "new", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("begun")).ok());
  EXPECT_FALSE(fs_->Write(created->fh, 5, Bytes(std::string(100, 'x'))).ok());
  EXPECT_EQ(fs_->Flush(created->fh).code(), StatusCode::kFileTooLarge);
  EXPECT_FALSE(fs_->Release(created->fh).ok());
  EXPECT_FALSE(memory_->head("new").ok());
  EXPECT_EQ(SetAside(options_.cache_dir), (std::map<std::string, std::string>{{"new", "begun"}}));
}

// A writer whose write failed and that goes on writing through the same handle handled the
// error: its close uploads the file, as a local file system keeps it. (cp, rsync and dd stop at
// the error instead.)
TEST_F(FilesystemTest, AWriterThatCarriesOnAfterAFailedWriteHasItsFileUploaded) {
  const uint64_t fh = UnfinishedF("abc");
  ASSERT_NE(fh, 0u);
  ASSERT_TRUE(fs_->Write(fh, 3, Bytes("d")).ok());
  EXPECT_TRUE(fs_->Flush(fh).ok());
  EXPECT_TRUE(fs_->Release(fh).ok());
  EXPECT_EQ(memory_->contents("f"), "abcd");
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// A later truncate that cuts off what a failed write meant to put there finishes the file (as
// would a write of those bytes): its close uploads it.
TEST_F(FilesystemTest, ATruncateBeforeAFailedWriteFinishesTheFile) {
  const uint64_t fh = UnfinishedF("new content");
  ASSERT_NE(fh, 0u);
  const uint64_t ino = LookupIno(kRootIno, "f");
  FileAttr attr;
  attr.size = 11;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetSize, attr, fh).ok());
  EXPECT_TRUE(fs_->Flush(fh).ok());
  EXPECT_TRUE(fs_->Release(fh).ok());
  EXPECT_EQ(memory_->contents("f"), "new content");
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// Of two writers, the close of the one whose write did not fail does not upload the file
// either: the last close decides, and sets it aside.
TEST_F(FilesystemTest, AnotherWritersCloseDoesNotUploadAFailedWrite) {
  auto [failing, other] = TwoWritersOfF();
  ASSERT_TRUE(failing.ok() && other.ok());
  ASSERT_TRUE(fs_->Write(*other, 0, Bytes("STO")).ok());
  EXPECT_FALSE(fs_->Write(*failing, 6, Bytes(std::string(100, 'x'))).ok());
  EXPECT_EQ(fs_->Flush(*other).code(), StatusCode::kFileTooLarge);
  EXPECT_TRUE(fs_->Release(*other).ok());
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_TRUE(SetAside(options_.cache_dir).empty()) << "set aside before the last release";
  EXPECT_EQ(fs_->Flush(*failing).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(fs_->Release(*failing).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_EQ(SetAside(options_.cache_dir).size(), 1u);
}

// A file closed into the write-back window, then rewritten by a writer whose write failed: the
// version the first close accepted is the file again, and goes up at the window's end.
TEST_F(WritebackTest, AFailedRewriteLeavesTheVersionClosedBefore) {
  uint64_t ino = 0;
  const uint64_t fh = ClosedThenUnfinished(&ino);
  ASSERT_NE(fh, 0u);
  EXPECT_EQ(fs_->Flush(fh).code(), StatusCode::kFileTooLarge);
  EXPECT_FALSE(fs_->Release(fh).ok());
  EXPECT_EQ(ReadFile(*fs_, ino), "first version");
  EXPECT_FALSE(memory_->head("f").ok());  // still in the window
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "first version");
  EXPECT_EQ(SetAside(options_.cache_dir), (std::map<std::string, std::string>{{"f", "second"}}));
}

// The version a close put in the window is the file again after a set-aside, but until the
// queued drop is done the kernel's pages hold the data set aside: an open in between drops
// them, and the next keeps what it read.
TEST_F(WritebackTest, AnOpenAfterASetAsideDropsThePagesOfTheDataSetAside) {
  uint64_t ino = 0;
  const uint64_t fh = ClosedThenUnfinished(&ino);
  ASSERT_NE(fh, 0u);
  EXPECT_FALSE(fs_->Release(fh).ok());
  for (const bool kept : {false, true}) {
    bool keep = !kept;
    auto reader = fs_->Open(ino, O_RDONLY, &keep);
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ(keep, kept);
    EXPECT_TRUE(fs_->Release(*reader).ok());
  }
}

// A duplicate of the failed writer's descriptor closed (a shell's redirection, a fork) fails
// as every close does, but the file stays open and unfinished: only the release of the open
// file sets it aside, and nothing uploads it meanwhile.
TEST_F(FilesystemTest, AClosedDuplicateOfAFailedWriterSetsNothingAside) {
  const uint64_t fh = UnfinishedF("new");
  ASSERT_NE(fh, 0u);
  EXPECT_EQ(fs_->Flush(fh).code(), StatusCode::kFileTooLarge);  // close(dup(fd))
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
  EXPECT_EQ(fs_->Fsync(fh, false).code(), StatusCode::kFileTooLarge);
  EXPECT_EQ(fs_->Flush(fh).code(), StatusCode::kFileTooLarge);  // close(fd)
  ReleaseSetsAside(fh, "new");
}

// An unfinished file that holds nothing its writer wrote (emptied, and the first write failed)
// leaves nothing to set aside: the stored file stays, and unfinished/ gets no empty file.
TEST_F(FilesystemTest, AnUnfinishedFileWithNothingWrittenIsDropped) {
  const uint64_t fh = UnfinishedF("");
  ASSERT_NE(fh, 0u);
  EXPECT_EQ(fs_->Flush(fh).code(), StatusCode::kFileTooLarge);
  EXPECT_FALSE(fs_->Release(fh).ok());
  EXPECT_EQ(memory_->contents("f"), "stored");
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
  EXPECT_EQ(metrics_.unfinished_set_aside.load(), 0u);
}

// A write that fails before it changes the version a close accepted into the window (past the
// largest object: refused before the writer's copy is made) leaves that version whole: the
// close succeeds, and it goes up.
TEST_F(WritebackTest, AFailedWriteThatChangedNothingKeepsTheClosedVersion) {
  UseMaxObjectSize(64);
  const uint64_t ino = WriteAndClose("f", "accepted version");
  auto fh = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  EXPECT_FALSE(fs_->Write(*fh, 100, Bytes("x")).ok());
  EXPECT_TRUE(fs_->Flush(*fh).ok());
  EXPECT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(ReadFile(*fs_, ino), "accepted version");
  clock_->Advance(std::chrono::seconds(61));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("f"), "accepted version");
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// Unmount with a writer of an unfinished file still at work: its data is set aside as a crash
// would, and the version a close accepted goes up.
TEST_F(WritebackTest, UnmountUploadsTheClosedVersionOfAnUnfinishedFile) {
  uint64_t ino = 0;
  const uint64_t fh = ClosedThenUnfinished(&ino);
  ASSERT_NE(fh, 0u);
  EXPECT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(memory_->contents("f"), "first version");
  EXPECT_EQ(SetAside(options_.cache_dir), (std::map<std::string, std::string>{{"f", "second"}}));
}

TEST_F(WritebackTest, FailedUploadsAreCounted) {
  WriteAndClose("f", "x");
  faults_->FailNth(StoreOp::kPut, 1, TransientError("503 SlowDown"));
  clock_->Advance(std::chrono::seconds(61));
  EXPECT_FALSE(fs_->UploadDue().ok());
  EXPECT_EQ(metrics_.writeback_failures.load(), 1u);
}

TEST_F(WritebackTest, TheWritebackThreadUploadsWhenTheWindowHasPassed) {
  fs_.reset();
  options_.writeback_thread = true;
  fs_ = NewFilesystem();
  WriteAndClose("by-the-thread", "uploaded in the background");
  EXPECT_FALSE(memory_->head("by-the-thread").ok());
  clock_->Advance(std::chrono::seconds(61));
  // The thread looks at the clock at least once a second; wait for its upload, not a time.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!memory_->head("by-the-thread").ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(memory_->contents("by-the-thread"), "uploaded in the background");
}

// With a metadata delay (a mount's default is 1 s) chmod, chown, utimens and setxattr of a
// closed file wait in memory and in a crash record; the test applies due changes itself
// (UploadDue after advancing the fake clock) instead of the background thread.
class MetadataDelayTest : public FilesystemTest {
 protected:
  void SetUp() override {
    FilesystemTest::SetUp();
    fs_.reset();
    options_.metadata_delay = 1;
    options_.writeback_thread = false;
    fs_ = NewFilesystem();
  }

  void Chmod(uint64_t ino, uint32_t mode) {
    FileAttr attr;
    attr.mode = mode;
    auto e = fs_->SetAttr(ino, kSetMode, attr, std::nullopt);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->attr.mode & 07777, mode);
  }

  // A chmod held while a handle keeps "f" open, applied by a self-copy that gives the object a
  // new ETag (here a new version; on S3 a "-N" object copied whole), then a write through the
  // handle into a block never fetched, and its release. `proved`: the copy proved it copied
  // the bytes asked for (a server that honours the copy's condition). Returns the release's
  // status; `*stored` is the content the edit meant.
  Status EditAfterAHeldChmod(bool proved, std::string* stored, bool read_first = false) {
    MemoryStoreOptions o;
    o.part_size = 64 << 10;  // an edit copies the parts it did not touch
    o.native_etags = false;  // versions: the self-copy makes a new one
    o.copy_ignores_source_condition = !proved;
    UseStore(o);
    *stored = std::string(1 << 20, 's');
    PutObject("f", *stored);
    const uint64_t ino = LookupIno(kRootIno, "f");
    auto fh = fs_->Open(ino, O_RDWR);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    if (!fh.ok()) return fh.status();
    EXPECT_TRUE(fs_->Write(*fh, 100, Bytes("first")).ok());
    EXPECT_TRUE(fs_->Flush(*fh).ok());  // uploaded; the clean copy stays for the open handle
    if (read_first) {                   // every byte of it here
      std::string all(stored->size(), '\0');
      EXPECT_TRUE(fs_->Read(*fh, 0, std::as_writable_bytes(std::span(all))).ok());
    }
    const ETag before = memory_->head("f")->etag;
    const uint64_t copies = Copies();
    Chmod(ino, 0600);
    EXPECT_EQ(Copies(), copies) << "not held";
    clock_->Advance(std::chrono::seconds(2));
    EXPECT_TRUE(fs_->UploadDue().ok());
    EXPECT_EQ(StoredMode("f"), FileMode(0600));
    EXPECT_NE(memory_->head("f")->etag, before);                 // the copy's new ETag
    EXPECT_TRUE(fs_->Write(*fh, 700000, Bytes("second")).ok());  // in a block not fetched
    stored->replace(100, 5, "first");
    stored->replace(700000, 6, "second");
    return fs_->Release(*fh);
  }

  // "f", stored, is given mode 0600 before a writer opens it with O_TRUNC (held then) or while
  // it writes; its write fails, and its data is set aside at the release: the stored file has
  // the mode all the same.
  void ChmodOutlivesAnUnfinishedWrite(bool before) {
    UseMaxObjectSize(64);
    PutObject("f", "stored");
    const uint64_t ino = LookupIno(kRootIno, "f");
    if (before) {
      ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
    }
    auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC);
    ASSERT_TRUE(fh.ok()) << fh.status().ToString();
    ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("new")).ok());
    if (!before) {
      ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
    }
    EXPECT_FALSE(fs_->Write(*fh, 3, Bytes(std::string(100, 'x'))).ok());
    EXPECT_FALSE(fs_->Flush(*fh).ok());
    EXPECT_FALSE(fs_->Release(*fh).ok());
    EXPECT_EQ(fs_->GetAttr(ino)->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
    clock_->Advance(std::chrono::seconds(2));
    ASSERT_TRUE(fs_->UploadDue().ok());
    EXPECT_EQ(memory_->contents("f"), "stored");
    EXPECT_EQ(StoredMode("f"), FileMode(0600));
    EXPECT_EQ(SetAside(options_.cache_dir), (std::map<std::string, std::string>{{"f", "new"}}));
  }

  // The mode an object's metadata holds ("" without one).
  std::string StoredMode(const std::string& key) {
    auto head = memory_->head(key);
    EXPECT_TRUE(head.ok()) << key;
    if (!head.ok()) return "";
    auto it = head->metadata.find("mode");
    return it == head->metadata.end() ? "" : it->second;
  }

  // `name` created, written with `data` and uploaded by fsync(2), still open: a file between its
  // upload and its last release. Empty (after a test failure) when a step fails.
  std::optional<CreatedFile> UploadedAndOpen(const std::string& name, std::string_view data) {
    auto created = fs_->Create(kRootIno, name, 0644, O_RDWR | O_CREAT | O_EXCL);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return std::nullopt;
    EXPECT_TRUE(fs_->Write(created->fh, 0, Bytes(data)).ok());
    EXPECT_TRUE(fs_->Fsync(created->fh, false).ok());
    return *created;
  }

  static std::string FileMode(uint32_t perms) { return std::to_string(S_IFREG | perms); }
  // Copies on the server: real ones and self-copies for new attributes.
  uint64_t Copies() const {
    return metrics_.copy_requests.load() + metrics_.set_attributes_requests.load();
  }
  // No staging file and no crash record is left in cache_dir.
  bool NothingRecorded() const { return std::filesystem::is_empty(options_.cache_dir); }
};

// A chmod held for a file another client then removed: the open that finds it gone (ESTALE)
// drops the change too, so that the kernel's lookup after it finds the name missing and `>>`
// makes the file anew, rather than every open failing until the change comes due.
TEST_F(MetadataDelayTest, AnOpenFindingTheFileRemovedDropsAChangeHeldForIt) {
  PutObject("g", "base");
  const uint64_t ino = LookupIno(kRootIno, "g");
  Chmod(ino, 0600);
  ASSERT_TRUE(memory_->remove("g").ok());
  auto appended = fs_->Open(ino, O_WRONLY | O_APPEND);
  EXPECT_EQ(ErrnoFromStatus(appended.status()), ESTALE) << appended.status().ToString();
  EXPECT_EQ(fs_->Lookup(kRootIno, "g").status().code(), StatusCode::kNotFound);
  auto made = fs_->Create(kRootIno, "g", 0644, O_WRONLY | O_CREAT | O_APPEND);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_TRUE(fs_->Write(made->fh, 0, Bytes("new")).ok());
  ASSERT_TRUE(fs_->Release(made->fh).ok());
  EXPECT_EQ(memory_->contents("g"), "new");
}

TEST_F(MetadataDelayTest, RsyncPatternIsOneCopyPerFile) {
  // rsync: write a temporary file, close it (the upload), set its times and mode, rename it.
  uint64_t ino = WriteFile(kRootIno, ".f.tmp", "content of f");
  const uint64_t copies = Copies();
  FileAttr attr;
  attr.mtime_ns = int64_t{1500000000} * 1000000000;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMtime, attr, std::nullopt).ok());
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
  EXPECT_EQ(Copies(), copies);  // both wait
  EXPECT_EQ(metrics_.metadata_deferred.load(), 2u);
  EXPECT_FALSE(NothingRecorded());  // the crash record
  auto e = fs_->GetAttr(ino);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_EQ(e->attr.mtime_ns, attr.mtime_ns);

  ASSERT_TRUE(fs_->Rename(kRootIno, ".f.tmp", kRootIno, "f", 0).ok());
  EXPECT_EQ(Copies(), copies + 1);  // the rename's copy carried both changes
  EXPECT_EQ(StoredMode("f"), FileMode(0600));
  EXPECT_EQ(ParseMtime(memory_->head("f")->metadata.at("mtime")), attr.mtime_ns);
  EXPECT_EQ(memory_->contents("f"), "content of f");
  EXPECT_FALSE(memory_->head(".f.tmp").ok());
  EXPECT_TRUE(NothingRecorded());
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(Copies(), copies + 1);  // nothing was left to apply
  auto listed = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
}

// The kernel sends RELEASE after close(2) has returned, so rsync's utimes and chmod may come
// while the uploaded file still has its (clean) staged copy: they wait all the same.
TEST_F(MetadataDelayTest, ChangesBeforeTheLateReleaseWaitToo) {
  auto created = fs_->Create(kRootIno, ".g.tmp", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  const uint64_t ino = created->entry.attr.ino;
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("content of g")).ok());
  ASSERT_TRUE(fs_->Flush(created->fh).ok());  // close(2): the upload
  EXPECT_EQ(memory_->contents(".g.tmp"), "content of g");
  const uint64_t copies = Copies();
  FileAttr attr;
  attr.mtime_ns = int64_t{1400000000} * 1000000000;
  ASSERT_TRUE(fs_->SetAttr(ino, kSetMtime, attr, std::nullopt).ok());
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0640));
  EXPECT_EQ(Copies(), copies);  // neither is a self-copy
  EXPECT_EQ(metrics_.metadata_deferred.load(), 2u);
  ASSERT_TRUE(fs_->Release(created->fh).ok());  // the late RELEASE
  EXPECT_EQ(Copies(), copies);
  EXPECT_EQ(fs_->GetAttr(ino)->attr.mode, static_cast<uint32_t>(S_IFREG | 0640));

  ASSERT_TRUE(fs_->Rename(kRootIno, ".g.tmp", kRootIno, "g", 0).ok());
  EXPECT_EQ(Copies(), copies + 1);  // the rename's copy carried both
  EXPECT_EQ(StoredMode("g"), FileMode(0640));
  EXPECT_EQ(ParseMtime(memory_->head("g")->metadata.at("mtime")), attr.mtime_ns);
  EXPECT_EQ(memory_->contents("g"), "content of g");
  EXPECT_TRUE(NothingRecorded());
}

// A change held while the file is still open for writing goes up with the next upload of its
// data, and is not applied again after it.
TEST_F(MetadataDelayTest, AHeldChangeRidesWithTheNextUpload) {
  auto created = UploadedAndOpen("h", "first");
  ASSERT_TRUE(created);
  const uint64_t ino = created->entry.attr.ino;
  const uint64_t puts = metrics_.put_requests.load();
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
  EXPECT_EQ(StoredMode("h"), FileMode(0644));  // held
  ASSERT_TRUE(fs_->Write(created->fh, 5, Bytes(" second")).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());
  EXPECT_EQ(metrics_.put_requests.load(), puts + 1);
  EXPECT_EQ(memory_->contents("h"), "first second");
  EXPECT_EQ(StoredMode("h"), FileMode(0600));  // with the data
  clock_->Advance(std::chrono::seconds(2));
  const uint64_t copies = Copies();
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(Copies(), copies);  // nothing was left to apply
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, AppliedOnceTheDelayHasPassed) {
  PutObject("a", "x");
  uint64_t ino = LookupIno(kRootIno, "a");
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0640));
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0604));
  ASSERT_TRUE(fs_->UploadDue().ok());  // not due yet
  EXPECT_EQ(Copies(), 0u);
  EXPECT_EQ(StoredMode("a"), "");
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(Copies(), 1u);  // one self-copy for both changes
  EXPECT_EQ(StoredMode("a"), FileMode(0604));
  EXPECT_EQ(memory_->contents("a"), "x");
  EXPECT_TRUE(NothingRecorded());
  EXPECT_EQ(fs_->GetAttr(ino)->attr.mode, static_cast<uint32_t>(S_IFREG | 0604));
}

// The handle's later edit fetches and copies by the copy's new ETag, and goes up, rather than
// find its own version gone and be set aside as another client's change.
TEST_F(MetadataDelayTest, AnEditAfterAHeldChmodFollowsItsNewEtag) {
  std::string stored;
  const Status released = EditAfterAHeldChmod(/*proved=*/true, &stored);
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_TRUE(memory_->contents("f") == stored);
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

// A copy that proved nothing (RGW ignores its condition) may hold another client's bytes: they
// never fill the edit's holes. The edit fails and is set aside, as for another client's change.
TEST_F(MetadataDelayTest, AnEditAfterAnUnprovedCopyIsSetAsideNotMixed) {
  std::string stored;
  const Status released = EditAfterAHeldChmod(/*proved=*/false, &stored);
  EXPECT_EQ(ErrnoFromStatus(released), EIO) << released.ToString();
  EXPECT_EQ(memory_->contents("f"), std::string(1 << 20, 's').replace(100, 5, "first"));
  EXPECT_EQ(SetAside(options_.cache_dir).size(), 1u);
}

// ... but an edit that holds every byte needs none of the copy's: the object the copy made is
// this mount's own (its chmod), not another client's change, and the edit is stored over it.
TEST_F(MetadataDelayTest, AWholeEditAfterAnUnprovedCopyIsStoredOverIt) {
  std::string stored;
  const Status released = EditAfterAHeldChmod(/*proved=*/false, &stored, /*read_first=*/true);
  EXPECT_TRUE(released.ok()) << released.ToString();
  EXPECT_TRUE(memory_->contents("f") == stored);
  EXPECT_EQ(StoredMode("f"), FileMode(0600));
  EXPECT_TRUE(SetAside(options_.cache_dir).empty());
}

TEST_F(MetadataDelayTest, FsyncAndUnmountApplyItAtOnce) {
  PutObject("a", "x");
  PutObject("b", "y");
  uint64_t a = LookupIno(kRootIno, "a");
  uint64_t b = LookupIno(kRootIno, "b");
  ASSERT_NO_FATAL_FAILURE(Chmod(a, 0600));
  ASSERT_NO_FATAL_FAILURE(Chmod(b, 0640));
  auto fh = fs_->Open(a, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Flush(*fh).ok());  // close(2) leaves it waiting
  EXPECT_EQ(StoredMode("a"), "");
  ASSERT_TRUE(fs_->Fsync(*fh, false).ok());
  EXPECT_EQ(StoredMode("a"), FileMode(0600));
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(StoredMode("b"), "");
  ASSERT_TRUE(fs_->FlushAll().ok());  // what unmount does
  EXPECT_EQ(StoredMode("b"), FileMode(0640));
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, ACrashAppliesItAtTheNextMount) {
  PutObject("a", "x");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "a"), 0600));
  ASSERT_TRUE(fs_->SetXattr(LookupIno(kRootIno, "a"), "user.color", "blue", 0).ok());
  // No copy happened; a new process over the same cache directory finds the record.
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  EXPECT_EQ(StoredMode("a"), FileMode(0600));
  auto color = next->GetXattr(next->Lookup(kRootIno, "a")->attr.ino, "user.color");
  ASSERT_TRUE(color.ok()) << color.status().ToString();
  EXPECT_EQ(*color, "blue");
  EXPECT_EQ(memory_->contents("a"), "x");
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, ACrashRecordOfAnObjectReplacedSinceIsDropped) {
  PutObject("a", "old");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "a"), 0600));
  PutObject("a", "written by another client");
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  EXPECT_EQ(StoredMode("a"), "");
  EXPECT_EQ(memory_->contents("a"), "written by another client");
  EXPECT_EQ(Copies(), 0u);
  EXPECT_TRUE(NothingRecorded());
}

// Another client's chmod is a self-copy that keeps the ETag: only the object's Last-Modified
// shows that it came after the held change, which must then not overwrite it. Within the
// clock difference S3 tolerates (15 minutes) the held change still applies.
TEST_F(MetadataDelayTest, ACrashRecordOlderThanAChangeElsewhereIsDropped) {
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t minute_ns = int64_t{60} * 1000000000;
  PutObject("later", "x");
  PutObject("within", "y");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "later"), 0600));
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "within"), 0600));
  for (const char* key : {"later", "within"}) {
    auto before = memory_->head(key);
    ASSERT_TRUE(before.ok());
    CopyOptions elsewhere;
    elsewhere.replace_metadata = {{"mode", FileMode(0604)}};
    ASSERT_TRUE(memory_->copy(*before, key, elsewhere).ok());
    ASSERT_EQ(memory_->head(key)->etag, before->etag);
  }
  memory_->set_mtime("later", now_ns + 20 * minute_ns);
  memory_->set_mtime("within", now_ns + 10 * minute_ns);
  const uint64_t copies = Copies();
  auto next = NewFilesystem();
  ASSERT_TRUE(next->RecoverStaged().ok());
  EXPECT_EQ(StoredMode("later"), FileMode(0604));
  EXPECT_EQ(StoredMode("within"), FileMode(0600));
  EXPECT_EQ(Copies(), copies + 1);  // "within" only
  EXPECT_TRUE(NothingRecorded());
}

// After close(2) or fsync(2) uploaded a file that stays open, its staged copy is only a cache:
// a crash must not upload it again, neither over a held change nor over another client's
// newer object.
TEST_F(MetadataDelayTest, AnUploadedFileStillOpenIsNotUploadedAgainAfterACrash) {
  auto created = UploadedAndOpen("open", "first version");
  ASSERT_TRUE(created);
  const uint64_t ino = created->entry.attr.ino;
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));  // held
  PutObject("other", "z");
  {
    auto other = UploadedAndOpen("other-open", "ours");
    ASSERT_TRUE(other);
    // Another client replaces it while it is still open here.
    PutObject("other-open", "theirs, newer");
  }
  const uint64_t puts = metrics_.put_requests.load();
  auto next = NewFilesystem();  // the first one "crashed" with both files open
  ASSERT_TRUE(next->RecoverStaged().ok());
  EXPECT_EQ(metrics_.put_requests.load(), puts);  // nothing uploaded again
  EXPECT_EQ(memory_->contents("open"), "first version");
  EXPECT_EQ(StoredMode("open"), FileMode(0600));  // the held change, applied
  EXPECT_EQ(memory_->contents("other-open"), "theirs, newer");
  EXPECT_TRUE(NothingRecorded());  // the copies no record names are gone from cache_dir
}

// A file removed while open keeps taking writes into a copy that nothing may upload, not even
// after a crash.
TEST_F(MetadataDelayTest, WritesAfterAnUnlinkAreNotRecoveredAfterACrash) {
  auto created = UploadedAndOpen("gone", "A");
  ASSERT_TRUE(created);
  ASSERT_TRUE(fs_->Unlink(kRootIno, "gone").ok());
  ASSERT_TRUE(fs_->Write(created->fh, 1, Bytes("B")).ok());
  const uint64_t puts = metrics_.put_requests.load();
  auto next = NewFilesystem();  // crash with the file still open
  ASSERT_TRUE(next->RecoverStaged().ok());
  EXPECT_EQ(metrics_.put_requests.load(), puts);
  EXPECT_FALSE(memory_->head("gone").ok());
  EXPECT_TRUE(NothingRecorded());
}

// close(2) reports a failed upload; the kernel's RELEASE that follows tries once more, and when
// that fails too the data waits, staged, for a retry in the background.
TEST_F(MetadataDelayTest, AFailedUploadAtReleaseIsRetriedInTheBackground) {
  auto created = fs_->Create(kRootIno, "retried", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("kept")).ok());
  faults_->FailAll(StoreOp::kPut, TransientError("down"));
  EXPECT_EQ(ErrnoFromStatus(fs_->Flush(created->fh)), EIO);
  EXPECT_FALSE(fs_->Release(created->fh).ok());
  EXPECT_EQ(metrics_.writeback_failures.load(), 1u);
  faults_->Clear();
  ASSERT_TRUE(fs_->UploadDue().ok());  // not due yet
  EXPECT_FALSE(memory_->head("retried").ok());
  clock_->Advance(std::chrono::seconds(11));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(memory_->contents("retried"), "kept");
  EXPECT_TRUE(NothingRecorded());
}

// A held change made before the file was written again is carried by the new data's crash
// record, and its own record goes: replayed after that data, it would undo a later chmod.
TEST_F(MetadataDelayTest, AHeldChangeIsNotReplayedOverALaterOne) {
  fs_.reset();
  options_.writeback = 60;
  fs_ = NewFilesystem();
  auto created = UploadedAndOpen("f", "same bytes");
  ASSERT_TRUE(created);
  const uint64_t ino = created->entry.attr.ino;
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));                          // held
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("same bytes")).ok());  // same ETag again
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0640));
  ASSERT_TRUE(fs_->Release(created->fh).ok());  // waits in the write-back window
  auto next = NewFilesystem();                  // crash
  ASSERT_TRUE(next->RecoverStaged().ok());
  ASSERT_TRUE(next->UploadDue().ok());  // due at once, in the background
  EXPECT_EQ(memory_->contents("f"), "same bytes");
  EXPECT_EQ(StoredMode("f"), FileMode(0640));
  EXPECT_TRUE(NothingRecorded());
}

// A held chmod was acknowledged. A writer starting on the file before it reached the store
// took it along into its data's record, which a crash before the writer's close sets aside:
// the change was lost with it, and so was one made during the write.
TEST_F(MetadataDelayTest, AHeldChangeSurvivesACrashWhileTheFileIsWrittenAgain) {
  PutObject("f", "stored");
  const uint64_t ino = LookupIno(kRootIno, "f");
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));  // held
  auto fh = fs_->Open(ino, O_RDWR);
  ASSERT_TRUE(fh.ok()) << fh.status().ToString();
  ASSERT_TRUE(fs_->Write(*fh, 0, Bytes("torn")).ok());
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0640));  // during the write
  const std::string image = CrashImage();
  RecoverImage(image);
  EXPECT_EQ(memory_->contents("f"), "stored");  // the unfinished data is set aside
  EXPECT_EQ(StoredMode("f"), FileMode(0640));
  // (Staged sparse: of the object, only what was written is there; the rest is a hole.)
  EXPECT_EQ(SetAside(image),
            (std::map<std::string, std::string>{{"f", std::string("torn\0\0", 6)}}));

  // Once close accepts the data, its record carries the change: no other is left.
  ASSERT_TRUE(fs_->Release(*fh).ok());
  EXPECT_EQ(memory_->contents("f"), "torned");
  EXPECT_EQ(StoredMode("f"), FileMode(0640));
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, UnlinkDropsIt) {
  PutObject("a", "x");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "a"), 0600));
  ASSERT_TRUE(fs_->Unlink(kRootIno, "a").ok());
  EXPECT_TRUE(NothingRecorded());
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->UploadDue().ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(Copies(), 0u);
  EXPECT_FALSE(memory_->head("a").ok());
}

TEST_F(MetadataDelayTest, AnUploadCarriesIt) {
  PutObject("a", "v1");
  uint64_t ino = LookupIno(kRootIno, "a");
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
  ASSERT_NO_FATAL_FAILURE(Overwrite(ino, "v2"));
  EXPECT_EQ(Copies(), 0u);
  EXPECT_EQ(memory_->contents("a"), "v2");
  EXPECT_EQ(StoredMode("a"), FileMode(0600));
  EXPECT_TRUE(NothingRecorded());
  EXPECT_EQ(fs_->GetAttr(ino)->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
}

TEST_F(MetadataDelayTest, UserXattrsWaitToo) {
  PutObject("a", "x");
  uint64_t ino = LookupIno(kRootIno, "a");
  ASSERT_TRUE(fs_->SetXattr(ino, "user.color", "blue", 0).ok());
  EXPECT_EQ(Copies(), 0u);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.color"), "blue");
  auto names = fs_->ListXattr(ino);
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), "user.color"), names->end());
  // Reading the ETag applies it: a self-copy may give the object a new one.
  ASSERT_TRUE(fs_->GetXattr(ino, "user.etag").ok());
  EXPECT_EQ(Copies(), 1u);
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, ADirectoryRenameAppliesItFirst) {
  PutObject("d/f", "x");
  uint64_t d = LookupIno(kRootIno, "d");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(d, "f"), 0600));
  ASSERT_TRUE(fs_->Rename(kRootIno, "d", kRootIno, "e", 0).ok());
  EXPECT_EQ(StoredMode("e/f"), FileMode(0600));
  EXPECT_FALSE(memory_->head("d/f").ok());
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, AFailedCopyKeepsItForARetry) {
  PutObject("a", "x");
  uint64_t ino = LookupIno(kRootIno, "a");
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
  faults_->FailNth(StoreOp::kSetAttributes, 1, TransientError("503 SlowDown"));
  clock_->Advance(std::chrono::seconds(2));
  EXPECT_FALSE(fs_->UploadDue().ok());
  EXPECT_EQ(StoredMode("a"), "");
  EXPECT_FALSE(NothingRecorded());
  EXPECT_EQ(fs_->GetAttr(ino)->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  clock_->Advance(std::chrono::seconds(11));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(StoredMode("a"), FileMode(0600));
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, CopyFileRangeOntoAFileWithAHeldChangeCarriesIt) {
  PutObject("src", "new content");
  PutObject("dst", "old");
  uint64_t dst = LookupIno(kRootIno, "dst");
  ASSERT_NO_FATAL_FAILURE(Chmod(dst, 0600));
  auto in = fs_->Open(LookupIno(kRootIno, "src"), O_RDONLY);
  auto out = fs_->Open(dst, O_WRONLY | O_TRUNC);  // what cp does
  ASSERT_TRUE(in.ok() && out.ok());
  auto n = fs_->CopyFileRange(*in, 0, *out, 0, 1 << 20, 0);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 11u);
  ASSERT_TRUE(fs_->Release(*in).ok());
  ASSERT_TRUE(fs_->Release(*out).ok());
  EXPECT_EQ(Copies(), 1u);  // the server-side copy, with the held mode
  EXPECT_EQ(memory_->contents("dst"), "new content");
  EXPECT_EQ(StoredMode("dst"), FileMode(0600));
  auto e = fs_->GetAttr(dst);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.size, 11u);
  EXPECT_EQ(e->attr.mode, static_cast<uint32_t>(S_IFREG | 0600));
  EXPECT_TRUE(NothingRecorded());
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(Copies(), 1u);
}

TEST_F(MetadataDelayTest, AFailedRenameOntoAFileLeavesItsHeldChange) {
  PutObject("t", "target");
  PutObject("s", "source");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "t"), 0600));
  LookupIno(kRootIno, "s");
  // The target's change goes first (a self-copy); the rename's copy fails.
  faults_->FailNth(StoreOp::kCopy, 1, TransientError("503 SlowDown"));
  EXPECT_FALSE(fs_->Rename(kRootIno, "s", kRootIno, "t", 0).ok());
  EXPECT_EQ(memory_->contents("t"), "target");
  EXPECT_EQ(StoredMode("t"), FileMode(0600));
  EXPECT_EQ(memory_->contents("s"), "source");
}

TEST_F(MetadataDelayTest, OpeningAMultipartObjectAppliesItFirst) {
  // A self-copy gives an object with a multipart ETag a new one: a handle opened before it
  // would fail its reads.
  const std::string big(9 << 20, 'b');
  PutObject("big", big);
  ASSERT_TRUE(memory_->head("big")->etag.is_multipart());
  uint64_t ino = LookupIno(kRootIno, "big");
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
  EXPECT_EQ(Copies(), 0u);
  EXPECT_EQ(ReadFile(*fs_, ino), big);
  EXPECT_EQ(Copies(), 1u);
  EXPECT_EQ(StoredMode("big"), FileMode(0600));
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, ALaterUploadInTheQueueDoesNotHoldItBack) {
  fs_.reset();
  options_.writeback = 60;
  fs_ = NewFilesystem();
  auto created = fs_->Create(kRootIno, "a", 0644, O_WRONLY | O_CREAT | O_EXCL);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(fs_->Write(created->fh, 0, Bytes("x")).ok());
  ASSERT_TRUE(fs_->Release(created->fh).ok());  // its upload is due in 60 s
  uint64_t ino = created->entry.attr.ino;
  ASSERT_TRUE(fs_->GetXattr(ino, "user.etag").ok());  // uploads it now
  ASSERT_NO_FATAL_FAILURE(Chmod(ino, 0600));
  EXPECT_EQ(StoredMode("a"), FileMode(0644));
  clock_->Advance(std::chrono::seconds(2));
  ASSERT_TRUE(fs_->UploadDue().ok());
  EXPECT_EQ(StoredMode("a"), FileMode(0600));
  EXPECT_TRUE(NothingRecorded());
}

TEST_F(MetadataDelayTest, WithoutDelayEachChangeIsACopyAtOnce) {
  fs_.reset();
  options_.metadata_delay = 0;
  fs_ = NewFilesystem();
  PutObject("a", "x");
  ASSERT_NO_FATAL_FAILURE(Chmod(LookupIno(kRootIno, "a"), 0600));
  EXPECT_EQ(Copies(), 1u);
  EXPECT_EQ(StoredMode("a"), FileMode(0600));
  EXPECT_EQ(metrics_.metadata_deferred.load(), 0u);
}

// A chmod held when a writer began travels with its data; that data unfinished and set aside,
// the change still applies to the stored file, as it would after a crash.
TEST_F(MetadataDelayTest, AHeldChangeOutlivesAnUnfinishedWrite) {
  ASSERT_NO_FATAL_FAILURE(ChmodOutlivesAnUnfinishedWrite(/*before=*/true));
  for (const auto& entry : std::filesystem::directory_iterator(options_.cache_dir)) {
    EXPECT_EQ(entry.path().filename(), "unfinished") << "a record is left: " << entry.path();
  }
}

// A chmod made while the writer wrote, with nothing held from before, went with the data: set
// aside, the stored file gets it all the same, as a change of it held as usual.
TEST_F(MetadataDelayTest, AChmodDuringAnUnfinishedWriteStillApplies) {
  ChmodOutlivesAnUnfinishedWrite(/*before=*/false);
}

}  // namespace
}  // namespace objfs
