// BlockManager: the paged KV cache's bookkeeping (no tensors here).
//
// sequence tokens -> block table (logical block i -> physical block id) -> KV pool slots
//
// The pool holds `num_blocks` blocks of `block_size` token slots. Blocks are
// reference counted so several sequences can share the blocks of a common
// prefix (the n samples of one prompt). A sequence may only write into a
// block it owns alone: before appending into a shared, partially filled
// block, EnsureWritable() copies it (copy-on-write) and reports the copy so
// the caller moves the KV data. Not thread-safe: the engine's step thread
// owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace rlforge {

struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  int32_t num_tokens = 0;  // filled slots to copy
};

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }
  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }

  // Blocks needed to hold `num_tokens` tokens.
  int64_t BlocksFor(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // Grows `table` so it can hold `num_tokens` tokens, where its first
  // `filled_tokens` slots already hold data. Copies a shared last partial
  // block first when new tokens land in it. Returns false (and changes
  // nothing) when the pool lacks free blocks. Copies go to `copies`.
  bool Reserve(std::vector<int32_t>& table, int64_t filled_tokens, int64_t num_tokens,
               std::vector<BlockCopy>& copies);
  // Free blocks needed by Reserve(table, filled, num_tokens).
  int64_t BlocksNeeded(const std::vector<int32_t>& table, int64_t filled_tokens,
                       int64_t num_tokens) const;

  // Another reference to every block of `table` (prefix sharing).
  std::vector<int32_t> Fork(const std::vector<int32_t>& table);
  // Drops one reference to each block; blocks reaching zero return to the pool.
  void Release(std::vector<int32_t>& table);

 private:
  int32_t Allocate();

  int64_t block_size_;
  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> free_;  // stack of free block ids
};

}  // namespace rlforge
