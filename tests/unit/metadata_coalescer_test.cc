// Held metadata changes apart from Filesystem: how one reaches the store, what happens when the
// object changed or went, and the recovery of the records a crash left.
#include "fs/metadata_coalescer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"

namespace objfs {
namespace {

class MetadataCoalescerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/objfs-coalescer-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto staging = StagingArea::Open(dir_ + "/staging");
    ASSERT_TRUE(staging.ok());
    staging_ = std::move(*staging);
    coalescer_ = NewCoalescer();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<MetadataCoalescer> NewCoalescer() {
    return std::make_unique<MetadataCoalescer>(
        faults_.get(), staging_.get(),
        [this](LogLevel, const std::string& line) { log_.push_back(line); },
        [this](const std::string& key) { invalidated_.push_back(key); });
  }

  ObjectInfo Put(const std::string& key, const std::string& data, Metadata metadata = {}) {
    PutOptions put;
    put.metadata = std::move(metadata);
    auto info = memory_->put(key, MemorySource(data), put);
    EXPECT_TRUE(info.ok());
    return *info;
  }

  size_t Records() {
    auto left = staging_->AttrsLeftovers();
    return left.ok() ? left->size() : 0;
  }

  std::string dir_;
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultInjectingStore> faults_ = std::make_shared<FaultInjectingStore>(memory_);
  std::unique_ptr<StagingArea> staging_;
  std::unique_ptr<MetadataCoalescer> coalescer_;
  std::vector<std::string> log_;
  std::vector<std::string> invalidated_;
};

TEST_F(MetadataCoalescerTest, AHeldChangeHasACrashRecordUntilForgotten) {
  ObjectInfo object = Put("f", "data");
  std::optional<HeldChange> held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(Records(), 1u);
  MetadataCoalescer::Forget(held);
  EXPECT_FALSE(held.has_value());
  EXPECT_EQ(Records(), 0u);
}

TEST_F(MetadataCoalescerTest, NoETagNoHold) {
  ObjectInfo object;
  EXPECT_FALSE(coalescer_->Hold("f", object, false, {{"mode", "33152"}}).has_value());
  EXPECT_EQ(Records(), 0u);
}

TEST_F(MetadataCoalescerTest, ApplyReplacesTheMetadataAndKeepsTheBytes) {
  ObjectInfo object = Put("f", "data", {{"mode", "33188"}});
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  ASSERT_TRUE(coalescer_->Join(*held, "f", {{"mode", "33152"}, {"uid", "7"}}).ok());
  auto applied = coalescer_->Apply(*held, "f");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->outcome, MetadataCoalescer::Outcome::kApplied);
  auto now = memory_->head("f");
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->metadata, (Metadata{{"mode", "33152"}, {"uid", "7"}}));
  EXPECT_EQ(memory_->contents("f"), "data");
  EXPECT_EQ(applied->info.size, 4u);
  EXPECT_EQ(applied->info.metadata, now->metadata);
}

// Last writer wins, as for bytes: an object replaced elsewhere gets the change too, and the
// crash record follows the new ETag (the next mount would otherwise drop the change).
TEST_F(MetadataCoalescerTest, AReplacedObjectGetsTheChangeToo) {
  ObjectInfo object = Put("f", "old");
  auto held = coalescer_->Hold("f", object, false, {{"mode", "33152"}});
  ObjectInfo replaced = Put("f", "new!");
  faults_->FailNth(StoreOp::kSetAttributes, 1, PreconditionFailedError("changed"));
  auto applied = coalescer_->Apply(*held, "f");
  ASSERT_TRUE(applied.ok()) << applied.status().ToString();
  EXPECT_EQ(applied->outcome, MetadataCoalescer::Outcome::kApplied);
  EXPECT_EQ(memory_->contents("f"), "new!");
  EXPECT_EQ(memory_->head("f")->metadata.at("mode"), "33152");
  EXPECT_EQ(held->object.etag, replaced.etag);
  auto left = staging_->AttrsLeftovers();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].etag, replaced.etag);
  EXPECT_EQ(invalidated_, std::vector<std::string>{"f"});
}

TEST_F(MetadataCoalescerTest, ARemovedObjectDropsTheChange) {
  ObjectInfo object = Put("f", "data");
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  ASSERT_TRUE(memory_->remove("f").ok());
  auto applied = coalescer_->Apply(*held, "f");
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->outcome, MetadataCoalescer::Outcome::kGone);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("dropping a metadata change of f"), std::string::npos);
  EXPECT_FALSE(memory_->head("f").ok());  // not brought back
}

