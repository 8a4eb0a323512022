// `rlforge generate` and `rlforge eval` through the rlforge binary (which runs rlforge-lm): on
// the checkpoints of a short arithmetic SFT stage and a GRPO job that starts from it, eval gives
// exactly the job's own held-out accuracy; sampled eval reports pass@k and maj@k; generate reads
// prompts from a file or stdin; bad input is an error naming the flag, file and line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

using Json = nlohmann::json;

// "a+b=" -> "a+b" for 1-2 digit addition (the arithmetic task's plain style), as JSONL.
void WriteAdditionJsonl(const std::string& path, int first, int count) {
  std::ofstream out(path);
  for (int i = first; i < first + count; ++i) {
    const int a = (i * 37) % 100, b = (i * 53 + 11) % 100;
    out << Json{{"prompt", std::to_string(a) + "+" + std::to_string(b) + "="},
                {"answer", std::to_string(a + b)}}
               .dump()
        << "\n";
  }
}

// The summary JSON object `rlforge eval` prints last.
Json EvalSummary(const std::string& out) {
  const size_t at = out.rfind("\n{");
  return at == std::string::npos ? Json() : Json::parse(out.substr(at + 1), nullptr, false);
}

class GenerateEvalTest : public ::testing::Test {
 protected:
  // A quarter-minute arithmetic SFT stage (tests/grpo_test.cc's flawed-demonstration start,
  // shorter): some of its held-out answers are right, so equal accuracies mean something.
  static void SetUpTestSuite() {
    root_ = new std::string(FreshDir("generate_eval"));
    auto [code, out] = RunRlforge(
        {"run", SourceDir() + "/configs/sft_arith_flawed.yaml", "job.run_root=" + *root_,
         "job.name=sft", "job.seed=1", "model.hidden_size=64", "model.intermediate_size=176",
         "model.num_hidden_layers=2", "data.ops=[\"+\"]", "data.heldout_examples=50",
         "sft.steps=600", "sft.eval_every=0", "trainer.warmup_steps=20", "trainer.lr=3e-3"},
        600);
    ASSERT_EQ(code, 0) << out;
    WriteAdditionJsonl(*root_ + "/train.jsonl", 0, 400);
    WriteAdditionJsonl(*root_ + "/heldout.jsonl", 1000, 60);
  }
  static std::string Sft() { return *root_ + "/sft/checkpoints/step_600"; }
  static std::string* root_;
};
std::string* GenerateEvalTest::root_ = nullptr;

TEST_F(GenerateEvalTest, EvalOfTheJobsCheckpointsGivesItsHeldOutAccuracy) {
  const std::string& root = *root_;
  auto [code, out] = RunRlforge(
      {"run", SourceDir() + "/configs/grpo_arith.yaml", "job.run_root=" + root, "job.name=g",
       "model.path=" + Sft(), "data.source=jsonl", "data.train_path=" + root + "/train.jsonl",
       "data.heldout_path=" + root + "/heldout.jsonl", "job.iterations=3", "grpo.eval_every=0",
       "grpo.eval_examples=50", "trainer.lr=1e-3"},
      300);
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/g");
  ASSERT_EQ(m.size(), 4u);
  const double start = m[0]["metrics"]["heldout_accuracy"].get<double>();
  const double end = m[3]["metrics"]["heldout_accuracy"].get<double>();
  EXPECT_GT(start, 0.05);  // 7 of 50 right here: equal accuracies are not two zeros

  // The final checkpoint, evaluated as the run's resolved config says.
  std::tie(code, out) = RunRlforge({"eval", "--model", root + "/g/checkpoints/step_3", "--job",
                                    root + "/g/config.resolved.yaml"},
                                   120);
  ASSERT_EQ(code, 0) << out;
  Json s = EvalSummary(out);
  EXPECT_EQ(s["examples"].get<int>(), 50) << out;
  EXPECT_DOUBLE_EQ(s["accuracy"].get<double>(), end) << out;

  // The starting checkpoint with the job's settings spelled out as flags.
  std::tie(code, out) =
      RunRlforge({"eval", "--model", Sft(), "--data", root + "/heldout.jsonl", "--template", "none",
                  "--max-tokens", "6", "--reward", "exact", "--limit", "50", "--threads", "1"},
                 120);
  ASSERT_EQ(code, 0) << out;
  s = EvalSummary(out);
  EXPECT_DOUBLE_EQ(s["accuracy"].get<double>(), start) << out;
  EXPECT_NE(out.find("eval: " + root + "/heldout.jsonl: accuracy"), std::string::npos) << out;
}

