// A real kernel FUSE mount of objfs-memory's memory:// scheme: the shipped command line, mount
// and adapter code over the in-memory store, with no server. cp, cat, mkdir, mv and rm through
// the kernel, for the S3-like and the SFTP-like store.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"

namespace objfs::testing {
namespace {

// Parameter: the -o options of one personality of the memory store.
class MountMemoryTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<ObjfsMount> Mount() {
    ObjfsMount::Options options;
    options.extra_options = GetParam();
    return ObjfsMount::Start("memory://" + TestName(), options);
  }
};

// Runs a command that must succeed; its standard output.
std::string Shell(const std::vector<std::string>& argv) {
  CommandResult result = RunCommand(argv);
  EXPECT_EQ(result.exit_code, 0) << argv[0] << " " << argv.back() << ": " << result.err;
  return result.out;
}

TEST_P(MountMemoryTest, CpCatMkdirRenameRm) {
  ScratchDir local;
  ASSERT_FALSE(local.path().empty());
  const std::string source = local.path() + "/source";
  const std::string data = PseudoRandomBytes(3 << 20, 7);
  WriteFile(source, data);
  std::unique_ptr<ObjfsMount> mount = Mount();
  ASSERT_TRUE(mount);
  const std::string m = mount->path();

  Shell({"cp", source, m + "/a"});
  EXPECT_TRUE(Shell({"cat", m + "/a"}) == data) << "cat of the copy differs from its source";
  // The store holds what was written: its ETag is the content's MD5, and it was one upload.
  EXPECT_EQ(GetXattr(m + "/a", "user.etag"), Md5File(source));
  const std::string stats = GetXattr(m, "user.objfs.stats");
  EXPECT_GE(StatsCounter(stats, "put_requests"), 1) << stats;
  EXPECT_GE(StatsCounter(stats, "bytes_written"), static_cast<int64_t>(data.size())) << stats;

  Shell({"mkdir", m + "/dir"});
  Shell({"cp", m + "/a", m + "/dir/b"});
  EXPECT_EQ(Shell({"ls", m + "/dir"}), "b\n");
  EXPECT_EQ(Md5File(m + "/dir/b"), Md5File(source));

  Shell({"mv", m + "/dir/b", m + "/dir/c"});
  EXPECT_EQ(Shell({"ls", m + "/dir"}), "c\n");
  Shell({"mv", m + "/dir", m + "/moved"});
  EXPECT_EQ(Shell({"ls", m}), "a\nmoved\n");
  EXPECT_TRUE(Shell({"cat", m + "/moved/c"}) == data) << "the renamed copy differs from its source";

  Shell({"rm", m + "/a"});
  Shell({"rm", "-r", m + "/moved"});
  EXPECT_EQ(Shell({"ls", "-A", m}), "");
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
}

INSTANTIATE_TEST_SUITE_P(Personalities, MountMemoryTest,
                         ::testing::Values("", "memory_personality=sftp"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.empty() ? std::string("S3Like")
                                                     : std::string("SftpLike");
                         });

// memory:// exists in objfs-memory only; its option is checked like every other.
TEST(MountMemorySchemeTest, OnlyTheTestBuildKnowsIt) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  CommandResult shipped = RunObjfs({"memory://x", dir.path()});
  EXPECT_EQ(shipped.exit_code, 1);
  EXPECT_EQ(shipped.err, "objfs: unsupported URL scheme 'memory' (use s3:// or sftp://)\n");

  const std::string memory = ObjfsMemoryBinary();
  ASSERT_FALSE(memory.empty());
  CommandResult bad =
      RunCommand({memory, "memory://x", dir.path(), "-o", "memory_personality=ftp"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err, "objfs: bad value 'ftp' for memory_personality (expected s3 or sftp)\n");
  CommandResult s3_only = RunCommand({memory, "memory://x", dir.path(), "-o", "part_size=8M"});
  EXPECT_EQ(s3_only.exit_code, 1);
  EXPECT_EQ(s3_only.err, "objfs: option 'part_size' applies to s3:// URLs, not to memory://\n");
  CommandResult help = RunCommand({memory, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("memory_personality=s3|sftp"), std::string::npos) << help.out;
  EXPECT_FALSE(IsFuseMountPoint(dir.path()));
}

}  // namespace
}  // namespace objfs::testing
