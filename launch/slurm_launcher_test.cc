#include "launch/slurm_launcher.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "launch/command.h"

namespace rlforge {
namespace {

// Records what it is asked to start.
class RecordingLauncher final : public ProcessLauncher {
 public:
  absl::StatusOr<int> Start(const ProcessSpec& spec) override {
    started.push_back(spec);
    return static_cast<int>(started.size());
  }
  std::vector<ProcessExit> Reap() override { return {}; }
  void Signal(int, int) override {}
  std::vector<int> Running() const override { return {}; }
  std::vector<ProcessSpec> started;
};

ProcessSpec Actor() {
  ProcessSpec spec;
  spec.name = "rollout-1";
  spec.argv = {"/opt/rlforge/rlforge-actor", "--role", "rollout", "--connect", "tcp://h:5"};
  spec.log_path = "/runs/x/logs/rollout-1.log";
  spec.env = {{"RLFORGE_LAUNCH_TOKEN", "a,b"}, {"PATH", "/mine"}};
  spec.host = "n2";
  return spec;
}

TEST(SlurmLauncherTest, SrunRunsTheActorAsOneStepOnItsNode) {
  ProcessSpec spec = Actor();
  spec.gpus = 2;
  std::vector<std::string> argv =
      SrunArgv(spec, {"NCCL_SOCKET_IFNAME", "PATH", "RLFORGE_LAUNCH_TOKEN"}, "/usr/bin/srun");
  std::vector<std::string> expected = {"/usr/bin/srun",
                                       "--overlap",
                                       "--nodes=1",
                                       "--ntasks=1",
                                       "--nodelist=n2",
                                       "--job-name=rollout-1",
                                       "--kill-on-bad-exit=1",
                                       "--export=NCCL_SOCKET_IFNAME,PATH,RLFORGE_LAUNCH_TOKEN",
                                       "--gpus-per-task=2",
                                       "--",
                                       "/opt/rlforge/rlforge-actor",
                                       "--role",
                                       "rollout",
                                       "--connect",
                                       "tcp://h:5"};
  EXPECT_EQ(argv, expected);
  spec.gpus = 0;
  argv = SrunArgv(spec, {}, "srun");
  EXPECT_EQ(argv[7], "--export=NONE");
  EXPECT_EQ(argv[8], "--");
}

TEST(SlurmLauncherTest, StepsInheritOnlyTheListedVariables) {
  std::string a = "PATH=/usr/bin", b = "NCCL_IB_HCA=mlx5", c = "SECRET=x",
              d = "CUDA_VISIBLE_DEVICES=0", e = "RLFORGE_DASHBOARD_TOKEN=t",
              f = "RLFORGE_KEYS=/runs/x/keys/actor.key";
  char* env[] = {a.data(), b.data(), c.data(), d.data(), e.data(), f.data(), nullptr};
  std::map<std::string, std::string> expected = {
      {"NCCL_IB_HCA", "mlx5"}, {"PATH", "/usr/bin"}, {"RLFORGE_KEYS", "/runs/x/keys/actor.key"}};
  EXPECT_EQ(StepEnvironment(env), expected);
}

TEST(SlurmLauncherTest, HostedSpecsGoThroughSrunAndOthersStartHere) {
  RecordingLauncher local;
  SlurmProcessLauncher slurm(&local);
  ProcessSpec service = Actor();
  service.host = "";
  ASSERT_TRUE(slurm.Start(service).ok());
  ASSERT_EQ(local.started.size(), 1u);
  EXPECT_EQ(local.started[0].argv, service.argv);
  auto pid = slurm.Start(Actor());
  if (!pid.ok()) {  // no srun on this machine: the error says so
    EXPECT_NE(pid.status().message().find("srun is not in PATH"), std::string::npos);
    return;
  }
  ASSERT_EQ(local.started.size(), 2u);
  const ProcessSpec& s = local.started[1];
  EXPECT_EQ(s.log_path, Actor().log_path);  // srun's output is the actor's log
  EXPECT_TRUE(s.host.empty());
  EXPECT_NE(s.argv[0].find("srun"), std::string::npos);
  EXPECT_EQ(s.argv.back(), "tcp://h:5");
  // The values travel in srun's environment (the spec's own win), the names on its command
  // line: no secret in `ps`.
  EXPECT_EQ(s.env.at("RLFORGE_LAUNCH_TOKEN"), "a,b");
  EXPECT_EQ(s.env.at("PATH"), "/mine");
  const std::string exported = s.argv[7];
  EXPECT_EQ(exported.rfind("--export=", 0), 0u) << exported;
  EXPECT_NE(exported.find("RLFORGE_LAUNCH_TOKEN"), std::string::npos) << exported;
  for (const std::string& a : s.argv) EXPECT_EQ(a.find("a,b"), std::string::npos) << a;
}

TEST(SlurmLauncherTest, OutsideAnAllocationNodesAreAnErrorSayingSo) {
  const char* saved = std::getenv("SLURM_JOB_NODELIST");
  std::string keep = saved ? saved : "";
  unsetenv("SLURM_JOB_NODELIST");
  auto nodes = AllocationNodes(5);
  if (saved) setenv("SLURM_JOB_NODELIST", keep.c_str(), 1);
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("not inside a Slurm allocation"), std::string::npos);
}

TEST(CommandTest, CapturesBothStreamsAndTheExitCode) {
  auto r = RunCommand({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 10);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
}

TEST(CommandTest, ACommandPastItsDeadlineIsKilledAndAnError) {
  auto r = RunCommand({"/bin/sleep", "30"}, 0.2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did not finish within 0.2 s"), std::string::npos)
      << r.status();
  auto missing = RunCommand({"/nonexistent/scontrol"}, 5);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/scontrol"), std::string::npos);
}

}  // namespace
}  // namespace rlforge
