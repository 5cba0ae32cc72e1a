// The limit on an object's user metadata through a real objfs mount on RGW: setfattr over
// max_metadata fails with E2BIG and leaves the object alone, up to it works; and with the limit
// raised above what the server stores, the change the server refuses never holds back the
// file's data, is logged once, lets the mount unmount cleanly and leaves nothing for the next.

#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>

#include "backend/s3/s3_store.h"
#include "fs/object_metadata.h"
#include "fs/xattr.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/mount.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs::testing {
namespace {

// A client of the test bucket, to see what the server holds.
std::unique_ptr<s3::S3Store> BucketClient(const std::string& bucket) {
  const S3TestServer& server = SharedS3Server();
  s3::S3StoreOptions o;
  o.bucket = bucket;
  o.endpoint = server.endpoint;
  o.region = server.region;
  o.credentials.access_key = server.access_key;
  o.credentials.secret_key = server.secret_key;
  auto store = s3::S3Store::Create(std::move(o));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// The user extended attributes the server holds for `key`.
XattrMap StoredXattrs(s3::S3Store& store, const std::string& key) {
  auto head = store.head(key);
  EXPECT_TRUE(head.ok()) << head.status().ToString();
  if (!head.ok()) return {};
  auto it = head->metadata.find(kXattrMetadata);
  if (it == head->metadata.end()) return {};
  auto decoded = DecodeXattrs(it->second);
  EXPECT_TRUE(decoded.has_value()) << it->second;
  return decoded.value_or(XattrMap());
}

// The server's content of `key`.
std::string StoredContent(s3::S3Store& store, const std::string& key) {
  auto head = store.head(key);
  EXPECT_TRUE(head.ok()) << head.status().ToString();
  if (!head.ok()) return "";
  std::string out(head->size, '\0');
  auto n =
      store.read(key, 0, std::span(reinterpret_cast<std::byte*>(out.data()), out.size()), nullptr);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  out.resize(n.ok() ? *n : 0);
  return out;
}

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

TEST(MountS3MetadataLimitTest, SetfattrOverTheLimitIsE2bigAndUpToItWorks) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<s3::S3Store> store = BucketClient(bucket);
  ASSERT_TRUE(store);
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket));
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/f";
  WriteFile(file, "content");
  const auto before = store->head("f");
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  CommandResult big =
      RunCommand({"setfattr", "-n", "user.big", "-v", std::string(64 << 10, 'v'), file});
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.err.find("Argument list too long"), std::string::npos) << big.err;
  char buf[16];
  EXPECT_LT(::getxattr(file.c_str(), "user.big", buf, sizeof(buf)), 0);
  EXPECT_EQ(errno, ENODATA);

  // Two attributes that each fit but not together: no room for the second.
  const std::string half(800, 'h');
  CommandResult one = RunCommand({"setfattr", "-n", "user.one", "-v", half, file});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  CommandResult two = RunCommand({"setfattr", "-n", "user.two", "-v", half, file});
  EXPECT_NE(two.exit_code, 0);
  EXPECT_NE(two.err.find("No space left on device"), std::string::npos) << two.err;
  CommandResult drop = RunCommand({"setfattr", "-x", "user.one", file});
  ASSERT_EQ(drop.exit_code, 0) << drop.err;

  // The largest value that fits in the 2048 bytes of the object's metadata, which holds a ctime
  // by now (the setfattr calls above stored one).
  std::string value;
  for (size_t n = 1; n < 2048; ++n) {
    Metadata metadata = before->metadata;
    metadata[kCtimeMetadata] = "";  // counted at its longest
    metadata[kXattrMetadata] = EncodeXattrs({{"user.big", std::string(n, 'v')}});
    if (MetadataSize(metadata) > kDefaultMaxMetadata) break;
    value.assign(n, 'v');
  }
  ASSERT_GT(value.size(), 1000u);
  CommandResult over = RunCommand({"setfattr", "-n", "user.big", "-v", value + "v", file});
  EXPECT_NE(over.exit_code, 0);
  EXPECT_NE(over.err.find("Argument list too long"), std::string::npos) << over.err;
  CommandResult fits = RunCommand({"setfattr", "-n", "user.big", "-v", value, file});
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(GetXattr(file, "user.big"), value);
  EXPECT_EQ(mount->Stop(), 0) << mount->log();

  // The server holds exactly what was accepted, on the same bytes.
  const auto after = store->head("f");
  ASSERT_TRUE(after.ok());
  const XattrMap stored = StoredXattrs(*store, "f");
  EXPECT_EQ(stored.size(), 1u);
  ASSERT_EQ(stored.count("user.big"), 1u);
  EXPECT_EQ(stored.at("user.big"), value);
  EXPECT_EQ(after->etag, before->etag);
  EXPECT_EQ(StoredContent(*store, "f"), "content");
}

