// The SFTP client against a real OpenSSH sshd on loopback: the backend conformance suite, and
// what is particular to SFTP (pipelined reads, server-side copy-data, host keys, authentication,
// attributes of files objfs did not write, temporary names).
#include "backend/sftp/sftp_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "backend/md5.h"
#include "backend/metrics.h"
#include "tests/conformance/object_store_conformance.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs {
namespace {

namespace fs = std::filesystem;
using sftp::SftpStore;
using sftp::SftpStoreOptions;

std::string CurrentTestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info != nullptr ? std::string(info->name()) : std::string("sftp");
}

SftpStoreOptions OptionsFor(const std::string& root) {
  const testing::SftpTestServer& server = testing::SharedSftpServer();
  SftpStoreOptions o;
  o.host = server.host;
  o.port = server.port;
  o.user = server.user;
  o.root = root;
  o.identity_files = {server.key_path};
  o.known_hosts = server.known_hosts;
  return o;
}

std::shared_ptr<SftpStore> MakeStore(SftpStoreOptions options) {
  auto store = SftpStore::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::shared_ptr<SftpStore>(std::move(store).value()) : nullptr;
}

std::shared_ptr<ObjectStore> FreshDirectoryStore() {
  return MakeStore(OptionsFor(testing::MakeTestDir(CurrentTestName())));
}

INSTANTIATE_TEST_SUITE_P(Sshd, ObjectStoreConformance,
                         ::testing::Values(ConformanceBackend{"SftpOnSshd", FreshDirectoryStore, 0,
                                                              0, 0, /*empty_key_segments=*/false,
                                                              /*max_key_segment_bytes=*/255,
                                                              /*key_may_also_be_a_prefix=*/false}),
                         ConformanceBackendName);

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

std::string ReadLocalFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class SftpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::MakeTestDir(CurrentTestName());
    SftpStoreOptions o = OptionsFor(root_);
    o.metrics = &metrics_;
    store_ = MakeStore(o);
    ASSERT_NE(store_, nullptr);
    char tmpl[] = "/tmp/objfs-sftp-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    scratch_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(scratch_, ignored);
  }

  Result<ObjectInfo> Put(const std::string& key, const std::string& data, Metadata meta = {}) {
    MemorySource src(data);
    PutOptions o;
    o.metadata = std::move(meta);
    return store_->put(key, src, o);
  }

  // `ssh-keygen -l` of the server's pinned host key: "SHA256:...".
  static std::string PinnedFingerprint() {
    testing::CommandResult r =
        testing::RunCommand({"ssh-keygen", "-l", "-f", testing::SharedSftpServer().known_hosts});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::istringstream fields(r.out);
    std::string bits, fingerprint;
    fields >> bits >> fingerprint;
    EXPECT_EQ(fingerprint.rfind("SHA256:", 0), 0u) << r.out;
    return fingerprint;
  }

  std::string HostPattern() const {
    const testing::SftpTestServer& server = testing::SharedSftpServer();
    return "[" + server.host + "]:" + std::to_string(server.port);
  }

  // A new ed25519 key pair in the scratch directory; returns the private key's path.
  std::string NewKey(const std::string& name) {
    std::string path = scratch_ + "/" + name;
    testing::CommandResult r =
        testing::RunCommand({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }

  Metrics metrics_;
  std::string root_;
  std::string scratch_;
  std::shared_ptr<SftpStore> store_;
};

TEST_F(SftpStoreTest, PipelinedReadUsesServerMaxReadLength) {
  const size_t size = 64u << 20;
  const std::string data = Pattern(size, 1);
  ASSERT_TRUE(Put("big", data).ok());
  const uint64_t max_read = store_->server_limits().max_read;
  // OpenSSH announces limits@openssh.com with reads far above the 32 KiB fallback.
  EXPECT_GT(max_read, 32768u);

  std::string back(size, '\0');
  const uint64_t before = metrics_.sftp_read_requests.load();
  Result<size_t> n = store_->read(
      "big", 0, std::span<std::byte>(reinterpret_cast<std::byte*>(back.data()), back.size()),
      nullptr);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, size);
  EXPECT_TRUE(back == data) << "the bytes read differ from the bytes written";
  const uint64_t requests = metrics_.sftp_read_requests.load() - before;
  EXPECT_GE(requests, (size + max_read - 1) / max_read);
  EXPECT_LE(requests, (size + max_read - 1) / max_read + 2);
}

