#include "fs/cli/cache_directory.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cache/upload_records.h"
#include "gtest/gtest.h"
#include "tests/fixtures/mount.h"

namespace objfs {
namespace {

TEST(ServerNameTest, SpellsAnEndpointOneWay) {
  EXPECT_EQ(ServerName(""), "AWS");
  EXPECT_EQ(ServerName("HTTP://LocalHost:80/"), "http://localhost");
  EXPECT_EQ(ServerName("https://S3.Example.COM:443"), "https://s3.example.com");
  EXPECT_EQ(ServerName("https://s3.example.com:4430//"), "https://s3.example.com:4430");
  EXPECT_EQ(ServerName("http://gw:8080/Tenant/"), "http://gw:8080/Tenant");
  EXPECT_EQ(ServerName("http://gw:8080"), ServerName("http://GW:8080/"));
  EXPECT_NE(ServerName("http://gw:8080"), ServerName("https://gw:8080"));
}

class CacheScopeTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.empty()); }

  void Put(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string Store() const {
    std::ifstream in(dir_ + "/.store");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  Status Check(const std::string& server, bool claim, const UploadRecords* uploads = nullptr) {
    return CheckCacheScope(dir_, CacheScope{.url = "s3://b/", .server = server}, uploads, claim);
  }

  testing::ScratchDir scratch_;
  const std::string& dir_ = scratch_.path();
};

TEST_F(CacheScopeTest, AFreshDirectoryIsClaimedForItsUrlAndServer) {
  ASSERT_TRUE(Check("", /*claim=*/false).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.store"));  // not before the store opened
  ASSERT_TRUE(Check("http://a", /*claim=*/true).ok());
  EXPECT_EQ(Store(), "s3://b/\nserver http://a\n");
  Result<CacheScope> named = ReadCacheScope(dir_);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->url, "s3://b/");
  EXPECT_EQ(named->server, "http://a");
}

TEST_F(CacheScopeTest, AnotherUrlIsRefusedWhateverTheDirectoryHolds) {
  Put(".store", "s3://other/\nserver http://a\n");
  Status refused = Check("http://a", /*claim=*/true);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("holds the staged writes of s3://other/, not of s3://b/"),
            std::string::npos)
      << refused.message();
  EXPECT_EQ(Store(), "s3://other/\nserver http://a\n");
}

TEST_F(CacheScopeTest, AMarkWithoutAServerIsTakenAsThisServersAndCompleted) {
  Put(".store", "s3://b/\n");  // as objfs wrote it before the server line
  Put("1-0.meta", "staged");
  ASSERT_TRUE(Check("http://a", /*claim=*/false).ok());
  ASSERT_TRUE(Check("http://a", /*claim=*/true).ok());
  EXPECT_EQ(Store(), "s3://b/\nserver http://a\n");
}

TEST_F(CacheScopeTest, AnotherServerIsRefusedWhileItsStagedWritesOrHeldChangesRemain) {
  Put(".store", "s3://b/\nserver http://a\n");
  for (const char* record : {"1-0.meta", "1-1.attrs"}) {
    Put(record, "");
    Status refused = Check("http://b", /*claim=*/true);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << record;
    EXPECT_NE(refused.message().find("holds what a mount of s3://b/ on http://a left, not of "
                                     "s3://b/ on http://b: mount it with -o endpoint=http://a"),
              std::string::npos)
        << refused.message();
    EXPECT_EQ(Store(), "s3://b/\nserver http://a\n");
    std::filesystem::remove(dir_ + "/" + record);
  }
  // Data a mount set aside as unfinished is never uploaded: it holds nothing for the server.
  std::filesystem::create_directory(dir_ + "/unfinished");
  Put("unfinished/f", "set aside");
  ASSERT_TRUE(Check("http://b", /*claim=*/true).ok());
  EXPECT_EQ(Store(), "s3://b/\nserver http://b\n");
}

TEST_F(CacheScopeTest, AnotherServerIsRefusedWhileUploadsAreNotedForTheFirst) {
  Put(".store", "s3://b/\nserver AWS\n");
  std::filesystem::create_directory(dir_ + "/uploads");
  Put("uploads/1.upload", "");
  Result<std::unique_ptr<UploadRecords>> uploads = UploadRecords::Open(dir_ + "/uploads");
  ASSERT_TRUE(uploads.ok()) << uploads.status().ToString();
  Status refused = Check("http://b", /*claim=*/false, uploads->get());
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("mount it without -o endpoint="), std::string::npos)
      << refused.message();
  // The same server under the same name takes it.
  EXPECT_TRUE(Check("AWS", /*claim=*/true, uploads->get()).ok());
}

}  // namespace
}  // namespace objfs
