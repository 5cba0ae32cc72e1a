// The S3 client against a real Ceph RADOS Gateway: the backend conformance suite, and what is
// particular to S3 (multipart ETags, UploadPartCopy, credentials, retries, unreachable servers).
#include "backend/s3/s3_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/base64.h"
#include "backend/md5.h"
#include "backend/metrics_store.h"
#include "backend/upload_journal.h"
#include "tests/conformance/object_store_conformance.h"
#include "tests/fixtures/fault_proxy.h"
#include "tests/fixtures/file_tools.h"
#include "tests/fixtures/free_port.h"
#include "tests/fixtures/run_command.h"
#include "tests/fixtures/test_servers.h"

namespace objfs {
namespace {

using s3::PartChecksum;
using s3::S3Store;
using s3::S3StoreOptions;

constexpr uint64_t kPart = 5 << 20;  // RGW's smallest multipart part

std::string CurrentTestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info != nullptr ? std::string(info->name()) : std::string("s3");
}

S3StoreOptions OptionsFor(const std::string& bucket) {
  const testing::S3TestServer& server = testing::SharedS3Server();
  S3StoreOptions o;
  o.bucket = bucket;
  o.endpoint = server.endpoint;
  o.region = server.region;
  o.credentials.access_key = server.access_key;
  o.credentials.secret_key = server.secret_key;
  o.multipart_threshold = kPart + (1 << 20);
  o.part_size = kPart;
  o.copy_part_threshold = kPart + (1 << 20);
  o.copy_part_size = kPart;
  return o;
}

std::shared_ptr<S3Store> MakeStore(S3StoreOptions options) {
  auto store = S3Store::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::shared_ptr<S3Store>(std::move(store).value()) : nullptr;
}

std::shared_ptr<ObjectStore> FreshBucketStore() {
  return MakeStore(OptionsFor(testing::CreateTestBucket(CurrentTestName())));
}

INSTANTIATE_TEST_SUITE_P(RGW, ObjectStoreConformance,
                         ::testing::Values(ConformanceBackend{"S3OnRGW", FreshBucketStore,
                                                              kPart + (1 << 20), kPart,
                                                              kPart + (1 << 20)}),
                         ConformanceBackendName);

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s[i] = static_cast<char>(x);
  }
  return s;
}

class S3StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bucket_ = testing::CreateTestBucket(CurrentTestName());
    store_ = MakeStore(OptionsFor(bucket_));
    ASSERT_NE(store_, nullptr);
  }

  Result<ObjectInfo> Put(const std::string& key, const std::string& data, Metadata meta = {}) {
    MemorySource src(data);
    PutOptions o;
    o.metadata = std::move(meta);
    return store_->put(key, src, o);
  }

  // A proxy in front of the test server, and a store of this test's bucket that goes through
  // it and copies one part at a time (part 1 before part 2 is asked for).
  std::shared_ptr<S3Store> StoreThrough(std::unique_ptr<testing::FaultProxy>* proxy) {
    *proxy = std::make_unique<testing::FaultProxy>("127.0.0.1", testing::SharedS3Server().port());
    S3StoreOptions o = OptionsFor(bucket_);
    o.endpoint = (*proxy)->endpoint();
    o.parallel_parts = 1;
    return MakeStore(o);
  }

  std::string bucket_;
  std::shared_ptr<S3Store> store_;
};

// A source that remembers the largest single read asked of it.
class ReadSizeRecordingSource : public ByteSource {
 public:
  explicit ReadSizeRecordingSource(std::string_view data) : inner_(data) {}
  uint64_t size() const override { return inner_.size(); }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    uint64_t seen = largest_.load();
    while (buf.size() > seen && !largest_.compare_exchange_weak(seen, buf.size())) {
    }
    return inner_.read_at(offset, buf);
  }
  uint64_t largest() const { return largest_.load(); }

 private:
  MemorySource inner_;
  mutable std::atomic<uint64_t> largest_{0};
};

TEST_F(S3StoreTest, MultipartUploadStreamsEachPartInsteadOfHoldingIt) {
  // Parts grow with the file up to 5 GiB, and parallel_parts of them are in flight: a part is
  // hashed and sent in pieces straight from its source, never read whole into memory.
  S3StoreOptions o = OptionsFor(bucket_);
  o.part_size = 3 * kPart;  // 15 MiB parts
  o.multipart_threshold = 3 * kPart;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern(6 * kPart + 777, 3);
  ReadSizeRecordingSource src(data);
  Result<ObjectInfo> put = store->put("streamed", src, PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->etag.parts(), 3u);
  EXPECT_LE(src.largest(), uint64_t{4} << 20);
  Result<std::string> back = ReadAll(*store, "streamed");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
}

// A source that counts the bytes read of it.
class ReadCountingSource : public ByteSource {
 public:
  explicit ReadCountingSource(std::string_view data) : inner_(data) {}
  uint64_t size() const override { return inner_.size(); }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    Result<size_t> n = inner_.read_at(offset, buf);
    if (n.ok()) read_ += *n;
    return n;
  }
  uint64_t read() const { return read_.load(); }

 private:
  MemorySource inner_;
  mutable std::atomic<uint64_t> read_{0};
};

// part_checksum=md5 (the default): each part is hashed as it is sent and checked by its ETag,
// so a file's bytes are read once for the upload, not once to hash and once to send.
TEST_F(S3StoreTest, APartCheckedByItsMd5IsReadOnce) {
  Metrics metrics;
  S3StoreOptions o = OptionsFor(bucket_);
  o.metrics = &metrics;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  const std::string data = Pattern(2 * kPart + 4321, 22);
  ReadCountingSource source(data);
  Result<ObjectInfo> put = store->put("once", source, PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->etag.parts(), 3u);
  EXPECT_EQ(source.read(), data.size());
  EXPECT_EQ(metrics.bytes_hashed.load(), data.size());
  EXPECT_EQ(metrics.parts_sent_again.load(), 0u);
  EXPECT_EQ(store_->head("once")->etag, put->etag);
  EXPECT_TRUE(*ReadAll(*store_, "once") == data);
}

// A conditional PUT whose reply was lost is sent again, and the second attempt's If-Match then
// fails against the object the first one stored. Where the key holds exactly the bytes being
// put, the put succeeded: an edit is not set aside as if another client had replaced its file.
// (Another condition still fails: other bytes there are another client's.)
// A source that has another client store `key` the first time it is read (while a put of it
// hashes or sends its first part).
class ReplacedWhileReadSource : public ByteSource {
 public:
  ReplacedWhileReadSource(std::string_view data, ObjectStore* other, std::string key)
      : inner_(data), other_(other), key_(std::move(key)) {}
  uint64_t size() const override { return inner_.size(); }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    if (!replaced_.exchange(true)) {
      Result<ObjectInfo> put = other_->put(key_, MemorySource("theirs"), PutOptions{});
      if (!put.ok()) return put.status();
    }
    return inner_.read_at(offset, buf);
  }

 private:
  MemorySource inner_;
  ObjectStore* other_;
  const std::string key_;
  mutable std::atomic<bool> replaced_{false};
};

