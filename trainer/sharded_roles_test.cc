// The trainer roles with trainer.ranks N against one rank: sft, grpo, drgrpo, lm_ppo and
// dpo on a tiny checkpoint, N = 1, 2 and 3 ranks as threads in one process; and each role's
// whole-job state saved by N ranks and loaded by N fresh ones, continuing as if never stopped.
//
// the same requests (fixed groups, pairs, rewards) -> every rank's role -> rank 0's replies
//   -> per-step metrics and the final weights of N ranks == those of one rank
//
// Each rank trains on its token-balanced share of every minibatch, with losses and metrics
// weighted into the global minibatch's, so N ranks must compute what one rank computes, up to
// float rounding. The batches split unevenly over 3 ranks, and some minibatches have fewer
// groups (or pairs, or rows) than ranks, so a rank trains on an empty share with weight 0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "config/job_config.h"
#include "config/policy_loss_registry.h"
#include "dist/communicator.h"
#include "models/hf_checkpoint.h"
#include "models/tokenizer.h"
#include "proto/lm_groups.h"
#include "trainer/dpo_trainer_role.h"
#include "trainer/lm_losses.h"
#include "trainer/lm_policy_state.h"
#include "trainer/lm_rl_trainer_role.h"
#include "trainer/sft_trainer_role.h"
#include "weights/bucket_stream.h"

