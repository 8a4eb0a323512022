// End-to-end: the dashboard of a real `rlforge run`, over HTTP.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "dashboard/server.h"
#include "nlohmann/json.hpp"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

namespace fs = std::filesystem;
using dashboard::HttpGet;

std::string EchoConfig() { return SourceDir() + "/configs/echo.yaml"; }

// "dashboard at http://127.0.0.1:PORT/" -> "http://127.0.0.1:PORT"
std::string DashboardUrl(const std::string& output) {
  std::smatch m;
  static const std::regex re(R"(dashboard at (http://[0-9.]+:\d+)/)");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

nlohmann::json GetJson(const std::string& url, const std::string& path,
                       const std::string& token = "") {
  auto r = HttpGet(url, path, token);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  EXPECT_EQ(r->status, 200) << path << ": " << r->body;
  return nlohmann::json::parse(r->body, nullptr, false);
}

TEST(DashboardTest, ApiAgreesWithMetricsJsonlOfARealRun) {
  std::string root = FreshDir("dash_api");
  JobProcess job(
      {"run", EchoConfig(), "job.run_root=" + root, "job.name=e", "job.iterations=5",
       "echo.requests_per_iteration=2", "echo.payload_bytes=4096", "dashboard.linger_s=60"},
      root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("dashboard at http://", 30)) << job.Output();
  std::string url = DashboardUrl(job.Output());
  ASSERT_FALSE(url.empty()) << job.Output();
  // While the run goes the API answers too.
  nlohmann::json early = GetJson(url, "/api/status");
  EXPECT_EQ(early["run"], "e");
  ASSERT_TRUE(job.WaitForOutput("dashboard stays up", 60)) << job.Output();
  std::string dir = root + "/e";
  std::vector<nlohmann::json> file = ReadMetricsJsonl(dir);
  ASSERT_EQ(file.size(), 5u);

  nlohmann::json all = GetJson(url, "/api/metrics?since=0");
  ASSERT_EQ(all["records"].size(), 5u) << all.dump();
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(all["records"][i], file[i]) << "step " << i + 1;
  nlohmann::json later = GetJson(url, "/api/metrics?since=3");
  ASSERT_EQ(later["records"].size(), 2u);
  EXPECT_EQ(later["records"][0], file[3]);

  nlohmann::json status = GetJson(url, "/api/status");
  EXPECT_EQ(status["state"], "finished");
  EXPECT_EQ(status["algorithm"], "echo");
  EXPECT_EQ(status["step"], 5);
  EXPECT_EQ(status["total"], 5);
  EXPECT_EQ(status["run_dir"], dir);
  EXPECT_EQ(status["latest"]["metrics"], file[4]["metrics"]);

  nlohmann::json actors = GetJson(url, "/api/actors");
  ASSERT_EQ(actors.size(), 2u) << actors.dump();
  std::vector<int> pids = ActorPids(job.Output());
  std::set<int> want(pids.begin(), pids.end()), got;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(actors[i]["id"], "echo-" + std::to_string(i));
    EXPECT_EQ(actors[i]["role"], "echo");
    EXPECT_EQ(actors[i]["rank"], i);
    EXPECT_EQ(actors[i]["state"], "stopped");
    got.insert(actors[i]["pid"].get<int>());
  }
  EXPECT_EQ(got, want);

  auto prom = HttpGet(url, "/metrics", "");
  ASSERT_TRUE(prom.ok());
  EXPECT_NE(prom->body.find("\nrlforge_iteration 5\n"), std::string::npos) << prom->body;
  EXPECT_NE(prom->body.find("\nrlforge_metric_round_trips 4\n"), std::string::npos);
  EXPECT_NE(prom->body.find("rlforge_actor_up{role=\"echo\",rank=\"1\"} 0\n"), std::string::npos);
  auto page = HttpGet(url, "/", "");
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->body.find("rlforge dashboard"), std::string::npos);
  EXPECT_EQ(GetJson(url, "/api/samples")["samples"].size(), 0u);
  EXPECT_NE(GetJson(url, "/api/config")["yaml"].get<std::string>().find("algorithm: echo"),
            std::string::npos);

  // `rlforge status`: live through the URL, and from the files of the run directory.
  auto [live_code, live] = RunRlforge({"status", url});
  EXPECT_EQ(live_code, 0) << live;
  EXPECT_NE(live.find("state      finished  iteration 5/5"), std::string::npos) << live;
  EXPECT_NE(live.find("echo-1"), std::string::npos) << live;
  auto [dir_code, from_dir] = RunRlforge({"status", dir});
  EXPECT_EQ(dir_code, 0) << from_dir;
  EXPECT_NE(from_dir.find("state      finished  iteration 5/5"), std::string::npos) << from_dir;
  EXPECT_NE(from_dir.find("round_trips=4"), std::string::npos) << from_dir;

  bool has_events = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    has_events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 &&
                  fs::file_size(e.path()) > 100;
  }
  EXPECT_TRUE(has_events) << "TensorBoard event file in " << dir;

  job.Signal(SIGINT);
  EXPECT_EQ(job.Wait(20), 0) << "Ctrl-C while lingering keeps the run's exit code\n"
                             << job.Output();
}

