// End-to-end SFT jobs through the rlforge binary: arithmetic from scratch and JSONL data,
// checkpoints in HF format, held-out accuracy in metrics.jsonl, config errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

std::string Tiny() { return SourceDir() + "/configs/sft_tiny.yaml"; }

TEST(SftTest, TinyArithmeticJobTrainsEvaluatesAndSavesHfCheckpoints) {
  std::string root = FreshDir("sft_tiny");
  auto [code, out] = RunRlforge({"run", Tiny(), "job.run_root=" + root, "job.name=t"}, 300);
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/t");
  ASSERT_EQ(m.size(), 3u) << out;  // 12 steps / 4 per iteration
  EXPECT_LT(m.back()["metrics"]["loss"].get<double>(), m.front()["metrics"]["loss"].get<double>());
  EXPECT_EQ(m.back()["metrics"]["optimizer_step"].get<double>(), 12);
  EXPECT_FALSE(m[0]["metrics"].contains("heldout_accuracy"));
  ASSERT_TRUE(m[1]["metrics"].contains("heldout_accuracy"));  // step 8
  double acc = m.back()["metrics"]["heldout_accuracy"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  EXPECT_EQ(m.back()["metrics"]["heldout_examples"].get<double>(), 20);
  for (const char* step : {"step_8", "step_12"}) {
    std::string dir = root + "/t/checkpoints/" + step;
    EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors")) << dir;
    EXPECT_TRUE(std::filesystem::exists(dir + "/tokenizer.json")) << dir;
    auto config = nlohmann::json::parse(ReadFile(dir + "/config.json"));
    EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
    EXPECT_EQ(config["num_hidden_layers"], 2);
  }
}

TEST(SftTest, JsonlDataAndFineTuningFromACheckpoint) {
  std::string root = FreshDir("sft_jsonl");
  // Train from scratch first, to have a checkpoint to continue from.
  ASSERT_EQ(RunRlforge({"run", Tiny(), "job.run_root=" + root, "job.name=base", "sft.steps=4",
                        "sft.eval_every=0", "sft.save_every=0"},
                       300)
                .first,
            0);
  const std::string base = root + "/base/checkpoints/step_4";
  {
    std::ofstream train(root + "/train.jsonl"), heldout(root + "/heldout.jsonl");
    for (int i = 0; i < 40; ++i) {
      train << nlohmann::json{{"prompt", std::to_string(i) + "+1="},
                              {"response", std::to_string(i + 1)}}
                   .dump()
            << "\n";
    }
    heldout << R"({"prompt": "50+1=", "response": "51"})"
            << "\n"
            << R"({"prompt": "60+1=", "response": "61"})"
            << "\n";
  }
  auto [code, out] =
      RunRlforge({"run", Tiny(), "job.run_root=" + root, "job.name=ft", "model.path=" + base,
                  "data.source=jsonl", "data.train_path=" + root + "/train.jsonl",
                  "data.heldout_path=" + root + "/heldout.jsonl"},
                 300);
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/ft");
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.back()["metrics"]["heldout_examples"].get<double>(), 2);
  EXPECT_TRUE(std::filesystem::exists(root + "/ft/checkpoints/step_12/model.safetensors"));
}

// trainer.ranks: 2 starts the ranks' rendezvous store (rlforge-store) before the ranks, hands
// each its address, and stops it with the job.
TEST(SftTest, TwoTrainerRanksMeetAtTheStoreTheControllerStarts) {
  std::string root = FreshDir("sft_two_ranks");
  auto [code, out] = RunRlforge({"run", Tiny(), "job.run_root=" + root, "job.name=t",
                                 "trainer.ranks=2", "sft.steps=4", "dashboard.enabled=false"},
                                300);
  ASSERT_EQ(code, 0) << out;
  const std::string logs = root + "/t/logs/";
  const std::string address = ReadFile(root + "/t/trainer_store.address");
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(ReadFile(logs + "trainer-store.log").find("trainer ranks meet at 127.0.0.1:"),
            std::string::npos);
  EXPECT_NE(ReadFile(logs + "trainer-store.log").find("stopping (signal 15)"), std::string::npos)
      << "the store stops with the job";
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(ReadFile(logs + "trainer-" + std::to_string(rank) + ".log")
                  .find("(rank " + std::to_string(rank) + " of 2)"),
              std::string::npos)
        << "rank " << rank;
  }
}

TEST(SftTest, BadSftConfigIsAnErrorNamingTheKey) {
  std::string root = FreshDir("sft_bad");
  auto [code, out] = RunRlforge({"run", Tiny(), "job.run_root=" + root, "sft.seq_len=1000"}, 60);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("sft.seq_len"), std::string::npos) << out;
  auto [code2, out2] =
      RunRlforge({"run", Tiny(), "job.run_root=" + root, "model.num_key_value_heads=3"}, 60);
  EXPECT_NE(code2, 0);
  EXPECT_NE(out2.find("num_key_value_heads"), std::string::npos) << out2;
}

}  // namespace
}  // namespace rlforge::testing
