// The conformance suite over MemoryStore, directly and under a PrefixStore, plus the fake's own
// S3-like strictness that the suite cannot demand of every backend.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/fake/memory_store.h"
#include "backend/md5.h"
#include "backend/prefix_store.h"
#include "tests/conformance/object_store_conformance.h"

namespace objfs {
namespace {

constexpr uint64_t kMultipartThreshold = 1 << 20;
constexpr uint64_t kPartSize = 512 << 10;
constexpr uint64_t kCopyPartThreshold = 2 << 20;

MemoryStoreOptions SmallThresholds() {
  MemoryStoreOptions options;
  options.multipart_threshold = kMultipartThreshold;
  options.part_size = kPartSize;
  options.copy_part_threshold = kCopyPartThreshold;
  return options;
}

void PutRaw(ObjectStore& store, std::string_view key, std::string_view data) {
  MemorySource source(data);
  ASSERT_TRUE(store.put(key, source, PutOptions{}).ok()) << key;
}

ConformanceBackend MemoryBackend() {
  return {"Memory", [] { return std::make_shared<MemoryStore>(SmallThresholds()); },
          kMultipartThreshold, kPartSize, kCopyPartThreshold};
}

// Keys next to and around the prefix that must never show through the PrefixStore.
ConformanceBackend PrefixedMemoryBackend() {
  return {"PrefixedMemory",
          [] {
            auto memory = std::make_shared<MemoryStore>(SmallThresholds());
            for (const char* decoy : {"pre/fix", "pre/fiw/a", "pre/fix0", "pre/fiz/b", "zzz"}) {
              PutRaw(*memory, decoy, "decoy");
            }
            return std::make_shared<PrefixStore>(memory, "pre/fix/");
          },
          kMultipartThreshold, kPartSize, kCopyPartThreshold};
}

// The fake in its SFTP-like personality (versions as ETags, a native rename, attributes set in
// place, owners the server's), as the filesystem's model test runs it.
ConformanceBackend SftpLikeMemoryBackend() {
  return {"SftpLikeMemory",
          [] {
            MemoryStoreOptions options;
            options.native_etags = false;
            options.native_rename = true;
            options.attributes_by_copy = false;
            options.stores_owner = false;
            return std::make_shared<MemoryStore>(options);
          },
          0, 0, 0};  // no multipart ETags without native ETags
}

INSTANTIATE_TEST_SUITE_P(Fake, ObjectStoreConformance,
                         ::testing::Values(MemoryBackend(), PrefixedMemoryBackend(),
                                           SftpLikeMemoryBackend()),
                         ConformanceBackendName);

class MemoryStoreTest : public ::testing::Test {
 protected:
  Result<ObjectInfo> Put(std::string_view key, std::string_view data,
                         const PutOptions& options = {}) {
    MemorySource source(data);
    return store_.put(key, source, options);
  }

