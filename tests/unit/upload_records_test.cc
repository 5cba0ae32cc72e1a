#include "cache/upload_records.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/codec.h"
#include "gtest/gtest.h"

namespace objfs {
namespace {

class UploadRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-upload-records-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = std::string(tmpl) + "/uploads";
  }
  void TearDown() override {
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path());
  }

  std::unique_ptr<UploadRecords> Open() {
    auto records = UploadRecords::Open(dir_);
    EXPECT_TRUE(records.ok()) << records.status().ToString();
    return records.ok() ? std::move(records).value() : nullptr;
  }

  // What ClearLeftovers offers, with `fail` naming uploads whose clearing fails.
  std::vector<OpenUploadRecord> Clear(UploadRecords& records, UploadRecords::ClearResult* result,
                                      const std::string& fail = "") {
    std::vector<OpenUploadRecord> offered;
    *result = records.ClearLeftovers([&](const OpenUploadRecord& r) {
      offered.push_back(r);
      return r.name == fail ? IoError("server down") : Status::Ok();
    });
    return offered;
  }

  size_t FilesInDir() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir_)) ++n;
    return n;
  }

  std::string dir_;
};

// The notes name keys and upload ids: their directory is private, whatever the umask.
TEST_F(UploadRecordsTest, TheDirectoryIsPrivate) {
  const mode_t old_umask = ::umask(0);
  std::unique_ptr<UploadRecords> records = Open();
  ::umask(old_umask);
  ASSERT_NE(records, nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

TEST_F(UploadRecordsTest, ANextMountGetsExactlyTheUploadsThatWereNotClosed) {
  {
    auto records = Open();
    ASSERT_NE(records, nullptr);
    ASSERT_TRUE(records->Opened("done", "id-1").ok());
    ASSERT_TRUE(records->Opened("dead", "id-2").ok());
    ASSERT_TRUE(records->Opened("/srv/.objfs-tmp-00ff", "").ok());
    EXPECT_EQ(FilesInDir(), 3u);
    records->Closed("done", "id-1");
    records->Closed("done", "id-other");  // unknown: ignored
    EXPECT_EQ(FilesInDir(), 2u);
    // Killed here: the other two stay noted.
  }
  auto next = Open();
  ASSERT_NE(next, nullptr);
  UploadRecords::ClearResult result;
  std::vector<OpenUploadRecord> offered = Clear(*next, &result);
  std::vector<OpenUploadRecord> want = {{"dead", "id-2"}, {"/srv/.objfs-tmp-00ff", ""}};
  EXPECT_EQ(offered, want);
  EXPECT_EQ(result.cleared, 2u);
  EXPECT_EQ(result.failed, 0u);
  EXPECT_EQ(FilesInDir(), 0u);
  // Only once.
  EXPECT_TRUE(Clear(*next, &result).empty());
}

TEST_F(UploadRecordsTest, AFailedClearKeepsTheNoteForTheMountAfter) {
  {
    auto records = Open();
    ASSERT_NE(records, nullptr);
    ASSERT_TRUE(records->Opened("a", "1").ok());
    ASSERT_TRUE(records->Opened("b", "2").ok());
  }
  {
    auto next = Open();
    ASSERT_NE(next, nullptr);
    UploadRecords::ClearResult result;
    EXPECT_EQ(Clear(*next, &result, "a").size(), 2u);
    EXPECT_EQ(result.cleared, 1u);
    EXPECT_EQ(result.failed, 1u);
    EXPECT_EQ(result.first_error.message(), "server down");
    // This mount's own notes never overwrite the one left.
    ASSERT_TRUE(next->Opened("c", "3").ok());
    ASSERT_TRUE(next->Opened("d", "4").ok());
    next->Closed("d", "4");
  }
  auto third = Open();
  ASSERT_NE(third, nullptr);
  UploadRecords::ClearResult result;
  std::vector<OpenUploadRecord> want = {{"a", "1"}, {"c", "3"}};
  EXPECT_EQ(Clear(*third, &result), want);
  EXPECT_EQ(result.cleared, 2u);
}

// An upload whose abort failed is cleared while the mount runs (and at the unmount), never one
// still open; one whose clearing fails again stays for the next call and the next mount.
TEST_F(UploadRecordsTest, AbandonedUploadsAreClearedWhileTheMountRuns) {
  {
    auto records = Open();
    ASSERT_NE(records, nullptr);
    // The stats' gauge of the uploads left on the server by failed aborts.
    std::atomic<uint64_t> gauge{0};
    records->CountAbandonedIn(&gauge);
    ASSERT_TRUE(records->Opened("in use", "1").ok());
    ASSERT_TRUE(records->Opened("abort failed", "2").ok());
    ASSERT_TRUE(records->Opened("still away", "3").ok());
    EXPECT_EQ(gauge.load(), 0u);
    records->Abandoned("abort failed", "2");
    records->Abandoned("still away", "3");
    records->Abandoned("unknown", "4");  // ignored
    EXPECT_EQ(gauge.load(), 2u);
    UploadRecords::ClearResult result;
    std::vector<OpenUploadRecord> offered;
    std::vector<uint64_t> gauge_while_clearing;
    result = records->ClearAbandoned([&](const OpenUploadRecord& r) {
      offered.push_back(r);
      // One abandoned while the others are being cleared is counted with them.
      if (offered.size() == 1) {
        EXPECT_TRUE(records->Opened("abandoned meanwhile", "5").ok());
        records->Abandoned("abandoned meanwhile", "5");
      }
      gauge_while_clearing.push_back(gauge.load());
      return r.name == "still away" ? IoError("server down") : Status::Ok();
    });
    std::vector<OpenUploadRecord> want = {{"abort failed", "2"}, {"still away", "3"}};
    EXPECT_EQ(offered, want);
    EXPECT_EQ(gauge_while_clearing, (std::vector<uint64_t>{3, 3}));
    EXPECT_EQ(result.cleared, 1u);
    EXPECT_EQ(result.failed, 1u);
    EXPECT_EQ(gauge.load(), 2u);
    EXPECT_EQ(FilesInDir(), 3u);
    offered.clear();
    result = records->ClearAbandoned([&](const OpenUploadRecord& r) {
      offered.push_back(r);
      return r.name == "abandoned meanwhile" ? Status::Ok() : IoError("server down");
    });
    EXPECT_EQ(offered,
              (std::vector<OpenUploadRecord>{{"abandoned meanwhile", "5"}, {"still away", "3"}}));
    EXPECT_EQ(gauge.load(), 1u);
    EXPECT_TRUE(Clear(*records, &result).empty());  // this mount's notes are no leftovers
  }
  auto next = Open();
  ASSERT_NE(next, nullptr);
  UploadRecords::ClearResult result;
  std::vector<OpenUploadRecord> want = {{"in use", "1"}, {"still away", "3"}};
  EXPECT_EQ(Clear(*next, &result), want);
}

TEST_F(UploadRecordsTest, DamagedAndPartialNotesAreDroppedNotCleared) {
  {
    auto records = Open();
    ASSERT_NE(records, nullptr);
    ASSERT_TRUE(records->Opened("kept", "1").ok());
    ASSERT_TRUE(records->Opened("damaged", "2").ok());
  }
  // A flipped byte in the second note, and a note whose writer was killed before its rename.
  const std::string second = dir_ + "/2.upload";
  std::string bytes;
  {
    std::ifstream in(second, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_FALSE(bytes.empty());
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(second, std::ios::binary | std::ios::trunc) << bytes;
  std::ofstream(dir_ + "/3.upload.tmp", std::ios::binary) << "partial";

  auto next = Open();
  ASSERT_NE(next, nullptr);
  UploadRecords::ClearResult result;
  std::vector<OpenUploadRecord> want = {{"kept", "1"}};
  EXPECT_EQ(Clear(*next, &result), want);
  EXPECT_EQ(result.cleared, 1u);
  EXPECT_EQ(result.damaged, 1u);
  EXPECT_EQ(FilesInDir(), 0u);
}

TEST_F(UploadRecordsTest, ANoteThatCannotBeWrittenIsAnError) {
  auto records = Open();
  ASSERT_NE(records, nullptr);
  std::filesystem::remove_all(dir_);
  EXPECT_FALSE(records->Opened("k", "1").ok());
  EXPECT_EQ(records->CountForTesting(), 0u);
}

}  // namespace
}  // namespace objfs
