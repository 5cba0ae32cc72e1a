#include "cache/staging.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "cache/codec.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-staging-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(StagingTest, WritesReadsAndTruncates) {
  auto area = StagingArea::Open(dir_ + "/a/b");
  ASSERT_TRUE(area.ok()) << area.status().ToString();
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  StagedFile& f = **file;
  ASSERT_TRUE(f.WriteAt(0, Bytes("hello")).ok());
  ASSERT_TRUE(f.WriteAt(10, Bytes("world")).ok());
  EXPECT_EQ(f.size(), 15u);
  std::string buf(20, 'x');
  auto n = f.ReadAt(0, std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), 20));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 15u);
  EXPECT_EQ(buf.substr(0, 15), std::string("hello\0\0\0\0\0world", 15));
  ASSERT_TRUE(f.Truncate(3).ok());
  EXPECT_EQ(f.size(), 3u);
  EXPECT_EQ(f.Source().size(), 3u);
  std::string path = f.data_path();
  EXPECT_TRUE(std::filesystem::exists(path));
  f.Remove();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/a/b"));
}

TEST_F(StagingTest, LeftoversCarryKeyAndMetadata) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->MarkWriting("dir/na=me\nx", {{"mode", "33188"}}).ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("data")).ok());
    ASSERT_TRUE((*file)->MarkAccepted("dir/na=me\nx", {{"mode", "33261"}, {"x", "a=b"}}).ok());
  }  // closed, not removed: what an unclean exit leaves
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, "dir/na=me\nx");
  EXPECT_EQ((*left)[0].metadata.at("mode"), "33261");
  EXPECT_EQ((*left)[0].metadata.at("x"), "a=b");
  EXPECT_EQ(std::filesystem::file_size((*left)[0].data_path), 4u);
  EXPECT_EQ((*left)[0].state, StagedUploadRecord::State::kAccepted);
  EXPECT_EQ((*left)[0].size, 4u);
  EXPECT_TRUE((*left)[0].publishable());
}

// A record whose data file is gone (a stop between Remove's two unlinks, which take the data
// first; or data removed by hand) is removed and named, not skipped by every mount for ever.
TEST_F(StagingTest, ARecordWithoutItsDataIsRemovedAndNamed) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  std::string meta;
  {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("data")).ok());
    ASSERT_TRUE((*file)->MarkAccepted("gone", {}).ok());
    ASSERT_EQ(::unlink((*file)->data_path().c_str()), 0);
    meta = (*file)->data_path().substr(0, (*file)->data_path().size() - 5) + ".meta";
  }
  ASSERT_TRUE(std::filesystem::exists(meta));
  std::vector<StagedLeftover> without_data;
  auto left = (*area)->Leftovers(nullptr, &without_data);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  ASSERT_EQ(without_data.size(), 1u);
  EXPECT_EQ(without_data[0].key, "gone");
  EXPECT_EQ(without_data[0].meta_path, meta);
  EXPECT_EQ(without_data[0].state, StagedUploadRecord::State::kAccepted);
  EXPECT_FALSE(std::filesystem::exists(meta));
  EXPECT_TRUE(std::filesystem::is_empty(dir_));

  // One that cannot be removed (here a directory) is not said to be.
  ASSERT_EQ(::mkdir((dir_ + "/x.meta").c_str(), 0700), 0);
  without_data.clear();
  left = (*area)->Leftovers(nullptr, &without_data);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  EXPECT_TRUE(without_data.empty());
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/x.meta"));
}

// The encryption of the object the data came from goes into the record, also when it is learnt
// after the record was written, and stays through a rename (Describe), a clone and an adoption.
TEST_F(StagingTest, LeftoversCarryTheEncryptionOfTheObjectTheDataCameFrom) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  const AtRestEncryption kms{"aws:kms", "testkey-2"};
  {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("data")).ok());
    ASSERT_TRUE((*file)->MarkAccepted("old", {{"mode", "33188"}}).ok());
    ASSERT_TRUE((*file)->SetEncryption(kms).ok());  // learnt later: the record is rewritten
    ASSERT_TRUE((*file)->Describe("new", {{"mode", "33188"}}).ok());
    auto clone = (*area)->Clone(**file);
    ASSERT_TRUE(clone.ok());
    EXPECT_EQ((*clone)->encryption(), kms);
    (*clone)->Remove();
  }
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, "new");
  EXPECT_EQ((*left)[0].encryption, kms);
  auto adopted = (*area)->Adopt((*left)[0]);
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ((*adopted)->encryption(), kms);
  // A file created here has none, which is known too.
  ASSERT_TRUE((*adopted)->SetEncryption(AtRestEncryption{}).ok());
  left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].encryption, AtRestEncryption{});
}

