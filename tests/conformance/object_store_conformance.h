// The behaviour every ObjectStore must show, as a value-parameterised GoogleTest suite.
//
// The layers above the backends rely on these properties (exact listings, ETags that predict
// copies, conditional writes); the in-memory fake passes the same suite as the S3 and SFTP
// clients, so tests written over the fake mean something for the real stores. The suite asserts
// only what a strict S3 server guarantees and the ObjectStore contract promises.
//
// A store without native ETags (capabilities().native_etags false: SFTP) reports versions, not
// content ETags, from head() and list(); its put() still returns the MD5 of what it wrote. For
// such a store the suite checks preconditions against the ETag head() reports, and checks that
// any plain MD5 it reports is the MD5 of the content (ExpectHonestETag), instead of requiring
// that head() repeats the ETag of the put or copy. Everything is strict for native stores.
//
// Include this header from exactly one .cc of a test binary and instantiate it there:
//   INSTANTIATE_TEST_SUITE_P(Memory, ObjectStoreConformance, ::testing::Values(backend),
//                            ConformanceBackendName);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/md5.h"
#include "backend/object_store.h"

namespace objfs {

struct ConformanceBackend {
  std::string name;
  // A fresh, empty store (a new bucket or directory) for each test.
  std::function<std::shared_ptr<ObjectStore>()> make_store;
  uint64_t multipart_threshold = 0;  // put() above this size is multipart (0: never)
  uint64_t part_size = 0;
  uint64_t copy_part_threshold = 0;  // copy() above this size is by parts (0: never)
  // What a store over a directory tree (SFTP) cannot express, and must refuse instead:
  bool empty_key_segments = true;    // "a//b" is a key (false: InvalidArgument)
  size_t max_key_segment_bytes = 0;  // longest '/'-separated part (0: unlimited; else NameTooLong)
  bool key_may_also_be_a_prefix = true;  // "k" and "k/a" may both exist
  // False: the metadata head() reports is the file's attributes (mode, uid, gid, mtime), and
  // there is no content type (SFTP).
  bool stores_metadata = true;
  // True: the marker "d/" is the directory "d" itself: it holds no data, and a directory made
  // by a put below it stays when its keys are removed, listed as its marker once empty (SFTP).
  bool directories_are_real = false;
};

// Test names and failure messages show the backend by its name.
inline void PrintTo(const ConformanceBackend& backend, std::ostream* os) { *os << backend.name; }

// For INSTANTIATE_TEST_SUITE_P: names each instantiation after its backend.
inline std::string ConformanceBackendName(
    const ::testing::TestParamInfo<ConformanceBackend>& info) {
  return info.param.name;
}

class ObjectStoreConformance : public ::testing::TestWithParam<ConformanceBackend> {
 protected:
  void SetUp() override {
    store_ = GetParam().make_store();
    ASSERT_NE(store_, nullptr);
  }

  ObjectStore& store() { return *store_; }
  bool native_etags() { return store_->capabilities().native_etags; }
  bool stores_metadata() const { return GetParam().stores_metadata; }
  bool directories_are_real() const { return GetParam().directories_are_real; }
  // ListKeys() once every key was removed: nothing, or only directory markers when
  // directories are real.
  void ExpectNothingListed() {
    for (const std::string& key : ListKeys()) {
      EXPECT_TRUE(directories_are_real() && key.ends_with('/')) << "still listed: " << key;
    }
  }

  // A store may report an ETag that is no content MD5, but a plain MD5 must be the content's.
  static void ExpectHonestETag(const ETag& etag, std::string_view data) {
    if (etag.is_plain_md5()) {
      EXPECT_EQ(etag.value(), HexMd5(Md5Of(data)));
    }
  }

  // `got` is what head() reports after a write of `data` with `metadata` whose ETag was `want`.
  void ExpectWritten(const ObjectInfo& got, const ETag& want, std::string_view data,
                     const Metadata& metadata) {
    if (native_etags()) {
      EXPECT_EQ(got.etag, want);
    } else {
      EXPECT_FALSE(got.etag.empty());  // a version, at least
      ExpectHonestETag(got.etag, data);
    }
    if (stores_metadata()) {
      EXPECT_EQ(WithoutHeaderMetadata(got.metadata), metadata);
    } else if (metadata.count("mode")) {
      EXPECT_EQ(got.metadata.count("mode") ? got.metadata.at("mode") : "", metadata.at("mode"));
    }
  }

  // Deterministic, non-repeating-looking content of `size` bytes.
  static std::string Pattern(size_t size, uint32_t seed = 1) {
    std::string out(size, '\0');
    uint32_t x = seed * 2654435761u + 12345u;
    for (char& c : out) {
      x = x * 1664525u + 1013904223u;
      c = static_cast<char>(x >> 24);
    }
    return out;
  }

  Result<ObjectInfo> Put(std::string_view key, std::string_view data,
                         const PutOptions& options = {}) {
    MemorySource source(data);
    return store().put(key, source, options);
  }

  // Up to `length` bytes at `offset`.
  Result<std::string> ReadRange(std::string_view key, uint64_t offset, size_t length,
                                const ETag* if_match = nullptr) {
    std::string out(length, '\0');
    std::span<std::byte> buf(reinterpret_cast<std::byte*>(out.data()), out.size());
    OBJFS_ASSIGN_OR_RETURN(size_t n, store().read(key, offset, buf, if_match));
    if (n > length) return InternalError("read returned more bytes than asked for");
    out.resize(n);
    return out;
  }

  // Every page of a listing, in order.
  Result<std::vector<Listing>> ListAll(ListOptions options) {
    std::vector<Listing> pages;
    for (;;) {
      OBJFS_ASSIGN_OR_RETURN(Listing page, store().list(options));
      pages.push_back(std::move(page));
      if (!pages.back().truncated()) return pages;
      if (pages.size() > 100000) return InternalError("listing does not end");
      options.continuation_token = pages.back().next_token;
    }
  }

  // The object keys of a complete recursive listing under `prefix`.
  std::vector<std::string> ListKeys(const std::string& prefix = "") {
    ListOptions options;
    options.prefix = prefix;
    Result<std::vector<Listing>> pages = ListAll(options);
    EXPECT_TRUE(pages.ok()) << pages.status().ToString();
    std::vector<std::string> keys;
    if (!pages.ok()) return keys;
    for (const Listing& page : *pages) {
      for (const ObjectInfo& object : page.objects) keys.push_back(object.key);
    }
    return keys;
  }

  static uint64_t Ceil(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

  // Runs fn(i) for i in [0, n) on `threads` threads.
  static void ParallelFor(int n, int threads, const std::function<void(int)>& fn) {
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        for (int i = next++; i < n; i = next++) fn(i);
      });
    }
    for (std::thread& worker : workers) worker.join();
  }

  std::shared_ptr<ObjectStore> store_;
};

inline Status StatusOf(const Status& status) { return status; }
template <typename T>
Status StatusOf(const Result<T>& result) {
  return result.status();
}

// Asserts that a Status or Result is ok, printing the error otherwise.
#define OBJFS_CONFORMANCE_OK(expr)                                                              \
  do {                                                                                          \
    const ::objfs::Status objfs_conformance_s_ = ::objfs::StatusOf(expr);                       \
    ASSERT_TRUE(objfs_conformance_s_.ok()) << #expr << ": " << objfs_conformance_s_.ToString(); \
  } while (0)

TEST_P(ObjectStoreConformance, HeadOfMissingKeyIsNotFound) {
  Result<ObjectInfo> info = store().head("no/such/key");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound) << info.status().ToString();
}

