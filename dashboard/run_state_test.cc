#include "dashboard/run_state.h"

#include <gtest/gtest.h>

#include <sstream>

#include "dashboard/render.h"
#include "dashboard/server.h"

namespace rlforge::dashboard {
namespace {

nlohmann::json Record(int64_t step, double ret) {
  return {{"step", step},
          {"metrics", {{"episodic_return", ret}, {"policy_version", step}}},
          {"timings", {{"rollout_s", 0.5}, {"elapsed_s", 1.0 * static_cast<double>(step)}}}};
}

TEST(RunStateTest, TakeSinceReturnsOnlyLaterStepsAndKeepsTheLatestWhenFull) {
  FakeClock clock;
  RunState state(&clock, /*max_iterations=*/3, /*max_samples=*/2);
  for (int64_t s = 1; s <= 5; ++s) state.AddIteration(Record(s, 10.0 * static_cast<double>(s)));
  Snapshot all = state.Take();
  ASSERT_EQ(all.iterations.size(), 3u);
  EXPECT_EQ((*all.iterations.front())["step"], 3);
  EXPECT_EQ(all.iterations_dropped, 2);
  Snapshot later = state.Take(4);
  ASSERT_EQ(later.iterations.size(), 1u);
  EXPECT_EQ((*later.iterations[0])["step"], 5);
  EXPECT_EQ(state.Take(-1, 1).iterations.size(), 1u);
  EXPECT_EQ(state.Take(-1, 0).iterations.size(), 0u);
  state.AddSamples({{1, "p1", "r1", 1}, {2, "p2", "r2", 0}, {3, "p3", "r3", 1}});
  Snapshot s = state.Take();
  ASSERT_EQ(s.samples.size(), 2u);
  EXPECT_EQ(s.samples[0].prompt, "p2");
}

TEST(RenderTest, StatusCountsActorsAndEstimatesTheRest) {
  FakeClock clock(5'000'000);
  RunState state(&clock, 100, 10);
  state.SetInfo({"r", "ppo", "job-1", "/runs/r", "job: {}\n", 10, 0});
  state.SetState("running", "");
  state.AddIteration(Record(2, 20));
  ActorRow a;
  a.id = "rollout-0";
  a.role = "rollout";
  a.state = "busy";
  a.last_heard_us = 4'500'000;
  ActorRow b = a;
  b.id = "trainer-0";
  b.role = "trainer";
  b.state = "ready";
  state.SetActors({a, b}, {{"malformed", 3}});
  clock.AdvanceMicros(1'000'000);
  nlohmann::json j = StatusJson(state.Take());
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["total"], 10);
  EXPECT_DOUBLE_EQ(j["eta_s"].get<double>(), 2.0 / 2 * 8);  // elapsed_s 2 over 2 steps
  EXPECT_EQ(j["actors"]["total"], 2);
  EXPECT_EQ(j["actors"]["busy"], 1);
  EXPECT_EQ(j["dropped_messages"], 3);
  EXPECT_EQ(j["latest"]["metrics"]["episodic_return"], 20);
  nlohmann::json actors = ActorsJson(state.Take());
  ASSERT_EQ(actors.size(), 2u);
  EXPECT_NEAR(actors[0]["heartbeat_age_s"].get<double>(), 1.5, 1e-9);
}

// Issue 42: after `--resume` at iteration 1800, "iter 1805/7813 ... eta 11.9s" divided this
// attempt's elapsed time by the run's 1805 iterations instead of the 5 it did.
TEST(RenderTest, EtaAfterResumeIsThisAttemptsPaceNotTheRunsStepCount) {
  FakeClock clock;
  RunState state(&clock, 100, 10);
  state.SetInfo({"r", "ppo", "j", "/d", "", 7813, 1800});
  state.SetState("running", "");
  state.AddIteration(
      {{"step", 1805}, {"metrics", nlohmann::json::object()}, {"timings", {{"elapsed_s", 10.0}}}});
  nlohmann::json j = StatusJson(state.Take());
  // 10 s for 5 iterations, 6008 left.
  EXPECT_DOUBLE_EQ(j["eta_s"].get<double>(), 10.0 / 5 * 6008);
  // The resume point's own record (none done in this attempt yet): no estimate.
  RunState fresh(&clock, 100, 10);
  fresh.SetInfo({"r", "ppo", "j", "/d", "", 7813, 1800});
  fresh.AddIteration({{"step", 1800}, {"timings", {{"elapsed_s", 0.5}}}});
  EXPECT_TRUE(StatusJson(fresh.Take())["eta_s"].is_null());
}

TEST(RenderTest, PrometheusTextHasTypedFamiliesAndRoleRankLabels) {
  FakeClock clock;
  RunState state(&clock, 100, 10);
  state.SetInfo({"r", "ppo", "j", "/d", "", 4, 0});
  state.SetState("running", "");
  state.AddIteration(Record(3, 42.5));
  ActorRow a;
  a.id = "rollout-1";
  a.role = "rollout";
  a.rank = 1;
  a.state = "ready";
  a.works_done = 7;
  a.policy_version = 3;
  a.last_heard_us = clock.NowMicros();
  a.metrics["queue_depth"] = 2;
  state.SetActors({a}, {{"malformed", 0}});
  std::string text = PrometheusText(state.Take(-1, 1));
  EXPECT_NE(text.find("# TYPE rlforge_iteration gauge\nrlforge_iteration 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rlforge_metric_episodic_return 42.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rlforge_timing_rollout_s 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rlforge_actor_up{role=\"rollout\",rank=\"1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE rlforge_actor_works_done_total counter\n"
                      "rlforge_actor_works_done_total{role=\"rollout\",rank=\"1\"} 7\n"),
            std::string::npos);
  EXPECT_NE(text.find("rlforge_actor_metric{role=\"rollout\",rank=\"1\",name=\"queue_depth\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rlforge_dropped_messages_total{reason=\"malformed\"} 0\n"),
            std::string::npos);
  // Every sample line is `name{labels} value` or `name value`.
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("#", 0) == 0) continue;
    EXPECT_EQ(line.rfind("rlforge_", 0), 0u) << line;
    EXPECT_NE(line.find(' '), std::string::npos) << line;
  }
  EXPECT_EQ(PrometheusName("loss/policy-2"), "loss_policy_2");
}

