// The SFTP client against a real OpenSSH sshd on loopback: the backend conformance suite (for the
// store alone and under ContentEtagStore), and what is particular to SFTP (pipelined reads,
// server-side copy-data, host keys, authentication, attributes of files objfs did not write,
// versions instead of ETags, nothing on the server but the files, content ETags kept on this
// machine).
#include "backend/sftp/sftp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/md5.h"
#include "backend/metrics.h"
#include "backend/metrics_store.h"
#include "backend/object_version.h"
#include "backend/upload_journal.h"
#include "cache/content_etag_store.h"
#include "cache/store_db.h"
#include "tests/conformance/object_store_conformance.h"
#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs {
namespace {

namespace fs = std::filesystem;
using sftp::CommitLockHolderGone;
using sftp::CommitLockToken;
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
  o.server_md5_min_size = 1;  // the tests' files are small: md5sum is run for any
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

std::string MakeScratchDir() {
  char tmpl[] = "/tmp/objfs-sftp-test-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

std::shared_ptr<StoreDb> OpenDb(const std::string& dir) {
  auto db = StoreDb::Open(dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::make_shared<StoreDb>(std::move(db).value()) : nullptr;
}

// The databases of the ContentEtagOnSshd instantiation, deleted with the process.
struct ScratchDirs {
  ~ScratchDirs() {
    std::error_code ignored;
    for (const std::string& dir : dirs) fs::remove_all(dir, ignored);
  }
  std::vector<std::string> dirs;
};

std::shared_ptr<ObjectStore> FreshContentEtagStore() {
  static ScratchDirs scratch;
  scratch.dirs.push_back(MakeScratchDir());
  return std::make_shared<ContentEtagStore>(FreshDirectoryStore(),
                                            OpenDb(scratch.dirs.back() + "/db"), nullptr);
}

ConformanceBackend SftpBackend(std::string name,
                               std::function<std::shared_ptr<ObjectStore>()> make) {
  ConformanceBackend backend;
  backend.name = std::move(name);
  backend.make_store = std::move(make);
  backend.empty_key_segments = false;
  backend.max_key_segment_bytes = 255;
  backend.key_may_also_be_a_prefix = false;
  backend.stores_metadata = false;
  backend.directories_are_real = true;
  return backend;
}

INSTANTIATE_TEST_SUITE_P(Sshd, ObjectStoreConformance,
                         ::testing::Values(SftpBackend("SftpOnSshd", FreshDirectoryStore),
                                           SftpBackend("ContentEtagOnSshd", FreshContentEtagStore)),
                         ConformanceBackendName);

// Counts the read() calls that reach the store below, and the smallest buffer one asked for.
class ReadCountingStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  Result<size_t> read(std::string_view key, uint64_t offset, std::span<std::byte> buf,
                      const ETag* if_match) override {
    ++reads;
    smallest_read = std::min(smallest_read, buf.size());
    return ForwardingStore::read(key, offset, buf, if_match);
  }
  // Off unless a test turns it on: the tests of hashing by reading read.
  Result<OptionalMd5> server_md5(std::string_view key, uint64_t size) override {
    if (!ask_server) return OptionalMd5();
    return ForwardingStore::server_md5(key, size);
  }
  uint64_t reads = 0;  // single-threaded tests only
  size_t smallest_read = SIZE_MAX;
  bool ask_server = false;
};

// Every entry under `root`, relative to it, as std::filesystem sees the server's directory.
std::set<std::string> ServerEntries(const std::string& root) {
  std::set<std::string> entries;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    entries.insert(fs::relative(entry.path(), root).string());
  }
  return entries;
}

// Sets the mtime of a file on the server's disk, as a program other than objfs would.
void SetMtime(const fs::path& path, time_t seconds) {
  struct timeval times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(::utimes(path.c_str(), times), 0);
}

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

// The objfs temporary files (".objfs-tmp-*": uploads', locks) under `root`, by path.
std::vector<std::string> TemporaryFiles(const std::string& root) {
  std::vector<std::string> found;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().filename().string().rfind(".objfs-tmp-", 0) == 0) {
      found.push_back(entry.path().string());
    }
  }
  return found;
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
    etags_.reset();
    db_.reset();
    std::error_code ignored;
    fs::remove_all(scratch_, ignored);
  }

  // A ContentEtagStore over the store (through a read counter), with its database in scratch.
  void OpenContentEtags() {
    etags_.reset();
    db_.reset();
    db_ = OpenDb(scratch_ + "/db");
    ASSERT_NE(db_, nullptr);
    if (counting_ == nullptr) counting_ = std::make_shared<ReadCountingStore>(store_);
    etags_ = std::make_shared<ContentEtagStore>(counting_, db_, &metrics_, /*racy_ns=*/0);
  }

  // A store over root_ whose server is taken to have no copy-data (OpenSSH before 9.0).
  std::shared_ptr<SftpStore> StoreWithoutCopyData() {
    SftpStoreOptions o = OptionsFor(root_);
    o.metrics = &metrics_;
    o.use_copy_data = false;
    return MakeStore(o);
  }

  // "d/file" holding "old", with the commit lock another objfs client would hold while it
  // stores it (made here by hand): `store` is a store of root_ that waits `wait` for such a
  // lock, `edit` an edit of that version, `lock` the lock's path, whose name every objfs
  // client derives alike.
  void LockedByAnotherClient(std::chrono::milliseconds wait, std::shared_ptr<SftpStore>* store,
                             PutOptions* edit, fs::path* lock) {
    SftpStoreOptions o = OptionsFor(root_);
    o.commit_lock_wait = wait;
    *store = MakeStore(o);
    ASSERT_NE(*store, nullptr);
    ASSERT_TRUE(Put("d/file", "old").ok());
    Result<ObjectInfo> base = store_->head("d/file");  // the version (a put's ETag is its MD5)
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    edit->if_match = base->etag;
    *lock = fs::path(root_) / "d" / (".objfs-tmp-lock-" + HexMd5(Md5Of("file")).substr(0, 20));
    std::ofstream(*lock) << "";
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
  std::shared_ptr<ReadCountingStore> counting_;
  std::shared_ptr<StoreDb> db_;
  std::shared_ptr<ContentEtagStore> etags_;
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
  Result<ObjectInfo> put = Put("src/file", data, {{"mode", "33188"}});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->etag, ETag::FromMd5(Md5Of(data)));
  Result<ObjectInfo> src = store_->head("src/file");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_TRUE(IsVersionTag(src->etag)) << src->etag.value();

  const uint64_t reads = metrics_.sftp_read_requests.load();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  // Checked against the version head() saw; no content ETag is known, so none is returned.
  Result<ObjectInfo> copied = store_->copy(*src, "dst/copied", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_TRUE(copied->etag.empty()) << copied->etag.value();
  EXPECT_EQ(copied->size, data.size());
  // A caller that vouches for the source's MD5 gets it back: the bytes are the same.
  CopyOptions unchecked;
  unchecked.if_match_source = false;
  Result<ObjectInfo> vouched = store_->copy(*put, "dst/vouched", unchecked);
  ASSERT_TRUE(vouched.ok()) << vouched.status().ToString();
  EXPECT_EQ(vouched->etag, put->etag);
  EXPECT_EQ(metrics_.sftp_read_requests.load(), reads);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "dst/copied") == data);
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "dst/vouched") == data);
  Result<ObjectInfo> head = store_->head("dst/copied");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, VersionTag(data.size(), copied->mtime_ns));
  EXPECT_EQ(head->metadata.at("mode"), "33188");
  // The copy keeps the source's mtime.
  EXPECT_EQ(head->mtime_ns, src->mtime_ns);
}

TEST_F(SftpStoreTest, CopyWithoutCopyDataStreamsAndHashes) {
  std::shared_ptr<SftpStore> store = StoreWithoutCopyData();
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
  // The MD5 of the bytes it streamed.
  EXPECT_EQ(copied->etag, ETag::FromMd5(Md5Of(data)));
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

TEST_F(SftpStoreTest, NewAttributesOfAFileAreSetInPlace) {
  ASSERT_TRUE(Put("f", Pattern(300000, 9)).ok());
  Result<ObjectInfo> put = store_->head("f");  // with the version the store checks
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const fs::path path = fs::path(root_) / "f";
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  const uint64_t reads = metrics_.sftp_read_requests.load();
  SetAttributesOptions o;
  o.expected = *put;
  Metadata wanted{{"mode", std::to_string(S_IFREG | 0600)}, {"mtime", "1000000000"}};
  Result<ObjectInfo> changed = store_->set_attributes("f", wanted, o);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the same file, not a copy renamed over it";
  EXPECT_EQ(after.st_mode & 07777, 0600u);
  EXPECT_EQ(after.st_mtime, 1000000000);
  EXPECT_EQ(metrics_.sftp_read_requests.load(), reads);
  EXPECT_EQ(changed->etag, VersionTag(300000, int64_t{1000000000} * 1000000000));
  EXPECT_EQ(ServerEntries(root_), (std::set<std::string>{"f"}));
  // The version the caller saw is checked first.
  Result<ObjectInfo> stale = store_->set_attributes("f", wanted, o);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kPreconditionFailed) << stale.status().ToString();
  // Unless the caller itself wrote it moments ago: then the attributes go straight to SETSTAT,
  // one round trip, without that check (here the caller's version is stale on purpose).
  o.source_known_current = true;
  wanted = Metadata{{"mode", std::to_string(S_IFREG | 0640)}, {"mtime", "1000000000"}};
  Result<ObjectInfo> trusted = store_->set_attributes("f", wanted, o);
  ASSERT_TRUE(trusted.ok()) << trusted.status().ToString();
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_mode & 07777, 0640u);
}

// SFTP's times are unsigned 32-bit seconds: one before 1970 or after 2106 becomes the nearest
// it can hold, as Linux clamps a time to what its file system holds, never the time of the call
// (touch -d 1965 gave the file today's date).
TEST_F(SftpStoreTest, TimesSftpCannotHoldAreClampedNotReplacedByNow) {
  ASSERT_TRUE(Put("old", "x").ok());
  const fs::path path = fs::path(root_) / "old";
  SetAttributesOptions o;
  o.source_known_current = true;
  ASSERT_TRUE(
      store_->set_attributes("old", Metadata{{"mtime", "-157766400"}, {"atime", "-5"}}, o).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, 0);
  EXPECT_EQ(st.st_atime, 0);
  ASSERT_TRUE(store_->set_attributes("old", Metadata{{"mtime", "7258118400"}}, o).ok());
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, 4294967295);
}

// A file rewritten (a put or an upload over it) while another client made it chmod 600: the
// new file keeps 600 where the put's own mode is the one its writer saw (0644), rather than
// widen it back. Not so for a file another client put in its place (another size or mtime:
// its mode is not this file's), nor for a set-ID bit the file did not have before (a write
// clears them). A mode the put changes itself (0640) is the put's.
TEST_F(SftpStoreTest, ARewriteKeepsAChmodAnotherClientMadeMeanwhile) {
  const fs::path path = fs::path(root_) / "secret";
  auto stat_of = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return st;
  };
  // "first" put with mode `seen`; what the writer saw of it.
  auto first = [&](uint32_t seen) {
    EXPECT_TRUE(Put("secret", "first").ok());
    EXPECT_EQ(::chmod(path.c_str(), seen), 0);
    const struct stat st = stat_of();
    return ReplacedFile{seen, 5, 1000000000LL * st.st_mtime, std::make_pair(st.st_uid, st.st_gid)};
  };
  // "second" put or uploaded over it with mode `mode`, replacing `replaced`.
  auto second = [&](bool streamed, uint32_t mode, const ReplacedFile& replaced) {
    PutOptions o;
    o.metadata = {{"mode", std::to_string(S_IFREG | mode)}, {"mtime", "1000000000"}};
    o.replaced = replaced;
    MemorySource bytes(std::string_view("second"));
    Result<ObjectInfo> done = InternalError("not run");
    if (streamed) {
      Result<std::unique_ptr<Upload>> upload = store_->start_upload("secret", UploadOptions{});
      if (!upload.ok()) return Result<ObjectInfo>(upload.status());
      Status wrote = (*upload)->write(0, bytes, 0, bytes.size());
      if (!wrote.ok()) return Result<ObjectInfo>(wrote);
      done = (*upload)->complete(bytes.size(), o);
    } else {
      done = store_->put("secret", bytes, o);
    }
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(ReadLocalFile(path), "second");
    return done;
  };
  for (const bool streamed : {false, true}) {
    SCOPED_TRACE(streamed ? "upload" : "put");
    ReplacedFile seen = first(0644);
    ASSERT_EQ(::chmod(path.c_str(), 0600), 0);  // another client, during the rewrite
    Result<ObjectInfo> done = second(streamed, 0644, seen);
    ASSERT_TRUE(done.ok());
    EXPECT_EQ(stat_of().st_mode & 07777, 0600u);
    ASSERT_EQ(done->metadata.count("mode"), 1u);
    EXPECT_EQ(std::stoul(done->metadata.at("mode")) & 07777, 0600u);

    // The writer's own chmod wins.
    seen = first(0644);
    ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
    ASSERT_TRUE(second(streamed, 0640, seen).ok());
    EXPECT_EQ(stat_of().st_mode & 07777, 0640u);

    // Another client's file put in its place, open to all: not this file's mode.
    seen = first(0600);
    const std::string theirs = std::string(root_) + "/theirs";
    std::ofstream(theirs) << "their longer file";
    ASSERT_EQ(::chmod(theirs.c_str(), 0644), 0);
    ASSERT_EQ(::rename(theirs.c_str(), path.c_str()), 0);
    ASSERT_TRUE(second(streamed, 0600, seen).ok());
    EXPECT_EQ(stat_of().st_mode & 07777, 0600u);

    // Nor one of another owner with the size and mtime (only the owner or root may chmod).
    seen = first(0600);
    ASSERT_EQ(::chown(path.c_str(), 1234, 2345), 0);
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
    ASSERT_TRUE(second(streamed, 0600, seen).ok());
    EXPECT_EQ(stat_of().st_mode & 07777, 0600u);

    // A set-user-ID bit another client added is not taken; the rest of its change is.
    seen = first(0755);
    ASSERT_EQ(::chmod(path.c_str(), 04750), 0);
    ASSERT_TRUE(second(streamed, 0755, seen).ok());
    EXPECT_EQ(stat_of().st_mode & 07777, 0750u);
  }
}

// chmod, chown and touch of a file go to the server by name. SETSTAT follows a link: one that
// another account put in the file's place after objfs looked (where it may write the
// directory; here, the caller's check is skipped, as for a file it wrote moments ago) gave its
// target, any file on the server, the new mode, owner and times. lsetstat changes what the
// name is, and a link in its place is refused.
TEST_F(SftpStoreTest, NewAttributesNeverGoThroughALinkPutInTheFilesPlace) {
  ASSERT_TRUE(Put("f", Pattern(1000, 10)).ok());
  Result<ObjectInfo> put = store_->head("f");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const std::string victim = scratch_ + "/victim";
  std::ofstream(victim) << "not to be changed";
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  timespec old_times[2] = {};
  old_times[0].tv_sec = old_times[1].tv_sec = 1600000000;
  ASSERT_EQ(::utimensat(AT_FDCWD, victim.c_str(), old_times, 0), 0);
  const fs::path path = fs::path(root_) / "f";
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);

  SetAttributesOptions o;
  o.expected = *put;
  o.source_known_current = true;
  Metadata wanted{{"mode", std::to_string(S_IFREG | 0644)},
                  {"mtime", "1000000000"},
                  {"uid", "4321"},
                  {"gid", "4321"}};
  Result<ObjectInfo> changed = store_->set_attributes("f", wanted, o);
  EXPECT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), StatusCode::kPermissionDenied) << changed.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "the link's target took the mode";
  EXPECT_EQ(st.st_mtime, 1600000000) << "the link's target took the times";
  EXPECT_EQ(st.st_uid, ::getuid()) << "the link's target took the owner";
  EXPECT_EQ(ReadLocalFile(victim), "not to be changed");
}

