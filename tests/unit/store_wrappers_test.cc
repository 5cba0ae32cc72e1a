// FaultInjectingStore, MetricsStore and PrefixStore over a MemoryStore; the MD5 and base64
// helpers against their published test vectors.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/base64.h"
#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"
#include "backend/md5.h"
#include "backend/metrics.h"
#include "backend/metrics_store.h"
#include "backend/prefix_store.h"

namespace objfs {
namespace {

Result<ObjectInfo> Put(ObjectStore& store, std::string_view key, std::string_view data,
                       const PutOptions& options = {}) {
  MemorySource source(data);
  return store.put(key, source, options);
}

Result<size_t> ReadInto(ObjectStore& store, std::string_view key, uint64_t offset,
                        std::string& out) {
  return store.read(key, offset,
                    std::span<std::byte>(reinterpret_cast<std::byte*>(out.data()), out.size()),
                    nullptr);
}

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// --- Md5 and Base64 ---

TEST(Md5Test, Rfc1321TestSuite) {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", "d41d8cd98f00b204e9800998ecf8427e"},
      {"a", "0cc175b9c0f1b6a831c399e269772661"},
      {"abc", "900150983cd24fb0d6963f7d28e17f72"},
      {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
      {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
       "d174ab98d277d9f5a5611c2c9f419d9f"},
      {"1234567890123456789012345678901234567890123456789012345678901234567890123456789"
       "0",
       "57edf4a22be3c955ac49da2e2107b67a"},
  };
  for (const auto& [input, hex] : vectors) {
    EXPECT_EQ(HexMd5(Md5Of(input)), hex) << input;
  }
}

TEST(Md5Test, StreamingEqualsOneShotAndRestartsAfterFinal) {
  const std::string input(
      "1234567890123456789012345678901234567890123456789012345678901234567890123456789"
      "0");
  Md5 md5;
  for (size_t i = 0; i < input.size(); i += 7) md5.Update(std::string_view(input).substr(i, 7));
  EXPECT_EQ(HexMd5(md5.Final()), "57edf4a22be3c955ac49da2e2107b67a");
  md5.Update(Bytes("abc"));
  EXPECT_EQ(HexMd5(md5.Final()), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(HexMd5(md5.Final()), "d41d8cd98f00b204e9800998ecf8427e");
}

TEST(Md5Test, MultipartETag) {
  // md5(md5("a") || md5("b")) = 96e024ba2074fe77e8e965ba43a704be
  ETag etag = MultipartETag({Md5Of("a"), Md5Of("b")});
  EXPECT_EQ(etag.value(), "96e024ba2074fe77e8e965ba43a704be-2");
  EXPECT_TRUE(etag.is_multipart());
  EXPECT_EQ(etag.parts(), 2u);
}

TEST(Base64Test, Rfc4648Vectors) {
  EXPECT_EQ(Base64(Bytes("")), "");
  EXPECT_EQ(Base64(Bytes("f")), "Zg==");
  EXPECT_EQ(Base64(Bytes("fo")), "Zm8=");
  EXPECT_EQ(Base64(Bytes("foo")), "Zm9v");
  EXPECT_EQ(Base64(Bytes("foob")), "Zm9vYg==");
  EXPECT_EQ(Base64(Bytes("fooba")), "Zm9vYmE=");
  EXPECT_EQ(Base64(Bytes("foobar")), "Zm9vYmFy");
  const uint8_t high[] = {0xfb, 0xff, 0xbf};
  EXPECT_EQ(Base64(high), "+/+/");
}

TEST(Base64Test, ContentMd5OfEmptyBody) {
  // The Content-MD5 header S3 expects for an empty body.
  EXPECT_EQ(Base64(Md5Of("")), "1B2M2Y8AsgTpgAmY7PhCfg==");
}

// --- FaultInjectingStore ---

class FaultInjectingStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  FaultInjectingStore store_{memory_};
};

TEST_F(FaultInjectingStoreTest, FailsOnlyTheNthCallOfThatKind) {
  ASSERT_TRUE(Put(store_, "before", "x").ok());  // calls before FailNth do not count
  store_.FailNth(StoreOp::kPut, 2, TransientError("injected 503"));
  ASSERT_TRUE(store_.head("before").ok());  // other kinds do not count

  EXPECT_TRUE(Put(store_, "one", "1").ok());
  Result<ObjectInfo> second = Put(store_, "two", "2");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kTransient);
  EXPECT_EQ(second.status().message(), "injected 503");
  EXPECT_TRUE(Put(store_, "three", "3").ok());

