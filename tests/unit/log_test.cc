// The process's log (backend/log.h): levels, the file sink's lines, the level-less callbacks'
// lines, and the parsers of -o log= and -o log_level=.
#include "backend/log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace objfs {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LogTest, ParsesSinksAndLevels) {
  EXPECT_EQ(ParseLogSink("syslog")->sink, LogSink::kSyslog);
  EXPECT_EQ(ParseLogSink("stderr")->sink, LogSink::kStderr);
  EXPECT_EQ(ParseLogSink("/var/log/objfs.log")->sink, LogSink::kFile);
  EXPECT_EQ(ParseLogSink("/var/log/objfs.log")->path, "/var/log/objfs.log");
  EXPECT_FALSE(ParseLogSink("").ok());
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(*ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("verbose").ok());
  EXPECT_EQ(LevelOfLine("warning: slow"), LogLevel::kWarn);
  EXPECT_EQ(LevelOfLine("upload failed"), LogLevel::kError);
}

// One test for the process-wide logger: it is configured once.
TEST(LogTest, AFileGetsTheLinesAtAndAboveItsLevel) {
  const std::string path = ::testing::TempDir() + "/log_test.log";
  std::remove(path.c_str());
  LogSettings settings;
  settings.sink = LogSink::kFile;
  settings.path = path;
  settings.level = LogLevel::kWarn;
  ASSERT_TRUE(Logger::Instance().Configure(settings).ok());
  Logger::Instance().StartServing(/*daemon=*/true);
  EXPECT_EQ(Logger::Instance().Describe(), path);
  LogError("an error line");
  LogWarn("a warning line");
  LogInfo("an info line");
  LogDebug("a debug line");
  EXPECT_FALSE(LogDebugEnabled());
  const std::string text = ReadAll(path);
  EXPECT_NE(text.find("] error: an error line\n"), std::string::npos) << text;
  EXPECT_NE(text.find("] warn: a warning line\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("info line"), std::string::npos) << text;
  EXPECT_EQ(text.find("debug line"), std::string::npos) << text;
  // "2026-12-02T11:20:42.123Z objfs[PID] error: ..."
  EXPECT_EQ(text[4], '-');
  EXPECT_EQ(text[10], 'T');
  EXPECT_EQ(text.substr(23, 8), "Z objfs[");

  settings.level = LogLevel::kDebug;
  ASSERT_TRUE(Logger::Instance().Configure(settings).ok());
  EXPECT_TRUE(LogDebugEnabled());
  LogDebug("now a debug line");
  EXPECT_NE(ReadAll(path).find("] debug: now a debug line\n"), std::string::npos);

  settings.path = "/nonexistent-dir/objfs.log";
  Status refused = Logger::Instance().Configure(settings);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("cannot open log file '/nonexistent-dir/objfs.log'"),
            std::string::npos);
}

}  // namespace
}  // namespace objfs
