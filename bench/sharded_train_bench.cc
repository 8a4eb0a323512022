// The sharded trainer's step (ShardedModel + FlatAdamW over a gloo Communicator) on N local
// processes, timed, with bytes on the wire and peak memory per rank. bench/sharded_train_bench.py
// runs this beside PyTorch FSDP2 on the same checkpoint and batch and prints the comparison:
//
//     python3 bench/sharded_train_bench.py --ranks 1 2 --threads 1
//     build/bench/sharded_train_bench --model /tmp/rlforge-bench-50m --ranks 2   # alone
//
// parent: StoreServer -> exec itself once per rank (--rank r) -> waits (deadline) -> merges
//   the ranks' result files -> one JSON line on stdout
// rank r: base RSS -> ConnectGroup -> LoadHfModel -> ShardedModel::Create (frees the rest)
//   -> its B/N sequences -> warm-up + timed steps, each after a barrier -> result file
//
// The batch, the split over ranks and the loss are the script's (its docstring is the
// contract). Ranks are processes started with exec, not fork: libtorch's thread pools do not
// survive a fork. Beyond the script's fields the JSON holds, per rank and timed step, the
// phases of the step with the CPU time and peak RSS of each, and the time the training
// thread spent inside the Communicator (issuing collectives and blocked on them); per rank
// the peak RSS of loading apart from that of training.
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "dist/communicator.h"
#include "launch/process_launcher.h"
#include "models/compute_threads.h"
#include "models/hf_checkpoint.h"
#include "trainer/flat_adamw.h"
#include "trainer/sharded_model.h"

namespace rlforge {
namespace {

using nlohmann::json;

struct Args {
  std::string model;
  int ranks = 1, threads = 1;
  int64_t batch = 8, seq = 128, seed = 0;
  int warmup = 2, steps = 5;
  double deadline_s = 600;
  // Set by the parent for a rank process.
  int rank = -1;
  std::string store, result;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args a;
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0 || i + 1 >= argc) {
      return absl::InvalidArgumentError(absl::StrCat("expected --flag value, got '", key, "'"));
    }
    kv[key.substr(2)] = argv[i + 1];
  }
  auto num = [&](const std::string& key, auto* out) -> absl::Status {
    auto it = kv.find(key);
    if (it == kv.end()) return absl::OkStatus();
    bool ok;
    if constexpr (std::is_same_v<std::remove_pointer_t<decltype(out)>, double>) {
      ok = absl::SimpleAtod(it->second, out);
    } else {
      ok = absl::SimpleAtoi(it->second, out);
    }
    kv.erase(it);
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", key, ": not a number"));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(num("ranks", &a.ranks));
  RETURN_IF_ERROR(num("threads", &a.threads));
  RETURN_IF_ERROR(num("batch", &a.batch));
  RETURN_IF_ERROR(num("seq", &a.seq));
  RETURN_IF_ERROR(num("seed", &a.seed));
  RETURN_IF_ERROR(num("warmup", &a.warmup));
  RETURN_IF_ERROR(num("steps", &a.steps));
  RETURN_IF_ERROR(num("deadline-s", &a.deadline_s));
  RETURN_IF_ERROR(num("rank", &a.rank));
  for (auto [key, field] : {std::pair<const char*, std::string*>{"model", &a.model},
                            {"store", &a.store},
                            {"result", &a.result}}) {
    if (auto it = kv.find(key); it != kv.end()) {
      *field = it->second;
      kv.erase(it);
    }
  }
  if (!kv.empty()) return absl::InvalidArgumentError("unknown flag --" + kv.begin()->first);
  if (a.model.empty()) return absl::InvalidArgumentError("--model DIR is required");
  if (a.ranks < 1 || a.threads < 1 || a.seq < 2 || a.steps < 1 || a.warmup < 0 || a.seed < 0) {
    return absl::InvalidArgumentError(
        "--ranks, --threads, --steps must be >= 1, --seq >= 2, --warmup and --seed >= 0");
  }
  if (a.batch < a.ranks || a.batch % a.ranks != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch ", a.batch, " must be a positive multiple of --ranks ", a.ranks));
  }
  return a;
}

// A field of /proc/self/status in bytes (VmRSS, VmHWM); -1 if absent.
int64_t ProcStatusBytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      long long kb = -1;  // "VmRSS:     12345 kB"
      if (std::sscanf(line.c_str() + key.size() + 1, "%lld", &kb) != 1) return -1;
      return static_cast<int64_t>(kb) * 1024;
    }
  }
  return -1;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The peak RSS of successive phases: VmHWM since the last call, then resets it (writing "5"
// to clear_refs, Linux >= 4.0; a few microseconds). max() is the peak over all calls.
class PhasePeaks {
 public:
  int64_t Take() {
    const int64_t hwm = ProcStatusBytes("VmHWM");
    std::ofstream("/proc/self/clear_refs") << "5";
    max_ = std::max(max_, hwm);
    return hwm;
  }
  int64_t max() const { return max_; }

 private:
  int64_t max_ = 0;
};

// Rows [r * B/N, (r + 1) * B/N) of the script's batch:
//   token[b][t] = ((1103515245 * (b * S + t + 1 + 7919 * seed) + 12345) mod 2^31) mod vocab.
// 2^31 divides 2^64, so unsigned 64-bit wrap-around gives the exact residue.
torch::Tensor RankBatch(const Args& a, int64_t vocab) {
  const int64_t rows = a.batch / a.ranks, first = a.rank * rows;
  torch::Tensor out = torch::empty({rows, a.seq}, torch::kInt64);
  auto acc = out.accessor<int64_t, 2>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t t = 0; t < a.seq; ++t) {
      const uint64_t x = static_cast<uint64_t>((first + i) * a.seq + t + 1 + 7919 * a.seed);
      const uint64_t h = (uint64_t{1103515245} * x + 12345) & 0x7fffffffu;
      acc[i][t] = static_cast<int64_t>(h % static_cast<uint64_t>(vocab));
    }
  }
  return out;
}

