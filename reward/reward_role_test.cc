#include "reward/reward_role.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/atomic_file.h"
#include "data/jsonl_dataset.h"
#include "reward/math_answer.h"
#include "rlforge_paths.h"

namespace rlforge::reward {
namespace {

JobConfig LoadConfig(const std::string& yaml) {
  LoadedJob j = LoadJobText(yaml, "job.yaml");
  EXPECT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  return j.config;
}

std::string ReadDoc(const std::string& name) {
  auto page = ReadFileToString(std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/docs/" + name);
  EXPECT_TRUE(page.ok()) << page.status();
  return page.value_or("");
}

// The first ```yaml block of a docs page ("" and a test failure when there is none).
std::string FirstYamlBlock(const std::string& page) {
  const size_t a = page.find("```yaml\n");
  EXPECT_NE(a, std::string::npos);
  if (a == std::string::npos) return "";
  const size_t b = page.find("```", a + 8);
  return page.substr(a + 8, b - a - 8);
}

// The request goes through protobuf bytes both ways, as it would over the wire.
proto::WorkResult RoundTrip(Role& role, const proto::WorkRequest& request) {
  proto::WorkRequest received;
  EXPECT_TRUE(received.ParseFromString(request.SerializeAsString()));
  auto reply = role.Handle(received, {});
  EXPECT_TRUE(reply.ok()) << reply.status();
  proto::WorkResult back;
  EXPECT_TRUE(back.ParseFromString(reply->result.SerializeAsString()));
  return back;
}

TEST(RewardRoleTest, ScoresABatchWithBuiltinsAndPlugin) {
  const JobConfig c = LoadConfig(absl::StrCat(R"(
job: {algorithm: grpo}
reward:
  timeout_s: 5
  rewards:
    - {name: correct, kind: exact_answer, weight: 1.0}
    - name: format
      kind: regex_format
      weight: 0.25
      params: {pattern: "^The answer is"}
    - name: keyword
      kind: plugin
      weight: 0.5
      params: {path: ")",
                                              RLFORGE_KEYWORD_PLUGIN, R"(", args: [keyword=answer]}
    - name: faulty
      kind: plugin
      weight: 0.0
      timeout_s: 0.3
      params: {path: ")",
                                              RLFORGE_FAULTY_PLUGIN, R"("}
)"));
  proto::Assignment a;
  a.set_actor_id("reward-0");
  auto role = RewardRole::Create(c, a);
  ASSERT_TRUE(role.ok()) << role.status();

  proto::WorkRequest req;
  req.set_work_id(7);
  auto* task = req.mutable_score();
  for (const auto& [response, answer] : std::vector<std::pair<std::string, std::string>>{
           {"The answer is 42.", "42"}, {"41", "42"}, {"fail", "42"}, {"hang", "1"}}) {
    auto* s = task->add_samples();
    s->set_prompt("What is 40 + 2?");
    s->set_response(response);
    s->set_answer(answer);
    s->set_response_tokens(-1);
  }
  const proto::WorkResult r = RoundTrip(**role, req);
  ASSERT_EQ(r.result_case(), proto::WorkResult::kScore);
  const auto& sr = r.score();
  ASSERT_EQ(sr.total_size(), 4);
  EXPECT_TRUE(sr.ok(0));
  EXPECT_DOUBLE_EQ(sr.total(0), 1.0 + 0.25 + 0.5);
  EXPECT_TRUE(sr.ok(1));
  EXPECT_DOUBLE_EQ(sr.total(1), 0.0);
  // The faulty plugin's failure and timeout mark their samples even at weight 0.
  EXPECT_FALSE(sr.ok(2));
  EXPECT_TRUE(std::isnan(sr.total(2)));
  EXPECT_NE(sr.error(2).find("reward 'faulty' on sample 2: error"), std::string::npos)
      << sr.error(2);
  EXPECT_FALSE(sr.ok(3));
  EXPECT_NE(sr.error(3).find("timeout"), std::string::npos) << sr.error(3);
  ASSERT_EQ(sr.rewards_size(), 4);
  EXPECT_EQ(sr.rewards(1).name(), "format");
  EXPECT_EQ(sr.rewards(1).values(0), 1.0);
  EXPECT_EQ(sr.rewards(1).values(1), 0.0);
  EXPECT_DOUBLE_EQ(r.metrics().at("reward/correct/mean"), 0.25);
  EXPECT_EQ(r.metrics().at("reward/failed_samples"), 2);
  EXPECT_EQ(r.metrics().at("reward/faulty/errors"), 2);
  EXPECT_TRUE(r.metrics().contains("reward/time_s"));
}

// The math and format rewards through the reward worker on generated GSM8K-style problems
// (data/word_problems/heldout.jsonl, read as a job with data.source: jsonl reads it).
TEST(RewardRoleTest, MathAndFormatOnGeneratedWordProblems) {
  auto problems =
      ReadPromptJsonl(std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/data/word_problems/heldout.jsonl",
                      JsonlFormat::kRl);
  ASSERT_TRUE(problems.ok()) << problems.status();
  const JobConfig c = LoadConfig(R"(
job: {algorithm: grpo}
reward:
  rewards:
    - {name: correct, kind: math}
    - {name: format, kind: format, weight: 0.25, params: {answer_form: boxed}}
)");
  auto role = RewardRole::Create(c, {});
  ASSERT_TRUE(role.ok()) << role.status();
  proto::WorkRequest req;
  std::vector<double> want;
  for (size_t i = 0; i < 4; ++i) {
    const PromptExample& p = (*problems)[i];
    const int64_t n = std::stoll(p.answer);
    const std::string steps = p.response.substr(0, p.response.rfind("####"));
    // Right with the format; the worked answer itself; right number, wrong format; wrong.
    const std::vector<std::pair<std::string, double>> cases = {
        {absl::StrCat("<think>", steps, "</think> So the answer is \\boxed{", n, "}."), 1.25},
        {p.response, 1.0},
        {absl::StrCat("<think></think> \\boxed{", n, "}"), 1.0},
        {absl::StrCat("<think>", steps, "</think> \\boxed{", n + 1, "}"), 0.25}};
    for (const auto& [response, total] : cases) {
      auto* s = req.mutable_score()->add_samples();
      s->set_prompt(p.prompt);
      s->set_response(response);
      s->set_answer(p.answer);
      want.push_back(total);
    }
  }
  const proto::WorkResult r = RoundTrip(**role, req);
  ASSERT_EQ(r.score().total_size(), static_cast<int>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(r.score().ok(i)) << r.score().error(i);
    EXPECT_DOUBLE_EQ(r.score().total(i), want[i]) << req.score().samples(i).response();
  }
  EXPECT_DOUBLE_EQ(r.metrics().at("reward/correct/mean"), 0.75);
}

TEST(RewardRoleTest, ControllerSideConversionsRoundTrip) {
  const JobConfig c =
      LoadConfig("job: {algorithm: grpo}\nreward:\n  rewards:\n    - {name: c, kind: numeric}\n");
  auto role = RewardRole::Create(c, {});
  ASSERT_TRUE(role.ok());
  proto::WorkRequest req;
  // Not valid UTF-8: bytes fields carry it unchanged.
  SamplesToProto({{"p", "= 5", "5", 2}, {"p", "\xff", "x", -1}}, req.mutable_score());
  const proto::WorkResult r = RoundTrip(**role, req);
  auto scores = ScoresFromProto(r.score(), 2);
  ASSERT_TRUE(scores.ok()) << scores.status();
  EXPECT_EQ(scores->total[0], 1.0);
  EXPECT_FALSE(scores->ok[1]);
  EXPECT_NE(scores->error[1].find("reference answer 'x' is not a number"), std::string::npos);
  ASSERT_EQ(scores->rewards.size(), 1u);
  EXPECT_EQ(scores->rewards[0].name, "c");
  EXPECT_FALSE(scores->rewards[0].scores[1].ok());
  EXPECT_EQ(scores->Metrics()["reward/failed_samples"], 1);
  EXPECT_FALSE(ScoresFromProto(r.score(), 3).ok());
}

TEST(RewardRoleTest, RejectsOtherTasksAndBadConfigs) {
  const JobConfig c = LoadConfig(
      "job: {algorithm: grpo}\nreward:\n  rewards:\n    - {name: c, kind: exact_answer}\n");
  auto role = RewardRole::Create(c, {});
  ASSERT_TRUE(role.ok());
  proto::WorkRequest echo;
  echo.mutable_echo();
  EXPECT_FALSE((*role)->Handle(echo, {}).ok());

  JobConfig bad = c;
  bad.reward.rewards[0].kind = RewardKind::kPlugin;
  bad.reward.rewards[0].params.path = "/nonexistent.so";
  auto s = RewardRole::Create(bad, {}).status();
  EXPECT_NE(s.message().find("reward.rewards[0] (c): reward plugin /nonexistent.so"),
            std::string::npos)
      << s;
}

TEST(RewardConfigTest, ResolvedYamlRoundTrips) {
  const JobConfig c = LoadConfig(R"(job: {algorithm: grpo}
reward:
  timeout_s: 3
  rewards:
    - {name: correct, kind: numeric, weight: 2, params: {rel_tol: 0.01, extract: boxed}}
    - {name: p, kind: plugin, params: {path: /x.so, args: ["a=1", "b=two words"]}}
)");
  const std::string text = ResolvedYaml(c);
  const JobConfig again = LoadConfig(text);
  EXPECT_EQ(ResolvedYaml(again), text);
  ASSERT_EQ(again.reward.rewards.size(), 2u);
  EXPECT_EQ(again.reward.rewards[0].params.extract, AnswerExtract::kBoxed);
  EXPECT_EQ(again.reward.rewards[1].params.args[1], "b=two words");
}

TEST(RewardConfigTest, ValidationNamesTheKey) {
  LoadedJob j = LoadJobText(R"(job: {algorithm: grpo}
reward:
  rewards:
    - {name: a, kind: exact_answer, params: {pattern: "x"}}
    - {name: a, kind: regex_format}
    - {name: len, kind: length_penalty, params: {max_length: 4, buffer: 8}}
    - {name: p, kind: plugin, params: {args: [novalue]}}
    - {name: total, kind: exact_answer}
)",
                            "job.yaml");
  const std::string errors = config::FormatErrors(j.errors);
  EXPECT_NE(errors.find("reward.rewards[0].params.pattern: does not apply to kind exact_answer"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("reward.rewards[1].name: 'a' is used twice"), std::string::npos) << errors;
  // reward/total/... is the weighted sum's (controller/lm_loop.h AddRewardSums).
  EXPECT_NE(errors.find("reward.rewards[4].name: 'total' is taken"), std::string::npos) << errors;
  EXPECT_NE(errors.find("reward.rewards[1].params.pattern: kind regex_format needs a pattern"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("reward.rewards[2].params.buffer: must not exceed max_length (4)"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("reward.rewards[3].params.path: kind plugin needs"), std::string::npos)
      << errors;
  EXPECT_NE(errors.find("reward.rewards[3].params.args: 'novalue' is not key=value"),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("job.yaml:"), std::string::npos) << errors;
}

// The python and code kinds: their keys, what each needs, and what applies to neither.
TEST(RewardConfigTest, PythonAndCodeKindsNameWhatTheyNeed) {
  LoadedJob ok = LoadJobText(R"(job: {algorithm: grpo}
reward:
  rewards:
    - {name: py, kind: python, params: {path: r.py, function: compute_score, processes: 3}}
    - {name: tests, kind: code, params: {memory_mb: 128, cpu_s: 1, test_timeout_s: 2}}
)",
                             "job.yaml");
  ASSERT_TRUE(ok.ok()) << config::FormatErrors(ok.errors);
  EXPECT_EQ(ok.config.reward.rewards[0].kind, RewardKind::kPython);
  EXPECT_EQ(ok.config.reward.rewards[0].params.processes, 3);
  EXPECT_EQ(ok.config.reward.rewards[1].kind, RewardKind::kCode);
  EXPECT_EQ(ok.config.reward.rewards[1].params.memory_mb, 128);
  LoadedJob bad = LoadJobText(R"(job: {algorithm: grpo}
reward:
  rewards:
    - {name: py, kind: python}
    - {name: tests, kind: code, params: {function: f, processes: 3}}
)",
                              "job.yaml");
  const std::string errors = config::FormatErrors(bad.errors);
  for (const char* want : {"reward.rewards[0].params.path: kind python needs the path",
                           "reward.rewards[0].params.function: kind python needs the name",
                           "reward.rewards[1].params.function: does not apply to kind code",
                           "reward.rewards[1].params.processes: does not apply to kind code"}) {
    EXPECT_NE(errors.find(want), std::string::npos) << want << "\n" << errors;
  }
}

TEST(RewardConfigTest, MathAndFormatKeysAreChecked) {
  LoadedJob j = LoadJobText(R"(job: {algorithm: grpo}
reward:
  rewards:
    - {name: m, kind: math, params: {tag: reason}}
    - {name: f, kind: format, params: {tag: "<think>"}}
    - {name: g, kind: format, params: {answer_form: number}}
    - {name: e, kind: exact_answer, params: {answer_form: boxed}}
)",
                            "job.yaml");
  const std::string errors = config::FormatErrors(j.errors);
  for (const std::string want :
       {"job.yaml:4:", "reward.rewards[0].params.tag: does not apply to kind math",
        "reward.rewards[1].params.tag: '<think>' is not a tag name",
        "reward.rewards[2].params.answer_form:",
        "reward.rewards[3].params.answer_form: does not apply to kind exact_answer"}) {
    EXPECT_NE(errors.find(want), std::string::npos) << want << "\n" << errors;
  }
}

}  // namespace
}  // namespace rlforge::reward

namespace rlforge::reward {
namespace {

// docs/rewards.md's configuration example, loaded and used as written (the plugin path is
// relative to the source tree there; here it is the built library).
TEST(RewardDocsTest, ConfigExample) {
  std::string yaml = FirstYamlBlock(ReadDoc("rewards.md"));
  const std::string doc_path = "build/reward/librlforge_keyword_reward.so";
  const size_t at = yaml.find(doc_path);
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, doc_path.size(), RLFORGE_KEYWORD_PLUGIN);
  const JobConfig c = LoadConfig("job: {algorithm: grpo}\n" + yaml);
  ASSERT_EQ(c.reward.rewards.size(), 5u);
  auto role = RewardRole::Create(c, {});
  ASSERT_TRUE(role.ok()) << role.status();
  proto::WorkRequest req;
  auto* s = req.mutable_score()->add_samples();
  s->set_response("The answer is 42.");
  s->set_answer("42");
  s->set_response_tokens(5);
  auto* wrong = req.mutable_score()->add_samples();
  wrong->set_response("I think 41.5");
  wrong->set_answer("42");
  wrong->set_response_tokens(60);
  const proto::WorkResult r = RoundTrip(**role, req);
  ASSERT_TRUE(r.score().ok(0)) << r.score().error(0);
  EXPECT_DOUBLE_EQ(r.score().total(0), 1.0 + 0.5 + 0.1 + 0.0 + 0.2);
  // Wrong but close (numeric, tol 0.5), no format, 60 of 64 tokens: (48 - 60) / 16 = -0.75.
  EXPECT_DOUBLE_EQ(r.score().total(1), 0.5 - 0.75);
}

// docs/math_verifier.md's configuration block, loaded and used as written.
TEST(MathVerifierDocsTest, ConfigExample) {
  const JobConfig c =
      LoadConfig("job: {algorithm: grpo}\n" + FirstYamlBlock(ReadDoc("math_verifier.md")));
  auto role = RewardRole::Create(c, {});
  ASSERT_TRUE(role.ok()) << role.status();
  proto::WorkRequest req;
  auto* s = req.mutable_score()->add_samples();
  s->set_response("<think>6 * 7 = 42</think> \\boxed{42}");
  s->set_answer("42");
  const proto::WorkResult r = RoundTrip(**role, req);
  ASSERT_TRUE(r.score().ok(0)) << r.score().error(0);
  EXPECT_DOUBLE_EQ(r.score().total(0), 1.2);
}

// Every row of the page's example table: `reference` | `response` | score.
TEST(MathVerifierDocsTest, ExamplesHold) {
  const std::string page = ReadDoc("math_verifier.md");
  const size_t a = page.find("<!-- BEGIN EXAMPLES -->"), b = page.find("<!-- END EXAMPLES -->");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  std::istringstream rows(page.substr(a, b - a));
  std::string row;
  int checked = 0;
  while (std::getline(rows, row)) {
    std::vector<std::string> cells;
    for (size_t at = row.find("| `"); at != std::string::npos; at = row.find("| `", at + 1)) {
      const size_t end = row.find("` |", at + 3);
      if (end == std::string::npos) break;
      cells.push_back(absl::StrReplaceAll(row.substr(at + 3, end - at - 3), {{"\\n", "\n"}}));
    }
    if (cells.size() != 2) continue;
    const double score = std::stod(row.substr(row.rfind('|', row.size() - 2) + 1));
    EXPECT_EQ(MathVerify(cells[0], cells[1], Extract::kAuto) ? 1.0 : 0.0, score) << row;
    ++checked;
  }
  EXPECT_EQ(checked, 10);
}

}  // namespace
}  // namespace rlforge::reward