// A refusal of the change itself (an immutable file; for an account other than root, a file of
// another owner) is the answer, and leaves lsetstat on: before, it turned modes over to
// SETSTAT by name for the rest of the mount, and a link swapped in then passed its target the
// mode. And a FIFO on the server takes its new mode as a regular file does.
TEST_F(SftpStoreTest, ARefusedChmodLeavesLinksRefusedAndAFifoTakesItsMode) {
  ASSERT_TRUE(Put("immutable", "x").ok());
  const std::string immutable = root_ + "/immutable";
  Result<ObjectInfo> fixed = store_->head("immutable");
  ASSERT_TRUE(fixed.ok()) << fixed.status().ToString();
  // Nothing may end the test between +i and -i: the file could not be removed after it.
  testing::CommandResult chattr = testing::RunCommand({"chattr", "+i", immutable});
  if (chattr.exit_code != 0) GTEST_SKIP() << "no chattr +i here: " << chattr.err;
  SetAttributesOptions o;
  o.expected = *fixed;
  Result<ObjectInfo> refused =
      store_->set_attributes("immutable", Metadata{{"mode", std::to_string(S_IFREG | 0600)}}, o);
  (void)testing::RunCommand({"chattr", "-i", immutable});
  EXPECT_FALSE(refused.ok());

  ASSERT_TRUE(Put("f", "y").ok());
  Result<ObjectInfo> put = store_->head("f");
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const std::string victim = scratch_ + "/victim";
  std::ofstream(victim) << "not to be changed";
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  ASSERT_EQ(::unlink((root_ + "/f").c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), (root_ + "/f").c_str()), 0);
  o.expected = *put;
  o.source_known_current = true;
  Result<ObjectInfo> changed =
      store_->set_attributes("f", Metadata{{"mode", std::to_string(S_IFREG | 0666)}}, o);
  EXPECT_EQ(changed.status().code(), StatusCode::kPermissionDenied) << changed.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "the link's target took the mode";

  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  Result<ObjectInfo> fifo = store_->head("fifo");
  ASSERT_TRUE(fifo.ok()) << fifo.status().ToString();
  o.expected = *fifo;
  o.source_known_current = false;
  Result<ObjectInfo> fifo_changed =
      store_->set_attributes("fifo", Metadata{{"mode", std::to_string(S_IFIFO | 0600)}}, o);
  EXPECT_TRUE(fifo_changed.ok()) << fifo_changed.status().ToString();
  ASSERT_EQ(::lstat((root_ + "/fifo").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST_F(SftpStoreTest, ListingCarriesSizesMtimesAndVersions) {
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
    EXPECT_EQ(object.etag, VersionTag(i * 7, object.mtime_ns)) << object.key;
  }
}

TEST_F(SftpStoreTest, ListingCarriesTheAttributesOfFilesAndLinks) {
  ASSERT_TRUE(Put("file", "12345", {{"mode", std::to_string(S_IFREG | 0640)}}).ok());
  ASSERT_TRUE(Put("target", "the target's bytes").ok());
  fs::create_symlink("target", fs::path(root_) / "link");
  ListOptions o;
  o.delimiter = "/";
  Result<Listing> listing = store_->list(o);
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->objects.size(), 3u);
  const ObjectInfo& file = listing->objects[0];
  ASSERT_EQ(file.key, "file");
  ASSERT_TRUE(file.has_metadata);
  EXPECT_EQ(file.metadata.at("mode"), std::to_string(S_IFREG | 0640));
  EXPECT_EQ(file.metadata.at("uid"), std::to_string(::getuid()));
  Result<ObjectInfo> head = store_->head("file");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(file.metadata, head->metadata);  // what a stat says
  // A link is listed and HEADed as itself, as lstat describes it.
  const ObjectInfo& link = listing->objects[1];
  ASSERT_EQ(link.key, "link");
  ASSERT_TRUE(link.has_metadata);
  EXPECT_TRUE(S_ISLNK(std::stoul(link.metadata.at("mode")))) << link.metadata.at("mode");
  EXPECT_EQ(link.size, 6u);  // "target"
  Result<ObjectInfo> link_head = store_->head("link");
  ASSERT_TRUE(link_head.ok()) << link_head.status().ToString();
  EXPECT_EQ(link_head->metadata, link.metadata);
  EXPECT_EQ(link_head->etag, link.etag);
}

// symlink() makes a link on the server; read_link() reads its target; the link's own times are
// set without touching its target's.
TEST_F(SftpStoreTest, LinksAreMadeAndReadOnTheServer) {
  ASSERT_TRUE(Put("d/target", "bytes").ok());
  PutOptions options;
  options.metadata = {{"mode", std::to_string(S_IFLNK | 0777)}};
  Result<ObjectInfo> made = store_->symlink("d/link", "target", options);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->key, "d/link");
  EXPECT_EQ(made->size, 6u);
  EXPECT_TRUE(fs::is_symlink(fs::path(root_) / "d/link"));
  EXPECT_EQ(fs::read_symlink(fs::path(root_) / "d/link").string(), "target");
  Result<std::string> target = store_->read_link("d/link");
  ASSERT_TRUE(target.ok()) << target.status().ToString();
  EXPECT_EQ(*target, "target");
  EXPECT_EQ(store_->symlink("d/link", "other", options).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->read_link("d/none").status().code(), StatusCode::kNotFound);

  struct stat target_before {};
  ASSERT_EQ(::stat((fs::path(root_) / "d/target").c_str(), &target_before), 0);
  SetAttributesOptions touch;
  touch.expected = *made;
  Result<ObjectInfo> touched = store_->set_attributes(
      "d/link", Metadata{{"mode", std::to_string(S_IFLNK | 0777)}, {"mtime", "1400000000"}}, touch);
  ASSERT_TRUE(touched.ok()) << touched.status().ToString();
  struct stat link_st {
  }, target_after{};
  ASSERT_EQ(::lstat((fs::path(root_) / "d/link").c_str(), &link_st), 0);
  ASSERT_EQ(::stat((fs::path(root_) / "d/target").c_str(), &target_after), 0);
  EXPECT_EQ(link_st.st_mtime, 1400000000);
  EXPECT_EQ(target_after.st_mtime, target_before.st_mtime);
  EXPECT_TRUE(store_->remove("d/link").ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(fs::path(root_) / "d/link")));
  EXPECT_TRUE(fs::exists(fs::path(root_) / "d/target"));
}

TEST_F(SftpStoreTest, SpaceIsTheRootsFileSystem) {
  Result<StoreSpace> space = store_->space();
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  struct statvfs local {};
  ASSERT_EQ(::statvfs(root_.c_str(), &local), 0);
  EXPECT_EQ(space->blocks * space->block_size, local.f_blocks * local.f_frsize);
  EXPECT_EQ(space->name_max, local.f_namemax);
}

// Two clients (two stores, two sets of connections) put `key` at the same moment, each with
// `options`, `first` and `second` its bytes. Expects exactly one of them stored, the other
// refused with PreconditionFailed; returns whether both were stored.
bool RaceTwoPuts(SftpStore& one, SftpStore& two, const std::string& root, const std::string& key,
                 const std::string& first, const std::string& second, const PutOptions& options) {
  std::atomic<int> ready{0};
  Result<ObjectInfo> results[2] = {InternalError("not run"), InternalError("not run")};
  auto put = [&](int who) {
    MemorySource data(who == 0 ? first : second);
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    results[who] = (who == 0 ? one : two).put(key, data, options);
  };
  std::thread a(put, 0);
  std::thread b(put, 1);
  a.join();
  b.join();
  const int stored = (results[0].ok() ? 1 : 0) + (results[1].ok() ? 1 : 0);
  EXPECT_GE(stored, 1) << results[0].status().ToString() << " / " << results[1].status().ToString();
  const int winner = results[0].ok() ? 0 : 1;
  EXPECT_EQ(results[1 - winner].status().code(), StatusCode::kPreconditionFailed)
      << results[1 - winner].status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root) / key), winner == 0 ? first : second);
  return stored == 2;
}

// Two clients create one name at the same moment: exactly one stores its file, every time, and
// the other is refused. A STAT before the rename left a round trip in which both saw the name
// free, and the later rename replaced the first client's file while both puts succeeded.
TEST_F(SftpStoreTest, OfTwoExclusiveCreatesOfOneNameExactlyOneSucceeds) {
  std::shared_ptr<SftpStore> other = MakeStore(OptionsFor(root_));
  ASSERT_NE(other, nullptr);
  PutOptions exclusive;
  exclusive.if_none_match = true;
  int both = 0;
  for (int round = 0; round < 40; ++round) {
    both += RaceTwoPuts(*store_, *other, root_, "race/" + std::to_string(round), "first client",
                        "second client", exclusive);
  }
  EXPECT_EQ(both, 0) << "rounds in which both creates succeeded, of 40";
}

// Two clients store edits of one version of a file at the same moment (two appenders): exactly
// one is stored, every time, and the other is refused, not stored over it. The STAT before the
// rename alone left a round trip in which both found the version they began from.
TEST_F(SftpStoreTest, OfTwoEditsOfOneVersionExactlyOneIsStored) {
  std::shared_ptr<SftpStore> other = MakeStore(OptionsFor(root_));
  ASSERT_NE(other, nullptr);
  int both = 0;
  for (int round = 0; round < 40; ++round) {
    const std::string key = "log/" + std::to_string(round);
    ASSERT_TRUE(Put(key, "line 1\n").ok());
    Result<ObjectInfo> base = store_->head(key);  // the version (the put's ETag is its MD5)
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    PutOptions edit;
    edit.if_match = base->etag;
    both += RaceTwoPuts(*store_, *other, root_, key, "line 1\nfirst\n", "line 1\nsecond\n", edit);
  }
  EXPECT_EQ(both, 0) << "rounds in which both edits were stored, of 40";
  EXPECT_TRUE(TemporaryFiles(root_).empty()) << TemporaryFiles(root_).front();
}

// The lock that serialises conditional commits among objfs clients: one a live client holds
// is waited for, up to commit_lock_wait, and then the commit fails as transient, the file
// untouched; one that stands unchanged for stale_commit_lock, as this mount sees it (left by
// a client that died while it committed), is taken over. Its name is the same in every objfs
// client.
TEST_F(SftpStoreTest, ACommitLockIsWaitedForAndOneLeftByACrashIsTakenOver) {
  std::shared_ptr<SftpStore> store;
  PutOptions edit;
  fs::path lock;
  ASSERT_NO_FATAL_FAILURE(
      LockedByAnotherClient(std::chrono::milliseconds(300), &store, &edit, &lock));
  // A file given a time a year ahead (touch -d): its mtime is no clock to judge a lock by.
  edit.metadata = {{"mtime", std::to_string(time(nullptr) + 365 * 86400)}};
  MemorySource data(std::string_view("old and new"));
  Result<ObjectInfo> waited = store->put("d/file", data, edit);
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), StatusCode::kTransient) << waited.status().ToString();
  EXPECT_NE(waited.status().message().find("another client is storing it"), std::string::npos)
      << waited.status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d/file"), "old");
  EXPECT_TRUE(fs::exists(lock));  // a live client's, for all this store can tell: left alone

  // Unchanged for longer than stale_commit_lock while a store waits for it: taken over, the
  // edit stored, nothing left behind.
  SftpStoreOptions o = OptionsFor(root_);
  o.commit_lock_wait = std::chrono::seconds(30);
  o.stale_commit_lock = std::chrono::milliseconds(200);
  std::shared_ptr<SftpStore> patient = MakeStore(o);
  ASSERT_NE(patient, nullptr);
  Result<ObjectInfo> stored = patient->put("d/file", data, edit);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d/file"), "old and new");
  EXPECT_FALSE(fs::exists(lock));
  EXPECT_TRUE(TemporaryFiles(root_).empty()) << TemporaryFiles(root_).front();
}

// A PID no process has: a child's, after it exited and was waited for.
pid_t GonePid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  if (child > 0) waitpid(child, &status, 0);
  return child;
}

// A mount killed while it stored a file leaves its commit lock. The next mount on the same
// machine sees from the lock's token that its process is gone, and takes it over at once rather
// than after stale_commit_lock (30 s by default). A lock whose process runs, or whose token names
// another boot, is waited for as any other.
TEST_F(SftpStoreTest, ACommitLockOfAProcessOfThisMachineThatIsGoneIsTakenOverAtOnce) {
  std::shared_ptr<SftpStore> store;
  PutOptions edit;
  fs::path lock;
  ASSERT_NO_FATAL_FAILURE(
      LockedByAnotherClient(std::chrono::milliseconds(300), &store, &edit, &lock));
  const pid_t gone = GonePid();
  ASSERT_GT(gone, 0);
  const std::string gone_token = CommitLockToken(gone);
  const size_t boot = gone_token.find('.');
  ASSERT_NE(boot, std::string::npos) << "no boot ID or PID namespace in " << gone_token;
  std::string other_boot = gone_token;
  other_boot[boot + 1] = other_boot[boot + 1] == '0' ? '1' : '0';
  const std::string live_token = CommitLockToken(getpid());  // another store of this process
  EXPECT_FALSE(CommitLockHolderGone(live_token));
  EXPECT_TRUE(CommitLockHolderGone(gone_token));

  for (const std::string& held : {live_token, other_boot, std::string("objfs-commit-lock-1")}) {
    fs::remove(lock);
    fs::create_symlink(held, lock);
    Result<ObjectInfo> waited =
        store->put("d/file", MemorySource(std::string_view("old and new")), edit);
    ASSERT_FALSE(waited.ok()) << held;
    EXPECT_EQ(waited.status().code(), StatusCode::kTransient) << waited.status().ToString();
    EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d/file"), "old") << held;
    EXPECT_EQ(fs::read_symlink(lock).string(), held);
  }

  fs::remove(lock);
  fs::create_symlink(gone_token, lock);
  Result<ObjectInfo> stored =
      store->put("d/file", MemorySource(std::string_view("old and new")), edit);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d/file"), "old and new");
  EXPECT_FALSE(fs::exists(fs::symlink_status(lock)));
  EXPECT_TRUE(TemporaryFiles(root_).empty()) << TemporaryFiles(root_).front();
}

// objfs makes its store and then goes to the background (a fork): the locks it takes from then
// on name the PID it runs as, not that of the process that made the store, which is gone by
// then. (Another mount on this machine would take such a lock over at once, in the middle of the
// commit it guards, and an append of one of the two would be lost.)
TEST_F(SftpStoreTest, ALockNamesTheProcessThatTakesItAfterAFork) {
  std::shared_ptr<SftpStore> store = MakeStore(OptionsFor(root_));
  ASSERT_NE(store, nullptr);
  const std::string before = store->lock_token();
  EXPECT_FALSE(CommitLockHolderGone(before)) << before;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0) << std::strerror(errno);
  const pid_t child = fork();
  if (child == 0) {
    const std::string token = store->lock_token();
    const bool live = !CommitLockHolderGone(token);
    const std::string said = (live ? "live " : "gone ") + token;
    (void)!::write(pipe_fds[1], said.data(), said.size());
    _exit(0);
  }
  ASSERT_GT(child, 0) << std::strerror(errno);
  ::close(pipe_fds[1]);
  std::string said;
  char buf[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) said.append(buf, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(said.rfind("live ", 0), 0u) << said;
  const std::string token = said.substr(5);
  const std::string pid = "." + std::to_string(child);
  ASSERT_GT(token.size(), pid.size());
  EXPECT_EQ(token.substr(token.size() - pid.size()), pid) << token;
  EXPECT_EQ(token.substr(0, token.find('.')), before.substr(0, before.find('.')));  // same store
  EXPECT_TRUE(CommitLockHolderGone(token)) << token;  // once the child is gone
  EXPECT_FALSE(CommitLockHolderGone(store->lock_token()));
}