// RGW ignores the condition of a multipart completion, which is therefore checked by a HEAD:
// again right before the completion, not only before the parts go up, so that another client's
// object stored meanwhile stays.
TEST_F(S3StoreTest, AConditionalMultipartPutChecksAgainBeforeItsCompletion) {
  S3StoreOptions o = OptionsFor(bucket_);
  o.part_size = kPart;
  o.multipart_threshold = kPart;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  Result<ObjectInfo> old = Put("raced", "old");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  const std::string data = Pattern(2 * kPart + 5, 4);
  ReplacedWhileReadSource source(data, store_.get(), "raced");
  PutOptions conditional;
  conditional.if_match = old->etag;
  Result<ObjectInfo> put = store->put("raced", source, conditional);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kPreconditionFailed) << put.status().ToString();
  EXPECT_EQ(*ReadAll(*store_, "raced"), "theirs");
}

// A server that compares If-Match unquoted (RGW) refuses the first conditional PUT, which is
// sent again unquoted; later ones go unquoted at once, their bodies sent once.
TEST_F(S3StoreTest, AConditionalPutSendsItsBodyOnceAfterTheFirst) {
  S3StoreOptions o = OptionsFor(bucket_);
  Metrics metrics;
  o.metrics = &metrics;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  Result<ObjectInfo> last = Put("edited", "version 0");
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  for (int i = 1; i <= 3; ++i) {
    const std::string data = "version " + std::to_string(i);
    PutOptions conditional;
    conditional.if_match = last->etag;
    const uint64_t before = metrics.http_requests.load();
    last = store->put("edited", MemorySource(data), conditional);
    ASSERT_TRUE(last.ok()) << last.status().ToString();
    if (i > 1) {
      EXPECT_EQ(metrics.http_requests.load() - before, 1u) << "put " << i;
    }
    EXPECT_EQ(*ReadAll(*store_, "edited"), data);
  }
  PutOptions stale;
  stale.if_match = ETag::FromMd5(Md5Of("version 0"));
  Result<ObjectInfo> refused = store->put("edited", MemorySource("late"), stale);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPreconditionFailed);
  EXPECT_EQ(*ReadAll(*store_, "edited"), "version 3");
}

TEST_F(S3StoreTest, MultipartUploadETagIsMd5OfPartMd5s) {
  std::string data = Pattern(2 * kPart + 12345, 1);
  Result<ObjectInfo> put = Put("big", data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  std::vector<Md5Digest> parts;
  for (size_t off = 0; off < data.size(); off += kPart) {
    parts.push_back(Md5Of(std::string_view(data).substr(off, kPart)));
  }
  ETag expected = MultipartETag(parts);
  EXPECT_TRUE(put->etag.is_multipart());
  EXPECT_EQ(put->etag.parts(), 3u);
  EXPECT_EQ(put->etag, expected);
  Result<ObjectInfo> head = store_->head("big");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, expected);  // what the server itself reports, not just our echo
  Result<std::string> back = ReadAll(*store_, "big");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
}

// part_checksum=none: no part is hashed here, by a put or by an upload session, and the
// object still gets the ETag its bytes give (from the server's part ETags), with no HEAD.
TEST_F(S3StoreTest, PartsSentWithoutAChecksumAreNotHashedAndKeepTheirETag) {
  const std::string data = Pattern(2 * kPart + 12345, 21);
  std::vector<Md5Digest> md5s;
  for (size_t off = 0; off < data.size(); off += kPart) {
    md5s.push_back(Md5Of(std::string_view(data).substr(off, kPart)));
  }
  const ETag expected = MultipartETag(md5s);
  for (const PartChecksum checksum : {PartChecksum::kMd5, PartChecksum::kNone}) {
    SCOPED_TRACE(checksum == PartChecksum::kMd5 ? "md5" : "none");
    const std::string suffix = checksum == PartChecksum::kMd5 ? "-md5" : "-none";
    Metrics metrics;
    S3StoreOptions o = OptionsFor(bucket_);
    o.part_checksum = checksum;
    o.metrics = &metrics;
    auto store = MakeStore(o);
    ASSERT_NE(store, nullptr);
    MemorySource source(data);

    const uint64_t requests = metrics.http_requests.load();
    Result<ObjectInfo> put = store->put("put" + suffix, source, PutOptions{});
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    EXPECT_EQ(put->etag, expected);
    // Create, three parts, Complete: the ETag comes from the parts, not from a HEAD.
    EXPECT_EQ(metrics.http_requests.load() - requests, 5u);

    Result<std::unique_ptr<Upload>> upload = store->start_upload("session" + suffix, {});
    ASSERT_TRUE(upload.ok()) << upload.status().ToString();
    for (uint64_t off = 0; off < data.size(); off += kPart) {
      const uint64_t length = std::min<uint64_t>(kPart, data.size() - off);
      ASSERT_TRUE((*upload)->write(off, source, off, length).ok());
    }
    Result<ObjectInfo> done = (*upload)->complete(data.size(), PutOptions{});
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->etag, expected);

    EXPECT_EQ(metrics.bytes_hashed.load(), checksum == PartChecksum::kMd5 ? 2 * data.size() : 0);
    for (const std::string& key : {"put" + suffix, "session" + suffix}) {
      Result<ObjectInfo> head = store_->head(key);
      ASSERT_TRUE(head.ok()) << head.status().ToString();
      EXPECT_EQ(head->etag, expected) << key;
      Result<std::string> back = ReadAll(*store_, key);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_TRUE(*back == data) << key;
    }
  }
}

TEST_F(S3StoreTest, UploadPartCopyEqualsSource) {
  std::string data = Pattern(2 * kPart + 777, 2);
  S3StoreOptions single = OptionsFor(bucket_);
  single.multipart_threshold = 1ull << 30;  // a plain-MD5 source
  MemorySource body(data);
  PutOptions po;
  po.metadata = {{"mode", "33188"}};
  ASSERT_TRUE(MakeStore(single)->put("plain", body, po).ok());
  Result<ObjectInfo> src = store_->head("plain");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(src->etag.is_plain_md5());
  Result<ObjectInfo> copy = store_->copy(*src, "copied", CopyOptions{});
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  EXPECT_TRUE(copy->etag.is_multipart());  // done by UploadPartCopy, in 3 parts
  EXPECT_EQ(copy->etag.parts(), 3u);
  Result<std::string> back = ReadAll(*store_, "copied");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
  Result<ObjectInfo> head = store_->head("copied");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata["mode"], "33188");  // COPY semantics carried into the new upload
}

