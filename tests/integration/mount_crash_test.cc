// What the next mount publishes after objfs is killed (as by a crash or a power loss), on real
// RGW mounts: only data that close(2), fsync(2) or the write-back window accepted. Data a
// writer had not finished never replaces the complete object; it is set aside in the cache
// directory's "unfinished/" and the log names it. (A write torn by a crash, on every backend:
// mount_suite_test.cc.)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

namespace fs = std::filesystem;

// The object `key` of `bucket` as the server has it (not through any proxy), fetched with curl
// into `path`; false when the GET fails, with `error` (when given) saying why.
bool S3Fetch(const std::string& bucket, const std::string& key, const std::string& path,
             std::string* error = nullptr) {
  const S3TestServer& server = SharedS3Server();
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  for (std::string a : {"-f", "-o", path.c_str()}) argv.push_back(a);
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  CommandResult r = RunCommand(argv);
  if (error != nullptr) *error = r.err;
  return r.exit_code == 0;
}

// As S3Fetch, recording a test failure when the GET fails.
bool S3GetToFile(const std::string& bucket, const std::string& key, const std::string& path) {
  std::string error;
  const bool ok = S3Fetch(bucket, key, path, &error);
  EXPECT_TRUE(ok) << error;
  return ok;
}

// The object `key` as the server has it, once it has it (within `seconds`); "" otherwise.
std::string S3ObjectOnceThere(const std::string& bucket, const std::string& key, double seconds) {
  ScratchDir local;
  const std::string path = local.path() + "/object";
  if (!WaitFor(seconds, [&] { return S3Fetch(bucket, key, path); })) return "";
  return ReadLocal(path);
}

// "N bytes, MD5 ..." of `data`: what the tests compare, so that a failure prints no megabytes.
std::string Digest(const std::string& data) {
  ScratchDir dir;
  const std::string path = dir.path() + "/data";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  return std::to_string(data.size()) + " bytes, MD5 " + Md5sum(path);
}

// A staging file under `cache_dir` holding more than `least` and fewer than `size` bytes on
// disk: an object of `size` bytes is being fetched into it (staging files are sparse).
bool FetchInProgress(const std::string& cache_dir, uintmax_t least, uintmax_t size) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache_dir, ec)) {
    if (e.path().extension() != ".data") continue;
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    const auto held = static_cast<uintmax_t>(st.st_blocks) * 512;
    if (held > least && held < size) return true;
  }
  return false;
}

// The one file in `cache_dir`/unfinished, or "" (with a test failure) when there is not exactly
// one.
std::string OnlySetAsideFile(const std::string& cache_dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache_dir + "/unfinished", ec)) {
    files.push_back(e.path().string());
  }
  EXPECT_EQ(files.size(), 1u) << "in " << cache_dir << "/unfinished";
  return files.size() == 1 ? files[0] : "";
}