namespace rlforge {
namespace {

namespace fs = std::filesystem;

using Params = std::vector<std::pair<std::string, torch::Tensor>>;

// What one run with N ranks produced.
struct RanksRun {
  std::vector<std::map<std::string, double>> metrics;  // rank 0's reply, per request
  Params weights;                                      // rank 0's last published weights
};

struct Request {
  proto::WorkRequest request;
  std::vector<TensorFrame> tensors;
};
// Request k of a run for a rank whose role holds `version` (frames are move-only, so each
// rank builds its own; every rank builds the same).
using MakeRequest = std::function<Request(int k, int64_t version)>;
using MakeRole = std::function<absl::StatusOr<std::unique_ptr<Role>>(const JobConfig&,
                                                                     const proto::Assignment&)>;
// Called on rank 0 after its last reply: the weights to compare (e.g. read from a save).
using FinalWeights = std::function<Params(const WorkReply& last)>;

// The tiny checkpoint every run starts from (written once per test binary).
std::string& CheckpointDir() {
  static std::string dir;
  return dir;
}

// A char-level tokenizer over printable ASCII and a 2-layer model whose units split unevenly
// over 3 ranks (padded).
void WriteTinyCheckpoint(const std::string& dir) {
  fs::remove_all(dir);
  std::string alphabet;
  for (char c = ' '; c <= '~'; ++c) alphabet.push_back(c);
  alphabet.push_back('\n');
  auto tok = models::MakeCharTokenizer(alphabet);
  ASSERT_TRUE(tok.ok()) << tok.status();
  models::TransformerConfig c;
  c.vocab_size = (*tok)->vocab_size();
  c.hidden_size = 16;
  c.intermediate_size = 25;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.bos_token_id = (*tok)->bos_id();
  c.eos_token_id = (*tok)->eos_id();
  torch::manual_seed(11);
  models::Transformer m(c);
  {
    // Peaked enough that ratios move, clipping happens and gradients are not all tiny.
    torch::NoGradGuard ng;
    for (auto& p : m->parameters()) {
      if (p.dim() == 2) p.normal_(0, 0.3);
    }
  }
  ASSERT_TRUE(models::SaveHfModel(m, dir).ok());
  ASSERT_TRUE(models::SaveTokenizer(**tok, dir).ok());
}

Params ParamsOf(const models::Transformer& m) {
  Params out;
  for (const auto& p : m->named_parameters()) out.emplace_back(p.key(), p.value().detach().clone());
  return out;
}

// Reads the inline weight stream (the "weights" frame, by its manifest) into a fresh model.
Params SplitWeights(const WorkReply& reply) {
  const TensorFrame* f = FindFrame(reply.tensors, "weights");
  EXPECT_NE(f, nullptr) << "rank 0's reply has no inline weights";
  if (f == nullptr) return {};
  auto init = models::LoadHfModel(CheckpointDir());
  EXPECT_TRUE(init.ok()) << init.status();
  if (!init.ok()) return {};
  std::vector<Destination> mine;
  for (const auto& p : (*init)->named_parameters()) {
    mine.push_back({p.key(), p.value().sizes().vec(), p.value().data_ptr<float>()});
  }
  const proto::WeightsReady& w = reply.result.weights();
  auto dest = MatchDestinations(w.manifest(), mine, "test");
  EXPECT_TRUE(dest.ok()) << dest.status();
  if (!dest.ok()) return {};
  const std::vector<uint64_t> sums(w.bucket_checksums().begin(), w.bucket_checksums().end());
  MemorySource source(w.manifest(), static_cast<const char*>(f->data()), sums);
  absl::Status read = ReadVersion(w.manifest(), w.version(), source, *dest, "test").status();
  EXPECT_TRUE(read.ok()) << read;
  Params out;
  for (const auto& p : (*init)->named_parameters()) {
    out.emplace_back(p.key(), p.value().detach().clone());
  }
  return out;
}

LoadedJob ConfigFor(const std::string& yaml, int ranks) {
  return LoadJobText(
      absl::StrReplaceAll(yaml, {{"$CKPT", CheckpointDir()}, {"$RANKS", std::to_string(ranks)}}),
      "sharded_roles_test");
}

// The roles of `ranks` ranks as threads, each fed requests 0..count-1.
RanksRun RunRanks(int ranks, const std::string& yaml, const MakeRole& make, int count,
                  const MakeRequest& request, const FinalWeights& final_weights) {
  const LoadedJob job = ConfigFor(yaml, ranks);
  EXPECT_TRUE(job.ok()) << config::FormatErrors(job.errors);
  if (!job.ok()) return {};
  const JobConfig& config = job.config;
  std::unique_ptr<dist::StoreServer> store;
  if (ranks > 1) {
    auto s = dist::StoreServer::Start("127.0.0.1");
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return {};
    store = std::move(*s);
  }
  RanksRun out;
  std::mutex mu;
  std::vector<absl::Status> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      torch::set_num_threads(1);
      proto::Assignment a;
      a.set_actor_id(absl::StrCat("trainer-", r));
      a.set_role("trainer");
      a.set_rank(r);
      a.set_world_size(ranks);
      if (store) a.set_store_address(store->address());
      a.set_collective_timeout_s(20);  // a failing rank's peers give up soon
      absl::StatusOr<std::unique_ptr<Role>> role = make(config, a);
      if (!role.ok()) {
        errors[r] = role.status();
        return;
      }
      for (int k = 0; k < count; ++k) {
        Request req = request(k, (*role)->policy_version());
        absl::StatusOr<WorkReply> reply = (*role)->Handle(req.request, std::move(req.tensors));
        if (!reply.ok()) {
          errors[r] = absl::Status(reply.status().code(),
                                   absl::StrCat("request ", k, ": ", reply.status().message()));
          return;
        }
        if (r != 0) continue;
        std::lock_guard<std::mutex> l(mu);
        out.metrics.emplace_back(reply->result.metrics().begin(), reply->result.metrics().end());
        if (k + 1 == count) out.weights = final_weights(*reply);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(errors[r].ok()) << "rank " << r << ": " << errors[r];
  return out;
}

// Timings, and metrics that are not the math's (sizes, counts).
bool Compared(const std::string& key) {
  return !absl::EndsWith(key, "_s") && key != "weight_bytes";
}

// N ranks against one: `strict` metrics (the losses) within 1e-5 relative plus 1e-7 absolute,
// every weight tensor within 1e-5 of its norm, every other metric within 1e-5 relative plus
// 2e-6 absolute: fractions and KLs sit near 0, and DPO's rewards and margins are differences of
// sequence logprobs (~20 in size), whose float rounding (~2e-6) survives the difference. A
// PPO loss is a mean of terms of size ~1 that nearly cancel (0.004 after a few steps): their
// float rounding (~6e-8) survives too (4.5e-8 apart with the torch wheel's MKL).
void ExpectSameRun(const RanksRun& got, const RanksRun& want,
                   const std::vector<std::string>& strict) {
  ASSERT_EQ(got.metrics.size(), want.metrics.size());
  for (size_t k = 0; k < want.metrics.size(); ++k) {
    for (const std::string& key : strict) {
      ASSERT_TRUE(want.metrics[k].count(key)) << key << " missing at request " << k;
    }
    for (const auto& [key, w] : want.metrics[k]) {
      if (!Compared(key)) continue;
      auto it = got.metrics[k].find(key);
      ASSERT_NE(it, got.metrics[k].end()) << key << " at request " << k;
      const bool is_strict = std::find(strict.begin(), strict.end(), key) != strict.end();
      const double tol = 1e-5 * std::abs(w) + (is_strict ? 1e-7 : 2e-6);
      EXPECT_NEAR(it->second, w, tol) << key << " at request " << k;
    }
  }
  ASSERT_EQ(got.weights.size(), want.weights.size());
  ASSERT_FALSE(want.weights.empty());
  auto init = models::LoadHfModel(CheckpointDir());
  ASSERT_TRUE(init.ok()) << init.status();
  const Params start = ParamsOf(*init);
  double moved = 0;
  for (size_t i = 0; i < want.weights.size(); ++i) {
    const auto& [name, w] = want.weights[i];
    ASSERT_EQ(got.weights[i].first, name);
    const torch::Tensor& g = got.weights[i].second;
    ASSERT_EQ(g.sizes(), w.sizes()) << name;
    // Relative in norm: Adam divides by sqrt(v), so an element whose gradient is rounding
    // noise moves by ~lr either way; the tensor as a whole agrees far closer.
    EXPECT_LE((g - w).norm().item<double>(), 1e-5 * w.norm().item<double>()) << name;
    moved = std::max(moved, (w - start[i].second).abs().max().item<double>());
  }
  EXPECT_GT(moved, 1e-4) << "training moved nothing";
}

class ShardedRolesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    CheckpointDir() =
        (fs::temp_directory_path() / absl::StrCat("rlforge_sharded_roles_", getpid())).string();
    WriteTinyCheckpoint(CheckpointDir());
  }
  static void TearDownTestSuite() { fs::remove_all(CheckpointDir()); }
  void SetUp() override { torch::set_num_threads(1); }