// Each part of a copy made of parts reads whatever version is there when it runs (RGW ignores
// x-amz-copy-source-if-match): another client's write between two parts fails the copy, which
// never completes as a mix of two versions, and leaves no upload behind.
TEST_F(S3StoreTest, ASourceRewrittenBetweenTheCopysPartsFailsTheCopy) {
  const std::string first = Pattern(2 * kPart + 777, 3);
  ASSERT_TRUE(Put("src", first).ok());
  Result<ObjectInfo> src = store_->head("src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::unique_ptr<testing::FaultProxy> proxy;
  auto store = StoreThrough(&proxy);
  ASSERT_NE(store, nullptr);
  proxy->HoldNextRequest("PUT /" + bucket_ + "/copied?partNumber=2&");
  Result<ObjectInfo> copied = InternalError("not run");
  std::thread copier([&] { copied = store->copy(*src, "copied", CopyOptions{}); });
  const bool held = testing::WaitFor(60, [&] { return proxy->held_requests() == 1; });
  if (held) {
    EXPECT_TRUE(Put("src", Pattern(2 * kPart + 777, 4)).ok());
  }
  proxy->ReleaseHeldRequest();
  copier.join();
  ASSERT_TRUE(held) << "part 2 of the copy was never asked for";
  ASSERT_FALSE(copied.ok()) << "copied as " << copied->etag.value();
  EXPECT_EQ(copied.status().code(), StatusCode::kPreconditionFailed) << copied.status().ToString();
  EXPECT_EQ(store_->head("copied").status().code(), StatusCode::kNotFound);
  const testing::S3TestServer& server = testing::SharedS3Server();
  std::vector<std::string> list = testing::SignedCurlArgs(server, "");
  list.push_back(server.endpoint + "/" + bucket_ + "?uploads=");
  testing::CommandResult uploads = testing::RunCommand(list);
  ASSERT_EQ(uploads.exit_code, 0) << uploads.err;
  EXPECT_EQ(uploads.out.find("<Key>copied</Key>"), std::string::npos) << uploads.out;
}

// Another client's PUT ?tagging of `key`: the one tag `name`=`value`.
void PutTag(const std::string& bucket, const std::string& key, const std::string& name,
            const std::string& value) {
  const testing::S3TestServer& server = testing::SharedS3Server();
  const std::string body = "<Tagging><TagSet><Tag><Key>" + name + "</Key><Value>" + value +
                           "</Value></Tag></TagSet></Tagging>";
  const auto digest = Md5Of(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(body.data()), body.size()));
  std::vector<std::string> argv = testing::SignedCurlArgs(server, body);
  argv.insert(argv.end(),
              {"-X", "PUT", "-H",
               "Content-MD5: " + Base64(std::span<const uint8_t>(digest.data(), digest.size())),
               "--data-binary", "@-", "-w", "%{http_code}",
               server.endpoint + "/" + bucket + "/" + key + "?tagging="});
  testing::CommandResult r = testing::RunCommand(argv, body);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(r.out.ends_with("200")) << r.out;
}

// The body of GET ?tagging of `key`.
std::string GetTags(const std::string& bucket, const std::string& key) {
  const testing::S3TestServer& server = testing::SharedS3Server();
  std::vector<std::string> argv = testing::SignedCurlArgs(server, "");
  argv.push_back(server.endpoint + "/" + bucket + "/" + key + "?tagging=");
  return testing::RunCommand(argv).out;
}

// A chmod of an object copied in parts keeps its tags, also tags another client set while the
// parts were copied: they are read just before the copy completes, not before it starts.
TEST_F(S3StoreTest, ASelfCopyMadeOfPartsKeepsTagsSetWhileItRan) {
  ASSERT_TRUE(Put("tagged", Pattern(2 * kPart + 777, 5)).ok());
  PutTag(bucket_, "tagged", "stage", "before");
  Result<ObjectInfo> src = store_->head("tagged");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ(src->tag_count, 1u);
  std::unique_ptr<testing::FaultProxy> proxy;
  auto store = StoreThrough(&proxy);
  ASSERT_NE(store, nullptr);
  proxy->HoldNextRequest("PUT /" + bucket_ + "/tagged?partNumber=2&");
  SetAttributesOptions attributes;
  attributes.expected = *src;
  Result<ObjectInfo> changed = InternalError("not run");
  std::thread chmod([&] {
    changed = store->set_attributes("tagged", {{"mode", "33152"}}, attributes);
  });
  const bool held = testing::WaitFor(60, [&] { return proxy->held_requests() == 1; });
  if (held) PutTag(bucket_, "tagged", "stage", "during");
  proxy->ReleaseHeldRequest();
  chmod.join();
  ASSERT_TRUE(held) << "part 2 of the copy was never asked for";
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  const std::string tags = GetTags(bucket_, "tagged");
  EXPECT_NE(tags.find("<Key>stage</Key><Value>during</Value>"), std::string::npos) << tags;
  Result<ObjectInfo> now = store_->head("tagged");
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->metadata["mode"], "33152");
  EXPECT_EQ(now->tag_count, 1u);
}

TEST_F(S3StoreTest, SetAttributesOfAnObjectKnownCurrentIsOneRequestAndStillChecked) {
  S3StoreOptions o = OptionsFor(bucket_);
  Metrics metrics;
  o.metrics = &metrics;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  Result<ObjectInfo> put = Put("attrs", "version one");
  ASSERT_TRUE(put.ok()) << put.status().ToString();

  SetAttributesOptions known;
  known.expected = *put;
  known.source_known_current = true;
  uint64_t before = metrics.http_requests.load();
  Result<ObjectInfo> changed = store->set_attributes("attrs", {{"mode", "33152"}}, known);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(metrics.http_requests.load() - before, 1u);  // the self-copy, no HEAD first
  EXPECT_EQ(changed->etag, put->etag);
  Result<ObjectInfo> head = store->head("attrs");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata["mode"], "33152");

  // Without the flag the object is checked first (RGW ignores x-amz-copy-source-if-match).
  SetAttributesOptions checked;
  checked.expected = *head;
  before = metrics.http_requests.load();
  ASSERT_TRUE(store->set_attributes("attrs", {{"mode", "33188"}}, checked).ok());
  EXPECT_EQ(metrics.http_requests.load() - before, 2u);

  // An object replaced after the caller saw it still fails, by the copy's resulting ETag.
  ASSERT_TRUE(Put("attrs", "version two").ok());
  Result<ObjectInfo> stale = store->set_attributes("attrs", {{"mode", "33261"}}, known);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kPreconditionFailed) << stale.status().ToString();
  // ... and the checked way fails before it touched the object.
  Result<std::string> content = ReadAll(*store, "attrs");
  ASSERT_TRUE(content.ok());
  EXPECT_EQ(*content, "version two");
  EXPECT_EQ(store->set_attributes("attrs", {{"mode", "33261"}}, checked).status().code(),
            StatusCode::kPreconditionFailed);
}

// New metadata replaces the old under MetadataDirective REPLACE, Content-Type included: a
// caller that does not know the object's type (the filesystem never tracks it) must not reset
// another tool's text/html to the default.
TEST_F(S3StoreTest, SetAttributesKeepsTheContentType) {
  MemorySource src(std::string_view("<p>hello</p>"));
  PutOptions put_options;
  put_options.content_type = "text/html";
  Result<ObjectInfo> put = store_->put("page.html", src, put_options);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  SetAttributesOptions set;
  set.expected.key = "page.html";
  set.expected.size = put->size;
  set.expected.etag = put->etag;  // no content type: as Filesystem calls it
  ASSERT_TRUE(store_->set_attributes("page.html", {{"mode", "33152"}}, set).ok());
  Result<ObjectInfo> head = store_->head("page.html");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->metadata["mode"], "33152");
  EXPECT_EQ(head->content_type, "text/html");
}