// Forwards to a Communicator and adds the time the calling thread spends in it: issuing a
// collective (copies, posting sends) and blocked in Wait (including a reduce-scatter's adds).
class TimedCommunicator final : public dist::Communicator {
 public:
  explicit TimedCommunicator(dist::Communicator* inner) : inner_(inner) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  torch::Device device() const override { return inner_->device(); }
  std::unique_ptr<dist::Pending> AllGather(const torch::Tensor& in,
                                           const torch::Tensor& out) override {
    return Timed([&] { return inner_->AllGather(in, out); });
  }
  std::unique_ptr<dist::Pending> ReduceScatter(const torch::Tensor& in,
                                               const torch::Tensor& out) override {
    return Timed([&] { return inner_->ReduceScatter(in, out); });
  }
  std::unique_ptr<dist::Pending> AllReduceSum(const torch::Tensor& t) override {
    return Timed([&] { return inner_->AllReduceSum(t); });
  }
  std::unique_ptr<dist::Pending> Broadcast(const torch::Tensor& t, int root) override {
    return Timed([&] { return inner_->Broadcast(t, root); });
  }
  double seconds() const { return seconds_; }

 private:
  class TimedPending final : public dist::Pending {
   public:
    TimedPending(std::unique_ptr<dist::Pending> inner, double* seconds)
        : inner_(std::move(inner)), seconds_(seconds) {}
    ~TimedPending() override { (void)Wait(); }
    absl::Status Wait() override {
      const Stopwatch timer;
      absl::Status s = inner_->Wait();
      *seconds_ += timer.Seconds();
      return s;
    }

   private:
    std::unique_ptr<dist::Pending> inner_;
    double* seconds_;
  };
  template <typename Fn>
  std::unique_ptr<dist::Pending> Timed(Fn&& issue) {
    const Stopwatch timer;
    auto p = issue();
    seconds_ += timer.Seconds();
    stats_ = inner_->stats();
    return std::make_unique<TimedPending>(std::move(p), &seconds_);
  }

  dist::Communicator* inner_;
  double seconds_ = 0;
};

absl::Status Barrier(dist::Communicator& comm) {
  torch::Tensor t = torch::zeros({1});
  return comm.AllReduceSum(t)->Wait();
}