TEST_P(ObjectStoreConformance, PutHeadReadRoundTrip) {
  const std::string data = Pattern(10000);
  PutOptions options;
  options.metadata = {{"mode", "33188"}, {"uid", "1000"}, {"mtime", "1700000000.5"}};
  options.content_type = "text/plain";
  Result<ObjectInfo> put = Put("dir/file.txt", data, options);
  OBJFS_CONFORMANCE_OK(put);
  EXPECT_EQ(put->key, "dir/file.txt");
  EXPECT_EQ(put->size, data.size());
  EXPECT_FALSE(put->etag.empty());

  Result<ObjectInfo> head = store().head("dir/file.txt");
  OBJFS_CONFORMANCE_OK(head);
  EXPECT_EQ(head->key, "dir/file.txt");
  EXPECT_EQ(head->size, data.size());
  ExpectWritten(*head, put->etag, data, options.metadata);
  if (stores_metadata()) {
    EXPECT_EQ(head->content_type, "text/plain");
  } else {
    EXPECT_EQ(head->metadata["mtime"], "1700000000");
  }
  EXPECT_TRUE(head->has_metadata);
  EXPECT_GT(head->mtime_ns, 0);

  Result<std::string> read = ReadAll(store(), "dir/file.txt");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data);
}

TEST_P(ObjectStoreConformance, PlainETagIsMd5OfContent) {
  const std::string data = Pattern(4096, 7);
  Result<ObjectInfo> put = Put("md5", data);
  OBJFS_CONFORMANCE_OK(put);
  EXPECT_EQ(put->etag.kind(), ETag::Kind::kPlainMd5) << put->etag.value();
  EXPECT_EQ(put->etag.value(), HexMd5(Md5Of(data)));
  Result<ObjectInfo> head = store().head("md5");
  OBJFS_CONFORMANCE_OK(head);
  if (native_etags()) {
    EXPECT_EQ(head->etag.value(), HexMd5(Md5Of(data)));
  }
  ExpectHonestETag(head->etag, data);
}

TEST_P(ObjectStoreConformance, EmptyObject) {
  OBJFS_CONFORMANCE_OK(Put("empty", ""));
  Result<ObjectInfo> head = store().head("empty");
  OBJFS_CONFORMANCE_OK(head);
  EXPECT_EQ(head->size, 0u);
  if (native_etags()) {
    EXPECT_EQ(head->etag.value(), "d41d8cd98f00b204e9800998ecf8427e");
  }
  ExpectHonestETag(head->etag, "");
  Result<std::string> read = ReadRange("empty", 0, 100);
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_EQ(*read, "");
}

TEST_P(ObjectStoreConformance, RangedReads) {
  const std::string data = Pattern(1000, 3);
  OBJFS_CONFORMANCE_OK(Put("ranged", data));

  Result<std::string> first = ReadRange("ranged", 0, 1);
  OBJFS_CONFORMANCE_OK(first);
  EXPECT_EQ(*first, data.substr(0, 1));

  Result<std::string> last = ReadRange("ranged", 999, 1);
  OBJFS_CONFORMANCE_OK(last);
  EXPECT_EQ(*last, data.substr(999, 1));

  Result<std::string> middle = ReadRange("ranged", 100, 300);
  OBJFS_CONFORMANCE_OK(middle);
  EXPECT_EQ(*middle, data.substr(100, 300));

  Result<std::string> straddling = ReadRange("ranged", 900, 500);
  OBJFS_CONFORMANCE_OK(straddling);
  EXPECT_EQ(straddling->size(), 100u);
  EXPECT_EQ(*straddling, data.substr(900));

  Result<std::string> at_end = ReadRange("ranged", 1000, 10);
  OBJFS_CONFORMANCE_OK(at_end);
  EXPECT_EQ(at_end->size(), 0u);

  Result<std::string> past_end = ReadRange("ranged", 5000, 10);
  OBJFS_CONFORMANCE_OK(past_end);
  EXPECT_EQ(past_end->size(), 0u);
}

TEST_P(ObjectStoreConformance, ReadIfMatch) {
  const std::string data = Pattern(100, 4);
  Result<ObjectInfo> put = Put("conditional", data);
  OBJFS_CONFORMANCE_OK(put);
  // Without native ETags, the version head() reports is what If-Match checks.
  Result<ObjectInfo> head = store().head("conditional");
  OBJFS_CONFORMANCE_OK(head);
  const ETag current = native_etags() ? put->etag : head->etag;

  Result<std::string> matching = ReadRange("conditional", 0, 100, &current);
  OBJFS_CONFORMANCE_OK(matching);
  EXPECT_EQ(*matching, data);

  ETag wrong = ETag::FromMd5(Md5Of("something else"));
  Result<std::string> mismatched = ReadRange("conditional", 0, 100, &wrong);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_EQ(mismatched.status().code(), StatusCode::kPreconditionFailed)
      << mismatched.status().ToString();
}

TEST_P(ObjectStoreConformance, ReadOfMissingKeyIsNotFound) {
  Result<std::string> read = ReadRange("missing", 0, 10);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound) << read.status().ToString();
}

TEST_P(ObjectStoreConformance, LargePut) {
  const ConformanceBackend& backend = GetParam();
  const uint64_t size = backend.multipart_threshold > 0
                            ? backend.multipart_threshold + backend.part_size / 2 + 1
                            : (3u << 20) + 1;
  const std::string data = Pattern(size, 5);
  Result<ObjectInfo> put = Put("large", data);
  OBJFS_CONFORMANCE_OK(put);
  EXPECT_EQ(put->size, size);
  if (backend.multipart_threshold > 0) {
    EXPECT_EQ(put->etag.kind(), ETag::Kind::kMultipart) << put->etag.value();
    EXPECT_EQ(put->etag.parts(), Ceil(size, backend.part_size));
  } else {
    EXPECT_NE(put->etag.kind(), ETag::Kind::kMultipart) << put->etag.value();
  }
  Result<ObjectInfo> head = store().head("large");
  OBJFS_CONFORMANCE_OK(head);
  ExpectWritten(*head, put->etag, data, {});
  EXPECT_EQ(head->size, size);
  Result<std::string> read = ReadAll(store(), "large");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data) << "content of the large object differs";
}

TEST_P(ObjectStoreConformance, PutIfNoneMatch) {
  PutOptions exclusive;
  exclusive.if_none_match = true;
  OBJFS_CONFORMANCE_OK(Put("exclusive", "first", exclusive));

  Result<ObjectInfo> again = Put("exclusive", "second", exclusive);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.status().code() == StatusCode::kPreconditionFailed ||
              again.status().code() == StatusCode::kAlreadyExists)
      << again.status().ToString();
  Result<std::string> read = ReadAll(store(), "exclusive");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_EQ(*read, "first");
}

TEST_P(ObjectStoreConformance, PutIfMatch) {
  Result<ObjectInfo> original = Put("guarded", "original");
  OBJFS_CONFORMANCE_OK(original);
  Result<ObjectInfo> before = store().head("guarded");
  OBJFS_CONFORMANCE_OK(before);

  PutOptions stale;
  stale.if_match = ETag::FromMd5(Md5Of("some other version"));
  Result<ObjectInfo> rejected = Put("guarded", "replacement", stale);
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), StatusCode::kPreconditionFailed)
      << rejected.status().ToString();
  Result<std::string> intact = ReadAll(store(), "guarded");
  OBJFS_CONFORMANCE_OK(intact);
  EXPECT_EQ(*intact, "original");
  Result<ObjectInfo> head = store().head("guarded");
  OBJFS_CONFORMANCE_OK(head);
  EXPECT_EQ(head->etag, before->etag);
  if (native_etags()) {
    EXPECT_EQ(head->etag, original->etag);
  }

  PutOptions current;
  current.if_match = native_etags() ? original->etag : before->etag;
  OBJFS_CONFORMANCE_OK(Put("guarded", "replacement", current));
  Result<std::string> replaced = ReadAll(store(), "guarded");
  OBJFS_CONFORMANCE_OK(replaced);
  EXPECT_EQ(*replaced, "replacement");
}