// Issue 42: `rlforge eval --job` of a job on the built-in arithmetic task (no
// data.heldout_path) failed with "--data is required"; it scores the held-out split the job
// generates for its seed, and gives the job's own heldout_accuracy.
TEST_F(GenerateEvalTest, EvalWithTheJobOfAnArithmeticTaskGivesItsHeldOutAccuracy) {
  const std::string& root = *root_;
  auto [code, out] = RunRlforge(
      {"run", SourceDir() + "/configs/grpo_arith.yaml", "job.run_root=" + root, "job.name=ga",
       "model.path=" + Sft(), "data.ops=[\"+\"]", "job.iterations=2", "grpo.eval_every=0",
       "grpo.eval_examples=50", "grpo.prompts_per_iteration=8", "trainer.lr=1e-3"},
      300);
  ASSERT_EQ(code, 0) << out;
  auto m = ReadMetricsJsonl(root + "/ga");
  ASSERT_EQ(m.size(), 3u);
  const double start = m[0]["metrics"]["heldout_accuracy"].get<double>();
  const double end = m[2]["metrics"]["heldout_accuracy"].get<double>();
  EXPECT_GT(start, 0.05);  // equal accuracies are not two zeros
  const std::string job = root + "/ga/config.resolved.yaml";
  std::tie(code, out) =
      RunRlforge({"eval", "--model", root + "/ga/checkpoints/step_2", "--job", job}, 120);
  ASSERT_EQ(code, 0) << out;
  Json s = EvalSummary(out);
  EXPECT_EQ(s["examples"].get<int>(), 50) << out;
  EXPECT_EQ(s["data"], "the arithmetic task's held-out split (job.seed 1)") << out;
  EXPECT_DOUBLE_EQ(s["accuracy"].get<double>(), end) << out;
  // The starting checkpoint with the GRPO job's settings: its step-0 accuracy.
  std::tie(code, out) = RunRlforge({"eval", "--model", Sft(), "--job", job}, 120);
  ASSERT_EQ(code, 0) << out;
  EXPECT_DOUBLE_EQ(EvalSummary(out)["accuracy"].get<double>(), start) << out;
}

// Issue 42: `rlforge generate` on a checkpoint with 64 positions failed with its own default
// --max-tokens 256. A default clips to the context with a note; a flag given does not.
TEST_F(GenerateEvalTest, DefaultMaxTokensFitTheModelsContextAndAGivenOneThatDoesNotIsAnError) {
  const std::string gen =
      "printf '12+34=\\n' | " + RlforgeBin() + " generate --model " + Sft() + " --temperature 0";
  auto run = [](const std::string& cmd, int* code) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string text;
    char buf[4096];
    for (size_t n; p != nullptr && (n = fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
    *code = p == nullptr ? -1 : WEXITSTATUS(pclose(p));
    return text;
  };
  int code = 0;
  std::string out = run(gen, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("note: max tokens "), std::string::npos) << out;
  EXPECT_NE(out.find(" instead of the default 256: prompt 1 ("), std::string::npos) << out;
  EXPECT_NE(out.find("fills the model's max_position_embeddings 64"), std::string::npos) << out;
  EXPECT_NE(out.find("\"prompt\":\"12+34=\""), std::string::npos) << out;
  out = run(gen + " --max-tokens 256", &code);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("error: --max-tokens 256: prompt 1 ("), std::string::npos) << out;
  EXPECT_NE(out.find("exceeds the model's max_position_embeddings 64"), std::string::npos) << out;
  auto [ecode, eout] = RunRlforge(
      {"eval", "--model", Sft(), "--data", *root_ + "/heldout.jsonl", "--max-tokens", "100"}, 60);
  EXPECT_EQ(ecode, 2) << eout;
  EXPECT_NE(eout.find("error: --max-tokens 100: prompt "), std::string::npos) << eout;
}

TEST_F(GenerateEvalTest, SampledEvalReportsPassAtKAndMajorityPerExample) {
  const std::string results = *root_ + "/sampled.jsonl";
  auto [code, out] = RunRlforge({"eval", "--model", Sft(), "--data", *root_ + "/heldout.jsonl",
                                 "--template", "none", "--max-tokens", "6", "--reward", "numeric",
                                 "--k", "4", "--n", "6", "--limit", "20", "--out", results},
                                120);
  ASSERT_EQ(code, 0) << out;
  Json s = EvalSummary(out);
  ASSERT_TRUE(s.contains("pass@4")) << out;
  EXPECT_EQ(s["n"].get<int>(), 6);
  EXPECT_GE(s["pass@4"].get<double>(), s["pass@1"].get<double>());
  EXPECT_GT(s["pass@4"].get<double>(), 0);
  std::ifstream in(results);
  std::string line;
  int rows = 0;
  double majority = 0;
  while (std::getline(in, line)) {
    Json r = Json::parse(line);
    EXPECT_EQ(r["index"].get<int>(), rows);
    EXPECT_EQ(r["samples"].size(), 6u);
    int correct = 0;
    for (const Json& smp : r["samples"]) correct += smp["correct"].get<bool>() ? 1 : 0;
    EXPECT_EQ(r["sample_correct"].get<int>(), correct);
    majority += r["majority_correct"].get<bool>() ? 1 : 0;
    ++rows;
  }
  EXPECT_EQ(rows, 20);
  EXPECT_DOUBLE_EQ(s["maj@4"].get<double>(), majority / 20);
}

