// docs/bring_your_own_model.md's job, taken from the page, on a tiny random Qwen3 checkpoint
// with a byte-level BPE tokenizer and a Qwen3-style chat template (built here), with only the
// page's two keys changed (and the run shortened): it runs, saves its checkpoint, and
// `rlforge eval --job` of that checkpoint gives the run's final held-out accuracy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "models/hf_checkpoint.h"
#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

namespace fs = std::filesystem;

// The page's ```yaml block.
std::string DocsJob() {
  const std::string doc = ReadFile(SourceDir() + "/docs/bring_your_own_model.md");
  const size_t begin = doc.find("```yaml\n");
  const size_t end = doc.find("```\n", begin + 8);
  return begin == std::string::npos ? "" : doc.substr(begin + 8, end - begin - 8);
}

// tests/data/lm/qwen3_tied's architecture with the vocabulary of the chat-template fixture's
// tokenizer (Qwen's special tokens, Qwen3's template in tokenizer_config.json), random weights.
std::string TinyQwen3(const std::string& dir) {
  auto config = models::LoadHfConfig(SourceDir() + "/tests/data/lm/qwen3_tied");
  EXPECT_TRUE(config.ok()) << config.status();
  const std::string tok = SourceDir() + "/tests/data/chat_templates/checkpoint";
  config->vocab_size = 423;               // covers the tokenizer's ids
  config->max_position_embeddings = 512;  // the word problems run long in a 423-token BPE
  config->bos_token_id = -1;
  config->eos_token_id = 2;  // <|im_end|>
  models::Transformer model(*config);
  EXPECT_TRUE(models::SaveHfModel(model, dir).ok());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(fs::path(tok) / f, fs::path(dir) / f, fs::copy_options::overwrite_existing);
  }
  return dir;
}

// The page's job on the tiny checkpoint, shortened to one iteration; `extra` overrides more.
std::vector<std::string> ShortDocsJob(const std::string& root, const std::string& job,
                                      const std::string& model,
                                      const std::vector<std::string>& extra) {
  const std::string data = SourceDir() + "/data/word_problems/";
  std::vector<std::string> args = {"run",
                                   job,
                                   "job.run_root=" + root,
                                   "model.path=" + model,
                                   "data.train_path=" + data + "train.jsonl",
                                   "data.heldout_path=" + data + "heldout.jsonl",
                                   "job.iterations=1",
                                   "grpo.prompts_per_iteration=2",
                                   "grpo.group_size=2",
                                   "grpo.max_new_tokens=4",
                                   "grpo.eval_examples=2",
                                   "engine.kv_memory_mb=16",
                                   "trainer.threads=1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Regression (issue 36): a trainer loading a real checkpoint (seconds) was declared dead for
// "missed 5 heartbeats", because its heartbeats started only once its role was built. Here
// every progress report of every actor's set-up sleeps 300 ms (the test hook
// RLFORGE_TEST_SETUP_DELAY_MS), so the trainer's set-up lasts longer than the default heartbeat
// silence (5 x 500 ms); with every other default the job runs, and the controller logs the
// phases it heard.
TEST(ByoModelTest, DocsJobSurvivesASlowCheckpointLoad) {
  const std::string root = FreshDir("byo_model_slow_load");
  const std::string job = root + "/my_grpo.yaml";
  std::ofstream(job) << DocsJob();
  const std::string model = TinyQwen3(root + "/qwen3");
  JobProcess p(ShortDocsJob(root, job, model, {}), root + "/out.txt",
               {{"RLFORGE_TEST_SETUP_DELAY_MS", "300"}});
  const std::optional<int> code = p.Wait(300);
  const std::string out = p.Output();
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("trainer-0 setting up: loading model"), std::string::npos) << out;
  // The set-up was longer than the silence that used to end it (a sleep's lower bound, not a
  // measurement: the reports' sleeps alone add up to more).
  const size_t at = out.find("trainer-0 set up in ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + 20)), 2.5) << out;
  EXPECT_EQ(ReadMetricsJsonl(root + "/my_grpo").size(), 2u) << out;
}

// A set-up past controller.setup_timeout_s stops the job, naming the actor and its phase.
TEST(ByoModelTest, SetUpPastItsDeadlineStopsTheJobNamingActorAndPhase) {
  const std::string root = FreshDir("byo_model_setup_deadline");
  const std::string job = root + "/my_grpo.yaml";
  std::ofstream(job) << DocsJob();
  const std::string model = TinyQwen3(root + "/qwen3");
  JobProcess p(ShortDocsJob(root, job, model, {"controller.setup_timeout_s=3"}), root + "/out.txt",
               {{"RLFORGE_TEST_SETUP_DELAY_MS", "5000"}});
  const std::optional<int> code = p.Wait(300);
  const std::string out = p.Output();
  ASSERT_TRUE(code.has_value()) << out;
  EXPECT_NE(*code, 0) << out;
  EXPECT_NE(out.find("actor trainer-0 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find("did not finish its set-up within 3 s (controller.setup_timeout_s); last "
                     "phase: loading model"),
            std::string::npos)
      << out;
}

TEST(ByoModelTest, DocsJobRunsOnAQwen3Checkpoint) {
  const std::string root = FreshDir("byo_model");
  const std::string job = root + "/my_grpo.yaml";
  std::ofstream(job) << DocsJob();
  const std::string model = TinyQwen3(root + "/qwen3");
  const std::string data = SourceDir() + "/data/word_problems/";
  auto [code, out] = RunRlforge(
      {"run", job, "job.run_root=" + root, "model.path=" + model,
       "data.train_path=" + data + "train.jsonl", "data.heldout_path=" + data + "heldout.jsonl",
       // shortened to seconds:
       "job.iterations=2", "grpo.prompts_per_iteration=2", "grpo.group_size=2",
       "grpo.max_new_tokens=8", "grpo.eval_examples=4", "engine.kv_memory_mb=16",
       "trainer.threads=1"},
      300);
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/my_grpo");
  ASSERT_EQ(m.size(), 3u) << out;
  EXPECT_EQ(m[2]["metrics"]["heldout_examples"].get<double>(), 4);
  EXPECT_TRUE(m[1]["metrics"].contains("reward/math/mean"));
  const std::string resolved = ReadFile(root + "/my_grpo/config.resolved.yaml");
  EXPECT_NE(resolved.find("prompt_template: model"), std::string::npos);

  const std::string ckpt = root + "/my_grpo/checkpoints/step_2";
  ASSERT_TRUE(fs::exists(ckpt + "/config.json"));
  std::tie(code, out) =
      RunRlforge({"eval", "--model", ckpt, "--job", root + "/my_grpo/config.resolved.yaml"}, 120);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json s = nlohmann::json::parse(out.substr(out.rfind("\n{") + 1));
  EXPECT_EQ(s["examples"].get<int>(), 4);
  EXPECT_EQ(s["verifier"], "math");
  EXPECT_DOUBLE_EQ(s["accuracy"].get<double>(), m[2]["metrics"]["heldout_accuracy"].get<double>());
}

}  // namespace
}  // namespace rlforge::testing