  // N = 1 first, then 2 and 3 against it.
  void ExpectRanksAgree(const std::string& yaml, const MakeRole& make, int count,
                        const MakeRequest& request, const std::vector<std::string>& strict,
                        const FinalWeights& final_weights = SplitWeights) {
    const RanksRun one = RunRanks(1, yaml, make, count, request, final_weights);
    ASSERT_EQ(one.metrics.size(), static_cast<size_t>(count));
    for (int n : {2, 3}) {
      SCOPED_TRACE(absl::StrCat(n, " ranks"));
      ExpectSameRun(RunRanks(n, yaml, make, count, request, final_weights), one, strict);
    }
  }
};

// Groups of varied prompt and response lengths drawn from `seed`; old logprobs near the
// tiny model's (about -log 99), so ratios sit on both sides of the clip range.
std::vector<LmGroup> Groups(uint64_t seed, int groups, int group_size, int64_t version) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  std::vector<LmGroup> out(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    out[g].request_id = g;
    for (int t = uniform(2, 6); t > 0; --t) out[g].prompt.push_back(uniform(4, 98));
    for (int s = 0; s < group_size; ++s) {
      LmSample smp;
      for (int t = uniform(1, 6); t > 0; --t) smp.tokens.push_back(uniform(4, 98));
      for (size_t t = 0; t < smp.tokens.size(); ++t) {
        smp.logprobs.push_back(-4.6f + 0.05f * static_cast<float>(uniform(-8, 8)));
      }
      smp.versions.assign(smp.tokens.size(), version);
      smp.stopped = true;
      out[g].samples.push_back(smp);
    }
  }
  return out;
}

// Random rewards, except that every sample of a group in `equal` gets the same reward (a
// group with nothing to learn from: its advantages are all 0).
std::vector<float> Rewards(int k, int groups, int group_size, const std::vector<int>& equal) {
  std::mt19937_64 rng(200 + k);
  std::vector<float> rewards;
  for (int i = 0; i < groups * group_size; ++i) {
    rewards.push_back(static_cast<float>(rng() % 1000) / 1000.0f);
  }
  for (int g : equal) {
    for (int j = 0; j < group_size; ++j) rewards[g * group_size + j] = 0.5f;
  }
  return rewards;
}

MakeRequest GrpoRequests(int groups, int group_size, std::vector<int> equal = {}) {
  return [=](int k, int64_t version) {
    Request r;
    r.request.mutable_grpo_train()->set_group_size(group_size);
    r.request.mutable_grpo_train()->set_step(k + 1);
    r.tensors = GroupsToFrames(Groups(100 + k, groups, group_size, version), true);
    r.tensors.push_back(TensorFrame::FromVector("rewards", Rewards(k, groups, group_size, equal)));
    return r;
  };
}

MakeRole LmRlRole() {
  return
      [](const JobConfig& c, const proto::Assignment& a) { return LmRlTrainerRole::Create(c, a); };
}

