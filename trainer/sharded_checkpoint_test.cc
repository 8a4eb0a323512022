#include "trainer/sharded_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fault_injection_file_system.h"
#include "dist/local_group.h"
#include "models/hf_checkpoint.h"
#include "models/safetensors.h"

namespace rlforge {
namespace {

namespace fs = std::filesystem;
using Values = std::map<std::string, torch::Tensor>;

models::TransformerConfig TinyConfig(int64_t layers = 3, int64_t intermediate = 25) {
  models::TransformerConfig c;
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.intermediate_size = intermediate;  // 25: a layer is 2000 values, padded when split in 3
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  return c;
}

std::mutex construction_mu;  // module construction draws from the global generator

// A model of `config`, its values drawn from `seed`.
models::Transformer SeededModel(uint64_t seed, const models::TransformerConfig& config) {
  std::lock_guard<std::mutex> l(construction_mu);
  torch::manual_seed(seed);
  return models::Transformer(config);
}

Values ValuesOf(const models::Transformer& m) {
  Values v;
  for (const auto& p : m->named_parameters()) v[p.key()] = p.value().detach().clone();
  return v;
}

std::string FreshDir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("rlforge_ckpt_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  return dir.string();
}

struct RankState {
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<FlatAdamW> adam;
};

RankState MakeRank(uint64_t seed, dist::Communicator& comm,
                   const models::TransformerConfig& config = TinyConfig()) {
  auto m = ShardedModel::Create(SeededModel(seed, config), &comm, {});
  EXPECT_TRUE(m.ok()) << m.status();
  FlatAdamW::Options ao;
  ao.lr = 1e-2;
  ao.weight_decay = 0.01;
  auto adam = std::make_unique<FlatAdamW>((*m)->shard_data(), (*m)->shard_grad(), ao);
  return {std::move(*m), std::move(adam)};
}

// One AdamW step of next-token cross-entropy on a 7-row batch split over the ranks; returns
// the global loss (token mean). The batch is drawn from the optimizer's step count, so a
// resumed run sees the batches the uninterrupted one saw.
double Step(RankState& s, dist::Communicator& comm) {
  at::Generator gen = at::detail::createCPUGenerator(100 + s.adam->steps());
  const torch::Tensor tokens = torch::randint(0, 37, {7, 9}, gen, torch::kLong);
  ShardedModel& m = *s.model;
  m.ZeroGrad();
  const int64_t r0 = 7 * comm.rank() / comm.size(), r1 = 7 * (comm.rank() + 1) / comm.size();
  const torch::Tensor rows = tokens.narrow(0, r0, r1 - r0);
  m.BeginForward();
  const int64_t b = rows.size(0);
  const torch::Tensor pos = torch::arange(9, torch::kLong).expand({b, 9}).contiguous();
  const torch::Tensor logits =
      m.module()->Logits(m.module()->Hidden(rows, pos, torch::zeros({b, 9}, torch::kLong)));
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(
          logits.narrow(1, 0, 8).reshape({-1, 37}), rows.narrow(1, 1, 8).reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
      (7.0 * 8);
  loss.backward();
  EXPECT_TRUE(m.FinishBackward().ok());
  torch::Tensor l = loss.detach().to(torch::kFloat).reshape({1});
  EXPECT_TRUE(comm.AllReduceSum(l)->Wait().ok());
  s.adam->ClipGradNorm(1.0, &comm);
  s.adam->Step();
  return l.item<double>();
}

Values Gathered(ShardedModel& m) {
  Values out;
  EXPECT_TRUE(m.GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
                 for (const auto& p : unit.params) {
                   out[p.name] = flat.narrow(0, p.offset, p.numel).view(p.shape).clone();
                 }
                 return absl::OkStatus();
               }).ok());
  return out;
}

struct Curve {
  std::vector<double> losses;
  Values final_values;
  std::vector<int64_t> bytes_read;  // by rank, while loading
};

// Runs `steps` steps at `ranks` ranks after `prepare` (save, load, ...) on each rank.
Curve RunSteps(int ranks, int steps, const std::function<void(RankState&, Curve&)>& prepare) {
  Curve out;
  out.bytes_read.resize(ranks);
  std::mutex mu;
  const absl::Status s = dist::RunLocalGroup(ranks, [&](dist::Communicator& comm) {
    RankState state = MakeRank(/*seed=*/99, comm);
    Curve mine;
    mine.bytes_read.resize(ranks);
    prepare(state, mine);
    for (int i = 0; i < steps; ++i) mine.losses.push_back(Step(state, comm));
    Values final_values = Gathered(*state.model);
    std::lock_guard<std::mutex> l(mu);
    out.bytes_read[comm.rank()] = mine.bytes_read[comm.rank()];
    if (comm.rank() == 0) {
      out.losses = mine.losses;
      out.final_values = std::move(final_values);
    }
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

void ExpectSameCurve(const Curve& got, const Curve& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << "step " << i;
  }
  ASSERT_EQ(got.final_values.size(), want.final_values.size());
  for (const auto& [name, w] : want.final_values) {
    const torch::Tensor& g = got.final_values.at(name);
    EXPECT_LE((g - w).norm().item<double>(), 1e-5 * w.norm().item<double>()) << name;
  }
}

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_F(ShardedCheckpointTest, WrittenAtTwoRanksResumesAtOneAndThreeOnTheSameLossCurve) {
  const std::string dir = FreshDir("resume");
  // Seed 7, 3 steps, save, 2 more steps: the curve to continue.
  const Curve reference = RunSteps(2, 2, [&](RankState& s, Curve&) {
    RankState fresh = MakeRank(/*seed=*/7, s.model->comm());
    for (int i = 0; i < 3; ++i) Step(fresh, s.model->comm());
    ASSERT_TRUE(SaveShardedState(dir, *fresh.model, *fresh.adam).ok());
    s = std::move(fresh);
  });
  ASSERT_TRUE(fs::exists(dir + "/manifest.json"));
  ASSERT_TRUE(fs::exists(dir + "/rank-1-of-2.safetensors"));
  int64_t checkpoint_bytes = 0;
  for (int r = 0; r < 2; ++r) {
    auto f = models::SafetensorsFile::Open(absl::StrCat(dir, "/rank-", r, "-of-2.safetensors"));
    ASSERT_TRUE(f.ok()) << f.status();
    for (const auto& name : (*f)->names()) {
      checkpoint_bytes += (*f)->Info(name)->end - (*f)->Info(name)->begin;
    }
  }
  for (int n : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " ranks"));
    const Curve resumed = RunSteps(n, 2, [&](RankState& s, Curve& c) {
      ShardReadStats stats;
      ASSERT_TRUE(LoadShardedState(dir, *s.model, *s.adam, &stats).ok());
      EXPECT_EQ(s.adam->steps(), 3);
      c.bytes_read[s.model->comm().rank()] = stats.bytes_read;
    });
    ExpectSameCurve(resumed, reference);
    const int64_t units = TinyConfig().num_hidden_layers + 2;  // embed, layers, head
    for (int r = 0; r < n; ++r) {
      // Its third of every unit's params and moments; no more than a padding element each.
      EXPECT_LE(resumed.bytes_read[r], checkpoint_bytes / n + units * 3 * 4 + 1) << "rank " << r;
      EXPECT_GE(resumed.bytes_read[r], checkpoint_bytes / n - units * 3 * 4 * n) << "rank " << r;
    }
  }
}

TEST_F(ShardedCheckpointTest, ResumingWithoutTheOptimizerStateLeavesTheCurve) {
  // The check above can fail: a fresh optimizer on the saved parameters does not continue it.
  const std::string dir = FreshDir("params_only");
  const Curve reference = RunSteps(2, 2, [&](RankState& s, Curve&) {
    for (int i = 0; i < 3; ++i) Step(s, s.model->comm());
    ASSERT_TRUE(SaveShardedState(dir, *s.model, *s.adam).ok());
  });
  const Curve fresh_adam = RunSteps(3, 2, [&](RankState& s, Curve&) {
    ASSERT_TRUE(LoadShardedState(dir, *s.model, *s.adam).ok());
    s.adam->exp_avg().zero_();
    s.adam->exp_avg_sq().zero_();
  });
  EXPECT_GT(std::abs(fresh_adam.losses[1] - reference.losses[1]), 1e-4 * reference.losses[1]);
}

class ConsolidatedHfTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { torch::set_num_threads(1); }
};