TEST_F(S3StoreTest, CopyOfASourceKnownCurrentIsOneRequestAndStillChecked) {
  S3StoreOptions o = OptionsFor(bucket_);
  Metrics metrics;
  o.metrics = &metrics;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);
  Result<ObjectInfo> put = Put("src", "version one");
  ASSERT_TRUE(put.ok()) << put.status().ToString();

  CopyOptions known;
  known.source_known_current = true;
  uint64_t before = metrics.http_requests.load();
  Result<ObjectInfo> copied = store->copy(*put, "dst", known);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(metrics.http_requests.load() - before, 1u);  // the COPY, no HEAD of the source
  EXPECT_EQ(copied->etag, put->etag);

  // Without the flag the source is checked first (RGW ignores x-amz-copy-source-if-match).
  before = metrics.http_requests.load();
  ASSERT_TRUE(store->copy(*put, "dst2", CopyOptions()).ok());
  EXPECT_EQ(metrics.http_requests.load() - before, 2u);

  // A source that changed after the caller saw it still fails the copy, by its result's ETag.
  ASSERT_TRUE(Put("src", "version two").ok());
  Result<ObjectInfo> stale = store->copy(*put, "dst3", known);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kPreconditionFailed) << stale.status().ToString();
}

TEST_F(S3StoreTest, CopyOfMultipartObjectReadsBackTheSame) {
  S3StoreOptions o = OptionsFor(bucket_);
  o.copy_part_threshold = 1ull << 30;  // force CopyObject for a multipart source
  auto store = MakeStore(o);
  std::string data = Pattern(kPart + (2 << 20), 3);
  ASSERT_TRUE(Put("mp", data).ok());
  Result<ObjectInfo> src = store->head("mp");
  ASSERT_TRUE(src.ok());
  ASSERT_TRUE(src->etag.is_multipart());
  Result<ObjectInfo> copy = store->copy(*src, "mp-copy", CopyOptions{});
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  // RGW keeps the -N ETag for such a copy; AWS would give a plain MD5. Either is an ETag that
  // the client must report as it is, never as the content MD5 unless it is one.
  EXPECT_FALSE(copy->etag.empty());
  Result<ObjectInfo> head = store->head("mp-copy");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->etag, copy->etag);
  if (copy->etag.is_plain_md5()) {
    EXPECT_EQ(copy->etag, ETag::FromMd5(Md5Of(data)));
  }
  Result<std::string> back = ReadAll(*store, "mp-copy");
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == data);
}

TEST_F(S3StoreTest, RangedReadsAtEdges) {
  std::string data = Pattern(1000, 4);
  ASSERT_TRUE(Put("k", data).ok());
  std::byte one{};
  Result<size_t> first = store_->read("k", 0, std::span<std::byte>(&one, 1), nullptr);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 1u);
  EXPECT_EQ(static_cast<char>(one), data[0]);
  Result<size_t> last = store_->read("k", 999, std::span<std::byte>(&one, 1), nullptr);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, 1u);
  EXPECT_EQ(static_cast<char>(one), data[999]);
  std::vector<std::byte> buf(100);
  Result<size_t> past = store_->read("k", 1000, buf, nullptr);
  ASSERT_TRUE(past.ok()) << past.status().ToString();
  EXPECT_EQ(*past, 0u);
  Result<size_t> straddle = store_->read("k", 950, buf, nullptr);
  ASSERT_TRUE(straddle.ok());
  EXPECT_EQ(*straddle, 50u);
}

TEST_F(S3StoreTest, ARangedReadWhoseReplyFallsShortOfItsContentRangeFails) {
  const std::string data = Pattern(600, 6);
  ASSERT_TRUE(Put("k", data).ok());
  std::unique_ptr<testing::FaultProxy> proxy;
  std::shared_ptr<S3Store> store = StoreThrough(&proxy);
  std::vector<std::byte> buf(900);
  // A reply cut short on its way (a gateway): it says it holds bytes 0-899 of 1,000, and holds
  // the 600 the object has. Taken as the object's end, `cat` would exit 0 with part of a file.
  proxy->AddResponseHeader("GET /" + bucket_ + "/k ", "Content-Range: bytes 0-899/1000");
  Result<size_t> cut = store->read("k", 0, buf, nullptr);
  ASSERT_FALSE(cut.ok()) << "read " << *cut << " bytes as if the object ended there";
  EXPECT_EQ(cut.status().code(), StatusCode::kIoError) << cut.status().ToString();
  EXPECT_NE(cut.status().message().find("cut short"), std::string::npos) << cut.status().ToString();
  // One that does not parse is no range either.
  proxy->AddResponseHeader("GET /" + bucket_ + "/k ", "Content-Range: bytes -0-599/600");
  Result<size_t> garbled = store->read("k", 0, buf, nullptr);
  ASSERT_FALSE(garbled.ok());
  EXPECT_NE(garbled.status().message().find("does not parse"), std::string::npos)
      << garbled.status().ToString();
  // A total the server does not know ("*") leaves the end where the body ends.
  proxy->AddResponseHeader("GET /" + bucket_ + "/k ", "Content-Range: bytes 0-599/*");
  Result<size_t> unknown = store->read("k", 0, buf, nullptr);
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  EXPECT_EQ(*unknown, data.size());
  // The unit in either case.
  proxy->AddResponseHeader("GET /" + bucket_ + "/k ", "Content-Range: Bytes 0-599/600");
  Result<size_t> capital = store->read("k", 0, buf, nullptr);
  ASSERT_TRUE(capital.ok()) << capital.status().ToString();
  EXPECT_EQ(*capital, data.size());
  // A refusal of a range that starts inside the object (416) is no end of it.
  proxy->AddResponseHeader("GET /" + bucket_ + "/k ", "Content-Range: bytes */600", 416);
  Result<size_t> refused = store->read("k", 100, buf, nullptr);
  ASSERT_FALSE(refused.ok()) << "read " << *refused << " bytes at 100 of 600";
  EXPECT_EQ(refused.status().code(), StatusCode::kIoError) << refused.status().ToString();
  // Replies that hold what their Content-Range says still read, up to the object's end.
  proxy->AddResponseHeader("nothing", "", 0);
  Result<size_t> whole = store->read("k", 0, buf, nullptr);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*whole, data.size());
  Result<size_t> tail = store->read("k", 550, buf, nullptr);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(*tail, 50u);
  Result<size_t> end = store->read("k", 600, buf, nullptr);  // the server's own 416
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(*end, 0u);
}

TEST_F(S3StoreTest, AHeadWhoseSizeIsNoNumberFailsSayingSo) {
  ASSERT_TRUE(Put("k", "data").ok());
  std::unique_ptr<testing::FaultProxy> proxy;
  std::shared_ptr<S3Store> store = StoreThrough(&proxy);
  // Past what 64 bits hold: the message said only "stoull".
  proxy->AddResponseHeader("HEAD /" + bucket_ + "/k ", "Content-Length: 99999999999999999999999");
  Result<ObjectInfo> head = store->head("k");
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), StatusCode::kIoError) << head.status().ToString();
  EXPECT_NE(head.status().message().find("Content-Length '99999999999999999999999'"),
            std::string::npos)
      << head.status().ToString();
}

TEST_F(S3StoreTest, IfMatchMismatchIsPreconditionFailed) {
  ASSERT_TRUE(Put("k", "one").ok());
  ETag stale = ETag::FromMd5(Md5Of(std::string_view("other")));
  std::vector<std::byte> buf(10);
  Result<size_t> r = store_->read("k", 0, buf, &stale);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPreconditionFailed) << r.status().ToString();
}

