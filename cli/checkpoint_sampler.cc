#include "cli/checkpoint_sampler.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "cli/role_registry.h"
#include "common/role_names.h"
#include "common/status.h"
#include "config/algorithm_registry.h"
#include "models/hf_checkpoint.h"

namespace rlforge {

absl::StatusOr<int64_t> FitMaxTokens(int64_t requested, bool from_flag, int64_t longest_prompt,
                                     size_t which, int64_t context, std::string* note) {
  if (context <= 0 || longest_prompt + requested <= context) return requested;
  const std::string prompt = absl::StrCat("prompt ", which, " (", longest_prompt, " tokens)");
  if (longest_prompt >= context) {
    return absl::InvalidArgumentError(absl::StrCat(
        prompt, " leaves no room to generate in the model's max_position_embeddings ", context));
  }
  const int64_t fits = context - longest_prompt;
  if (from_flag) {
    return absl::InvalidArgumentError(absl::StrCat("--max-tokens ", requested, ": ", prompt, " + ",
                                                   requested, " = ", longest_prompt + requested,
                                                   " exceeds the model's max_position_embeddings ",
                                                   context, " (at most ", fits, " fit)"));
  }
  *note = absl::StrCat("max tokens ", fits, " instead of the default ", requested, ": ", prompt,
                       " + ", fits, " fills the model's max_position_embeddings ", context,
                       " (--max-tokens sets it)");
  return fits;
}

absl::StatusOr<std::unique_ptr<CheckpointSampler>> CheckpointSampler::Open(
    const JobConfig& config) {
  const std::string& dir = config.model.path;
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model ", dir,
                     ": not a checkpoint directory (no config.json; expected a Hugging Face "
                     "directory such as runs/<name>/checkpoints/step_<N>)"));
  }
  std::unique_ptr<CheckpointSampler> s(new CheckpointSampler());
  s->config_ = config;
  // The engine is a language-model job's rollout worker, whatever job the settings came from.
  const AlgorithmSpec* a = config.job.algorithm;
  if (a == nullptr || !a->lm_engines) {
    s->config_.job.algorithm = FindAlgorithm("grpo");
  }
  ASSIGN_OR_RETURN(const models::TransformerConfig model, models::LoadHfConfig(dir));
  s->context_ = model.max_position_embeddings;
  ASSIGN_OR_RETURN(s->text_.tokenizer, models::LoadTokenizer(dir));
  std::string name = config.data.prompt_template;
  if (name.empty()) name = s->text_.tokenizer->chat_template().empty() ? "none" : "model";
  auto tmpl = models::PromptTemplate::Create(name, s->text_.tokenizer.get());
  if (!tmpl.ok())
    return absl::InvalidArgumentError(absl::StrCat("--template: ", Msg(tmpl.status())));
  s->text_.tmpl = *tmpl;
  ASSIGN_OR_RETURN(s->engine_, CreateRole(kRolloutRole, s->config_, proto::Assignment()));
  return s;
}

absl::StatusOr<int64_t> CheckpointSampler::MaxTokensFor(const std::vector<std::string>& prompts,
                                                        int64_t requested, bool from_flag,
                                                        std::string* note) const {
  int64_t longest = 0;
  size_t which = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len =
        static_cast<int64_t>(text_.Encode(config_.data.system_prompt, prompts[i]).size());
    if (len > longest) {
      longest = len;
      which = i + 1;
    }
  }
  return FitMaxTokens(requested, from_flag, longest, which, context_, note);
}

absl::StatusOr<std::vector<LmGroup>> CheckpointSampler::Sample(
    const std::vector<std::string>& prompts, const SamplingParams& p) {
  std::vector<LmGroup> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests[i].request_id = static_cast<int64_t>(i);
    requests[i].prompt = text_.Encode(config_.data.system_prompt, prompts[i]);
  }
  proto::WorkRequest work;
  proto::LmGenerate* g = work.mutable_lm_generate();
  g->set_n(p.n);
  g->set_temperature(p.temperature);
  g->set_top_p(p.top_p);
  g->set_top_k(p.top_k);
  g->set_max_tokens(p.max_tokens);
  g->set_seed(p.seed);
  g->set_min_groups(static_cast<int64_t>(prompts.size()));
  ASSIGN_OR_RETURN(WorkReply reply, engine_->Handle(work, GroupsToFrames(requests, false)));
  ASSIGN_OR_RETURN(std::vector<LmGroup> groups, GroupsFromFrames(reply.tensors, true, p.n));
  std::sort(groups.begin(), groups.end(),
            [](const LmGroup& a, const LmGroup& b) { return a.request_id < b.request_id; });
  if (groups.size() != prompts.size()) {
    return absl::InternalError(absl::StrCat("the engine returned ", groups.size(), " groups for ",
                                            prompts.size(), " prompts"));
  }
  return groups;
}

}  // namespace rlforge