TEST_P(ObjectStoreConformance, OverwriteReplacesContentAndETag) {
  Result<ObjectInfo> first = Put("overwritten", "version one");
  OBJFS_CONFORMANCE_OK(first);
  Result<ObjectInfo> second = Put("overwritten", "version two, longer");
  OBJFS_CONFORMANCE_OK(second);
  EXPECT_NE(first->etag, second->etag);

  Result<ObjectInfo> head = store().head("overwritten");
  OBJFS_CONFORMANCE_OK(head);
  ExpectWritten(*head, second->etag, "version two, longer", {});
  EXPECT_EQ(head->size, std::string_view("version two, longer").size());
  Result<std::string> read = ReadAll(store(), "overwritten");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_EQ(*read, "version two, longer");
}

TEST_P(ObjectStoreConformance, CopyKeepsMetadataAndPlainETag) {
  const std::string data = Pattern(5000, 8);
  PutOptions options;
  options.metadata = {{"mode", "33261"}, {"gid", "100"}};
  options.content_type = "application/x-test";
  OBJFS_CONFORMANCE_OK(Put("src/file", data, options));
  Result<ObjectInfo> src = store().head("src/file");
  OBJFS_CONFORMANCE_OK(src);
  if (native_etags()) {
    ASSERT_TRUE(src->etag.is_plain_md5()) << src->etag.value();
  }

  Result<ObjectInfo> copied = store().copy(*src, "dst/file", CopyOptions{});
  OBJFS_CONFORMANCE_OK(copied);
  EXPECT_EQ(copied->key, "dst/file");
  EXPECT_EQ(copied->size, data.size());
  if (native_etags()) {
    EXPECT_EQ(copied->etag, src->etag);
  }
  ExpectHonestETag(copied->etag, data);

  Result<ObjectInfo> head = store().head("dst/file");
  OBJFS_CONFORMANCE_OK(head);
  ExpectWritten(*head, src->etag, data, options.metadata);
  if (stores_metadata()) {
    EXPECT_EQ(head->content_type, "application/x-test");
  }
  Result<std::string> read = ReadAll(store(), "dst/file");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data);
  // The source is untouched.
  Result<std::string> source = ReadAll(store(), "src/file");
  OBJFS_CONFORMANCE_OK(source);
  EXPECT_TRUE(*source == data);
}

TEST_P(ObjectStoreConformance, CopyReplacesMetadata) {
  const std::string data = Pattern(3000, 9);
  PutOptions options;
  options.metadata = {{"mode", "33188"}, {"uid", "1"}};
  OBJFS_CONFORMANCE_OK(Put("original", data, options));
  Result<ObjectInfo> src = store().head("original");
  OBJFS_CONFORMANCE_OK(src);

  CopyOptions replace;
  replace.replace_metadata = Metadata{{"mode", "33152"}};
  replace.content_type = "text/x-replaced";
  OBJFS_CONFORMANCE_OK(store().copy(*src, "replaced", replace));
  Result<ObjectInfo> head = store().head("replaced");
  OBJFS_CONFORMANCE_OK(head);
  ExpectWritten(*head, src->etag, data, Metadata{{"mode", "33152"}});
  if (stores_metadata()) {
    EXPECT_EQ(head->content_type, "text/x-replaced");
  }
  Result<std::string> read = ReadAll(store(), "replaced");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data);
}

TEST_P(ObjectStoreConformance, SetAttributesReplacesMetadataKeepsContent) {
  const std::string data = Pattern(2000, 10);
  PutOptions options;
  options.metadata = {{"mode", "33188"}};
  options.content_type = "application/x-test";
  OBJFS_CONFORMANCE_OK(Put("chmod-me", data, options));
  Result<ObjectInfo> src = store().head("chmod-me");
  OBJFS_CONFORMANCE_OK(src);

  SetAttributesOptions set;
  set.expected = *src;
  const Metadata wanted{{"mode", "33261"}, {"uid", "42"}};
  Result<ObjectInfo> changed = store().set_attributes("chmod-me", wanted, set);
  OBJFS_CONFORMANCE_OK(changed);
  EXPECT_EQ(changed->key, "chmod-me");
  EXPECT_EQ(changed->size, data.size());
  if (native_etags()) {
    EXPECT_EQ(changed->etag, src->etag) << "a plain-MD5 ETag stays: the bytes are the same";
  }
  ExpectHonestETag(changed->etag, data);

  Result<ObjectInfo> head = store().head("chmod-me");
  OBJFS_CONFORMANCE_OK(head);
  ExpectWritten(*head, src->etag, data, wanted);
  EXPECT_EQ(head->size, data.size());
  if (stores_metadata()) {
    EXPECT_EQ(head->content_type, "application/x-test") << "the content type stays";
  }
  Result<std::string> read = ReadAll(store(), "chmod-me");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data);

  // Again from what the first call returned, with a new content type.
  set.expected = *changed;
  set.content_type = "text/x-replaced";
  OBJFS_CONFORMANCE_OK(store().set_attributes("chmod-me", {{"mode", "33152"}}, set));
  head = store().head("chmod-me");
  OBJFS_CONFORMANCE_OK(head);
  ExpectWritten(*head, src->etag, data, {{"mode", "33152"}});
  if (stores_metadata()) {
    EXPECT_EQ(head->content_type, "text/x-replaced");
  }
}

TEST_P(ObjectStoreConformance, SetAttributesOfALargeObjectKeepsContent) {
  const ConformanceBackend& backend = GetParam();
  if (backend.copy_part_threshold == 0) GTEST_SKIP() << "no copy in parts";
  const std::string data = Pattern(backend.copy_part_threshold + 1, 12);
  PutOptions options;
  options.metadata = {{"mode", "33188"}};
  OBJFS_CONFORMANCE_OK(Put("big/chmod-me", data, options));
  Result<ObjectInfo> src = store().head("big/chmod-me");
  OBJFS_CONFORMANCE_OK(src);
  SetAttributesOptions set;
  set.expected = *src;
  Result<ObjectInfo> changed = store().set_attributes("big/chmod-me", {{"mode", "33261"}}, set);
  OBJFS_CONFORMANCE_OK(changed);
  EXPECT_EQ(changed->size, data.size());
  Result<ObjectInfo> head = store().head("big/chmod-me");
  OBJFS_CONFORMANCE_OK(head);
  EXPECT_EQ(head->etag, changed->etag);
  EXPECT_EQ(head->size, data.size());
  EXPECT_EQ(head->metadata.count("mode") ? head->metadata.at("mode") : "", "33261");
  Result<std::string> read = ReadAll(store(), "big/chmod-me");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data);
}

TEST_P(ObjectStoreConformance, SetAttributesOfAChangedObjectFails) {
  PutOptions options;
  options.metadata = {{"mode", "33188"}};
  Result<ObjectInfo> old_version = Put("changing", "old content", options);
  OBJFS_CONFORMANCE_OK(old_version);
  OBJFS_CONFORMANCE_OK(Put("changing", "the new content", options));

  SetAttributesOptions set;
  set.expected = *old_version;
  Result<ObjectInfo> changed = store().set_attributes("changing", {{"mode", "33152"}}, set);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), StatusCode::kPreconditionFailed)
      << changed.status().ToString();
  Result<ObjectInfo> head = store().head("changing");
  OBJFS_CONFORMANCE_OK(head);
  EXPECT_EQ(head->metadata.count("mode") ? head->metadata.at("mode") : "", "33188");
  Result<std::string> read = ReadAll(store(), "changing");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_EQ(*read, "the new content");
}

