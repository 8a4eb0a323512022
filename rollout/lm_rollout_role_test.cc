// The LM rollout worker's side of the weight plane: a version streamed through the shm ring
// lands in the engine; one checked in the mapped segment is served from it, as in place; a
// publisher killed mid-transfer leaves a staged engine on the previous version (and serving) and an
// in-place one torn (and refusing work); a corrupted bucket is refused naming the engine, the
// version and the bucket; a version broadcast over the nccl transport's device path (a gloo
// group on the CPU) lands in place or staged.
#include "rollout/lm_rollout_role.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>

#include "config/job_config.h"
#include "models/actor_critic.h"
#include "models/device.h"
#include "models/hf_checkpoint.h"
#include "models/tokenizer.h"
#include "proto/lm_groups.h"
#include "weights/device_broadcast.h"
#include "weights/dying_publisher_testing.h"
#include "weights/shm_mapped.h"
#include "weights/shm_ring.h"

namespace rlforge {
namespace {

namespace fs = std::filesystem;

std::string TinyCheckpoint() {
  static const std::string dir = [] {
    // One per process: ctest -j runs this binary's tests side by side.
    const std::string d =
        ::testing::TempDir() + "rlforge_lm_rollout_role_ckpt_" + std::to_string(getpid());
    fs::remove_all(d);
    std::string alphabet;
    for (char c = ' '; c <= '~'; ++c) alphabet.push_back(c);
    auto tok = models::MakeCharTokenizer(alphabet);
    EXPECT_TRUE(tok.ok());
    models::TransformerConfig c;
    c.vocab_size = (*tok)->vocab_size();
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.bos_token_id = (*tok)->bos_id();
    c.eos_token_id = (*tok)->eos_id();
    torch::manual_seed(3);
    models::Transformer m(c);
    EXPECT_TRUE(models::SaveHfModel(m, d).ok());
    EXPECT_TRUE(models::SaveTokenizer(**tok, d).ok());
    return d;
  }();
  return dir;
}

struct Engine {
  JobConfig config;
  std::unique_ptr<Role> role;
};

// rollout-1 of 2. `device` is set past the config's check (this build may refuse cuda there),
// to reach the role's own; `created` gets Create's status, else a failure is reported.
Engine MakeEngine(const std::string& apply, const std::string& more_yaml = "",
                  const std::string& device = "cpu", absl::Status* created = nullptr,
                  const std::string& store_address = "") {
  Engine e;
  LoadedJob j = LoadJobText("job: {algorithm: grpo}\nmodel: {path: " + TinyCheckpoint() +
                                "}\nweights: {apply: " + apply + ", timeout_s: 20}\n" + more_yaml,
                            "test.yaml");
  for (const auto& err : j.errors) ADD_FAILURE() << err.ToString();
  e.config = j.config;
  e.config.engine.device = device;
  proto::Assignment a;
  a.set_actor_id("rollout-1");
  a.set_role("rollout");
  a.set_rank(1);
  a.set_world_size(2);
  a.set_store_address(store_address);
  auto role = LmRolloutRole::Create(e.config, a);
  if (created != nullptr) {
    *created = role.status();
  } else {
    EXPECT_TRUE(role.ok()) << role.status();
  }
  if (role.ok()) e.role = std::move(*role);
  return e;
}

// The checkpoint's parameters, named, in module order: what a trainer streams.
std::vector<std::pair<std::string, torch::Tensor>> TrainerWeights(float shift) {
  auto m = models::LoadHfModel(TinyCheckpoint());
  EXPECT_TRUE(m.ok());
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : (*m)->named_parameters()) {
    out.emplace_back(p.key(), p.value().detach().clone() + shift);
  }
  return out;
}

proto::WeightsReady Announce(const std::vector<std::pair<std::string, torch::Tensor>>& w,
                             int64_t version, const std::string& location) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : w) specs.push_back({name, t.sizes().vec()});
  proto::WeightsReady r;
  r.set_version(version);
  r.set_location(location);
  *r.mutable_manifest() = MakeManifest(specs, "float32", 1024);
  auto m = models::LoadHfModel(TinyCheckpoint());
  r.set_layout_hash(LayoutHash(**m));
  return r;
}

