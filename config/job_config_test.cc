#include "config/job_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "config/build_info.h"
#include "config/device.h"
#include "rlforge_paths.h"

namespace rlforge {
namespace {

TEST(JobConfigTest, MinimalEchoJobLoadsWithDefaults) {
  LoadedJob j = LoadJobText("job: {algorithm: echo}\n", "t.yaml");
  ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  EXPECT_EQ(j.config.echo.workers, 2);
  EXPECT_EQ(j.config.controller.heartbeat_misses, 5);
}

TEST(JobConfigTest, ResolvedYamlRoundTrips) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: echo, name: x}\ncontroller: {shutdown_grace_s: 2.5}\n", "t.yaml");
  ASSERT_TRUE(j.ok());
  std::string text = ResolvedYaml(j.config);
  LoadedJob k = LoadJobText(text, "resolved");
  ASSERT_TRUE(k.ok()) << config::FormatErrors(k.errors) << text;
  EXPECT_EQ(ResolvedYaml(k.config), text);
  EXPECT_DOUBLE_EQ(k.config.controller.shutdown_grace_s, 2.5);
}

TEST(JobConfigTest, AlgorithmIsRequired) {
  LoadedJob j = LoadJobText("controller: {port: 0}\n", "t.yaml");
  ASSERT_EQ(j.errors.size(), 1u);
  EXPECT_EQ(j.errors[0].key, "job.algorithm");
}

TEST(JobConfigTest, EchoNeedsWorkers) {
  LoadedJob j = LoadJobText("job: {algorithm: echo}\necho:\n  workers: 0\n", "t.yaml");
  ASSERT_EQ(j.errors.size(), 1u) << config::FormatErrors(j.errors);
  EXPECT_EQ(j.errors[0].ToString(),
            "t.yaml:3:3: echo.workers: job.algorithm is echo, which needs at least 1 echo worker");
}

TEST(JobConfigTest, ElasticWorkerCapsAndMinimumsAreCheckedNamingTheKey) {
  auto errors = [](const std::string& yaml) {
    return config::FormatErrors(LoadJobText(yaml, "t.yaml").errors);
  };
  EXPECT_EQ(errors("job: {algorithm: grpo}\nrollout: {workers: 2, max_workers: 4, min_workers: 3}\n"
                   "reward: {max_workers: 3, min_workers: 2}\n"),
            "");
  EXPECT_NE(errors("job: {algorithm: grpo}\nrollout: {workers: 2, min_workers: 3}\n")
                .find("rollout.min_workers: must not exceed rollout.max_workers (2, from "
                      "rollout.workers), got 3"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: grpo}\nreward: {max_workers: 2, min_workers: 3}\n")
                .find("reward.min_workers: must not exceed reward.max_workers (2), got 3"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: grpo}\nrollout: {workers: 3, max_workers: 2}\n")
                .find("rollout.max_workers: must be at least rollout.workers (3), got 2"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: grpo}\nrollout: {max_workers: 65}\n")
                .find("rollout.max_workers: language-model jobs run at most 64 rollout engines"),
            std::string::npos);
  EXPECT_EQ(
      errors("job: {algorithm: ppo}\nrollout: {workers: 2, max_workers: 3, min_workers: 2}\n"), "");
  EXPECT_NE(errors("job: {algorithm: ppo}\nrollout: {workers: 2, max_workers: 3}\n"
                   "sim: {backend: server}\n")
                .find("rollout.max_workers: joining workers step their envs in process: set "
                      "sim.backend: inprocess (got server)"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: ppo}\nrollout: {max_staleness: 1, max_workers: 2}\n")
                .find("rollout.max_workers: asynchronous runs (rollout.max_staleness 1) do not "
                      "take joining workers"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: sft}\nrollout: {max_workers: 2}\n")
                .find("rollout.max_workers: job.algorithm sft does not take joining workers "
                      "(language-model and ppo jobs do)"),
            std::string::npos);
  // Asynchronous language-model runs take joiners as synchronous ones do.
  EXPECT_EQ(errors("job: {algorithm: grpo}\nrollout: {max_staleness: 1, min_workers: 1, "
                   "max_workers: 2}\nreward: {min_workers: 2, max_workers: 2}\n"),
            "");
  EXPECT_NE(
      errors("job: {algorithm: grpo}\nrollout: {min_workers: 0}\n").find("rollout.min_workers"),
      std::string::npos);
}

