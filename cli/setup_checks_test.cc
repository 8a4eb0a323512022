// The set-up checks that `rlforge validate` and `rlforge run` add to the schema's rules: each
// problem an actor's set-up would meet is named with file, line and key before anything starts.
#include "cli/setup_checks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace rlforge {
namespace {

namespace fs = std::filesystem;

// A fresh folder for one test.
std::string Dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("setup_checks_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// A folder with the files a checkpoint needs (their contents are the loader's business).
std::string FakeCheckpoint(const std::string& dir) {
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
    std::ofstream(fs::path(dir) / f) << "{}";
  }
  return dir;
}

// The errors of loading `yaml` (written to `dir`/job.yaml) with the set-up checks, one per line;
// `file` gets the job file's path.
std::string Errors(const std::string& dir, const std::string& yaml, std::string* file = nullptr,
                   const std::vector<std::string>& overrides = {}) {
  const std::string path = dir + "/job.yaml";
  std::ofstream(path) << yaml;
  if (file != nullptr) *file = path;
  return config::FormatErrors(LoadJobFile(path, overrides, SetupChecks()).errors);
}

std::string GrpoWithReward(const std::string& checkpoint, const std::string& reward) {
  return absl::StrCat("job:\n  algorithm: grpo\nmodel:\n  path: ", checkpoint,
                      "\nreward:\n  rewards:\n", reward);
}

// issue 42: a regex that does not compile passed `rlforge validate`; the reward worker then
// failed at set-up and was relaunched as if it had crashed.
TEST(SetupChecksTest, RegexThatDoesNotCompileIsNamedWithFileLineAndKey) {
  const std::string dir = Dir("regex");
  std::string file;
  const std::string errors = Errors(dir,
                                    GrpoWithReward(FakeCheckpoint(dir + "/ckpt"),
                                                   "    - name: fmt\n"
                                                   "      kind: regex_format\n"
                                                   "      params:\n"
                                                   "        pattern: '(ab'\n"),
                                    &file);
  EXPECT_NE(errors.find(file + ":10:9: reward.rewards[0].params.pattern: regex '(ab' does not "
                               "compile ("),
            std::string::npos)
      << errors;
  // A pattern that compiles passes, full_match too.
  EXPECT_EQ(Errors(dir, GrpoWithReward(dir + "/ckpt",
                                       "    - {name: fmt, kind: regex_format, params: {pattern: "
                                       "'^a+$', full_match: true}}\n")),
            "");
}

// issue 42: a relative plugin path, run from another folder, passed validate and failed in the
// worker. Relative paths are relative to the working directory, in validate as in the worker.
TEST(SetupChecksTest, PluginPathIsResolvedAgainstTheWorkingDirectory) {
  const std::string dir = Dir("plugin");
  const std::string ckpt = FakeCheckpoint(dir + "/ckpt");
  std::string file;
  std::string errors = Errors(
      dir,
      GrpoWithReward(
          ckpt, "    - name: kw\n      kind: plugin\n      params:\n        path: no_such.so\n"),
      &file);
  EXPECT_NE(errors.find(file +
                        ":10:9: reward.rewards[0].params.path: no file 'no_such.so' "
                        "(relative to the working directory: " +
                        (fs::current_path() / "no_such.so").string() + ")"),
            std::string::npos)
      << errors;
  // The built example, by an absolute path and by one relative to the working directory.
  const std::string relative = fs::relative(RLFORGE_KEYWORD_PLUGIN).string();
  for (const std::string& path : {std::string(RLFORGE_KEYWORD_PLUGIN), relative}) {
    EXPECT_EQ(Errors(dir, GrpoWithReward(ckpt, "    - {name: kw, kind: plugin, params: {path: " +
                                                   path + "}}\n")),
              "")
        << path;
  }
  // Workers that join from their own hosts load their plugins there: not checked here.
  EXPECT_EQ(
      Errors(dir, GrpoWithReward(ckpt, "    - {name: kw, kind: plugin, params: {path: x.so}}\n") +
                      "  external: true\n"),
      "");
}

// issue 35: an env id that does not exist passed validate; run found it only after starting
// actors.
TEST(SetupChecksTest, UnknownBuiltInEnvIsNamedWithADidYouMean) {
  const std::string dir = Dir("env");
  std::string file;
  const std::string errors =
      Errors(dir, "job:\n  algorithm: ppo\nenv:\n  id: CartPole-v2\n", &file);
  EXPECT_NE(errors.find(file + ":4:3: env.id: unknown env 'CartPole-v2' (did you mean "
                               "CartPole-v1?)"),
            std::string::npos)
      << errors;
  EXPECT_NE(Errors(dir, "job: {algorithm: ppo}\nenv: {id: Pendulm-v1}\nsim: {backend: server}\n")
                .find("env.id: unknown env 'Pendulm-v1' (did you mean Pendulum-v1?)"),
            std::string::npos);
  // A server of the user's serves ids of its own.
  EXPECT_EQ(Errors(dir,
                   "job: {algorithm: ppo}\nenv: {id: MyRobot-v0}\n"
                   "sim: {backend: server, command: [python3, s.py, '{bind}']}\n"),
            "");
}

// issue 35: a model.path that does not exist, or lacks its files, passed validate.
TEST(SetupChecksTest, ModelPathMustHoldACheckpoint) {
  const std::string dir = Dir("model");
  std::string file;
  std::string errors =
      Errors(dir, "job:\n  algorithm: grpo\nmodel:\n  path: no/such/ckpt\n", &file);
  EXPECT_NE(errors.find(file +
                        ":4:3: model.path: 'no/such/ckpt' is not a checkpoint directory "
                        "(relative to the working directory: " +
                        (fs::current_path() / "no/such/ckpt").string() + ")"),
            std::string::npos)
      << errors;
  const std::string ckpt = FakeCheckpoint(dir + "/ckpt");
  fs::remove(ckpt + "/tokenizer.json");
  fs::remove(ckpt + "/model.safetensors");
  std::ofstream(ckpt + "/model.safetensors.index.json")
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                              "b": "model-00002-of-00002.safetensors"}})";
  std::ofstream(ckpt + "/model-00001-of-00002.safetensors") << "";
  errors = Errors(dir, "job: {algorithm: dpo}\nmodel: {path: " + ckpt + "}\n");
  EXPECT_NE(errors.find("model.path: '" + ckpt +
                        "' is not a complete checkpoint: no model-00002-of-00002.safetensors "
                        "(listed in its index), no tokenizer.json"),
            std::string::npos)
      << errors;
  std::ofstream(ckpt + "/model-00002-of-00002.safetensors") << "";
  std::ofstream(ckpt + "/tokenizer.json") << "{}";
  EXPECT_EQ(Errors(dir, "job: {algorithm: dpo}\nmodel: {path: " + ckpt + "}\n"), "");
  // RL starts from a checkpoint; SFT may build its model from scratch.
  EXPECT_NE(Errors(dir, "job: {algorithm: rloo}\n")
                .find("model.path: job.algorithm rloo starts from a checkpoint: set model.path"),
            std::string::npos);
  EXPECT_EQ(Errors(dir, "job: {algorithm: sft}\n"), "");
  // A checkpoint that model.init_job writes first is not there yet.
  std::ofstream(dir + "/sft.yaml") << "job: {algorithm: sft}\n";
  EXPECT_EQ(Errors(dir, "job: {algorithm: grpo}\nmodel: {path: " + dir +
                            "/later, init_job: " + dir + "/sft.yaml}\n"),
            "");
}

TEST(SetupChecksTest, JsonlDataFilesMustExist) {
  const std::string dir = Dir("data");
  std::ofstream(dir + "/train.jsonl") << "";
  std::string file;
  const std::string errors =
      Errors(dir,
             "job:\n  algorithm: sft\ndata:\n  source: jsonl\n  "
             "train_path: " +
                 dir + "/train.jsonl\n  heldout_path: " + dir + "/heldout.jsonl\n",
             &file);
  EXPECT_EQ(errors,
            "error: " + file + ":6:3: data.heldout_path: no file '" + dir + "/heldout.jsonl'\n");
}

// A command-line override is named as the place, as for the schema's own errors.
TEST(SetupChecksTest, OverridesAreNamedAsThePlace) {
  const std::string dir = Dir("override");
  const std::string errors = Errors(dir, "job: {algorithm: ppo}\n", nullptr, {"env.id=Acrobot-v2"});
  EXPECT_NE(errors.find("command-line override 'env.id=Acrobot-v2': env.id: unknown env "
                        "'Acrobot-v2' (did you mean Acrobot-v1?)"),
            std::string::npos)
      << errors;
}

}  // namespace
}  // namespace rlforge
