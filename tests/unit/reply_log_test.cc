// ReplyLog: which failed replies are counted and logged, what a line says, and the rate limit.

#include "fs/reply_log.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

namespace objfs {
namespace {

using std::chrono::steady_clock;

class ReplyLogTest : public ::testing::Test {
 protected:
  ReplyLog Make(ReplyLog::Limits limits = ReplyLog::Limits{}) {
    return ReplyLog([this](const std::string& line) { lines_.push_back(line); }, limits,
                    [this] { return now_; });
  }
  std::vector<std::string> lines_;
  steady_clock::time_point now_ = steady_clock::time_point{} + std::chrono::hours(1);
};

TEST_F(ReplyLogTest, AFailureIsCountedAndLoggedWithItsPathErrnoAndReason) {
  ReplyLog log = Make();
  log.Record(
      "read", EIO, [] { return std::string("/dir/file"); }, "GET dir/file: timed out after 30 s");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "read /dir/file: EIO (Input/output error): GET dir/file: timed out after 30 s");
  EXPECT_EQ(log.failures("read"), 1u);
  EXPECT_EQ(log.failures("write"), 0u);
}

TEST_F(ReplyLogTest, RoutineAnswersAreNeitherCountedNorLogged) {
  ReplyLog log = Make();
  log.Record("lookup", ENOENT, nullptr, "no such key");
  log.Record("getxattr", ENODATA, nullptr, "no attribute");
  log.Record("getxattr", EOPNOTSUPP, nullptr, "security.selinux");
  log.Record("listxattr", ERANGE, nullptr, "short buffer");
  log.Record("mkdir", EEXIST, nullptr, "exists");
  EXPECT_TRUE(lines_.empty());
  EXPECT_EQ(log.failures("lookup"), 0u);
  EXPECT_EQ(log.failures("getxattr"), 0u);
  // The same errnos elsewhere are failures.
  log.Record("lookup", EIO, nullptr, "HEAD k: 503");
  log.Record("getattr", ENOENT, nullptr, "gone");
  log.Record("getxattr", EACCES, nullptr, "refused");
  EXPECT_EQ(lines_.size(), 3u);
  EXPECT_EQ(log.failures("lookup"), 1u);
  EXPECT_EQ(log.failures("getattr"), 1u);
}

TEST_F(ReplyLogTest, TheWhereIsOnlyAskedForALoggedLine) {
  ReplyLog log = Make({.burst = 1, .interval = std::chrono::seconds(1)});
  int asked = 0;
  auto where = [&asked] {
    ++asked;
    return std::string("/f");
  };
  log.Record("read", EIO, where, "x");
  log.Record("read", EIO, where, "x");
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(log.failures("read"), 2u);
}

TEST_F(ReplyLogTest, ABurstIsLoggedThenOneLineAnIntervalSayingWhatWasLeftOut) {
  ReplyLog log = Make({.burst = 3, .interval = std::chrono::seconds(1)});
  for (int i = 0; i < 10; ++i) log.Record("read", EIO, nullptr, "down");
  EXPECT_EQ(lines_.size(), 3u);
  EXPECT_EQ(log.failures("read"), 10u);  // every one is counted

  now_ += std::chrono::milliseconds(999);
  log.Record("read", EIO, nullptr, "down");
  EXPECT_EQ(lines_.size(), 3u);

  now_ += std::chrono::milliseconds(1);
  log.Record("write", EIO, nullptr, "down");
  ASSERT_EQ(lines_.size(), 4u);
  EXPECT_EQ(lines_[3],
            "write: EIO (Input/output error): down [8 failed replies before this one not logged]");

  // After a quiet spell the whole burst is available again, and nothing was left out.
  now_ += std::chrono::minutes(1);
  for (int i = 0; i < 3; ++i) log.Record("open", EACCES, nullptr, "denied");
  EXPECT_EQ(lines_.size(), 7u);
  EXPECT_EQ(lines_[4], "open: EACCES (Permission denied): denied");
}

TEST_F(ReplyLogTest, StatsListEveryOperationInOrderWithUnknownOnesAsOther) {
  ReplyLog log = Make();
  log.Record("rename", EXDEV, nullptr, "");
  log.Record("bmap", EIO, nullptr, "");
  const std::string text = log.ToText();
  EXPECT_EQ(text.rfind("failed_lookup=0\nfailed_getattr=0\n", 0), 0u) << text;
  EXPECT_NE(text.find("\nfailed_rename=1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nfailed_other=1\n"), std::string::npos) << text;
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, ReplyLog::kOperations.size());
}

}  // namespace
}  // namespace objfs
