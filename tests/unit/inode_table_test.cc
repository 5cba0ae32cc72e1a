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

}  // namespace
}  // namespace objfs