TEST_P(ConsolidatedHfTest, EqualsTheUnshardedModelsSave) {
  const int n = GetParam();
  const std::string want_dir = FreshDir(absl::StrCat("hf_want_", n));
  const std::string got_dir = FreshDir(absl::StrCat("hf_got_", n));
  ASSERT_TRUE(models::SaveHfModel(SeededModel(7, TinyConfig()), want_dir).ok());
  const absl::Status s = dist::RunLocalGroup(n, [&](dist::Communicator& comm) {
    RankState state = MakeRank(/*seed=*/7, comm);
    const absl::Status saved = SaveHfConsolidated(got_dir, *state.model);
    EXPECT_TRUE(saved.ok()) << saved;
  });
  ASSERT_TRUE(s.ok()) << s;
  auto want = models::SafetensorsFile::Open(want_dir + "/model.safetensors");
  auto got = models::SafetensorsFile::Open(got_dir + "/model.safetensors");
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  ASSERT_EQ((*got)->names(), (*want)->names());
  for (const auto& name : (*want)->names()) {
    EXPECT_TRUE(torch::equal(*(*got)->Read(name), *(*want)->Read(name))) << name;
    EXPECT_EQ((*got)->Info(name)->dtype, "F32") << name;
  }
  EXPECT_EQ((*got)->metadata(), (*want)->metadata());
  auto loaded = models::LoadHfModel(got_dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Values want_values = ValuesOf(SeededModel(7, TinyConfig()));
  for (const auto& [name, v] : ValuesOf(*loaded)) EXPECT_TRUE(v.equal(want_values.at(name)));
}

INSTANTIATE_TEST_SUITE_P(Ranks, ConsolidatedHfTest, ::testing::Values(2, 3));

// Qwen3 (q/k norms, attention biases, head_dim != hidden / heads) and Llama 3.x RoPE written
// by two ranks come back with the same config and values.
TEST_F(ShardedCheckpointTest, ConsolidatedQwen3AndLlama3RopeRoundTrip) {
  models::TransformerConfig qwen3 = TinyConfig();
  qwen3.architecture = "Qwen3ForCausalLM";
  qwen3.head_dim = 12;
  qwen3.attention_bias = true;
  qwen3.rope_scaling.type = models::RopeType::kYarn;
  qwen3.rope_scaling.factor = 4;
  qwen3.rope_scaling.original_max_position_embeddings = 16;
  qwen3.rope_scaling.truncate = false;
  models::TransformerConfig llama3 = TinyConfig();
  llama3.rope_scaling.type = models::RopeType::kLlama3;
  llama3.rope_scaling.factor = 8;
  llama3.rope_scaling.low_freq_factor = 1;
  llama3.rope_scaling.high_freq_factor = 4;
  llama3.rope_scaling.original_max_position_embeddings = 32;
  for (const models::TransformerConfig& config : {qwen3, llama3}) {
    const std::string dir = FreshDir("hf_" + config.architecture);
    const absl::Status s = dist::RunLocalGroup(2, [&](dist::Communicator& comm) {
      RankState state = MakeRank(/*seed=*/7, comm, config);
      const absl::Status saved = SaveHfConsolidated(dir, *state.model);
      EXPECT_TRUE(saved.ok()) << saved;
    });
    ASSERT_TRUE(s.ok()) << s;
    auto loaded = models::LoadHfModel(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const models::TransformerConfig& got = (*loaded)->config();
    EXPECT_EQ(models::WriteHfConfig(got, "float32"), models::WriteHfConfig(config, "float32"));
    EXPECT_EQ(got.rope_scaling.type, config.rope_scaling.type);
    const Values want_values = ValuesOf(SeededModel(7, config));
    ASSERT_EQ(ValuesOf(*loaded).size(), want_values.size());
    for (const auto& [name, v] : ValuesOf(*loaded)) EXPECT_TRUE(v.equal(want_values.at(name)));
  }
}

TEST_F(ShardedCheckpointTest, HfCheckpointLoadsStraightIntoThreeShardsReadingAThirdEach) {
  const std::string dir = FreshDir("hf_in");
  ASSERT_TRUE(models::SaveHfModel(SeededModel(7, TinyConfig()), dir).ok());
  auto file = models::SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  int64_t tensor_bytes = 0;
  for (const auto& name : (*file)->names()) {
    tensor_bytes += (*file)->Info(name)->end - (*file)->Info(name)->begin;
  }
  auto reference = models::LoadHfModel(dir);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const Values want = ValuesOf(*reference);
  const absl::Status s = dist::RunLocalGroup(3, [&](dist::Communicator& comm) {
    RankState state = MakeRank(/*seed=*/99, comm);
    ShardReadStats stats;
    const absl::Status loaded = LoadHfShards(dir, *state.model, &stats);
    ASSERT_TRUE(loaded.ok()) << loaded;
    int64_t largest_unit = 0;
    for (const auto& u : state.model->units()) largest_unit = std::max(largest_unit, u.numel * 4);
    EXPECT_LE(stats.bytes_read, tensor_bytes / 3 + largest_unit) << "rank " << comm.rank();
    EXPECT_GT(stats.bytes_read, tensor_bytes / 3 - largest_unit) << "rank " << comm.rank();
    for (const auto& [name, v] : Gathered(*state.model)) {
      EXPECT_TRUE(v.equal(want.at(name))) << name << " on rank " << comm.rank();
    }
  });
  ASSERT_TRUE(s.ok()) << s;
}

TEST_F(ShardedCheckpointTest, HfShardsLoadFromAnIndexAndBf16Files) {
  const std::string dir = FreshDir("hf_index");
  models::Transformer bf16 = SeededModel(7, TinyConfig());
  bf16->to(torch::kBFloat16);
  models::SaveHfOptions o;
  o.max_shard_bytes = 4096;
  ASSERT_TRUE(models::SaveHfModel(bf16, dir, o).ok());
  ASSERT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  auto reference = models::LoadHfModel(dir);  // bf16 values widened to fp32
  ASSERT_TRUE(reference.ok()) << reference.status();
  const Values want = ValuesOf(*reference);
  const absl::Status s = dist::RunLocalGroup(2, [&](dist::Communicator& comm) {
    RankState state = MakeRank(/*seed=*/99, comm);
    const absl::Status loaded = LoadHfShards(dir, *state.model);
    ASSERT_TRUE(loaded.ok()) << loaded;
    for (const auto& [name, v] : Gathered(*state.model))
      EXPECT_TRUE(v.equal(want.at(name))) << name;
  });
  ASSERT_TRUE(s.ok()) << s;
}

// Runs `load` on every rank of an n-rank group of models of `config`; returns rank 0's error.
absl::Status LoadError(int n, const models::TransformerConfig& config,
                       const std::function<absl::Status(RankState&)>& load) {
  absl::Status out;
  const absl::Status s = dist::RunLocalGroup(n, [&](dist::Communicator& comm) {
    RankState state = MakeRank(/*seed=*/99, comm, config);
    const absl::Status e = load(state);
    EXPECT_FALSE(e.ok()) << "rank " << comm.rank();
    if (comm.rank() == 0) out = e;
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

void ExpectMentions(const absl::Status& s, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(std::string(s.message()).find(n), std::string::npos) << s;
}

TEST_F(ShardedCheckpointTest, CheckpointWithoutManifestIsIncomplete) {
  const std::string dir = FreshDir("no_manifest");
  RunSteps(2, 0, [&](RankState& s, Curve&) {
    ASSERT_TRUE(SaveShardedState(dir, *s.model, *s.adam).ok());
  });
  fs::remove(dir + "/manifest.json");
  const absl::Status e = LoadError(
      2, TinyConfig(), [&](RankState& s) { return LoadShardedState(dir, *s.model, *s.adam); });
  ExpectMentions(e, {dir, "no manifest.json", "incomplete"});
}

TEST_F(ShardedCheckpointTest, MismatchedModelIsNamedWithTheDirectory) {
  const std::string dir = FreshDir("mismatch");
  const std::string hf = FreshDir("mismatch_hf");
  RunSteps(2, 0, [&](RankState& s, Curve&) {
    ASSERT_TRUE(SaveShardedState(dir, *s.model, *s.adam).ok());
    ASSERT_TRUE(SaveHfConsolidated(hf, *s.model).ok());
  });
  const auto load = [&](RankState& s) { return LoadShardedState(dir, *s.model, *s.adam); };
  ExpectMentions(LoadError(1, TinyConfig(/*layers=*/2), load),
                 {dir + "/manifest.json", "5 units (embed, layer 0 .. layer 2, head)",
                  "4 (embed, layer 0, layer 1, head)"});
  ExpectMentions(LoadError(3, TinyConfig(3, /*intermediate=*/24), load),
                 {dir + "/manifest.json", "unit 'layer 0'"});
  ExpectMentions(LoadError(2, TinyConfig(/*layers=*/2),
                           [&](RankState& s) { return LoadHfShards(hf, *s.model); }),
                 {hf + "/config.json", "num_hidden_layers 3; the model has 2"});
  ExpectMentions(LoadError(2, TinyConfig(3, /*intermediate=*/24),
                           [&](RankState& s) { return LoadHfShards(hf, *s.model); }),
                 {hf + "/model.safetensors", "model.layers.0.mlp", "[24, 16]"});
}

// The byte counts a crash keeps of a write of `bytes`: none, one, half, all but one.
std::vector<uint64_t> CutPoints(uint64_t bytes) {
  if (bytes == 0) return {0};
  return {0, std::min<uint64_t>(1, bytes - 1), bytes / 2, bytes - 1};
}

bool SameValues(const Values& got, const Values& want) {
  if (got.size() != want.size()) return false;
  for (const auto& [name, w] : want) {
    if (!got.count(name) || !got.at(name).equal(w)) return false;
  }
  return true;
}

// SaveShardedState under every injected failure: ENOSPC and EIO at each file operation, a
// process crash at each (a write cut after none, one, half or all but one of its bytes), a
// machine crash mid-write. The directory a failed save leaves either does not load or, when
// only the last directory sync failed, loads exactly what was saved; the earlier checkpoint
// loads what it held; the error names the file and errno's text.
TEST_F(ShardedCheckpointTest, EveryFailurePointOfASaveLeavesNoCheckpointThatLoadsWrong) {
  using Fault = FaultInjectionFileSystem;
  const std::string good = FreshDir("fault_good"), next = FreshDir("fault_next");
  const absl::Status group = dist::RunLocalGroup(1, [&](dist::Communicator& comm) {
    RankState s = MakeRank(/*seed=*/7, comm);
    Step(s, comm);
    ASSERT_TRUE(SaveShardedState(good, *s.model, *s.adam).ok());
    const Values good_values = Gathered(*s.model);
    Step(s, comm);
    const Values next_values = Gathered(*s.model);
    Fault fault(FileSystem::Default(), /*sync_base=*/false);
    ASSERT_TRUE(SaveShardedState(next, *s.model, *s.adam, fault).ok());
    const std::vector<Fault::Record> ops = fault.ops();
    int failures = 0;
    for (size_t n = 1; n <= ops.size(); ++n) {
      std::vector<std::pair<int, uint64_t>> faults = {{ENOSPC, 0}, {EIO, 0}};
      for (uint64_t k : CutPoints(ops[n - 1].bytes)) faults.push_back({0, k});
      faults.push_back({-1, ops[n - 1].bytes / 2});  // a machine crash
      for (const auto& [err, keep] : faults) {
        SCOPED_TRACE(testing::Message()
                     << "operation " << n << " (" << Fault::OpName(ops[n - 1].op) << " "
                     << ops[n - 1].path << "), errno " << err << ", keeping " << keep);
        fs::remove_all(next);
        fault.Reset();
        if (err > 0) fault.FailAt(n, err);
        if (err <= 0) {
          fault.CrashAt(n, keep, err == 0 ? Fault::Crash::kProcess : Fault::Crash::kMachine);
        }
        const absl::Status saved = SaveShardedState(next, *s.model, *s.adam, fault);
        ASSERT_TRUE(fault.fired());
        ASSERT_FALSE(saved.ok());
        ++failures;
        ExpectMentions(saved, {ops[n - 1].path, err == ENOSPC ? "No space left on device"
                                                : err == EIO  ? "Input/output error"
                                                              : "simulated crash"});
        RankState probe = MakeRank(/*seed=*/1, comm);
        if (LoadShardedState(next, *probe.model, *probe.adam).ok()) {
          EXPECT_EQ(n, ops.size()) << "a checkpoint loaded though its save failed early";
          EXPECT_TRUE(SameValues(Gathered(*probe.model), next_values));
        }
      }
    }
    EXPECT_GE(failures, static_cast<int>(ops.size()) * 4);  // 4 per operation, 7 per write
    RankState probe = MakeRank(/*seed=*/1, comm);
    ASSERT_TRUE(LoadShardedState(good, *probe.model, *probe.adam).ok());
    EXPECT_TRUE(SameValues(Gathered(*probe.model), good_values));
  });
  ASSERT_TRUE(group.ok()) << group;
}

}  // namespace
}  // namespace rlforge