TEST(JobConfigTest, WeightKeysThatWouldDoNothingAreErrors) {
  LoadedJob ppo = LoadJobText(
      "job: {algorithm: ppo}\nweights: {transport: gloo, bucket_mb: 64, dtype: bfloat16}\n",
      "t.yaml");
  std::string all = config::FormatErrors(ppo.errors);
  EXPECT_NE(all.find("weights.transport: gloo carries language models"), std::string::npos) << all;
  EXPECT_NE(all.find("weights.dtype: is for language-model jobs"), std::string::npos) << all;
  EXPECT_EQ(all.find("weights.bucket_mb"), std::string::npos) << all;  // PPO's stream has buckets
  LoadedJob sft = LoadJobText("job: {algorithm: sft}\nweights: {dtype: bfloat16}\n", "t.yaml");
  all = config::FormatErrors(sft.errors);
  EXPECT_NE(all.find("weights.dtype: this job has no rollout workers"), std::string::npos) << all;
  LoadedJob grpo = LoadJobText(
      "job: {algorithm: grpo}\nweights: {transport: gloo, bucket_mb: 0.5, dtype: bfloat16, "
      "apply: staged, timeout_s: 30}\n",
      "t.yaml");
  all = config::FormatErrors(grpo.errors);
  EXPECT_EQ(all.find("weights."), std::string::npos) << all;
  LoadedJob tiny = LoadJobText("job: {algorithm: grpo}\nweights: {bucket_mb: 0.001}\n", "t.yaml");
  all = config::FormatErrors(tiny.errors);
  EXPECT_NE(all.find("weights.bucket_mb"), std::string::npos) << all;
}

TEST(JobConfigTest, MappedWeightsNeedFloat32OverSharedMemory) {
  LoadedJob ok = LoadJobText("job: {algorithm: grpo}\nweights: {apply: mapped}\n", "t.yaml");
  EXPECT_TRUE(ok.ok()) << config::FormatErrors(ok.errors);
  LoadedJob bad = LoadJobText(
      "job: {algorithm: grpo}\nweights: {apply: mapped, dtype: bfloat16, transport: gloo}\n",
      "t.yaml");
  const std::string all = config::FormatErrors(bad.errors);
  EXPECT_NE(all.find("weights.dtype: weights.apply mapped serves the engines' fp32 parameters"),
            std::string::npos)
      << all;
  // The transport it needs (shm) is checked against the resolved one: weights/weight_transport.h.
}

TEST(JobConfigTest, DevicesAreCheckedNamingTheKeyAndWhatThisBuildLacks) {
  auto errors = [](const std::string& yaml) {
    return config::FormatErrors(LoadJobText(yaml, "t.yaml").errors);
  };
  EXPECT_EQ(errors("job: {algorithm: grpo}\ntrainer: {device: cpu}\nengine: {device: cpu}\n"), "");
  EXPECT_NE(errors("job: {algorithm: grpo}\ntrainer: {device: gpu}\n")
                .find("t.yaml:2:11: trainer.device: 'gpu' is not a device: expected cpu, cuda or "
                      "cuda:N (N >= 0)"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: grpo}\nengine: {device: 'cuda:x'}\n").find("engine.device"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: grpo}\nengine: {device: 'cuda:-1'}\n").find("engine.device"),
            std::string::npos);
  // engine.cuda_graphs set true on a cpu engine would do nothing: refused where it was written.
  EXPECT_NE(errors("job: {algorithm: grpo}\nengine: {device: cpu, cuda_graphs: true}\n")
                .find("t.yaml:2:23: engine.cuda_graphs: true needs a GPU engine, and engine.device "
                      "is cpu"),
            std::string::npos);
  EXPECT_EQ(errors("job: {algorithm: grpo}\nengine: {cuda_graphs: false}\n"), "");
  // cuda is refused by a build whose libtorch has none, and accepted by one that has it.
  const std::string why = DeviceUnsupportedReason(DeviceSpec{true, 0});
  const std::string cuda = errors("job: {algorithm: grpo}\ntrainer: {device: 'cuda:0'}\n");
  if (why.empty()) {
    EXPECT_EQ(cuda, "");
  } else {
    EXPECT_NE(cuda.find("trainer.device: cuda:0: " + why), std::string::npos) << cuda;
    EXPECT_NE(why.find("-DRLFORGE_CUDA=ON"), std::string::npos);
  }
  EXPECT_EQ(DeviceUnsupportedReason(DeviceSpec{}), "") << "every build runs on the CPU";
  // Trainer ranks on GPUs form an NCCL group: refused by a build without NCCL (as this CPU
  // build), and by every build when they would share one GPU; ranks on the CPU are fine.
  const std::string gpu_ranks =
      errors("job: {algorithm: grpo}\ntrainer: {device: cuda, ranks: 2}\n");
  const std::string no_nccl =
      "t.yaml:2:11: trainer.device: trainer.ranks 2 with trainer.device cuda: ranks on GPUs form "
      "an NCCL group, and this build has no NCCL (";
  if (RLFORGE_NCCL) {
    EXPECT_EQ(gpu_ranks, "");
  } else {
    EXPECT_NE(gpu_ranks.find(no_nccl), std::string::npos) << gpu_ranks;
    EXPECT_NE(gpu_ranks.find(RLFORGE_TORCH_CUDA ? "CMake found none" : "CPU-only libtorch"),
              std::string::npos)
        << gpu_ranks;
  }
  const std::string one_gpu =
      errors("job: {algorithm: grpo}\ntrainer: {device: 'cuda:1', ranks: 2}\n");
  EXPECT_NE(
      one_gpu.find(RLFORGE_NCCL ? "trainer.device cuda:1: every rank would be on GPU 1 of this "
                                  "host, and NCCL needs a GPU per rank"
                                : "this build has no NCCL"),
      std::string::npos)
      << one_gpu;
  EXPECT_EQ(errors("job: {algorithm: grpo}\ntrainer: {device: cpu, ranks: 2}\n"), "");
  // Roles that cannot use a GPU, and weights that cannot reach one, are named.
  EXPECT_NE(errors("job: {algorithm: ppo}\ntrainer: {device: cuda}\n")
                .find("trainer.device: ppo trains its control policy on the CPU; got cuda"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: sft}\nengine: {device: cuda}\n")
                .find("engine: job.algorithm sft does not read this section"),
            std::string::npos);
  EXPECT_NE(errors("job: {algorithm: grpo}\nengine: {device: cuda}\nweights: {apply: mapped}\n")
                .find("weights.apply: mapped makes the shared-memory stream the engines' own "
                      "parameters, which a GPU cannot compute on; engine.device is cuda"),
            std::string::npos);
}

