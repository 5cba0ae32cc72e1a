// What a key is, over the in-memory store: the answers, and the requests they cost.
#include "fs/key_resolver.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>

#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"
#include "fs/object_metadata.h"

namespace objfs {
namespace {

class KeyResolverTest : public ::testing::Test {
 protected:
  void Put(const std::string& key, const std::string& data, Metadata metadata = {}) {
    PutOptions put;
    put.metadata = std::move(metadata);
    ASSERT_TRUE(memory_->put(key, MemorySource(data), put).ok());
  }
  int Requests() const { return faults_->calls(StoreOp::kHead) + faults_->calls(StoreOp::kList); }

  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultInjectingStore> faults_ = std::make_shared<FaultInjectingStore>(memory_);
  MetaCache cache_{clock_, std::chrono::seconds(10), std::chrono::seconds(10)};
  ObjectAttrs attrs_{AttrDefaults{}};
  Metrics metrics_;
  KeyResolver resolver_{faults_.get(), &cache_, &attrs_, &metrics_, 123};
};

TEST_F(KeyResolverTest, TheRootCostsNothing) {
  auto rec = resolver_.Resolve("");
  ASSERT_TRUE(rec.ok());
  EXPECT_TRUE(rec->is_dir);
  EXPECT_EQ(rec->mtime_ns, 123);
  EXPECT_EQ(Requests(), 0);
}

TEST_F(KeyResolverTest, AFileIsOneHeadThenCached) {
  Metadata metadata;
  SetPosixMetadata(S_IFREG | 0600, 5, 6, 7'000'000'000, &metadata);
  Put("d/f", "data", metadata);
  auto rec = resolver_.Resolve("d/f");
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(rec->is_dir);
  EXPECT_TRUE(rec->complete);
  EXPECT_EQ(rec->mode, S_IFREG | 0600u);
  EXPECT_EQ(rec->size, 4u);
  EXPECT_EQ(faults_->calls(StoreOp::kHead), 1);
  EXPECT_EQ(faults_->calls(StoreOp::kList), 0);
  ASSERT_TRUE(resolver_.Resolve("d/f").ok());
  EXPECT_EQ(Requests(), 1);
}

TEST_F(KeyResolverTest, ADirectoryWithAMarkerHasTheMarkersMetadata) {
  Metadata metadata;
  SetPosixMetadata(S_IFDIR | 0700, 9, 9, 0, &metadata);
  Put("d/", "", metadata);
  Put("d/f", "x");
  auto rec = resolver_.Resolve("d");
  ASSERT_TRUE(rec.ok());
  EXPECT_TRUE(rec->is_dir);
  EXPECT_TRUE(rec->has_object);
  EXPECT_EQ(rec->mode, S_IFDIR | 0700u);
  EXPECT_EQ(rec->uid, 9u);
}

TEST_F(KeyResolverTest, APrefixAloneIsADirectoryWithTheDefaults) {
  Put("d/sub/f", "x");
  auto rec = resolver_.Resolve("d/sub");
  ASSERT_TRUE(rec.ok());
  EXPECT_TRUE(rec->is_dir);
  EXPECT_FALSE(rec->has_object);
  EXPECT_EQ(rec->mode, S_IFDIR | 0755u);
}

TEST_F(KeyResolverTest, AMissingNameIsCachedAsAbsent) {
  Put("d/f", "x");
  auto rec = resolver_.Resolve("d/missing");
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), StatusCode::kNotFound);
  const int requests = Requests();
  EXPECT_FALSE(resolver_.Resolve("d/missing").ok());
  EXPECT_EQ(Requests(), requests);
}

TEST_F(KeyResolverTest, OneListingOfTheParentAnswersItsOtherMissingNames) {
  Put("d/a", "x");
  EXPECT_FALSE(resolver_.Resolve("d/missing1").ok());  // HEAD, then the parent's listing
  const int lists = faults_->calls(StoreOp::kList);
  EXPECT_GE(lists, 1);
  const int heads = faults_->calls(StoreOp::kHead);
  EXPECT_FALSE(resolver_.Resolve("d/missing2").ok());
  EXPECT_EQ(faults_->calls(StoreOp::kList), lists);  // the fresh listing says it is absent
  EXPECT_EQ(faults_->calls(StoreOp::kHead), heads);
}

TEST_F(KeyResolverTest, AServerErrorIsNotTakenForAbsence) {
  Put("f", "x");
  faults_->FailNth(StoreOp::kHead, 1, TransientError("503"));
  auto rec = resolver_.Resolve("f");
  ASSERT_FALSE(rec.ok());
  EXPECT_EQ(rec.status().code(), StatusCode::kTransient);
  EXPECT_TRUE(resolver_.Resolve("f").ok());  // nothing negative was cached
}

}  // namespace
}  // namespace objfs