// The record says what the upload asked of the key it names, and only of that key: after a
// rename it names none. The next mount's upload asks the same.
TEST_F(StagingTest, LeftoversCarryTheConditionOfTheUploadUnderItsKey) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  const UploadCondition edit{ETag::Parse("0123456789abcdef0123456789abcdef"), false};
  std::string renamed_path;
  {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("data")).ok());
    (*file)->SetCondition("log", edit);
    ASSERT_TRUE((*file)->MarkAccepted("log", {{"mode", "33188"}}).ok());
    auto created = (*area)->Create();
    ASSERT_TRUE(created.ok());
    (*created)->SetCondition("new", UploadCondition{std::nullopt, true});
    ASSERT_TRUE((*created)->MarkAccepted("new", {{"mode", "33188"}}).ok());
    ASSERT_TRUE((*created)->Describe("moved", {{"mode", "33188"}}).ok());
    renamed_path = (*created)->data_path();
  }
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  for (const StagedLeftover& l : *left) {
    SCOPED_TRACE(l.key);
    EXPECT_EQ(l.condition, l.key == "log" ? edit : UploadCondition{});
    if (l.key != "log") {
      EXPECT_EQ(l.data_path, renamed_path);
    }
    auto adopted = (*area)->Adopt(l);
    ASSERT_TRUE(adopted.ok());
    EXPECT_EQ((*adopted)->ConditionOf(l.key), l.condition);
  }
}

// A record that names no object (an empty name; a NUL in it) leaves its data where it is, named
// as unreadable: uploaded, it would go to the bucket itself, or be refused for ever.
TEST_F(StagingTest, ARecordNamingNoObjectLeavesItsDataAndNamesIt) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  for (const std::string& key : {std::string(), std::string("a\0b", 3)}) {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("data")).ok());
    ASSERT_TRUE((*file)->MarkAccepted(key, {}).ok());
    std::vector<std::string> unreadable;
    auto left = (*area)->Leftovers(&unreadable);
    ASSERT_TRUE(left.ok());
    EXPECT_TRUE(left->empty());
    EXPECT_EQ(unreadable, std::vector<std::string>{(*file)->data_path()});
    (*file)->Remove();
  }
}

// Writes that fail part way, here at the file size limit as on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old_), 0);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
    struct rlimit limited = old_;
    limited.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0) << "the limit did not take";
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  struct rlimit old_ {};
  sighandler_t old_handler_;
};

TEST_F(StagingTest, AFailedWriteLeavesNoBytesBehind) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok()) << area.status().ToString();
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  StagedFile& f = **file;
  ASSERT_TRUE(f.WriteAt(0, Bytes("head")).ok());
  Status failed;
  {
    FileSizeLimit limit(8192);
    failed = f.WriteAt(4, Bytes(std::string(16384, 'B')));
  }
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(f.size(), 4u);
  // Extending the file later shows zeros, not the bytes the failed write got through.
  ASSERT_TRUE(f.Truncate(100).ok());
  std::string buf(100, 'x');
  auto n = f.ReadAt(0, std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), 100));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 100u);
  EXPECT_EQ(buf, "head" + std::string(96, '\0'));
}

