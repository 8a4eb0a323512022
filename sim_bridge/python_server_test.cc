// The Python sim_bridge server (sim_bridge/python/rlforge_sim) driven from C++,
// as a separate /usr/bin/python3 process: the "any language" promise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "launch/process_launcher.h"
#include "rlforge_paths.h"
#include "sim_bridge/remote_vector_env.h"

namespace rlforge::sim {
namespace {

class PythonServer {
 public:
  PythonServer(const std::string& script, std::vector<std::string> extra, const std::string& tag) {
    endpoint_ = "ipc:///tmp/rlforge-pytest-" + std::to_string(getpid()) + "-" + tag + ".sock";
    std::vector<std::string> argv = {"/usr/bin/python3",
                                     std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/" + script,
                                     "--bind", endpoint_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    log_ = "/tmp/rlforge-pytest-" + std::to_string(getpid()) + "-" + tag + ".log";
    auto pid = launcher_.Start({tag, argv, log_, {}, {}});
    EXPECT_TRUE(pid.ok()) << pid.status();
  }
  const std::string& endpoint() const { return endpoint_; }
  std::string log() const { return TailOfFile(log_, 20); }
  LocalProcessLauncher& launcher() { return launcher_; }

 private:
  LocalProcessLauncher launcher_;
  std::string endpoint_, log_;
};

TEST(PythonServerTest, PurePythonCartPoleServesAGymnasiumStyleEnv) {
  PythonServer py("sim_bridge/python/examples/cartpole_py.py", {"--num-envs", "4"}, "cartpole");
  zmq::context_t ctx;
  auto env = RemoteVectorEnv::Connect(ctx, {{"py-0", py.endpoint()}}, {});
  ASSERT_TRUE(env.ok()) << env.status() << "\n" << py.log();
  EXPECT_EQ((*env)->spec().id, "PyCartPole-v0");
  EXPECT_EQ((*env)->num_envs(), 4);
  EXPECT_TRUE((*env)->spec().action.is_discrete());
  EXPECT_EQ((*env)->spec().observation.shape, std::vector<int64_t>{4});
  std::vector<float> obs;
  ASSERT_TRUE((*env)->Reset(std::vector<int64_t>{1, 2, 3, 4}, &obs).ok());
  StepOutput out;
  int episodes = 0, resets = 0;
  for (int t = 0; t < 200; ++t) {
    std::vector<int64_t> a = {t % 2, (t / 3) % 2, 0, 1};
    ASSERT_TRUE((*env)->Step(a.data(), &out).ok()) << py.log();
    episodes += static_cast<int>(out.episodes.size());
    for (uint8_t r : out.reset) resets += r;
  }
  EXPECT_GT(episodes, 4);
  EXPECT_GE(resets, episodes - 4) << "next-step autoreset after every episode";
}

struct Fault {
  const char* name;
  const char* expect;
};

class PythonFaultTest : public ::testing::TestWithParam<Fault> {};

TEST_P(PythonFaultTest, FaultsNameTheServerAndEnv) {
  const Fault& f = GetParam();
  PythonServer py("sim_bridge/python/tests/faulty_env.py", {"--fault", f.name}, f.name);
  zmq::context_t ctx;
  RemoteVectorEnv::Options o;
  o.timeout_ms = 2000;
  auto env = RemoteVectorEnv::Connect(ctx, {{"py-sim", py.endpoint()}}, o);
  ASSERT_TRUE(env.ok()) << env.status() << py.log();
  std::vector<float> obs;
  ASSERT_TRUE((*env)->Reset({}, &obs).ok());
  StepOutput out;
  std::vector<int64_t> a = {0, 1};
  absl::Status s;
  for (int t = 0; t < 5 && s.ok(); ++t) s = (*env)->Step(a.data(), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("sim server py-sim (" + py.endpoint() + ")"), std::string::npos) << s;
  EXPECT_NE(s.message().find(f.expect), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PythonFaultTest,
    ::testing::Values(Fault{"nan", "env 1 (its env 1): env 1 returned observation[0] = nan"},
                      Fault{"raise", "RuntimeError: the simulator lost its mind"},
                      Fault{"hang", "did not answer within 2 s"},
                      Fault{"crash", "did not answer within 2 s"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rlforge::sim