absl::StatusOr<json> RunRank(const Args& a) {
  rlforge::SetComputeThreads(a.threads);  // torch's and OpenBLAS's pools alike
  at::set_num_interop_threads(1);
  const int64_t base_rss = ProcStatusBytes("VmRSS");  // before the group and the model

  dist::GroupOptions go;
  go.store_address = a.store;
  go.name = "sharded_train_bench";
  go.rank = a.rank;
  go.size = a.ranks;
  go.timeout_s = 300;
  ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> group, dist::ConnectGroup(go));
  TimedCommunicator comm(group.get());

  ASSIGN_OR_RETURN(models::Transformer full, models::LoadHfModel(a.model));
  const int64_t vocab = full->config().vocab_size;
  ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> model,
                   ShardedModel::Create(std::move(full), &comm, {}));
  FlatAdamW::Options ao;
  ao.lr = 1e-5;
  ao.beta1 = 0.9;
  ao.beta2 = 0.999;
  ao.eps = 1e-8;
  ao.weight_decay = 0;
  FlatAdamW adam(model->shard_data(), model->shard_grad(), ao);
  PhasePeaks load_peak, train_peak;
  load_peak.Take();

  const torch::Tensor tokens = RankBatch(a, vocab);
  const int64_t rows = tokens.size(0);
  const torch::Tensor pos = torch::arange(a.seq, torch::kInt64).expand({rows, a.seq}).contiguous();
  const torch::Tensor seg = torch::zeros({rows, a.seq}, torch::kInt64);
  const double global_tokens = static_cast<double>(a.batch * (a.seq - 1));
  const auto ce = torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum);

  json steps = json::array();
  std::vector<double> losses;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    RETURN_IF_ERROR(Barrier(comm));
    const int64_t bytes0 = comm.stats().total();
    json phases = json::object();
    const Stopwatch timer;
    double t0 = 0, comm0 = comm.seconds(), cpu0 = ProcessCpuSeconds();
    // Per phase: seconds, of them inside the Communicator, CPU seconds of the whole process
    // (all threads: below the seconds when other processes take the cores), peak RSS.
    auto end_phase = [&](const char* name) {
      const double t = timer.Seconds(), c = comm.seconds(), cpu = ProcessCpuSeconds();
      phases[name] = {{"s", t - t0},
                      {"comm_s", c - comm0},
                      {"cpu_s", cpu - cpu0},
                      {"peak_rss_bytes", train_peak.Take()}};
      t0 = t;
      comm0 = c;
      cpu0 = cpu;
    };
    torch::Tensor loss_value;
    RETURN_IF_ERROR(CallCatching([&]() -> absl::Status {
      model->ZeroGrad();
      model->BeginForward();
      torch::Tensor logits = model->module()->Logits(model->module()->Hidden(tokens, pos, seg));
      torch::Tensor loss =
          torch::nn::functional::cross_entropy(logits.narrow(1, 0, a.seq - 1).reshape({-1, vocab}),
                                               tokens.narrow(1, 1, a.seq - 1).reshape({-1}), ce) /
          global_tokens;
      end_phase("forward");
      loss.backward();
      end_phase("backward");
      RETURN_IF_ERROR(model->FinishBackward());
      end_phase("finish_backward");
      adam.ClipGradNorm(1.0, &comm);
      end_phase("clip");
      adam.Step();
      loss_value = loss.detach().reshape({1});
      return absl::OkStatus();
    }));
    end_phase("adamw");
    steps.push_back({{"step_s", timer.Seconds()},
                     {"bytes", comm.stats().total() - bytes0},
                     {"phases", phases}});
    RETURN_IF_ERROR(comm.AllReduceSum(loss_value)->Wait());  // outside the step, as the script
    losses.push_back(loss_value.item<double>());
  }
  train_peak.Take();
  return json{{"rank", a.rank},
              {"steps", steps},
              {"loss", losses},
              {"base_rss_bytes", base_rss},
              {"load_peak_rss_bytes", load_peak.max()},
              {"train_peak_rss_bytes", train_peak.max()},
              {"peak_rss_bytes", std::max(load_peak.max(), train_peak.max())}};
}

int RankMain(const Args& a) {
  absl::StatusOr<json> r = CallCatching([&] { return RunRank(a); });
  if (!r.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", a.rank, Msg(r.status()).c_str());
    return 1;
  }
  const std::string tmp = a.result + ".tmp";
  {
    std::ofstream f(tmp);
    f << r->dump() << "\n";
    if (!f) {
      std::fprintf(stderr, "rank %d: cannot write %s\n", a.rank, tmp.c_str());
      return 1;
    }
  }
  if (std::rename(tmp.c_str(), a.result.c_str()) != 0) {
    std::fprintf(stderr, "rank %d: cannot rename %s\n", a.rank, tmp.c_str());
    return 1;
  }
  return 0;
}

