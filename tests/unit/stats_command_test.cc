// `objfs stats`'s text from user.objfs.stats (fs/cli/stats_command.h).
#include "fs/cli/stats_command.h"

#include <gtest/gtest.h>

#include <string>

namespace objfs {
namespace {

TEST(StatsCommandTest, SummaryFirstThenEveryCounter) {
  const std::string text = FormatStats(
      "head_requests=12\nfailed_requests=3\nin_flight_requests=2\nbytes_written=3145728\n"
      "retries=1\nopen_files=1\npending_upload_files=4\npending_upload_bytes=1536\n"
      "staged_bytes=8192\nfailed_lookup=0\nfailed_read=5\nfailed_flush=2\nabandoned_uploads=1\n");
  EXPECT_NE(text.find("pending uploads:        4 files, 1536 (1.5 KiB) bytes\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("staged in cache_dir:    8192 (8.0 KiB) bytes\n"), std::string::npos) << text;
  EXPECT_NE(text.find("requests in flight:     2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("uploads left on server: 1 (aborts that failed; cleared once it answers)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("failed operations:      read 5, flush 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("failed requests:        3 (retries 1)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  bytes_written         3145728 (3.0 MiB)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  head_requests         12\n"), std::string::npos) << text;
  EXPECT_LT(text.find("pending uploads"), text.find("counters:"));
}

// A file whose lock an upload or a write holds is counted without its bytes, and says so.
TEST(StatsCommandTest, PendingFilesBeingWrittenAreNamedAsNotCounted) {
  const std::string text = FormatStats(
      "pending_upload_files=2\npending_upload_bytes=1024\npending_upload_busy_files=1\n");
  EXPECT_NE(text.find("pending uploads:        2 files, 1024 (1.0 KiB) bytes (not counting 1 being "
                      "written or uploaded)\n"),
            std::string::npos)
      << text;
}

TEST(StatsCommandTest, NoFailuresSaysNone) {
  EXPECT_NE(FormatStats("failed_read=0\n").find("failed operations:      none\n"),
            std::string::npos);
}

}  // namespace
}  // namespace objfs