TEST_F(S3StoreTest, WrongSecretIsPermissionDeniedWithClearMessage) {
  S3StoreOptions o = OptionsFor(bucket_);
  o.credentials.secret_key = "not-the-secret";
  auto store = MakeStore(o);
  Result<ObjectInfo> r = store->head("anything");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
  Status check = store->CheckBucket();
  EXPECT_EQ(check.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(check.message().find("denied"), std::string::npos) << check.ToString();
  // The test RGW has STS on, and so answers a wrong secret with a plain AccessDenied, as it
  // answers a policy's refusal: the message names the keys as a cause (where the server says
  // SignatureDoesNotMatch, as the only one).
  EXPECT_NE(check.message().find("access key or secret is wrong"), std::string::npos)
      << check.ToString();
  EXPECT_EQ(check.ToString().find('\n'), std::string::npos);
}

TEST_F(S3StoreTest, MissingBucketIsNotFound) {
  auto store = MakeStore(OptionsFor("no-such-bucket-" + std::to_string(getpid())));
  Status check = store->CheckBucket();
  EXPECT_EQ(check.code(), StatusCode::kNotFound) << check.ToString();
  EXPECT_NE(check.message().find("does not exist"), std::string::npos);
}

TEST_F(S3StoreTest, StoppedServerIsTransientNamingTheEndpoint) {
  S3StoreOptions o = OptionsFor(bucket_);
  int port = testing::FreePort();
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.retry.max_attempts = 2;
  o.retry.base_delay = std::chrono::milliseconds(1);
  Metrics metrics;
  o.metrics = &metrics;
  auto store = MakeStore(o);
  Result<ObjectInfo> r = store->head("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTransient) << r.status().ToString();
  EXPECT_NE(r.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(metrics.retries.load(), 1u);  // retried, then reported; never NotFound
}

TEST_F(S3StoreTest, Injected503sAreRetriedAndSucceed) {
  ASSERT_TRUE(Put("k", "payload").ok());
  testing::FaultProxy proxy("127.0.0.1", testing::SharedS3Server().port());
  proxy.FailNextConnections(3, 503, "SlowDown");
  S3StoreOptions o = OptionsFor(bucket_);
  o.endpoint = proxy.endpoint();
  o.retry.base_delay = std::chrono::milliseconds(1);
  Metrics metrics;
  o.metrics = &metrics;
  auto store = MakeStore(o);
  Result<std::string> back = ReadAll(*store, "k");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, "payload");
  EXPECT_EQ(proxy.failed_connections(), 3);
  EXPECT_EQ(metrics.retries.load(), 3u);
}

TEST_F(S3StoreTest, RetriesGiveUpWithTransient) {
  testing::FaultProxy proxy("127.0.0.1", testing::SharedS3Server().port());
  proxy.FailNextConnections(100, 500, "InternalError");
  S3StoreOptions o = OptionsFor(bucket_);
  o.endpoint = proxy.endpoint();
  o.retry.max_attempts = 3;
  o.retry.base_delay = std::chrono::milliseconds(1);
  auto store = MakeStore(o);
  Result<ObjectInfo> r = store->head("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTransient) << r.status().ToString();
  EXPECT_EQ(proxy.failed_connections(), 3);
}

TEST_F(S3StoreTest, SignedPayloadUploadsToo) {
  S3StoreOptions o = OptionsFor(bucket_);
  o.sign_payload = true;
  auto store = MakeStore(o);
  MemorySource src(std::string_view("signed body"));
  Result<ObjectInfo> put = store->put("signed", src, PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->etag, ETag::FromMd5(Md5Of(std::string_view("signed body"))));
}

TEST_F(S3StoreTest, S3fsMetadataRoundTrips) {
  Metadata meta = {{"mode", "33261"}, {"uid", "1000"}, {"gid", "1000"}, {"mtime", "1700000000"}};
  ASSERT_TRUE(Put("m", "x", meta).ok());
  Result<ObjectInfo> head = store_->head("m");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(WithoutHeaderMetadata(head->metadata), meta);
  // The server's Content-Type rides along, kept for a later copy with new metadata.
  EXPECT_EQ(head->metadata[kContentTypeMetadata], head->content_type);
}

TEST_F(S3StoreTest, RemoveManyAcrossBatches) {
  std::vector<std::string> keys;
  for (int i = 0; i < 1100; ++i) keys.push_back("d/" + std::to_string(i));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < keys.size(); i += 8) {
        if (!Put(keys[i], "x").ok()) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(store_->remove_many(keys).ok());
  ListOptions lo;
  lo.prefix = "d/";
  Result<Listing> after = store_->list(lo);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->objects.empty());
}

TEST_F(S3StoreTest, DotSegmentKeysAreNamesNotPaths) {
  for (const std::string key : {"a/../b", "a/./c", "d/..", "e/."}) {
    ASSERT_TRUE(Put(key, "data of " + key).ok()) << key;
  }
  for (const std::string key : {"a/../b", "a/./c", "d/..", "e/."}) {
    Result<std::string> back = ReadAll(*store_, key);
    ASSERT_TRUE(back.ok()) << key << ": " << back.status().ToString();
    EXPECT_EQ(*back, "data of " + key);
  }
  EXPECT_EQ(store_->head("b").status().code(), StatusCode::kNotFound);
}

// Uploads through a FaultProxy that damages one message on the way. RGW on loopback never
// corrupts a body or reports a wrong ETag, so only this shows that the Content-MD5 the client
// sends and the ETags it checks turn such damage into an error rather than a silent success.
class S3IntegrityTest : public S3StoreTest {
 protected:
  void SetUp() override {
    S3StoreTest::SetUp();
    proxy_ = std::make_unique<testing::FaultProxy>("127.0.0.1", testing::SharedS3Server().port());
    S3StoreOptions o = OptionsFor(bucket_);
    o.endpoint = proxy_->endpoint();
    o.retry.base_delay = std::chrono::milliseconds(1);
    o.metrics = &metrics_;
    proxied_ = MakeStore(o);
    ASSERT_NE(proxied_, nullptr);
  }

  Result<ObjectInfo> PutProxied(const std::string& key, const std::string& data) {
    MemorySource src(data);
    return proxied_->put(key, src, PutOptions{});
  }

  // What RGW itself holds under `key`, asked without the proxy.
  StatusCode StoredCode(const std::string& key) { return store_->head(key).status().code(); }

  Metrics metrics_;
  std::unique_ptr<testing::FaultProxy> proxy_;
  std::shared_ptr<S3Store> proxied_;
};

TEST_F(S3IntegrityTest, CorruptedPutBodyIsRefusedByContentMd5) {
  std::string data = Pattern(100 << 10, 11);
  proxy_->CorruptNextRequestBody("PUT ");
  Result<ObjectInfo> put = PutProxied("k", data);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(proxy_->corrupted_requests(), 1);
  EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << put.status().ToString();
  EXPECT_EQ(put.status().server_code(), "BadDigest") << put.status().ToString();
  // The server refused the bytes it got; sending the same bytes again would not change that.
  EXPECT_EQ(metrics_.retries.load(), 0u);
  EXPECT_EQ(StoredCode("k"), StatusCode::kNotFound);

  // The fault was one request only: the same put through the same proxy now stores the data.
  put = PutProxied("k", data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(proxy_->corrupted_requests(), 1);
  Result<std::string> back = ReadAll(*store_, "k");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
}

TEST_F(S3IntegrityTest, PutWithAWrongETagInTheReplyFails) {
  std::string data = Pattern(100 << 10, 12);
  proxy_->RewriteNextResponseETag("PUT ");
  Result<ObjectInfo> put = PutProxied("k", data);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(proxy_->rewritten_etags(), 1);
  EXPECT_EQ(put.status().code(), StatusCode::kInternal) << put.status().ToString();
  EXPECT_NE(put.status().message().find("does not match the MD5 of the data sent"),
            std::string::npos)
      << put.status().ToString();
  // Only the reply was damaged: RGW holds the right bytes.
  Result<ObjectInfo> head = store_->head("k");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->etag, ETag::FromMd5(Md5Of(data)));
}

// A part is hashed as it is sent and checked by the ETag the server answers (the MD5 of what
// it received). One damaged on the way is sent again, now with its Content-MD5, and the object
// gets the right bytes; the damaged copy is never completed into it.
TEST_F(S3IntegrityTest, APartDamagedOnTheWayIsSentAgainWithItsContentMd5) {
  std::string data = Pattern(kPart + (1 << 20) + 1, 13);  // two parts
  proxy_->CorruptNextRequestBody("PUT ");                 // only the parts are PUTs
  Result<ObjectInfo> put = PutProxied("big", data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(proxy_->corrupted_requests(), 1);
  EXPECT_EQ(metrics_.parts_sent_again.load(), 1u);
  EXPECT_EQ(metrics_.retries.load(), 0u);
  Result<std::string> back = ReadAll(*store_, "big");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == data);
  EXPECT_EQ(store_->head("big")->etag, put->etag);
}

// Where every body is damaged, the part sent again with its Content-MD5 is refused by the server
// (BadDigest), and the upload is aborted, not completed.
TEST_F(S3IntegrityTest, APartDamagedEveryTimeFailsTheUploadWithBadDigest) {
  std::string data = Pattern(kPart + (1 << 20) + 1, 16);
  proxy_->CorruptRequestBodies("PUT ");
  Result<ObjectInfo> put = PutProxied("big", data);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), StatusCode::kInvalidArgument) << put.status().ToString();
  EXPECT_EQ(put.status().server_code(), "BadDigest") << put.status().ToString();
  EXPECT_NE(put.status().message().find("UploadPart"), std::string::npos)
      << put.status().ToString();
  // The server refused the bytes it got; sending the same bytes again would not change that.
  EXPECT_EQ(metrics_.retries.load(), 0u);
  EXPECT_EQ(StoredCode("big"), StatusCode::kNotFound);
}