TEST(JobConfigTest, PlacementIsAnErrorUnderTheLocalBackend) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: ppo}\nlaunch:\n  nodes: 2\n  placement:\n    rollout: {per_node: 1}\n",
      "t.yaml");
  std::string all = config::FormatErrors(j.errors);
  EXPECT_EQ(j.errors.size(), 2u) << all;
  EXPECT_NE(all.find("launch.nodes: only launch.backend slurm places actors on nodes"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("launch.placement.rollout: only launch.backend slurm places actors"),
            std::string::npos)
      << all;
  LoadedJob slurm = LoadJobText(
      "job: {algorithm: ppo}\nlaunch:\n  backend: slurm\n  nodes: 2\n  placement:\n"
      "    rollout: {per_node: 1, nodes: [0, 1]}\n    trainer: {gpus: 1}\n",
      "t.yaml");
  EXPECT_TRUE(slurm.ok()) << config::FormatErrors(slurm.errors);
  EXPECT_EQ(slurm.config.launch.placement.rollout.nodes, (std::vector<int64_t>{0, 1}));
}

TEST(JobConfigTest, SlurmBindsBeyondLoopbackAndRefusesSameHostTransports) {
  LoadedJob j = LoadJobText("job: {algorithm: grpo}\nlaunch: {backend: slurm}\n", "t.yaml");
  EXPECT_EQ(j.config.controller.host, "0.0.0.0");  // the default 127.0.0.1 is unreachable
  LoadedJob local = LoadJobText("job: {algorithm: grpo}\n", "t.yaml");
  EXPECT_EQ(local.config.controller.host, "127.0.0.1");
  LoadedJob bad = LoadJobText(
      "job: {algorithm: ppo}\ncontroller: {host: localhost}\n"
      "sim: {backend: server}\nweights: {transport: shm}\n"
      "launch:\n  backend: slurm\n  placement:\n    rollout: {nodes: [1, 1]}\n",
      "t.yaml");
  std::string all = config::FormatErrors(bad.errors);
  for (const char* expected :
       {"controller.host: launch.backend slurm starts actors on other nodes, which cannot reach "
        "loopback address localhost",
        "sim.backend: server starts sim servers on the controller's host",
        "weights.transport: shm reaches only processes on the trainer's host",
        "launch.placement.rollout.nodes: node 1 is listed twice"}) {
    EXPECT_NE(all.find(expected), std::string::npos) << expected << "\n" << all;
  }
}