  // The failed call never reached the target.
  EXPECT_EQ(memory_->head("two").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(memory_->contents("one"), "1");
  EXPECT_EQ(memory_->contents("three"), "3");
  EXPECT_EQ(store_.calls(StoreOp::kPut), 4);
  EXPECT_EQ(store_.calls(StoreOp::kHead), 1);
  EXPECT_EQ(store_.calls(StoreOp::kCopy), 0);
}

TEST_F(FaultInjectingStoreTest, FailAllUntilClear) {
  ASSERT_TRUE(Put(store_, "k", "data").ok());
  store_.FailAll(StoreOp::kRead, TransientError("timeout"));
  store_.FailAll(StoreOp::kRemove, PermissionDeniedError("denied"));
  std::string buf(4, '\0');
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ReadInto(store_, "k", 0, buf).status().code(), StatusCode::kTransient);
  }
  EXPECT_EQ(store_.remove("k").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(memory_->object_count(), 1u);
  EXPECT_TRUE(store_.head("k").ok());

  store_.Clear();
  Result<size_t> read = ReadInto(store_, "k", 0, buf);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(buf, "data");
  EXPECT_TRUE(store_.remove("k").ok());
  EXPECT_EQ(memory_->object_count(), 0u);
  EXPECT_EQ(store_.calls(StoreOp::kRead), 4);
  EXPECT_EQ(store_.calls(StoreOp::kRemove), 2);
}

TEST_F(FaultInjectingStoreTest, EveryOperationKindCanFail) {
  ASSERT_TRUE(Put(store_, "k", "data").ok());
  Result<ObjectInfo> info = store_.head("k");
  ASSERT_TRUE(info.ok());
  for (StoreOp op : {StoreOp::kHead, StoreOp::kRead, StoreOp::kList, StoreOp::kPut, StoreOp::kCopy,
                     StoreOp::kRemove, StoreOp::kRemoveMany, StoreOp::kSetAttributes}) {
    store_.FailNth(op, 1, IoError("injected"));
  }
  std::string buf(4, '\0');
  EXPECT_EQ(store_.head("k").status().code(), StatusCode::kIoError);
  EXPECT_EQ(ReadInto(store_, "k", 0, buf).status().code(), StatusCode::kIoError);
  EXPECT_EQ(store_.list(ListOptions{}).status().code(), StatusCode::kIoError);
  EXPECT_EQ(Put(store_, "k2", "x").status().code(), StatusCode::kIoError);
  EXPECT_EQ(store_.copy(*info, "k3", CopyOptions{}).status().code(), StatusCode::kIoError);
  EXPECT_EQ(store_.remove("k").code(), StatusCode::kIoError);
  EXPECT_EQ(store_.remove_many({"k"}).code(), StatusCode::kIoError);
  SetAttributesOptions chmod;
  chmod.expected = *info;
  EXPECT_EQ(store_.set_attributes("k", Metadata{{"mode", "33216"}}, chmod).status().code(),
            StatusCode::kIoError);
  EXPECT_EQ(memory_->head("k")->metadata.count("mode"), 0u);
  EXPECT_EQ(memory_->object_count(), 1u);
  // Each rule fired once; the next calls pass through.
  EXPECT_TRUE(store_.copy(*info, "k3", CopyOptions{}).ok());
  EXPECT_TRUE(store_.remove_many({"k", "k3"}).ok());
  EXPECT_EQ(memory_->object_count(), 0u);
  EXPECT_EQ(store_.calls(StoreOp::kRemoveMany), 2);
  EXPECT_EQ(store_.calls(StoreOp::kRemove), 1);
}

// --- MetricsStore ---

TEST(MetricsStoreTest, CountsRequestsBytesAndFailures) {
  Metrics metrics;
  auto memory = std::make_shared<MemoryStore>();
  MetricsStore store(memory, metrics);

  ASSERT_TRUE(Put(store, "a", "hello world").ok());
  PutOptions exclusive;
  exclusive.if_none_match = true;
  EXPECT_FALSE(Put(store, "a", "again", exclusive).ok());
  EXPECT_EQ(metrics.put_requests.load(), 2u);
  EXPECT_EQ(metrics.bytes_written.load(), 11u);  // only the successful put
  EXPECT_EQ(metrics.failed_requests.load(), 1u);

  std::string buf(5, '\0');
  ASSERT_TRUE(ReadInto(store, "a", 0, buf).ok());
  ASSERT_TRUE(ReadInto(store, "a", 8, buf).ok());  // 3 bytes left
  EXPECT_FALSE(ReadInto(store, "missing", 0, buf).ok());
  EXPECT_EQ(metrics.read_requests.load(), 3u);
  EXPECT_EQ(metrics.bytes_read.load(), 8u);
  EXPECT_EQ(metrics.failed_requests.load(), 1u);  // NotFound is an answer, not a failure

  Result<ObjectInfo> info = store.head("a");
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(store.head("missing").ok());
  EXPECT_EQ(metrics.head_requests.load(), 2u);

  ASSERT_TRUE(store.copy(*info, "b", CopyOptions{}).ok());
  ObjectInfo gone;
  gone.key = "gone";
  EXPECT_FALSE(store.copy(gone, "c", CopyOptions{}).ok());
  EXPECT_EQ(metrics.copy_requests.load(), 2u);
  EXPECT_EQ(metrics.server_copies.load(), 1u);
  EXPECT_EQ(metrics.bytes_copied_on_server.load(), 11u);

  ASSERT_TRUE(store.list(ListOptions{}).ok());
  EXPECT_EQ(metrics.list_requests.load(), 1u);
  ASSERT_TRUE(store.remove("a").ok());
  ASSERT_TRUE(store.remove_many({"b", "x"}).ok());
  EXPECT_EQ(metrics.remove_requests.load(), 2u);
  EXPECT_EQ(metrics.failed_requests.load(), 1u);
  FaultInjectingStore faulty(memory);
  faulty.FailNth(StoreOp::kHead, 1, TransientError("injected"));
  MetricsStore counted(std::shared_ptr<ObjectStore>(&faulty, [](ObjectStore*) {}), metrics);
  EXPECT_FALSE(counted.head("a").ok());
  EXPECT_EQ(metrics.failed_requests.load(), 2u);  // a real failure counts
  EXPECT_EQ(memory->object_count(), 0u);
}

// A store whose capabilities differ from its inner store's as `edit` says.
class EditedCapabilitiesStore : public ForwardingStore {
 public:
  EditedCapabilitiesStore(std::shared_ptr<ObjectStore> inner,
                          std::function<void(Capabilities&)> edit)
      : ForwardingStore(std::move(inner)), edit_(std::move(edit)) {}
  Capabilities capabilities() const override {
    Capabilities caps = ForwardingStore::capabilities();
    edit_(caps);
    return caps;
  }

