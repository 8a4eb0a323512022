#include "cli/setup_checks.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "reward/reward_set.h"
#include "sim_bridge/env.h"
#include "weights/weight_transport.h"

namespace rlforge {

namespace {

namespace fs = std::filesystem;

bool Reads(const JobConfig& c, const std::string& section) {
  const auto& s = c.job.algorithm->sections;
  return std::find(s.begin(), s.end(), section) != s.end();
}

// " (relative to the working directory: /abs/path)" for a relative path, "" for an absolute one.
std::string WhereRelative(const std::string& path) {
  if (!fs::path(path).is_relative()) return "";
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  return absl::StrCat(
      " (relative to the working directory: ", ec ? path : abs.lexically_normal().string(), ")");
}

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The files models/hf_checkpoint.h and models/tokenizer.h load from a checkpoint directory that
// `dir` lacks: config.json, model.safetensors or the index and every shard it lists,
// tokenizer.json. Empty when none is missing.
std::vector<std::string> MissingCheckpointFiles(const fs::path& dir) {
  std::vector<std::string> missing;
  if (!IsFile(dir / "config.json")) missing.push_back("config.json");
  const fs::path index = dir / "model.safetensors.index.json";
  if (IsFile(index)) {
    std::ifstream in(index);
    const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
      missing.push_back("a weight_map in model.safetensors.index.json");
    } else {
      std::vector<std::string> shards;
      for (const auto& [name, file] : json["weight_map"].items()) {
        if (!file.is_string()) continue;  // the loader names such an entry itself
        const std::string shard = file.get<std::string>();
        if (std::find(shards.begin(), shards.end(), shard) == shards.end()) {
          shards.push_back(shard);
        }
      }
      for (const std::string& shard : shards) {
        if (!IsFile(dir / shard)) missing.push_back(shard + " (listed in its index)");
      }
    }
  } else if (!IsFile(dir / "model.safetensors")) {
    missing.push_back("model.safetensors (or model.safetensors.index.json and its shards)");
  }
  if (!IsFile(dir / "tokenizer.json")) missing.push_back("tokenizer.json");
  return missing;
}

// Families whose trainer and engines load model.path (never a model from scratch).
bool StartsFromCheckpoint(const JobConfig& c) {
  switch (c.job.algorithm->family) {
    case AlgorithmFamily::kLmRl:
    case AlgorithmFamily::kDpo:
      return true;
    case AlgorithmFamily::kEcho:
    case AlgorithmFamily::kControlPpo:
    case AlgorithmFamily::kSft:
      return false;
  }
  return false;
}

void CheckModel(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !Reads(c, "model") || EveryRoleJoins(c.launch)) return;
  const std::string& path = c.model.path;
  if (path.empty()) {
    if (StartsFromCheckpoint(c)) {
      ctx.Error("model.path",
                absl::StrCat("job.algorithm ", c.job.algorithm->name,
                             " starts from a checkpoint: set model.path (e.g. the SFT stage's "
                             "runs/<name>/checkpoints/step_<N>)"));
    }
    return;
  }
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    // model.init_job writes it first (its job file is checked with the schema).
    if (!c.model.init_job.empty() && !fs::exists(path, ec)) return;
    ctx.Error("model.path",
              absl::StrCat("'", path, "' is not a checkpoint directory", WhereRelative(path),
                           "; job.algorithm ", c.job.algorithm->name,
                           " loads its model from one (e.g. the SFT stage's "
                           "runs/<name>/checkpoints/step_<N>; set model.init_job to train it "
                           "first)"));
    return;
  }
  const std::vector<std::string> missing = MissingCheckpointFiles(path);
  if (!missing.empty()) {
    ctx.Error("model.path",
              absl::StrCat("'", path, "' is not a complete checkpoint: no ",
                           absl::StrJoin(missing, ", no "), " (docs/bring_your_own_model.md)"));
  }
}

void CheckData(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !Reads(c, "data") || c.data.source != DataSource::kJsonl ||
      EveryRoleJoins(c.launch)) {
    return;
  }
  for (const auto& [key, path] : {std::pair{"data.train_path", &c.data.train_path},
                                  std::pair{"data.heldout_path", &c.data.heldout_path}}) {
    if (!path->empty() && !IsFile(*path)) {
      ctx.Error(key, absl::StrCat("no file '", *path, "'", WhereRelative(*path)));
    }
  }
}

void CheckRewards(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !Reads(c, "reward")) return;
  // Workers that join from other hosts load their plugins there.
  const bool files_here = !c.reward.external && !EveryRoleJoins(c.launch);
  for (size_t i = 0; i < c.reward.rewards.size(); ++i) {
    for (const reward::RewardSpecProblem& p : reward::CheckRewardSpec(c.reward.rewards[i])) {
      if (p.key == "params.path" && !files_here) continue;
      ctx.Error(absl::StrCat("reward.rewards[", i, "].", p.key), p.message);
    }
  }
}

// Built-in envs step in the rollout worker (inprocess) or in `rlforge sim-server` (server with
// no sim.command); other servers serve whatever ids they know.
void CheckEnv(const JobConfig& c, config::CheckContext& ctx) {
  if (c.job.algorithm == nullptr || !Reads(c, "env")) return;
  const bool builtin = c.sim.backend == SimBackend::kInprocess ||
                       (c.sim.backend == SimBackend::kServer && c.sim.command.empty());
  if (!builtin) return;
  auto env = sim::MakeEnv(c.env.id);
  if (!env.ok()) ctx.Error("env.id", std::string(env.status().message()));
}

}  // namespace

std::vector<JobCheck> SetupChecks() {
  return {CheckModel, CheckData, CheckRewards, CheckEnv, CheckWeightTransport};
}

}  // namespace rlforge