// An asynchronous LM run records its groups in flight in each checkpoint (the rollout
// dispatcher deals them again on resume); asynchronous ppo does not, and is refused.
TEST(JobConfigTest, CheckpointsOfAnAsynchronousLmRunAreAccepted) {
  LoadedJob async = LoadJobText(
      "job: {algorithm: grpo}\nrollout: {max_staleness: 1}\ncheckpoint: {every: 5}\n", "t.yaml");
  EXPECT_TRUE(async.errors.empty()) << config::FormatErrors(async.errors);
  LoadedJob ppo = LoadJobText(
      "job: {algorithm: ppo}\nrollout: {max_staleness: 1}\ncheckpoint: {every: 5}\n", "t.yaml");
  EXPECT_NE(config::FormatErrors(ppo.errors).find("checkpoint.every: asynchronous runs"),
            std::string::npos)
      << config::FormatErrors(ppo.errors);
  LoadedJob sync = LoadJobText("job: {algorithm: grpo}\ncheckpoint: {every: 5}\n", "t.yaml");
  EXPECT_TRUE(sync.errors.empty()) << config::FormatErrors(sync.errors);
}

TEST(JobConfigTest, CheckpointsAreTakenByEveryAlgorithmWithState) {
  for (const char* algorithm : {"ppo", "grpo", "rloo", "lm_ppo", "dpo", "sft"}) {
    LoadedJob j = LoadJobText(
        absl::StrCat("job: {algorithm: ", algorithm, "}\ncheckpoint: {every: 5}\n"), "t.yaml");
    EXPECT_TRUE(j.errors.empty()) << algorithm << ": " << config::FormatErrors(j.errors);
  }
  LoadedJob echo = LoadJobText("job: {algorithm: echo}\ncheckpoint: {every: 5}\n", "t.yaml");
  EXPECT_NE(config::FormatErrors(echo.errors)
                .find("checkpoint.every: job.algorithm echo has no state to checkpoint; got 5 "
                      "(set 0)"),
            std::string::npos)
      << config::FormatErrors(echo.errors);
}

TEST(JobConfigTest, DpoOptionsAreChecked) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: dpo}\ndata: {source: jsonl}\ndpo: {loss_type: ipo, label_smoothing: 0.1, "
      "beta: 0}\n",
      "t.yaml");
  std::string all = config::FormatErrors(j.errors);
  EXPECT_NE(all.find("dpo.beta"), std::string::npos) << all;
  EXPECT_NE(all.find("data.source: jsonl needs data.train_path and data.heldout_path"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("dpo.label_smoothing: applies to loss_type sigmoid only"), std::string::npos)
      << all;
  LoadedJob bad = LoadJobText("job: {algorithm: dpo}\ndpo: {rejected: worst}\n", "t.yaml");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].key, "dpo.rejected");
}

TEST(JobConfigTest, InitJobMustNameAFileAndACheckpoint) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: grpo}\nmodel:\n  path: runs/x/checkpoints/step_1\n  init_job: "
      "no/such/stage.yaml\n",
      "t.yaml");
  ASSERT_EQ(j.errors.size(), 1u) << config::FormatErrors(j.errors);
  EXPECT_NE(j.errors[0].ToString().find("t.yaml:4:3: model.init_job: no job file "
                                        "'no/such/stage.yaml'"),
            std::string::npos)
      << j.errors[0].ToString();
  LoadedJob k = LoadJobText("job: {algorithm: grpo}\nmodel: {init_job: t.yaml}\n", "t.yaml");
  ASSERT_EQ(k.errors.size(), 1u) << config::FormatErrors(k.errors);
  EXPECT_NE(k.errors[0].ToString().find("model.init_job: needs model.path"), std::string::npos);
}

TEST(JobConfigTest, LanguageModelJobsTrainOnSeveralRanks) {
  for (const char* algorithm : {"sft", "grpo", "drgrpo", "rloo", "lm_ppo", "dpo"}) {
    LoadedJob j = LoadJobText(
        absl::StrCat("job: {algorithm: ", algorithm, "}\ntrainer: {ranks: 4}\n"), "t.yaml");
    EXPECT_TRUE(j.ok()) << algorithm << ": " << config::FormatErrors(j.errors);
    EXPECT_EQ(j.config.trainer.ranks, 4) << algorithm;
  }
  EXPECT_TRUE(LoadJobText("job: {algorithm: sft}\ntrainer: {ranks: 64}\n", "t.yaml").ok());
  LoadedJob many = LoadJobText("job: {algorithm: sft}\ntrainer: {ranks: 65}\n", "t.yaml");
  ASSERT_EQ(many.errors.size(), 1u) << config::FormatErrors(many.errors);
  EXPECT_EQ(many.errors[0].key, "trainer.ranks");
}