TEST_F(SftpStoreTest, CopyDataMovesNoBytesThroughThisProcess) {
  ASSERT_TRUE(store_->capabilities().server_side_copy);
  const std::string data = Pattern(8u << 20, 2);
  ASSERT_TRUE(Put("src/file", data, {{"mode", "33188"}}).ok());
  Result<ObjectInfo> src = store_->head("src/file");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_TRUE(src->etag.is_plain_md5());

  const uint64_t reads = metrics_.sftp_read_requests.load();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  Result<ObjectInfo> copied = store_->copy(*src, "dst/copied", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(metrics_.sftp_read_requests.load(), reads);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  EXPECT_EQ(copied->etag, src->etag);
  EXPECT_EQ(copied->size, data.size());
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "dst/copied") == data);
  Result<ObjectInfo> head = store_->head("dst/copied");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, src->etag);
  EXPECT_EQ(head->metadata, (Metadata{{"mode", "33188"}}));
}

TEST_F(SftpStoreTest, CopyWithoutCopyDataStreamsAndHashes) {
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.use_copy_data = false;
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->capabilities().server_side_copy);
  const std::string data = Pattern((3u << 20) + 17, 4);
  ASSERT_TRUE(Put("src", data).ok());
  Result<ObjectInfo> src = store->head("src");
  ASSERT_TRUE(src.ok());
  const uint64_t reads = metrics_.sftp_read_requests.load();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  Result<ObjectInfo> copied = store->copy(*src, "dst", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_GT(metrics_.sftp_read_requests.load(), reads);
  EXPECT_EQ(metrics_.bytes_hashed.load() - hashed, data.size());
  EXPECT_EQ(copied->etag, src->etag);
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "dst") == data);
}

TEST_F(SftpStoreTest, UnknownHostKeyIsRefusedWithItsFingerprint) {
  std::string known_hosts = scratch_ + "/known_hosts";
  std::ofstream(known_hosts).close();
  SftpStoreOptions o = OptionsFor(root_);
  o.known_hosts = known_hosts;
  auto store = SftpStore::Create(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kPermissionDenied) << store.status().ToString();
  EXPECT_NE(store.status().message().find(PinnedFingerprint()), std::string::npos)
      << store.status().ToString();
  EXPECT_NE(store.status().message().find("unknown"), std::string::npos);
  EXPECT_EQ(fs::file_size(known_hosts), 0u) << "a refused key must not be recorded";
}

TEST_F(SftpStoreTest, AcceptNewHostKeyRecordsItForTheNextConnection) {
  std::string known_hosts = scratch_ + "/known_hosts";
  std::ofstream(known_hosts).close();
  SftpStoreOptions o = OptionsFor(root_);
  o.known_hosts = known_hosts;
  o.accept_new_host_key = true;
  auto first = SftpStore::Create(o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(fs::file_size(known_hosts), 0u);

  o.accept_new_host_key = false;
  auto second = SftpStore::Create(o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE((*second)->put("k", MemorySource(std::string_view("v")), PutOptions{}).ok());
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "k"), "v");
}

