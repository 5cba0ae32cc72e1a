// A directory's rename on an object store, over the in-memory store: what moves, the bound, and
// that nothing is removed unless every copy succeeded.
#include "fs/directory_move.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/fake/memory_store.h"
#include "backend/fault_injecting_store.h"
#include "cache/io_pool.h"

namespace objfs {
namespace {

class DirectoryMoveTest : public ::testing::Test {
 protected:
  void Put(const std::string& key, const std::string& data) {
    ASSERT_TRUE(memory_->put(key, MemorySource(data), {}).ok());
  }
  bool Exists(const std::string& key) { return memory_->head(key).ok(); }
  Status Move(bool has_marker, size_t max_objects = 100) {
    return MoveDirectoryObjects(
        *faults_, pool_, "a", "b", has_marker, max_objects,
        [this](LogLevel, const std::string& line) { log_.push_back(line); });
  }

  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>();
  std::shared_ptr<FaultInjectingStore> faults_ = std::make_shared<FaultInjectingStore>(memory_);
  IoPool pool_{4};
  std::vector<std::string> log_;
};

TEST_F(DirectoryMoveTest, EveryObjectMovesWithTheMarker) {
  Put("a/", "");
  Put("a/f", "1");
  Put("a/sub/g", "2");
  Put("ab", "not under a/");
  ASSERT_TRUE(Move(/*has_marker=*/true).ok());
  EXPECT_EQ(memory_->contents("b/f"), "1");
  EXPECT_EQ(memory_->contents("b/sub/g"), "2");
  EXPECT_TRUE(Exists("b/"));
  EXPECT_FALSE(Exists("a/f"));
  EXPECT_FALSE(Exists("a/sub/g"));
  EXPECT_FALSE(Exists("a/"));
  EXPECT_TRUE(Exists("ab"));
  EXPECT_TRUE(log_.empty());
}

TEST_F(DirectoryMoveTest, AnUnlistedMarkerIsRemovedToo) {
  Put("a/f", "1");
  ASSERT_TRUE(Move(/*has_marker=*/false).ok());
  EXPECT_EQ(memory_->contents("b/f"), "1");
  EXPECT_FALSE(Exists("a/f"));
}

TEST_F(DirectoryMoveTest, AFailedCopyRemovesNothing) {
  Put("a/f", "1");
  Put("a/g", "2");
  faults_->FailNth(StoreOp::kCopy, 2, TransientError("503"));
  Status moved = Move(true);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(faults_->calls(StoreOp::kRemoveMany) + faults_->calls(StoreOp::kRemove), 0);
  EXPECT_EQ(memory_->contents("a/f"), "1");
  EXPECT_EQ(memory_->contents("a/g"), "2");
}

TEST_F(DirectoryMoveTest, OverTheBoundIsRefusedBeforeAnyCopyAndLogged) {
  Put("a/1", "x");
  Put("a/2", "x");
  Put("a/3", "x");
  Status moved = Move(true, /*max_objects=*/2);
  EXPECT_EQ(moved.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(faults_->calls(StoreOp::kCopy), 0);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("max_rename_objects"), std::string::npos);
  EXPECT_TRUE(Exists("a/1"));
}

}  // namespace
}  // namespace objfs
