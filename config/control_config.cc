// Schemas of the control-policy sections (see control_options.h).
#include "config/control_config.h"

#include "absl/strings/str_cat.h"
#include "common/role_names.h"

namespace rlforge {

using config::CheckContext;
using config::Schema;
using config::SchemaBuilder;

namespace {

bool ParseTransport(const YAML::Node& n, WeightTransport* out, std::string* why) {
  std::string name;
  if (!config::MakeChoiceParser(WeightTransportNames())(n, &name, why)) return false;
  *out = *ParseWeightTransport(name);
  return true;
}

std::shared_ptr<const Schema> EnvSection() {
  SchemaBuilder<EnvOptions> b("The simulated environment (Gymnasium semantics).");
  b.String("id", &EnvOptions::id,
           "Env id: a built-in C++ env (CartPole-v1, Pendulum-v1, Acrobot-v1, PointMass-v0) for "
           "sim.backend inprocess/server, or the id an external or commanded server serves (a "
           "server of another env is refused at set-up, naming both).");
  b.Int("num_envs", &EnvOptions::num_envs, "Envs per rollout worker, stepped as one batch.")
      .Min(1)
      .Max(65536);
  b.Int("max_episode_steps", &EnvOptions::max_episode_steps,
        "Time limit (truncation); 0 keeps the env's own (500 for CartPole-v1).")
      .Min(0);
  return b.Build();
}

std::shared_ptr<const Schema> SimSection() {
  SchemaBuilder<SimOptions> b(
      "Where envs run: in the rollout worker, or behind sim_bridge servers.");
  b.Enum("backend", &SimOptions::backend,
         "inprocess: envs in the rollout worker; server: the controller starts sim_bridge "
         "servers (sim.command, default `rlforge sim-server`); external: connect to running "
         "servers at sim.addresses.");
  b.Int("servers_per_worker", &SimOptions::servers_per_worker,
        "backend server: servers per rollout worker; each holds env.num_envs / this many envs "
        "and they step in parallel.")
      .Min(1)
      .Max(1024);
  b.StringList("command", &SimOptions::command,
               "backend server: command that starts one server, with {bind}, {num_envs}, {env}, "
               "{max_episode_steps} filled in; empty: the built-in `rlforge sim-server`.");
  b.StringList("addresses", &SimOptions::addresses,
               "backend external: sim_bridge server addresses, dealt to rollout workers in order.");
  b.Double("step_timeout_s", &SimOptions::step_timeout_s,
           "A server that does not answer a step within this stops the run, named.")
      .Min(0, false);
  b.Double("start_timeout_s", &SimOptions::start_timeout_s,
           "How long a server may take to answer its first request.")
      .Min(0, false);
  b.Enum("transport", &SimOptions::transport,
         "backend server: how workers reach the servers the controller starts. shm: shared "
         "memory (same host, the built-in server; ~5x less overhead than ipc); ipc: ZeroMQ "
         "on a Unix socket (any sim_bridge server); auto: shm for the built-in server, ipc "
         "for a sim.command.");
  b.Enum("pipeline", &SimOptions::pipeline,
         "With several servers per worker. true: step them one by one, so the policy "
         "computes one server's actions while the others step (hides slow envs' step "
         "time). false: one forward over every env, then all servers step at once (better "
         "for envs cheaper than the policy). auto: the worker times its 2nd rollout "
         "pipelined and its 3rd as one batch and keeps the faster; both give the same "
         "samples.");
  b.Enum("cpu_affinity", &SimOptions::cpu_affinity,
         "backend server: auto pins each rollout worker to a core of its own and deals its "
         "servers over the other cores the controller may use (its cpuset), and lets shm "
         "servers spin 2 ms for the next request; this keeps spinning servers off the "
         "worker's core. Skipped when there are no more cores than workers, and for "
         "rollout.external workers. none: leave placement to the OS.");
  return b.Build();
}

std::shared_ptr<const Schema> RolloutSection() {
  SchemaBuilder<RolloutOptions> b("Rollout workers: step envs with the current policy.");
  b.Int("workers", &RolloutOptions::workers,
        "Rollout worker processes (language-model jobs: engines, at most 64; each iteration's "
        "prompts are dealt to them as whole groups by outstanding tokens, with the same "
        "samples for a seed whatever their number).")
      .Min(1)
      .Max(1024);
  b.Bool("external", &RolloutOptions::external,
         "Do not start the workers; wait for them to join with `rlforge actor --role rollout`.");
  b.Int("max_workers", &RolloutOptions::max_workers,
        "Engines (language-model jobs) or simulator workers (ppo with rollout.max_staleness 0, "
        "sim.backend inprocess) in all, counting those that join the running job "
        "by hand (`rlforge actor --role rollout --connect ADDR`, no --rank); 0: "
        "rollout.workers, so none can join (docs/fault_tolerance.md, elastic workers).")
      .Min(0)
      .Max(1024);
  b.Int("min_workers", &RolloutOptions::min_workers,
        "Language-model jobs and synchronous ppo jobs: the fewest live rollout workers an "
        "iteration's rollouts start with; "
        "below it the job waits (status waiting) up to controller.register_timeout_s plus the "
        "largest restart backoff, then fails.")
      .Min(1)
      .Max(1024);
  b.Int("steps_per_iteration", &RolloutOptions::steps_per_iteration,
        "Steps per env per iteration; the batch is workers x env.num_envs x this.")
      .Min(1);
  b.Int("max_staleness", &RolloutOptions::max_staleness,
        "How many policy versions a trained sample may lag the version being trained "
        "(language-model RL: grpo, drgrpo, rloo, lm_ppo; and control ppo). 0: synchronous "
        "(roll out, train, load, in turn). k >= 1: the rollout workers produce the next "
        "batches while the trainer trains; a batch is dispatched only once the workers serve "
        "the weights of step b-1-k, and a group (an LM job) or a worker's batch (ppo) is "
        "admitted only if its version is within k (docs/async_rl.md).")
      .Min(0)
      .Max(64);
  b.Bool("partial", &RolloutOptions::partial,
         "Partial rollouts (needs max_staleness >= 1): an engine takes new weights at once "
         "instead of letting its started groups finish on the old ones; they continue under the "
         "new weights with their KV recomputed, each token keeping the version and behaviour "
         "logprob that produced it (docs/async_rl.md).");
  return b.Build();
}

std::shared_ptr<const Schema> PolicySection() {
  SchemaBuilder<PolicyOptions> b(
      "MLP actor-critic: separate actor and critic networks; categorical head for Discrete "
      "actions, diagonal Gaussian (state-independent log std) for Box actions.");
  b.IntList("hidden_sizes", &PolicyOptions::hidden_sizes, "Hidden layer widths of both networks.");
  b.Enum("activation", &PolicyOptions::activation, "Hidden activation.");
  b.Double("log_std_init", &PolicyOptions::log_std_init, "Initial log std of the Gaussian head.");
  b.Bool("ortho_init", &PolicyOptions::ortho_init,
         "Orthogonal init: gain sqrt(2) hidden, 0.01 policy head, 1 value head; zero biases.");
  b.Check([](const PolicyOptions& p, CheckContext& ctx) {
    if (p.hidden_sizes.empty()) ctx.Error("hidden_sizes", "needs at least one layer");
    for (int64_t h : p.hidden_sizes) {
      if (h < 1 || h > 65536) {
        ctx.Error("hidden_sizes", absl::StrCat("layer width ", h, " is outside [1, 65536]"));
      }
    }
  });
  return b.Build();
}

std::shared_ptr<const Schema> PpoSection() {
  SchemaBuilder<PpoOptions> b("PPO (clipped surrogate) with GAE(lambda).");
  b.Int("total_steps", &PpoOptions::total_steps,
        "Env steps to train for; iterations = ceil(total_steps / batch).")
      .Min(1);
  b.Double("gamma", &PpoOptions::gamma, "Discount factor.").Min(0).Max(1);
  b.Double("gae_lambda", &PpoOptions::gae_lambda, "GAE lambda.").Min(0).Max(1);
  b.Double("clip_coef", &PpoOptions::clip_coef, "Surrogate clipping epsilon.").Min(0, false);
  b.Bool("anneal_clip", &PpoOptions::anneal_clip, "Anneal clip_coef linearly to 0.");
  b.Double("clip_value", &PpoOptions::clip_value,
           "Value clipping range around the old values; 0 disables value clipping.")
      .Min(0);
  b.Double("vf_coef", &PpoOptions::vf_coef, "Value loss coefficient.").Min(0);
  b.Double("ent_coef", &PpoOptions::ent_coef, "Entropy bonus coefficient.").Min(0);
  b.Int("epochs", &PpoOptions::epochs, "Passes over each batch.").Min(1);
  b.Int("minibatches", &PpoOptions::minibatches, "Minibatches per pass.").Min(1);
  b.Bool("normalize_advantages", &PpoOptions::normalize_advantages,
         "Normalise advantages per minibatch.");
  b.Bool("normalize_obs", &PpoOptions::normalize_obs,
         "Running mean/std observation normalisation (statistics travel with the weights).");
  b.Bool("normalize_reward", &PpoOptions::normalize_reward,
         "Scale rewards by the running std of the discounted return.");
  b.Double("clip_obs", &PpoOptions::clip_obs, "Clip normalised observations to +-this.")
      .Min(0, false);
  b.Double("clip_reward", &PpoOptions::clip_reward, "Clip scaled rewards to +-this.").Min(0, false);
  b.Double("target_kl", &PpoOptions::target_kl,
           "Stop an update's epochs early once approx KL exceeds this; 0 disables.")
      .Min(0);
  b.Bool("fused_update", &PpoOptions::fused_update,
         "Compute the loss and its gradient without autograd (hand-written backward over BLAS; "
         "~5x faster for small MLPs, checked against autograd in tests). false: libtorch "
         "autograd.");
  b.Int("return_window", &PpoOptions::return_window,
        "episodic_return in metrics.jsonl is the mean over this many latest episodes.")
      .Min(1);
  b.Bool("stop_when_solved", &PpoOptions::stop_when_solved,
         "End the run once episodic_return reaches solved_return.");
  b.Double("solved_return", &PpoOptions::solved_return,
           "The return at which the task counts as solved (reported as solved_at_step).");
  return b.Build();
}

std::shared_ptr<const Schema> WeightsSection() {
  SchemaBuilder<WeightsOptions> b("How new policy weights reach rollout workers.");
  b.Typed<WeightTransport>(
      "transport", &WeightsOptions::transport,
      "shm: POSIX shared memory (same host); gloo: a broadcast group of trainer rank 0 and "
      "the engines (language models; any host); zmq: in ZeroMQ frames through the "
      "controller (any host; holds a whole copy there); cuda_ipc: the engines copy each "
      "version device-to-device from the trainer's GPU memory (language models; "
      "trainer.device and engine.device on cuda, one host, a CUDA build); nccl: bucket "
      "broadcasts from the trainer's GPU to the engines' GPUs (language models; both on "
      "cuda, any host, a CUDA build); auto: shm, or gloo for a language model job with "
      "external rollout workers, or zmq for one under launch.backend slurm or whose engines "
      "may join (rollout.max_workers above rollout.workers) — with trainer and engines on "
      "cuda, cuda_ipc instead of shm and nccl instead of gloo and of Slurm's zmq; a "
      "control-policy job picks zmq when a worker reports another host or may join "
      "(weights/weight_transport.h resolves it).",
      config::ChoiceType(WeightTransportNames()), ParseTransport,
      [](const WeightTransport& t) { return YAML::Node(WeightTransportName(t)); });
  b.Double("bucket_mb", &WeightsOptions::bucket_mb,
           "The weight stream's bucket size in MiB (two buffers of it per "
           "side; at least 1/64, i.e. 16 KiB).")
      .Min(1.0 / 64)
      .Max(16384);
  b.Enum("dtype", &WeightsOptions::dtype,
         "Language models: the dtype weights travel in (bfloat16 halves the bytes; the engine "
         "widens them back to its fp32 parameters).");
  b.Enum("apply", &WeightsOptions::apply,
         "Language models: in_place writes each bucket into the engine's parameters as it "
         "arrives (memory: model + 2 buckets; a failed load leaves it torn, serving nothing); "
         "staged loads a whole version beside the model first (memory: 2 models; a failed "
         "load leaves it serving the previous version; with cuda_ipc or nccl the staged copy "
         "is on the engine's GPU); mapped (weights.transport shm, "
         "weights.dtype float32) checks each version in a shared segment of two versions and "
         "serves straight from it, with no copy (memory: that segment, shared by every engine "
         "on the host, and no private model; a failed load leaves it serving the previous "
         "version).");
  b.Double("timeout_s", &WeightsOptions::timeout_s,
           "The longest wait for one bucket, publisher or engine (rollout worker).")
      .Min(0.1);
  return b.Build();
}

// Control policies go through the bucket stream in one piece, on the host: shm (the segment of
// two versions, weights/shm_mapped.h) or zmq (inline); their workers form no broadcast group.
void CheckControlWeights(const WeightsOptions& w, CheckContext& ctx) {
  const WeightsOptions d;
  if (w.transport == WeightTransport::kGloo || w.transport == WeightTransport::kCudaIpc ||
      w.transport == WeightTransport::kNccl) {
    ctx.Error("weights.transport",
              WeightTransportName(w.transport) +
                  " carries language models' weight streams to engines; a control policy's "
                  "rollout workers load through shm or zmq");
  }
  const char* lm_only = "is for language-model jobs (a control policy moves as fp32, copied)";
  if (w.dtype != d.dtype) ctx.Error("weights.dtype", lm_only);
  if (w.apply != d.apply) ctx.Error("weights.apply", lm_only);
}

// Jobs without rollout workers publish no weights: every weights.* key would do nothing.
void CheckNoWeights(const WeightsOptions& w, CheckContext& ctx) {
  const WeightsOptions d;
  const char* unused = "this job has no rollout workers to publish weights to";
  if (w.transport != d.transport) ctx.Error("weights.transport", unused);
  if (w.bucket_mb != d.bucket_mb) ctx.Error("weights.bucket_mb", unused);
  if (w.dtype != d.dtype) ctx.Error("weights.dtype", unused);
  if (w.apply != d.apply) ctx.Error("weights.apply", unused);
  if (w.timeout_s != d.timeout_s) ctx.Error("weights.timeout_s", unused);
}

// rollout.max_staleness and rollout.partial against what the algorithm's loop supports.
void CheckAsyncRollout(const JobConfig& c, CheckContext& ctx) {
  const AlgorithmSpec& a = *c.job.algorithm;
  if (c.rollout.max_staleness != 0 && !a.async_rollout) {
    ctx.Error("rollout.max_staleness",
              absl::StrCat("asynchronous rollout is built for RL with rollout workers (grpo, "
                           "drgrpo, rloo, lm_ppo, ppo); job.algorithm ",
                           a.name, " runs synchronously (set 0)"));
  }
  if (c.rollout.partial && !(a.lm_engines && a.async_rollout)) {
    ctx.Error("rollout.partial",
              absl::StrCat("partial rollouts are for the language-model engines of grpo, "
                           "drgrpo, rloo and lm_ppo; job.algorithm ",
                           a.name, " has none (set false)"));
  } else if (c.rollout.partial && c.rollout.max_staleness < 1) {
    ctx.Error("rollout.partial",
              "partial rollouts need asynchronous rollout (rollout.max_staleness >= 1; it is "
              "0): a synchronous engine never holds a group across a weight load");
  }
}

// A control-policy job's sim servers and batch.
void CheckSimulators(const JobConfig& c, CheckContext& ctx) {
  if (c.sim.backend == SimBackend::kServer && c.env.num_envs % c.sim.servers_per_worker != 0) {
    ctx.Error("sim.servers_per_worker",
              absl::StrCat("env.num_envs (", c.env.num_envs, ") must divide evenly among ",
                           c.sim.servers_per_worker, " servers per worker"));
  }
  if (c.sim.backend == SimBackend::kExternal) {
    int64_t need = c.rollout.workers * c.sim.servers_per_worker;
    if (static_cast<int64_t>(c.sim.addresses.size()) != need) {
      ctx.Error("sim.addresses",
                absl::StrCat("backend external needs rollout.workers x sim.servers_per_worker = ",
                             need, " addresses, got ", c.sim.addresses.size()));
    }
  } else if (!c.sim.addresses.empty()) {
    ctx.Error("sim.addresses", "only used with sim.backend: external");
  }
  if (c.sim.backend != SimBackend::kServer && !c.sim.command.empty()) {
    ctx.Error("sim.command", "only used with sim.backend: server");
  }
  if (c.sim.transport == SimTransport::kShm && !c.sim.command.empty()) {
    ctx.Error("sim.transport",
              "shm is spoken by the built-in `rlforge sim-server` only; a sim.command server "
              "(e.g. the Python package) speaks ZeroMQ: use ipc or auto");
  }
  int64_t batch = c.rollout.workers * c.env.num_envs * c.rollout.steps_per_iteration;
  if (c.ppo.minibatches > batch) {
    ctx.Error("ppo.minibatches", absl::StrCat("more minibatches (", c.ppo.minibatches,
                                              ") than samples per iteration (", batch, ")"));
  }
}

}  // namespace

void AddControlSections(SchemaBuilder<JobConfig>& b) {
  b.Section("env", &JobConfig::env, EnvSection());
  b.Section("sim", &JobConfig::sim, SimSection());
  b.Section("rollout", &JobConfig::rollout, RolloutSection());
  b.Section("policy", &JobConfig::policy, PolicySection());
  b.Section("ppo", &JobConfig::ppo, PpoSection());
  b.Section("weights", &JobConfig::weights, WeightsSection());
  b.Check([](const JobConfig& c, CheckContext& ctx) {
    if (c.job.algorithm == nullptr) return;
    CheckAsyncRollout(c, ctx);
    if (!c.job.algorithm->Starts(kRolloutRole)) {
      CheckNoWeights(c.weights, ctx);
    } else if (c.job.algorithm->Reads("sim")) {
      CheckControlWeights(c.weights, ctx);
      CheckSimulators(c, ctx);
    }
  });
}

}  // namespace rlforge
