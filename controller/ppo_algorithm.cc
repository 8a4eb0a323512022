#include "controller/ppo_algorithm.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/clock.h"
#include "common/logging.h"
#include "common/role_names.h"
#include "common/status.h"
#include "launch/process_launcher.h"

namespace rlforge {

namespace {

bool SameSpec(const proto::PolicySpec& a, const proto::PolicySpec& b) {
  return a.obs_size() == b.obs_size() && a.discrete() == b.discrete() &&
         a.action_size() == b.action_size();
}

}  // namespace

std::vector<RoleRequirement> PpoAlgorithm::Roles() const {
  // Joins and leaves in the synchronous loop (the pipeline deals to a fixed fleet).
  const bool elastic = config_.rollout.max_staleness == 0;
  return {{kRolloutRole, static_cast<int>(config_.rollout.workers), config_.rollout.external,
           /*recoverable=*/true, elastic,
           static_cast<int>(WorkerCap(config_.rollout.workers, config_.rollout.max_workers))},
          {kTrainerRole, static_cast<int>(config_.trainer.ranks), false}};
}

// A pinned shm server spins this long for the next request: longer than a
// worker's policy forward (0.1-1 ms), so in steady state it never sleeps and
// answers within microseconds. Its core holds only servers, so the spin costs
// the worker nothing; two servers on one core yield to each other.
constexpr int kPinnedServerSpinUs = 2000;

SimPlacement PpoAlgorithm::PlanPlacement() const {
  const SimOptions& sim = config_.sim;
  SimPlacement none;
  if (sim.backend != SimBackend::kServer) {
    none.why = absl::StrCat("not pinned: the controller starts no servers (sim.backend ",
                            ChoiceName(sim.backend), ")");
    return none;
  }
  if (sim.cpu_affinity == CpuAffinity::kNone) {
    none.why = "not pinned (sim.cpu_affinity none)";
    return none;
  }
  if (config_.rollout.external) {
    none.why = "not pinned: rollout workers are external (rollout.external)";
    return none;
  }
  auto allowed = AllowedCpus();
  if (!allowed.ok()) {
    none.why = absl::StrCat("not pinned: ", allowed.status().message());
    return none;
  }
  return PlanSimPlacement(*allowed, static_cast<int>(Units()),
                          static_cast<int>(sim.servers_per_worker));
}

absl::StatusOr<std::vector<std::vector<std::pair<std::string, std::string>>>>
PpoAlgorithm::StartSimServers(JobContext& ctx) {
  const SimOptions& sim = config_.sim;
  std::vector<std::vector<std::pair<std::string, std::string>>> per_worker(workers_.size());
  if (sim.backend == SimBackend::kInprocess) return per_worker;
  placement_ = PlanPlacement();
  spdlog::info("sim placement: {}", placement_.why);
  int64_t spw = sim.servers_per_worker;
  int64_t envs_each = config_.env.num_envs / spw;
  // The configured slots only: the job config refuses joiners with servers (CheckElasticWorkers).
  for (size_t w = 0; w < Units(); ++w) {
    for (int64_t k = 0; k < spw; ++k) {
      int64_t idx = static_cast<int64_t>(w) * spw + k;
      std::string name = absl::StrCat("sim-", idx);
      if (sim.backend == SimBackend::kExternal) {
        per_worker[w].emplace_back(name, sim.addresses[idx]);
        continue;
      }
      // Same host by construction: shared memory for the built-in server, else
      // a Unix socket (no port to race for, and faster than TCP).
      bool shm = sim.transport == SimTransport::kShm ||
                 (sim.transport == SimTransport::kAuto && sim.command.empty());
      std::string endpoint =
          shm ? absl::StrCat("shm://rlforge-", getpid(), "-", name)
              : absl::StrCat("ipc:///tmp/rlforge-", getpid(), "-", name, ".sock");
      ProcessSpec spec;
      spec.name = name;
      spec.log_path = ctx.run_dir().LogPath(name);
      if (sim.command.empty()) {
        spec.argv = {SelfExecutable(),
                     "sim-server",
                     "--env",
                     config_.env.id,
                     "--num-envs",
                     std::to_string(envs_each),
                     "--max-episode-steps",
                     std::to_string(config_.env.max_episode_steps),
                     "--bind",
                     endpoint};
        if (placement_.pinned) {
          spec.argv.push_back("--spin-us");
          spec.argv.push_back(std::to_string(kPinnedServerSpinUs));
        }
      } else {
        for (const std::string& part : sim.command) {
          spec.argv.push_back(absl::StrReplaceAll(
              part, {{"{bind}", endpoint},
                     {"{num_envs}", std::to_string(envs_each)},
                     {"{env}", config_.env.id},
                     {"{max_episode_steps}", std::to_string(config_.env.max_episode_steps)}}));
        }
        // Resolve the program like a shell would, so `python3` works.
        if (spec.argv[0].find('/') == std::string::npos) {
          for (const char* dir : {"/usr/local/bin/", "/usr/bin/", "/bin/"}) {
            if (access((dir + spec.argv[0]).c_str(), X_OK) == 0) {
              spec.argv[0] = dir + spec.argv[0];
              break;
            }
          }
        }
      }
      if (std::getenv("OMP_WAIT_POLICY") == nullptr) spec.env["OMP_WAIT_POLICY"] = "PASSIVE";
      if (placement_.pinned) spec.cpus = placement_.server_cpus[idx];
      // A lost server is started again and takes its worker with it (PrepareReplacements).
      RETURN_IF_ERROR(
          Annotate(ctx.controller().LaunchService(spec, workers_[w], "sim"), "sim.command"));
      per_worker[w].emplace_back(name, endpoint);
    }
  }
  return per_worker;
}

absl::Status PpoAlgorithm::Broadcast(Controller& c, const proto::WeightsReady& w,
                                     std::vector<TensorFrame> inline_weights) {
  last_weights_ = w;
  last_frames_ = std::move(inline_weights);
  std::vector<uint64_t> ids;
  std::vector<size_t> slots;
  for (size_t k = 0; k < workers_.size(); ++k) {
    if (!Usable(c, k)) continue;  // a replacement loads the weights before its first rollout
    ASSIGN_OR_RETURN(uint64_t wid, SubmitLoad(c, k));
    ids.push_back(wid);
    slots.push_back(k);
  }
  ASSIGN_OR_RETURN(std::vector<WorkOutcome> loaded, c.AwaitEach(ids));
  for (size_t k = 0; k < loaded.size(); ++k) {
    const WorkOutcome& o = loaded[k];
    if (o.lost) continue;  // its replacement loads them (PrepareReplacements)
    if (o.result.weights().version() != w.version()) {
      return absl::InternalError(absl::StrCat(o.actor_id, " loaded version ",
                                              o.result.weights().version(), " instead of ",
                                              w.version()));
    }
    served_[slots[k]] = w.version();
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PpoAlgorithm::SubmitLoad(Controller& c, size_t w) {
  proto::WorkRequest load;
  *load.mutable_load_weights()->mutable_weights() = last_weights_;
  std::vector<TensorFrame> tensors;
  for (const auto& t : last_frames_) {
    tensors.push_back(TensorFrame::Copy(t.name(), t.dtype(), t.shape(), t.data()));
  }
  return c.Submit(workers_[w], std::move(load), std::move(tensors));
}

proto::WorkRequest PpoAlgorithm::SetupRequest(size_t w) const {
  proto::WorkRequest req;
  proto::RolloutSetup* s = req.mutable_rollout_setup();
  for (const auto& [name, endpoint] : servers_[w]) {
    s->add_sim_names(name);
    s->add_sim_endpoints(endpoint);
  }
  s->set_first_env_index(static_cast<int64_t>(w) * config_.env.num_envs);
  s->set_seed(config_.job.seed);
  if (placement_.pinned && w < placement_.worker_cpus.size()) {
    for (int cpu : placement_.worker_cpus[w]) s->add_cpus(cpu);
  }
  return req;
}

bool PpoAlgorithm::Usable(const Controller& c, size_t w) const {
  const ActorInfo* a = c.actors().Find(workers_[w]);
  return ready_[w] && a->incarnation == incarnation_[w] &&
         (a->state == ActorState::kReady || a->state == ActorState::kBusy);
}

absl::Status PpoAlgorithm::PrepareReplacements(Controller& c) {
  for (size_t w = 0; w < workers_.size(); ++w) {
    const ActorInfo* a = c.actors().Find(workers_[w]);
    const bool live = a->state == ActorState::kReady || a->state == ActorState::kBusy;
    // Ours left: the slot is open, or already taken by the next registration.
    if ((a->state == ActorState::kLeft && a->incarnation == incarnation_[w]) ||
        (a->after_leave && a->incarnation == incarnation_[w] + 1)) {
      left_[w] = true;
    }
    if (stepped_[w] && (!live || a->incarnation != incarnation_[w])) {
      // The lost (or departed) worker's envs were mid-episode: a new worker in the slot resets
      // them, so those episodes end unfinished and are dropped (never merged with later steps).
      stepped_[w] = false;
      (left_[w] ? episodes_left_ : episodes_cut_) += config_.env.num_envs;
      reward_scalers_[w].RestartEpisodes();
    }
    if (!live || a->incarnation == incarnation_[w]) continue;
    const bool joined = incarnation_[w] < 0 || left_[w];  // a join, not a fault
    incarnation_[w] = a->incarnation;
    left_[w] = false;
    ready_[w] = false;
    ASSIGN_OR_RETURN(uint64_t setup_id, c.Submit(workers_[w], SetupRequest(w)));
    ASSIGN_OR_RETURN(auto setup, c.AwaitNext({setup_id}));
    if (setup.second.lost) continue;  // its own replacement will be prepared
    const proto::PolicySpec& got = setup.second.result.policy_spec();
    if (!SameSpec(got, spec_) || got.num_envs() != spec_.num_envs()) {
      return absl::FailedPreconditionError(
          absl::StrCat(workers_[w], joined ? " (joined)" : " (a replacement)", " set up envs (",
                       got.env_id(), ", ", got.num_envs(), " envs) unlike the job's (",
                       spec_.env_id(), ", ", spec_.num_envs(), ")"));
    }
    ASSIGN_OR_RETURN(uint64_t load_id, SubmitLoad(c, w));
    ASSIGN_OR_RETURN(auto loaded, c.AwaitNext({load_id}));
    if (loaded.second.lost) continue;
    if (loaded.second.result.weights().version() != last_weights_.version()) {
      return absl::InternalError(absl::StrCat(workers_[w], " loaded version ",
                                              loaded.second.result.weights().version(),
                                              " instead of ", last_weights_.version()));
    }
    ready_[w] = true;
    served_[w] = last_weights_.version();
    spdlog::info("{} {}: envs set up, policy version {}", workers_[w],
                 joined ? "joined" : "replaced", last_weights_.version());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WorkOutcome>> PpoAlgorithm::CollectRollouts(
    Controller& c, int64_t T, std::vector<size_t>& producers,
    std::vector<std::vector<float>>& scaled) {
  const size_t U = Units(), S = workers_.size();
  std::vector<WorkOutcome> by_batch(U);
  producers.assign(U, 0);
  scaled.assign(U, {});
  std::deque<size_t> queue;
  for (size_t k = 0; k < U; ++k) queue.push_back(k);
  std::map<uint64_t, std::pair<size_t, size_t>> in_flight;  // work id -> (batch, worker)
  std::vector<bool> busy(S, false);
  // With joinable slots beyond the units, the slot each unit is offered first turns by U per
  // iteration, so joined slots are dealt units too; without, unit k is offered to slot k.
  const size_t offset = deal_offset_;
  deal_offset_ = (deal_offset_ + U) % S;
  while (!queue.empty() || !in_flight.empty()) {
    RETURN_IF_ERROR(PrepareReplacements(c));
    // Unit k goes to its slot when that can take it, else to any ready idle slot.
    for (auto it = queue.begin(); it != queue.end();) {
      const size_t own = (offset + *it) % S;
      int worker = Usable(c, own) && !busy[own] ? static_cast<int>(own) : -1;
      for (size_t w = 0; worker < 0 && w < S; ++w) {
        if (Usable(c, w) && !busy[w]) worker = static_cast<int>(w);
      }
      if (worker < 0) {
        ++it;
        continue;
      }
      proto::WorkRequest req;
      req.mutable_rollout()->set_num_steps(static_cast<int32_t>(T));
      ASSIGN_OR_RETURN(uint64_t id, c.Submit(workers_[worker], std::move(req)));
      in_flight[id] = {*it, static_cast<size_t>(worker)};
      busy[worker] = true;
      // Its envs run from now on: a loss or leave from here cuts their episodes. (Marked here,
      // not when the result comes: a leaver's result is read after its Leave was seen.)
      stepped_[worker] = true;
      it = queue.erase(it);
    }
    if (in_flight.empty()) {  // every worker lost: wait for a replacement
      RETURN_IF_ERROR(c.AwaitLive(kRolloutRole));
      RETURN_IF_ERROR(c.Pump(0));
      continue;
    }
    std::vector<uint64_t> ids;
    for (const auto& [id, where] : in_flight) ids.push_back(id);
    ASSIGN_OR_RETURN(auto ready, c.AwaitNext(ids));
    const auto [k, worker] = in_flight.at(ids[ready.first]);
    in_flight.erase(ids[ready.first]);
    busy[worker] = false;
    if (ready.second.lost) {
      if (ready.second.left) {  // handed back on purpose: not a fault
        spdlog::info("{} left during its rollout: batch {} dealt again", workers_[worker], k);
      } else {
        spdlog::warn("{} lost during its rollout: batch {} dealt again", workers_[worker], k);
        ++requeued_batches_;
      }
      queue.push_back(k);
      continue;
    }
    ASSIGN_OR_RETURN(scaled[k], ScaledRewards(ready.second, worker));
    by_batch[k] = std::move(ready.second);
    producers[k] = worker;
  }
  return by_batch;
}

absl::StatusOr<proto::PolicySpec> PpoAlgorithm::SetUpWorkers(Controller& c) {
  ready_.assign(workers_.size(), false);
  left_.assign(workers_.size(), false);
  incarnation_.assign(workers_.size(), -1);  // a vacant slot: whoever joins is set up
  served_.assign(workers_.size(), -1);
  stepped_.assign(workers_.size(), false);
  // A worker lost during its setup leaves its slot unready: PrepareReplacements sets its
  // replacement up. Only when every setup was lost does the job wait for one to set up now.
  std::vector<WorkOutcome> setups;
  while (setups.empty()) {
    RETURN_IF_ERROR(c.AwaitLive(kRolloutRole));
    std::vector<uint64_t> ids;
    std::vector<size_t> slots;
    for (size_t w = 0; w < workers_.size(); ++w) {
      const ActorInfo* a = c.actors().Find(workers_[w]);
      if (a->state != ActorState::kReady && a->state != ActorState::kBusy) continue;
      incarnation_[w] = a->incarnation;
      ASSIGN_OR_RETURN(uint64_t id, c.Submit(workers_[w], SetupRequest(w)));
      ids.push_back(id);
      slots.push_back(w);
    }
    ASSIGN_OR_RETURN(std::vector<WorkOutcome> outcomes, c.AwaitEach(ids));
    for (size_t k = 0; k < outcomes.size(); ++k) {
      if (outcomes[k].lost) continue;
      ready_[slots[k]] = true;
      setups.push_back(std::move(outcomes[k]));
    }
  }
  const proto::PolicySpec& spec = setups[0].result.policy_spec();
  for (const auto& o : setups) {
    if (!SameSpec(o.result.policy_spec(), spec) ||
        o.result.policy_spec().num_envs() != config_.env.num_envs) {
      return absl::FailedPreconditionError(
          absl::StrCat(o.actor_id, "'s envs (", o.result.policy_spec().env_id(), ", ",
                       o.result.policy_spec().num_envs(), " envs) differ from ", setups[0].actor_id,
                       "'s or from env.num_envs = ", config_.env.num_envs));
    }
  }
  return spec;
}

WeightTransport PpoAlgorithm::WeightsTransport(const Controller& c,
                                               const std::string& trainer) const {
  WeightPlaneFacts facts;
  const std::string& host = c.actors().Find(trainer)->host;
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (ready_[w] && c.actors().Find(workers_[w])->host != host) facts.worker_on_other_host = true;
  }
  return ResolveWeightTransport(config_, facts);
}

absl::Status PpoAlgorithm::Run(JobContext& ctx) {
  Controller& c = ctx.controller();
  workers_ = c.actors().IdsOfRole(kRolloutRole);  // elastic slots (vacant at first) after the rest
  ASSIGN_OR_RETURN(const std::string trainer, LeadTrainer(c));
  const int64_t N = config_.env.num_envs, T = config_.rollout.steps_per_iteration;
  const int64_t batch = static_cast<int64_t>(Units()) * N * T;
  const int64_t iterations = (config_.ppo.total_steps + batch - 1) / batch;

  ctx.SetTotalIterations(iterations);
  ASSIGN_OR_RETURN(servers_, StartSimServers(ctx));
  ASSIGN_OR_RETURN(spec_, SetUpWorkers(c));
  const proto::PolicySpec& spec = spec_;
  spdlog::info("env {}: obs {} -> {} {} ; {} iterations of {} steps", spec.env_id(),
               spec.obs_size(), spec.discrete() ? "Discrete" : "Box", spec.action_size(),
               iterations, batch);

  const WeightTransport transport = WeightsTransport(c, trainer);
  proto::WorkRequest init;
  *init.mutable_train_init()->mutable_spec() = spec;
  init.mutable_train_init()->set_weights_transport(WeightTransportName(transport));
  ASSIGN_OR_RETURN(uint64_t init_id, c.Submit(trainer, std::move(init)));
  ASSIGN_OR_RETURN(WorkOutcome v0, c.Await(init_id));
  RETURN_IF_ERROR(Broadcast(c, v0.result.weights(), std::move(v0.tensors)));
  spdlog::info("policy version 0 on every rollout worker (weights via {})",
               WeightTransportName(transport));

  for (size_t w = 0; w < workers_.size(); ++w) {
    reward_scalers_.emplace_back(N, config_.ppo.gamma, config_.ppo.clip_reward);
  }
  Progress progress;
  if (ctx.resume_point() != nullptr) {
    RETURN_IF_ERROR(Resume(c, trainer, *ctx.resume_point(), &progress));
    if (progress.solved && config_.ppo.stop_when_solved) return absl::OkStatus();
  }
  if (config_.rollout.max_staleness > 0) {
    return RunPipelined(ctx, trainer, iterations, &progress);
  }
  for (int64_t it = progress.iteration + 1; it <= iterations; ++it) {
    RETURN_IF_ERROR(RunIteration(ctx, trainer, it, iterations, &progress));
    if (progress.solved && config_.ppo.stop_when_solved) break;
  }
  return absl::OkStatus();
}

absl::Status PpoAlgorithm::RunIteration(JobContext& ctx, const std::string& trainer, int64_t it,
                                        int64_t iterations, Progress* progress) {
  Controller& c = ctx.controller();
  RETURN_IF_ERROR(
      c.AwaitLive(kRolloutRole, static_cast<int>(config_.rollout.min_workers), "rollout.min_workers"));
  const int64_t T = config_.rollout.steps_per_iteration;
  const Stopwatch t_iter;
  IterationRecord rec;
  rec.step = it;
  std::vector<size_t> producers;
  std::vector<std::vector<float>> scaled;  // by the slot that stepped them, as they came
  ASSIGN_OR_RETURN(auto rollouts, CollectRollouts(c, T, producers, scaled));
  rec.timings["rollout_s"] = t_iter.Seconds();
  double stepping_s = 0;
  for (const WorkOutcome& o : rollouts) stepping_s += o.seconds;

  const Stopwatch t_gae;
  TrainBatch b;
  for (size_t k = 0; k < rollouts.size(); ++k) {
    RETURN_IF_ERROR(
        AddRollout(rollouts[k], scaled[k], producers[k], progress->version, &b, progress));
  }
  rec.timings["gae_s"] = t_gae.Seconds();
  if (b.rows() == 0) return absl::InternalError("a rollout produced no valid samples");

  const Stopwatch t_train;
  ASSIGN_OR_RETURN(uint64_t sid, SubmitTrain(c, trainer, it, iterations, progress->version, b));
  ASSIGN_OR_RETURN(WorkOutcome trained, c.Await(sid));
  rec.timings["train_s"] = t_train.Seconds();

  const Stopwatch t_sync;
  RETURN_IF_ERROR(Broadcast(c, trained.result.weights(), std::move(trained.tensors)));
  progress->version = trained.result.weights().version();
  rec.timings["weight_sync_s"] = t_sync.Seconds();

  RecordIteration(trained, b, progress, &rec);
  const double iter_s = t_iter.Seconds();
  rec.timings["iteration_s"] = iter_s;
  rec.timings["steps_per_s"] =
      static_cast<double>(static_cast<int64_t>(Units()) * config_.env.num_envs * T) / iter_s;
  IdleShares(rec.timings["train_s"], stepping_s, iter_s, &rec);
  RETURN_IF_ERROR(ctx.EndIteration(rec));
  progress->iteration = it;
  return CheckpointAfterIteration(ctx, it, SaveProgress(*progress), [&](const std::string& dir) {
    return SaveActors(c, trainer, dir);
  });
}

nlohmann::json PpoAlgorithm::SaveProgress(const Progress& p) const {
  nlohmann::json scalers = nlohmann::json::array();
  for (const RewardScaler& r : reward_scalers_) {
    scalers.push_back({{"returns", r.returns()},
                       {"mean", r.stats().mean()},
                       {"var", r.stats().var()},
                       {"count", r.stats().count()}});
  }
  return {{"iteration", p.iteration},
          {"policy_version", p.version},
          {"env_steps", p.env_steps},
          {"episodes", p.episodes},
          {"solved", p.solved},
          {"recent_returns", recent_returns_},
          {"recent_lengths", recent_lengths_},
          {"reward_scalers", scalers}};
}

absl::Status PpoAlgorithm::RestoreProgress(const nlohmann::json& j, Progress* p) {
  try {
    p->iteration = j.at("iteration").get<int64_t>();
    p->version = j.at("policy_version").get<int64_t>();
    p->env_steps = j.at("env_steps").get<int64_t>();
    p->episodes = j.at("episodes").get<int64_t>();
    p->solved = j.at("solved").get<bool>();
    recent_returns_ = j.at("recent_returns").get<std::deque<double>>();
    recent_lengths_ = j.at("recent_lengths").get<std::deque<double>>();
    const nlohmann::json& scalers = j.at("reward_scalers");
    if (scalers.size() != reward_scalers_.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint has reward normalisers for ", scalers.size(),
                       " rollout workers, the job has ", reward_scalers_.size()));
    }
    for (size_t w = 0; w < scalers.size(); ++w) {
      RunningMeanStd stats;
      stats.Restore(scalers[w].at("mean").get<double>(), scalers[w].at("var").get<double>(),
                    scalers[w].at("count").get<double>());
      reward_scalers_[w].Restore(scalers[w].at("returns").get<std::vector<double>>(), stats);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("controller.json: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status PpoAlgorithm::SaveActors(Controller& c, const std::string& trainer,
                                      const std::string& state_dir) {
  std::vector<uint64_t> ids;
  std::vector<std::string> actors;  // the workers set up now (a vacant or left slot has none)
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (Usable(c, w)) actors.push_back(workers_[w]);
  }
  actors.push_back(trainer);
  for (const std::string& id : actors) {
    proto::WorkRequest req;
    req.mutable_save_state()->set_dir(state_dir + "/" + id);
    ASSIGN_OR_RETURN(uint64_t wid, c.Submit(id, std::move(req)));
    ids.push_back(wid);
  }
  ASSIGN_OR_RETURN(std::vector<WorkOutcome> saved, c.AwaitEach(ids));
  for (const WorkOutcome& o : saved) {
    if (!o.lost) continue;
    // What it had written is partial: without it, a resume sets the slot's envs up afresh.
    std::error_code ignored;
    std::filesystem::remove_all(state_dir + "/" + o.actor_id, ignored);
    spdlog::warn("{} lost while saving its state: the checkpoint resumes its slot with fresh envs",
                 o.actor_id);
  }
  return absl::OkStatus();
}

absl::Status PpoAlgorithm::Resume(Controller& c, const std::string& trainer,
                                  const JobCheckpoint& from, Progress* p) {
  RETURN_IF_ERROR(Annotate(RestoreProgress(from.controller, p), from.dir));
  proto::WorkRequest load;
  load.mutable_load_state()->set_dir(from.dir + "/" + trainer);
  ASSIGN_OR_RETURN(uint64_t tid, c.Submit(trainer, std::move(load)));
  ASSIGN_OR_RETURN(WorkOutcome restored, c.Await(tid));
  if (restored.result.weights().version() != p->version) {
    return absl::DataLossError(absl::StrCat(from.dir, ": the trainer restored policy version ",
                                            restored.result.weights().version(),
                                            ", controller.json says ", p->version));
  }
  RETURN_IF_ERROR(Broadcast(c, restored.result.weights(), std::move(restored.tensors)));
  std::vector<uint64_t> ids;
  for (size_t w = 0; w < workers_.size(); ++w) {
    // A slot that was vacant or left at the checkpoint keeps the envs it was just set up with.
    const std::string& id = workers_[w];
    if (!Usable(c, w) || !std::filesystem::exists(from.dir + "/" + id)) continue;
    proto::WorkRequest req;
    req.mutable_load_state()->set_dir(from.dir + "/" + id);
    ASSIGN_OR_RETURN(uint64_t wid, c.Submit(id, std::move(req)));
    ids.push_back(wid);
  }
  // A worker lost while loading is replaced with fresh envs (PrepareReplacements).
  RETURN_IF_ERROR(c.AwaitEach(ids).status());
  spdlog::info("resumed after iteration {} at policy version {} ({} env steps)", p->iteration,
               p->version, p->env_steps);
  return absl::OkStatus();
}

}  // namespace rlforge
