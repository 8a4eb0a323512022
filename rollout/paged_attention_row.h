// The per-row arguments of the paged-attention kernel, shared by its
// baseline and AVX2 builds (paged_attention_row.inc).
#pragma once

#include <cstdint>

namespace rlforge::paged {

struct RowArgs {
  const float* q;       // [heads, dim] of this row
  const float* k_pool;  // [slots, kv_heads, dim]
  const float* v_pool;
  const int32_t* table;  // the row's sequence's block table
  int64_t block_size, ctx, skip_from, skip;
  int64_t heads, kv_heads, dim;
  float scale;
  float* scores;  // scratch [heads, ctx]
  float* acc;     // scratch [heads, dim]
  float* out;     // [heads, dim]
};

// The AVX2 + FMA build of the row kernel; call only when the CPU has both.
void AttendRowAvx2(const RowArgs& a);

}  // namespace rlforge::paged