// Starts the ranks, waits for all of them (or the deadline), returns their results.
absl::StatusOr<std::vector<json>> RunRanks(const Args& a, int argc, char** argv,
                                           const std::string& dir) {
  std::unique_ptr<dist::StoreServer> store;
  if (a.ranks > 1) {
    ASSIGN_OR_RETURN(store, dist::StoreServer::Start("127.0.0.1"));
  }
  LocalProcessLauncher launcher;  // kills whatever still runs when it goes out of scope
  std::map<int, int> rank_of_pid;
  for (int r = 0; r < a.ranks; ++r) {
    ProcessSpec spec;
    spec.name = absl::StrCat("rank ", r);
    spec.argv = {SelfExecutable()};
    for (int i = 1; i < argc; ++i) spec.argv.push_back(argv[i]);
    spec.argv.insert(spec.argv.end(),
                     {"--rank", std::to_string(r), "--store", store ? store->address() : "",
                      "--result", absl::StrCat(dir, "/rank", r, ".json")});
    spec.log_path = absl::StrCat(dir, "/rank", r, ".log");
    ASSIGN_OR_RETURN(int pid, launcher.Start(spec));
    rank_of_pid[pid] = r;
  }
  const Stopwatch timer;
  size_t finished = 0;
  while (finished < rank_of_pid.size()) {
    for (const ProcessExit& e : launcher.Reap()) {
      ++finished;
      if (e.signaled || e.code != 0) {
        const int r = rank_of_pid[e.pid];
        return absl::InternalError(
            absl::StrCat(e.name, " ", e.Describe(), "; the last lines of its log (", dir, "/rank",
                         r, ".log):\n", TailOfFile(absl::StrCat(dir, "/rank", r, ".log"), 20)));
      }
    }
    if (timer.Seconds() > a.deadline_s) {
      std::string running;
      for (int pid : launcher.Running()) absl::StrAppend(&running, " ", rank_of_pid[pid]);
      return absl::DeadlineExceededError(absl::StrCat(
          "ranks", running, " still running after --deadline-s ", a.deadline_s, " s; killed"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<json> out;
  for (int r = 0; r < a.ranks; ++r) {
    std::ifstream f(absl::StrCat(dir, "/rank", r, ".json"));
    json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::InternalError(absl::StrCat("rank ", r, " exited 0 but left no result in ", dir));
    }
    out.push_back(std::move(j));
  }
  return out;
}

// The script's line: step_s is per timed step the slowest rank; bytes_per_step the most any
// rank moved in a timed step. The per-rank details follow for the analysis.
json Merge(const Args& a, const std::vector<json>& ranks) {
  json step_s = json::array(), per_rank = json::array(), peak = json::array(), base = json::array();
  int64_t bytes = 0;
  for (int i = a.warmup; i < a.warmup + a.steps; ++i) {
    double slowest = 0;
    for (const json& r : ranks) {
      slowest = std::max(slowest, r["steps"][i]["step_s"].get<double>());
      bytes = std::max(bytes, r["steps"][i]["bytes"].get<int64_t>());
    }
    step_s.push_back(slowest);
  }
  for (const json& r : ranks) {
    peak.push_back(r["peak_rss_bytes"]);
    base.push_back(r["base_rss_bytes"]);
    json timed = json::array();
    for (int i = a.warmup; i < a.warmup + a.steps; ++i) timed.push_back(r["steps"][i]);
    per_rank.push_back({{"timed_steps", timed},
                        {"load_peak_rss_bytes", r["load_peak_rss_bytes"]},
                        {"train_peak_rss_bytes", r["train_peak_rss_bytes"]}});
  }
  return json{{"ranks", a.ranks},       {"step_s", step_s},       {"bytes_per_step", bytes},
              {"peak_rss_bytes", peak}, {"base_rss_bytes", base}, {"loss", ranks[0]["loss"]},
              {"per_rank", per_rank}};
}

int ParentMain(const Args& a, int argc, char** argv) {
  char dir_template[] = "/tmp/sharded_train_bench.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = dir_template;
  absl::StatusOr<std::vector<json>> ranks = RunRanks(a, argc, argv, dir);
  if (!ranks.ok()) {
    std::fprintf(stderr, "sharded_train_bench: %s\n", Msg(ranks.status()).c_str());
    return 1;  // the logs stay in `dir` for a look
  }
  std::printf("%s\n", Merge(a, *ranks).dump().c_str());
  for (int r = 0; r < a.ranks; ++r) {
    std::remove(absl::StrCat(dir, "/rank", r, ".json").c_str());
    std::remove(absl::StrCat(dir, "/rank", r, ".log").c_str());
  }
  rmdir(dir.c_str());
  return 0;
}

}  // namespace
}  // namespace rlforge

int main(int argc, char** argv) {
  absl::StatusOr<rlforge::Args> a = rlforge::ParseArgs(argc, argv);
  if (!a.ok()) {
    std::fprintf(stderr,
                 "sharded_train_bench: %s\nusage: sharded_train_bench --model DIR [--ranks N] "
                 "[--threads T] [--batch B] [--seq S] [--warmup W] [--steps K] [--seed 0] "
                 "[--deadline-s 600]\n",
                 rlforge::Msg(a.status()).c_str());
    return 2;
  }
  return a->rank >= 0 ? rlforge::RankMain(*a) : rlforge::ParentMain(*a, argc, argv);
}