absl::Status Write(const proto::WeightsReady& r,
                   const std::vector<std::pair<std::string, torch::Tensor>>& w, BucketSink& sink) {
  BucketWriter writer(r.manifest(), sink, r.version());
  for (const auto& [name, t] : w) {
    if (absl::Status s = writer.Append(name, t.data_ptr<float>(), t.numel()); !s.ok()) return s;
  }
  return writer.Finish().status();
}

absl::StatusOr<WorkReply> Load(Role& role, const proto::WeightsReady& r,
                               std::vector<TensorFrame> frames = {}) {
  proto::WorkRequest req;
  *req.mutable_load_weights()->mutable_weights() = r;
  // One stream per version in these tests: its number is the version's.
  if (r.location() != "inline") req.mutable_load_weights()->set_publication(r.version());
  return role.Handle(req, std::move(frames));
}

absl::StatusOr<WorkReply> Generate(Role& role) {
  proto::WorkRequest req;
  proto::LmGenerate* g = req.mutable_lm_generate();
  g->set_n(2);
  g->set_temperature(1);
  g->set_top_p(1);
  g->set_max_tokens(4);
  g->set_min_groups(1);
  g->set_seed(5);
  LmGroup p;
  p.request_id = 1;
  p.prompt = {3, 4, 5};
  return role.Handle(req, GroupsToFrames({p}, false));
}

std::string RingName(const char* tag) {
  return "/rlforge-test-role-" + std::to_string(getpid()) + tag;
}

TEST(LmRolloutRoleTest, VersionStreamedThroughTheRingLandsInTheEngine) {
  Engine e = MakeEngine("in_place");
  ASSERT_TRUE(e.role);
  auto sink = ShmRingSink::Create(RingName("a"), 1024, 20);
  ASSERT_TRUE(sink.ok());
  ASSERT_TRUE((*sink)->BeginPublication(1, 1).ok());
  const auto w = TrainerWeights(0.5f);
  const proto::WeightsReady r = Announce(w, 1, (*sink)->location());
  ASSERT_GT(BucketCount(r.manifest()), 4);
  absl::Status written;
  std::thread publisher([&] { written = Write(r, w, **sink); });
  auto reply = Load(*e.role, r);
  publisher.join();
  ASSERT_TRUE(written.ok()) << written;
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(e.role->policy_version(), 1);
  EXPECT_EQ(reply->result.metrics().at("weight_bytes"), r.manifest().total_bytes());
  auto& engine = static_cast<LmRolloutRole&>(*e.role).engine();
  size_t i = 0;
  for (const auto& p : engine.model()->named_parameters()) {
    ASSERT_EQ(p.key(), w[i].first);
    EXPECT_TRUE(torch::equal(p.value(), w[i].second)) << p.key();
    ++i;
  }
  EXPECT_EQ(i, w.size());
  auto gen = Generate(*e.role);
  ASSERT_TRUE(gen.ok()) << gen.status();
}

// The nccl transport's engine side, run on the CPU: a "nccl:<group>" location forms the weight
// group on the engine's device (the CPU here, so gloo) and reads through the device broadcast
// source, in place or into the device staging copy; two versions through one group.
TEST(LmRolloutRoleTest, DeviceBroadcastVersionsLandInTheEngineInPlaceAndStaged) {
  for (const std::string apply : {"in_place", "staged"}) {
    SCOPED_TRACE(apply);
    auto store = dist::StoreServer::Start("127.0.0.1");
    ASSERT_TRUE(store.ok()) << store.status();
    Engine e = MakeEngine(apply, "", "cpu", nullptr, (*store)->address());
    ASSERT_TRUE(e.role);
    const std::string group = "weights-" + apply;
    std::unique_ptr<dist::Communicator> comm;
    std::thread connect([&] {
      dist::GroupOptions g;
      g.store_address = (*store)->address();
      g.name = group;
      g.size = 2;
      g.timeout_s = 20;
      auto made = dist::ConnectGroup(g);
      EXPECT_TRUE(made.ok()) << made.status();
      if (made.ok()) comm = std::move(*made);
    });
    for (int64_t version = 1; version <= 2; ++version) {
      const auto w = TrainerWeights(0.25f * static_cast<float>(version));
      const proto::WeightsReady r = Announce(w, version, "nccl:" + group);
      ASSERT_GT(BucketCount(r.manifest()), 4);
      absl::Status written;
      std::thread publisher([&] {
        if (connect.joinable()) connect.join();
        if (comm == nullptr) return;
        DeviceBroadcastSink sink(comm.get(), r.manifest().bucket_bytes(), torch::kCPU);
        DeviceBucketWriter writer(r.manifest(), sink, version);
        for (const auto& [name, t] : w) {
          if (written = writer.Append(name, t); !written.ok()) return;
        }
        written = writer.Finish();
      });
      proto::WorkRequest req;
      *req.mutable_load_weights()->mutable_weights() = r;
      req.mutable_load_weights()->set_group_rank(1);
      req.mutable_load_weights()->set_group_size(2);
      auto reply = e.role->Handle(req, {});
      publisher.join();
      ASSERT_TRUE(written.ok()) << written;
      ASSERT_TRUE(reply.ok()) << reply.status();
      EXPECT_EQ(e.role->policy_version(), version);
      EXPECT_EQ(reply->result.metrics().at("weight_bytes"), r.manifest().total_bytes());
      size_t i = 0;
      for (const auto& p :
           static_cast<LmRolloutRole&>(*e.role).engine().model()->named_parameters()) {
        EXPECT_TRUE(torch::equal(p.value(), w[i++].second)) << p.key();
      }
    }
    ASSERT_TRUE(Generate(*e.role).ok());
  }
}