// adam_eps 1e-4 (and in kSftYaml): N ranks sum each gradient in another order than one rank,
// so their gradients differ by float rounding. With AdamW's default eps (1e-8) an element whose
// gradient is itself at that rounding floor is divided by its own noise, and its step is +-lr
// whichever way the noise fell: on OpenBLAS's Haswell and Zen kernels one element of
// layers.0.mlp.down_proj moved 6e-5 apart, 1.05e-5 of the tensor's norm (over the bound below,
// on that BLAS only). With eps above the rounding floor the step is Lipschitz in the gradient
// (at most lr/eps per unit of gradient), so the runs differ by rounding, not by +-lr: measured
// at most 6e-8 of a tensor's norm under every kernel family OpenBLAS picks on x86 (Haswell,
// Zen, SkylakeX, Cooperlake), 170x inside the 1e-5 bound, while training moves each tensor by
// 1-2% of its norm.
const char* const kLmRlYaml = R"(
job: {algorithm: $ALGO, seed: 1, iterations: 5}
model: {path: $CKPT}
trainer: {ranks: $RANKS, threads: 1, lr: 1e-3, warmup_steps: 2, lr_schedule: cosine,
          max_grad_norm: 1.0, adam_eps: 1e-4}
weights: {transport: zmq}
grpo: {prompts_per_iteration: 5, group_size: $G, max_new_tokens: 6, epochs: 2,
       minibatches: $MB, kl_beta: 0.05}
$CRITICreward:
  rewards:
    - {name: exact, kind: exact_answer}
)";

std::string LmRlYaml(const std::string& algo, int group_size, int minibatches) {
  const std::string critic = algo == "lm_ppo" ? "critic: {warmup_iterations: 1, lr: 1e-3}\n" : "";
  return absl::StrReplaceAll(kLmRlYaml, {{"$ALGO", algo},
                                         {"$CRITIC", critic},
                                         {"$G", std::to_string(group_size)},
                                         {"$MB", std::to_string(minibatches)}});
}

// 5 groups of 4 in minibatches of 3 and 2 groups, 2 epochs, a reference for the KL term:
// with 3 ranks the second minibatch leaves one rank without a group.
TEST_F(ShardedRolesTest, GrpoRanksMatchOneRank) {
  ExpectRanksAgree(LmRlYaml("grpo", 4, 2), LmRlRole(), 5, GrpoRequests(5, 4), {"loss"});
}

// Dr. GRPO's loss is a sum over each sequence's tokens / a constant, averaged over sequences:
// a share is weighted by its rows, not its tokens.
TEST_F(ShardedRolesTest, DrGrpoRanksMatchOneRank) {
  ExpectRanksAgree(LmRlYaml("drgrpo", 4, 2), LmRlRole(), 5, GrpoRequests(5, 4), {"loss"});
}

// Every other policy loss through the trainer (grpo.policy_loss), e.g. GSPO's per-sequence
// ratio, on each rank's share weighted by the loss's aggregation (seq-mean-token-mean by rows,
// token-mean by tokens), 2 epochs, the KL term.
TEST_F(ShardedRolesTest, PolicyLossesRanksMatchOneRank) {
  for (const PolicyLossSpec& l : PolicyLosses()) {
    if (l.kind == PolicyLossKind::kPpoClip) continue;  // GrpoRanksMatchOneRank
    SCOPED_TRACE(l.name);
    const std::string yaml =
        absl::StrReplaceAll(LmRlYaml("grpo", 4, 2),
                            {{"kl_beta: 0.05}", "kl_beta: 0.05, policy_loss: " + l.name + "}"}});
    ExpectRanksAgree(yaml, LmRlRole(), 5, GrpoRequests(5, 4), {"loss"});
  }
}

// Tokens one version behind the trainer (rollout.max_staleness 1) under decoupled PPO: the
// proximal policy is recomputed before the first of 2 x 2 updates, on every rank's share.
TEST_F(ShardedRolesTest, DecoupledPpoOnStaleTokensRanksMatchOneRank) {
  const std::string yaml = absl::StrReplaceAll(
      LmRlYaml("grpo", 4, 2), {{"kl_beta: 0.05}", "kl_beta: 0.05, off_policy: decoupled}"},
                               {"weights: {", "rollout: {max_staleness: 1}\nweights: {"}});
  const MakeRequest fresh = GrpoRequests(5, 4);
  const MakeRequest stale = [fresh](int k, int64_t version) {
    return fresh(k, std::max<int64_t>(0, version - 1));
  };
  ExpectRanksAgree(yaml, LmRlRole(), 5, stale, {"loss", "is_weight_mean", "is_weight_max"});
}