// A commit waiting for a lock whose directory goes away (removed by another client, or no
// longer writable) fails then, rather than trying to make the lock for ever. The staged file
// gets the put's mtime, 2001, as its last step before the commit: once it shows that, the
// directory is moved away.
TEST_F(SftpStoreTest, ACommitWhoseDirectoryGoesAwayWhileItWaitsFails) {
  std::shared_ptr<SftpStore> store;
  PutOptions edit;
  fs::path lock;
  ASSERT_NO_FATAL_FAILURE(LockedByAnotherClient(std::chrono::seconds(60), &store, &edit, &lock));
  const fs::path dir = lock.parent_path();
  edit.metadata = {{"mtime", "1000000000"}};
  std::atomic<bool> done{false};
  Result<ObjectInfo> result = InternalError("not run");
  std::thread put([&] {
    result = store->put("d/file", MemorySource(std::string_view("old and new")), edit);
    done = true;
  });
  const bool staged = testing::WaitFor(30, [&] {
    for (const std::string& path : TemporaryFiles(dir.string())) {
      struct stat st {};
      if (path.find("-lock-") == std::string::npos && ::stat(path.c_str(), &st) == 0 &&
          st.st_mtime == 1000000000) {
        return true;
      }
    }
    return false;
  });
  EXPECT_TRUE(staged);
  fs::rename(dir, fs::path(root_) / "d-moved");
  const bool returned = testing::WaitFor(30, [&] { return done.load(); });
  if (!returned) fs::rename(fs::path(root_) / "d-moved", dir);  // so that it ends, at 60 s
  put.join();
  EXPECT_TRUE(returned) << "the commit kept trying to make its lock";
  EXPECT_FALSE(result.ok());
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

TEST_F(SftpStoreTest, ReplacingWithoutPosixRenameKeepsNoAsideCopy) {
  SftpStoreOptions o = OptionsFor(root_);
  o.use_posix_rename = false;  // plain SFTP RENAME, which refuses an existing target
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  MemorySource first(std::string_view("first version"));
  ASSERT_TRUE(store->put("r/file", first, PutOptions{}).ok());
  MemorySource second(std::string_view("second version"));
  Result<ObjectInfo> replaced = store->put("r/file", second, PutOptions{});
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "r/file"), "second version");
  Result<ObjectInfo> src = store->head("r/file");
  ASSERT_TRUE(src.ok());
  MemorySource other(std::string_view("other"));
  ASSERT_TRUE(store->put("r/copy", other, PutOptions{}).ok());
  ASSERT_TRUE(store->copy(*src, "r/copy", CopyOptions{}).ok());
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "r/copy"), "second version");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(root_) / "r")) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"copy", "file"}));
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
  EXPECT_EQ(head->etag, VersionTag(21, head->mtime_ns));
  EXPECT_EQ(head->size, 21u);
  EXPECT_EQ(head->metadata["mode"], std::to_string(0100640));
  EXPECT_EQ(head->metadata["uid"], std::to_string(::getuid()));
  EXPECT_EQ(head->metadata["gid"], std::to_string(::getgid()));
  EXPECT_EQ(head->metadata["mtime"], std::to_string(head->mtime_ns / 1000000000));
  Result<std::string> back = ReadAll(*store_, "outside");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "written without objfs");

  // Rewritten by someone else after objfs wrote it: another version.
  ASSERT_TRUE(Put("changed", "objfs version").ok());
  Result<ObjectInfo> written = store_->head("changed");
  ASSERT_TRUE(written.ok());
  std::ofstream(fs::path(root_) / "changed") << "another, longer version";
  Result<ObjectInfo> changed = store_->head("changed");
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(changed->etag, written->etag);
  EXPECT_FALSE(changed->etag.is_plain_md5()) << changed->etag.value();
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
  // A path past PATH_MAX on the server (the server would call it a bad message): too long too,
  // for a lookup as for a put.
  std::string deep;
  while (deep.size() < 4200) deep += std::string(200, 'd') + "/";
  deep += "f";
  EXPECT_EQ(store_->head(deep).status().code(), StatusCode::kNameTooLong)
      << store_->head(deep).status().ToString();
  EXPECT_EQ(Put(deep, "x").status().code(), StatusCode::kNameTooLong);
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

TEST_F(SftpStoreTest, NothingButTheFilesAppearsOnTheServer) {
  OpenContentEtags();
  ASSERT_TRUE(etags_->put("a", MemorySource(std::string_view("a")), PutOptions{}).ok());
  ASSERT_TRUE(etags_->put("d/b", MemorySource(std::string_view("bb")), PutOptions{}).ok());
  ASSERT_TRUE(etags_->put("d/b", MemorySource(std::string_view("bbb")), PutOptions{}).ok());
  PutOptions exclusive;
  exclusive.if_none_match = true;
  EXPECT_FALSE(etags_->put("a", MemorySource(std::string_view("x")), exclusive).ok());
  Result<ObjectInfo> a = etags_->head("a");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(etags_->copy(*a, "c", CopyOptions{}).ok());
  // A rename, as the filesystem makes it: copy, then remove the source.
  Result<ObjectInfo> b = etags_->head("d/b");
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(etags_->copy(*b, "d/e", CopyOptions{}).ok());
  ASSERT_TRUE(etags_->remove("d/b").ok());
  // chmod, as the filesystem makes it.
  Result<ObjectInfo> e = etags_->head("d/e");
  ASSERT_TRUE(e.ok());
  SetAttributesOptions chmod;
  chmod.expected = *e;
  ASSERT_TRUE(etags_->set_attributes("d/e", Metadata{{"mode", "33261"}}, chmod).ok());
  ASSERT_TRUE(etags_->ContentEtag("c").ok());
  ASSERT_TRUE(etags_->remove_many({"c"}).ok());

  EXPECT_EQ(ServerEntries(root_), (std::set<std::string>{"a", "d", "d/e"}));
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d/e"), "bbb");
  // The store's own listing agrees.
  ListOptions all;
  Result<Listing> listing = store_->list(all);
  ASSERT_TRUE(listing.ok());
  std::vector<std::string> keys;
  for (const ObjectInfo& object : listing->objects) keys.push_back(object.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "d/e"}));
}

TEST_F(SftpStoreTest, ReadOfAFileReplacedUnderneathFailsInsteadOfMixing) {
  const std::string first = Pattern(1 << 20, 5);
  ASSERT_TRUE(Put("f", first).ok());
  Result<ObjectInfo> seen = store_->head("f");
  ASSERT_TRUE(seen.ok());
  std::string buf(first.size(), '\0');
  std::span<std::byte> half(reinterpret_cast<std::byte*>(buf.data()), buf.size() / 2);
  Result<size_t> n = store_->read("f", 0, half, &seen->etag);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, half.size());

  // Replaced by another program with a file of another size: the rest is not read.
  const fs::path path = fs::path(root_) / "f";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << Pattern((1 << 20) + 1, 6);
  std::span<std::byte> rest(reinterpret_cast<std::byte*>(buf.data()) + half.size(), half.size());
  Result<size_t> mixed = store_->read("f", half.size(), rest, &seen->etag);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), StatusCode::kPreconditionFailed) << mixed.status().ToString();

  // Same size, other mtime.
  ASSERT_TRUE(Put("g", first).ok());
  Result<ObjectInfo> g = store_->head("g");
  ASSERT_TRUE(g.ok());
  SetMtime(fs::path(root_) / "g", g->mtime_ns / 1000000000 - 10);
  EXPECT_EQ(store_->read("g", 0, rest, &g->etag).status().code(), StatusCode::kPreconditionFailed);
  // An MD5 cannot be checked by the store alone: it never matches.
  ETag md5 = ETag::FromMd5(Md5Of(first));
  EXPECT_EQ(store_->read("g", 0, rest, &md5).status().code(), StatusCode::kPreconditionFailed);
}

TEST_F(SftpStoreTest, ContentEtagsAreKeptOnThisMachine) {
  OpenContentEtags();
  const std::string data = Pattern(3u << 20, 7);
  Result<ObjectInfo> put = etags_->put("dir/file", MemorySource(data), PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  const ETag md5 = ETag::FromMd5(Md5Of(data));
  EXPECT_EQ(put->etag, md5);
  auto record = db_->Get<ContentETagRecord>("dir/file");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->size, data.size());
  EXPECT_EQ((*record)->mtime_ns, put->mtime_ns);
  Result<ObjectInfo> head = etags_->head("dir/file");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, md5);

  // A read by MD5 is a read of the version it was recorded for.
  std::string back(data.size(), '\0');
  Result<size_t> n = etags_->read(
      "dir/file", 0, std::span<std::byte>(reinterpret_cast<std::byte*>(back.data()), back.size()),
      &head->etag);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(back == data);

  // A server-side copy carries the MD5 without reading or hashing a byte here.
  ASSERT_TRUE(store_->capabilities().server_side_copy);
  const uint64_t reads = metrics_.sftp_read_requests.load();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  Result<ObjectInfo> copied = etags_->copy(*head, "copy", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(copied->etag, md5);
  Result<ETag> copy_etag = etags_->ContentEtag("copy");
  ASSERT_TRUE(copy_etag.ok()) << copy_etag.status().ToString();
  EXPECT_EQ(*copy_etag, md5);
  EXPECT_EQ(metrics_.sftp_read_requests.load(), reads);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  Result<ObjectInfo> copy_head = etags_->head("copy");
  ASSERT_TRUE(copy_head.ok());
  EXPECT_EQ(copy_head->etag, md5);

  // Replaced underneath with another size: the record is dropped, reads by the old MD5 fail.
  std::ofstream(fs::path(root_) / "dir/file", std::ios::binary | std::ios::trunc) << "other";
  EXPECT_EQ(etags_
                ->read("dir/file", 0,
                       std::span<std::byte>(reinterpret_cast<std::byte*>(back.data()), 10), &md5)
                .status()
                .code(),
            StatusCode::kPreconditionFailed);
  Result<ObjectInfo> replaced = etags_->head("dir/file");
  ASSERT_TRUE(replaced.ok());
  EXPECT_FALSE(replaced->etag.is_plain_md5()) << replaced->etag.value();
  record = db_->Get<ContentETagRecord>("dir/file");
  ASSERT_TRUE(record.ok());
  EXPECT_FALSE(record->has_value());
  Result<ETag> recomputed = etags_->ContentEtag("dir/file");
  ASSERT_TRUE(recomputed.ok());
  EXPECT_EQ(*recomputed, ETag::FromMd5(Md5Of("other")));

  // Touched underneath (same size, another mtime): the copy's record no longer holds.
  SetMtime(fs::path(root_) / "copy", copied->mtime_ns / 1000000000 + 100);
  Result<ObjectInfo> touched = etags_->head("copy");
  ASSERT_TRUE(touched.ok());
  EXPECT_FALSE(touched->etag.is_plain_md5()) << touched->etag.value();
  EXPECT_EQ(etags_
                ->read("copy", 0,
                       std::span<std::byte>(reinterpret_cast<std::byte*>(back.data()), 10), &md5)
                .status()
                .code(),
            StatusCode::kPreconditionFailed);
}

TEST_F(SftpStoreTest, ContentEtagHashesInBulkReadsAndSurvivesReopening) {
  const size_t size = (10u << 20) + 3;
  const std::string data = Pattern(size, 8);
  {
    std::ofstream out(fs::path(root_) / "outside", std::ios::binary);
    out << data;  // written without objfs: nothing is known about it
  }
  OpenContentEtags();
  Result<ObjectInfo> head = etags_->head("outside");
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE(head->etag.is_plain_md5()) << head->etag.value();

  const uint64_t requests = metrics_.sftp_read_requests.load();
  Result<ETag> etag = etags_->ContentEtag("outside");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, ETag::FromMd5(Md5Of(data)));
  EXPECT_EQ(metrics_.bytes_hashed.load(), size);
  EXPECT_EQ(counting_->reads, 3u);  // 4 MiB, 4 MiB and the rest
  EXPECT_GE(counting_->smallest_read, size_t{1} << 20);
  // Each read call is pipelined READ requests of the server's largest size.
  const uint64_t max_read = store_->server_limits().max_read;
  const uint64_t sent = metrics_.sftp_read_requests.load() - requests;
  uint64_t want = 0;
  for (uint64_t at = 0; at < size; at += ContentEtagStore::kHashReadBytes) {
    const uint64_t len = std::min<uint64_t>(ContentEtagStore::kHashReadBytes, size - at);
    want += (len + max_read - 1) / max_read;
  }
  EXPECT_GE(sent, want);
  EXPECT_LE(sent, want + 3 * counting_->reads) << "max_read " << max_read << " want " << want;

  // Another mount of the same cache directory knows it without hashing.
  OpenContentEtags();
  Result<ObjectInfo> again = etags_->head("outside");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->etag, *etag);
  const uint64_t reads = counting_->reads;
  Result<ETag> recorded = etags_->ContentEtag("outside");
  ASSERT_TRUE(recorded.ok());
  EXPECT_EQ(*recorded, *etag);
  EXPECT_EQ(metrics_.bytes_hashed.load(), size);
  EXPECT_EQ(counting_->reads, reads);
  EXPECT_EQ(ServerEntries(root_), (std::set<std::string>{"outside"}));
}

TEST_F(SftpStoreTest, CiphersAreOfferedInTheOrderGiven) {
  // The default: AES-GCM where the CPU has AES instructions.
  if (sftp::CpuHasAesGcm()) {
    EXPECT_EQ(store_->cipher(), "aes128-gcm@openssh.com");
  } else {
    EXPECT_FALSE(store_->cipher().empty());
  }

  SftpStoreOptions o = OptionsFor(root_);
  o.ciphers = "aes256-ctr,aes128-gcm@openssh.com";
  auto ctr = SftpStore::Create(o);
  ASSERT_TRUE(ctr.ok()) << ctr.status().ToString();
  EXPECT_EQ((*ctr)->cipher(), "aes256-ctr");
  // Data moves with it both ways.
  const std::string data(300000, 'c');
  ASSERT_TRUE((*ctr)->put("k", MemorySource(std::string_view(data)), PutOptions{}).ok());
  std::string back(data.size(), '\0');
  Result<size_t> n = (*ctr)->read("k", 0, std::as_writable_bytes(std::span(back)), nullptr);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(back == data);

  o.ciphers = "rot13";
  auto bogus = SftpStore::Create(o);
  ASSERT_FALSE(bogus.ok());
  EXPECT_EQ(bogus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bogus.status().message(), "none of the ciphers rot13 is known to libssh");

  // Known to libssh, refused by this server (OpenSSH disables CBC by default).
  o.ciphers = "aes128-cbc";
  auto refused = SftpStore::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("accepts none of the ciphers aes128-cbc"),
            std::string::npos)
      << refused.status().ToString();
}

TEST_F(SftpStoreTest, DescribeNamesUserHostPortAndRoot) {
  const testing::SftpTestServer& server = testing::SharedSftpServer();
  EXPECT_EQ(store_->describe(), "sftp://" + server.user + "@" + server.host + ":" +
                                    std::to_string(server.port) + root_);
  EXPECT_EQ(store_->capabilities().scheme, "sftp");
  EXPECT_FALSE(store_->capabilities().native_etags);
}