  MemoryStore store_{SmallThresholds()};
};

TEST_F(MemoryStoreTest, RejectsEmptyAndOverlongKeys) {
  EXPECT_EQ(Put("", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Put(std::string(1025, 'k'), "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Put(std::string(1024, 'k'), "x").ok());
  EXPECT_EQ(store_.head("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.remove("").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.remove_many({"ok", ""}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_.object_count(), 1u);
}

TEST_F(MemoryStoreTest, MultipartETagIsOverPartDigests) {
  // 1 MiB + 1 byte: above the threshold, three parts of at most 512 KiB.
  std::string data(kMultipartThreshold + 1, 'm');
  Result<ObjectInfo> put = Put("mp", data);
  ASSERT_TRUE(put.ok());
  std::string_view view(data);
  ETag expected =
      MultipartETag({Md5Of(view.substr(0, kPartSize)), Md5Of(view.substr(kPartSize, kPartSize)),
                     Md5Of(view.substr(2 * kPartSize))});
  EXPECT_EQ(put->etag, expected);
  EXPECT_EQ(put->etag.parts(), 3u);

  // At the threshold exactly: a plain MD5.
  std::string at(kMultipartThreshold, 'p');
  Result<ObjectInfo> plain = Put("plain", at);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->etag, ETag::FromMd5(Md5Of(at)));
}

TEST_F(MemoryStoreTest, CopyETagFollowsCopyPartThreshold) {
  std::string small(kCopyPartThreshold, 's');
  ASSERT_TRUE(Put("small", small).ok());
  Result<ObjectInfo> small_src = store_.head("small");
  ASSERT_TRUE(small_src.ok());
  ASSERT_TRUE(small_src->etag.is_multipart());  // put above the multipart threshold
  Result<ObjectInfo> small_copy = store_.copy(*small_src, "small-copy", CopyOptions{});
  ASSERT_TRUE(small_copy.ok());
  EXPECT_EQ(small_copy->etag, small_src->etag);

  std::string big(kCopyPartThreshold + 1, 'b');
  ASSERT_TRUE(Put("big", big).ok());
  Result<ObjectInfo> big_src = store_.head("big");
  ASSERT_TRUE(big_src.ok());
  Result<ObjectInfo> big_copy = store_.copy(*big_src, "big-copy", CopyOptions{});
  ASSERT_TRUE(big_copy.ok());
  std::string_view view(big);
  std::vector<Md5Digest> parts;
  for (size_t off = 0; off < view.size(); off += kPartSize) {
    parts.push_back(Md5Of(view.substr(off, kPartSize)));
  }
  EXPECT_EQ(big_copy->etag, MultipartETag(parts));
  EXPECT_EQ(store_.contents("big-copy"), big);
}

TEST_F(MemoryStoreTest, SelfCopyWithoutNewMetadataIsRejected) {
  ASSERT_TRUE(Put("self", "data").ok());
  Result<ObjectInfo> src = store_.head("self");
  ASSERT_TRUE(src.ok());
  EXPECT_EQ(store_.copy(*src, "self", CopyOptions{}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(MemoryStoreTest, IfMatchOnMissingObjectFails) {
  PutOptions options;
  options.if_match = ETag::FromMd5(Md5Of("x"));
  EXPECT_EQ(Put("absent", "x", options).status().code(), StatusCode::kPreconditionFailed);
  EXPECT_EQ(store_.object_count(), 0u);
}

TEST_F(MemoryStoreTest, MtimesIncreaseAndCanBeSet) {
  Result<ObjectInfo> first = Put("t1", "a");
  Result<ObjectInfo> second = Put("t2", "b");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_GT(second->mtime_ns, first->mtime_ns);
  store_.set_mtime("t1", 1234);
  Result<ObjectInfo> head = store_.head("t1");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->mtime_ns, 1234);
}

TEST_F(MemoryStoreTest, MaxKeysPerPageCapsListing) {
  MemoryStoreOptions options;
  options.max_keys_per_page = 2;
  MemoryStore store(options);
  for (const char* key : {"a", "b", "c"}) {
    MemorySource source(std::string_view("x"));
    ASSERT_TRUE(store.put(key, source, PutOptions{}).ok());
  }
  Result<Listing> page = store.list(ListOptions{});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->objects.size(), 2u);
  EXPECT_TRUE(page->truncated());
}

TEST_F(MemoryStoreTest, ListingPageEndingOnCommonPrefixResumesAfterIt) {
  for (const char* key : {"d/1", "d/2", "d/3", "e"}) ASSERT_TRUE(Put(key, "x").ok());
  ListOptions options;
  options.delimiter = "/";
  options.max_keys = 1;
  Result<Listing> first = store_.list(options);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->common_prefixes, std::vector<std::string>{"d/"});
  ASSERT_TRUE(first->truncated());
  options.continuation_token = first->next_token;
  Result<Listing> second = store_.list(options);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->objects.size(), 1u);
  EXPECT_EQ(second->objects[0].key, "e");
  EXPECT_TRUE(second->common_prefixes.empty());
  EXPECT_FALSE(second->truncated());
}

// As S3 would list them: a session the caller aborts, drops or completes is gone.
TEST_F(MemoryStoreTest, UploadSessionsInProgressEndWithAbortDropAndComplete) {
  MemorySource bytes(std::string_view("bytes"));
  Result<std::unique_ptr<Upload>> aborted = store_.start_upload("a", UploadOptions{});
  ASSERT_TRUE(aborted.ok());
  ASSERT_TRUE((*aborted)->write(0, bytes, 0, bytes.size()).ok());
  {
    Result<std::unique_ptr<Upload>> dropped = store_.start_upload("b", UploadOptions{});
    ASSERT_TRUE(dropped.ok());
    EXPECT_EQ(store_.uploads_in_progress(), 2);
  }
  EXPECT_EQ(store_.uploads_in_progress(), 1);
  ASSERT_TRUE((*aborted)->abort().ok());
  EXPECT_EQ(store_.uploads_in_progress(), 0);
  Result<std::unique_ptr<Upload>> done = store_.start_upload("c", UploadOptions{});
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE((*done)->write(0, bytes, 0, bytes.size()).ok());
  EXPECT_EQ(store_.uploads_in_progress(), 1);
  ASSERT_TRUE((*done)->complete(bytes.size(), PutOptions{}).ok());
  EXPECT_EQ(store_.uploads_in_progress(), 0);
  EXPECT_EQ(store_.contents("c"), "bytes");
  EXPECT_EQ(store_.object_count(), 1u);
}

// A store without sessions or without copies of ranges says so, and refuses them plainly.
TEST(MemoryStoreUploadTest, SessionsAndRangeCopiesCanBeTurnedOff) {
  MemoryStoreOptions without_sessions;
  without_sessions.upload_sessions = false;
  MemoryStore plain(without_sessions);
  EXPECT_FALSE(plain.capabilities().upload_sessions);
  EXPECT_EQ(plain.start_upload("k", UploadOptions{}).status().code(), StatusCode::kUnsupported);

  MemoryStoreOptions without_copies;
  without_copies.copy_ranges = false;
  MemoryStore store(without_copies);
  EXPECT_TRUE(store.capabilities().upload_sessions);
  EXPECT_FALSE(store.capabilities().copy_ranges);
  MemorySource bytes(std::string_view("base"));
  Result<ObjectInfo> base = store.put("base", bytes, PutOptions{});
  ASSERT_TRUE(base.ok());
  Result<std::unique_ptr<Upload>> upload = store.start_upload("k", UploadOptions{});
  ASSERT_TRUE(upload.ok());
  EXPECT_EQ((*upload)->copy(0, *base, 0, 4).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace objfs