TEST_F(GenerateEvalTest, GenerateReadsAFileOrStdinAndWritesJsonl) {
  const std::string prompts = *root_ + "/prompts.txt", out_path = *root_ + "/gen.jsonl";
  std::ofstream(prompts) << "12+34=\n\n{\"prompt\": \"5+5=\"}\n";
  auto [code, out] =
      RunRlforge({"generate", "--model", Sft(), "--prompts", prompts, "--n", "3", "--temperature",
                  "1", "--max-tokens", "4", "--seed", "7", "--out", out_path},
                 120);
  ASSERT_EQ(code, 0) << out;
  std::ifstream in(out_path);
  std::vector<Json> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(Json::parse(l));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["prompt"], "12+34=");
  EXPECT_EQ(lines[1]["prompt"], "5+5=");
  for (const Json& l : lines) {
    ASSERT_EQ(l["samples"].size(), 3u);
    for (const Json& smp : l["samples"]) {
      const std::string why = smp["finish_reason"].get<std::string>();
      EXPECT_TRUE(why == "stop" || why == "length") << why;
      EXPECT_LE(smp["tokens"].size(), 4u);
    }
  }
  // Greedy from stdin, to stdout.
  const std::string cmd = "printf '12+34=\\n' | " + RlforgeBin() + " generate --model " + Sft() +
                          " --temperature 0 --max-tokens 4 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << text;
  Json g = Json::parse(text);
  EXPECT_EQ(g["prompt"], "12+34=");
  EXPECT_EQ(g["samples"].size(), 1u);
}

TEST_F(GenerateEvalTest, BadInputIsAnErrorNamingTheFlagFileOrLine) {
  const std::string bad = *root_ + "/bad.jsonl";
  std::ofstream(bad) << "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n{\"prompt\": \"2+2=\"}\n";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string good = *root_ + "/heldout.jsonl";
  const std::vector<Case> cases = {
      {{"eval", "--model", *root_ + "/nope", "--data", good},
       "--model " + *root_ + "/nope: not a checkpoint directory"},
      {{"eval", "--model", Sft(), "--data", bad}, bad + ":2: key 'answer': missing"},
      {{"eval", "--model", Sft(), "--data", *root_ + "/missing.jsonl"},
       "missing.jsonl: cannot open"},
      {{"eval", "--model", Sft()}, "--data is required"},
      {{"eval", "--model", Sft(), "--data", bad, "--reward", "fuzzy"}, "--reward"},
      {{"eval", "--model", Sft(), "--data", bad, "--k", "0"}, "--k"},
      {{"eval", "--model", Sft(), "--data", bad, "--k", "4", "--n", "2"}, "--n 2 is less than --k"},
      {{"eval", "--model", Sft(), "--data", bad, "--temperature", "0.7"},
       "--temperature applies to the --k samples"},
      {{"eval", "--model", Sft(), "--data", good, "--template", "nonsense"}, "--template: "},
      {{"generate", "--model", Sft(), "--prompts", bad + ".none"},
       "--prompts " + bad + ".none: cannot open"},
      {{"generate", "--model", Sft(), "--prompts", bad, "--top-k", "-1"}, "--top-k"},
      {{"generate", "--model", Sft(), "--prompts", bad, "--out", "/nonexistent/dir/x.jsonl"},
       "--out /nonexistent/dir/x.jsonl: cannot write"},
  };
  for (const Case& c : cases) {
    auto [code, out] = RunRlforge(c.args, 60);
    EXPECT_EQ(code, 2) << c.args[0] << " " << c.message << "\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << "want: " << c.message << "\ngot: " << out;
  }
  const std::string prompts = *root_ + "/bad_prompts.txt";
  std::ofstream(prompts) << "1+1=\n{\"prompt\": 7}\n";
  auto [code, out] = RunRlforge({"generate", "--model", Sft(), "--prompts", prompts}, 60);
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find(prompts + ":2: key 'prompt': expected a string, got number"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace rlforge::testing