TEST_F(SftpStoreTest, ChangedHostKeyIsRefused) {
  std::string other = NewKey("other_host_key");
  std::string pub = ReadLocalFile(other + ".pub");
  std::istringstream fields(pub);
  std::string type, blob;
  fields >> type >> blob;
  std::string known_hosts = scratch_ + "/known_hosts";
  std::ofstream(known_hosts) << HostPattern() << " " << type << " " << blob << "\n";

  SftpStoreOptions o = OptionsFor(root_);
  o.known_hosts = known_hosts;
  o.accept_new_host_key = true;  // never overrides a changed key
  auto store = SftpStore::Create(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kPermissionDenied) << store.status().ToString();
  EXPECT_NE(store.status().message().find("CHANGED"), std::string::npos)
      << store.status().ToString();
  EXPECT_NE(store.status().message().find(PinnedFingerprint()), std::string::npos)
      << store.status().ToString();
}

TEST_F(SftpStoreTest, WrongKeyIsRefusedNamingWhatWasTried) {
  std::string wrong = NewKey("wrong_client_key");
  SftpStoreOptions o = OptionsFor(root_);
  o.identity_files = {wrong};
  ::unsetenv("SSH_AUTH_SOCK");
  auto store = SftpStore::Create(o);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kPermissionDenied) << store.status().ToString();
  const testing::SftpTestServer& server = testing::SharedSftpServer();
  EXPECT_NE(store.status().message().find("authentication as " + server.user + "@" + server.host +
                                          " failed"),
            std::string::npos)
      << store.status().ToString();
  EXPECT_NE(store.status().message().find(wrong), std::string::npos);
  EXPECT_EQ(store.status().ToString().find('\n'), std::string::npos);
}

TEST_F(SftpStoreTest, ListingCarriesSizesMtimesAndETags) {
  for (int i = 0; i < 100; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "f%03d", i);
    ASSERT_TRUE(
        Put(key, std::string(i * 7, 'x'), {{"mtime", std::to_string(1600000000 + i * 1000)}}).ok());
  }
  ListOptions o;
  o.delimiter = "/";
  Result<Listing> listing = store_->list(o);
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->objects.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    const ObjectInfo& object = listing->objects[i];
    EXPECT_EQ(object.size, static_cast<uint64_t>(i * 7)) << object.key;
    EXPECT_EQ(object.mtime_ns, (1600000000ll + i * 1000) * 1000000000ll) << object.key;
    EXPECT_EQ(object.etag, ETag::FromMd5(Md5Of(std::string(i * 7, 'x')))) << object.key;
  }
}

TEST_F(SftpStoreTest, PutLeavesNoTemporaryFilesBehind) {
  ASSERT_TRUE(Put("d/one", "1").ok());
  ASSERT_TRUE(Put("d/one", "2").ok());
  ASSERT_TRUE(Put("d/two", Pattern(1 << 20, 3)).ok());
  PutOptions exclusive;
  exclusive.if_none_match = true;
  MemorySource again(std::string_view("3"));
  ASSERT_FALSE(store_->put("d/one", again, exclusive).ok());
  Result<ObjectInfo> src = store_->head("d/two");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(store_->copy(*src, "d/three", CopyOptions{}).ok());
  std::vector<std::string> leftovers;
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    if (entry.path().filename().string().rfind(".objfs-tmp-", 0) == 0) {
      leftovers.push_back(entry.path().string());
    }
  }
  EXPECT_TRUE(leftovers.empty()) << leftovers.front();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d/one"), "2");
}

TEST_F(SftpStoreTest, PutIntoMissingParentsCreatesThem) {
  ASSERT_TRUE(Put("x/y/z/file", "deep").ok());
  EXPECT_TRUE(fs::is_directory(fs::path(root_) / "x/y/z"));
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "x/y/z/file"), "deep");
  Result<std::string> back = ReadAll(*store_, "x/y/z/file");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "deep");
}