// The lm_rl trainer role of `yaml` as the only rank.
absl::StatusOr<std::unique_ptr<Role>> OneRankLmRlRole(const std::string& yaml) {
  const LoadedJob job = ConfigFor(yaml, 1);
  if (!job.ok()) return absl::InvalidArgumentError(config::FormatErrors(job.errors));
  proto::Assignment a;
  a.set_actor_id("trainer-0");
  a.set_role("trainer");
  a.set_world_size(1);
  return LmRlTrainerRole::Create(job.config, a);
}

// A token older than rollout.max_staleness allows is refused, naming the versions and bound.
TEST_F(ShardedRolesTest, TokenBeyondTheStalenessBoundIsRefused) {
  const std::string yaml = absl::StrReplaceAll(
      LmRlYaml("grpo", 4, 1), {{"weights: {", "rollout: {max_staleness: 1}\nweights: {"}});
  auto role = OneRankLmRlRole(yaml);
  ASSERT_TRUE(role.ok()) << role.status();
  for (int k = 0; k < 2; ++k) {  // versions 0 and 0: lag 0, then 1
    Request req = GrpoRequests(5, 4)(k, 0);
    auto reply = (*role)->Handle(req.request, std::move(req.tensors));
    ASSERT_TRUE(reply.ok()) << "request " << k << ": " << reply.status();
  }
  Request req = GrpoRequests(5, 4)(2, 0);  // the trainer holds version 2 now
  auto refused = (*role)->Handle(req.request, std::move(req.tensors));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("generated by policy version 0 but the trainer "
                                            "holds version 2 (rollout.max_staleness 1 allows "
                                            "versions 1 to 2)"),
            std::string::npos)
      << refused.status();
}

// Without a KL term, groups whose advantages are all 0 are left out of the forward and
// backward: groups 1, 3 and 4 here, so the second minibatch (groups 3, 4) has none left and
// runs on both. The loss's denominators still count them, on every rank.
TEST_F(ShardedRolesTest, ZeroAdvantageGroupsLeftOutRanksMatchOneRank) {
  for (const char* algo : {"grpo", "drgrpo"}) {
    SCOPED_TRACE(algo);
    const std::string yaml =
        absl::StrReplaceAll(LmRlYaml(algo, 4, 2), {{"kl_beta: 0.05", "kl_beta: 0"}});
    ExpectRanksAgree(yaml, LmRlRole(), 5, GrpoRequests(5, 4, {1, 3, 4}), {"loss"});
  }
}

// The step that leaves zero-advantage groups out is the whole batch's: its loss and its
// gradient's norm (before clipping) equal those of the whole batch's loss, computed here by
// hand on the checkpoint, for token-mean (grpo) and per-sequence (drgrpo) aggregation; as
// they do with grpo.skip_zero_advantage false, which runs every group.
TEST_F(ShardedRolesTest, ZeroAdvantageGroupsLeftOutGiveTheWholeBatchsLossAndGradient) {
  for (const auto& [algo, skip] : std::vector<std::pair<std::string, bool>>{
           {"grpo", true}, {"drgrpo", true}, {"grpo", false}}) {
    SCOPED_TRACE(absl::StrCat(algo, skip ? "" : ", skip_zero_advantage false"));
    const std::string yaml = absl::StrReplaceAll(
        LmRlYaml(algo, 4, 1), {{"kl_beta: 0.05", absl::StrCat("kl_beta: 0, skip_zero_advantage: ",
                                                              skip ? "true" : "false")},
                               {"epochs: 2", "epochs: 1"}});
    const LoadedJob job = ConfigFor(yaml, 1);
    ASSERT_TRUE(job.ok()) << config::FormatErrors(job.errors);
    auto role = OneRankLmRlRole(yaml);
    ASSERT_TRUE(role.ok()) << role.status();
    Request req = GrpoRequests(5, 4, {0, 2})(0, 0);
    auto reply = (*role)->Handle(req.request, std::move(req.tensors));
    ASSERT_TRUE(reply.ok()) << reply.status();
    const auto& m = reply->result.metrics();
    EXPECT_EQ(m.at("zero_advantage_groups_skipped"), skip ? 2 : 0);

    const GrpoOptions& g = job.config.grpo;
    auto model = models::LoadHfModel(CheckpointDir());
    ASSERT_TRUE(model.ok()) << model.status();
    auto batch = PackGroups(Groups(100, 5, 4, 0));
    ASSERT_TRUE(batch.ok()) << batch.status();
    GroupAdvantageOptions ao;
    ao.group_size = 4;
    ao.scale_by_std = algo == "grpo";
    auto adv = ComputeGroupAdvantages(torch::tensor(Rewards(0, 5, 4, {0, 2})), ao);
    ASSERT_TRUE(adv.ok()) << adv.status();
    ASSERT_EQ(adv->num_degenerate, 2);
    LmPolicyLossOptions lo;
    lo.clip.clip_low = g.clip_low;
    lo.clip.clip_high = g.clip_high;
    lo.norm_length = static_cast<double>(g.max_new_tokens);
    lo.aggregation = *g.loss_aggregation;
    LmPolicyLossInput in;
    in.logp = *GroupTokenLogprobs(*model, *batch);
    in.old_logp = batch->old_logp;
    in.advantages = adv->advantages;
    in.mask = batch->mask;
    auto loss = ComputeLmPolicyLoss(in, lo);
    ASSERT_TRUE(loss.ok()) << loss.status();
    loss->loss.backward();
    double sq = 0;
    for (const auto& p : (*model)->parameters()) sq += p.grad().pow(2).sum().item<double>();
    EXPECT_NEAR(m.at("loss"), loss->loss.item<double>(), 1e-6);
    EXPECT_NEAR(m.at("grad_norm"), std::sqrt(sq), 1e-5 * std::sqrt(sq));
    EXPECT_GT(std::sqrt(sq), 1e-3);
  }
}

