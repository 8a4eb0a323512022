#include "weights/weight_transport.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "config/build_info.h"

namespace rlforge {
namespace {

using T = WeightTransport;

// The config of `yaml` (errors unrelated to the transport, e.g. a CPU-only build's refusal of
// cuda devices, do not matter to the resolver).
JobConfig Job(const std::string& yaml) { return LoadJobText(yaml, "t.yaml").config; }

T Resolve(const std::string& yaml, WeightPlaneFacts facts = {}) {
  return ResolveWeightTransport(Job(yaml), facts);
}

// Every error of `yaml` loaded with the weight plane's check (as every `rlforge` command does).
std::string Errors(const std::string& yaml) {
  const std::string path = testing::TempDir() + "/t.yaml";
  std::ofstream(path) << yaml;
  return config::FormatErrors(LoadJobFile(path, {}, {CheckWeightTransport}).errors);
}

constexpr char kGrpo[] = "job: {algorithm: grpo}\n";
constexpr char kPpo[] = "job: {algorithm: ppo}\n";
const std::string kGpus = "job: {algorithm: grpo}\ntrainer: {device: cuda}\nengine: {device: cuda}\n";

TEST(ResolveWeightTransportTest, LanguageModelOnTheHostFollowsWhereEnginesRunAndJoin) {
  EXPECT_EQ(Resolve(kGrpo), T::kShm);  // one host
  EXPECT_EQ(Resolve(std::string(kGrpo) + "rollout: {external: true}\n"), T::kGloo);
  EXPECT_EQ(Resolve(std::string(kGrpo) + "launch: {backend: kubernetes}\n"), T::kGloo);
  EXPECT_EQ(Resolve(std::string(kGrpo) + "launch: {backend: slurm}\n"), T::kZmq);
  // Engines that may join and leave get inline weights: no stream for a leave to cut short.
  EXPECT_EQ(Resolve(std::string(kGrpo) + "rollout: {workers: 1, max_workers: 2}\n"), T::kZmq);
  // Asynchronous runs take joiners too (one dispatcher for both modes): the same choice.
  EXPECT_EQ(Resolve(std::string(kGrpo) + "rollout: {workers: 1, max_workers: 2, max_staleness: 1}\n"),
            T::kZmq);
  // An engine on the GPU with a trainer on the CPU: the host path.
  EXPECT_EQ(Resolve(std::string(kGrpo) + "engine: {device: cuda}\n"), T::kShm);
  // Every actor resolves from the config alone: what the controller learns does not move it.
  EXPECT_EQ(Resolve(kGrpo, {.worker_on_other_host = true}), T::kShm);
}

TEST(ResolveWeightTransportTest, LanguageModelOnGpusStaysOnTheDevice) {
  EXPECT_EQ(Resolve(kGpus), T::kCudaIpc);
  EXPECT_EQ(Resolve(kGpus + "rollout: {external: true}\n"), T::kNccl);
  EXPECT_EQ(Resolve(kGpus + "launch: {backend: slurm}\n"), T::kNccl);
  EXPECT_EQ(Resolve(kGpus + "rollout: {workers: 1, max_workers: 2}\n"), T::kZmq);
}

TEST(ResolveWeightTransportTest, ControlPolicyIsShmUnlessAWorkerMayBeElsewhere) {
  EXPECT_EQ(Resolve(kPpo), T::kShm);
  EXPECT_EQ(Resolve(std::string(kPpo) + "rollout: {workers: 1, max_workers: 2}\n"), T::kZmq);
  EXPECT_EQ(Resolve(kPpo, {.worker_on_other_host = true}), T::kZmq);
}

TEST(ResolveWeightTransportTest, AChosenTransportIsKept) {
  EXPECT_EQ(Resolve(std::string(kGrpo) + "rollout: {workers: 1, max_workers: 2}\n"
                                         "weights: {transport: shm}\n"),
            T::kShm);
  EXPECT_EQ(Resolve(std::string(kPpo) + "weights: {transport: shm}\n",
                    {.worker_on_other_host = true}),
            T::kShm);
  EXPECT_EQ(Resolve(std::string(kPpo) + "weights: {transport: zmq}\n"), T::kZmq);
  EXPECT_EQ(Resolve(kGpus + "weights: {transport: gloo}\n"), T::kGloo);
}

// The controller follows the publisher's location (a fake trainer's too), not the config.
TEST(ResolveWeightTransportTest, GroupLocationsAreGlooAndNccl) {
  EXPECT_TRUE(IsGroupWeightLocation("gloo:weights-3"));
  EXPECT_TRUE(IsGroupWeightLocation("nccl:weights"));
  EXPECT_FALSE(IsGroupWeightLocation("shm-ring:/rlforge-1-trainer-0"));
  EXPECT_FALSE(IsGroupWeightLocation("shm-mapped:/rlforge-1-trainer-0"));
  EXPECT_FALSE(IsGroupWeightLocation("inline"));
  EXPECT_FALSE(IsGroupWeightLocation(""));
}

TEST(CheckWeightTransportTest, MappedWeightsNeedShmAsResolved) {
  EXPECT_EQ(Errors(std::string(kGrpo) + "weights: {apply: mapped}\n"), "");
  const std::string gloo = Errors(std::string(kGrpo) + "weights: {apply: mapped, transport: gloo}\n");
  EXPECT_NE(gloo.find("weights.transport: weights.apply mapped needs the engines on the trainer's "
                      "host, through shared memory (shm); this job's transport is gloo"),
            std::string::npos)
      << gloo;
  // auto that resolves elsewhere (engines that may join get inline weights) is refused too.
  const std::string elastic =
      Errors(std::string(kGrpo) + "rollout: {workers: 1, max_workers: 2}\nweights: {apply: mapped}\n");
  EXPECT_NE(elastic.find("this job's transport is zmq"), std::string::npos) << elastic;
}

TEST(CheckWeightTransportTest, DeviceTransportsNeedGpusOnBothEndsAndTheirHost) {
  // A CPU end is named with its key, on the transport's line.
  const std::string cpu_trainer =
      Errors(std::string(kGrpo) + "engine: {device: cuda}\nweights: {transport: cuda_ipc}\n");
  EXPECT_NE(cpu_trainer.find("t.yaml:3:11: weights.transport: cuda_ipc moves GPU memory from the "
                             "trainer's GPU to the engines'; trainer.device is cpu (set it to "
                             "cuda, or use shm, gloo or zmq)"),
            std::string::npos)
      << cpu_trainer;
  EXPECT_NE(Errors(std::string(kGrpo) + "trainer: {device: cuda}\nweights: {transport: nccl}\n")
                .find("weights.transport: nccl moves GPU memory from the trainer's GPU to the "
                      "engines'; engine.device is cpu"),
            std::string::npos);
  // cuda_ipc maps the trainer's memory: its host only.
  EXPECT_NE(Errors(kGpus + "rollout: {external: true}\nweights: {transport: cuda_ipc}\n")
                .find("weights.transport: cuda_ipc maps the trainer's GPU memory, which only "
                      "processes on its host can; rollout.external engines join from any host "
                      "(use nccl)"),
            std::string::npos);
  EXPECT_NE(Errors(kGpus + "launch: {backend: slurm}\nweights: {transport: cuda_ipc}\n")
                .find("launch.backend slurm runs engines on other nodes (use nccl)"),
            std::string::npos);
  EXPECT_NE(Errors(kGpus + "weights: {apply: mapped}\n")
                .find("weights.apply: mapped serves the engines from host shared memory; "
                      "cuda_ipc moves GPU memory into the engines' own parameters (use in_place "
                      "or staged)"),
            std::string::npos);
  // A build whose libtorch has no CUDA refuses them by name; one with CUDA takes them.
  const std::string named = Errors(kGpus + "weights: {transport: nccl, apply: staged}\n");
  if (RLFORGE_TORCH_CUDA) {
    EXPECT_EQ(named, "");
  } else {
    EXPECT_NE(named.find("t.yaml:4:11: weights.transport: nccl: this build has a CPU-only "
                         "libtorch (build with -DRLFORGE_CUDA=ON, or use shm, gloo or zmq)"),
              std::string::npos)
        << named;
  }
}

TEST(CheckWeightTransportTest, ControlPoliciesLoadOnTheHost) {
  const std::string nccl = config::FormatErrors(
      LoadJobText(std::string(kPpo) + "weights: {transport: nccl}\n", "t.yaml").errors);
  EXPECT_NE(nccl.find("weights.transport: nccl carries language models' weight streams to "
                      "engines; a control policy's rollout workers load through shm or zmq"),
            std::string::npos)
      << nccl;
}

}  // namespace
}  // namespace rlforge