TEST_P(ObjectStoreConformance, SetAttributesOfAMissingObjectIsNotFound) {
  OBJFS_CONFORMANCE_OK(Put("gone", "bytes"));
  Result<ObjectInfo> seen = store().head("gone");
  OBJFS_CONFORMANCE_OK(seen);
  OBJFS_CONFORMANCE_OK(store().remove("gone"));
  for (bool known_etag : {true, false}) {
    SCOPED_TRACE(known_etag ? "with the ETag seen" : "without an ETag");
    SetAttributesOptions set;
    set.expected = *seen;
    if (!known_etag) set.expected.etag = ETag();
    Result<ObjectInfo> changed = store().set_attributes("gone", {{"mode", "33152"}}, set);
    ASSERT_FALSE(changed.ok());
    EXPECT_EQ(changed.status().code(), StatusCode::kNotFound) << changed.status().ToString();
    EXPECT_EQ(store().head("gone").status().code(), StatusCode::kNotFound);
  }
}

TEST_P(ObjectStoreConformance, LargeCopy) {
  const ConformanceBackend& backend = GetParam();
  const uint64_t size = backend.copy_part_threshold > 0
                            ? backend.copy_part_threshold + backend.part_size / 2 + 1
                            : (3u << 20) + 1;
  const std::string data = Pattern(size, 11);
  OBJFS_CONFORMANCE_OK(Put("big/src", data));
  Result<ObjectInfo> src = store().head("big/src");
  OBJFS_CONFORMANCE_OK(src);

  Result<ObjectInfo> copied = store().copy(*src, "big/dst", CopyOptions{});
  OBJFS_CONFORMANCE_OK(copied);
  EXPECT_EQ(copied->size, size);
  if (backend.copy_part_threshold > 0) {
    EXPECT_EQ(copied->etag.kind(), ETag::Kind::kMultipart) << copied->etag.value();
    EXPECT_EQ(copied->etag.parts(), Ceil(size, backend.part_size));
  }
  Result<ObjectInfo> head = store().head("big/dst");
  OBJFS_CONFORMANCE_OK(head);
  ExpectHonestETag(copied->etag, data);
  ExpectWritten(*head, copied->etag, data, {});
  Result<std::string> read = ReadAll(store(), "big/dst");
  OBJFS_CONFORMANCE_OK(read);
  EXPECT_TRUE(*read == data) << "content of the copy differs from its source";
}

TEST_P(ObjectStoreConformance, CopyOfMissingSourceIsNotFound) {
  ObjectInfo src;
  src.key = "not/there";
  Result<ObjectInfo> copied = store().copy(src, "anywhere", CopyOptions{});
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kNotFound) << copied.status().ToString();
  EXPECT_EQ(store().head("anywhere").status().code(), StatusCode::kNotFound);
}

TEST_P(ObjectStoreConformance, CopyOfChangedSourceFails) {
  Result<ObjectInfo> old_version = Put("changing", "old content");
  OBJFS_CONFORMANCE_OK(old_version);
  OBJFS_CONFORMANCE_OK(Put("changing", "new content"));

  Result<ObjectInfo> copied = store().copy(*old_version, "copy-of-old", CopyOptions{});
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kPreconditionFailed) << copied.status().ToString();
  EXPECT_EQ(store().head("copy-of-old").status().code(), StatusCode::kNotFound);
}

TEST_P(ObjectStoreConformance, RemoveThenHeadIsNotFound) {
  OBJFS_CONFORMANCE_OK(Put("doomed", "bytes"));
  OBJFS_CONFORMANCE_OK(store().remove("doomed"));
  Result<ObjectInfo> head = store().head("doomed");
  ASSERT_FALSE(head.ok());
  EXPECT_EQ(head.status().code(), StatusCode::kNotFound) << head.status().ToString();
  EXPECT_TRUE(ListKeys().empty());
}

TEST_P(ObjectStoreConformance, RemoveOfMissingKeySucceeds) {
  Status status = store().remove("never/existed");
  EXPECT_TRUE(status.ok()) << status.ToString();
}

TEST_P(ObjectStoreConformance, RemoveIfMatchRemovesOnlyThatVersion) {
  OBJFS_CONFORMANCE_OK(Put("versioned", "mine"));
  Result<ObjectInfo> mine = store().head("versioned");
  OBJFS_CONFORMANCE_OK(mine);
  OBJFS_CONFORMANCE_OK(Put("versioned", "another client's, longer"));

  Status refused = store().remove_if_match("versioned", mine->etag, /*known_current=*/false);
  EXPECT_EQ(refused.code(), StatusCode::kPreconditionFailed) << refused.ToString();
  Result<std::string> kept = ReadAll(store(), "versioned");
  OBJFS_CONFORMANCE_OK(kept);
  EXPECT_EQ(*kept, "another client's, longer");

  Result<ObjectInfo> current = store().head("versioned");
  OBJFS_CONFORMANCE_OK(current);
  OBJFS_CONFORMANCE_OK(store().remove_if_match("versioned", current->etag, false));
  EXPECT_EQ(store().head("versioned").status().code(), StatusCode::kNotFound);
  // Nothing there: nothing to keep.
  OBJFS_CONFORMANCE_OK(store().remove_if_match("versioned", current->etag, false));
  EXPECT_TRUE(ListKeys().empty());
}

TEST_P(ObjectStoreConformance, RemoveMany) {
  std::vector<std::string> keys = {"many/1", "many/2", "many/3", "many/sub/4"};
  for (const std::string& key : keys) OBJFS_CONFORMANCE_OK(Put(key, key));
  OBJFS_CONFORMANCE_OK(Put("keep", "kept"));
  keys.push_back("many/missing");

  Status status = store().remove_many(keys);
  ASSERT_TRUE(status.ok()) << status.ToString();
  for (const std::string& key : keys) {
    EXPECT_EQ(store().head(key).status().code(), StatusCode::kNotFound) << key;
  }
  EXPECT_EQ(ListKeys(), std::vector<std::string>{"keep"});
}

TEST_P(ObjectStoreConformance, ListWithDelimiter) {
  for (const char* key : {"a", "b/1", "b/2", "c", "d/e/f", "d0", "e/"}) {
    std::string_view k(key);
    OBJFS_CONFORMANCE_OK(Put(key, directories_are_real() && k.ends_with('/') ? "" : key));
  }
  ListOptions options;
  options.delimiter = "/";
  Result<Listing> root = store().list(options);
  OBJFS_CONFORMANCE_OK(root);
  std::vector<std::string> objects;
  for (const ObjectInfo& object : root->objects) {
    objects.push_back(object.key);
    // A listing may carry metadata (SFTP's READDIR does), but then exactly what head() says.
    if (object.has_metadata) {
      Result<ObjectInfo> head = store().head(object.key);
      OBJFS_CONFORMANCE_OK(head);
      EXPECT_EQ(object.metadata, head->metadata) << object.key;
    }
  }
  EXPECT_EQ(objects, (std::vector<std::string>{"a", "c", "d0"}));
  EXPECT_EQ(root->common_prefixes, (std::vector<std::string>{"b/", "d/", "e/"}));
  EXPECT_FALSE(root->truncated());
  ASSERT_EQ(root->objects.size(), 3u);
  EXPECT_EQ(root->objects[0].size, 1u);
  if (native_etags()) {
    EXPECT_EQ(root->objects[0].etag.value(), HexMd5(Md5Of("a")));
  }
  ExpectHonestETag(root->objects[0].etag, "a");

  options.prefix = "d/";
  Result<Listing> d = store().list(options);
  OBJFS_CONFORMANCE_OK(d);
  EXPECT_TRUE(d->objects.empty());
  EXPECT_EQ(d->common_prefixes, (std::vector<std::string>{"d/e/"}));

  options.prefix = "b/";
  Result<Listing> b = store().list(options);
  OBJFS_CONFORMANCE_OK(b);
  ASSERT_EQ(b->objects.size(), 2u);
  EXPECT_EQ(b->objects[0].key, "b/1");
  EXPECT_EQ(b->objects[1].key, "b/2");
  EXPECT_TRUE(b->common_prefixes.empty());

  // A directory marker is listed as an object under its own prefix.
  options.prefix = "e/";
  Result<Listing> e = store().list(options);
  OBJFS_CONFORMANCE_OK(e);
  ASSERT_EQ(e->objects.size(), 1u);
  EXPECT_EQ(e->objects[0].key, "e/");

  EXPECT_EQ(ListKeys(), (std::vector<std::string>{"a", "b/1", "b/2", "c", "d/e/f", "d0", "e/"}));
}

