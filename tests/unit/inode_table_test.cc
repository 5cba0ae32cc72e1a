// InodeTable: numbers and names, and the per-inode state that only inodes in use get.
#include "fs/inode_table.h"

#include "gtest/gtest.h"

namespace objfs {
namespace {

// A listing acquires an inode per name; only the few that are opened or written need an Inode,
// so a huge directory costs a number and a name per entry.
TEST(InodeTableTest, StateIsMadeOnlyForInodesInUse) {
  InodeTable table;
  const uint64_t listed = table.Acquire("d/listed", 1);
  const uint64_t opened = table.Acquire("d/opened", 1);
  EXPECT_EQ(table.Find(listed), nullptr);
  std::shared_ptr<Inode> state = table.Get(opened);
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(table.Find(opened), state);
  EXPECT_EQ(table.Get(opened), state);
  EXPECT_EQ(table.Find(listed), nullptr);
  EXPECT_NE(table.Find(kRootIno), nullptr);
  EXPECT_EQ(table.Get(12345), nullptr);

  // An inode with an open handle outlives the kernel's references; one without state does not.
  state->open_handles.fetch_add(1);
  table.Forget(opened, 1);
  table.Forget(listed, 1);
  EXPECT_EQ(table.KeyOf(opened), "d/opened");
  EXPECT_EQ(table.KeyOf(listed), std::nullopt);
  state->has_local_data.store(true);
  auto local = table.WithLocalData("d");
  ASSERT_EQ(local.size(), 1u);
  EXPECT_EQ(local[0].first, opened);
}

// Versions this mount gave the same bytes chain; another key's, or a version never retagged,
// have none; a handle follows only the retags noted after it learnt its version (one that came
// back since is not the retagged one); only the last kMaxRetagged are kept.
TEST(InodeTableTest, RetaggedVersionsFollowTheChainOfTheirKey) {
  Inode inode;
  MutexLock lock(&inode.mu);
  auto tag = [](const std::string& value) { return ETag::Parse(value); };
  NoteRetagged(inode, "f", tag("v1"), tag("v2"));
  const uint64_t after_first = inode.retag_serial.load();
  NoteRetagged(inode, "f", tag("v2"), tag("v3"));
  NoteRetagged(inode, "g", tag("v3"), tag("v4"));
  NoteRetagged(inode, "f", tag("x"), tag("x"));  // no change: nothing noted
  EXPECT_EQ(inode.retag_serial.load(), 3u);
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("v1"), 0), tag("v3"));
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("v2"), 0), tag("v3"));
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("v3"), 0), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "g", tag("v1"), 0), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("x"), 0), ETag());
  // Learnt after the first retag: v1 is another version that came back, not the retagged one.
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("v1"), after_first), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("v2"), after_first), tag("v3"));
  for (size_t i = 0; i < Inode::kMaxRetagged; ++i) {
    NoteRetagged(inode, "h", tag("h" + std::to_string(i)), tag("h" + std::to_string(i + 1)));
  }
  EXPECT_EQ(inode.retagged.size(), Inode::kMaxRetagged);
  EXPECT_EQ(RetaggedVersion(inode, "f", tag("v1"), 0), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "h", tag("h0"), 0),
            tag("h" + std::to_string(Inode::kMaxRetagged)));
}

}  // namespace
}  // namespace objfs