 private:
  std::function<void(Capabilities&)> edit_;
};

TEST(MetricsStoreTest, ClientSideCopiesAreNotServerCopies) {
  Metrics metrics;
  auto memory = std::make_shared<MemoryStore>();
  // Without server-side copy: its copies are not done on the server.
  MetricsStore store(std::make_shared<EditedCapabilitiesStore>(
                         memory, [](Capabilities& caps) { caps.server_side_copy = false; }),
                     metrics);
  Result<ObjectInfo> info = Put(store, "a", "data");
  ASSERT_TRUE(info.ok());
  ASSERT_TRUE(store.copy(*info, "b", CopyOptions{}).ok());
  EXPECT_EQ(metrics.copy_requests.load(), 1u);
  EXPECT_EQ(metrics.server_copies.load(), 0u);
  EXPECT_EQ(metrics.bytes_copied_on_server.load(), 0u);
}

TEST(MetricsStoreTest, AttributesSetInPlaceAreNotServerCopies) {
  Metrics metrics;
  MemoryStoreOptions options;
  options.attributes_by_copy = false;  // as SFTP's SETSTAT
  MetricsStore store(std::make_shared<MemoryStore>(options), metrics);
  Result<ObjectInfo> info = Put(store, "a", "data");
  ASSERT_TRUE(info.ok());
  SetAttributesOptions chmod;
  chmod.expected = *info;
  ASSERT_TRUE(store.set_attributes("a", Metadata{{"mode", "33216"}}, chmod).ok());
  EXPECT_EQ(metrics.set_attributes_requests.load(), 1u);
  EXPECT_EQ(metrics.copy_requests.load(), 0u);
  EXPECT_EQ(metrics.server_copies.load(), 0u);
  EXPECT_EQ(metrics.bytes_copied_on_server.load(), 0u);
  // A real copy on the same store still counts.
  ASSERT_TRUE(store.copy(*info, "b", CopyOptions{}).ok());
  EXPECT_EQ(metrics.server_copies.load(), 1u);
  EXPECT_EQ(metrics.bytes_copied_on_server.load(), 4u);
}

TEST(MetricsStoreTest, AttributesSetByASelfCopyAreServerCopies) {
  Metrics metrics;
  MetricsStore store(std::make_shared<MemoryStore>(), metrics);  // as S3
  Result<ObjectInfo> info = Put(store, "a", "data");
  ASSERT_TRUE(info.ok());
  SetAttributesOptions chmod;
  chmod.expected = *info;
  ASSERT_TRUE(store.set_attributes("a", Metadata{{"mode", "33216"}}, chmod).ok());
  EXPECT_EQ(metrics.set_attributes_requests.load(), 1u);
  EXPECT_EQ(metrics.copy_requests.load(), 0u);
  EXPECT_EQ(metrics.server_copies.load(), 1u);
  EXPECT_EQ(metrics.bytes_copied_on_server.load(), 4u);
  // A failed one counts as a failed request.
  chmod.expected.etag = ETag::Parse("\"0123456789abcdef0123456789abcdef\"");
  EXPECT_EQ(store.set_attributes("a", Metadata{}, chmod).status().code(),
            StatusCode::kPreconditionFailed);
  EXPECT_EQ(metrics.set_attributes_requests.load(), 2u);
  EXPECT_EQ(metrics.failed_requests.load(), 1u);
}

// --- PrefixStore ---

class PrefixStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  PrefixStore store_{memory_, "some/dir/"};
};

