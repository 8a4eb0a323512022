// How many threads a process computes with, for both of its thread pools.
//
// libtorch's intra-op pool (torch::set_num_threads) does not reach OpenBLAS's
// own pthread pool, which libtorch's CPU matmuls and the fused PPO update call
// through sgemm. Left alone, OpenBLAS runs one thread per core in every actor
// process: two trainers' or a trainer's and a worker's pools then fight over
// the same cores, and small matrices pay thread hand-offs (measured: the
// CartPole PPO update takes 13.0 ms with 2 BLAS threads, 8.7 ms with 1).
#pragma once

#include <cstdint>

namespace rlforge {

// Sets both pools to `threads`; 0 divides this host's cores among `ranks`
// (trainer.threads' meaning). Returns the count set.
int SetComputeThreads(int64_t threads, int64_t ranks = 1);

}  // namespace rlforge