sftp::SftpConnectOptions PoolOptions(std::chrono::milliseconds request_timeout) {
  const testing::SftpTestServer& server = testing::SharedSftpServer();
  sftp::SftpConnectOptions options;
  options.host = server.host;
  options.port = server.port;
  options.user = server.user;
  options.identity_files = {server.key_path};
  options.known_hosts = server.known_hosts;
  options.request_timeout = request_timeout;
  return options;
}

// A call waiting on the server's work (copy-data, an fsync) may be silent for its allowance,
// longer than request_timeout: the watchdog cuts an ordinary silent call after request_timeout,
// and the one with the allowance only once that is spent.
TEST(SftpSessionPoolTest, ServerWorkIsCutOnlyAfterItsSilenceAllowance) {
  sftp::SftpSessionPool pool(PoolOptions(std::chrono::milliseconds(500)), 2);
  const auto start = std::chrono::steady_clock::now();
  Result<sftp::SftpSessionPool::Lease> working = pool.Acquire();
  ASSERT_TRUE(working.ok()) << working.status().ToString();
  // Given at once: the second connection's login may take longer than request_timeout on a
  // loaded machine, and `working` is silent from its own login on.
  sftp::SftpSessionPool::SilenceAllowance allowance(pool, **working, std::chrono::seconds(4));
  Result<sftp::SftpSessionPool::Lease> ordinary = pool.Acquire();
  ASSERT_TRUE(ordinary.ok()) << ordinary.status().ToString();
  // Neither receives anything from now on: both are silent calls.
  auto wait_for_cuts = [&](int cuts) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (pool.cut_connections() < cuts && std::chrono::steady_clock::now() < deadline) {
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 20);
    }
    return pool.cut_connections() >= cuts;
  };
  ASSERT_TRUE(wait_for_cuts(1));
  EXPECT_TRUE((*ordinary)->marked_broken());
  EXPECT_FALSE((*working)->marked_broken()) << "cut after request_timeout despite its allowance";
  EXPECT_TRUE((*working)->healthy());
  ASSERT_TRUE(wait_for_cuts(2));
  EXPECT_TRUE((*working)->marked_broken());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(3500));
}

// The pool's watchdog cuts a borrowed connection that receives nothing through a descriptor of
// its own. libssh closes its descriptor when a connection fails, while the connection is still
// borrowed; the number is then free, and another file (here a TCP socket of the test) gets it.
// The watchdog must cut the failed connection, and leave that other socket alone.
TEST(SftpSessionPoolTest, WatchdogNeverCutsAnotherFileThatGotTheSocketsNumber) {
  sftp::SftpSessionPool pool(PoolOptions(std::chrono::milliseconds(500)), 1);
  Result<sftp::SftpSessionPool::Lease> lease = pool.Acquire();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const int number = ssh_get_fd((*lease)->sftp()->session);
  ASSERT_GE(number, 0);

  // The connection fails (as when the server goes away) and libssh closes its descriptor.
  ASSERT_EQ(::shutdown(number, SHUT_RDWR), 0);
  EXPECT_EQ(sftp_stat((*lease)->sftp(), "/"), nullptr);
  ASSERT_EQ(::fcntl(number, F_GETFD), -1) << "libssh kept its descriptor " << number;

  // A new socket gets the number (the lowest free one), connected to a listener of the test.
  const int other = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int peer_fd = [&] {
    if (::connect(other, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
    return ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  }();
  // Closed however the test ends.
  struct Closer {
    std::vector<int> fds;
    ~Closer() {
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
    }
  } closer{{listener, other, peer_fd}};
  ASSERT_EQ(other, number) << "the new socket did not get the freed number";
  ASSERT_GE(peer_fd, 0) << std::strerror(errno);

  // The watchdog cuts the failed connection once it has been silent for request_timeout...
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pool.cut_connections() == 0 && std::chrono::steady_clock::now() < deadline) {
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 20);
  }
  ASSERT_EQ(pool.cut_connections(), 1);
  // ... and the other socket still works both ways.
  pollfd peer{peer_fd, POLLIN, 0};
  EXPECT_EQ(::poll(&peer, 1, 0), 0) << "the other socket was shut down";
  EXPECT_EQ(::send(other, "x", 1, MSG_NOSIGNAL), 1) << std::strerror(errno);
  char got = 0;
  EXPECT_EQ(::recv(peer_fd, &got, 1, 0), 1);
  EXPECT_EQ(got, 'x');
  EXPECT_EQ(::send(peer_fd, "y", 1, MSG_NOSIGNAL), 1) << std::strerror(errno);
  EXPECT_EQ(::recv(other, &got, 1, 0), 1);
  EXPECT_EQ(got, 'y');
}

// What a store tells its journal, in order: "opened NAME", "closed NAME".
class RecordingJournal : public UploadJournal {
 public:
  Status Opened(std::string_view name, std::string_view /*upload_id*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back("opened " + std::string(name));
    return Status::Ok();
  }
  void Closed(std::string_view name, std::string_view /*upload_id*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back("closed " + std::string(name));
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> events_;
};

TEST_F(SftpStoreTest, UploadSessionKeepsItsTemporaryFileNotedUntilItIsRenamedOrRemoved) {
  auto journal = std::make_shared<RecordingJournal>();
  SftpStoreOptions o = OptionsFor(root_);
  o.journal = journal;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  MemorySource bytes(std::string_view("streamed bytes"));

  Result<std::unique_ptr<Upload>> done = store->start_upload("j/done", UploadOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_TRUE((*done)->write(0, bytes, 0, bytes.size()).ok());
  std::vector<std::string> temporary = TemporaryFiles(root_);
  ASSERT_EQ(temporary.size(), 1u);
  EXPECT_EQ(ReadLocalFile(temporary[0]), "streamed bytes");
  EXPECT_FALSE(fs::exists(fs::path(root_) / "j/done"));
  ASSERT_EQ(journal->events(), std::vector<std::string>{"opened " + temporary[0]});
  Result<ObjectInfo> info = (*done)->complete(bytes.size(), PutOptions{});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  // Hashed in order as it went: its MD5.
  EXPECT_EQ(info->etag, ETag::FromMd5(Md5Of("streamed bytes")));
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / "j/done"), "streamed bytes");
  EXPECT_TRUE(TemporaryFiles(root_).empty());
  EXPECT_EQ(journal->events(),
            (std::vector<std::string>{"opened " + temporary[0], "closed " + temporary[0]}));

  Result<std::unique_ptr<Upload>> aborted = store->start_upload("j/aborted", UploadOptions{});
  ASSERT_TRUE(aborted.ok()) << aborted.status().ToString();
  ASSERT_TRUE((*aborted)->write(0, bytes, 0, bytes.size()).ok());
  temporary = TemporaryFiles(root_);
  ASSERT_EQ(temporary.size(), 1u);
  ASSERT_TRUE((*aborted)->abort().ok());
  EXPECT_TRUE(TemporaryFiles(root_).empty());
  EXPECT_FALSE(fs::exists(fs::path(root_) / "j/aborted"));
  std::vector<std::string> events = journal->events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[2], "opened " + temporary[0]);
  EXPECT_EQ(events[3], "closed " + temporary[0]);
  {
    // Dropped without complete(): removed as well.
    Result<std::unique_ptr<Upload>> dropped = store->start_upload("j/dropped", UploadOptions{});
    ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
    ASSERT_EQ(TemporaryFiles(root_).size(), 1u);
  }
  EXPECT_TRUE(TemporaryFiles(root_).empty());
}

TEST_F(SftpStoreTest, AppendingOneMiBToA64MiBFileMovesOneMiB) {
  ASSERT_TRUE(store_->capabilities().copy_ranges);
  const uint64_t kMiB = 1 << 20;
  const std::string old_data = Pattern(64 * kMiB, 44);
  ASSERT_TRUE(Put("big", old_data).ok());
  Result<ObjectInfo> base = store_->head("big");
  ASSERT_TRUE(base.ok()) << base.status().ToString();

  Metrics counted_metrics;
  MetricsStore store(store_, counted_metrics);
  const uint64_t hashed = metrics_.bytes_hashed.load();
  const uint64_t reads = metrics_.sftp_read_requests.load();
  Result<std::unique_ptr<Upload>> upload = store.start_upload("big", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE((*upload)->copy(0, *base, 0, 64 * kMiB).ok());
  const std::string tail = Pattern(kMiB, 45);
  MemorySource tail_source(tail);
  ASSERT_TRUE((*upload)->write(64 * kMiB, tail_source, 0, kMiB).ok());
  PutOptions put;
  put.if_match = base->etag;
  Result<ObjectInfo> done = (*upload)->complete(65 * kMiB, put);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  // The old bytes never came here: no MD5 of the whole could be computed, so none is given.
  EXPECT_TRUE(IsVersionTag(done->etag)) << done->etag.value();
  EXPECT_EQ(counted_metrics.bytes_written.load(), kMiB);
  EXPECT_EQ(counted_metrics.bytes_read.load(), 0u);
  EXPECT_EQ(counted_metrics.bytes_copied_on_server.load(), 64 * kMiB);
  EXPECT_EQ(metrics_.sftp_read_requests.load(), reads);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "big") == old_data + tail);
  EXPECT_TRUE(TemporaryFiles(root_).empty());
}

TEST_F(SftpStoreTest, UploadSessionUnderContentEtagsRecordsOnlyAComputedMd5) {
  OpenContentEtags();
  const std::string data = Pattern(3 << 20, 46);
  MemorySource source(data);
  // In order: the MD5 computed on the way is recorded.
  Result<std::unique_ptr<Upload>> ordered = etags_->start_upload("md5/ordered", UploadOptions{});
  ASSERT_TRUE(ordered.ok()) << ordered.status().ToString();
  ASSERT_TRUE((*ordered)->write(0, source, 0, data.size()).ok());
  Result<ObjectInfo> done = (*ordered)->complete(data.size(), PutOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->etag, ETag::FromMd5(Md5Of(data)));
  Result<ObjectInfo> head = etags_->head("md5/ordered");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, ETag::FromMd5(Md5Of(data)));

  // An edit copying from it with its MD5 as the base's ETag: the MD5 is translated to the
  // version, and the new file gets no MD5 until one is computed from its bytes.
  Result<std::unique_ptr<Upload>> edit = etags_->start_upload("md5/ordered", UploadOptions{});
  ASSERT_TRUE(edit.ok()) << edit.status().ToString();
  ASSERT_TRUE((*edit)->copy(0, *head, 0, 1 << 20).ok());
  MemorySource patch(std::string_view("patched"));
  ASSERT_TRUE((*edit)->write(1 << 20, patch, 0, patch.size()).ok());
  PutOptions put;
  put.if_match = head->etag;
  Result<ObjectInfo> edited = (*edit)->complete((1 << 20) + patch.size(), put);
  ASSERT_TRUE(edited.ok()) << edited.status().ToString();
  EXPECT_TRUE(IsVersionTag(edited->etag)) << edited->etag.value();
  Result<ObjectInfo> after = etags_->head("md5/ordered");
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(IsVersionTag(after->etag)) << after->etag.value();
  const std::string expected = data.substr(0, 1 << 20) + "patched";
  Result<ETag> md5 = etags_->ContentEtag("md5/ordered");
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  EXPECT_EQ(*md5, ETag::FromMd5(Md5Of(expected)));
}

// Bytes in memory whose reads wait until Open(), and that counts the reads asked of it.
// Its reads from the `held_from`th on (counted from 1) wait until Open(); kNeverHeld: none.
class GatedSource : public ByteSource {
 public:
  static constexpr int kNeverHeld = INT_MAX;
  GatedSource(std::string_view data, int held_from) : data_(data), held_from_(held_from) {}
  uint64_t size() const override { return data_.size(); }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    {
      std::unique_lock lock(mu_);
      const int read = ++reads_;
      changed_.notify_all();
      if (read >= held_from_ &&
          !changed_.wait_for(lock, std::chrono::seconds(60), [&] { return open_; })) {
        return IoError("the test never opened this source");
      }
    }
    return data_.read_at(offset, buf);
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  // True once `n` reads were asked (false after 60 s).
  bool WaitForReads(int n) const {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] { return reads_ >= n; });
  }

 private:
  MemorySource data_;
  const int held_from_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  mutable int reads_ = 0;
  bool open_ = false;
};

TEST_F(SftpStoreTest, PartsSentInParallelStillGetTheFilesMd5) {
  // A streamed upload sends its parts on several connections at once: the second part's
  // bytes go up while the first part's are still on their way. They are hashed in turn.
  const std::string first = Pattern(1 << 20, 47);
  const std::string second = Pattern(20 << 20, 48);  // more than one read of the session's
  GatedSource first_source(first, /*held_from=*/1);
  GatedSource second_source(second, GatedSource::kNeverHeld);
  Result<std::unique_ptr<Upload>> upload = store_->start_upload("md5/parallel", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  Status first_sent, second_sent;
  std::thread first_writer, second_writer;
  // However the test ends, the writers end before it.
  struct Joined {
    GatedSource& gate;
    std::thread& a;
    std::thread& b;
    ~Joined() {
      gate.Open();
      if (a.joinable()) a.join();
      if (b.joinable()) b.join();
    }
  } joined{first_source, first_writer, second_writer};
  first_writer =
      std::thread([&] { first_sent = (*upload)->write(0, first_source, 0, first.size()); });
  // The first part is under way, held at its first read, and nothing of it is hashed yet.
  ASSERT_TRUE(first_source.WaitForReads(1));
  second_writer = std::thread(
      [&] { second_sent = (*upload)->write(first.size(), second_source, 0, second.size()); });
  // The second part has read (and sent) its first bytes, past the end of the MD5 so far.
  ASSERT_TRUE(second_source.WaitForReads(2));
  first_source.Open();
  first_writer.join();
  second_writer.join();
  ASSERT_TRUE(first_sent.ok()) << first_sent.ToString();
  ASSERT_TRUE(second_sent.ok()) << second_sent.ToString();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  Result<ObjectInfo> done = (*upload)->complete(first.size() + second.size(), PutOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->etag.value(), ETag::FromMd5(Md5Of(first + second)).value());
  EXPECT_EQ(hashed, first.size() + second.size());  // each byte once
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "md5/parallel") == first + second);
}

TEST_F(SftpStoreTest, APartSentBeforeTheOnesBeforeItLeavesTheMd5Unknown) {
  // No write before it is under way: there is nothing to wait for, and the MD5 cannot follow
  // the bytes in order. complete() returns the version, and no wrong MD5.
  const std::string first = Pattern(1 << 20, 49);
  const std::string second = Pattern(1 << 20, 50);
  MemorySource first_source(first);
  MemorySource second_source(second);
  Result<std::unique_ptr<Upload>> upload = store_->start_upload("md5/reversed", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE((*upload)->write(first.size(), second_source, 0, second.size()).ok());
  ASSERT_TRUE((*upload)->write(0, first_source, 0, first.size()).ok());
  Result<ObjectInfo> done = (*upload)->complete(first.size() + second.size(), PutOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(IsVersionTag(done->etag)) << done->etag.value();
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "md5/reversed") == first + second);
}