TEST_F(PrefixStoreTest, MapsKeysDownAndStripsThemUp) {
  PutOptions options;
  options.metadata = {{"mode", "33188"}};
  Result<ObjectInfo> put = Put(store_, "file", "bytes", options);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->key, "file");
  EXPECT_EQ(memory_->contents("some/dir/file"), "bytes");
  EXPECT_EQ(memory_->object_count(), 1u);

  Result<ObjectInfo> head = store_.head("file");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->key, "file");
  std::string buf(5, '\0');
  ASSERT_TRUE(ReadInto(store_, "file", 0, buf).ok());
  EXPECT_EQ(buf, "bytes");

  Result<ObjectInfo> copied = store_.copy(*head, "sub/copy", CopyOptions{});
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(copied->key, "sub/copy");
  EXPECT_EQ(memory_->contents("some/dir/sub/copy"), "bytes");

  ASSERT_TRUE(store_.remove("file").ok());
  EXPECT_EQ(memory_->head("some/dir/file").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_.remove_many({"sub/copy"}).ok());
  EXPECT_EQ(memory_->object_count(), 0u);
}

TEST_F(PrefixStoreTest, ListingsSeeOnlyThePrefixWithItStripped) {
  for (const char* key : {"some/dir/a", "some/dir/b/1", "some/dir/b/2", "some/dir/c/d/e",
                          "some/dir", "some/dirt", "some/other/x", "top"}) {
    ASSERT_TRUE(Put(*memory_, key, "x").ok());
  }
  ListOptions options;
  options.delimiter = "/";
  Result<Listing> root = store_.list(options);
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->objects.size(), 1u);
  EXPECT_EQ(root->objects[0].key, "a");
  EXPECT_EQ(root->common_prefixes, (std::vector<std::string>{"b/", "c/"}));

  options.prefix = "c/";
  Result<Listing> c = store_.list(options);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->objects.empty());
  EXPECT_EQ(c->common_prefixes, (std::vector<std::string>{"c/d/"}));

  ListOptions after;
  after.start_after = "b/1";
  Result<Listing> rest = store_.list(after);
  ASSERT_TRUE(rest.ok());
  std::vector<std::string> keys;
  for (const ObjectInfo& object : rest->objects) keys.push_back(object.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"b/2", "c/d/e"}));
}

TEST_F(PrefixStoreTest, EmptyKeyIsInvalidNotThePrefixItself) {
  ASSERT_TRUE(Put(*memory_, "some/dir/", "marker").ok());
  EXPECT_EQ(store_.head("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Put(store_, "", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.remove("").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(memory_->contents("some/dir/"), "marker");
}

TEST(PrefixStoreEmptyPrefixTest, PassesKeysThrough) {
  auto memory = std::make_shared<MemoryStore>();
  PrefixStore store(memory, "");
  ASSERT_TRUE(Put(store, "k/v", "x").ok());
  EXPECT_EQ(memory->contents("k/v"), "x");
  ListOptions options;
  options.delimiter = "/";
  Result<Listing> listing = store.list(options);
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->common_prefixes, std::vector<std::string>{"k/"});
}

}  // namespace
}  // namespace objfs
