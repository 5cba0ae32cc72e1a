// The shipped objfs binary's command line, run as a user runs it: --help and --help-markdown
// show every declared option, and a bad option is one line on stderr and exit status 1, before
// any server is contacted or anything is mounted.

#include <gtest/gtest.h>

#include <string>

#include "fs/cli/mount_options.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"

namespace objfs::testing {
namespace {

TEST(CommandLineTest, HelpListsEveryOptionAndMarkdownIsTheReadmeTable) {
  CommandResult help = RunObjfs({"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  for (const OptionSpec& spec : MountOptionSpecs()) {
    for (std::string_view name : spec.names) {
      EXPECT_NE(help.out.find(std::string(" ").append(name)), std::string::npos) << name;
    }
  }
  EXPECT_EQ(help.out.find("memory://"), std::string::npos) << "a test-only scheme in --help";
  CommandResult markdown = RunObjfs({"--help-markdown"});
  ASSERT_EQ(markdown.exit_code, 0) << markdown.err;
  EXPECT_EQ(markdown.out, OptionsMarkdown());
}

TEST(CommandLineTest, BadOptionsAreOneLineAndExitStatus1) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const struct {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"s3://bucket", dir.path(), "-o", "no_such_option=1"},
       "objfs: unknown option 'no_such_option=1' (see objfs --help)\n"},
      {{"sftp://host/srv", dir.path(), "-o", "part_size=8M"},
       "objfs: option 'part_size' applies to s3:// URLs, not to sftp://\n"},
      {{"-o", "sessions=2", "s3://bucket", dir.path()},
       "objfs: option 'sessions' applies to sftp:// URLs, not to s3://\n"},
      {{"s3://bucket", dir.path(), "-o", "direct_io=yes"},
       "objfs: option 'direct_io' takes no value\n"},
      {{"s3://bucket", dir.path(), "--bogus"},
       "objfs: unknown argument '--bogus' (see objfs --help)\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.args));
    CommandResult result = RunObjfs(c.args);
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_EQ(result.err, c.err);
    EXPECT_EQ(result.out, "");
  }
  EXPECT_FALSE(IsFuseMountPoint(dir.path()));
}

}  // namespace
}  // namespace objfs::testing
