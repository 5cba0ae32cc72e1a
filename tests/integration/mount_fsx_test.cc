// fsx on real mounts of every backend (tests/fixtures/fsx.h): seeded random reads, writes,
// truncates, mmap reads and writes, copy_file_range within the file and fsyncs, with closes and
// reopens, each checked against a model of the file; and what a close accepted checked on the
// server and through a fresh mount. Once with close uploading, once with remounts between the
// reopens, once in the write-back window, and once on a file of several parts, edited in place.
// `objfs-fsx` runs the same exerciser for longer by hand.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "backend/md5.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/fsx.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/remote.h"

namespace objfs::testing {
namespace {

// "N bytes, MD5 ...": what is compared, so that a failure prints no file.
std::string Digest(std::string_view data) {
  return std::to_string(data.size()) + " bytes, MD5 " + HexMd5(Md5Of(data));
}

// The options of a run: its seed, its length, and how often the file is closed and reopened.
FsxOptions RunOf(uint64_t seed, int operations, int reopen_every) {
  FsxOptions options;
  options.seed = seed;
  options.operations = operations;
  options.reopen_every = reopen_every;
  return options;
}

class MountFsxTest : public ::testing::TestWithParam<RemoteKind> {
 protected:
  void SetUp() override {
    remote_ = Remote::Create(GetParam(), TestName());
    ASSERT_TRUE(remote_);
  }

  // The file on the server, or "<missing: why>".
  std::string OnServer() const {
    Result<std::string> data = remote_->Read("fsx.bin");
    return data.ok() ? std::move(data).value() : "<missing: " + data.status().ToString() + ">";
  }

  // After a run: the mount, a fresh mount and the server all hold the model.
  void ExpectStored(ObjfsMount& mount, const FsxResult& result) {
    ASSERT_TRUE(result.ok) << result.failure;
    EXPECT_EQ(Digest(ReadFile(mount.path() + "/fsx.bin")), Digest(result.model));
    ASSERT_TRUE(mount.Restart());
    EXPECT_EQ(Digest(ReadFile(mount.path() + "/fsx.bin")), Digest(result.model))
        << "through a fresh mount";
    if (remote_->capabilities().server_access) {
      EXPECT_EQ(Digest(OnServer()), Digest(result.model)) << "on the server";
    }
  }

  std::unique_ptr<Remote> remote_;
};

TEST_P(MountFsxTest, RandomOperationsMatchTheModelAndEachCloseReachesTheServer) {
  std::unique_ptr<ObjfsMount> mount = remote_->Mount();
  ASSERT_TRUE(mount);
  FsxOptions options = RunOf(1, 1500, 100);
  int closes = 0;
  // close uploads: the server has each closed file at once.
  options.while_closed = [&](const std::string& model) {
    ++closes;
    if (!remote_->capabilities().server_access) return true;
    std::string stored = OnServer();
    EXPECT_EQ(Digest(stored), Digest(model)) << "on the server after close " << closes;
    return stored == model;
  };
  FsxResult result = RunFsx(mount->path() + "/fsx.bin", options);
  EXPECT_EQ(result.done, options.operations) << result.counts;
  EXPECT_EQ(closes, options.operations / options.reopen_every);
  // The copies of the whole other file into this one emptied were made on the server, as a
  // cp's is: the run exercised that path, not only copies through this machine.
  const std::string stats = GetXattr(mount->path(), "user.objfs.stats");
  EXPECT_GT(StatsCounter(stats, "server_copies"), 0) << stats;
  ExpectStored(*mount, result);
}

TEST_P(MountFsxTest, ARemountAtEveryReopenReadsBackWhatWasClosed) {
  std::unique_ptr<ObjfsMount> mount = remote_->Mount();
  ASSERT_TRUE(mount);
  FsxOptions options = RunOf(2, 400, 40);
  // Each reopen meets a mount with nothing cached or staged: the data comes from the server.
  options.while_closed = [&](const std::string&) { return mount->Restart(); };
  FsxResult result = RunFsx(mount->path() + "/fsx.bin", options);
  EXPECT_EQ(result.done, options.operations) << result.counts;
  ExpectStored(*mount, result);
}

TEST_P(MountFsxTest, RandomOperationsInTheWriteBackWindow) {
  // Every close lands in the window: the reopens find the file staged, not yet uploaded.
  std::unique_ptr<ObjfsMount> mount = remote_->Mount("writeback=60");
  ASSERT_TRUE(mount);
  FsxOptions options = RunOf(3, 1000, 50);
  FsxResult result = RunFsx(mount->path() + "/fsx.bin", options);
  EXPECT_EQ(result.done, options.operations) << result.counts;
  ExpectStored(*mount, result);
}

TEST_P(MountFsxTest, ALargeFileEditedInPlaceMatchesTheModel) {
  // A file of several parts (5 MiB on S3 here), so that closes and fsyncs store edits as S3
  // assembles them (copies of the unchanged parts, uploads of the changed ones) and as SFTP
  // does (a server-side copy written into), and reads and partial writes after a reopen fetch
  // only the blocks they need.
  std::unique_ptr<ObjfsMount> mount = remote_->Mount(
      remote_->kind() == RemoteKind::kRgw ? "multipart_threshold=5M,part_size=5M" : "");
  ASSERT_TRUE(mount);
  FsxOptions options = RunOf(4, 150, 10);
  // Short rounds between remounts (10 operations), and truncates to sizes above the part size
  // only: a file truncated below it is uploaded whole, after which the rest of the round has
  // every byte here.
  options.min_truncate_size = 6 * 1024 * 1024;
  options.max_file_size = 12 * 1024 * 1024;
  options.max_operation_size = 1024 * 1024;
  // A remount at each reopen, and no read of the whole file after it: the file is opened again
  // with nothing of it staged or cached, so that writes meet blocks never fetched. What the
  // close stored is checked on the server instead (or, without access to it, read back before
  // the remount).
  options.read_all_after_reopen = false;
  options.while_closed = [&](const std::string& model) {
    std::string stored =
        remote_->capabilities().server_access ? OnServer() : ReadFile(mount->path() + "/fsx.bin");
    EXPECT_EQ(Digest(stored), Digest(model)) << "stored by a close";
    return stored == model && mount->Restart();
  };
  FsxResult result = RunFsx(mount->path() + "/fsx.bin", options);
  EXPECT_EQ(result.done, options.operations) << result.counts;
  ExpectStored(*mount, result);
}

INSTANTIATE_TEST_SUITE_P(Remotes, MountFsxTest, ::testing::ValuesIn(RemoteKinds()),
                         [](const ::testing::TestParamInfo<RemoteKind>& info) {
                           return RemoteKindName(info.param);
                         });

}  // namespace
}  // namespace objfs::testing