// lm_ppo: each rank scores its share of the batch with the critic and the reference (summed
// into the whole batch's), then trains on each minibatch share; the first iteration trains
// only the critic (no new version). Minibatches of 2, 2 and 1 groups.
TEST_F(ShardedRolesTest, LmPpoRanksMatchOneRankPolicyAndCritic) {
  ExpectRanksAgree(LmRlYaml("lm_ppo", 2, 3), LmRlRole(), 5, GrpoRequests(5, 2),
                   {"loss", "value_loss"});
}

const char* const kDpoYaml = R"(
job: {algorithm: dpo, seed: 1, iterations: 5}
model: {path: $CKPT}
trainer: {ranks: $RANKS, threads: 1, lr: 1e-3, warmup_steps: 2, max_grad_norm: 1.0}
weights: {transport: zmq}
dpo: {epochs: 2, beta: 0.1}
reward:
  rewards:
    - {name: exact, kind: exact_answer}
)";

MakeRequest DpoRequests(int pairs) {
  return [=](int k, int64_t) {
    Request r;
    r.request.mutable_dpo_train()->set_step(k + 1);
    r.tensors = GroupsToFrames(Groups(300 + k, pairs, 2, -1), true);
    return r;
  };
}

MakeRole DpoRole() {
  return
      [](const JobConfig& c, const proto::Assignment& a) { return DpoTrainerRole::Create(c, a); };
}

// 5 pairs split unevenly; 2 epochs over each batch.
TEST_F(ShardedRolesTest, DpoRanksMatchOneRank) {
  ExpectRanksAgree(kDpoYaml, DpoRole(), 5, DpoRequests(5), {"dpo/loss"});
}

// 2 pairs over 3 ranks: one rank has none.
TEST_F(ShardedRolesTest, DpoRanksMatchOneRankWithARankWithoutPairs) {
  ExpectRanksAgree(kDpoYaml, DpoRole(), 5, DpoRequests(2), {"dpo/loss"});
}

const char* const kSftYaml = R"(
job: {algorithm: sft, seed: 3}
model: {path: $CKPT}
data: {source: arithmetic, max_digits: 2, train_examples: 100, heldout_examples: 4}
trainer: {ranks: $RANKS, threads: 1, lr: 3e-3, warmup_steps: 2, lr_schedule: cosine,
          max_grad_norm: 1.0, adam_eps: 1e-4}
sft: {steps: 5, seq_len: 24, batch_rows: $ROWS, grad_accum: 2}
)";