TEST_F(MetadataCoalescerTest, APermanentRefusalIsReportedNotRetried) {
  ObjectInfo object = Put("f", "data");
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  faults_->FailAll(StoreOp::kSetAttributes,
                   Status(StatusCode::kInvalidArgument, "too large", "MetadataTooLarge"));
  auto applied = coalescer_->Apply(*held, "f");
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(applied->outcome, MetadataCoalescer::Outcome::kRefused);
  EXPECT_EQ(applied->reason.server_code(), "MetadataTooLarge");
}

TEST_F(MetadataCoalescerTest, AFailureThatMayPassKeepsTheChange) {
  ObjectInfo object = Put("f", "data");
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  faults_->FailNth(StoreOp::kSetAttributes, 1, TransientError("503 SlowDown"));
  auto applied = coalescer_->Apply(*held, "f");
  EXPECT_FALSE(applied.ok());
  EXPECT_TRUE(held.has_value());
  EXPECT_EQ(Records(), 1u);
  applied = coalescer_->Apply(*held, "f");
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(memory_->head("f")->metadata.at("mode"), "33152");
}

// A writer took the file over: the data carries the change, and the record stays (for the
// object as it was) until that data is accepted.
TEST_F(MetadataCoalescerTest, CarryMovesTheRecordToTheData) {
  ObjectInfo object = Put("f", "data");
  std::optional<HeldChange> held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  CarriedChange carried;
  MetadataCoalescer::Carry(held, carried);
  EXPECT_FALSE(held.has_value());
  ASSERT_TRUE(static_cast<bool>(carried));
  EXPECT_EQ(carried.etag, object.etag);
  EXPECT_EQ(carried.metadata.at("mode"), "33152");
  EXPECT_EQ(Records(), 1u);
  MetadataCoalescer::Forget(carried);
  EXPECT_EQ(Records(), 0u);
}

TEST_F(MetadataCoalescerTest, RecoverAppliesWhatACrashLeft) {
  ObjectInfo object = Put("f", "data");
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  ASSERT_TRUE(held.has_value());
  held->record.reset();  // a crash: the record stays, nothing was applied
  coalescer_ = NewCoalescer();
  ASSERT_TRUE(coalescer_->Recover().ok());
  EXPECT_EQ(memory_->head("f")->metadata.at("mode"), "33152");
  EXPECT_EQ(Records(), 0u);
}

TEST_F(MetadataCoalescerTest, RecoverNeverAppliesAChangeToANewerObject) {
  ObjectInfo object = Put("f", "data");
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  held->record.reset();
  Put("f", "another client's", {{"mode", "33188"}});
  coalescer_ = NewCoalescer();
  ASSERT_TRUE(coalescer_->Recover().ok());
  EXPECT_EQ(memory_->head("f")->metadata.at("mode"), "33188");
  EXPECT_EQ(Records(), 0u);
}

TEST_F(MetadataCoalescerTest, RecoverKeepsTheRecordWhenTheServerFails) {
  ObjectInfo object = Put("f", "data");
  auto held = coalescer_->Hold("f", object, true, {{"mode", "33152"}});
  held->record.reset();
  faults_->FailAll(StoreOp::kHead, TransientError("503"));
  coalescer_ = NewCoalescer();
  EXPECT_FALSE(coalescer_->Recover().ok());
  EXPECT_EQ(Records(), 1u);
  faults_->Clear();
  ASSERT_TRUE(coalescer_->Recover().ok());
  EXPECT_EQ(memory_->head("f")->metadata.at("mode"), "33152");
}

TEST(ChangedMetadataNamesTest, NamesAttributesAndMetadata) {
  EXPECT_EQ(ChangedMetadataNames({{"mode", "1"}, {"uid", "2"}}, {{"mode", "3"}, {"gid", "4"}}),
            "gid, mode, uid");
}

TEST(ChangedMetadataNamesTest, LeavesOutKeptHeaders) {
  EXPECT_EQ(ChangedMetadataNames({{"mode", "1"}}, {{"mode", "3"}, {":content-type", "text/plain"}}),
            "mode");
}

}  // namespace
}  // namespace objfs