TEST_F(StagingTest, ASidecarThatCannotBeWrittenLeavesTheOldOne) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok()) << area.status().ToString();
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->MarkWriting("old-key", {{"mode", "33188"}}).ok());
  Status failed;
  {
    FileSizeLimit limit(0);
    failed = (*file)->Describe("new-key", {{"mode", "33188"}});
  }
  EXPECT_FALSE(failed.ok());
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, "old-key");
  // Written once there is room again.
  EXPECT_TRUE((*file)->Describe("new-key", {{"mode", "33188"}}).ok());
  left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, "new-key");
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The sidecar is one StagedUploadRecord in its codec; one that an earlier objfs wrote as text
// is still read, so that what it staged is still uploaded.
TEST_F(StagingTest, SidecarsAreRecordsAndTextOnesOfEarlierVersionsAreStillRead) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->MarkWriting("new/key", {{"mode", "33188"}}).ok());
  const std::string meta_path =
      (*file)->data_path().substr(0, (*file)->data_path().size() - 5) + ".meta";
  auto record = StagedUploadCodec::Decode(ReadFile(meta_path));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(*record, (StagedUploadRecord{"new/key", {{"mode", "33188"}}}));

  WriteFile(dir_ + "/1-0.data", "old data");
  WriteFile(dir_ + "/1-0.meta", "old%0Akey\nmode=33261\nx=a%3Db\n");
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  const StagedLeftover& old = (*left)[0].key == "new/key" ? (*left)[1] : (*left)[0];
  EXPECT_EQ(old.key, "old\nkey");
  EXPECT_EQ(old.metadata, (Metadata{{"mode", "33261"}, {"x", "a=b"}}));
  EXPECT_EQ(old.data_path, dir_ + "/1-0.data");
  // It did not say whether a close had accepted the data: never uploaded, only set aside.
  EXPECT_FALSE(old.publishable());

  std::string key;
  Metadata md;
  EXPECT_FALSE(DecodeLegacySidecar("", &key, &md));
  EXPECT_FALSE(DecodeLegacySidecar("key\nnoequals\n", &key, &md));
  EXPECT_FALSE(DecodeLegacySidecar("bad%zz\n", &key, &md));
}

// A sidecar cut short (a power loss before the disk had all of it) is not trusted: a shorter
// list of metadata would upload the data with the wrong mode or mtime. The data stays, and the
// caller is told which file it is.
TEST_F(StagingTest, ADamagedSidecarLeavesItsDataAndNamesIt) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  std::string data_path, meta_path;
  {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->MarkWriting("k", {{"mode", "33188"}, {"mtime", "1700000000"}}).ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("data")).ok());
    data_path = (*file)->data_path();
    meta_path = data_path.substr(0, data_path.size() - 5) + ".meta";
  }
  const std::string whole = ReadFile(meta_path);
  for (size_t cut : {whole.size() - 1, whole.size() - 4, whole.size() / 2, size_t{1}, size_t{0}}) {
    WriteFile(meta_path, std::string_view(whole).substr(0, cut));
    std::vector<std::string> unreadable;
    auto left = (*area)->Leftovers(&unreadable);
    ASSERT_TRUE(left.ok());
    EXPECT_TRUE(left->empty()) << "cut to " << cut;
    EXPECT_EQ(unreadable, std::vector<std::string>{data_path}) << "cut to " << cut;
    EXPECT_EQ(ReadFile(data_path), "data");
  }
}

// Data no record names (a copy already uploaded, or the data of a file removed while open) is
// deleted at the next start; data whose record is there, even damaged, is not.
TEST_F(StagingTest, RemoveUnrecordedDeletesOnlyDataNoRecordNames) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  std::string orphan_path, kept_path, damaged_path;
  {
    auto orphan = (*area)->Create();
    auto kept = (*area)->Create();
    auto damaged = (*area)->Create();
    ASSERT_TRUE(orphan.ok() && kept.ok() && damaged.ok());
    ASSERT_TRUE((*orphan)->MarkWriting("uploaded", {}).ok());
    ASSERT_TRUE((*kept)->MarkWriting("pending", {}).ok());
    ASSERT_TRUE((*damaged)->MarkWriting("damaged", {}).ok());
    ASSERT_TRUE((*orphan)->WriteAt(0, Bytes("12345")).ok());
    ASSERT_TRUE((*kept)->WriteAt(0, Bytes("abc")).ok());
    ASSERT_TRUE((*damaged)->WriteAt(0, Bytes("xyz")).ok());
    (*orphan)->Orphan();
    orphan_path = (*orphan)->data_path();
    kept_path = (*kept)->data_path();
    damaged_path = (*damaged)->data_path();
  }
  WriteFile(damaged_path.substr(0, damaged_path.size() - 5) + ".meta", "\x03garbage");
  size_t files = 0;
  auto freed = (*area)->RemoveUnrecorded(&files);
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(*freed, 5u);
  EXPECT_EQ(files, 1u);
  EXPECT_FALSE(std::filesystem::exists(orphan_path));
  EXPECT_EQ(ReadFile(kept_path), "abc");
  EXPECT_EQ(ReadFile(damaged_path), "xyz");
}