// sft_init, 5 single-step sft_train requests (one loss per optimizer step), lm_save into
// a directory per run: the final weights are the saved checkpoint's.
void ExpectSftRanksAgree(int rows) {
  const std::string yaml = absl::StrReplaceAll(kSftYaml, {{"$ROWS", std::to_string(rows)}});
  static int run = 0;
  MakeRole make = [](const JobConfig& c, const proto::Assignment& a) {
    return absl::StatusOr<std::unique_ptr<Role>>(std::make_unique<SftTrainerRole>(c, a));
  };
  auto save_dir = std::make_shared<std::string>();
  MakeRequest request = [save_dir](int k, int64_t) {
    Request r;
    if (k == 0) {
      r.request.mutable_sft_init();
    } else if (k <= 5) {
      r.request.mutable_sft_train()->set_first_step(k - 1);
      r.request.mutable_sft_train()->set_num_steps(1);
      r.request.mutable_sft_train()->set_total_steps(5);
    } else {
      r.request.mutable_lm_save()->set_dir(*save_dir);
    }
    return r;
  };
  FinalWeights saved = [save_dir](const WorkReply&) {
    auto m = models::LoadHfModel(*save_dir);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? ParamsOf(*m) : Params{};
  };
  auto one_run = [&](int n) {
    *save_dir = absl::StrCat(CheckpointDir(), "/saved_", run++);
    RanksRun r = RunRanks(n, yaml, make, 7, request, saved);
    fs::remove_all(*save_dir);
    // Drop sft_init's and lm_save's replies: their metrics are sizes and timings.
    if (r.metrics.size() == 7) {
      r.metrics.pop_back();
      r.metrics.erase(r.metrics.begin());
    }
    return r;
  };
  const RanksRun one = one_run(1);
  ASSERT_EQ(one.metrics.size(), 5u);
  for (int n : {2, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " ranks"));
    ExpectSameRun(one_run(n), one, {"loss"});
  }
}

// 5 rows per micro-batch, 2 micro-batches per step: 3 ranks take 2, 2 and 1 rows.
TEST_F(ShardedRolesTest, SftRanksMatchOneRankWithGradientAccumulation) { ExpectSftRanksAgree(5); }

// 2 rows per micro-batch: with 3 ranks one rank has no row.
TEST_F(ShardedRolesTest, SftRanksMatchOneRankWithARankWithoutRows) { ExpectSftRanksAgree(2); }

// trainer.device: cpu written out goes through the device path (batches, advantages, the
// critic's rewards and the staged weight stream), which copies nothing on the CPU: the same
// replies and weights as the default, to the bit.
TEST_F(ShardedRolesTest, ExplicitCpuDeviceTrainsAsTheDefault) {
  const std::vector<std::tuple<std::string, MakeRole, MakeRequest>> roles = {
      {LmRlYaml("grpo", 4, 2), LmRlRole(), GrpoRequests(5, 4)},
      {LmRlYaml("lm_ppo", 2, 3), LmRlRole(), GrpoRequests(5, 2)},
      {kDpoYaml, DpoRole(), DpoRequests(5)}};
  for (const auto& [yaml, make, request] : roles) {
    const std::string cpu =
        absl::StrReplaceAll(yaml, {{"threads: 1,", "threads: 1, device: cpu,"}});
    ASSERT_NE(cpu, yaml);
    const RanksRun want = RunRanks(1, yaml, make, 3, request, SplitWeights);
    const RanksRun got = RunRanks(1, cpu, make, 3, request, SplitWeights);
    ASSERT_EQ(got.metrics.size(), 3u);
    ASSERT_EQ(want.metrics.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      for (const auto& [key, v] : want.metrics[k]) {
        if (!Compared(key)) continue;
        EXPECT_EQ(got.metrics[k].at(key), v) << key << " at request " << k;
      }
    }
    ASSERT_EQ(got.weights.size(), want.weights.size());
    for (size_t i = 0; i < want.weights.size(); ++i) {
      EXPECT_TRUE(got.weights[i].second.equal(want.weights[i].second)) << want.weights[i].first;
    }
  }
}

// Every LM trainer role resolves trainer.device for its rank (models::TorchDevice): a GPU
// this process cannot use fails its setup naming the key, the value and the rank. (The job
// file's check, which refuses cuda on a CPU-only build first, is bypassed here.)
TEST_F(ShardedRolesTest, RolesResolveTrainerDeviceNamingKeyValueAndRank) {
  if (torch::cuda::device_count() > 7) GTEST_SKIP() << "this process has a GPU 7";
  proto::Assignment a;
  a.set_actor_id("trainer-0");
  a.set_role("trainer");
  a.set_world_size(1);
  auto config = [](const std::string& yaml) {
    LoadedJob job = ConfigFor(yaml, 1);
    EXPECT_TRUE(job.ok()) << config::FormatErrors(job.errors);
    job.config.trainer.device = "cuda:7";
    return job.config;
  };
  const std::string want = "trainer.device cuda:7 (rank 0): ";
  for (const std::string& yaml :
       {LmRlYaml("grpo", 4, 2), LmRlYaml("lm_ppo", 2, 3), std::string(kDpoYaml)}) {
    const JobConfig c = config(yaml);
    auto role = c.job.algorithm->name == "dpo" ? DpoRole()(c, a) : LmRlRole()(c, a);
    ASSERT_FALSE(role.ok()) << c.job.algorithm->name;
    EXPECT_NE(role.status().message().find(want), std::string::npos) << role.status();
  }
  SftTrainerRole sft(config(absl::StrReplaceAll(kSftYaml, {{"$ROWS", "2"}})), a);
  proto::WorkRequest init;
  init.mutable_sft_init();
  absl::StatusOr<WorkReply> reply = sft.Handle(init, {});
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find(want), std::string::npos) << reply.status();
}