TEST(ServerTest, APortInUseIsAnErrorNamingTheKeys) {
  FakeClock clock;
  RunState state(&clock, 10, 10);
  auto first = DashboardServer::Start(ServerOptions{}, &state);
  ASSERT_TRUE(first.ok()) << first.status();
  ServerOptions o;
  o.port = (*first)->port();
  auto second = DashboardServer::Start(o, &state);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("dashboard.host/dashboard.port: cannot bind"),
            std::string::npos)
      << second.status();
}

TEST(ServerTest, TokenMatchesOnlyTheExactToken) {
  EXPECT_TRUE(TokenMatches("s3cret", "s3cret"));
  EXPECT_FALSE(TokenMatches("s3cre", "s3cret"));
  EXPECT_FALSE(TokenMatches("s3creT", "s3cret"));
  EXPECT_FALSE(TokenMatches("", "s3cret"));
}

TEST(ServerTest, ServesTheApiAndRefusesMissingTokens) {
  FakeClock clock;
  RunState state(&clock, 100, 10);
  state.SetInfo({"r", "echo", "j", "/d", "job: {}\n", 2, 0});
  state.AddIteration(Record(1, 1));
  ServerOptions o;
  o.token = "tok";
  auto server = DashboardServer::Start(o, &state);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string base = "http://127.0.0.1:" + std::to_string((*server)->port());
  auto denied = HttpGet(base, "/api/status", "");
  ASSERT_TRUE(denied.ok()) << denied.status();
  EXPECT_EQ(denied->status, 401);
  auto wrong = HttpGet(base, "/api/status", "nope");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 401);
  auto ok = HttpGet(base, "/api/metrics?since=0", "tok");
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(nlohmann::json::parse(ok->body)["records"][0]["step"], 1);
  auto query = HttpGet(base, "/metrics?token=tok", "");
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->status, 200);
  auto page = HttpGet(base, "/", "tok");
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->body.find("<canvas"), std::string::npos);
  state.AddSamples({{1, "2+2=", "4", 1.0}});
  auto samples = HttpGet(base, "/api/samples", "tok");
  ASSERT_TRUE(samples.ok());
  nlohmann::json sj = nlohmann::json::parse(samples->body);
  ASSERT_EQ(sj["samples"].size(), 1u);
  EXPECT_EQ(sj["samples"][0]["response"], "4");
  EXPECT_EQ(sj["samples"][0]["reward"], 1.0);
  auto bad = HttpGet(base, "/api/metrics?since=x", "tok");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
}

}  // namespace
}  // namespace rlforge::dashboard