// Appending to a large object once fetched it into cache_dir at the open, and a crash in the
// middle of that made the next mount upload the part fetched so far over the object (123 MB of
// a GiB was left). Now the open fetches nothing, and a close copies the parts no write touched
// on the server; when every part was touched (a byte in each MiB here), the close puts the file
// whole and fetches what it lacks first, after accepting it. A crash in the middle of that
// fetch: the next mount completes the file from the object and uploads it whole, never a prefix.
TEST(MountCrashTest, S3KilledWhileTheCloseFetchesAnEditedFileUploadsItWhole) {
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "read_buffer=256K";  // many reads: a fetch long enough to catch
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  constexpr size_t kSize = 96u << 20;
  std::string data = PseudoRandomBytes(kSize, 14);
  WriteFile(mount->path() + "/big.log", data);
  for (size_t at = 0; at < kSize; at += 1u << 20) data[at] = 'y';
  const std::string md5 = Digest(data + "x\n");

  // A byte into each MiB and "x\n" at the end; the close blocks in the kernel until objfs has
  // uploaded the file.
  const std::string target = mount->path() + "/big.log";
  std::thread append([target] {
    const int fd = ::open(target.c_str(), O_WRONLY);
    if (fd < 0) return;
    for (size_t at = 0; at < kSize; at += 1u << 20) (void)!::pwrite(fd, "y", 1, at);
    (void)!::pwrite(fd, "x\n", 2, kSize);
    ::close(fd);
  });
  const bool caught = WaitFor(
      60, [&] { return FetchInProgress(mount->cache_dir(), 1u << 20, kSize); },
      std::chrono::milliseconds(1));
  EXPECT_EQ(mount->KillAndWait(SIGKILL), 128 + SIGKILL);
  append.join();
  ASSERT_TRUE(caught) << "no fetch seen in " << mount->cache_dir();

  ASSERT_TRUE(mount->Restart());
  // Completed and uploaded in the background after the restart.
  ScratchDir local;
  const std::string server = local.path() + "/server";
  EXPECT_TRUE(WaitFor(120, [&] {
    std::error_code ec;
    return S3Fetch(bucket, "big.log", server) && fs::file_size(server, ec) == kSize + 2;
  })) << mount->log();
  ASSERT_TRUE(S3GetToFile(bucket, "big.log", server));
  EXPECT_EQ(Digest(ReadLocal(server)), md5);
  EXPECT_EQ(Digest(ReadLocal(mount->path() + "/big.log")), md5);
  // The close had accepted it: nothing to set aside.
  EXPECT_FALSE(fs::exists(mount->cache_dir() + "/unfinished"));
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// What close accepted into the write-back window survives the crash, even while a writer is
// changing the file again: the next mount uploads the closed version.
TEST(MountCrashTest, S3TheClosedVersionInTheWindowSurvivesAKilledRewrite) {
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  options.extra_options = "writeback=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string closed = PseudoRandomBytes(1u << 20, 3);
  WriteFile(mount->path() + "/f", closed);
  int fd = ::open((mount->path() + "/f").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "XXXX", 4, 1000), 4);
  EXPECT_EQ(mount->KillAndWait(SIGKILL), 128 + SIGKILL);
  ::close(fd);

  ASSERT_TRUE(mount->Restart());
  // Uploaded in the background after the restart.
  EXPECT_EQ(Digest(S3ObjectOnceThere(bucket, "f", 60)), Digest(closed));
  std::string changed = closed;
  changed.replace(1000, 4, "XXXX");
  EXPECT_EQ(Digest(ReadLocal(OnlySetAsideFile(mount->cache_dir()))), Digest(changed));
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

// A large backlog left by a crash once kept the next mount from answering until all of it was
// uploaded. Now the mount comes up at once and serves the files from cache_dir while the server
// refuses every upload; they reach the server once it takes them again.
TEST(MountCrashTest, S3TheNextMountServesTheBacklogBeforeTheServerHasIt) {
  const S3TestServer& server = SharedS3Server();
  FaultProxy proxy("127.0.0.1", server.port());
  const std::string bucket = CreateTestBucket(TestName());
  ScratchDir cache;
  ObjfsMount::Options options;
  options.cache_dir = cache.path() + "/cache";
  options.extra_options = "endpoint=" + proxy.endpoint() + ",writeback=600";
  std::unique_ptr<ObjfsMount> crashed = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(crashed);
  ASSERT_EQ(::mkdir((crashed->path() + "/dir").c_str(), 0755), 0) << std::strerror(errno);
  const std::vector<std::string> names = {"one", "two", "dir/three"};
  std::vector<std::string> data;
  for (size_t i = 0; i < names.size(); ++i) {
    data.push_back(PseudoRandomBytes((1u << 20) + i, 40 + i));
    WriteFile(crashed->path() + "/" + names[i], data[i]);
  }
  EXPECT_EQ(crashed->KillAndWait(SIGKILL), 128 + SIGKILL);

  // Every upload is refused from now on (the proxy damages its body: BadDigest).
  proxy.CorruptRequestBodies("PUT ");
  options.extra_options = "endpoint=" + proxy.endpoint();  // no write-back window this time
  std::unique_ptr<ObjfsMount> next = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(next);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = next->path() + "/" + names[i];
    struct stat st;
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
    EXPECT_EQ(static_cast<size_t>(st.st_size), data[i].size());
    EXPECT_EQ(Digest(ReadFile(path)), Digest(data[i])) << names[i];
    ScratchDir local;
    EXPECT_FALSE(S3Fetch(bucket, names[i], local.path() + "/object"))
        << names[i] << " reached the server while it refused every upload";
  }
  auto names_in = [](const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(names_in(next->path()), (std::vector<std::string>{"dir", "one", "two"}));
  EXPECT_EQ(names_in(next->path() + "/dir"), std::vector<std::string>{"three"});
  EXPECT_TRUE(WaitFor(30, [&] { return proxy.corrupted_requests() > 0; }));

  proxy.StopCorrupting();
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(Digest(S3ObjectOnceThere(bucket, names[i], 120)), Digest(data[i])) << names[i];
  }
  EXPECT_TRUE(WaitFor(30, [&] {
    return next->log().find("recovered 3 files") != std::string::npos;
  })) << next->log();
  EXPECT_EQ(next->Stop(), 0) << next->log();
}

}  // namespace
}  // namespace objfs::testing