// -o max_metadata above what RGW stores: the mount accepts a change the server refuses.
TEST(MountS3MetadataLimitTest, AChangeTheServerRefusesNeverHoldsTheDataBack) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<s3::S3Store> store = BucketClient(bucket);
  ASSERT_TRUE(store);
  ObjfsMount::Options options;
  options.extra_options = "max_metadata=16K";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/f";
  WriteFile(file, "first");
  CommandResult small = RunCommand({"setfattr", "-n", "user.small", "-v", "kept", file});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  GetXattr(file, "user.etag");  // applies it
  ASSERT_EQ(StoredXattrs(*store, "f")["user.small"], "kept");

  CommandResult big =
      RunCommand({"setfattr", "-n", "user.big", "-v", std::string(12000, 'v'), file});
  ASSERT_EQ(big.exit_code, 0) << big.err;  // held for metadata_delay
  // Reading the ETag applies the change: the server refuses it, and the ETag is still there.
  CommandResult etag = RunCommand({"getfattr", "-n", "user.etag", file});
  EXPECT_EQ(etag.exit_code, 0) << etag.err;

  CommandResult big_again =
      RunCommand({"setfattr", "-n", "user.big", "-v", std::string(12000, 'w'), file});
  ASSERT_EQ(big_again.exit_code, 0) << big_again.err;
  // Data written while a refused change is held reaches the server at close.
  WriteFile(file, "second, after the refused change");
  EXPECT_EQ(StoredContent(*store, "f"), "second, after the refused change");
  const XattrMap stored = StoredXattrs(*store, "f");
  EXPECT_EQ(stored.count("user.big"), 0u);
  EXPECT_EQ(stored.count("user.small"), 1u);
  EXPECT_EQ(Occurrences(mount->log(), "user.big"), 2u) << mount->log();

  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  const size_t logged = mount->log().size();
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(file), "second, after the refused change");
  EXPECT_EQ(mount->Stop(), 0);
  EXPECT_EQ(mount->log().substr(logged).find("user.big"), std::string::npos) << mount->log();
}

// The same change held when objfs dies: the next mount drops its record once.
TEST(MountS3MetadataLimitTest, ARefusedChangeLeftByACrashIsDroppedOnce) {
  const std::string bucket = CreateTestBucket(TestName());
  std::unique_ptr<s3::S3Store> store = BucketClient(bucket);
  ASSERT_TRUE(store);
  ObjfsMount::Options options;
  options.extra_options = "max_metadata=16K,metadata_delay=600";
  std::unique_ptr<ObjfsMount> mount = ObjfsMount::Start(S3MountUrl(bucket), options);
  ASSERT_TRUE(mount);
  const std::string file = mount->path() + "/f";
  WriteFile(file, "data");
  const auto before = store->head("f");
  ASSERT_TRUE(before.ok());
  CommandResult big =
      RunCommand({"setfattr", "-n", "user.big", "-v", std::string(12000, 'v'), file});
  ASSERT_EQ(big.exit_code, 0) << big.err;
  EXPECT_EQ(mount->KillAndWait(SIGKILL), 128 + SIGKILL);

  size_t logged = mount->log().size();
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(Occurrences(mount->log().substr(logged), "user.big"), 1u) << mount->log();
  EXPECT_EQ(mount->Stop(), 0) << mount->log();
  logged = mount->log().size();
  ASSERT_TRUE(mount->Restart());
  EXPECT_EQ(ReadFile(file), "data");
  EXPECT_EQ(mount->Stop(), 0);
  EXPECT_EQ(mount->log().substr(logged).find("user.big"), std::string::npos) << mount->log();
  EXPECT_EQ(mount->log().substr(logged).find("metadata change"), std::string::npos) << mount->log();
  EXPECT_EQ(store->head("f")->etag, before->etag);
  EXPECT_TRUE(StoredXattrs(*store, "f").empty());
}

}  // namespace
}  // namespace objfs::testing
