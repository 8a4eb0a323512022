#include "rollout/llm_engine.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {

namespace {

SchedulerSettings SchedulerSettingsFor(const EngineSettings& e, int64_t max_positions) {
  SchedulerSettings s;
  s.block_size = e.block_size;
  s.num_blocks = e.num_blocks;
  s.max_batch = e.max_batch;
  s.max_tokens_per_step = e.max_tokens_per_step;
  s.max_positions = max_positions;
  s.prefix_sharing = e.prefix_sharing;
  s.detokenize = e.detokenize;
  return s;
}

ModelRunnerSettings RunnerSettingsFor(const EngineSettings& e) {
  ModelRunnerSettings r;
  r.block_size = e.block_size;
  r.num_blocks = e.num_blocks;
  r.max_batch = e.max_batch;
  r.use_kernel_library = e.use_kernel_library;
  r.cuda_graphs = e.cuda_graphs;
  r.pad_decode_steps_on_cpu = e.pad_decode_steps_on_cpu;
  return r;
}

}  // namespace

struct LlmEngine::PendingUpdate {
  std::function<absl::Status(models::Transformer&)> apply;
  int64_t version = 0;
};

LlmEngine::LlmEngine(models::Transformer model, const EngineSettings& options,
                     int64_t policy_version)
    : options_(options),
      version_(policy_version),
      scheduler_(SchedulerSettingsFor(options, model->config().max_position_embeddings)),
      runner_(std::move(model), RunnerSettingsFor(options)) {}

LlmEngine::~LlmEngine() = default;

absl::Status LlmEngine::CheckTokens(const GenerationRequest& request) const {
  const int64_t vocab = runner_.model()->config().vocab_size;
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t t = request.prompt[i];
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("generation request ", request.id,
                                                     ": prompt token ", i, " is ", t,
                                                     ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status LlmEngine::Submit(GenerationRequest request) {
  RETURN_IF_ERROR(CheckTokens(request));
  return scheduler_.Add(std::move(request));
}

std::vector<FinishedGroup> LlmEngine::TakeFinished() { return scheduler_.TakeFinished(); }

void LlmEngine::RequestWeightUpdate(std::function<absl::Status(models::Transformer&)> apply,
                                    int64_t version) {
  pending_update_ = std::make_unique<PendingUpdate>();
  pending_update_->apply = std::move(apply);
  pending_update_->version = version;
}

absl::Status LlmEngine::MaybeApplyWeightUpdate() {
  if (!pending_update_) return absl::OkStatus();
  if (options_.weight_update == "drain") {
    // In flight on the old weights: let it finish.
    if (scheduler_.AnyStarted()) return absl::OkStatus();
  } else {
    // recompute: every in-flight sequence drops its KV and recomputes it.
    scheduler_.PreemptAll();
  }
  const std::unique_ptr<PendingUpdate> update = std::move(pending_update_);
  absl::Status applied;
  {
    torch::NoGradGuard no_grad;
    applied = update->apply(runner_.model());
  }
  if (!applied.ok()) {
    torn_ = absl::StrCat("a failed update to version ", update->version, " left the weights torn");
    return applied;
  }
  torn_.clear();
  version_ = update->version;
  runner_.WeightsChanged();
  return absl::OkStatus();
}

absl::Status LlmEngine::Step() {
  absl::Status status = MaybeApplyWeightUpdate();
  if (status.ok() && !torn_.empty()) {
    status = absl::FailedPreconditionError(
        absl::StrCat("engine: ", torn_, "; it serves nothing until a whole version loads"));
  }
  if (status.ok()) {
    // While a drained update waits, groups that have not started stay for the new weights.
    const bool admit_new = !(pending_update_ && options_.weight_update == "drain");
    const ScheduledStep step = scheduler_.Schedule(admit_new);
    if (step.empty()) {
      if (scheduler_.HasWaiting()) {
        status = absl::InternalError("engine: waiting sequences but nothing could be scheduled");
      }
    } else if (absl::StatusOr<std::vector<SampledToken>> draws = runner_.Run(step); draws.ok()) {
      scheduler_.PostProcess(step, *draws, version_);
    } else {
      status = draws.status();
    }
  }
  UpdateStats();
  return status;
}

void LlmEngine::UpdateStats() {
  const SchedulerStats& s = scheduler_.stats();
  stats_.steps = s.steps;
  stats_.generated_tokens = s.generated_tokens;
  stats_.prefill_tokens = s.prefill_tokens;
  stats_.preemptions = s.preemptions;
  stats_.peak_blocks = s.peak_blocks;
  stats_.prompt_kv_slots = s.prompt_kv_slots;
  stats_.cow_copies = s.cow_copies;
  stats_.max_running = s.max_running;
  stats_.graph_steps = runner_.graph_steps();
}

absl::Status LlmEngine::RunToCompletion() {
  while (HasUnfinished()) {
    if (absl::Status s = Step(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace rlforge