TEST_F(StagingTest, PendingAttrsRecordsAreLeftoversUntilRemoved) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  const ETag etag = ETag::Parse("\"5d41402abc4b2a76b9719d911017c592\"");
  auto record = (*area)->CreateAttrs("d/f", etag, {{"mode", "33188"}});
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_TRUE((*record)->Describe("d/f", etag, {{"mode", "33152"}}).ok());
  // Neither a staging file nor its sidecar.
  EXPECT_TRUE((*area)->Leftovers()->empty());
  auto left = (*area)->AttrsLeftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, "d/f");
  EXPECT_EQ((*left)[0].etag, etag);
  EXPECT_EQ((*left)[0].metadata.at("mode"), "33152");
  (*record)->Remove();
  EXPECT_TRUE((*area)->AttrsLeftovers()->empty());
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

// A damaged first byte must not send a binary record to the reader of the old text form,
// which would take the record's bytes for a key and upload the data there.
TEST_F(StagingTest, NoDamagedSidecarIsReadAsTheOldTextForm) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  std::string data_path, meta_path;
  {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->MarkWriting("logs/app.log", {}).ok());
    data_path = (*file)->data_path();
    meta_path = data_path.substr(0, data_path.size() - 5) + ".meta";
  }
  const std::string whole = ReadFile(meta_path);
  for (int value = 0; value < 256; ++value) {
    if (value == StagedUploadCodec::kTag) continue;
    std::string damaged = whole;
    damaged[0] = static_cast<char>(value);
    WriteFile(meta_path, damaged);
    std::vector<std::string> unreadable;
    auto left = (*area)->Leftovers(&unreadable);
    ASSERT_TRUE(left.ok());
    ASSERT_TRUE(left->empty()) << "byte 0 = " << value << " read as key " << (*left)[0].key;
    EXPECT_EQ(unreadable.size(), 1u);
    // Even where the damage happens to end the record in a line end.
    std::string key;
    Metadata md;
    EXPECT_FALSE(DecodeLegacySidecar(damaged + "\n", &key, &md)) << "byte 0 = " << value;
  }
}

// A held change that an earlier objfs wrote as text is still applied.
TEST_F(StagingTest, HeldChangesInTheOldTextFormAreStillRead) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  WriteFile(dir_ + "/1-0.attrs", "0123456789abcdef0123456789abcdef-3\nd%0Af\nmode=33152\n");
  WriteFile(dir_ + "/1-1.attrs", "\nno-etag\nmtime=1700000000\n");
  WriteFile(dir_ + "/1-2.attrs", "etag-only");
  std::vector<std::string> dropped;
  auto left = (*area)->AttrsLeftovers(&dropped);
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  const AttrsLeftover& a = (*left)[0].key == "no-etag" ? (*left)[1] : (*left)[0];
  const AttrsLeftover& b = (*left)[0].key == "no-etag" ? (*left)[0] : (*left)[1];
  EXPECT_EQ(a.key, "d\nf");
  EXPECT_EQ(a.etag, ETag::Parse("0123456789abcdef0123456789abcdef-3"));
  EXPECT_EQ(a.metadata, (Metadata{{"mode", "33152"}}));
  EXPECT_TRUE(b.etag.empty());
  EXPECT_EQ(b.metadata, (Metadata{{"mtime", "1700000000"}}));
  EXPECT_EQ(dropped, std::vector<std::string>{dir_ + "/1-2.attrs"});
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/1-2.attrs"));
}