// A child process publishes bucket 0 of version 1, then is killed.
absl::StatusOr<WorkReply> LoadFromDyingPublisher(Role& role, const std::string& name) {
  const auto w = TrainerWeights(0.5f);
  const proto::WeightsReady r = Announce(w, 1, "shm-ring:" + name);
  const proto::WeightManifest& m = r.manifest();
  DyingPublisher publisher(
      [&]() -> absl::StatusOr<std::unique_ptr<BucketSink>> {
        auto sink = ShmRingSink::Create(name, m.bucket_bytes(), 20);
        if (!sink.ok()) return sink.status();
        if (absl::Status s = (*sink)->BeginPublication(1, 1); !s.ok()) return s;
        return std::unique_ptr<BucketSink>(std::move(*sink));
      },
      m, [](BucketSink&) { return absl::OkStatus(); }, 1);
  if (!publisher.started() || !publisher.Cut())
    return absl::InternalError("child publisher failed");
  auto reply = Load(role, r);
  shm_unlink(name.c_str());
  return reply;
}

TEST(LmRolloutRoleTest, StagedEngineStaysOnThePreviousVersionWhenThePublisherDies) {
  Engine e = MakeEngine("staged");
  ASSERT_TRUE(e.role);
  auto before = Generate(*e.role);
  ASSERT_TRUE(before.ok()) << before.status();
  auto reply = LoadFromDyingPublisher(*e.role, RingName("b"));
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("rollout-1 could not load weight version 1: bucket 1"),
            std::string::npos)
      << reply.status();
  EXPECT_NE(reply.status().message().find("exited mid-transfer"), std::string::npos);
  EXPECT_EQ(e.role->policy_version(), 0);
  const auto start = TrainerWeights(0);
  size_t i = 0;
  for (const auto& p : static_cast<LmRolloutRole&>(*e.role).engine().model()->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), start[i++].second)) << p.key() << " was overwritten";
  }
  auto after = Generate(*e.role);
  ASSERT_TRUE(after.ok()) << "a staged engine keeps serving version 0: " << after.status();
}

TEST(LmRolloutRoleTest, InPlaceEngineIsTornAndRefusesWorkWhenThePublisherDies) {
  Engine e = MakeEngine("in_place");
  ASSERT_TRUE(e.role);
  auto reply = LoadFromDyingPublisher(*e.role, RingName("c"));
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("rollout-1's weights are torn"), std::string::npos)
      << reply.status();
  auto after = Generate(*e.role);
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("torn"), std::string::npos) << after.status();
}

// Version `version` of `w` as an inline "weights" frame, checksums in `r`.
std::vector<TensorFrame> InlineWeights(const std::vector<std::pair<std::string, torch::Tensor>>& w,
                                       int64_t version, proto::WeightsReady& r) {
  TensorFrame frame = TensorFrame::Allocate("weights", proto::U8,
                                            {static_cast<int64_t>(r.manifest().total_bytes())});
  MemorySink sink(r.manifest(), static_cast<char*>(frame.data()));
  BucketWriter writer(r.manifest(), sink, version);
  for (const auto& [name, t] : w)
    EXPECT_TRUE(writer.Append(name, t.data_ptr<float>(), t.numel()).ok());
  auto sums = writer.Finish();
  EXPECT_TRUE(sums.ok());
  if (sums.ok()) {
    for (uint64_t s : *sums) r.add_bucket_checksums(s);
  }
  std::vector<TensorFrame> frames;
  frames.push_back(std::move(frame));
  return frames;
}