TEST_P(ObjectStoreConformance, ListStartAfter) {
  for (const char* key : {"k1", "k2", "k3", "k4"}) OBJFS_CONFORMANCE_OK(Put(key, key));
  ListOptions options;
  options.start_after = "k2";
  Result<Listing> listing = store().list(options);
  OBJFS_CONFORMANCE_OK(listing);
  ASSERT_EQ(listing->objects.size(), 2u);
  EXPECT_EQ(listing->objects[0].key, "k3");
  EXPECT_EQ(listing->objects[1].key, "k4");
}

TEST_P(ObjectStoreConformance, PaginatedListing) {
  constexpr int kFlatKeys = 2500;
  auto flat_key = [](int i) {
    char name[32];
    std::snprintf(name, sizeof(name), "pg/k%04d", i);
    return std::string(name);
  };
  // Two "directories" whose names sort among the flat keys; "pg/k0998/" is the 1000th entry, so
  // the first page ends on a common prefix whose objects continue past the page.
  const std::vector<std::string> nested = {"pg/k0998/a", "pg/k0998/b", "pg/k0998/c/d", "pg/k1500/a",
                                           "pg/k1500/b"};
  std::atomic<int> failures{0};
  // A directory tree cannot hold both "pg/k0998" and "pg/k0998/a": there, the flat keys that
  // share a name with a directory are left out.
  const bool both = GetParam().key_may_also_be_a_prefix;
  auto skipped = [&](int i) { return !both && (i == 998 || i == 1500); };
  ParallelFor(kFlatKeys + static_cast<int>(nested.size()), 8, [&](int i) {
    if (i < kFlatKeys && skipped(i)) return;
    std::string key = i < kFlatKeys ? flat_key(i) : nested[i - kFlatKeys];
    if (!Put(key, "x").ok()) ++failures;
  });
  ASSERT_EQ(failures.load(), 0);

  ListOptions options;
  options.prefix = "pg/";
  options.delimiter = "/";
  options.max_keys = 1000;
  Result<std::vector<Listing>> pages = ListAll(options);
  OBJFS_CONFORMANCE_OK(pages);
  ASSERT_GE(pages->size(), 3u);
  std::vector<std::string> objects;
  std::vector<std::string> prefixes;
  for (const Listing& page : *pages) {
    EXPECT_LE(page.objects.size() + page.common_prefixes.size(), 1000u);
    for (const ObjectInfo& object : page.objects) objects.push_back(object.key);
    for (const std::string& prefix : page.common_prefixes) prefixes.push_back(prefix);
  }
  EXPECT_FALSE((*pages)[0].objects.empty());
  std::vector<std::string> want;
  for (int i = 0; i < kFlatKeys; ++i) {
    if (!skipped(i)) want.push_back(flat_key(i));
  }
  ASSERT_EQ(objects.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(objects[i], want[i]) << "at " << i;
  EXPECT_EQ(prefixes, (std::vector<std::string>{"pg/k0998/", "pg/k1500/"}));

  // A recursive listing has every key exactly once, in order.
  std::vector<std::string> all = ListKeys("pg/");
  EXPECT_EQ(all.size(), want.size() + nested.size());
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), all.size());
}

TEST_P(ObjectStoreConformance, SpecialKeys) {
  std::vector<std::string> keys = {
      "dir/with space",                 // URL-encoded as %20, never '+'
      "sym/+ & = , ; : @ $ ? #",        // reserved in URLs, query strings and signatures
      "pct/%41",                        // must not be decoded to "A"
      "dir/ünïcødé-日本",               // multi-byte UTF-8
      "a//b",                           // an empty path segment
      "long/" + std::string(995, 'x'),  // 1,000 bytes
  };
  ASSERT_EQ(keys.back().size(), 1000u);
  // A store that cannot express a key must refuse it clearly, not store something else.
  const ConformanceBackend& backend = GetParam();
  if (!backend.empty_key_segments) {
    EXPECT_EQ(Put("a//b", "x").status().code(), StatusCode::kInvalidArgument);
    keys.erase(std::find(keys.begin(), keys.end(), "a//b"));
  }
  if (backend.max_key_segment_bytes != 0) {
    EXPECT_EQ(Put(keys.back(), "x").status().code(), StatusCode::kNameTooLong);
    // The longest segment that still leaves room for the ".copy" suffix below.
    keys.back() = "long/" + std::string(backend.max_key_segment_bytes - 5, 'x');
  }
  std::set<std::string> expected;
  for (const std::string& key : keys) {
    SCOPED_TRACE(key.substr(0, 40));
    PutOptions options;
    options.metadata = {{"mode", "33188"}};
    Result<ObjectInfo> put = Put(key, "content of " + key, options);
    OBJFS_CONFORMANCE_OK(put);
    EXPECT_EQ(put->key, key);
    Result<ObjectInfo> head = store().head(key);
    OBJFS_CONFORMANCE_OK(head);
    EXPECT_EQ(head->key, key);
    EXPECT_EQ(head->size, key.size() + 11);
    Result<std::string> read = ReadAll(store(), key);
    OBJFS_CONFORMANCE_OK(read);
    EXPECT_EQ(*read, "content of " + key);

    const std::string copy_key = key + ".copy";
    Result<ObjectInfo> copied = store().copy(*head, copy_key, CopyOptions{});
    OBJFS_CONFORMANCE_OK(copied);
    EXPECT_EQ(copied->key, copy_key);
    Result<std::string> copy_read = ReadAll(store(), copy_key);
    OBJFS_CONFORMANCE_OK(copy_read);
    EXPECT_EQ(*copy_read, "content of " + key);
    expected.insert(key);
    expected.insert(copy_key);
  }

  std::vector<std::string> listed = ListKeys();
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), expected);
  EXPECT_EQ(listed.size(), expected.size());

  // Each key is also found by a listing with itself as the prefix, as its exact bytes.
  for (const std::string& key : keys) {
    SCOPED_TRACE(key.substr(0, 40));
    ListOptions options;
    options.prefix = key;
    options.delimiter = "/";
    Result<Listing> listing = store().list(options);
    OBJFS_CONFORMANCE_OK(listing);
    ASSERT_FALSE(listing->objects.empty());
    EXPECT_EQ(listing->objects[0].key, key);
  }

  for (const std::string& key : keys) {
    Status removed = store().remove(key);
    EXPECT_TRUE(removed.ok()) << removed.ToString();
    EXPECT_EQ(store().head(key).status().code(), StatusCode::kNotFound);
  }
  std::vector<std::string> copies;
  for (const std::string& key : keys) copies.push_back(key + ".copy");
  Status removed = store().remove_many(copies);
  EXPECT_TRUE(removed.ok()) << removed.ToString();
  ExpectNothingListed();
}