TEST_F(SftpStoreTest, AWriteRepeatedOnANewConnectionHashesEachByteOnce) {
  // The connection under a part's write dies halfway (a firewall drops it, the server's process
  // for it is killed): the write starts again on a fresh connection and sends the whole range
  // again. The bytes hashed before the cut are not hashed again, and the MD5 stays the file's.
  const testing::SftpTestServer& server = testing::SharedSftpServer();
  testing::FaultProxy proxy("127.0.0.1", server.port);
  proxy.PassBytesThrough();  // SSH, not HTTP
  SftpStoreOptions o = OptionsFor(root_);
  o.port = proxy.port();
  o.known_hosts = scratch_ + "/known_hosts";
  ASSERT_TRUE(testing::WriteKnownHostsForProxy(o.known_hosts, proxy.port()));
  o.metrics = &metrics_;
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);

  // Three of the session's reads (of max_write * requests_in_flight bytes, 8 MiB on OpenSSH).
  const std::string data = Pattern(20 << 20, 53);
  GatedSource source(data, /*held_from=*/2);
  Result<std::unique_ptr<Upload>> upload = store->start_upload("md5/retried", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  Status sent;
  std::thread writer;
  struct Joined {
    GatedSource& source;
    std::thread& thread;
    ~Joined() {
      source.Open();
      if (thread.joinable()) thread.join();
    }
  } joined{source, writer};
  writer = std::thread([&] { sent = (*upload)->write(0, source, 0, data.size()); });
  // The first read's bytes are on the server, and hashed; the second read waits.
  ASSERT_TRUE(source.WaitForReads(2));
  const uint64_t hashed_before_cut = metrics_.bytes_hashed.load();
  EXPECT_GT(hashed_before_cut, 0u);
  EXPECT_LT(hashed_before_cut, data.size());
  const int connections = proxy.forwarded_connections();
  EXPECT_GE(proxy.CutOpenConnections(), 1);
  source.Open();
  writer.join();
  ASSERT_TRUE(sent.ok()) << sent.ToString();
  EXPECT_GT(proxy.forwarded_connections(), connections);  // it went on on a fresh one
  Result<ObjectInfo> done = (*upload)->complete(data.size(), PutOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->etag.value(), ETag::FromMd5(Md5Of(data)).value());
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());  // each byte once
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "md5/retried") == data);
}

// The names in `dir`, sorted, each as "./NAME\n".
std::string ServerFiles(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.insert("./" + entry.path().filename().string() + "\n");
  }
  std::string out;
  for (const std::string& name : names) out += name;
  return out;
}

// Waits (boundedly) for the check of md5sum the first streamed upload started.
bool WaitForMd5Probe(const SftpStore& store) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!store.Md5ProbeDone()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Uploads `data` to `key` in one streamed session; its completion.
Result<ObjectInfo> StreamUp(SftpStore& store, const std::string& key, const std::string& data) {
  MemorySource source(data);
  Result<std::unique_ptr<Upload>> upload = store.start_upload(key, UploadOptions{});
  if (!upload.ok()) return upload.status();
  Status sent = (*upload)->write(0, source, 0, data.size());
  if (!sent.ok()) return sent;
  return (*upload)->complete(data.size(), PutOptions{});
}

// With leave_upload_md5_to_server (a mount's default), the first streamed upload checks md5sum
// on a probe of known bytes in its directory (removed at once), never on a file read back
// here. Once it has passed, streamed uploads are not hashed, and the server gives their MD5;
// a name no shell may see is still hashed, as md5sum would never be asked for it.
TEST_F(SftpStoreTest, AStreamedUploadChecksMd5sumOnAProbeThenLeavesTheMd5ToIt) {
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.leave_upload_md5_to_server = true;
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern((5 << 20) + 3, 54);
  Result<ObjectInfo> first = StreamUp(*store, "probed/first", data);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(WaitForMd5Probe(*store));
  EXPECT_TRUE(store->Md5sumTrusted());
  EXPECT_EQ(store->server_md5_runs(), 1u);  // the probe

  const uint64_t hashed = metrics_.bytes_hashed.load();
  Result<ObjectInfo> second = StreamUp(*store, "probed/second", data);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(IsVersionTag(second->etag)) << second->etag.value();
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);
  Result<OptionalMd5> md5 = store->server_md5("probed/second", data.size());
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  ASSERT_TRUE(md5->has_value());
  EXPECT_EQ(**md5, Md5Of(data));
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);  // no byte read back here
  EXPECT_EQ(store->server_md5_runs(), 2u);

  Result<ObjectInfo> quoted = StreamUp(*store, "probed/it's", data);
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  EXPECT_EQ(quoted->etag.value(), ETag::FromMd5(Md5Of(data)).value());
  EXPECT_EQ(ServerFiles(root_ + "/probed"), "./first\n./it's\n./second\n");
}

// A probe md5sum answers wrongly turns it off: uploads stay hashed, and no file is asked of it.
TEST_F(SftpStoreTest, AProbeAnsweredWronglyKeepsUploadsHashed) {
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.leave_upload_md5_to_server = true;
  o.server_md5_command = "printf '%s  %s\\n' 0123456789abcdef0123456789abcdef";
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern((5 << 20) + 3, 55);
  ASSERT_TRUE(StreamUp(*store, "wrong/first", data).ok());
  ASSERT_TRUE(WaitForMd5Probe(*store));
  EXPECT_FALSE(store->Md5sumTrusted());
  Result<ObjectInfo> second = StreamUp(*store, "wrong/second", data);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->etag.value(), ETag::FromMd5(Md5Of(data)).value());
  Result<OptionalMd5> md5 = store->server_md5("wrong/second", data.size());
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  EXPECT_FALSE(md5->has_value());  // read here by the caller
  EXPECT_EQ(store->server_md5_runs(), 1u);
  EXPECT_EQ(ServerFiles(root_ + "/wrong"), "./first\n./second\n");
}

TEST_F(SftpStoreTest, TheServerComputesTheMd5OfAFileNobodyHashed) {
  // Written on the server, with a space and UTF-8 in its name: md5sum there hashes it. Its first
  // answer is checked against the bytes, read here; after that no byte comes here.
  const std::string name = "dir/caf\xc3\xa9 outside";
  const std::string data = Pattern((3 << 20) + 7, 51);
  fs::create_directories(fs::path(root_) / "dir");
  {
    std::ofstream out(fs::path(root_) / name, std::ios::binary);
    out << data;
  }
  Result<OptionalMd5> md5 = store_->server_md5(name, data.size());
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  ASSERT_TRUE(md5->has_value());
  EXPECT_EQ(**md5, Md5Of(data));
  EXPECT_EQ(metrics_.server_md5s.load(), 1u);
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());  // the check
  EXPECT_EQ(store_->server_md5_runs(), 1u);

  // Through ContentEtagStore: the server's MD5, recorded; no read, nothing hashed here.
  OpenContentEtags();
  counting_->ask_server = true;
  Result<ETag> etag = etags_->ContentEtag(name);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, ETag::FromMd5(Md5Of(data)));
  EXPECT_EQ(counting_->reads, 0u);
  EXPECT_EQ(metrics_.bytes_hashed.load(), data.size());
  EXPECT_EQ(metrics_.server_md5s.load(), 2u);
  OpenContentEtags();  // another mount of the same cache directory: recorded
  Result<ETag> again = etags_->ContentEtag(name);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *etag);
  EXPECT_EQ(metrics_.server_md5s.load(), 2u);

  // A file that is not there: none, and md5sum is still asked for the next one.
  Result<OptionalMd5> missing = store_->server_md5("dir/missing", 10);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  Result<OptionalMd5> still = store_->server_md5(name, data.size());
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(still->has_value());
  // An empty file is not asked for (SFTP shows FIFOs and devices empty too).
  Result<OptionalMd5> empty = store_->server_md5(name, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  EXPECT_EQ(store_->server_md5_runs(), 4u);
}

// md5sum follows links: a link another account put in a file's place must not have the
// target's MD5 pass for the file's, nor its bytes be read instead.
TEST_F(SftpStoreTest, TheServersMd5IsNeverALinkTargets) {
  const std::string data = Pattern(4096, 52);
  ASSERT_TRUE(Put("trusted", data).ok());
  Result<OptionalMd5> first = store_->server_md5("trusted", data.size());  // md5sum trusted
  ASSERT_TRUE(first.ok() && first->has_value());
  const std::string secret = scratch_ + "/md5-secret";
  std::ofstream(secret) << Pattern(data.size(), 53);
  ASSERT_EQ(::symlink(secret.c_str(), (root_ + "/linked").c_str()), 0);
  Result<OptionalMd5> md5 = store_->server_md5("linked", data.size());
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  EXPECT_FALSE(md5->has_value());
  EXPECT_EQ(store_->server_md5_runs(), 2u);  // it ran, and its answer was not taken

  OpenContentEtags();
  counting_->ask_server = true;
  Result<ETag> etag = etags_->ContentEtag("linked");
  EXPECT_EQ(etag.status().code(), StatusCode::kPermissionDenied) << etag.status().ToString();
}

TEST_F(SftpStoreTest, OddButHarmlessNamesGetTheServersMd5) {
  // Characters no shell reads as more than themselves between single quotes, and bytes that
  // are no UTF-8 at all: sent, and md5sum's line must name the file as sent.
  const std::vector<std::string> names = {"-looks-like-an-option", "a=b@c:d,e+f g.h_i",
                                          "caf\xc3\xa9", "\xff\xfe raw", "\xe2\x80\x99 quote"};
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    {
      std::ofstream out(fs::path(root_) / name, std::ios::binary);
      out << "bytes of " << name;
    }
    Result<OptionalMd5> md5 = store_->server_md5(name, 9 + name.size());
    ASSERT_TRUE(md5.ok()) << md5.status().ToString();
    ASSERT_TRUE(md5->has_value());
    EXPECT_EQ(**md5, Md5Of("bytes of " + name));
  }
  EXPECT_EQ(metrics_.server_md5s.load(), names.size());
}

TEST_F(SftpStoreTest, NamesAShellCouldMisreadAreNeverSentToIt) {
  // Each would run a command of its own in some shell (sh, csh, cmd.exe) if quoting went
  // wrong: none is sent (no command runs at all), and the file is hashed by reading.
  // Relative: a command run there starts in the account's home (the server is this machine's).
  const std::string canary_name = "objfs-canary-" + std::to_string(::getpid());
  const struct passwd* account = ::getpwnam(testing::SharedSftpServer().user.c_str());
  ASSERT_NE(account, nullptr);
  const fs::path canary = fs::path(account->pw_dir) / canary_name;
  const std::string touch = "touch " + canary_name;
  const std::vector<std::string> names = {"q'; " + touch + "; '",
                                          "d$(" + touch + ")",
                                          "b`" + touch + "`",
                                          "n\n" + touch,
                                          "s\\'x",
                                          "a & " + touch,
                                          "p | " + touch,
                                          "c;" + touch,
                                          "%PATH%",
                                          "x!y",
                                          "l\nm"};
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    {
      std::ofstream out(fs::path(root_) / name, std::ios::binary);
      out << "bytes of " << name;
    }
    Result<OptionalMd5> md5 = store_->server_md5(name, 64);
    ASSERT_TRUE(md5.ok()) << md5.status().ToString();
    EXPECT_FALSE(md5->has_value());
  }
  EXPECT_EQ(store_->server_md5_runs(), 0u);
  EXPECT_FALSE(fs::exists(canary));
  // Hashed by reading instead.
  OpenContentEtags();
  counting_->ask_server = true;
  const std::string name = names[0];
  Result<ETag> etag = etags_->ContentEtag(name);
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  EXPECT_EQ(*etag, ETag::FromMd5(Md5Of("bytes of " + name)));
  EXPECT_GT(counting_->reads, 0u);
  EXPECT_EQ(store_->server_md5_runs(), 0u);
}

// A store whose server_md5 runs `command` on the server, and the lines it logged.
struct LoggingStore {
  std::shared_ptr<SftpStore> store;
  std::shared_ptr<std::vector<std::string>> logged = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  size_t Said(std::string_view text) const {
    std::lock_guard lock(*mu);
    return static_cast<size_t>(std::count_if(logged->begin(), logged->end(), [&](const auto& l) {
      return l.find(text) != std::string::npos;
    }));
  }
};
// A store of options `o` whose log lines are kept.
LoggingStore LoggedStore(SftpStoreOptions o) {
  LoggingStore made;
  o.log = [logged = made.logged, mu = made.mu](LogLevel, const std::string& line) {
    std::lock_guard lock(*mu);
    logged->push_back(line);
  };
  made.store = MakeStore(o);
  return made;
}

LoggingStore StoreRunning(const std::string& root, Metrics* metrics, const std::string& command,
                          const std::string& cp_command = SftpStoreOptions().server_cp_command,
                          std::shared_ptr<UploadJournal> journal = nullptr) {
  SftpStoreOptions o = OptionsFor(root);
  o.metrics = metrics;
  o.server_md5_command = command;
  o.server_cp_command = cp_command;
  o.journal = std::move(journal);
  return LoggedStore(std::move(o));
}

TEST_F(SftpStoreTest, AServerThatCannotRunMd5sumIsNotAskedAgain) {
  // Stands for an account without a shell, or one without md5sum: the command is not found.
  LoggingStore s = StoreRunning(root_, &metrics_, "objfs-no-such-command --");
  ASSERT_NE(s.store, nullptr);
  for (const char* name : {"one", "two"}) {
    std::ofstream out(fs::path(root_) / name, std::ios::binary);
    out << name;
  }
  for (const char* name : {"one", "two"}) {
    Result<OptionalMd5> md5 = s.store->server_md5(name, 3);
    ASSERT_TRUE(md5.ok()) << md5.status().ToString();
    EXPECT_FALSE(md5->has_value());
  }
  EXPECT_EQ(s.store->server_md5_runs(), 1u);  // not asked for the second
  EXPECT_EQ(metrics_.server_md5s.load(), 0u);
  EXPECT_EQ(s.Said("md5sum cannot run on the server (exit status 127"), 1u);
}

TEST_F(SftpStoreTest, AServerWhoseFirstMd5IsWrongIsNotTrusted) {
  // Stands for a shell that sees other files than SFTP shows (a chroot, a virtual file system):
  // a well-formed line with another file's MD5.
  LoggingStore s =
      StoreRunning(root_, &metrics_, "printf '%s  %s\\n' 0123456789abcdef0123456789abcdef");
  ASSERT_NE(s.store, nullptr);
  for (const char* name : {"one", "two"}) {
    std::ofstream out(fs::path(root_) / name, std::ios::binary);
    out << name;
  }
  // The first: the MD5 of the bytes the check read, never the server's.
  Result<OptionalMd5> first = s.store->server_md5("one", 3);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ(**first, Md5Of("one"));
  // The next: not asked.
  Result<OptionalMd5> second = s.store->server_md5("two", 3);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->has_value());
  EXPECT_EQ(s.store->server_md5_runs(), 1u);
  EXPECT_EQ(metrics_.server_md5s.load(), 0u);
  EXPECT_EQ(s.Said("is not that of the bytes SFTP reads"), 1u);
}

// The sockets this process has open.
int OpenSockets() {
  int sockets = 0;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++sockets;
  }
  return sockets;
}

TEST_F(SftpStoreTest, AnMd5sumThatNeverAnswersIsWaitedForBoundedly) {
  // Stands for a server whose disk under the file stalls: the command says nothing for longer
  // than its time (request_timeout, and the file read at 10 MiB/s). The call ends then, without
  // an MD5 (the caller reads the file instead); it is not tried again, and the store goes on
  // serving at once.
  LoggingStore s;
  {
    SftpStoreOptions o = OptionsFor(root_);
    o.metrics = &metrics_;
    o.server_md5_command = "sleep 20; md5sum --";
    o.request_timeout = std::chrono::milliseconds(1000);
    o.operation_timeout = std::chrono::milliseconds(5000);
    s.store = MakeStore(o);
  }
  ASSERT_NE(s.store, nullptr);
  {
    std::ofstream out(fs::path(root_) / "stalled", std::ios::binary);
    out << "stalled";
  }
  ASSERT_TRUE(s.store->head("stalled").ok());  // one connection open
  const int sockets = OpenSockets();
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    Result<OptionalMd5> md5 = s.store->server_md5("stalled", 7);
    const auto waited = std::chrono::steady_clock::now() - start;
    // A bound, not a speed: it did not wait for the command's 20 s.
    EXPECT_LT(waited, std::chrono::seconds(15));
    ASSERT_TRUE(md5.ok()) << md5.status().ToString();
    EXPECT_FALSE(md5->has_value());  // the caller reads the file instead
    EXPECT_EQ(s.store->server_md5_runs(), static_cast<uint64_t>(attempt));  // once each
    // Not taken for a stalled server: the next call is served, on a new connection.
    Result<ObjectInfo> info = s.store->head("stalled");
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->size, 7u);
    // The connection the command ran on is gone, its descriptor with it.
    EXPECT_EQ(OpenSockets(), sockets);
  }
  EXPECT_EQ(metrics_.server_md5s.load(), 0u);
}