// A held metadata change cut short is deleted unapplied: applying part of it would drop the
// metadata it lost (REPLACE sets the whole of it).
TEST_F(StagingTest, ADamagedPendingAttrsRecordIsDropped) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  const ETag etag = ETag::Parse("\"0123456789abcdef0123456789abcdef-3\"");
  auto record = (*area)->CreateAttrs("d/f", etag, {{"mode", "33152"}, {"mtime", "1700000000"}});
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  const std::string path = (*record)->path();
  auto decoded = PendingAttrsCodec::Decode(ReadFile(path));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->etag, etag);
  const std::string whole = ReadFile(path);
  WriteFile(path, std::string_view(whole).substr(0, whole.size() - 20));
  auto left = (*area)->AttrsLeftovers();
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Names in the cache directory are predictable (PID and a counter). A symbolic link planted
// under one must not make objfs write through it: the file it names stays as it was.
TEST_F(StagingTest, APlantedSymlinkIsNotFollowed) {
  auto area = StagingArea::Open(dir_ + "/cache");
  ASSERT_TRUE(area.ok()) << area.status().ToString();
  const std::string target = dir_ + "/victim";
  {
    std::ofstream out(target);
    out << "precious";
  }
  const std::string pid = std::to_string(::getpid());
  for (int id = 0; id < 4; ++id) {
    const std::string base = dir_ + "/cache/" + pid + "-" + std::to_string(id);
    // A record's temporary name for even ids, the data's name for odd ones.
    const std::string link = base + (id % 2 == 0 ? ".meta.tmp" : ".data");
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link;
  }
  for (int i = 0; i < 4; ++i) {
    auto file = (*area)->Create();
    if (file.ok()) {
      (void)(*file)->MarkWriting("key", {{"mode", "33188"}});
      (void)(*file)->WriteAt(0, Bytes("attacker sees this"));
      (void)(*file)->MarkAccepted("key", {});
    }
  }
  std::ifstream in(target);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "precious");
  struct stat st {};
  ASSERT_EQ(::lstat(target.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 8);
}

TEST(StagingOpenTest, RefusesEmptyDirectory) { EXPECT_FALSE(StagingArea::Open("").ok()); }

}  // namespace
}  // namespace objfs

namespace objfs {
namespace {

TEST_F(StagingTest, OnlyAcceptedDataOfTheRecordedSizeIsPublishable) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  // Fetched or uploaded copies have no record at all: nothing to find.
  ASSERT_TRUE((*file)->WriteAt(0, Bytes("fetched")).ok());
  EXPECT_FALSE((*file)->state().has_value());
  EXPECT_TRUE((*area)->Leftovers()->empty());
  // Being written: found, not publishable.
  ASSERT_TRUE((*file)->MarkWriting("k", {}).ok());
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_FALSE((*left)[0].publishable());
  // Accepted at 7 bytes: publishable while the data has those 7 bytes.
  ASSERT_TRUE((*file)->MarkAccepted("k", {}).ok());
  left = (*area)->Leftovers();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_TRUE((*left)[0].publishable());
  // Cut short since (a power loss took the tail): set aside, not uploaded.
  ASSERT_EQ(::truncate((*file)->data_path().c_str(), 3), 0);
  EXPECT_FALSE((*left)[0].publishable());
  // A rename keeps the state; Orphan and Restore take the record away and back.
  ASSERT_EQ(::truncate((*file)->data_path().c_str(), 7), 0);
  ASSERT_TRUE((*file)->Describe("renamed", {{"mode", "33188"}}).ok());
  auto was = (*file)->Orphan();
  EXPECT_EQ(was, StagedUploadRecord::State::kAccepted);
  EXPECT_TRUE((*area)->Leftovers()->empty());
  ASSERT_TRUE((*file)->Restore(was).ok());
  left = (*area)->Leftovers();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].key, "renamed");
  EXPECT_TRUE((*left)[0].publishable());
}

TEST_F(StagingTest, ACloneHasTheSameBytesAndNoRecord) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->WriteAt(0, Bytes("accepted version")).ok());
  ASSERT_TRUE((*file)->Truncate(20).ok());  // a hole at the end
  ASSERT_TRUE((*file)->MarkAccepted("k", {}).ok());
  auto copy = (*area)->Clone(**file);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_FALSE((*copy)->state().has_value());
  ASSERT_EQ((*copy)->size(), 20u);
  ASSERT_TRUE((*copy)->WriteAt(0, Bytes("XX")).ok());
  EXPECT_EQ(ReadFile((*copy)->data_path()), std::string("XXcepted version\0\0\0\0", 20));
  EXPECT_EQ(ReadFile((*file)->data_path()), std::string("accepted version\0\0\0\0", 20));
}