TEST(JobConfigTest, PpoAndEchoRefuseSeveralRanksNamingTheAlgorithm) {
  LoadedJob ppo = LoadJobText("job: {algorithm: ppo}\ntrainer: {ranks: 2}\n", "t.yaml");
  ASSERT_EQ(ppo.errors.size(), 1u) << config::FormatErrors(ppo.errors);
  EXPECT_EQ(ppo.errors[0].ToString(),
            "t.yaml:2:11: trainer.ranks: ppo trains its control policy on one rank; got 2");
  LoadedJob echo = LoadJobText("job: {algorithm: echo}\ntrainer: {ranks: 3}\n", "t.yaml");
  ASSERT_EQ(echo.errors.size(), 1u) << config::FormatErrors(echo.errors);
  EXPECT_EQ(echo.errors[0].ToString(), "t.yaml:2:11: trainer.ranks: echo starts no trainer; got 3");
}

TEST(JobConfigTest, CollectiveTimeoutDefaultsTo60AndMustBePositive) {
  LoadedJob j = LoadJobText("job: {algorithm: sft}\n", "t.yaml");
  ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  EXPECT_DOUBLE_EQ(j.config.trainer.collective_timeout_s, 60);
  LoadedJob set =
      LoadJobText("job: {algorithm: sft}\ntrainer: {collective_timeout_s: 2.5}\n", "t.yaml");
  ASSERT_TRUE(set.ok()) << config::FormatErrors(set.errors);
  EXPECT_DOUBLE_EQ(set.config.trainer.collective_timeout_s, 2.5);
  LoadedJob zero =
      LoadJobText("job: {algorithm: sft}\ntrainer: {collective_timeout_s: 0}\n", "t.yaml");
  ASSERT_EQ(zero.errors.size(), 1u) << config::FormatErrors(zero.errors);
  EXPECT_EQ(zero.errors[0].key, "trainer.collective_timeout_s");
}

// data.prompt_template: model is checked where the job loads: the checkpoint must carry a chat
// template, and a model built from scratch needs model.chat_template.
TEST(JobConfigTest, ModelPromptTemplateNeedsACheckpointWithAChatTemplate) {
  const std::string data = std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data";
  auto load = [](const std::string& path) {
    return LoadJobText(absl::StrCat("job: {algorithm: sft}\nmodel: {path: '", path,
                                    "'}\ndata: {prompt_template: model}\n"),
                       "t.yaml");
  };
  EXPECT_TRUE(load(data + "/chat_templates/checkpoint").errors.empty());
  LoadedJob none = load(data + "/tokenizer/qwen2");
  ASSERT_EQ(none.errors.size(), 1u) << config::FormatErrors(none.errors);
  EXPECT_EQ(none.errors[0].key, "data.prompt_template");
  EXPECT_EQ(none.errors[0].message,
            absl::StrCat("model: model.path '", data,
                         "/tokenizer/qwen2' has no chat template (no "
                         "chat_template in ",
                         data, "/tokenizer/qwen2/tokenizer_config.json and no ", data,
                         "/tokenizer/qwen2/chat_template.jinja)"));
  LoadedJob scratch =
      LoadJobText("job: {algorithm: sft}\ndata: {prompt_template: model}\n", "t.yaml");
  ASSERT_EQ(scratch.errors.size(), 1u) << config::FormatErrors(scratch.errors);
  EXPECT_NE(scratch.errors[0].message.find("model needs a chat template"), std::string::npos);
  // From scratch, model.chat_template gives the model one; it must exist, and a checkpoint
  // brings its own.
  const std::string chatml =
      std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/configs/templates/chatml.jinja";
  EXPECT_TRUE(LoadJobText(absl::StrCat("job: {algorithm: sft}\nmodel: {chat_template: '", chatml,
                                       "'}\ndata: {prompt_template: model}\n"),
                          "t.yaml")
                  .errors.empty());
  LoadedJob missing = LoadJobText(
      "job: {algorithm: sft}\nmodel: {chat_template: no/such.jinja}\ndata: {prompt_template: "
      "model}\n",
      "t.yaml");
  ASSERT_EQ(missing.errors.size(), 1u) << config::FormatErrors(missing.errors);
  EXPECT_EQ(missing.errors[0].key, "model.chat_template");
  EXPECT_NE(missing.errors[0].message.find("no file 'no/such.jinja'"), std::string::npos);
  LoadedJob both =
      LoadJobText(absl::StrCat("job: {algorithm: sft}\nmodel: {path: '", data,
                               "/chat_templates/checkpoint', chat_template: '", chatml, "'}\n"),
                  "t.yaml");
  ASSERT_EQ(both.errors.size(), 1u) << config::FormatErrors(both.errors);
  EXPECT_EQ(both.errors[0].key, "model.chat_template");
}