absl::StatusOr<std::vector<LmGroup>> GenerateGroups(Role& role, const std::vector<LmGroup>& prompts,
                                                    double temperature = 1) {
  proto::WorkRequest req;
  proto::LmGenerate* g = req.mutable_lm_generate();
  g->set_n(2);
  g->set_temperature(temperature);
  g->set_top_p(1);
  g->set_max_tokens(4);
  g->set_min_groups(1);
  g->set_seed(5);
  absl::StatusOr<WorkReply> reply = role.Handle(req, GroupsToFrames(prompts, false));
  if (!reply.ok()) return reply.status();
  return GroupsFromFrames(reply->tensors, true, 2);
}

// Asynchronous RL loads weights while groups are in flight: a group that the load's drain
// finished on the old weights comes back with the next lm_generate, even when the engine has
// nothing unfinished left (it was once lost: the reply was empty).
TEST(LmRolloutRoleTest, GroupFinishedByALoadsDrainComesBackWithTheNextGenerate) {
  Engine e = MakeEngine("staged", "engine: {max_tokens_per_step: 4, block_size: 4}\n");
  ASSERT_TRUE(e.role);
  LmGroup short_prompt, long_prompt;  // the long one's prefill takes several steps
  short_prompt.request_id = 1;
  short_prompt.prompt = {3, 4};
  long_prompt.request_id = 2;
  for (int t = 0; t < 14; ++t) long_prompt.prompt.push_back(5 + t);
  auto first = GenerateGroups(*e.role, {short_prompt, long_prompt});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u) << "the scenario needs the long prompt still generating";
  EXPECT_EQ(first->at(0).request_id, 1);

  const auto w = TrainerWeights(0.25f);
  proto::WeightsReady r = Announce(w, 1, "inline");
  auto loaded = Load(*e.role, r, InlineWeights(w, 1, r));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(e.role->policy_version(), 1);

  auto second = GenerateGroups(*e.role, {});
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ(second->at(0).request_id, 2);
  for (const LmSample& s : second->at(0).samples) {
    for (int64_t v : s.versions) EXPECT_EQ(v, 0);  // drained on the weights it started with
  }
}

// rollout.partial: the load does not wait for the started group; it continues under the new
// weights, so its tokens carry version 0 up to the load and version 1 after it.
TEST(LmRolloutRoleTest, PartialLoadContinuesAStartedGroupUnderTheNewWeights) {
  Engine e = MakeEngine("staged",
                        "engine: {max_tokens_per_step: 4, block_size: 4}\n"
                        "rollout: {max_staleness: 1, partial: true}\n");
  ASSERT_TRUE(e.role);
  LmGroup short_prompt, longer_prompt;  // the longer one starts decoding a step or two later
  short_prompt.request_id = 1;
  short_prompt.prompt = {3, 4};
  longer_prompt.request_id = 2;
  longer_prompt.prompt = {5, 6, 7, 8, 9, 10};
  auto first = GenerateGroups(*e.role, {short_prompt, longer_prompt});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u) << "the scenario needs the longer prompt still generating";
  EXPECT_EQ(first->at(0).request_id, 1);

  const auto w = TrainerWeights(0.25f);
  proto::WeightsReady r = Announce(w, 1, "inline");
  auto loaded = Load(*e.role, r, InlineWeights(w, 1, r));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(e.role->policy_version(), 1);

  auto second = GenerateGroups(*e.role, {});
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ(second->at(0).request_id, 2);
  for (const LmSample& s : second->at(0).samples) {
    ASSERT_EQ(s.versions.size(), s.tokens.size());
    ASSERT_FALSE(s.versions.empty());
    EXPECT_EQ(s.versions.front(), 0) << "sampled before the load, on the old weights";
    EXPECT_EQ(s.versions.back(), 1) << "sampled after the load, on the new weights";
    EXPECT_TRUE(std::is_sorted(s.versions.begin(), s.versions.end()));
  }
}