// Whole-job state on `ranks` ranks: requests 0..count-1 run through, against the same
// requests with the ranks' state saved after the first `cut` (save_state), the roles torn
// down, fresh roles set up (the first `setup` requests again, e.g. sft_init) and the state
// loaded (load_state): every reply after the cut is the same, to the bit.
void ExpectResumedRanksContinue(int ranks, const std::string& yaml, const MakeRole& make, int count,
                                int cut, int setup, const MakeRequest& request) {
  const std::string dir = absl::StrCat(CheckpointDir(), "/state_", ranks, "_", cut);
  fs::remove_all(dir);
  const FinalWeights none = [](const WorkReply&) { return Params{}; };
  const RanksRun through = RunRanks(ranks, yaml, make, count, request, none);
  ASSERT_EQ(through.metrics.size(), static_cast<size_t>(count));
  const MakeRequest saving = [&](int k, int64_t version) {
    if (k < cut) return request(k, version);
    Request r;
    r.request.mutable_save_state()->set_dir(dir);
    return r;
  };
  RunRanks(ranks, yaml, make, cut + 1, saving, none);
  ASSERT_TRUE(fs::exists(dir + "/manifest.json"));
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(fs::exists(absl::StrCat(dir, "/rank-", r, "-of-", ranks, ".safetensors")));
  }
  const MakeRequest loading = [&](int k, int64_t version) {
    if (k < setup) return request(k, version);
    if (k > setup) return request(cut + k - setup - 1, version);
    Request r;
    r.request.mutable_load_state()->set_dir(dir);
    return r;
  };
  const RanksRun resumed = RunRanks(ranks, yaml, make, setup + 1 + count - cut, loading, none);
  ASSERT_EQ(resumed.metrics.size(), static_cast<size_t>(setup + 1 + count - cut));
  for (int k = cut; k < count; ++k) {
    std::map<std::string, double> want, got;
    for (const auto& [key, v] : through.metrics[k]) {
      if (Compared(key)) want[key] = v;
    }
    for (const auto& [key, v] : resumed.metrics[setup + 1 + k - cut]) {
      if (Compared(key)) got[key] = v;
    }
    EXPECT_EQ(got, want) << "request " << k;
  }
  fs::remove_all(dir);
}

// lm_ppo on 2 ranks: the policy's and the critic's shards and moments (the critic trains
// alone in the first iteration, so its state differs from the policy's).
TEST_F(ShardedRolesTest, LmPpoStateSavedByTwoRanksContinuesTheRun) {
  ExpectResumedRanksContinue(2, LmRlYaml("lm_ppo", 2, 3), LmRlRole(), 4, 2, 0, GrpoRequests(5, 2));
}

TEST_F(ShardedRolesTest, DpoStateSavedByTwoRanksContinuesTheRun) {
  ExpectResumedRanksContinue(2, kDpoYaml, DpoRole(), 4, 2, 0, DpoRequests(5));
}

// sft on 2 ranks, cut in the middle of an epoch (100 examples pack into a few dozen rows):
// the data position and the schedule's step come back with the shards.
TEST_F(ShardedRolesTest, SftStateSavedByTwoRanksContinuesTheRun) {
  const std::string yaml = absl::StrReplaceAll(kSftYaml, {{"$ROWS", "3"}});
  const MakeRole make = [](const JobConfig& c, const proto::Assignment& a) {
    return absl::StatusOr<std::unique_ptr<Role>>(std::make_unique<SftTrainerRole>(c, a));
  };
  const MakeRequest request = [](int k, int64_t) {
    Request r;
    if (k == 0) {
      r.request.mutable_sft_init();
    } else {
      r.request.mutable_sft_train()->set_first_step(k - 1);
      r.request.mutable_sft_train()->set_num_steps(1);
      r.request.mutable_sft_train()->set_total_steps(5);
    }
    return r;
  };
  ExpectResumedRanksContinue(2, yaml, make, 6, 3, 1, request);
}

}  // namespace
}  // namespace rlforge