// docs/config.md embeds the generated reference; a key added without
// regenerating it (rlforge config-docs) fails here.
TEST(JobConfigTest, KubernetesBackendMakesEveryRoleJoinAndSaysSoInTheResolvedConfig) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: grpo}\nlaunch: {backend: kubernetes}\n"
      "controller: {host: 0.0.0.0, store_port: 29400, advertise_host: ctl.ns.svc}\n",
      "t.yaml");
  ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  EXPECT_TRUE(EveryRoleJoins(j.config.launch));
  EXPECT_TRUE(j.config.rollout.external);
  EXPECT_TRUE(j.config.reward.external);
  EXPECT_EQ(j.config.controller.store_port, 29400);
  EXPECT_EQ(j.config.controller.advertise_host, "ctl.ns.svc");
  LoadedJob again = LoadJobText(ResolvedYaml(j.config), "resolved");  // what actors load
  ASSERT_TRUE(again.ok()) << config::FormatErrors(again.errors);
  EXPECT_TRUE(again.config.rollout.external);
  LoadedJob local = LoadJobText("job: {algorithm: grpo}\n", "t.yaml");
  EXPECT_FALSE(EveryRoleJoins(local.config.launch));
  EXPECT_FALSE(local.config.rollout.external);
}

TEST(JobConfigTest, KubernetesBackendRefusesWhatNeedsOneHost) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: grpo}\nlaunch: {backend: kubernetes}\nrollout: {external: false}\n"
      "weights: {transport: shm}\n",
      "t.yaml");
  const std::string all = config::FormatErrors(j.errors);
  EXPECT_NE(all.find("t.yaml:3:11: rollout.external: launch.backend is kubernetes: every role "
                     "joins by address; false cannot hold"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("weights.transport: launch.backend is kubernetes: every role joins by "
                     "address; shm reaches engines on this host only"),
            std::string::npos)
      << all;
  LoadedJob ppo = LoadJobText(
      "job: {algorithm: ppo}\nlaunch: {backend: kubernetes}\nsim: {backend: server}\n", "t.yaml");
  EXPECT_NE(config::FormatErrors(ppo.errors).find("sim.backend: launch.backend is kubernetes"),
            std::string::npos)
      << config::FormatErrors(ppo.errors);
  LoadedJob bad_port =
      LoadJobText("job: {algorithm: echo}\ncontroller: {store_port: 70000}\n", "t.yaml");
  EXPECT_FALSE(bad_port.ok());
}

TEST(JobConfigTest, DocsConfigMdIsCurrent) {
  const char* src = std::getenv("RLFORGE_SOURCE_DIR");
  if (src == nullptr) src = RLFORGE_SOURCE_DIR_DEFAULT;
  std::ifstream in(std::string(src) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN GENERATED REFERENCE -->\n";
  const std::string end = "<!-- END GENERATED REFERENCE -->";
  size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), ConfigReferenceMarkdown())
      << "run: build/rlforge config-docs --write docs/config.md";
}

// lm_rl.eval_verifier is parsed once into AnswerCheck; a typo names the key and the choices.
TEST(JobConfigTest, EvalVerifierIsATypedChoice) {
  LoadedJob ok = LoadJobText("job: {algorithm: grpo}\nlm_rl: {eval_verifier: math}\n", "t.yaml");
  ASSERT_TRUE(ok.errors.empty()) << config::FormatErrors(ok.errors);
  EXPECT_EQ(ok.config.grpo.eval_verifier, AnswerCheck::kMath);
  EXPECT_NE(ResolvedYaml(ok.config).find("eval_verifier: math"), std::string::npos);
  LoadedJob bad = LoadJobText("job: {algorithm: grpo}\nlm_rl: {eval_verifier: maths}\n", "t.yaml");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].key, "lm_rl.eval_verifier");
  EXPECT_NE(bad.errors[0].message.find("did you mean math?"), std::string::npos)
      << bad.errors[0].message;
}