// Version `version` of `w` as the controller sends it inline: its announcement (with the
// buckets' checksums) and the frame that carries it.
std::pair<proto::WeightsReady, TensorFrame> InlineVersion(
    const std::vector<std::pair<std::string, torch::Tensor>>& w, int64_t version) {
  proto::WeightsReady r = Announce(w, version, "inline");
  TensorFrame frame = TensorFrame::Allocate("weights", proto::U8,
                                            {static_cast<int64_t>(r.manifest().total_bytes())});
  MemorySink sink(r.manifest(), static_cast<char*>(frame.data()));
  BucketWriter writer(r.manifest(), sink, version);
  for (const auto& [name, t] : w) {
    EXPECT_TRUE(writer.Append(name, t.data_ptr<float>(), t.numel()).ok());
  }
  auto sums = writer.Finish();
  EXPECT_TRUE(sums.ok()) << sums.status();
  if (sums.ok()) {
    for (uint64_t s : *sums) r.add_bucket_checksums(s);
  }
  return {std::move(r), std::move(frame)};
}

TEST(LmRolloutRoleTest, CorruptedInlineBucketIsRefusedNamingEngineVersionAndBucket) {
  Engine e = MakeEngine("staged");
  ASSERT_TRUE(e.role);
  auto [r, frame] = InlineVersion(TrainerWeights(0.25f), 3);
  static_cast<char*>(frame.data())[1024 * 2 + 17] ^= 0x01;
  std::vector<TensorFrame> frames;
  frames.push_back(std::move(frame));
  auto reply = Load(*e.role, r, std::move(frames));
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("rollout-1 refused weight version 3: bucket 2 of"),
            std::string::npos)
      << reply.status();
  EXPECT_EQ(e.role->policy_version(), 0);
}

std::vector<torch::Tensor> Parameters(Engine& e) {
  std::vector<torch::Tensor> out;
  for (const auto& p : static_cast<LmRolloutRole&>(*e.role).engine().model()->named_parameters())
    out.push_back(p.value());
  return out;
}

// engine.device cuda: the model, so the engine and its KV pool, go to the GPU, and every version
// is read through host memory (in_place and staged alike) into exactly the parameters a CPU
// engine gets. Where no GPU can be used (this build's libtorch, or none visible) the role is
// refused, naming the key, the value and the rank.
TEST(LmRolloutRoleGpuTest, AGpuEngineLoadsVersionsThroughHostMemoryOrIsRefusedNamingTheKey) {
  const bool gpu = models::TorchDevice("engine.device", "cuda", 1).ok();
  for (const std::string apply : {"in_place", "staged"}) {
    absl::Status created;
    Engine on_gpu = MakeEngine(apply, "", "cuda", &created);
    if (!gpu) {
      ASSERT_FALSE(created.ok()) << apply;
      EXPECT_NE(created.message().find("engine.device cuda (rank 1): "), std::string::npos)
          << created;
      continue;
    }
    ASSERT_TRUE(created.ok()) << created;
    Engine on_cpu = MakeEngine(apply);
    ASSERT_TRUE(on_cpu.role);
    EXPECT_TRUE(Parameters(on_gpu)[0].is_cuda());
    for (Engine* e : {&on_cpu, &on_gpu}) {
      auto [r, frame] = InlineVersion(TrainerWeights(0.5f), 1);
      std::vector<TensorFrame> frames;
      frames.push_back(std::move(frame));
      auto reply = Load(*e->role, r, std::move(frames));
      ASSERT_TRUE(reply.ok()) << reply.status();
      EXPECT_EQ(e->role->policy_version(), 1);
    }
    const auto x = Parameters(on_cpu), y = Parameters(on_gpu);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(torch::equal(x[i], y[i].cpu())) << i;
    auto groups = Generate(*on_gpu.role);
    EXPECT_TRUE(groups.ok()) << groups.status();
  }
}

