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

// Self-copies that gave the same bytes new ETags chain; another key's, or a version never
// retagged, have none; only the last kMaxRetagged are kept.
TEST(InodeTableTest, RetaggedVersionsFollowTheChainOfTheirKey) {
  Inode inode;
  MutexLock lock(&inode.mu);
  NoteRetagged(inode, "f", ETag::Parse("a"), ETag::Parse("b-1"));
  NoteRetagged(inode, "f", ETag::Parse("b-1"), ETag::Parse("c-1"));
  NoteRetagged(inode, "g", ETag::Parse("c-1"), ETag::Parse("d-1"));
  NoteRetagged(inode, "f", ETag::Parse("x"), ETag::Parse("x"));  // no change: nothing noted
  EXPECT_EQ(RetaggedVersion(inode, "f", ETag::Parse("a")), ETag::Parse("c-1"));
  EXPECT_EQ(RetaggedVersion(inode, "f", ETag::Parse("b-1")), ETag::Parse("c-1"));
  EXPECT_EQ(RetaggedVersion(inode, "f", ETag::Parse("c-1")), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "g", ETag::Parse("a")), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "f", ETag::Parse("x")), ETag());
  for (size_t i = 0; i < Inode::kMaxRetagged; ++i) {
    NoteRetagged(inode, "h", ETag::Parse("h" + std::to_string(i)),
                 ETag::Parse("h" + std::to_string(i + 1)));
  }
  EXPECT_EQ(RetaggedVersion(inode, "f", ETag::Parse("a")), ETag());
  EXPECT_EQ(RetaggedVersion(inode, "h", ETag::Parse("h0")),
            ETag::Parse("h" + std::to_string(Inode::kMaxRetagged)));
}

}  // namespace
}  // namespace objfs