TEST(JobConfigTest, LoraAndMicroBatchKeys) {
  const std::string head = "job: {algorithm: grpo}\nmodel: {path: /m}\n";
  LoadedJob ok = LoadJobText(head +
                                 "trainer:\n  micro_batch_size: 16\n  lora:\n    rank: 8\n"
                                 "    alpha: 16\n    dropout: 0.05\n"
                                 "    target_modules: [q_proj, v_proj]\n",
                             "t.yaml");
  ASSERT_TRUE(ok.ok()) << config::FormatErrors(ok.errors);
  EXPECT_EQ(ok.config.trainer.micro_batch_size, 16);
  EXPECT_EQ(ok.config.trainer.lora.rank, 8);
  EXPECT_EQ(ok.config.trainer.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  LoadedJob off = LoadJobText(head, "t.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off.config.trainer.lora.rank, 0);
  EXPECT_EQ(off.config.trainer.micro_batch_size, 0);

  LoadedJob unknown = LoadJobText(
      head + "trainer:\n  lora:\n    rank: 4\n    target_modules: [q_proj, qkv_proj]\n", "t.yaml");
  ASSERT_EQ(unknown.errors.size(), 1u) << config::FormatErrors(unknown.errors);
  EXPECT_EQ(unknown.errors[0].key, "trainer.lora.target_modules");
  EXPECT_EQ(unknown.errors[0].loc.line, 6);
  EXPECT_EQ(unknown.errors[0].message,
            "unknown module 'qkv_proj'; expected one of q_proj, k_proj, v_proj, o_proj, "
            "gate_proj, up_proj, down_proj");
  LoadedJob negative = LoadJobText(head + "trainer:\n  lora: {rank: -2}\n", "t.yaml");
  ASSERT_EQ(negative.errors.size(), 1u) << config::FormatErrors(negative.errors);
  EXPECT_EQ(negative.errors[0].key, "trainer.lora.rank");
  EXPECT_EQ(negative.errors[0].loc.line, 4);
  // The resolved config states every key, target_modules with rank 0 included: it loads.
  LoadedJob zero =
      LoadJobText(head + "trainer:\n  lora: {rank: 0, target_modules: [q_proj]}\n", "t.yaml");
  ASSERT_TRUE(zero.ok()) << config::FormatErrors(zero.errors);
  LoadedJob resolved = LoadJobText(ResolvedYaml(ok.config), "resolved");
  ASSERT_TRUE(resolved.ok()) << config::FormatErrors(resolved.errors);
  EXPECT_EQ(resolved.config.trainer.lora.rank, 8);
  LoadedJob sharded = LoadJobText(head + "trainer:\n  ranks: 2\n  lora: {rank: 4}\n", "t.yaml");
  ASSERT_EQ(sharded.errors.size(), 1u) << config::FormatErrors(sharded.errors);
  EXPECT_EQ(sharded.errors[0].key, "trainer.ranks");
  LoadedJob ppo = LoadJobText("job: {algorithm: ppo}\ntrainer:\n  lora: {rank: 4}\n", "t.yaml");
  ASSERT_FALSE(ppo.ok());
  EXPECT_TRUE(std::any_of(ppo.errors.begin(), ppo.errors.end(), [](const config::ConfigError& e) {
    return e.key == "trainer.lora.rank";
  })) << config::FormatErrors(ppo.errors);
}

// Every closed choice is parsed once, at load, into its enum: the resolved config prints the
// word, and an unknown word is an error naming file, line, key and the words.
TEST(JobConfigTest, ChoicesAreParsedOnceIntoEnums) {
  LoadedJob j = LoadJobText(
      "job: {algorithm: grpo, log_level: debug}\ntrainer: {lr_schedule: cosine, "
      "mixed_precision: bf16}\nlm_rl: {kl_estimator: k1, off_policy: tis}\n"
      "model: {dtype: bfloat16, architecture: Qwen2ForCausalLM}\n",
      "t.yaml");
  ASSERT_TRUE(j.ok()) << config::FormatErrors(j.errors);
  EXPECT_EQ(j.config.job.log_level, LogLevel::kDebug);
  EXPECT_EQ(j.config.trainer.lr_schedule, LrSchedule::kCosine);
  EXPECT_EQ(j.config.trainer.mixed_precision, MixedPrecision::kBf16);
  EXPECT_EQ(j.config.grpo.kl_estimator, KlEstimator::kK1);
  EXPECT_EQ(j.config.grpo.off_policy, OffPolicyCorrection::kTruncatedIs);
  EXPECT_EQ(j.config.model.dtype, FloatDtype::kBfloat16);
  EXPECT_EQ(j.config.model.architecture, ModelArchitecture::kQwen2);
  const std::string resolved = ResolvedYaml(j.config);
  for (const char* line :
       {"log_level: debug", "lr_schedule: cosine", "mixed_precision: bf16", "kl_estimator: k1",
        "off_policy: tis", "dtype: bfloat16", "architecture: Qwen2ForCausalLM"}) {
    EXPECT_NE(resolved.find(line), std::string::npos) << line << "\n" << resolved;
  }
  LoadedJob again = LoadJobText(resolved, "resolved");
  ASSERT_TRUE(again.ok()) << config::FormatErrors(again.errors);
  EXPECT_EQ(ResolvedYaml(again.config), resolved);
  LoadedJob bad = LoadJobText("job: {algorithm: grpo}\ntrainer:\n  lr_schedule: cosin\n", "t.yaml");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].ToString(),
            "t.yaml:3:3: trainer.lr_schedule: expected one of constant, linear, cosine; got "
            "'cosin' (did you mean cosine?)");
}