// weights.apply mapped against in_place, three versions: the same parameters and the same
// greedy and sampled outputs. The mapped engine's parameters lie where the manifest puts them in
// the segment (no private copy), in slot version % 2.
TEST(LmRolloutRoleTest, MappedVersionServesTheSameParametersAndSamplesAsInPlace) {
  Engine copied = MakeEngine("in_place");
  Engine mapped = MakeEngine("mapped");
  ASSERT_TRUE(copied.role && mapped.role);
  auto ring = ShmRingSink::Create(RingName("m1"), 1024, 20);
  ASSERT_TRUE(ring.ok());
  const auto start = TrainerWeights(0);
  const proto::WeightManifest m = Announce(start, 0, "-").manifest();
  auto segment = MappedSink::Create(RingName("m2"), m, 20);
  ASSERT_TRUE(segment.ok()) << segment.status();
  LmGroup p;
  p.request_id = 1;
  p.prompt = {3, 4, 5};
  std::vector<const void*> first_param;
  for (int64_t version = 1; version <= 3; ++version) {
    const auto w = TrainerWeights(0.125f * static_cast<float>(version));
    const proto::WeightsReady r = Announce(w, version, (*ring)->location());
    ASSERT_TRUE((*ring)->BeginPublication(version, 1).ok());
    absl::Status written;
    std::thread publisher([&] { written = Write(r, w, **ring); });
    auto a = Load(*copied.role, r);
    publisher.join();
    ASSERT_TRUE(written.ok() && a.ok()) << written << a.status();
    const proto::WeightsReady rm = Announce(w, version, (*segment)->location());
    ASSERT_TRUE(Write(rm, w, **segment).ok());
    auto b = Load(*mapped.role, rm);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(mapped.role->policy_version(), version);
    EXPECT_EQ(b->result.metrics().at("weight_bytes"), m.total_bytes());
    const auto x = Parameters(copied), y = Parameters(mapped);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_TRUE(torch::equal(x[i], y[i])) << m.tensors(static_cast<int>(i)).name();
      EXPECT_EQ(
          static_cast<const char*>(y[i].data_ptr()) - static_cast<const char*>(y[0].data_ptr()),
          static_cast<ptrdiff_t>(m.tensors(static_cast<int>(i)).offset()));
    }
    first_param.push_back(y[0].data_ptr());
    for (double temperature : {0.0, 1.0}) {  // greedy, then sampled with the same seed
      auto ga = GenerateGroups(*copied.role, {p}, temperature);
      auto gb = GenerateGroups(*mapped.role, {p}, temperature);
      ASSERT_TRUE(ga.ok() && gb.ok()) << ga.status() << gb.status();
      ASSERT_EQ(ga->size(), 1u);
      ASSERT_EQ(gb->size(), 1u);
      for (size_t k = 0; k < ga->at(0).samples.size(); ++k) {
        EXPECT_EQ(ga->at(0).samples[k].tokens, gb->at(0).samples[k].tokens)
            << "version " << version << " temperature " << temperature;
        EXPECT_EQ(ga->at(0).samples[k].logprobs, gb->at(0).samples[k].logprobs);
      }
    }
  }
  EXPECT_NE(first_param[0], first_param[1]) << "versions 1 and 2 sit in different slots";
  EXPECT_EQ(first_param[0], first_param[2]) << "version 3 reuses version 1's slot";
}

// The publisher dies while writing version 2: the mapped engine stays on version 1, untouched,
// and keeps generating.
TEST(LmRolloutRoleTest, MappedEngineStaysOnThePreviousVersionWhenThePublisherDies) {
  Engine e = MakeEngine("mapped");
  ASSERT_TRUE(e.role);
  const std::string name = RingName("m3");
  const auto w1 = TrainerWeights(0.5f);
  const proto::WeightsReady r1 = Announce(w1, 1, "shm-mapped:" + name);
  const proto::WeightsReady r2 = Announce(w1, 2, "shm-mapped:" + name);
  const proto::WeightManifest& m = r1.manifest();
  DyingPublisher publisher([&] { return MappedSink::Create(name, m, 20); }, m,
                           [&](BucketSink& sink) { return Write(r1, w1, sink); }, 2);
  ASSERT_TRUE(publisher.started());
  auto first = Load(*e.role, r1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(publisher.Cut());
  auto second = Load(*e.role, r2);
  shm_unlink(name.c_str());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("rollout-1 could not load weight version 2: bucket 1"),
            std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("exited mid-transfer"), std::string::npos);
  EXPECT_EQ(e.role->policy_version(), 1);
  const auto now = Parameters(e);
  for (size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(torch::equal(now[i], w1[i].second));
  auto after = Generate(*e.role);
  ASSERT_TRUE(after.ok()) << "a mapped engine keeps serving version 1: " << after.status();
}

}  // namespace
}  // namespace rlforge