// A sparse file: a hole of its base's size; writes and fetched bytes are present, a truncate
// cuts the base off; its record carries all of that, and the next mount reads it back.
TEST_F(StagingTest, ASparseFileRecordsItsBaseAndWhatItHolds) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  auto file = (*area)->Create();
  ASSERT_TRUE(file.ok());
  StagedFile& f = **file;
  const ETag etag = ETag::Parse("0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(f.SetBase("base/key", etag, 1000).ok());
  EXPECT_EQ(f.size(), 1000u);
  EXPECT_EQ(f.MissingBase(0, 1000), (std::vector<ExtentSet::Range>{{0, 1000}}));
  ASSERT_TRUE(f.WriteAt(100, Bytes("written")).ok());
  // A fetch fills around the written bytes, never over them.
  ASSERT_TRUE(f.FillBase(96, Bytes("bbbbBBBBBBBbbbb")).ok());
  EXPECT_EQ(ReadFile(f.data_path()).substr(96, 15), "bbbbwrittenbbbb");
  ASSERT_TRUE(f.Truncate(900).ok());
  ASSERT_TRUE(f.WriteAt(950, Bytes("end")).ok());
  EXPECT_EQ(f.base_limit(), 900u);
  EXPECT_EQ(f.MissingBase(0, 2000), (std::vector<ExtentSet::Range>{{0, 96}, {111, 900}}));
  ASSERT_TRUE(f.MarkAccepted("k", {{"mode", "33188"}}).ok());

  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  const StagedLeftover& l = (*left)[0];
  EXPECT_EQ(l.base_key, "base/key");
  EXPECT_EQ(l.base_etag, etag);
  EXPECT_EQ(l.base_size, 1000u);
  EXPECT_EQ(l.base_limit, 900u);
  EXPECT_EQ(l.present, f.present());
  EXPECT_TRUE(l.publishable());
  auto adopted = (*area)->Adopt(l);
  ASSERT_TRUE(adopted.ok());
  EXPECT_EQ((*adopted)->base_key(), "base/key");
  EXPECT_EQ((*adopted)->base_limit(), 900u);
  EXPECT_EQ((*adopted)->MissingBase(0, 2000), f.MissingBase(0, 2000));

  // A clone carries the base and what is present; only that is copied.
  auto copy = (*area)->Clone(f);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_EQ((*copy)->size(), 953u);
  EXPECT_EQ((*copy)->base_key(), "base/key");
  EXPECT_EQ((*copy)->base_etag(), etag);
  EXPECT_EQ((*copy)->base_limit(), 900u);
  EXPECT_EQ((*copy)->present(), f.present());
  EXPECT_EQ(ReadFile((*copy)->data_path()).substr(96, 15), "bbbbwrittenbbbb");
  EXPECT_EQ(ReadFile((*copy)->data_path()).substr(950), "end");

  // Once everything below base_limit is there, the file forgets its base.
  ASSERT_TRUE(f.FillBase(0, Bytes(std::string(900, 'z'))).ok());
  EXPECT_FALSE(f.has_base());
  EXPECT_TRUE(f.MissingBase(0, 2000).empty());
  EXPECT_EQ(ReadFile(f.data_path()).substr(92, 23), "zzzzbbbbwrittenbbbbzzzz");
}

TEST_F(StagingTest, SetAsideMovesTheDataUnderItsKeysName) {
  auto area = StagingArea::Open(dir_);
  ASSERT_TRUE(area.ok());
  for (int i = 0; i < 2; ++i) {
    auto file = (*area)->Create();
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->MarkWriting("dir/half %.log", {}).ok());
    ASSERT_TRUE((*file)->WriteAt(0, Bytes("torn " + std::to_string(i))).ok());
  }
  auto left = (*area)->Leftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  std::set<std::string> kept;
  for (const StagedLeftover& l : *left) {
    auto path = (*area)->SetAside(l);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    kept.insert(*path);
    EXPECT_FALSE(std::filesystem::exists(l.data_path));
    EXPECT_FALSE(std::filesystem::exists(l.meta_path));
  }
  EXPECT_EQ(kept, (std::set<std::string>{dir_ + "/unfinished/dir%2Fhalf %25.log",
                                         dir_ + "/unfinished/dir%2Fhalf %25.log.1"}));
  EXPECT_TRUE((*area)->Leftovers()->empty());
  EXPECT_EQ(*(*area)->RemoveUnrecorded(), 0u);
}

}  // namespace
}  // namespace objfs
