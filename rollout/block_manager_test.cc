#include "rollout/block_manager.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

TEST(BlockManager, ReserveGrowsTableAndReleaseReturnsBlocks) {
  BlockManager bm(8, 4);
  std::vector<int32_t> table;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.Reserve(table, 0, 9, copies));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(bm.num_free(), 5);
  ASSERT_TRUE(bm.Reserve(table, 9, 12, copies));  // fits in the third block
  EXPECT_EQ(table.size(), 3u);
  EXPECT_TRUE(copies.empty());
  bm.Release(table);
  EXPECT_EQ(bm.num_free(), 8);
  EXPECT_TRUE(table.empty());
}

TEST(BlockManager, ReserveFailsWithoutChangingAnything) {
  BlockManager bm(2, 4);
  std::vector<int32_t> table;
  std::vector<BlockCopy> copies;
  EXPECT_FALSE(bm.Reserve(table, 0, 9, copies));
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(bm.num_free(), 2);
}

TEST(BlockManager, ForkSharesAndCopyOnWriteCopiesOnlyThePartialBlock) {
  BlockManager bm(16, 4);
  std::vector<int32_t> prompt;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.Reserve(prompt, 0, 6, copies));  // one full block, one partial (2 of 4)
  std::vector<int32_t> a = bm.Fork(prompt);
  std::vector<int32_t> b = bm.Fork(prompt);
  bm.Release(prompt);  // the prompt's own reference goes; a and b keep the blocks
  EXPECT_EQ(bm.num_used(), 2);
  EXPECT_EQ(bm.ref_count(a[0]), 2);

  ASSERT_TRUE(bm.Reserve(a, 6, 7, copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, b[1]);
  EXPECT_EQ(copies[0].num_tokens, 2);
  EXPECT_NE(a[1], b[1]);
  EXPECT_EQ(a[0], b[0]);  // the full block stays shared
  // b is now the only owner of the old partial block: it writes in place.
  copies.clear();
  ASSERT_TRUE(bm.Reserve(b, 6, 7, copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(bm.num_used(), 3);
  bm.Release(a);
  bm.Release(b);
  EXPECT_EQ(bm.num_free(), 16);
}

TEST(BlockManager, PromptShorterThanABlockIsShared) {
  BlockManager bm(4, 16);
  std::vector<int32_t> prompt;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.Reserve(prompt, 0, 5, copies));
  std::vector<std::vector<int32_t>> samples;
  for (int i = 0; i < 3; ++i) samples.push_back(bm.Fork(prompt));
  bm.Release(prompt);
  EXPECT_EQ(bm.num_used(), 1);
  EXPECT_EQ(bm.BlocksNeeded(samples[0], 5, 6), 1);  // copy-on-write
}

TEST(BlockManager, BlocksNeededCountsTheCopy) {
  BlockManager bm(3, 4);
  std::vector<int32_t> t;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(bm.Reserve(t, 0, 3, copies));
  auto f = bm.Fork(t);
  EXPECT_EQ(bm.BlocksNeeded(f, 3, 5), 2);  // copy of the partial block + one new block
  EXPECT_EQ(bm.BlocksNeeded(f, 3, 3), 0);
}

}  // namespace
}  // namespace rlforge
