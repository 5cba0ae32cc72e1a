// rm racing an upload, on a real RGW mount: the upload of a file closed into the write-back
// window is held in a proxy between objfs and RGW while rm removes the file, and the server
// must not have the file once both are done.

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// Whether the server (not through the proxy) has the object `key` of `bucket`; its content in
// `content` if so.
bool S3Fetch(const std::string& bucket, const std::string& key, std::string* content) {
  const S3TestServer& server = SharedS3Server();
  ScratchDir local;
  const std::string path = local.path() + "/object";
  std::vector<std::string> argv = SignedCurlArgs(server, "");
  for (std::string a : {"-f", "-o", path.c_str()}) argv.push_back(a);
  argv.push_back(server.endpoint + "/" + bucket + "/" + key);
  if (RunCommand(argv).exit_code != 0) return false;
  *content = ReadLocal(path);
  return true;
}

// The kernel stack of thread `tid` of this process ("" when it cannot be read).
std::string KernelStack(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stack");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Closes `name` (stored on the server before when `stored`) into the write-back window of a
// mount through a proxy that holds the upload's PUT, removes the file while the PUT is held,
// then lets the PUT go on and unmounts. The server must not have the file.
void RmDuringTheUpload(const std::string& name, bool stored) {
  if (KernelStack(static_cast<pid_t>(::syscall(SYS_gettid))).empty()) {
    GTEST_SKIP() << "needs /proc/PID/stack to see rm wait for objfs";
  }
  const S3TestServer& server = SharedS3Server();
  FaultProxy proxy("127.0.0.1", server.port());
  const std::string bucket = CreateTestBucket(TestName());
  ObjfsMount::Options options;
  // A long attr_timeout keeps the name in the kernel's cache: rm sends UNLINK and no LOOKUP.
  options.extra_options = "endpoint=" + proxy.endpoint() + ",writeback=1,attr_timeout=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string path = mount->path() + "/" + name;
  std::string content;
  if (stored) {
    WriteFile(path, "the stored version");
    ASSERT_TRUE(WaitFor(30, [&] { return S3Fetch(bucket, name, &content); }));
    ASSERT_EQ(content, "the stored version");
  }

  proxy.HoldNextRequest("PUT /" + bucket + "/" + name + " ");
  WriteFile(path, "closed into the window");
  ASSERT_TRUE(WaitFor(30, [&] { return proxy.held_requests() == 1; })) << mount->log();

  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  int result = 0;
  int error = 0;
  std::thread rm([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    result = ::unlink(path.c_str());
    error = errno;
    done = true;
  });
  // Until rm returned, or waits for objfs to answer its UNLINK.
  EXPECT_TRUE(WaitFor(30, [&] {
    return done || (tid != 0 && KernelStack(tid).find("fuse_unlink") != std::string::npos);
  }));
  proxy.ReleaseHeldRequest();
  rm.join();
  EXPECT_EQ(result, 0) << std::strerror(error);
  EXPECT_FALSE(std::filesystem::exists(path));
  // Unmounting waits for whatever objfs still does.
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  EXPECT_FALSE(S3Fetch(bucket, name, &content)) << "the removed file is on the server: " << content;
}

// The PUT of a new version landed after rm's DELETE: the removed file was back.
TEST(MountS3UnlinkTest, RmDuringTheUploadOfAStoredFileRemovesIt) {
  RmDuringTheUpload("stored", /*stored=*/true);
}

// rm waited for the first upload of a new file, then said ENOENT and left the file there.
TEST(MountS3UnlinkTest, RmDuringTheFirstUploadOfANewFileRemovesIt) {
  RmDuringTheUpload("new", /*stored=*/false);
}

}  // namespace
}  // namespace objfs::testing