// A damaged reply looks the same as a damaged body: the part is sent again with its Content-MD5
// and the upload succeeds. Where the second reply is damaged too, the part fails, and its wrong
// ETag never goes into CompleteMultipartUpload (which RGW refuses too, but as if the server had
// lost a part).
TEST_F(S3IntegrityTest, UploadPartWithAWrongETagInTheReplyIsSentAgainThenFails) {
  std::string data = Pattern(kPart + (1 << 20) + 1, 14);
  proxy_->RewriteNextResponseETag("PUT ");
  Result<ObjectInfo> put = PutProxied("once", data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(proxy_->rewritten_etags(), 1);
  EXPECT_EQ(metrics_.parts_sent_again.load(), 1u);
  EXPECT_TRUE(*ReadAll(*store_, "once") == data);

  // One part (an upload session's), so that both damaged replies are that part's.
  Result<std::unique_ptr<Upload>> upload = proxied_->start_upload("twice", {});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  MemorySource source(data);
  proxy_->RewriteNextResponseETag("PUT ", 2);
  Status part = (*upload)->write(0, source, 0, kPart);
  ASSERT_FALSE(part.ok());
  EXPECT_EQ(proxy_->rewritten_etags(), 3);
  EXPECT_EQ(part.code(), StatusCode::kInternal) << part.ToString();
  EXPECT_NE(part.message().find("ETag does not match its MD5"), std::string::npos)
      << part.ToString();
  EXPECT_TRUE((*upload)->abort().ok());
  EXPECT_EQ(StoredCode("twice"), StatusCode::kNotFound);
}

// One reply whose ETag is no MD5 (damaged on the way): the part is sent again with its
// Content-MD5, and later parts are still sent once, checked by their ETags, and sent again if
// damaged. A server whose part ETags are no MD5s even then has every later part carry its
// Content-MD5.
TEST_F(S3IntegrityTest, OneReplyWhoseETagIsNoMd5DoesNotMakePartsCarryContentMd5) {
  const std::string data = Pattern(kPart + (1 << 20) + 1, 18);
  proxy_->RewriteNextResponseETag("PUT ", 1, 'x');
  ASSERT_TRUE(PutProxied("first", data).ok());
  EXPECT_EQ(proxy_->rewritten_etags(), 1);
  EXPECT_EQ(metrics_.parts_sent_again.load(), 1u);
  EXPECT_TRUE(*ReadAll(*store_, "first") == data);

  proxy_->CorruptNextRequestBody("PUT ");
  ReadCountingSource second(data);
  Result<ObjectInfo> put = proxied_->put("second", second, PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(metrics_.parts_sent_again.load(), 2u);
  EXPECT_TRUE(*ReadAll(*store_, "second") == data);

  // One part, both of its replies spoiled: from then on parts are hashed before they are sent.
  Result<std::unique_ptr<Upload>> upload = proxied_->start_upload("third", {});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  MemorySource source(data);
  proxy_->RewriteNextResponseETag("PUT ", 2, 'x');
  ASSERT_TRUE((*upload)->write(0, source, 0, kPart).ok());
  EXPECT_TRUE((*upload)->abort().ok());
  ReadCountingSource fourth(data);
  ASSERT_TRUE(proxied_->put("fourth", fourth, PutOptions{}).ok());
  EXPECT_EQ(fourth.read(), 2 * data.size());
}

// A server that encrypts parts with KMS without being asked answers ETags that are not their
// MD5s: the part sent unhashed is sent again with its Content-MD5, and so is every later part,
// hashed before it is sent (each read twice).
TEST_F(S3IntegrityTest, WhereThePartETagsAreNotMd5sPartsCarryTheirContentMd5) {
  proxy_->AddResponseHeader("PUT ", "x-amz-server-side-encryption: aws:kms");
  const std::string data = Pattern(kPart + (1 << 20) + 1, 17);
  ReadCountingSource first(data);
  Result<ObjectInfo> put = proxied_->put("first", first, PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_GT(first.read(), data.size());
  EXPECT_EQ(metrics_.parts_sent_again.load(), 0u);  // not for damage
  EXPECT_TRUE(*ReadAll(*store_, "first") == data);

  ReadCountingSource second(data);
  put = proxied_->put("second", second, PutOptions{});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(second.read(), 2 * data.size());
  EXPECT_TRUE(*ReadAll(*store_, "second") == data);
}

// RGW answers CompleteMultipartUpload with an empty <ETag>. The upload's ETag is then the one
// its parts make (each part's ETag was checked against its MD5 as it was sent), never a HEAD's
// after it: another writer's object, put between the Complete and that HEAD, made a good upload
// fail. (A server that does send the ETag has it compared with the parts'.)
TEST_F(S3IntegrityTest, MultipartTakesItsETagFromItsPartsWithoutAHead) {
  std::string data = Pattern(kPart + (1 << 20) + 1, 15);
  const uint64_t requests = metrics_.http_requests.load();
  Result<ObjectInfo> put = PutProxied("big", data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  // Create, two parts, Complete: no HEAD.
  EXPECT_EQ(metrics_.http_requests.load() - requests, 4u);
  std::vector<Md5Digest> parts = {Md5Of(std::string_view(data).substr(0, kPart)),
                                  Md5Of(std::string_view(data).substr(kPart))};
  EXPECT_EQ(put->etag, MultipartETag(parts));
  Result<ObjectInfo> head = store_->head("big");
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->etag, MultipartETag(parts));
}

TEST(S3EndpointConfig, BadEndpointsAreRejectedInOneLine) {
  for (const char* ep : {"ftp://127.0.0.1:1", "127.0.0.1:8000", "http://", "http://h:x"}) {
    S3StoreOptions o;
    o.bucket = "bucket";
    o.endpoint = ep;
    auto store = S3Store::Create(o);
    ASSERT_FALSE(store.ok()) << ep;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store.status().ToString().find('\n'), std::string::npos);
  }
}

// What a store tells its journal, in order: "opened KEY ID", "closed KEY ID".
class RecordingJournal : public UploadJournal {
 public:
  Status Opened(std::string_view name, std::string_view upload_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back("opened " + std::string(name) + " " + std::string(upload_id));
    return Status::Ok();
  }
  void Closed(std::string_view name, std::string_view upload_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back("closed " + std::string(name) + " " + std::string(upload_id));
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> events_;
};

// The UploadIds ListMultipartUploads shows under `prefix` in `bucket`.
std::vector<std::string> ListedUploadIds(const std::string& bucket, const std::string& prefix) {
  const testing::S3TestServer& server = testing::SharedS3Server();
  std::vector<std::string> argv = testing::SignedCurlArgs(server, "");
  // curl signs the query as written: a '/' goes encoded, as SigV4 canonicalises it.
  std::string encoded;
  for (char c : prefix) encoded += c == '/' ? std::string("%2F") : std::string(1, c);
  argv.push_back(server.endpoint + "/" + bucket + "?prefix=" + encoded + "&uploads=");
  testing::CommandResult r = testing::RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ListMultipartUploadsResult"), std::string::npos) << r.out;
  std::vector<std::string> ids;
  const std::string open = "<UploadId>", close = "</UploadId>";
  for (size_t at = r.out.find(open); at != std::string::npos; at = r.out.find(open, at)) {
    at += open.size();
    ids.push_back(r.out.substr(at, r.out.find(close, at) - at));
  }
  return ids;
}

TEST_F(S3StoreTest, UploadSessionIsJournaledAndAbortLeavesNoUpload) {
  auto journal = std::make_shared<RecordingJournal>();
  S3StoreOptions o = OptionsFor(bucket_);
  o.journal = journal;
  auto store = MakeStore(o);
  ASSERT_NE(store, nullptr);

  Result<std::unique_ptr<Upload>> aborted = store->start_upload("j/aborted", UploadOptions{});
  ASSERT_TRUE(aborted.ok()) << aborted.status().ToString();
  MemorySource bytes(std::string_view("a short last part"));
  ASSERT_TRUE((*aborted)->write(0, bytes, 0, bytes.size()).ok());
  std::vector<std::string> listed = ListedUploadIds(bucket_, "j/aborted");
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_EQ(journal->events().size(), 1u);
  EXPECT_EQ(journal->events()[0], "opened j/aborted " + listed[0]);
  ASSERT_TRUE((*aborted)->abort().ok());
  EXPECT_TRUE(ListedUploadIds(bucket_, "j/aborted").empty());
  ASSERT_EQ(journal->events().size(), 2u);
  EXPECT_EQ(journal->events()[1], "closed j/aborted " + listed[0]);

  {
    // Dropped without complete(): aborted as well.
    Result<std::unique_ptr<Upload>> dropped = store->start_upload("j/dropped", UploadOptions{});
    ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
    ASSERT_EQ(ListedUploadIds(bucket_, "j/dropped").size(), 1u);
  }
  EXPECT_TRUE(ListedUploadIds(bucket_, "j/dropped").empty());

  Result<std::unique_ptr<Upload>> done = store->start_upload("j/done", UploadOptions{});
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_TRUE((*done)->write(0, bytes, 0, bytes.size()).ok());
  listed = ListedUploadIds(bucket_, "j/done");
  ASSERT_EQ(listed.size(), 1u);
  ASSERT_TRUE((*done)->complete(bytes.size(), PutOptions{}).ok());
  EXPECT_TRUE(ListedUploadIds(bucket_, "j/done").empty());
  const std::vector<std::string> events = journal->events();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2], "opened j/done " + listed[0]);
  EXPECT_EQ(events.back(), "closed j/done " + listed[0]);
  Result<std::string> back = ReadAll(*store, "j/done");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "a short last part");
}

