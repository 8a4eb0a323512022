// Bad job files and overrides: each exits with code 2 and a message naming
// the key and where it was written; none crashes.
#include <gtest/gtest.h>

#include <fstream>

#include "config/device.h"
#include "tests/job_process.h"

namespace rlforge::testing {
namespace {

struct BadCase {
  const char* name;
  const char* yaml;  // nullptr: the file does not exist
  std::vector<std::string> overrides;
  std::vector<std::string> expect;  // substrings of the output; "@" stands for the file path
};

const char* kGood = "job:\n  algorithm: echo\n  iterations: 2\necho:\n  workers: 1\n";

std::vector<BadCase> Cases() {
  return {
      {"unknown_section",
       "job:\n  algorithm: echo\nech:\n  workers: 2\n",
       {},
       {"@:3:1: ech: unknown key (did you mean echo?)"}},
      {"typo_key",
       "job:\n  algorithm: echo\necho:\n  wrokers: 2\n",
       {},
       {"@:4:3: echo.wrokers: unknown key (did you mean echo.workers?)"}},
      {"misplaced_key",
       "job:\n  algorithm: echo\n  heartbeat_misses: 2\n",
       {},
       {"@:3:3: job.heartbeat_misses: unknown key (did you mean controller.heartbeat_misses?)"}},
      {"wrong_type",
       "job:\n  algorithm: echo\n  iterations: ten\n",
       {},
       {"@:3:3: job.iterations: expected an integer, got 'ten'"}},
      {"negative_count",
       "job:\n  algorithm: echo\necho:\n  workers: -3\n",
       {},
       {"@:4:3: echo.workers: expected an integer in [0, 1024], got -3"}},
      {"float_for_int",
       "job:\n  algorithm: echo\necho:\n  workers: 2.5\n",
       {},
       {"@:4:3: echo.workers: expected an integer, got '2.5'"}},
      {"port_out_of_range",
       "job:\n  algorithm: echo\ncontroller:\n  port: 70000\n",
       {},
       {"@:4:3: controller.port: expected an integer in [0, 65535], got 70000"}},
      {"bad_choice",
       "job:\n  algorithm: ecko\n",
       {},
       // The list of algorithms grows; check its start, the place and the hint.
       {"@:2:3: job.algorithm: expected one of echo, ppo, ", "got 'ecko' (did you mean echo?)"}},
      {"bad_bool",
       "job:\n  algorithm: echo\necho:\n  external: yes\n",
       {},
       {"@:4:3: echo.external: expected true or false, got 'yes'"}},
      {"missing_required",
       "echo:\n  workers: 2\n",
       {},
       {"@:1:1: job.algorithm: missing required key"}},
      {"missing_value",
       "job:\n  algorithm: echo\n  iterations:\n",
       {},
       {"@:3:3: job.iterations: missing value (expected an integer >= 1)"}},
      {"section_as_scalar",
       "job:\n  algorithm: echo\necho: 5\n",
       {},
       {"@:3:1: echo: expected a section of 'key: value' lines, got '5'"}},
      {"list_for_scalar",
       "job:\n  algorithm: echo\n  seed: [1, 2]\n",
       {},
       {"@:3:3: job.seed: expected an integer, got a list"}},
      {"duplicate_key",
       "job:\n  algorithm: echo\n  seed: 1\n  seed: 2\n",
       {},
       {"@:4:3: job.seed: duplicate key (first written at line 3)"}},
      {"yaml_syntax",
       "job:\n  algorithm: echo\necho: {workers: [1, 2\n",
       {},
       {"@:", "YAML syntax error"}},
      {"not_a_mapping", "- job\n- echo\n", {}, {"@: the job file must be a mapping"}},
      {"inconsistent_payload",
       "job:\n  algorithm: echo\ncontroller:\n  max_message_mb: 1\necho:\n  payload_bytes: "
       "1000000\n  tensors: 4\n",
       {},
       {"@:6:3: echo.payload_bytes: echo.payload_bytes x echo.tensors = 4000000 bytes exceeds "
        "controller.max_message_mb"}},
      {"no_workers_for_echo",
       "job:\n  algorithm: echo\necho:\n  workers: 0\n",
       {},
       {"@:4:3: echo.workers: job.algorithm is echo, which needs at least 1 echo worker"}},
      {"slash_in_name",
       "job:\n  algorithm: echo\n  name: a/b\n",
       {},
       {"@:3:3: job.name: must not contain '/'"}},
      {"shm_for_a_command_server",
       "job:\n  algorithm: ppo\nsim:\n  backend: server\n  transport: shm\n  command: [python3, "
       "s.py, '{bind}']\n",
       {},
       {"@:5:3: sim.transport: shm is spoken by the built-in `rlforge sim-server` only"}},
      {"gpu_trainer_with_ranks",  // refused by every build: no NCCL, or every rank on GPU 0
       "job:\n  algorithm: grpo\ntrainer:\n  ranks: 2\n  device: 'cuda:0'\n",
       {},
       {"@:5:3: trainer.device: trainer.ranks 2 with trainer.device cuda:0: "}},
      // What an actor's set-up would meet is found before anything starts (cli/setup_checks.h).
      {"regex_that_does_not_compile",  // issue 42: relaunched 3 times as a fault before
       "job:\n  algorithm: grpo\nreward:\n  rewards:\n    - name: fmt\n      kind: "
       "regex_format\n      params:\n        pattern: '(ab'\n",
       {},
       {"@:8:9: reward.rewards[0].params.pattern: regex '(ab' does not compile ("}},
      {"plugin_path_not_there",  // issue 42: relative to the working directory, in every command
       "job:\n  algorithm: grpo\nreward:\n  rewards:\n    - name: kw\n      kind: plugin\n"
       "      params:\n        path: build/no_such_plugin.so\n",
       {},
       {"@:8:9: reward.rewards[0].params.path: no file 'build/no_such_plugin.so' (relative to the "
        "working directory: "}},
      {"unknown_env_id",  // issue 35: found only after actors started
       "job:\n  algorithm: ppo\nenv:\n  id: CartPole-v2\n",
       {},
       {"@:4:3: env.id: unknown env 'CartPole-v2' (did you mean CartPole-v1?)"}},
      {"model_path_not_there",  // issue 35
       "job:\n  algorithm: grpo\nmodel:\n  path: no/such/checkpoint\n",
       {},
       {"@:4:3: model.path: 'no/such/checkpoint' is not a checkpoint directory (relative to the "
        "working directory: "}},
      {"unread_section_at_its_defaults",  // issue 35: silently ignored before
       "job:\n  algorithm: grpo\nmodel:\n  path: no/such/checkpoint\nenv:\n  id: CartPole-v1\n",
       {},
       {"@:5:1: env: job.algorithm grpo does not read this section (it reads: "}},
      {"missing_file", nullptr, {}, {"@: cannot open job file: No such file or directory"}},
      {"override_without_equals",
       kGood,
       {"echo.workers"},
       {"command-line override 'echo.workers': expected key=value"}},
      {"override_unknown_key",
       kGood,
       {"echo.wrkers=2"},
       {"command-line override 'echo.wrkers=2': echo.wrkers: unknown key (did you mean "
        "echo.workers?)"}},
      {"override_wrong_type",
       kGood,
       {"job.seed=abc"},
       {"command-line override 'job.seed=abc': job.seed: expected an integer, got 'abc'"}},
      {"override_empty_value",
       kGood,
       {"job.seed="},
       {"command-line override 'job.seed=': job.seed: no value after '='"}},
      {"override_bad_key",
       kGood,
       {"job..seed=1"},
       {"command-line override 'job..seed=1': job..seed: not a valid dotted key"}},
      {"override_into_value",
       kGood,
       {"job.iterations.x=1"},
       {"command-line override 'job.iterations.x=1': job.iterations.x: job.iterations is a value, "
        "not a section"}},
      {"override_creates_section_for_value",
       kGood,
       {"job.seed.x=1"},
       {"command-line override 'job.seed.x=1': job.seed: expected an integer, got a section"}},
      {"every_problem_at_once",
       "job:\n  algorithm: echo\n  iterations: -1\necho:\n  wrokers: 2\n",
       {"job.seed=x"},
       {"@:3:3: job.iterations", "@:5:3: echo.wrokers", "'job.seed=x'", "3 problem(s)"}},
  };
}

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, ExitsTwoNamingKeyAndPlace) {
  const BadCase& c = GetParam();
  std::string dir = FreshDir(std::string("bad_") + c.name);
  std::string path = dir + "/job.yaml";
  if (c.yaml != nullptr) std::ofstream(path) << c.yaml;
  for (const char* cmd : {"run", "validate"}) {
    std::vector<std::string> args = {cmd, path, "job.run_root=" + dir + "/runs"};
    args.insert(args.end(), c.overrides.begin(), c.overrides.end());
    auto [code, out] = RunRlforge(args, 30);
    EXPECT_EQ(code, 2) << cmd << "\n" << out;
    for (std::string want : c.expect) {
      for (size_t at = want.find('@'); at != std::string::npos; at = want.find('@'))
        want.replace(at, 1, path);
      EXPECT_NE(out.find(want), std::string::npos) << cmd << ": expected\n  " << want << "\nin\n"
                                                   << out;
    }
    for (const char* crash :
         {"terminate called", "Aborted", "Segmentation", "what():", "core dumped"}) {
      EXPECT_EQ(out.find(crash), std::string::npos) << out;
    }
  }
  // Nothing was started: no run directory.
  EXPECT_FALSE(std::ifstream(dir + "/runs/job/status.json").good());
}

INSTANTIATE_TEST_SUITE_P(Cases, BadConfigTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// A CPU-only build (Debian's libtorch) refuses a GPU trainer when the file is read, naming the
// key; a CUDA build runs it (launch/gpu-check).
TEST(BadDeviceTest, CpuOnlyBuildRefusesGpuTrainerNamingTheKey) {
  const std::string why = DeviceUnsupportedReason(DeviceSpec{true, -1});
  if (why.empty()) GTEST_SKIP() << "this build's libtorch has CUDA";
  const std::string dir = FreshDir("bad_gpu_trainer");
  const std::string path = dir + "/job.yaml";
  std::ofstream(path) << "job:\n  algorithm: grpo\n";
  auto [code, out] =
      RunRlforge({"run", path, "job.run_root=" + dir + "/runs", "trainer.device=cuda"}, 30);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("command-line override 'trainer.device=cuda': trainer.device: cuda: " + why),
            std::string::npos)
      << out;
  EXPECT_FALSE(std::ifstream(dir + "/runs/job/status.json").good());
}

TEST(CliTest, UnknownSubcommandAndMissingArgumentsExitTwo) {
  EXPECT_EQ(RunRlforge({"rnu"}).first, 2);
  EXPECT_EQ(RunRlforge({"run"}).first, 2);
  EXPECT_EQ(RunRlforge({"actor", "--role", "echo"}).first, 2);
  auto [code, out] = RunRlforge({"--help"});
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("run"), std::string::npos);
}

}  // namespace
}  // namespace rlforge::testing