TEST(DashboardTest, NonLoopbackBindNeedsATokenAndRefusesRequestsWithout) {
  std::string root = FreshDir("dash_token");
  unsetenv("RLFORGE_DASHBOARD_TOKEN");
  auto [vcode, vout] = RunRlforge({"validate", EchoConfig(), "dashboard.host=0.0.0.0"});
  EXPECT_EQ(vcode, 2) << vout;
  EXPECT_NE(vout.find("dashboard.host: '0.0.0.0' is not a loopback address"), std::string::npos)
      << vout;
  auto [rcode, rout] = RunRlforge(
      {"run", EchoConfig(), "job.run_root=" + root, "dashboard.host=0.0.0.0", "job.iterations=1"});
  EXPECT_EQ(rcode, 2) << rout;
  EXPECT_NE(rout.find("RLFORGE_DASHBOARD_TOKEN"), std::string::npos) << rout;

  setenv("RLFORGE_DASHBOARD_TOKEN", "e2e-secret", 1);
  JobProcess job({"run", EchoConfig(), "job.run_root=" + root, "job.name=t", "job.iterations=2",
                  "echo.workers=1", "echo.payload_bytes=1024", "dashboard.host=0.0.0.0",
                  "dashboard.linger_s=60"},
                 root + "/out.txt");
  unsetenv("RLFORGE_DASHBOARD_TOKEN");
  ASSERT_TRUE(job.WaitForOutput("dashboard at http://", 30)) << job.Output();
  std::string url = DashboardUrl(job.Output());
  EXPECT_EQ(job.Output().find("e2e-secret"), std::string::npos) << "the token is never printed";
  for (const char* path : {"/", "/api/status", "/api/metrics?since=0", "/api/actors",
                           "/api/samples", "/api/config", "/metrics"}) {
    auto r = HttpGet(url, path, "");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 401) << path;
    auto wrong = HttpGet(url, path, "e2e-secreT");
    ASSERT_TRUE(wrong.ok());
    EXPECT_EQ(wrong->status, 401) << path;
    auto ok = HttpGet(url, path, "e2e-secret");
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ(ok->status, 200) << path;
  }
  auto query = HttpGet(url, "/api/status?token=e2e-secret", "");
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->status, 200);
  auto [scode, sout] = RunRlforge({"status", url});
  EXPECT_EQ(scode, 1) << sout;
  EXPECT_NE(sout.find("needs a token"), std::string::npos) << sout;
  auto [tcode, tout] = RunRlforge({"status", url, "--token", "e2e-secret"});
  EXPECT_EQ(tcode, 0) << tout;
  job.Signal(SIGINT);
  job.Wait(20);
}

// Issue 42: after the controller of a PPO job was SIGKILLed, `rlforge status` printed "state
// running iteration 458/10": nobody checked its pid, and 10 was job.iterations' unused default,
// not the PPO job's iteration count (ppo.total_steps / (workers x num_envs x steps)).
TEST(DashboardTest, StatusOfARunWhoseControllerWasKilledSaysDeadWithItsIterationCount) {
  const std::string root = FreshDir("dash_dead");
  // 1000000 steps in batches of 1 x 8 x 32: 3907 iterations.
  JobProcess job({"run", SourceDir() + "/configs/ppo_cartpole.yaml", "job.run_root=" + root,
                  "job.name=p", "ppo.total_steps=1000000"},
                 root + "/out.txt");
  ASSERT_TRUE(job.WaitForOutput("iter 3/3907", 60)) << job.Output();
  const std::string dir = root + "/p";
  nlohmann::json file = nlohmann::json::parse(ReadFile(dir + "/status.json"), nullptr, false);
  EXPECT_EQ(file["state"], "running") << file.dump();
  EXPECT_EQ(file["total"], 3907) << file.dump();
  EXPECT_EQ(file["pid"], job.pid()) << file.dump();
  auto [live_code, live] = RunRlforge({"status", dir});
  EXPECT_EQ(live_code, 0) << live;
  EXPECT_NE(live.find("state      running  iteration "), std::string::npos) << live;

  job.Signal(SIGKILL);
  ASSERT_EQ(job.Wait(20), 128 + SIGKILL) << job.Output();
  auto [code, out] = RunRlforge({"status", dir});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("state      dead (controller pid " + std::to_string(job.pid()) +
                     " gone; last written "),
            std::string::npos)
      << out;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m,
                                std::regex(R"(status\.json still says running\)  )"
                                           R"(iteration \d+/3907  elapsed )")))
      << out;
  EXPECT_EQ(out.find(" eta "), std::string::npos) << "no ETA for a dead run\n" << out;
}

}  // namespace
}  // namespace rlforge::testing
