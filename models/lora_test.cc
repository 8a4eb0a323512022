// LoRA against peft: the fixture under tests/data/lora/ (tools/make_lora_fixtures.py) holds a
// tiny Llama, a peft adapter saved by peft, and peft's logits and adapter gradients.
#include "models/lora.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "common/atomic_file.h"
#include "models/hf_checkpoint.h"
#include "models/safetensors.h"
#include "nlohmann/json.hpp"
#include "rlforge_paths.h"

namespace rlforge::models {
namespace {

namespace fs = std::filesystem;

std::string Fixture(const std::string& part) {
  return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/lora/" + part;
}

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("lora_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

Transformer Base() {
  auto m = LoadHfModel(Fixture("base"));
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

torch::Tensor Logits(Transformer& m, const torch::Tensor& tokens) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const torch::Tensor pos = torch::arange(T, torch::kLong).expand({B, T}).contiguous();
  return m->Logits(m->Hidden(tokens, pos, torch::zeros({B, T}, torch::kLong)));
}

torch::Tensor Ref(const std::string& name) {
  auto f = SafetensorsFile::Open(Fixture("reference.safetensors"));
  EXPECT_TRUE(f.ok()) << f.status();
  auto t = (*f)->Read(name);
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  return *t;
}

// Two fp32 computations of the same forward differ by at most gamma_n times the sum of the
// terms' magnitudes (Higham 3.1); n is the longest accumulation from input to logit and back to
// an adapter weight: per layer the hidden, MLP and vocabulary inner products and the tokens,
// over the layers and the head, twice (forward and backward). The magnitude sum is bounded here
// by the tensor's largest magnitude times the fan-in products' growth, taken as max |x| + 1.
double Gamma() {
  const double u = std::numeric_limits<float>::epsilon() / 2, n = 2.0 * 3 * (32 + 48 + 37 + 18);
  return n * u / (1 - n * u);
}

void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double tol = Gamma() * (want.abs().max().item<double>() + 1);
  EXPECT_LE((got - want).abs().max().item<double>(), tol) << what;
}

TEST(LoraTest, ForwardMatchesPeft) {
  Transformer m = Base();
  auto spec = LoadPeftAdapter(m, Fixture("adapter"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rank, 4);
  EXPECT_DOUBLE_EQ(spec->alpha, 8);
  m->eval();
  torch::NoGradGuard ng;
  const torch::Tensor logits = Logits(m, Ref("tokens"));
  ExpectClose(logits, Ref("logits"), "logits");
  // The adapter matters: the base alone is far from peft's logits.
  Transformer base = Base();
  EXPECT_GT((Logits(base, Ref("tokens")) - Ref("logits")).abs().max().item<double>(), 0.1);
}

TEST(LoraTest, AdapterGradientsMatchPeftAndTheBaseGetsNone) {
  Transformer m = Base();
  ASSERT_TRUE(LoadPeftAdapter(m, Fixture("adapter")).ok());
  FreezeBase(m);
  m->train();
  const torch::Tensor logits = Logits(m, Ref("tokens"));
  const torch::Tensor loss =
      torch::nn::functional::cross_entropy(logits.reshape({-1, 37}), Ref("targets").reshape({-1}));
  ExpectClose(loss.detach(), Ref("loss"), "loss");
  loss.backward();
  int adapters = 0;
  for (const auto& p : m->named_parameters()) {
    if (!IsLoraParameter(p.key())) {
      EXPECT_FALSE(p.value().grad().defined()) << p.key();
      continue;
    }
    ++adapters;
    ExpectClose(p.value().grad(), Ref(PeftTensorName(p.key()) + ".grad"), p.key());
  }
  EXPECT_EQ(adapters, 2 * 2 * 5);  // layers x {A, B} x target modules
}

TEST(LoraTest, MergedModelMatchesTheAdapterForward) {
  Transformer m = Base();
  auto spec = LoadPeftAdapter(m, Fixture("adapter"));
  ASSERT_TRUE(spec.ok());
  Transformer merged = Base();
  ASSERT_TRUE(MergeAdapters(merged, LoraParameters(m), spec->scale()).ok());
  m->eval();
  torch::NoGradGuard ng;
  ExpectClose(Logits(merged, Ref("tokens")), Ref("logits"), "merged logits");
  EXPECT_FALSE(merged->has_adapters());
}

// The engine's side: adapters written into its (out-of-forward) lora parameters, then merged
// from the kept base, so a second version replaces the first instead of adding to it.
TEST(LoraTest, EngineMergesEachVersionFromTheKeptBase) {
  Transformer trained = Base();
  auto spec = LoadPeftAdapter(trained, Fixture("adapter"));
  ASSERT_TRUE(spec.ok());
  Transformer engine = Base();
  auto merged = MergedLora::Create(engine, *spec);
  ASSERT_TRUE(merged.ok()) << merged.status();
  engine->eval();
  torch::NoGradGuard ng;
  const torch::Tensor base_logits = Logits(engine, Ref("tokens"));
  std::map<std::string, torch::Tensor> mine;
  for (auto& [name, t] : LoraParameters(engine)) mine[name] = t;
  ASSERT_EQ(mine.size(), LoraParameters(trained).size());
  for (auto& [name, t] : LoraParameters(trained)) mine.at(name).copy_(t);
  (*merged)->Merge();
  ExpectClose(Logits(engine, Ref("tokens")), Ref("logits"), "merged version 1");
  for (auto& [name, t] : mine) t.zero_();  // version 2: adapters zero, the base again
  (*merged)->Merge();
  EXPECT_TRUE(torch::equal(Logits(engine, Ref("tokens")), base_logits));
}

TEST(LoraTest, SavedAdapterHasPeftsNamesShapesAndValues) {
  Transformer m = Base();
  auto spec = LoadPeftAdapter(m, Fixture("adapter"));
  ASSERT_TRUE(spec.ok());
  const std::string dir = TempDir("save");
  ASSERT_TRUE(SavePeftAdapter(m, *spec, "base", dir).ok());
  auto ours = SafetensorsFile::Open(dir + "/adapter_model.safetensors");
  auto peft = SafetensorsFile::Open(Fixture("adapter/adapter_model.safetensors"));
  ASSERT_TRUE(ours.ok() && peft.ok());
  ASSERT_EQ((*ours)->names(), (*peft)->names());
  for (const std::string& name : (*peft)->names()) {
    EXPECT_TRUE(torch::equal(*(*ours)->Read(name), *(*peft)->Read(name))) << name;
  }
  auto again = ReadPeftConfig(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rank, spec->rank);
  EXPECT_EQ(again->target_modules, spec->target_modules);
}

TEST(LoraTest, FreshAdapterIsPeftsInitAndChangesNothing) {
  Transformer m = Base();
  Transformer base = Base();
  LoraSpec s{8, 16, 0, {"q_proj", "down_proj"}};
  ASSERT_TRUE(AddLora(m, s).ok());
  for (const auto& [name, t] : LoraParameters(m)) {
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_EQ(t.abs().max().item<double>(), 0) << name;
    } else {  // kaiming_uniform(a = sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
      EXPECT_LE(t.abs().max().item<double>(), 1 / std::sqrt(static_cast<double>(t.size(1))));
      EXPECT_GT(t.abs().max().item<double>(), 0.5 / std::sqrt(static_cast<double>(t.size(1))));
    }
  }
  torch::NoGradGuard ng;
  EXPECT_TRUE(torch::equal(Logits(m, Ref("tokens")), Logits(base, Ref("tokens"))));
}

TEST(LoraTest, DropoutActsOnTheAdapterInputOnlyInTraining) {
  Transformer m = Base();
  auto spec = LoadPeftAdapter(m, Fixture("adapter"));
  ASSERT_TRUE(spec.ok());
  Transformer d = Base();
  LoraSpec with_dropout = *spec;
  with_dropout.dropout = 0.5;
  ASSERT_TRUE(AddLora(d, with_dropout).ok());
  CopyParameters(m, d);
  torch::NoGradGuard ng;
  m->eval();
  d->eval();
  EXPECT_TRUE(torch::equal(Logits(d, Ref("tokens")), Logits(m, Ref("tokens"))));
  d->train();
  EXPECT_FALSE(torch::allclose(Logits(d, Ref("tokens")), Logits(m, Ref("tokens"))));
}

TEST(LoraTest, BadSpecsAndConfigsNameWhatIsWrong) {
  Transformer m = Base();
  EXPECT_NE(AddLora(m, {0, 16, 0, {"q_proj"}}).message().find("rank"), std::string::npos);
  EXPECT_NE(AddLora(m, {4, 16, 0, {"qproj"}}).message().find("'qproj'"), std::string::npos);
  const std::string dir = TempDir("bad");
  ASSERT_TRUE(WriteFileAtomic(dir + "/adapter_config.json",
                              R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8,)"
                              R"( "target_modules": ["q_proj"], "use_dora": true})")
                  .ok());
  auto s = ReadPeftConfig(dir);
  EXPECT_NE(s.status().message().find("adapter_config.json: use_dora"), std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace rlforge::models