// More MD5s asked at once than the connections that may hash on the server (half of them):
// the calls that find every one hashing wait for one, and each file's MD5 still comes from the
// server, none read back here. md5sum takes a second here, so that the calls overlap.
TEST_F(SftpStoreTest, Md5sumCallsBeyondItsConnectionsWaitRatherThanReadTheFile) {
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.sessions = 2;  // one may hash
  o.server_md5_command = "sleep 1; md5sum --";
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  std::vector<std::string> data;
  for (int i = 0; i < 4; ++i) {
    data.push_back(Pattern((1 << 20) + i, 61 + i));
    std::ofstream out(fs::path(root_) / ("f" + std::to_string(i)), std::ios::binary);
    out << data.back();
  }
  // Trusted first: its first answer is checked against the file's bytes, read here.
  Result<OptionalMd5> first = store->server_md5("f0", data[0].size());
  ASSERT_TRUE(first.ok() && first->has_value()) << first.status().ToString();
  const uint64_t hashed = metrics_.bytes_hashed.load();

  std::vector<std::optional<Result<OptionalMd5>>> got(3);
  std::vector<std::thread> askers;
  for (int i = 1; i <= 3; ++i) {
    askers.emplace_back(
        [&, i] { got[i - 1] = store->server_md5("f" + std::to_string(i), data[i].size()); });
  }
  for (std::thread& t : askers) t.join();
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(got[i - 1]->ok()) << got[i - 1]->status().ToString();
    ASSERT_TRUE((*got[i - 1])->has_value()) << "f" << i << " was left to be read here";
    EXPECT_EQ(**(*got[i - 1]), Md5Of(data[i]));
  }
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);  // no byte read back
  EXPECT_EQ(store->server_md5_runs(), 4u);
  EXPECT_EQ(metrics_.server_md5s.load(), 4u);
}

TEST_F(SftpStoreTest, NoServerMd5HashesHere) {
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.server_md5 = false;
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  {
    std::ofstream out(fs::path(root_) / "file", std::ios::binary);
    out << "file";
  }
  Result<OptionalMd5> md5 = store->server_md5("file", 4);
  ASSERT_TRUE(md5.ok());
  EXPECT_FALSE(md5->has_value());
  EXPECT_EQ(store->server_md5_runs(), 0u);
}

TEST_F(SftpStoreTest, ASmallFileIsReadRatherThanHashedOnTheServer) {
  SftpStoreOptions o = OptionsFor(root_);
  o.server_md5_min_size = 4 << 20;  // the default
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern((4 << 20) - 1, 52);
  {
    std::ofstream out(fs::path(root_) / "small", std::ios::binary);
    out << data;
  }
  Result<OptionalMd5> small = store->server_md5("small", data.size());
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->has_value());
  EXPECT_EQ(store->server_md5_runs(), 0u);
  {
    std::ofstream out(fs::path(root_) / "small", std::ios::binary | std::ios::app);
    out << "x";
  }
  Result<OptionalMd5> big = store->server_md5("small", data.size() + 1);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(big->has_value());
  EXPECT_EQ(**big, Md5Of(data + "x"));
}

TEST_F(SftpStoreTest, AFirstFileGoneOrChangedDecidesNothing) {
  // The check of the first answer needs the file as md5sum saw it: gone, or of another size
  // than asked for, the question stays open, and md5sum is asked for the next file.
  Result<OptionalMd5> gone = store_->server_md5("gone", 10);
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone->has_value());
  {
    std::ofstream out(fs::path(root_) / "file", std::ios::binary);
    out << "the file's bytes";
  }
  Result<OptionalMd5> resized = store_->server_md5("file", 3);
  ASSERT_TRUE(resized.ok());
  EXPECT_FALSE(resized->has_value());
  Result<OptionalMd5> md5 = store_->server_md5("file", 16);
  ASSERT_TRUE(md5.ok());
  ASSERT_TRUE(md5->has_value());
  EXPECT_EQ(**md5, Md5Of("the file's bytes"));
  EXPECT_EQ(metrics_.server_md5s.load(), 1u);
}

TEST_F(SftpStoreTest, ACommandThatNeverStopsTalkingIsLeft) {
  // Stands for a ForceCommand menu that answers a closed input without end: objfs stops
  // reading at once (more than md5sum's one line), drops the connection, and hashes here.
  LoggingStore s = StoreRunning(root_, &metrics_, "yes --");
  ASSERT_NE(s.store, nullptr);
  {
    std::ofstream out(fs::path(root_) / "file", std::ios::binary);
    out << "bytes";
  }
  Result<OptionalMd5> md5 = s.store->server_md5("file", 5);
  ASSERT_TRUE(md5.ok()) << md5.status().ToString();
  ASSERT_TRUE(md5->has_value());
  EXPECT_EQ(**md5, Md5Of("bytes"));  // read here
  EXPECT_EQ(metrics_.server_md5s.load(), 0u);
  EXPECT_EQ(s.Said("md5sum cannot run on the server"), 1u);
}

// ---- cp on the server: copies within the mount, and the unchanged bytes of an edit ----

// Whether `path` shares its blocks with another file (a clone), as filefrag shows it.
bool SharesBlocks(const std::string& path) {
  testing::CommandResult r = testing::RunCommand({"filefrag", "-v", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out.find("shared") != std::string::npos;
}

TEST_F(SftpStoreTest, OnXfsACopyAndAnEditAreClonesMadeByCp) {
  testing::XfsSftpTestDir xfs(CurrentTestName());
  if (xfs.dir().path.empty()) GTEST_SKIP() << xfs.why();
  SftpStoreOptions o = OptionsFor(xfs.dir().path);
  o.metrics = &metrics_;
  o.server_cp_copy_data_rate = 0;  // clones of every file over 4 MiB
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const uint64_t kMiB = 1 << 20;
  const std::string data = Pattern(8 * kMiB + 3, 61);
  MemorySource bytes(data);
  Result<ObjectInfo> src = store->put("cp/big", bytes, PutOptions{});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  // put's MD5 as the source's ETag, as ContentEtagStore gives it (which checks the version).
  CopyOptions unchecked;
  unchecked.if_match_source = false;
  Result<ObjectInfo> copied = store->copy(*src, "cp/copy", unchecked);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(store->server_cp_runs(), 1u);
  EXPECT_EQ(metrics_.server_cps.load(), 1u);
  EXPECT_EQ(copied->etag, src->etag);  // kept: the same bytes
  EXPECT_TRUE(ReadLocalFile(fs::path(xfs.dir().path) / "cp/copy") == data);
  EXPECT_TRUE(SharesBlocks(xfs.dir().path + "/cp/copy"));

  // A source whose name a shell could misread: copy-data, no cp. (The destination's name never
  // reaches the shell: cp writes the temporary file.)
  MemorySource again(data);
  Result<ObjectInfo> quoted = store->put("cp/it's", again, PutOptions{});
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  ASSERT_TRUE(store->copy(*quoted, "cp/unquoted", unchecked).ok());
  EXPECT_EQ(store->server_cp_runs(), 1u);
  EXPECT_TRUE(ReadLocalFile(fs::path(xfs.dir().path) / "cp/unquoted") == data);
  EXPECT_FALSE(SharesBlocks(xfs.dir().path + "/cp/unquoted"));

  // An edit: the base cloned first, the change written over it, the end cut.
  Result<ObjectInfo> base = store->head("cp/big");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Metrics counted_metrics;
  MetricsStore counted(store, counted_metrics);
  {
    // A stale version is refused, before anything is copied.
    ObjectInfo stale = *base;
    stale.etag = VersionTag(stale.size, 1000000000);
    Result<std::unique_ptr<Upload>> upload = counted.start_upload("cp/big", UploadOptions{});
    ASSERT_TRUE(upload.ok()) << upload.status().ToString();
    EXPECT_EQ((*upload)->copy_whole(stale).code(), StatusCode::kPreconditionFailed);
    EXPECT_EQ(store->server_cp_runs(), 1u);
  }
  Result<std::unique_ptr<Upload>> upload = counted.start_upload("cp/big", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_TRUE((*upload)->copy_whole(*base).ok());
  const std::string patch = Pattern(4096, 65);
  MemorySource patch_source(patch);
  ASSERT_TRUE((*upload)->write(3 * kMiB, patch_source, 0, patch.size()).ok());
  PutOptions put;
  put.if_match = base->etag;
  Result<ObjectInfo> done = (*upload)->complete(7 * kMiB, put);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  std::string want = data.substr(0, 7 * kMiB);
  want.replace(3 * kMiB, patch.size(), patch);
  EXPECT_TRUE(ReadLocalFile(fs::path(xfs.dir().path) / "cp/big") == want);
  EXPECT_TRUE(IsVersionTag(done->etag)) << done->etag.value();  // no MD5 of bytes never seen
  EXPECT_EQ(store->server_cp_runs(), 2u);
  EXPECT_EQ(counted_metrics.bytes_copied_on_server.load(), data.size());
  EXPECT_EQ(counted_metrics.bytes_written.load(), patch.size());
  EXPECT_EQ(counted_metrics.bytes_read.load(), 0u);
  EXPECT_TRUE(SharesBlocks(xfs.dir().path + "/cp/big"));
  EXPECT_TRUE(TemporaryFiles(xfs.dir().path).empty());
}

TEST_F(SftpStoreTest, OnXfsOnlyFilesCopyDataWouldTakeLongerOnAreCloned) {
  // A clone costs the shell's start: once one took that long, a file that copy-data (here taken
  // to copy 1 TiB/s) would copy sooner goes by copy-data.
  testing::XfsSftpTestDir xfs(CurrentTestName());
  if (xfs.dir().path.empty()) GTEST_SKIP() << xfs.why();
  SftpStoreOptions o = OptionsFor(xfs.dir().path);
  o.metrics = &metrics_;
  o.server_cp_copy_data_rate = 1ull << 40;
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern(6 << 20, 71);
  MemorySource bytes(data);
  ASSERT_TRUE(store->put("rule/src", bytes, PutOptions{}).ok());
  Result<ObjectInfo> src = store->head("rule/src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  for (const char* dst : {"rule/first", "rule/second"}) {
    ASSERT_TRUE(store->copy(*src, dst, CopyOptions{}).ok());
    EXPECT_TRUE(ReadLocalFile(fs::path(xfs.dir().path) / dst) == data);
  }
  EXPECT_EQ(store->server_cp_runs(), 1u);  // the first: how long a clone takes is not known
  EXPECT_EQ(metrics_.server_cps.load(), 1u);
  EXPECT_TRUE(SharesBlocks(xfs.dir().path + "/rule/first"));
  EXPECT_FALSE(SharesBlocks(xfs.dir().path + "/rule/second"));
}

TEST_F(SftpStoreTest, WithoutCopyDataACopyIsMadeByCpOnTheServer) {
  // Stands for OpenSSH before 9.0: without cp, each byte would come here and go back.
  std::shared_ptr<SftpStore> store = StoreWithoutCopyData();
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern((6 << 20) + 5, 69);
  MemorySource bytes(data);
  Result<ObjectInfo> src = store->put("nocd/src", bytes, PutOptions{});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  CopyOptions unchecked;
  unchecked.if_match_source = false;
  const uint64_t hashed = metrics_.bytes_hashed.load();
  Result<ObjectInfo> copied = store->copy(*src, "nocd/copy", unchecked);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(store->server_cp_runs(), 1u);
  EXPECT_EQ(metrics_.server_cps.load(), 1u);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed);  // nothing came here
  EXPECT_EQ(copied->etag, src->etag);
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "nocd/copy") == data);
  // Under 4 MiB: through this machine, no cp.
  const std::string small = Pattern(1 << 20, 70);
  MemorySource small_bytes(small);
  Result<ObjectInfo> small_src = store->put("nocd/small", small_bytes, PutOptions{});
  ASSERT_TRUE(small_src.ok()) << small_src.status().ToString();
  ASSERT_TRUE(store->copy(*small_src, "nocd/small-copy", unchecked).ok());
  EXPECT_EQ(store->server_cp_runs(), 1u);
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "nocd/small-copy") == small);
  EXPECT_TRUE(TemporaryFiles(root_).empty());
}

TEST_F(SftpStoreTest, ACpThatCannotCloneIsNotRunAgain) {
  // cp itself on the test server's ext4, which cannot clone (exit status 1); `true`, which
  // exits 0 and copies nothing, as a cp would that sees other files than SFTP shows (a chroot,
  // a virtual file system); a missing command (no shell, no cp: exit status 127). Each fails
  // once, and copy-data copies from then on.
  for (const std::string command : {"cp", "true", "objfs-no-such-command"}) {
    SCOPED_TRACE(command);
    Metrics metrics;
    LoggingStore s = StoreRunning(root_, &metrics, "md5sum --", command);
    ASSERT_NE(s.store, nullptr);
    const std::string data = Pattern(5 << 20, 63);
    MemorySource bytes(data);
    ASSERT_TRUE(s.store->put("nothing/src", bytes, PutOptions{}).ok());
    Result<ObjectInfo> src = s.store->head("nothing/src");
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    for (const char* dst : {"nothing/one", "nothing/two"}) {
      Result<ObjectInfo> copied = s.store->copy(*src, dst, CopyOptions{});
      ASSERT_TRUE(copied.ok()) << copied.status().ToString();
      EXPECT_TRUE(ReadLocalFile(fs::path(root_) / dst) == data);  // by copy-data
    }
    EXPECT_EQ(s.store->server_cp_runs(), 1u);  // not run for the second
    EXPECT_EQ(metrics.server_cps.load(), 0u);
    EXPECT_EQ(s.Said("cp cannot clone files on the server"), 1u);
    EXPECT_TRUE(TemporaryFiles(root_).empty());
  }
}

TEST_F(SftpStoreTest, AnEditWhoseCpCannotRunCopiesTheRangesInstead) {
  const uint64_t kMiB = 1 << 20;
  LoggingStore s = StoreRunning(root_, &metrics_, "md5sum --", "true");
  ASSERT_NE(s.store, nullptr);
  const std::string old_data = Pattern(6 * kMiB, 66);
  MemorySource bytes(old_data);
  ASSERT_TRUE(s.store->put("edit/ranges", bytes, PutOptions{}).ok());
  Result<ObjectInfo> base = s.store->head("edit/ranges");  // the version, as the writer holds it
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Result<std::unique_ptr<Upload>> upload = s.store->start_upload("edit/ranges", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  EXPECT_EQ((*upload)->copy_whole(*base).code(), StatusCode::kUnsupported);
  ASSERT_TRUE((*upload)->copy(0, *base, 0, 6 * kMiB).ok());
  const std::string tail = Pattern(kMiB, 67);
  MemorySource tail_source(tail);
  ASSERT_TRUE((*upload)->write(6 * kMiB, tail_source, 0, kMiB).ok());
  Result<ObjectInfo> done = (*upload)->complete(7 * kMiB, PutOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "edit/ranges") == old_data + tail);
  EXPECT_EQ(s.store->server_cp_runs(), 1u);
  EXPECT_EQ(s.Said("cp cannot clone files on the server"), 1u);
}