TEST_F(S3StoreTest, AppendingOneMiBToA64MiBObjectMovesOneMiB) {
  Metrics s3_metrics;
  S3StoreOptions o = OptionsFor(bucket_);
  o.metrics = &s3_metrics;
  auto s3 = MakeStore(o);
  ASSERT_NE(s3, nullptr);
  const uint64_t kMiB = 1 << 20;
  const std::string old_data = Pattern(64 * kMiB, 40);
  MemorySource old_source(old_data);
  Result<ObjectInfo> base = s3->put("big", old_source, PutOptions{});
  ASSERT_TRUE(base.ok()) << base.status().ToString();

  Metrics metrics;
  MetricsStore store(s3, metrics);
  const uint64_t hashed = s3_metrics.bytes_hashed.load();
  UploadOptions options;
  options.part_size = 8 * kMiB;  // divides the old object: every old byte is a whole copied part
  Result<std::unique_ptr<Upload>> upload = store.start_upload("big", options);
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_EQ((*upload)->part_size(), 8 * kMiB);
  std::vector<std::thread> copies;
  std::atomic<int> failed{0};
  for (int i = 0; i < 8; ++i) {
    copies.emplace_back([&, i] {
      if (!(*upload)->copy(i * 8 * kMiB, *base, i * 8 * kMiB, 8 * kMiB).ok()) ++failed;
    });
  }
  for (std::thread& t : copies) t.join();
  ASSERT_EQ(failed.load(), 0);
  const std::string tail = Pattern(kMiB, 41);
  MemorySource tail_source(tail);
  ASSERT_TRUE((*upload)->write(64 * kMiB, tail_source, 0, kMiB).ok());
  PutOptions put;
  put.if_match = base->etag;
  Result<ObjectInfo> done = (*upload)->complete(65 * kMiB, put);
  ASSERT_TRUE(done.ok()) << done.status().ToString();

  // Through this machine: the new MiB, sent and hashed once; nothing read.
  EXPECT_EQ(metrics.bytes_written.load(), kMiB);
  EXPECT_EQ(metrics.bytes_read.load(), 0u);
  EXPECT_EQ(s3_metrics.bytes_hashed.load() - hashed, kMiB);
  EXPECT_EQ(metrics.bytes_copied_on_server.load(), 64 * kMiB);
  EXPECT_EQ(metrics.copy_requests.load(), 8u);
  EXPECT_EQ(metrics.put_requests.load(), 1u);
  EXPECT_EQ(metrics.upload_requests.load(), 2u);  // start and complete
  EXPECT_EQ(done->etag.parts(), 9u);

  const std::string new_data = old_data + tail;
  std::vector<Md5Digest> parts;
  for (uint64_t at = 0; at < new_data.size(); at += 8 * kMiB) {
    parts.push_back(Md5Of(std::string_view(new_data).substr(at, 8 * kMiB)));
  }
  EXPECT_EQ(done->etag, MultipartETag(parts));
  Result<std::string> back = ReadAll(*s3, "big");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == new_data);
}