TEST(JobConfigTest, ChoiceWordsRoundTrip) {
  for (const auto& [e, word] : ChoiceWords<LossAggregation>::kWords) {
    EXPECT_EQ(*ParseChoice<LossAggregation>(word), e);
    EXPECT_STREQ(ChoiceName(e), word);
  }
  EXPECT_STREQ(ChoiceName(SimPipeline::kOn), "true");
  EXPECT_STREQ(ChoiceName(RewardKind::kLengthPenalty), "length_penalty");
  const absl::StatusOr<KlEstimator> bad = ParseChoice<KlEstimator>("k4");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "expected one of k1, k2, k3, got 'k4'");
}

// The section that serves grpo, drgrpo, rloo and lm_ppo is lm_rl:. Its old name, grpo:, still
// loads (in the file and in overrides) with a warning naming the new one; both is an error.
TEST(JobConfigTest, OldSectionNameGrpoLoadsWithAWarning) {
  LoadedJob old = LoadJobText("job: {algorithm: rloo}\ngrpo:\n  kl_beta: 0.25\n", "t.yaml");
  ASSERT_TRUE(old.ok()) << config::FormatErrors(old.errors);
  EXPECT_EQ(old.config.grpo.kl_beta, 0.25);
  ASSERT_EQ(old.warnings.size(), 1u);
  EXPECT_EQ(old.warnings[0].ToString(),
            "t.yaml:2:1: grpo: deprecated: grpo is now lm_rl (read as such); rename it");
  EXPECT_NE(ResolvedYaml(old.config).find("lm_rl:"), std::string::npos);
  EXPECT_EQ(ResolvedYaml(old.config).find("grpo:"), std::string::npos);
  // An error inside the old section names the key by its new name, at the file's line.
  LoadedJob typo = LoadJobText("job: {algorithm: grpo}\ngrpo:\n  kl_betta: 1\n", "t.yaml");
  ASSERT_EQ(typo.errors.size(), 1u);
  EXPECT_EQ(typo.errors[0].key, "lm_rl.kl_betta");
  EXPECT_EQ(typo.errors[0].loc.line, 3);

  const std::string file = ::testing::TempDir() + "/old_name.yaml";
  std::ofstream(file) << "job: {algorithm: grpo}\ngrpo: {group_size: 4}\n";
  LoadedJob both_names = LoadJobFile(file, {"lm_rl.kl_beta=0.5", "grpo.top_k=3"});
  ASSERT_TRUE(both_names.ok()) << config::FormatErrors(both_names.errors);
  EXPECT_EQ(both_names.config.grpo.group_size, 4);
  EXPECT_EQ(both_names.config.grpo.kl_beta, 0.5);
  EXPECT_EQ(both_names.config.grpo.top_k, 3);
  ASSERT_EQ(both_names.warnings.size(), 2u) << config::FormatWarnings(both_names.warnings);
  EXPECT_EQ(both_names.warnings[0].key, "grpo.top_k");  // the override, first
  EXPECT_EQ(both_names.warnings[1].key, "grpo");

  LoadedJob twice = LoadJobText(
      "job: {algorithm: grpo}\nlm_rl: {group_size: 4}\ngrpo: {group_size: 2}\n", "t.yaml");
  ASSERT_EQ(twice.errors.size(), 1u) << config::FormatErrors(twice.errors);
  EXPECT_EQ(twice.errors[0].ToString(),
            "t.yaml:3:1: lm_rl: given twice (at line 2 and here), once under its old name; keep "
            "lm_rl only");
}

}  // namespace
}  // namespace rlforge