TEST_F(SftpStoreTest, ALinkPutInPlaceOfTheTemporaryFileIsNeverFollowed) {
  // Anyone who may write the directory could swap the temporary file for a link to a file of
  // the account's elsewhere, between its creation and cp: the command here does that first.
  // Then either cp runs, which removes the link and makes its own file, or nothing does, and
  // objfs, finding no copy, removes the link and makes the file again for copy-data. Either way
  // the file linked to stays as it was.
  const std::string victim = scratch_ + "/victim";
  const std::string swap = "swap() { for last; do :; done; ln -sf '" + victim + "' \"$last\"; ";
  for (const bool copy_data : {false, true}) {
    SCOPED_TRACE(copy_data ? "swap only, then copy-data" : "swap, then cp");
    {
      std::ofstream out(victim, std::ios::binary);
      out << "not to be written";
    }
    SftpStoreOptions o = OptionsFor(root_);
    o.use_copy_data = copy_data;  // without: cp --reflink=auto, which copies on ext4
    o.server_cp_command = swap + (copy_data ? "}; swap" : "cp \"$@\"; }; swap");
    std::shared_ptr<SftpStore> store = MakeStore(o);
    ASSERT_NE(store, nullptr);
    const std::string data = Pattern(5 << 20, 72);
    MemorySource bytes(data);
    Result<ObjectInfo> src = store->put("link/src", bytes, PutOptions{});
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    CopyOptions unchecked;
    unchecked.if_match_source = false;
    Result<ObjectInfo> copied = store->copy(*src, "link/copy", unchecked);
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    EXPECT_EQ(store->server_cp_runs(), 1u);
    EXPECT_TRUE(ReadLocalFile(victim) == "not to be written");
    EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "link/copy") == data);
    EXPECT_FALSE(fs::is_symlink(fs::path(root_) / "link/copy"));
    EXPECT_TRUE(TemporaryFiles(root_).empty());
  }
}

// Whoever may write the directory may put something else in place of an upload's temporary
// file between two of its writes: a link to a file of the account's elsewhere (which SFTP, with
// no O_NOFOLLOW, would open), or a file of their own made to look like it. No byte goes there,
// and nothing takes the destination's name.
TEST_F(SftpStoreTest, WhatTookTheTemporaryFilesNameIsNeverWrittenNorRenamed) {
  const std::string victim = scratch_ + "/victim";
  enum class Swap { kLinkToAFileOfTheAccount, kFileOfAnotherOwner, kFifo };
  for (const Swap swap : {Swap::kLinkToAFileOfTheAccount, Swap::kFileOfAnotherOwner, Swap::kFifo}) {
    for (const bool before_complete : {false, true}) {
      SCOPED_TRACE(std::string(swap == Swap::kLinkToAFileOfTheAccount ? "a link"
                               : swap == Swap::kFifo                  ? "a FIFO (opened at once)"
                                                                      : "a file") +
                   (before_complete ? ", before complete" : ", before a write"));
      const std::string original = "not to be written";
      {
        std::ofstream out(victim, std::ios::binary | std::ios::trunc);
        out << original;
      }
      const std::string part = Pattern(1 << 20, 73);
      MemorySource bytes(part);
      Result<std::unique_ptr<Upload>> upload = store_->start_upload("swap/f", UploadOptions{});
      ASSERT_TRUE(upload.ok()) << upload.status().ToString();
      ASSERT_TRUE((*upload)->write(0, bytes, 0, bytes.size()).ok());
      if (before_complete) {
        ASSERT_TRUE((*upload)->write(part.size(), bytes, 0, bytes.size()).ok());
      }
      std::vector<std::string> temporary = TemporaryFiles(root_);
      ASSERT_EQ(temporary.size(), 1u);
      struct stat made {};
      ASSERT_EQ(::lstat(temporary[0].c_str(), &made), 0);
      ASSERT_EQ(::unlink(temporary[0].c_str()), 0);
      std::string impostor = victim;
      if (swap == Swap::kLinkToAFileOfTheAccount) {
        ASSERT_EQ(::symlink(victim.c_str(), temporary[0].c_str()), 0) << std::strerror(errno);
      } else if (swap == Swap::kFifo) {
        ASSERT_EQ(::mkfifo(temporary[0].c_str(), 0600), 0) << std::strerror(errno);
      } else {
        // Its owner's own file, with the mode and the times the temporary file had (linked
        // from elsewhere too, to be read after objfs removed the name).
        impostor = scratch_ + "/impostor";
        ::unlink(impostor.c_str());
        {
          std::ofstream out(impostor, std::ios::binary);
          out << original;
        }
        ASSERT_EQ(::chown(impostor.c_str(), 65534, 65534), 0) << std::strerror(errno);
        ASSERT_EQ(::chmod(impostor.c_str(), made.st_mode & 07777), 0);
        const timespec times[2] = {made.st_atim, made.st_mtim};
        ASSERT_EQ(::utimensat(AT_FDCWD, impostor.c_str(), times, 0), 0);
        ASSERT_EQ(::link(impostor.c_str(), temporary[0].c_str()), 0) << std::strerror(errno);
      }
      if (!before_complete) {
        Status wrote = (*upload)->write(part.size(), bytes, 0, bytes.size());
        EXPECT_FALSE(wrote.ok());
        EXPECT_NE(wrote.message().find("no longer the file this upload made"), std::string::npos)
            << wrote.ToString();
      }
      Result<ObjectInfo> done = (*upload)->complete(2 * part.size(), PutOptions{});
      EXPECT_FALSE(done.ok());
      EXPECT_TRUE(ReadLocalFile(impostor) == original) << "written through what took the name";
      std::error_code ignored;
      EXPECT_FALSE(fs::exists(fs::symlink_status(fs::path(root_) / "swap/f", ignored)))
          << "renamed onto the destination";
      (void)(*upload)->abort();
      upload->reset();
      EXPECT_TRUE(TemporaryFiles(root_).empty());
    }
  }
}

// The same for cp's clone, which objfs opens by name before it writes into it or renames it:
// a hard link put in its place, to an older file of the account's of the same size (where the
// server lets others link files they do not own: fs.protected_hardlinks=0, the BSDs), is not
// taken for it. The cp run here makes that link once it has copied.
TEST_F(SftpStoreTest, AHardLinkPutInPlaceOfTheCloneIsNotTakenForIt) {
  const std::string data = Pattern(5 << 20, 74);
  const std::string victim = scratch_ + "/victim";
  {
    std::ofstream out(victim, std::ios::binary);
    out << std::string(data.size(), 'v');
  }
  timespec old_times[2] = {};
  old_times[0].tv_sec = old_times[1].tv_sec = 1600000000;
  ASSERT_EQ(::utimensat(AT_FDCWD, victim.c_str(), old_times, 0), 0);
  SftpStoreOptions o = OptionsFor(root_);
  o.use_copy_data = false;  // cp --reflink=auto, which copies on ext4
  o.server_cp_command = "swap() { cp \"$@\" || return; for last; do :; done; ln -f '" + victim +
                        "' \"$last\"; }; swap";
  std::shared_ptr<SftpStore> store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  MemorySource bytes(data);
  Result<ObjectInfo> src = store->put("hard/src", bytes, PutOptions{});
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  auto victim_kept = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(victim.c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, 1600000000) << "the victim's times were set";
    EXPECT_TRUE(ReadLocalFile(victim) == std::string(data.size(), 'v')) << "the victim was written";
    struct stat dst {};
    if (::lstat((root_ + "/hard/copy").c_str(), &dst) == 0) {
      EXPECT_NE(dst.st_ino, st.st_ino) << "the victim was renamed onto the destination";
    }
  };
  CopyOptions unchecked;
  unchecked.if_match_source = false;
  Result<ObjectInfo> copied = store->copy(*src, "hard/copy", unchecked);
  // Made again without cp, under another name: the copy is the source's bytes.
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_TRUE(ReadLocalFile(root_ + "/hard/copy") == data);
  victim_kept();

  Result<std::unique_ptr<Upload>> upload = store->start_upload("hard/copy", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  Status whole = (*upload)->copy_whole(*src);
  if (whole.ok()) {
    const std::string tail = "appended";
    MemorySource more(tail);
    (void)(*upload)->write(data.size(), more, 0, tail.size());
    (void)(*upload)->complete(data.size() + tail.size(), PutOptions{});
  }
  (void)(*upload)->abort();
  victim_kept();
}

TEST_F(SftpStoreTest, ACpThatHangsIsGivenUpBoundedlyAndNotRunAgain) {
  // A clone is a shortcut: it gets request_timeout and the file at 640 MiB/s, not the minutes
  // server work may take. Then the copy is made again under another name by copy-data (the cp
  // may still write the first), and cp is not run again in the store.
  auto journal = std::make_shared<RecordingJournal>();
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.server_cp_command = "sleep 20; cp";
  o.request_timeout = std::chrono::milliseconds(1000);
  o.operation_timeout = std::chrono::milliseconds(5000);
  o.journal = journal;
  LoggingStore s = LoggedStore(std::move(o));
  ASSERT_NE(s.store, nullptr);
  const std::string data = Pattern(5 << 20, 73);
  MemorySource bytes(data);
  ASSERT_TRUE(s.store->put("hang/src", bytes, PutOptions{}).ok());
  Result<ObjectInfo> src = s.store->head("hang/src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  for (const char* dst : {"hang/one", "hang/two"}) {
    const auto start = std::chrono::steady_clock::now();
    Result<ObjectInfo> copied = s.store->copy(*src, dst, CopyOptions{});
    // A bound, not a speed: it did not wait for the command's 20 s.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    EXPECT_TRUE(ReadLocalFile(fs::path(root_) / dst) == data);
  }
  EXPECT_EQ(s.store->server_cp_runs(), 1u);
  EXPECT_EQ(metrics_.server_cps.load(), 0u);
  EXPECT_EQ(s.Said("it is not run again in this mount"), 1u);
  EXPECT_EQ(TemporaryFiles(root_).size(), 1u);  // the one cp may still write, left noted
}

