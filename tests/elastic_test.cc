// End-to-end: elastic workers (docs/fault_tolerance.md#elastic-workers). The doc's example as
// written: a GRPO job with one launched engine and room for a second; an engine joined by hand
// mid-run is dealt groups within one iteration and shows on the dashboard; SIGTERM makes it
// leave (exit 0) with no fault counted, and the job goes on.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "dashboard/server.h"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

// The ```sh block after <!-- tested: elastic-example --> in docs/fault_tolerance.md: the
// `rlforge` lines' arguments, with the doc's port and config mapped onto this test.
std::vector<std::vector<std::string>> DocExample(const std::string& port,
                                                 const std::string& config) {
  std::string doc = ReadFile(SourceDir() + "/docs/fault_tolerance.md");
  size_t at = doc.find("<!-- tested: elastic-example -->");
  EXPECT_NE(at, std::string::npos) << "docs/fault_tolerance.md lost its tested example";
  if (at == std::string::npos) return {};
  size_t begin = doc.find("```sh\n", at) + 6;
  std::string block = doc.substr(begin, doc.find("```", begin) - begin);
  block = absl::StrReplaceAll(block, {{"5555", port}, {"configs/grpo_arith.yaml", config}});
  std::vector<std::vector<std::string>> out;
  for (absl::string_view line : absl::StrSplit(block, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    EXPECT_EQ(words.front(), "rlforge") << line;
    out.emplace_back(words.begin() + 1, words.end());
  }
  return out;
}

// The complete records of a metrics.jsonl being written (a torn last line is skipped).
std::vector<nlohmann::json> Records(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

// Polls `done` every 50 ms for up to `seconds`.
bool WaitFor(const std::function<bool()>& done, double seconds) {
  const int64_t until = RealClock::Get()->NowMicros() + static_cast<int64_t>(seconds * 1e6);
  while (RealClock::Get()->NowMicros() < until) {
    if (done()) return true;
    usleep(50'000);
  }
  return done();
}

// The seconds-long SFT stage (4 steps of configs/sft_tiny.yaml) and configs/grpo_arith.yaml
// with a length penalty, so the policy changes every iteration: {checkpoint, config}.
std::pair<std::string, std::string> TinyGrpo(const std::string& root) {
  auto [code, out] =
      RunRlforge({"run", SourceDir() + "/configs/sft_tiny.yaml", "job.run_root=" + root,
                  "job.name=sft", "sft.steps=4", "sft.eval_every=0", "sft.save_every=0"},
                 300);
  EXPECT_EQ(code, 0) << out;
  return {root + "/sft/checkpoints/step_4",
          WithLengthReward(SourceDir() + "/configs/grpo_arith.yaml", root + "/grpo_length.yaml")};
}

// Overrides that make the job short per iteration and long enough to outlast the test.
std::vector<std::string> RunOverrides(const std::string& root, const std::string& model) {
  return {"job.run_root=" + root,         "model.path=" + model, "job.iterations=100000",
          "grpo.prompts_per_iteration=8", "grpo.group_size=4",   "grpo.eval_every=0",
          "grpo.eval_examples=8"};
}

// The dashboard's /api/status, or null.
nlohmann::json Status(const std::string& dashboard) {
  auto reply = dashboard::HttpGet(dashboard, "/api/status", "");
  return reply.ok() ? nlohmann::json::parse(reply->body, nullptr, false) : nlohmann::json();
}

// The dashboard's /api/actors entry of actor `id`, once it shows (null after 10 s).
nlohmann::json DashboardActor(const std::string& dashboard, const std::string& id) {
  nlohmann::json found;
  WaitFor(
      [&] {
        auto reply = dashboard::HttpGet(dashboard, "/api/actors", "");
        if (!reply.ok()) return false;
        for (const auto& a : nlohmann::json::parse(reply->body, nullptr, false)) {
          if (a.value("id", "") == id) found = a;
        }
        return !found.is_null();
      },
      10);
  return found;
}

double Groups(const nlohmann::json& record, const std::string& engine) {
  return record["metrics"].value("rollout/" + engine + "/groups", -1.0);
}

TEST(ElasticDocTest, AJoinedEngineIsDealtWorkWithinAnIterationShowsOnTheDashboardAndLeaves) {
  const std::string root = FreshDir("elastic_doc");
  const auto [model, config] = TinyGrpo(root);
  auto cmds = DocExample("0", config);
  ASSERT_EQ(cmds.size(), 2u);
  std::vector<std::string> run = cmds[0];
  for (const std::string& o : RunOverrides(root, model)) run.push_back(o);
  JobProcess job(run, root + "/job.txt");
  ASSERT_TRUE(job.WaitForOutput("running grpo", 120)) << job.Output();
  std::smatch m;
  std::string out = job.Output();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(listening on tcp://127\.0\.0\.1:([0-9]+))")))
      << out;
  cmds = DocExample(m[1], config);
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(dashboard at (http://[0-9.]+:[0-9]+)/)")))
      << out;
  const std::string dashboard = m[1];
  const std::string run_dir = root + "/elastic";

  JobProcess actor(cmds[1], root + "/actor.txt");
  ASSERT_TRUE(job.WaitForOutput("rollout-1 registered", 60)) << job.Output() << actor.Output();
  // Within one iteration of its registration it generates: the first record that knows it
  // (its round may have been dealt before it came) or the next one gives it groups.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& r : Records(run_dir)) {
          if (Groups(r, "1") > 0) return true;
        }
        return false;
      },
      60))
      << job.Output();
  const std::vector<nlohmann::json> records = Records(run_dir);
  size_t first = 0;
  while (Groups(records[first], "1") < 0) ++first;
  EXPECT_TRUE(Groups(records[first], "1") > 0 || Groups(records[first + 1], "1") > 0)
      << records[first].dump() << "\n"
      << records[first + 1].dump();
  for (const auto& r : records) {  // every prompt's group once, from one engine or the other
    if (r["step"] == 0) continue;  // the start's evaluation
    EXPECT_EQ(Groups(r, "0") + std::max(0.0, Groups(r, "1")), 8) << r.dump();
  }

  // The dashboard lists it, joined.
  const nlohmann::json joined = DashboardActor(dashboard, "rollout-1");
  ASSERT_FALSE(joined.is_null()) << "rollout-1 is not on the dashboard's /api/actors";
  EXPECT_EQ(joined["role"], "rollout");
  EXPECT_EQ(joined["joined"], true);
  EXPECT_TRUE(joined["state"] == "ready" || joined["state"] == "busy") << joined.dump();

  // SIGTERM: it leaves, exit 0; the job goes on without a fault.
  actor.Signal(SIGTERM);
  EXPECT_EQ(actor.Wait(30), 0) << actor.Output();
  EXPECT_NE(actor.Output().find("rollout-1: left the job"), std::string::npos) << actor.Output();
  ASSERT_TRUE(job.WaitForOutput("rollout-1 left: SIGTERM", 10)) << job.Output();
  const size_t seen = Records(run_dir).size();
  ASSERT_TRUE(WaitFor([&] { return Records(run_dir).size() >= seen + 2; }, 60)) << job.Output();
  job.Signal(SIGINT);
  EXPECT_EQ(job.Wait(60), 128 + SIGINT) << job.Output();

  const std::vector<nlohmann::json> all = Records(run_dir);
  for (const auto& r : all) {
    for (const auto& [k, v] : r["metrics"].items()) {
      EXPECT_NE(k.rfind("faults/", 0), 0u) << "no fault: " << r.dump();
    }
  }
  EXPECT_EQ(all.back()["metrics"]["elastic/joins"], 1);
  EXPECT_EQ(all.back()["metrics"]["elastic/leaves"], 1);
  const std::vector<std::string> events = ReadEvents(run_dir);
  EXPECT_EQ(events, (std::vector<std::string>{"joined rollout-1", "left rollout-1"}));
}

TEST(ElasticJobTest, TheOnlyRewardWorkerLeavingMakesTheJobWaitUntilOneJoins) {
  const std::string root = FreshDir("elastic_reward");
  const auto [model, config] = TinyGrpo(root);
  std::vector<std::string> run = {"run", config, "job.name=wait"};
  for (const std::string& o : RunOverrides(root, model)) run.push_back(o);
  JobProcess job(run, root + "/job.txt");
  ASSERT_TRUE(job.WaitForOutput("running grpo", 120)) << job.Output();
  const std::string out = job.Output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(listening on (tcp://127\.0\.0\.1:[0-9]+))")))
      << out;
  const std::string address = m[1];
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(dashboard at (http://[0-9.]+:[0-9]+)/)")))
      << out;
  const std::string dashboard = m[1];
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(started reward-0 \(pid ([0-9]+)\))"))) << out;
  const std::string run_dir = root + "/wait";

  ASSERT_EQ(kill(std::stoi(m[1]), SIGTERM), 0);
  ASSERT_TRUE(job.WaitForOutput("reward-0 left: SIGTERM", 30)) << job.Output();
  nlohmann::json status;
  ASSERT_TRUE(WaitFor(
      [&] {
        status = Status(dashboard);
        return status.is_object() && status.value("state", "") == "waiting";
      },
      30))
      << job.Output();
  const std::string message = status.value("message", "");
  EXPECT_NE(message.find("waiting for a live reward actor"), std::string::npos) << message;
  EXPECT_NE(message.find("0 live of minimum 1"), std::string::npos) << message;
  EXPECT_NE(message.find("rlforge actor --role reward --connect " + address), std::string::npos)
      << message;
  auto file = nlohmann::json::parse(ReadFile(run_dir + "/status.json"), nullptr, false);
  EXPECT_EQ(file.value("state", ""), "waiting") << file.dump();
  EXPECT_TRUE(job.WaitForOutput("after leaving", 10)) << "its exit is expected: " << job.Output();
  EXPECT_EQ(job.Output().find("restarted reward-0"), std::string::npos) << "not relaunched";

  JobProcess joiner({"actor", "--role", "reward", "--connect", address}, root + "/joiner.txt");
  ASSERT_TRUE(WaitFor([&] { return Status(dashboard).value("state", "") == "running"; }, 60))
      << job.Output() << joiner.Output();
  const size_t seen = Records(run_dir).size();
  ASSERT_TRUE(WaitFor([&] { return Records(run_dir).size() >= seen + 2; }, 60)) << job.Output();
  job.Signal(SIGINT);
  EXPECT_EQ(job.Wait(60), 128 + SIGINT) << job.Output();
  EXPECT_EQ(joiner.Wait(30), 0) << joiner.Output();
  EXPECT_EQ(ReadEvents(run_dir), (std::vector<std::string>{"left reward-0", "joined reward-0"}));
  for (const auto& r : Records(run_dir)) {
    for (const auto& [k, v] : r["metrics"].items()) {
      EXPECT_NE(k.rfind("faults/", 0), 0u) << "no fault: " << r.dump();
    }
  }
}

// PPO on simulators (the synchronous loop): configs/ppo_cartpole.yaml with one launched worker
// and room for a second; the joiner is set up (its own envs, the current weights) and steps
// the iteration's unit in turn with rollout-0; SIGTERM hands its slot back with no fault.
TEST(ElasticPpoTest, AJoinedSimWorkerStepsUnitsShowsOnTheDashboardAndLeavesWithoutAFault) {
  const std::string root = FreshDir("elastic_ppo");
  // Never solved, never finished by itself: the test's actions cannot be outrun.
  JobProcess job({"run", SourceDir() + "/configs/ppo_cartpole.yaml", "job.run_root=" + root,
                  "job.name=ppo", "rollout.max_workers=2", "ppo.stop_when_solved=false",
                  "ppo.total_steps=1000000000", "ppo.epochs=2"},
                 root + "/job.txt");
  ASSERT_TRUE(job.WaitForOutput("policy version 0 on every rollout worker", 120)) << job.Output();
  const std::string out = job.Output();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(listening on (tcp://127\.0\.0\.1:[0-9]+))")))
      << out;
  const std::string address = m[1];
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(dashboard at (http://[0-9.]+:[0-9]+)/)")))
      << out;
  const std::string dashboard = m[1];
  const std::string run_dir = root + "/ppo";

  JobProcess actor({"actor", "--role", "rollout", "--connect", address}, root + "/actor.txt");
  ASSERT_TRUE(job.WaitForOutput("rollout-1 joined: envs set up", 60))
      << job.Output() << actor.Output();
  auto batches = [](const nlohmann::json& r, const std::string& slot) {
    return r["metrics"].value("rollout/" + slot + "/batches", 0.0);
  };
  // Set up before an iteration starts, it is dealt that iteration's unit or the next one's.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& r : Records(run_dir)) {
          if (batches(r, "1") > 0) return true;
        }
        return false;
      },
      60))
      << job.Output();
  for (const auto& r : Records(run_dir)) {  // one unit per iteration, from one slot or the other
    EXPECT_EQ(batches(r, "0") + batches(r, "1"), 1) << r.dump();
  }

  const nlohmann::json joined = DashboardActor(dashboard, "rollout-1");
  ASSERT_FALSE(joined.is_null()) << "rollout-1 is not on the dashboard's /api/actors";
  EXPECT_EQ(joined["role"], "rollout");
  EXPECT_EQ(joined["joined"], true);

  actor.Signal(SIGTERM);
  EXPECT_EQ(actor.Wait(30), 0) << actor.Output();
  ASSERT_TRUE(job.WaitForOutput("rollout-1 left: SIGTERM", 10)) << job.Output();
  const size_t seen = Records(run_dir).size();
  ASSERT_TRUE(WaitFor([&] { return Records(run_dir).size() >= seen + 3; }, 60)) << job.Output();
  job.Signal(SIGINT);
  EXPECT_EQ(job.Wait(60), 128 + SIGINT) << job.Output();

  const std::vector<nlohmann::json> all = Records(run_dir);
  for (size_t i = seen + 1; i < all.size(); ++i) {
    EXPECT_EQ(batches(all[i], "1"), 0) << "its slot is not dealt again: " << all[i].dump();
  }
  for (const auto& r : all) {
    for (const auto& [k, v] : r["metrics"].items()) {
      EXPECT_NE(k.rfind("faults/", 0), 0u) << "no fault: " << r.dump();
    }
  }
  EXPECT_EQ(all.back()["metrics"]["elastic/joins"], 1);
  EXPECT_EQ(all.back()["metrics"]["elastic/leaves"], 1);
  EXPECT_EQ(ReadEvents(run_dir), (std::vector<std::string>{"joined rollout-1", "left rollout-1"}));
  EXPECT_EQ(job.Output().find("restarted rollout-1"), std::string::npos) << "not relaunched";
}

}  // namespace
}  // namespace rlforge::testing