TEST_P(ObjectStoreConformance, ConcurrentPutsAndReads) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 8;
  constexpr size_t kSize = 64 << 10;
  std::atomic<int> errors{0};
  std::atomic<int> torn{0};
  std::atomic<int> good_shared_reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string own_key = "concurrent/own-" + std::to_string(t);
      for (int round = 0; round < kRounds; ++round) {
        const std::string own = Pattern(kSize, 100 * t + round);
        if (!Put(own_key, own).ok()) ++errors;
        Result<std::string> own_read = ReadAll(store(), own_key);
        if (!own_read.ok()) {
          ++errors;
        } else if (*own_read != own) {
          ++torn;
        }

        // Everyone overwrites and reads one shared key: every read sees one whole version.
        if (!Put("concurrent/shared", std::string(kSize, static_cast<char>('a' + t))).ok()) {
          ++errors;
        }
        Result<std::string> shared = ReadAll(store(), "concurrent/shared");
        if (!shared.ok()) {
          // Replaced between the head and the read: the If-Match did its job.
          if (shared.status().code() != StatusCode::kPreconditionFailed) ++errors;
          continue;
        }
        if (shared->size() != kSize ||
            std::count(shared->begin(), shared->end(), shared->front()) !=
                static_cast<std::ptrdiff_t>(kSize) ||
            shared->front() < 'a' || shared->front() >= 'a' + kThreads) {
          ++torn;
        } else {
          ++good_shared_reads;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(good_shared_reads.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    Result<std::string> read = ReadAll(store(), "concurrent/own-" + std::to_string(t));
    OBJFS_CONFORMANCE_OK(read);
    EXPECT_TRUE(*read == Pattern(kSize, 100 * t + kRounds - 1));
  }
}

TEST_P(ObjectStoreConformance, RenameWhereTheStoreHasIt) {
  if (!store().capabilities().native_rename) {
    EXPECT_EQ(store().rename("a", "b").code(), StatusCode::kUnsupported);
    return;
  }
  OBJFS_CONFORMANCE_OK(Put("ren/file", "moved bytes"));
  Result<ObjectInfo> before = store().head("ren/file");
  OBJFS_CONFORMANCE_OK(before);
  OBJFS_CONFORMANCE_OK(store().rename("ren/file", "ren/moved"));
  EXPECT_EQ(store().head("ren/file").status().code(), StatusCode::kNotFound);
  Result<ObjectInfo> after = store().head("ren/moved");
  OBJFS_CONFORMANCE_OK(after);
  EXPECT_EQ(after->size, before->size);
  EXPECT_EQ(after->etag, before->etag);  // same content and mtime: same version
  Result<std::string> data = ReadAll(store(), "ren/moved");
  OBJFS_CONFORMANCE_OK(data);
  EXPECT_EQ(*data, "moved bytes");
  // Over an existing file: replaced.
  OBJFS_CONFORMANCE_OK(Put("ren/other", "other bytes"));
  OBJFS_CONFORMANCE_OK(store().rename("ren/other", "ren/moved"));
  data = ReadAll(store(), "ren/moved");
  OBJFS_CONFORMANCE_OK(data);
  EXPECT_EQ(*data, "other bytes");
  // A directory, with everything under it.
  OBJFS_CONFORMANCE_OK(Put("ren/dir/a", "1"));
  OBJFS_CONFORMANCE_OK(Put("ren/dir/sub/b", "2"));
  OBJFS_CONFORMANCE_OK(store().rename("ren/dir", "ren/dir2"));
  data = ReadAll(store(), "ren/dir2/sub/b");
  OBJFS_CONFORMANCE_OK(data);
  EXPECT_EQ(*data, "2");
  EXPECT_EQ(store().head("ren/dir/a").status().code(), StatusCode::kNotFound);
  // Nothing to rename.
  EXPECT_EQ(store().rename("ren/missing", "ren/x").code(), StatusCode::kNotFound);
}

// Upload sessions (Upload in backend/object_store.h). Their parts are as small as the store
// allows: 5 MiB on S3, 1 MiB elsewhere.
inline Status Write(Upload& upload, uint64_t offset, std::string_view data) {
  MemorySource source(data);
  return upload.write(offset, source, 0, data.size());
}

// The MD5s of `data` cut in parts of `part_size`: the "-N" ETag S3 gives it.
inline ETag PartsETag(std::string_view data, uint64_t part_size) {
  std::vector<Md5Digest> parts;
  for (size_t at = 0; at < data.size(); at += part_size) {
    parts.push_back(Md5Of(data.substr(at, part_size)));
  }
  return MultipartETag(parts);
}

TEST_P(ObjectStoreConformance, UploadSessionsAreAnnounced) {
  const Capabilities caps = store().capabilities();
  ASSERT_TRUE(caps.upload_sessions);
  if (caps.copy_ranges) {
    EXPECT_TRUE(caps.server_side_copy);
  }
}

TEST_P(ObjectStoreConformance, UploadPartsOutOfOrderAndInParallel) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  options.metadata = {{"mode", "33188"}};
  options.content_type = "application/x-parts";
  Result<std::unique_ptr<Upload>> upload = store().start_upload("up/streamed", options);
  OBJFS_CONFORMANCE_OK(upload);
  Upload& session = **upload;
  EXPECT_EQ(session.key(), "up/streamed");
  const uint64_t part = session.part_size();
  ASSERT_GE(part, options.part_size);
  const std::string data = Pattern(3 * part + 1000, 21);
  const int parts = static_cast<int>(Ceil(data.size(), part));
  MemorySource source(data);
  // The last part first, then the others on three threads.
  OBJFS_CONFORMANCE_OK(session.write((parts - 1) * part, source, (parts - 1) * part,
                                     data.size() - (parts - 1) * part));
  std::atomic<int> failures{0};
  ParallelFor(parts - 1, 3, [&](int i) {
    const int index = parts - 2 - i;
    Status st = session.write(index * part, source, index * part, part);
    if (!st.ok()) {
      ++failures;
      ADD_FAILURE() << st.ToString();
    }
  });
  ASSERT_EQ(failures.load(), 0);
  // Nothing under the key until complete().
  EXPECT_EQ(store().head("up/streamed").status().code(), StatusCode::kNotFound);
  for (const std::string& key : ListKeys("up/")) EXPECT_TRUE(key.ends_with('/')) << key;

  PutOptions put;
  put.metadata = options.metadata;
  put.content_type = options.content_type;
  Result<ObjectInfo> done = session.complete(data.size(), put);
  OBJFS_CONFORMANCE_OK(done);
  EXPECT_EQ(done->key, "up/streamed");
  EXPECT_EQ(done->size, data.size());
  if (native_etags()) {
    // The server's "-N" ETag, of the parts as they were cut.
    EXPECT_EQ(done->etag, PartsETag(data, part));
    EXPECT_EQ(done->etag.parts(), static_cast<size_t>(parts));
    Result<ObjectInfo> head = store().head("up/streamed");
    OBJFS_CONFORMANCE_OK(head);
    EXPECT_EQ(head->etag, done->etag);
    if (stores_metadata()) {
      EXPECT_EQ(WithoutHeaderMetadata(head->metadata), put.metadata);
      EXPECT_EQ(head->content_type, put.content_type);
    }
  } else {
    // Written out of order: no MD5 was computed, and none may be guessed.
    ExpectHonestETag(done->etag, data);
  }
  Result<std::string> back = ReadAll(store(), "up/streamed");
  OBJFS_CONFORMANCE_OK(back);
  EXPECT_TRUE(*back == data);
  // Finished: abort is a no-op, and the object stays.
  OBJFS_CONFORMANCE_OK(session.abort());
  EXPECT_TRUE(store().head("up/streamed").ok());
}