// A connection that breaks under a cp that has worked (a network cut, a killed session) is
// the connection's failure: that copy is made again without cp, and cp stays on for the copies
// after it. Before, that one break turned cp off for the rest of the mount, and every later
// copy of a large file went through this machine (or by copy-data instead of a clone).
TEST_F(SftpStoreTest, ABrokenConnectionUnderACpThatWorkedLeavesCpOn) {
  const std::string runs = (fs::path(root_) / "cp-runs").string();
  // cp, except that its second run kills the SSH session it runs in (the shell's parent).
  const std::string command =
      "objfs_cp() { n=$(cat '" + runs + "' 2>/dev/null || echo 0); echo $((n + 1)) > '" + runs +
      "'; if [ \"$n\" = 1 ]; then kill -9 $PPID; fi; cp \"$@\"; }; objfs_cp";
  SftpStoreOptions o = OptionsFor(root_);
  o.metrics = &metrics_;
  o.use_copy_data = false;  // cp copies (no clone on ext4), else every byte comes here
  o.server_cp_command = command;
  LoggingStore s = LoggedStore(std::move(o));
  ASSERT_NE(s.store, nullptr);
  const std::string data = Pattern(5 << 20, 74);
  MemorySource bytes(data);
  ASSERT_TRUE(s.store->put("cut/src", bytes, PutOptions{}).ok());
  Result<ObjectInfo> src = s.store->head("cut/src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const uint64_t hashed = metrics_.bytes_hashed.load();
  for (const char* dst : {"cut/one", "cut/two", "cut/three"}) {
    SCOPED_TRACE(dst);
    Result<ObjectInfo> copied = s.store->copy(*src, dst, CopyOptions{});
    ASSERT_TRUE(copied.ok()) << copied.status().ToString();
    EXPECT_TRUE(ReadLocalFile(fs::path(root_) / dst) == data);
  }
  // One and three by cp; two, whose cp's connection broke, again through this machine.
  EXPECT_EQ(s.store->server_cp_runs(), 3u);
  EXPECT_EQ(metrics_.server_cps.load(), 2u);
  EXPECT_EQ(metrics_.bytes_hashed.load(), hashed + data.size());
  EXPECT_EQ(s.Said("it is not run again in this mount"), 0u);
}

// A copy on the server (cp within the mount, and the unchanged bytes of an edit) opens its
// source by name, and an SFTP open follows links: a link another account put in the file's
// place gave the copy the bytes of any file on the server the account may read, a root-only
// one for a root mount, under the copy's own (readable) mode. The file opened must be the one
// the name showed.
TEST_F(SftpStoreTest, ACopyNeverReadsThroughALinkPutInItsSourcesPlace) {
  const std::string secret = scratch_ + "/secret";
  // As alike as the link can make it: the link's size is its target's length, and its mtime
  // is set to the secret's, so that the two have one version.
  std::ofstream(secret) << std::string(secret.size(), 's');
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  timespec times[2] = {};
  times[0].tv_sec = times[1].tv_sec = 1600000000;
  ASSERT_EQ(::utimensat(AT_FDCWD, secret.c_str(), times, 0), 0);
  auto link_to_secret = [&](const std::string& name) {
    ASSERT_EQ(::symlink(secret.c_str(), name.c_str()), 0);
    ASSERT_EQ(::utimensat(AT_FDCWD, name.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
  };
  ASSERT_TRUE(fs::create_directories(fs::path(root_) / "in"));
  ASSERT_NO_FATAL_FAILURE(link_to_secret(root_ + "/in/src"));
  Result<ObjectInfo> src = store_->head("in/src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  CopyOptions unchecked;
  unchecked.if_match_source = false;
  Result<ObjectInfo> copied = store_->copy(*src, "in/copy", unchecked);
  EXPECT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kPermissionDenied) << copied.status().ToString();
  EXPECT_FALSE(fs::exists(fs::path(root_) / "in/copy"));

  // The unchanged bytes of an edit, copied from its base.
  ASSERT_TRUE(Put("in/edited", Pattern(1 << 20, 11)).ok());
  Result<ObjectInfo> base = store_->head("in/edited");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Result<std::unique_ptr<Upload>> upload = store_->start_upload("in/edited", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ObjectInfo through_link = *src;  // the base's name is now the link
  ASSERT_EQ(::unlink((root_ + "/in/edited").c_str()), 0);
  ASSERT_NO_FATAL_FAILURE(link_to_secret(root_ + "/in/edited"));
  through_link.key = "in/edited";
  Status range = (*upload)->copy(0, through_link, 0, 4);
  EXPECT_EQ(range.code(), StatusCode::kPermissionDenied) << range.ToString();
  (void)(*upload)->abort();
  EXPECT_TRUE(TemporaryFiles(root_).empty());
}

// Another account who may write a file's directory puts a link to a file of the mount's account
// in its place, with the file's size and mtime: the mount still holds the file's version, and
// the open follows the link. Nothing of the link's target is read, with a version or without;
// a read of the version finds it gone (as for a file of other bytes), one without is refused.
TEST_F(SftpStoreTest, AReadNeverGoesThroughALinkPutInTheFilesPlace) {
  const std::string secret = scratch_ + "/read-secret";
  std::ofstream(secret) << "the mount's account's own secret";
  timespec times[2] = {};
  times[0].tv_sec = times[1].tv_sec = 1600000000;
  ASSERT_EQ(::utimensat(AT_FDCWD, secret.c_str(), times, 0), 0);
  const std::string shown(fs::file_size(secret), 'o');
  ASSERT_TRUE(Put("shared/file", shown).ok());
  const std::string file = root_ + "/shared/file";
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  ASSERT_EQ(::chmod(secret.c_str(), 0644), 0);
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  Result<ObjectInfo> named = store_->head("shared/file");
  ASSERT_TRUE(named.ok()) << named.status().ToString();

  ASSERT_EQ(::unlink(file.c_str()), 0);
  ASSERT_EQ(::symlink(secret.c_str(), file.c_str()), 0);
  std::string buf(shown.size(), '\0');
  auto bytes = std::as_writable_bytes(std::span(buf));
  Result<size_t> versioned = store_->read("shared/file", 0, bytes, &named->etag);
  EXPECT_EQ(versioned.status().code(), StatusCode::kPreconditionFailed)
      << versioned.status().ToString();
  Result<size_t> unversioned = store_->read("shared/file", 0, bytes, nullptr);
  EXPECT_EQ(unversioned.status().code(), StatusCode::kPermissionDenied)
      << unversioned.status().ToString();
  EXPECT_EQ(buf.find("secret"), std::string::npos);

  // The file itself, back in its place, reads as before.
  ASSERT_EQ(::unlink(file.c_str()), 0);
  std::ofstream(file) << shown;
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  Result<size_t> back = store_->read("shared/file", 0, bytes, &named->etag);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(buf, shown);
}

// rmdir of a directory the mount shows empty, which holds an upload's temporary file (of a
// mount in flight, or one that was killed): the directory cannot go, and the removal said it
// had (rmdir returned 0, and a later mkdir of the name failed with EEXIST).
TEST_F(SftpStoreTest, ADirectoryThatHoldsOnlyTemporaryFilesIsNotSaidRemoved) {
  ASSERT_TRUE(store_->put("kept/", MemorySource(""), PutOptions{}).ok());
  const std::string temporary = root_ + "/kept/.objfs-tmp-0123456789abcdef";
  std::ofstream(temporary) << "an upload";
  Status removed = store_->remove("kept/");
  EXPECT_EQ(removed.code(), StatusCode::kNotEmpty) << removed.ToString();
  EXPECT_NE(removed.message().find("temporary files of uploads"), std::string::npos)
      << removed.ToString();
  EXPECT_TRUE(fs::is_directory(fs::path(root_) / "kept"));
  // Without it, the directory goes; a directory with other objects stays, as a prefix does.
  ASSERT_EQ(::unlink(temporary.c_str()), 0);
  EXPECT_TRUE(store_->remove("kept/").ok());
  EXPECT_FALSE(fs::exists(fs::path(root_) / "kept"));
  ASSERT_TRUE(Put("full/f", "x").ok());
  EXPECT_TRUE(store_->remove("full/").ok());
  EXPECT_TRUE(fs::exists(fs::path(root_) / "full/f"));
}

TEST_F(SftpStoreTest, ACpWhoseEndIsUnknownLeavesItsTemporaryFileToTheNextMount) {
  // Stands for a ForceCommand menu that answers without end: the command is left running, so
  // whatever it does may still write the temporary file. The upload cannot be used; its abort
  // leaves the file, noted, for the next mount's clean-up, instead of removing a file the
  // command could make again.
  auto journal = std::make_shared<RecordingJournal>();
  LoggingStore s = StoreRunning(root_, &metrics_, "md5sum --", "yes talking; :", journal);
  ASSERT_NE(s.store, nullptr);
  const std::string data = Pattern(5 << 20, 68);
  MemorySource bytes(data);
  ASSERT_TRUE(s.store->put("unknown/f", bytes, PutOptions{}).ok());
  Result<ObjectInfo> base = s.store->head("unknown/f");
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  const size_t events_before = journal->events().size();
  Result<std::unique_ptr<Upload>> upload = s.store->start_upload("unknown/f", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  Status whole = (*upload)->copy_whole(*base);
  EXPECT_FALSE(whole.ok());
  EXPECT_NE(whole.code(), StatusCode::kUnsupported) << whole.ToString();
  std::vector<std::string> temporary = TemporaryFiles(root_);
  ASSERT_EQ(temporary.size(), 1u);
  EXPECT_TRUE((*upload)->abort().ok());
  upload->reset();
  EXPECT_EQ(TemporaryFiles(root_), temporary);
  std::vector<std::string> events = journal->events();
  ASSERT_EQ(events.size(), events_before + 1);
  EXPECT_EQ(events.back(), "opened " + temporary[0]);                 // never closed
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "unknown/f") == data);  // untouched
  // Off for the store: the next copy runs nothing and goes by copy-data.
  Result<ObjectInfo> copied = s.store->copy(*base, "unknown/copy", CopyOptions{});
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_TRUE(ReadLocalFile(fs::path(root_) / "unknown/copy") == data);
  EXPECT_EQ(s.store->server_cp_runs(), 1u);
}

// The commit lock of `name` in `dir`, as every objfs client names it.
fs::path CommitLockOf(const fs::path& dir, const std::string& name) {
  return dir / (".objfs-tmp-lock-" + HexMd5(Md5Of(name)).substr(0, 20));
}

// Where EditPausedAt stops an edit.
enum class PauseAt {
  kLockMade,  // as soon as its commit lock is made: before the server sees the next request
  kRenamed,   // as soon as its rename has gone in: before the store sees the server's reply
};

// An edit of `key` ("d/NAME", holding "old") to `contents`, with mtime 1000000000, by `store`,
// which reaches the server through `proxy`: the proxy holds the next chunk of bytes after `at`
// while `meanwhile` runs. Returns the put's result, or nothing if the edit never got to `at`;
// `edit` is the edit's options.
std::optional<Result<ObjectInfo>> EditPausedAt(PauseAt at, testing::FaultProxy& proxy,
                                               SftpStore& store, const std::string& root,
                                               const std::string& key, const std::string& contents,
                                               const std::function<void()>& meanwhile,
                                               PutOptions* edit) {
  const fs::path file = fs::path(root) / key;
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary | std::ios::trunc) << "old";
  Result<ObjectInfo> base = store.head(key);
  EXPECT_TRUE(base.ok()) << base.status().ToString();
  if (!base.ok()) return base;
  edit->if_match = base->etag;
  edit->metadata = {{"mtime", "1000000000"}};
  const fs::path lock = CommitLockOf(file.parent_path(), file.filename().string());
  // The store sends nothing between its SYMLINK and the request after it but what follows the
  // SYMLINK's reply; and the server nothing between its rename and the rename's reply.
  std::atomic<bool> reached{false};
  proxy.GateChunks([&](bool from_client) {
    const bool now = at == PauseAt::kLockMade ? from_client && fs::exists(fs::symlink_status(lock))
                                              : !from_client && ReadLocalFile(file) == contents;
    if (now) {
      meanwhile();
      reached = true;
    }
    return now;
  });
  MemorySource data(contents);
  Result<ObjectInfo> result = store.put(key, data, *edit);
  proxy.GateChunks(nullptr);
  if (!reached) return std::nullopt;
  return result;
}

// Options `o` for connections that go through `proxy` (raw bytes).
SftpStoreOptions ThroughProxy(testing::FaultProxy& proxy, SftpStoreOptions o,
                              const std::string& scratch) {
  proxy.PassBytesThrough();  // SSH, not HTTP
  o.port = proxy.port();
  o.known_hosts = scratch + "/known_hosts";
  EXPECT_TRUE(testing::WriteKnownHostsForProxy(o.known_hosts, proxy.port()));
  return o;
}

// A store of `root` through `proxy` whose log lines are kept, and that waits 2 s for another
// client's commit lock and takes one over only after 10 minutes.
LoggingStore PatientStoreThrough(testing::FaultProxy& proxy, const std::string& root,
                                 const std::string& scratch) {
  SftpStoreOptions o = OptionsFor(root);
  o.commit_lock_wait = std::chrono::seconds(2);
  o.stale_commit_lock = std::chrono::minutes(10);
  return LoggedStore(ThroughProxy(proxy, o, scratch));
}

// A connection that breaks while its commit holds the lock (before its rename, or before the
// lock's removal) leaves the lock on the server, and the put fails as transient. The lock
// points to this mount's own token, so the upload's retry on a new connection takes it again
// at once, where other clients wait for it to stand 30 s (here 10 minutes: the retry would
// fail, busy, after its 2 s wait).
TEST_F(SftpStoreTest, ACommitLockLeftByABrokenConnectionIsTakenAgainByItsRetry) {
  testing::FaultProxy proxy("127.0.0.1", testing::SharedSftpServer().port);
  LoggingStore logged = PatientStoreThrough(proxy, root_, scratch_);
  SftpStore* store = logged.store.get();
  ASSERT_NE(store, nullptr);
  const std::string key = "d/file";
  PutOptions edit;
  std::optional<Result<ObjectInfo>> stored = EditPausedAt(
      PauseAt::kLockMade, proxy, *store, root_, key, "old and new",
      [&] { EXPECT_GE(proxy.CutOpenConnections(), 1); }, &edit);
  ASSERT_TRUE(stored.has_value()) << "the commit made no lock";
  ASSERT_FALSE(stored->ok());
  EXPECT_EQ(stored->status().code(), StatusCode::kTransient) << stored->status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / key), "old");
  // The upload is tried again (by the mount, in the background), on a new connection.
  MemorySource data(std::string_view("old and new"));
  Result<ObjectInfo> again = store->put(key, data, edit);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ReadLocalFile(fs::path(root_) / key), "old and new");
  EXPECT_FALSE(fs::exists(fs::symlink_status(CommitLockOf(fs::path(root_) / "d", "file"))));
  EXPECT_GE(logged.Said("was left by this mount's own commit"), 1u);
}

// A mount that stalls between its lock and its rename for longer than stale_commit_lock may
// find its lock taken over by another client, whose commit it guards now. Just before its
// rename the commit checks that the lock is still its own: it fails as busy instead, leaves
// the file as it is, and leaves the other client's lock alone.
TEST_F(SftpStoreTest, ACommitWhoseLockWasTakenOverMeanwhileRenamesNothing) {
  testing::FaultProxy proxy("127.0.0.1", testing::SharedSftpServer().port);
  SftpStoreOptions o = OptionsFor(root_);
  o.commit_lock_wait = std::chrono::milliseconds(300);
  std::shared_ptr<SftpStore> store = MakeStore(ThroughProxy(proxy, o, scratch_));
  ASSERT_NE(store, nullptr);
  // The other client has stored its edit too, or not yet: either way its lock stays.
  for (const char* stored_meanwhile : {"", "old and theirs"}) {
    SCOPED_TRACE(stored_meanwhile);
    const std::string name = *stored_meanwhile == '\0' ? "file" : "file-stored-meanwhile";
    const fs::path lock = CommitLockOf(fs::path(root_) / "d", name);
    PutOptions edit;
    std::optional<Result<ObjectInfo>> stored = EditPausedAt(
        PauseAt::kLockMade, proxy, *store, root_, "d/" + name, "old and new",
        [&] {
          // Another client judged it stale: moved it away and made its own.
          fs::remove(lock);
          fs::create_symlink("objfs-commit-lock-of-another-client", lock);
          if (*stored_meanwhile != '\0') {
            std::ofstream(fs::path(root_) / "d" / name, std::ios::trunc) << stored_meanwhile;
          }
        },
        &edit);
    ASSERT_TRUE(stored.has_value()) << "the commit made no lock";
    ASSERT_FALSE(stored->ok());
    EXPECT_EQ(stored->status().code(), StatusCode::kTransient) << stored->status().ToString();
    EXPECT_EQ(ReadLocalFile(fs::path(root_) / "d" / name),
              *stored_meanwhile != '\0' ? stored_meanwhile : "old");
    EXPECT_EQ(fs::read_symlink(lock), "objfs-commit-lock-of-another-client");
  }
}

// Other clients take the lock and release it as fast as they can: a link this store could not
// make is gone again when it looks. That is no server refusing links, and the store goes on
// making links (which fence its commits and tell its own from others'), never lock files.
TEST_F(SftpStoreTest, ALockThatComesAndGoesIsNoServerThatRefusesLinks) {
  LoggingStore logged = [&] {
    SftpStoreOptions o = OptionsFor(root_);
    o.commit_lock_wait = std::chrono::seconds(1);
    return LoggedStore(o);
  }();
  ASSERT_NE(logged.store, nullptr);
  ASSERT_TRUE(Put("d/busy", "0").ok());
  const fs::path lock = CommitLockOf(fs::path(root_) / "d", "busy");
  std::atomic<bool> stop{false};
  std::thread others([&] {
    while (!stop.load()) {
      std::error_code exists;
      fs::create_symlink("objfs-commit-lock-of-another-client", lock, exists);
      if (!exists) fs::remove(lock);  // its own, never the store's
    }
  });
  int stored = 0;
  for (int round = 1; round <= 40; ++round) {
    Result<ObjectInfo> base = logged.store->head("d/busy");
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    PutOptions edit;
    edit.if_match = base->etag;
    const std::string bytes = std::to_string(round);
    MemorySource data(bytes);  // (it keeps a view of them)
    Result<ObjectInfo> put = logged.store->put("d/busy", data, edit);
    if (put.ok()) ++stored;
    EXPECT_TRUE(put.ok() || put.status().code() == StatusCode::kTransient)
        << put.status().ToString();
  }
  stop = true;
  others.join();
  EXPECT_GT(stored, 0);
  EXPECT_EQ(logged.Said("commit locks are files"), 0u);
}

// A conditional commit whose rename goes in and whose reply is lost (the connection breaks):
// the put fails as transient. Its retry finds the lock that commit left, so no other objfs
// client stored the file since, and the file is the version that rename made: it is stored,
// and the retry succeeds instead of being refused as an edit of a version that changed.
TEST_F(SftpStoreTest, AnEditWhoseRenameLostItsReplyIsFoundStoredByItsRetry) {
  testing::FaultProxy proxy("127.0.0.1", testing::SharedSftpServer().port);
  LoggingStore logged = PatientStoreThrough(proxy, root_, scratch_);
  SftpStore* store = logged.store.get();
  ASSERT_NE(store, nullptr);
  // The retry, with the same bytes; and a later edit of the mount's in its place (a write after
  // the failed fsync), of the same size and second: that one is not stored, and is refused.
  for (const char* retried : {"old and new", "old and NEW"}) {
    SCOPED_TRACE(retried);
    const bool same = std::string_view(retried) == "old and new";
    const std::string dir = same ? "d" : "d-later";
    const std::string key = dir + "/file";
    PutOptions edit;
    std::optional<Result<ObjectInfo>> stored = EditPausedAt(
        PauseAt::kRenamed, proxy, *store, root_, key, "old and new",
        [&] { EXPECT_GE(proxy.CutOpenConnections(), 1); }, &edit);
    ASSERT_TRUE(stored.has_value()) << "the commit renamed nothing";
    ASSERT_FALSE(stored->ok());
    EXPECT_EQ(stored->status().code(), StatusCode::kTransient) << stored->status().ToString();
    EXPECT_EQ(ReadLocalFile(fs::path(root_) / key), "old and new");
    MemorySource data(retried);
    Result<ObjectInfo> again = store->put(key, data, edit);
    if (same) {
      ASSERT_TRUE(again.ok()) << again.status().ToString();
    } else {
      EXPECT_EQ(again.status().code(), StatusCode::kPreconditionFailed)
          << again.status().ToString();
    }
    EXPECT_EQ(ReadLocalFile(fs::path(root_) / key), "old and new");
    EXPECT_FALSE(fs::exists(fs::symlink_status(CommitLockOf(fs::path(root_) / dir, "file"))));
    EXPECT_TRUE(TemporaryFiles(root_ + "/" + dir).empty())
        << TemporaryFiles(root_ + "/" + dir).front();
    // A later edit of another version is refused as before.
    MemorySource other(std::string_view("old and other"));
    Result<ObjectInfo> stale = store->put(key, other, edit);
    EXPECT_EQ(stale.status().code(), StatusCode::kPreconditionFailed) << stale.status().ToString();
  }
  EXPECT_EQ(logged.Said("stored by the rename before, whose reply was lost"), 1u);
}

}  // namespace
}  // namespace objfs
