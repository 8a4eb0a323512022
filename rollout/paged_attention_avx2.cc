// The row kernel of paged attention built for AVX2 + FMA (8-wide, fused
// multiply-add); paged_attention.cc picks it at run time when the CPU has both.
#include "common/fast_math.h"
#include "rollout/paged_attention_row.h"

namespace rlforge::paged {
namespace {
#include "rollout/paged_attention_row.inc"
}  // namespace

void AttendRowAvx2(const RowArgs& a) { AttendRow(a); }

}  // namespace rlforge::paged