TEST_P(ObjectStoreConformance, UploadInOrderHasAnHonestETag) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  Result<std::unique_ptr<Upload>> upload = store().start_upload("up/ordered", options);
  OBJFS_CONFORMANCE_OK(upload);
  const uint64_t part = (*upload)->part_size();
  const std::string data = Pattern(2 * part + 10, 22);
  MemorySource source(data);
  for (uint64_t at = 0; at < data.size(); at += part) {
    OBJFS_CONFORMANCE_OK(
        (*upload)->write(at, source, at, std::min<uint64_t>(part, data.size() - at)));
  }
  Result<ObjectInfo> done = (*upload)->complete(data.size(), PutOptions{});
  OBJFS_CONFORMANCE_OK(done);
  ExpectHonestETag(done->etag, data);
  Result<ObjectInfo> head = store().head("up/ordered");
  OBJFS_CONFORMANCE_OK(head);
  ExpectHonestETag(head->etag, data);
  if (native_etags()) {
    EXPECT_EQ(head->etag, done->etag);
  }
}

TEST_P(ObjectStoreConformance, UploadAssemblesAnEdit) {
  if (!store().capabilities().copy_ranges) GTEST_SKIP() << "no server-side copy of ranges";
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  Result<std::unique_ptr<Upload>> upload = store().start_upload("edit/file", options);
  OBJFS_CONFORMANCE_OK(upload);
  Upload& session = **upload;
  const uint64_t part = session.part_size();
  // The old object: three parts and a bit (multipart on S3 as well).
  const std::string old_data = Pattern(3 * part + 500, 23);
  OBJFS_CONFORMANCE_OK(Put("edit/file", old_data));
  Result<ObjectInfo> base = store().head("edit/file");
  OBJFS_CONFORMANCE_OK(base);

  // Part 1 changes in its middle, part 3 (the old tail) gets 1000 bytes appended.
  std::string new_data = old_data;
  const std::string patch = Pattern(4096, 24);
  new_data.replace(part + 100, patch.size(), patch);
  new_data += Pattern(1000, 25);
  OBJFS_CONFORMANCE_OK(session.copy(0, *base, 0, part));
  OBJFS_CONFORMANCE_OK(session.copy(2 * part, *base, 2 * part, part));
  OBJFS_CONFORMANCE_OK(Write(session, part, std::string_view(new_data).substr(part, part)));
  OBJFS_CONFORMANCE_OK(Write(session, 3 * part, std::string_view(new_data).substr(3 * part)));
  // The old object is still what readers see.
  Result<std::string> meanwhile = ReadAll(store(), "edit/file");
  OBJFS_CONFORMANCE_OK(meanwhile);
  EXPECT_TRUE(*meanwhile == old_data);

  PutOptions put;
  put.if_match = base->etag;
  Result<ObjectInfo> done = session.complete(new_data.size(), put);
  OBJFS_CONFORMANCE_OK(done);
  EXPECT_EQ(done->size, new_data.size());
  if (native_etags()) {
    EXPECT_EQ(done->etag, PartsETag(new_data, part));
  } else {
    // Bytes copied on the server were never hashed here: no MD5 to report.
    EXPECT_FALSE(done->etag.is_plain_md5()) << done->etag.value();
  }
  Result<std::string> back = ReadAll(store(), "edit/file");
  OBJFS_CONFORMANCE_OK(back);
  EXPECT_TRUE(*back == new_data);
  Result<ObjectInfo> head = store().head("edit/file");
  OBJFS_CONFORMANCE_OK(head);
  ExpectHonestETag(head->etag, new_data);

  // A shorter object: its first part copied, and half of the second.
  Result<ObjectInfo> edited = store().head("edit/file");
  OBJFS_CONFORMANCE_OK(edited);
  Result<std::unique_ptr<Upload>> shorter = store().start_upload("edit/file", options);
  OBJFS_CONFORMANCE_OK(shorter);
  const std::string short_data = new_data.substr(0, part + part / 2);
  OBJFS_CONFORMANCE_OK((*shorter)->copy(0, *edited, 0, part));
  if ((*shorter)->whole_parts()) {
    // The part that ends the object is uploaded whole.
    OBJFS_CONFORMANCE_OK(Write(**shorter, part, std::string_view(short_data).substr(part)));
  } else {
    // Any range: the rest copied too, past the new end, which complete() cuts off.
    OBJFS_CONFORMANCE_OK((*shorter)->copy(part, *edited, part, 2 * part));
  }
  put.if_match = edited->etag;
  Result<ObjectInfo> cut = (*shorter)->complete(short_data.size(), put);
  OBJFS_CONFORMANCE_OK(cut);
  EXPECT_EQ(cut->size, short_data.size());
  Result<std::string> short_back = ReadAll(store(), "edit/file");
  OBJFS_CONFORMANCE_OK(short_back);
  EXPECT_TRUE(*short_back == short_data);
}

TEST_P(ObjectStoreConformance, UploadWithAGapDoesNotComplete) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  Result<std::unique_ptr<Upload>> upload = store().start_upload("up/gap", options);
  OBJFS_CONFORMANCE_OK(upload);
  const uint64_t part = (*upload)->part_size();
  const std::string data = Pattern(2 * part + 1, 26);
  MemorySource source(data);
  OBJFS_CONFORMANCE_OK((*upload)->write(0, source, 0, part));
  OBJFS_CONFORMANCE_OK((*upload)->write(2 * part, source, 2 * part, 1));
  Result<ObjectInfo> done = (*upload)->complete(data.size(), PutOptions{});
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.status().code(), StatusCode::kInvalidArgument) << done.status().ToString();
  EXPECT_EQ(store().head("up/gap").status().code(), StatusCode::kNotFound);
}

// A size whose part count overflows uint64 must be refused, never completed as something else
// (S3 and the fake's whole parts compute (size + part_size - 1) / part_size).
TEST_P(ObjectStoreConformance, UploadCompleteOfAnOverflowingSizeIsRefused) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  Result<std::unique_ptr<Upload>> upload = store().start_upload("up/huge", options);
  OBJFS_CONFORMANCE_OK(upload);
  const uint64_t part = (*upload)->part_size();
  const std::string data = Pattern(part, 41);
  MemorySource source(data);
  OBJFS_CONFORMANCE_OK((*upload)->write(0, source, 0, part));
  Result<ObjectInfo> done = (*upload)->complete(UINT64_MAX, PutOptions{});
  EXPECT_FALSE(done.ok()) << "completed an object of " << (done.ok() ? done->size : 0) << " bytes";
  EXPECT_EQ(store().head("up/huge").status().code(), StatusCode::kNotFound);
}

// A range whose end overflows uint64 is refused, never wrapped.
TEST_P(ObjectStoreConformance, UploadRangeOverflowingUint64IsRefused) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  Result<std::unique_ptr<Upload>> upload = store().start_upload("up/wrap", options);
  OBJFS_CONFORMANCE_OK(upload);
  const std::string data = "four";
  MemorySource source(data);
  EXPECT_FALSE((*upload)->write(UINT64_MAX - 1, source, 0, data.size()).ok());
  OBJFS_CONFORMANCE_OK((*upload)->abort());
}

// Reads succeed at the range's first offset only: a write of a long range fails after its first
// block reached the server.
class FailsAfterFirstRead : public ByteSource {
 public:
  explicit FailsAfterFirstRead(uint64_t first) : first_(first) {}
  uint64_t size() const override { return UINT64_MAX / 2; }
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> buf) const override {
    if (offset != first_) return IoError("the source fails at " + std::to_string(offset));
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = std::byte{'x'};
    return buf.size();
  }

 private:
  const uint64_t first_;
};