TEST_F(SftpStoreTest, FilesWrittenByOthersShowTheirAttributes) {
  fs::path path = fs::path(root_) / "outside";
  std::ofstream(path) << "written without objfs";
  fs::permissions(path, fs::perms(0640));
  Result<ObjectInfo> head = store_->head("outside");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_TRUE(head->etag.empty());
  EXPECT_EQ(head->size, 21u);
  EXPECT_EQ(head->metadata["mode"], std::to_string(0100640));
  EXPECT_EQ(head->metadata["uid"], std::to_string(::getuid()));
  EXPECT_EQ(head->metadata["gid"], std::to_string(::getgid()));
  EXPECT_EQ(head->metadata["mtime"], std::to_string(head->mtime_ns / 1000000000));
  Result<std::string> back = ReadAll(*store_, "outside");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "written without objfs");

  // Rewritten by someone else after objfs wrote it: the stale ETag is not reported.
  ASSERT_TRUE(Put("changed", "objfs version").ok());
  std::ofstream(fs::path(root_) / "changed") << "another, longer version";
  Result<ObjectInfo> changed = store_->head("changed");
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(changed->etag.empty()) << changed->etag.value();
}

TEST_F(SftpStoreTest, PutAppliesModeAndMtime) {
  ASSERT_TRUE(Put("m", "x", {{"mode", std::to_string(0100751)}, {"mtime", "1700000000.7"}}).ok());
  fs::path path = fs::path(root_) / "m";
  EXPECT_EQ(fs::status(path).permissions(), fs::perms(0751));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, 1700000000);
}

TEST_F(SftpStoreTest, KeysThatAreNoFileNamesAreRejected) {
  for (const std::string key : {"a//b", "..", "x/./y", "x/../y", ".objfs-meta/x", "/abs"}) {
    Result<ObjectInfo> put = Put(key, "x");
    ASSERT_FALSE(put.ok()) << key;
    EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(put.status().message().find("not a valid file name on an SFTP server"),
              std::string::npos);
  }
  Result<ObjectInfo> long_name = Put("d/" + std::string(256, 'n'), "x");
  ASSERT_FALSE(long_name.ok());
  EXPECT_EQ(long_name.status().code(), StatusCode::kNameTooLong);
}

TEST_F(SftpStoreTest, DirectoryMarkerIsADirectory) {
  ASSERT_TRUE(Put("dir/", "").ok());
  EXPECT_TRUE(fs::is_directory(fs::path(root_) / "dir"));
  Result<ObjectInfo> head = store_->head("dir/");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(store_->head("dir").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->remove("dir/").ok());
  EXPECT_FALSE(fs::exists(fs::path(root_) / "dir"));
}

TEST_F(SftpStoreTest, AKeyCannotBeBothAFileAndADirectory) {
  ASSERT_TRUE(Put("both", "file").ok());
  Result<ObjectInfo> under_file = Put("both/child", "x");
  ASSERT_FALSE(under_file.ok());
  EXPECT_EQ(under_file.status().code(), StatusCode::kNotDirectory)
      << under_file.status().ToString();
  ASSERT_TRUE(Put("dir/child", "x").ok());
  Result<ObjectInfo> over_dir = Put("dir", "x");
  ASSERT_FALSE(over_dir.ok());
  EXPECT_EQ(over_dir.status().code(), StatusCode::kIsDirectory) << over_dir.status().ToString();
  Result<std::string> child = ReadAll(*store_, "dir/child");
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(*child, "x");
  std::vector<std::string> leftovers;
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    if (entry.path().filename().string().rfind(".objfs-tmp-", 0) == 0) {
      leftovers.push_back(entry.path().string());
    }
  }
  EXPECT_TRUE(leftovers.empty()) << leftovers.front();
}

TEST_F(SftpStoreTest, DescribeNamesUserHostPortAndRoot) {
  const testing::SftpTestServer& server = testing::SharedSftpServer();
  EXPECT_EQ(store_->describe(), "sftp://" + server.user + "@" + server.host + ":" +
                                    std::to_string(server.port) + root_);
  EXPECT_EQ(store_->capabilities().scheme, "sftp");
  EXPECT_FALSE(store_->capabilities().native_etags);
}

}  // namespace
}  // namespace objfs
