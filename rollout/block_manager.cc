#include "rollout/block_manager.h"

#include "common/check.h"

namespace rlforge {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size), ref_counts_(num_blocks, 0) {
  RF_CHECK(num_blocks > 0 && block_size > 0);
  free_.reserve(num_blocks);
  // Low ids on top of the stack, so allocation order is easy to read in tests.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t BlockManager::Allocate() {
  RF_CHECK(!free_.empty());
  int32_t b = free_.back();
  free_.pop_back();
  ref_counts_[b] = 1;
  return b;
}

int64_t BlockManager::BlocksNeeded(const std::vector<int32_t>& table, int64_t filled_tokens,
                                   int64_t num_tokens) const {
  int64_t needed = BlocksFor(num_tokens) - static_cast<int64_t>(table.size());
  if (needed < 0) needed = 0;
  // New tokens land in a shared partial last block: it must be copied.
  if (num_tokens > filled_tokens && filled_tokens % block_size_ != 0) {
    int64_t last = filled_tokens / block_size_;
    if (last < static_cast<int64_t>(table.size()) && ref_counts_[table[last]] > 1) ++needed;
  }
  return needed;
}

bool BlockManager::Reserve(std::vector<int32_t>& table, int64_t filled_tokens,
                           int64_t num_tokens, std::vector<BlockCopy>& copies) {
  if (BlocksNeeded(table, filled_tokens, num_tokens) > num_free()) return false;
  if (num_tokens > filled_tokens && filled_tokens % block_size_ != 0) {
    int64_t last = filled_tokens / block_size_;
    if (last < static_cast<int64_t>(table.size()) && ref_counts_[table[last]] > 1) {
      int32_t copy = Allocate();
      copies.push_back({table[last], copy, static_cast<int32_t>(filled_tokens % block_size_)});
      --ref_counts_[table[last]];
      table[last] = copy;
    }
  }
  while (static_cast<int64_t>(table.size()) < BlocksFor(num_tokens)) table.push_back(Allocate());
  return true;
}

std::vector<int32_t> BlockManager::Fork(const std::vector<int32_t>& table) {
  for (int32_t b : table) {
    RF_CHECK(ref_counts_[b] > 0);
    ++ref_counts_[b];
  }
  return table;
}

void BlockManager::Release(std::vector<int32_t>& table) {
  for (int32_t b : table) {
    RF_CHECK(ref_counts_[b] > 0);
    if (--ref_counts_[b] == 0) free_.push_back(b);
  }
  table.clear();
}

}  // namespace rlforge