// Object_store.h: a failed write() leaves the upload usable. A write past the final size that
// failed part-way must not keep complete() from making the object of the size asked for.
TEST_P(ObjectStoreConformance, UploadCompletesAfterAFailedWritePastItsEnd) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  Result<std::unique_ptr<Upload>> upload = store().start_upload("up/cut", options);
  OBJFS_CONFORMANCE_OK(upload);
  const uint64_t part = (*upload)->part_size();
  const std::string data = Pattern(part, 42);
  MemorySource source(data);
  OBJFS_CONFORMANCE_OK((*upload)->write(0, source, 0, part));
  if (!(*upload)->whole_parts()) {
    FailsAfterFirstRead failing(part);
    // 64 MiB: more than one block of the store's writes.
    (void)(*upload)->write(part, failing, part, 64 << 20);  // fails on SFTP after a block
  }
  Result<ObjectInfo> done = (*upload)->complete(part, PutOptions{});
  OBJFS_CONFORMANCE_OK(done);
  EXPECT_EQ(done->size, part);
  Result<std::string> back = ReadAll(store(), "up/cut");
  OBJFS_CONFORMANCE_OK(back);
  EXPECT_TRUE(*back == data);
}

TEST_P(ObjectStoreConformance, UploadAbortedLeavesNothing) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  {
    Result<std::unique_ptr<Upload>> upload = store().start_upload("gone/aborted", options);
    OBJFS_CONFORMANCE_OK(upload);
    const std::string data = Pattern((*upload)->part_size(), 27);
    MemorySource source(data);
    OBJFS_CONFORMANCE_OK((*upload)->write(0, source, 0, data.size()));
    OBJFS_CONFORMANCE_OK((*upload)->abort());
    OBJFS_CONFORMANCE_OK((*upload)->abort());  // idempotent
    EXPECT_FALSE((*upload)->complete(data.size(), PutOptions{}).ok());
  }
  {
    // Destroyed without complete(): aborted too.
    Result<std::unique_ptr<Upload>> upload = store().start_upload("gone/dropped", options);
    OBJFS_CONFORMANCE_OK(upload);
    OBJFS_CONFORMANCE_OK(Write(**upload, 0, "some bytes"));
  }
  EXPECT_EQ(store().head("gone/aborted").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store().head("gone/dropped").status().code(), StatusCode::kNotFound);
  ExpectNothingListed();
}

TEST_P(ObjectStoreConformance, UploadOverAReplacedBaseFails) {
  if (!store().capabilities().copy_ranges) GTEST_SKIP() << "no server-side copy of ranges";
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  const uint64_t part = options.part_size;
  const std::string old_data = Pattern(2 * part, 28);
  // Another size: a version (SFTP: size and whole-second mtime) must tell them apart.
  const std::string other_data = Pattern(2 * part + 3, 29);
  OBJFS_CONFORMANCE_OK(Put("base/file", old_data));
  Result<ObjectInfo> base = store().head("base/file");
  OBJFS_CONFORMANCE_OK(base);

  // Replaced before the copy: the copy fails (or, at the latest, complete()).
  {
    Result<std::unique_ptr<Upload>> upload = store().start_upload("base/file", options);
    OBJFS_CONFORMANCE_OK(upload);
    ASSERT_EQ((*upload)->part_size(), part);
    OBJFS_CONFORMANCE_OK(Put("base/file", other_data));
    Status copied = (*upload)->copy(0, *base, 0, part);
    Status written = Write(**upload, part, std::string_view(old_data).substr(part));
    OBJFS_CONFORMANCE_OK(written);
    Result<ObjectInfo> done =
        copied.ok() ? (*upload)->complete(2 * part, PutOptions{}) : Result<ObjectInfo>(copied);
    ASSERT_FALSE(done.ok());
    EXPECT_EQ(done.status().code(), StatusCode::kPreconditionFailed) << done.status().ToString();
    Result<std::string> now = ReadAll(store(), "base/file");
    OBJFS_CONFORMANCE_OK(now);
    EXPECT_TRUE(*now == other_data);
  }
  // Replaced after the copy: complete() with If-Match on the base fails.
  {
    Result<ObjectInfo> current = store().head("base/file");
    OBJFS_CONFORMANCE_OK(current);
    Result<std::unique_ptr<Upload>> upload = store().start_upload("base/file", options);
    OBJFS_CONFORMANCE_OK(upload);
    OBJFS_CONFORMANCE_OK((*upload)->copy(0, *current, 0, part));
    OBJFS_CONFORMANCE_OK(Write(**upload, part, "the new tail"));
    OBJFS_CONFORMANCE_OK(Put("base/file", old_data));
    PutOptions put;
    put.if_match = current->etag;
    Result<ObjectInfo> done = (*upload)->complete(part + 12, put);
    ASSERT_FALSE(done.ok());
    EXPECT_EQ(done.status().code(), StatusCode::kPreconditionFailed) << done.status().ToString();
    Result<std::string> now = ReadAll(store(), "base/file");
    OBJFS_CONFORMANCE_OK(now);
    EXPECT_TRUE(*now == old_data);
  }
}

TEST_P(ObjectStoreConformance, UploadTakesMetadataGivenOnlyAtCompletion) {
  // A file streamed while written learns its final attributes (its mtime) at close.
  UploadOptions options;
  options.metadata = {{"mode", "33152"}};
  Result<std::unique_ptr<Upload>> upload = store().start_upload("late/meta", options);
  OBJFS_CONFORMANCE_OK(upload);
  OBJFS_CONFORMANCE_OK(Write(**upload, 0, "attributes come last"));
  PutOptions put;
  put.metadata = {{"mode", "33188"}, {"mtime", "1700000000"}};
  put.content_type = "text/plain";
  Result<ObjectInfo> done = (*upload)->complete(20, put);
  OBJFS_CONFORMANCE_OK(done);
  Result<ObjectInfo> head = store().head("late/meta");
  OBJFS_CONFORMANCE_OK(head);
  EXPECT_EQ(head->metadata["mode"], "33188");
  EXPECT_EQ(head->metadata["mtime"], "1700000000");
  if (stores_metadata()) {
    EXPECT_EQ(WithoutHeaderMetadata(head->metadata), put.metadata);
    EXPECT_EQ(head->content_type, "text/plain");
  }
  if (native_etags()) {
    EXPECT_EQ(head->etag, done->etag);
  }
  Result<std::string> back = ReadAll(store(), "late/meta");
  OBJFS_CONFORMANCE_OK(back);
  EXPECT_EQ(*back, "attributes come last");
}

TEST_P(ObjectStoreConformance, UploadIfNoneMatch) {
  UploadOptions options;
  options.part_size = std::max<uint64_t>(store().capabilities().min_part_size, 1 << 20);
  OBJFS_CONFORMANCE_OK(Put("excl/taken", "first"));
  PutOptions exclusive;
  exclusive.if_none_match = true;
  Result<std::unique_ptr<Upload>> taken = store().start_upload("excl/taken", options);
  OBJFS_CONFORMANCE_OK(taken);
  OBJFS_CONFORMANCE_OK(Write(**taken, 0, "second"));
  Result<ObjectInfo> refused = (*taken)->complete(6, exclusive);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(refused.status().code() == StatusCode::kPreconditionFailed ||
              refused.status().code() == StatusCode::kAlreadyExists)
      << refused.status().ToString();
  Result<std::string> kept = ReadAll(store(), "excl/taken");
  OBJFS_CONFORMANCE_OK(kept);
  EXPECT_EQ(*kept, "first");

  Result<std::unique_ptr<Upload>> fresh = store().start_upload("excl/fresh", options);
  OBJFS_CONFORMANCE_OK(fresh);
  OBJFS_CONFORMANCE_OK(Write(**fresh, 0, "new"));
  OBJFS_CONFORMANCE_OK((*fresh)->complete(3, exclusive));
  Result<std::string> made = ReadAll(store(), "excl/fresh");
  OBJFS_CONFORMANCE_OK(made);
  EXPECT_EQ(*made, "new");
}

}  // namespace objfs
