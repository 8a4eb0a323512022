// Checkpoints of a ShardedModel and its FlatAdamW that survive a change of the rank count,
// and Hugging Face checkpoints written and read shard by shard.
//
// save: each rank's shards -> dir/rank-<r>-of-<N>.safetensors -> barrier -> rank 0 writes
//   dir/manifest.json last; load at any N: manifest -> each rank reads only the old ranks'
//   element ranges that overlap its new shards
//
// On-disk layout of a sharded checkpoint directory:
//   rank-<r>-of-<N>.safetensors  one per old rank r; for every unit u (ShardedModel's units:
//       "root", "layer 0", ...) three F32 tensors of k_u = padded_u / N elements:
//       "<u>/param", "<u>/exp_avg", "<u>/exp_avg_sq": elements [r * k_u, (r + 1) * k_u) of
//       the unit's flat layout (the tail past numel_u is padding, zero). Metadata: format
//       "rlforge-sharded-v1", rank, world_size, steps.
//   manifest.json  {"format": "rlforge-sharded-v1", "world_size": N, "steps": optimizer steps,
//       "files": [rank file names], "units": [{"name", "numel", "padded", "params":
//       [{"name" (HF), "shape", "offset", "numel"}]}], "config_json": the model's config.json}
// The manifest is written after every rank file is in place (fsync'ed, renamed), so a
// directory without it is an incomplete checkpoint and loading says so. Saving first removes
// an old manifest from the directory; give each checkpoint its own directory.
//
// Hugging Face output: SaveHfConsolidated gathers unit by unit and rank 0 writes each unit's
// parameters into model.safetensors through SafetensorsWriter (never more than one unit held
// on any rank), config.json last. LoadHfShards reads only this rank's slice of every unit.
//
// Every function here is collective: every rank of m.comm() calls it, in the same order, and
// all ranks return an error if any failed (the failing rank's names the file and tensor).
// One thread per rank, as ShardedModel.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/file_system.h"
#include "common/setup_progress.h"
#include "trainer/flat_adamw.h"
#include "trainer/sharded_model.h"

namespace rlforge {

// What one rank read from disk while loading.
struct ShardReadStats {
  int64_t bytes_read = 0;  // tensor bytes copied out of the files
};

// Writes this rank's shards of parameters and AdamW moments (opt must have adopted
// m.shard_data() and m.shard_grad()) and, on rank 0, the manifest. Creates `dir`. Every
// file operation goes through `fs`: a failure (ENOSPC, EIO) is an error naming the file,
// the operation and errno's text on the rank that met it, and leaves `dir` without a manifest.
absl::Status SaveShardedState(const std::string& dir, ShardedModel& m, const FlatAdamW& opt,
                              FileSystem& fs = FileSystem::Default());

// Fills this rank's shards of parameters and both moments from a checkpoint written at any
// rank count, and opt's step count. The units and parameters must match m's exactly (names,
// shapes, offsets); errors name the unit or parameter and the directory.
absl::Status LoadShardedState(const std::string& dir, ShardedModel& m, FlatAdamW& opt,
                              ShardReadStats* stats = nullptr);

// Writes dir/model.safetensors (HF names, `dtype` fp32 or bf16, value head included when m
// has one) and
// dir/config.json, as models::SaveHfModel of the unsharded model would.
absl::Status SaveHfConsolidated(const std::string& dir, ShardedModel& m,
                                torch::Dtype dtype = torch::kFloat32);

// Fills this rank's parameter shards from a Hugging Face checkpoint directory (one
// model.safetensors or an index and its shards; fp32 or bf16). config.json must agree with
// m's layer count; every parameter of m must be present with its shape, except a value head
// (value_head.*), which starts at zero when absent (a critic made from a policy checkpoint).
// Tensors m has no parameter for are skipped. Optimizer state is left alone. `progress` hears
// "<what> N%" (of this rank's bytes) as tensors are read.
absl::Status LoadHfShards(const std::string& model_dir, ShardedModel& m,
                          ShardReadStats* stats = nullptr, const SetupProgress& progress = {},
                          const std::string& what = "loading model");

}  // namespace rlforge