TEST_F(S3StoreTest, BaseReplacedAfterItsCopyFailsTheCompletion) {
  // RGW ignores x-amz-copy-source-if-match: the base is looked at again before completing.
  const std::string old_data = Pattern(kPart, 42);
  Result<ObjectInfo> base = Put("base", old_data);
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  Result<std::unique_ptr<Upload>> upload = store_->start_upload("edited", UploadOptions{});
  ASSERT_TRUE(upload.ok()) << upload.status().ToString();
  ASSERT_EQ((*upload)->part_size(), kPart);
  ASSERT_TRUE((*upload)->copy(0, *base, 0, kPart).ok());
  MemorySource tail(std::string_view("appended"));
  ASSERT_TRUE((*upload)->write(kPart, tail, 0, tail.size()).ok());
  ASSERT_TRUE(Put("base", Pattern(kPart, 43)).ok());
  Result<ObjectInfo> done = (*upload)->complete(kPart + tail.size(), PutOptions{});
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.status().code(), StatusCode::kPreconditionFailed) << done.status().ToString();
  EXPECT_EQ(store_->head("edited").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ListedUploadIds(bucket_, "edited").empty());
}

// A conditional PUT that took effect and lost its reply is retried, and the retry's condition
// fails against the very bytes it stored: it succeeded. The same bytes refused at the first
// attempt are another writer's (two mounts appending one line to one version): refused, so
// that one of the two appends is not lost.
TEST_F(S3IntegrityTest, AConditionalPutWhoseReplyWasLostSucceedsAndAnIdenticalEditDoesNot) {
  Result<ObjectInfo> old = Put("log", "line 1\n");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  PutOptions edit;
  edit.if_match = old->etag;
  proxy_->DropNextResponse("PUT /" + bucket_ + "/log ");
  Result<ObjectInfo> done = proxied_->put("log", MemorySource("line 1\nline 2\n"), edit);
  EXPECT_EQ(proxy_->dropped_responses(), 1);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->etag, ETag::FromMd5(Md5Of("line 1\nline 2\n")));

  Result<ObjectInfo> again = store_->put("log", MemorySource("line 1\nline 2\n"), edit);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kPreconditionFailed) << again.status().ToString();
  // Nor does an error reply before it make it this put's (RGW answers 500 to a PUT racing
  // another of the key, storing nothing): a store with no connection yet, whose first one is
  // answered 500, and whose retry is refused.
  S3StoreOptions o = OptionsFor(bucket_);
  o.endpoint = proxy_->endpoint();
  o.retry.base_delay = std::chrono::milliseconds(1);
  std::shared_ptr<S3Store> fresh = MakeStore(o);
  ASSERT_NE(fresh, nullptr);
  const int failed = proxy_->failed_connections();
  proxy_->FailNextConnections(1, 500, "InternalError");
  again = fresh->put("log", MemorySource("line 1\nline 2\n"), edit);
  EXPECT_EQ(proxy_->failed_connections(), failed + 1);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kPreconditionFailed) << again.status().ToString();
  Result<ObjectInfo> other = store_->put("log", MemorySource("another version"), edit);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kPreconditionFailed) << other.status().ToString();
  EXPECT_EQ(*ReadAll(*store_, "log"), "line 1\nline 2\n");

  // The same for a put asked to make a new object (If-None-Match): its retry finds the name
  // taken by the very bytes it stored.
  PutOptions exclusive;
  exclusive.if_none_match = true;
  proxy_->DropNextResponse("PUT /" + bucket_ + "/new ");
  Result<ObjectInfo> made = proxied_->put("new", MemorySource("a new file"), exclusive);
  EXPECT_EQ(proxy_->dropped_responses(), 2);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(*ReadAll(*store_, "new"), "a new file");
}

// CompleteMultipartUpload took effect and its reply was lost. RGW answers the retry as the
// first; AWS may answer it NoSuchUpload (the proxy plays that with a 404), and a server that
// checks a condition on the completion, 412. The key holds the object these parts make, so the
// put succeeded: failing it set the edit or new file aside as if another client had replaced
// it.
TEST_F(S3IntegrityTest, ACompletionWhoseReplyWasLostSucceedsWhenTheKeyHoldsItsParts) {
  const std::string data = Pattern(kPart + (1 << 20) + 1, 16);
  const ETag expected = MultipartETag({Md5Of(std::string_view(data).substr(0, kPart)),
                                       Md5Of(std::string_view(data).substr(kPart))});
  for (const int retry_status : {0, 404, 412}) {
    for (const bool conditional : {false, true}) {
      SCOPED_TRACE(std::to_string(retry_status) + (conditional ? " If-None-Match" : ""));
      const std::string key = std::to_string(retry_status) + (conditional ? "-new" : "-plain");
      const std::string completion = "POST /" + bucket_ + "/" + key + "?uploadId=";
      proxy_->DropNextResponse(completion);
      if (retry_status != 0) {
        proxy_->AddResponseHeader(completion, "x-amz-request-id: replaced", retry_status);
      }
      const int dropped = proxy_->dropped_responses();
      MemorySource source(data);
      PutOptions options;
      options.if_none_match = conditional;
      Result<ObjectInfo> put = proxied_->put(key, source, options);
      EXPECT_EQ(proxy_->dropped_responses(), dropped + 1);
      ASSERT_TRUE(put.ok()) << put.status().ToString();
      EXPECT_EQ(put->etag, expected);
      Result<std::string> back = ReadAll(*store_, key);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_TRUE(*back == data);
    }
  }
  // Refused at its first attempt, a completion failed, although the key holds the object its
  // parts make (another client's identical edit; here the server's own completion answered
  // 412 by the proxy): the upload is aborted, not left open.
  {
    const std::string completion = "POST /" + bucket_ + "/identical?uploadId=";
    proxy_->AddResponseHeader(completion, "x-amz-request-id: replaced", 412);
    MemorySource source(data);
    PutOptions options;
    options.if_none_match = true;
    Result<ObjectInfo> refused = proxied_->put("identical", source, options);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kPreconditionFailed)
        << refused.status().ToString();
    EXPECT_TRUE(ListedUploadIds(bucket_, "identical").empty());
    proxy_->AddResponseHeader("nothing", "x-amz-request-id: replaced", 0);
  }
  // An upload gone for another reason, under a key that holds another object, still fails:
  // here it is aborted, and the key written, while its completion is on its way.
  proxy_->HoldNextRequest("POST /" + bucket_ + "/taken?uploadId=");
  Result<ObjectInfo> failed = InternalError("not run");
  std::thread put([&] { failed = PutProxied("taken", data); });
  ASSERT_TRUE(testing::WaitFor(30, [&] { return proxy_->held_requests() > 0; }));
  const std::vector<std::string> ids = ListedUploadIds(bucket_, "taken");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_TRUE(store_->AbortUpload("taken", ids[0]).ok());
  ASSERT_TRUE(Put("taken", "another client's").ok());
  proxy_->ReleaseHeldRequest();
  put.join();
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(*ReadAll(*store_, "taken"), "another client's");
}

}  // namespace
}  // namespace objfs
