#include "trainer/sft_trainer_role.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/exceptions.h"
#include "common/logging.h"
#include "common/status.h"
#include "data/arith_task.h"
#include "data/heldout_set.h"
#include "data/jsonl_dataset.h"
#include "models/compute_threads.h"
#include "models/greedy_generate.h"
#include "models/hf_checkpoint.h"
#include "nlohmann/json.hpp"
#include "trainer/lora_policy.h"
#include "trainer/lr_schedule.h"
#include "trainer/sharded_checkpoint.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The <|...|> markers of a chat template's text ("<|im_start|>"), each once, in order: a
// char-level tokenizer makes each one token, as real tokenizers do.
std::vector<std::string> ChatMarkers(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = text.find("<|"); at != std::string::npos; at = text.find("<|", at + 1)) {
    const size_t end = text.find("|>", at + 2);
    if (end == std::string::npos) break;
    std::string marker = text.substr(at, end + 2 - at);
    if (marker.find_first_of(" \n\t'\"{}") != std::string::npos) continue;
    if (std::find(out.begin(), out.end(), marker) == out.end()) out.push_back(marker);
  }
  return out;
}

}  // namespace

SftTrainerRole::SftTrainerRole(const JobConfig& config, const proto::Assignment& assignment)
    : config_(config), assignment_(assignment) {}

absl::StatusOr<WorkReply> SftTrainerRole::Handle(const proto::WorkRequest& request,
                                                 std::vector<TensorFrame> tensors) {
  return CallCatching([&]() -> absl::StatusOr<WorkReply> {
    switch (request.task_case()) {
      case proto::WorkRequest::kSftInit:
        return Init();
      case proto::WorkRequest::kSftTrain:
        return Train(request.sft_train());
      case proto::WorkRequest::kLmEvaluate:
        return Evaluate(request.lm_evaluate());
      case proto::WorkRequest::kLmSave:
        return Save(request.lm_save());
      case proto::WorkRequest::kSaveState:
        return SaveState(request.save_state().dir());
      case proto::WorkRequest::kLoadState:
        return LoadState(request.load_state().dir());
      default:
        return absl::InvalidArgumentError(
            "the SFT trainer takes sft_init, sft_train, lm_evaluate, lm_save, save_state and "
            "load_state work");
    }
  });
}

absl::StatusOr<std::vector<PromptExample>> SftTrainerRole::TrainExamples(int64_t epoch) const {
  const DataOptions& d = config_.data;
  const uint64_t seed = static_cast<uint64_t>(config_.job.seed);
  std::vector<PromptExample> out;
  if (d.source == DataSource::kJsonl) {
    out = file_train_;
  } else {
    out = task_->Examples(seed, Split::kTrain, static_cast<uint64_t>(epoch * d.train_examples),
                          static_cast<size_t>(d.train_examples));
  }
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(epoch));
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

absl::Status SftTrainerRole::LoadData() {
  const DataOptions& d = config_.data;
  if (d.source == DataSource::kJsonl) {
    ASSIGN_OR_RETURN(file_train_, ReadPromptJsonl(d.train_path, JsonlFormat::kSft));
    if (file_train_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(d.train_path, ": no examples"));
    }
  } else {
    ASSIGN_OR_RETURN(task_, ArithmeticTaskFor(d));
  }
  ASSIGN_OR_RETURN(heldout_, HeldoutExamples(d, static_cast<uint64_t>(config_.job.seed),
                                             d.heldout_examples, JsonlFormat::kSft));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<models::Tokenizer>> SftTrainerRole::ScratchTokenizer() const {
  const DataOptions& d = config_.data;
  // A char-level vocabulary over every character the data and template can produce.
  std::vector<std::string> texts = {d.system_prompt, "0123456789+-*="};
  models::CharTokenizerOptions options;
  const std::string& file = config_.model.chat_template;
  if (!file.empty()) {
    auto text = ReadFileToString(file);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.chat_template: ", file, ": ", Msg(text.status())));
    }
    options.chat_template = *text;
    options.chat_template_origin = file;
    for (std::string& marker : ChatMarkers(*text)) options.special_tokens.push_back(marker);
    texts.push_back(*text);  // its literal text (role names, newlines) too
  } else if (d.prompt_template == "model") {
    return absl::InvalidArgumentError(
        "data.prompt_template: model renders a chat template: a checkpoint's (model.path), or "
        "from scratch the file model.chat_template names");
  } else {
    ASSIGN_OR_RETURN(models::PromptTemplate tmpl,
                     models::PromptTemplate::Create(d.prompt_template));
    texts.push_back(tmpl.Apply(d.system_prompt, ""));
    texts.push_back(tmpl.end_of_turn());
  }
  ASSIGN_OR_RETURN(auto first, TrainExamples(0));
  for (const std::vector<PromptExample>* set : {&std::as_const(first), &heldout_}) {
    for (const auto& e : *set) {
      texts.push_back(e.prompt);
      texts.push_back(e.response);
    }
  }
  return models::MakeCharTokenizer(CollectAlphabet(texts), options);
}

absl::StatusOr<models::TransformerConfig> SftTrainerRole::ScratchModelConfig() const {
  const ModelOptions& m = config_.model;
  models::TransformerConfig c;
  c.architecture = std::string(ChoiceName(m.architecture));
  c.vocab_size = tokenizer_->vocab_size();
  c.hidden_size = m.hidden_size;
  c.intermediate_size = m.intermediate_size;
  c.num_hidden_layers = m.num_hidden_layers;
  c.num_attention_heads = m.num_attention_heads;
  c.num_key_value_heads = m.num_key_value_heads;
  c.head_dim = m.hidden_size / m.num_attention_heads;
  c.max_position_embeddings = m.max_position_embeddings;
  c.rope_theta = m.rope_theta;
  c.attention_bias = m.architecture == ModelArchitecture::kQwen2;
  c.tie_word_embeddings = m.tie_word_embeddings;
  c.bos_token_id = tokenizer_->bos_id();
  c.eos_token_id = tokenizer_->eos_id();
  RETURN_IF_ERROR(models::ValidateConfig(c, "model"));
  return c;
}

absl::StatusOr<WorkReply> SftTrainerRole::Init() {
  SetComputeThreads(config_.trainer.threads, config_.trainer.ranks);
  torch::manual_seed(static_cast<uint64_t>(config_.job.seed));
  const DataOptions& d = config_.data;
  const ModelOptions& m = config_.model;
  RETURN_IF_ERROR(LoadData());
  // A checkpoint's tokenizer, or a char-level one over the data from scratch; a "model"
  // prompt template is its chat template.
  if (!m.path.empty()) {
    ASSIGN_OR_RETURN(tokenizer_, models::LoadTokenizer(m.path));
  } else {
    ASSIGN_OR_RETURN(tokenizer_, ScratchTokenizer());
  }
  ASSIGN_OR_RETURN(models::PromptTemplate tmpl,
                   models::PromptTemplate::Create(d.prompt_template, tokenizer_.get()));
  template_ = tmpl;

  ASSIGN_OR_RETURN(comm_, ConnectTrainerRanks(assignment_, config_.trainer));
  ASSIGN_OR_RETURN(const ShardedModel::Options sharding,
                   ShardingOptions(config_.trainer, comm_->rank(), /*trainable=*/true));
  if (!m.path.empty()) {
    ASSIGN_OR_RETURN(model_, LoadPolicy(config_, comm_.get(), sharding, {}, "loading model"));
  } else {
    ASSIGN_OR_RETURN(models::TransformerConfig c, ScratchModelConfig());
    // Every rank draws the same initial weights (seeded above) and keeps its shard.
    ASSIGN_OR_RETURN(model_, ShardedModel::Create(models::Transformer(c), comm_.get(), sharding));
  }
  models::Transformer& module = model_->module();
  if (module->config().vocab_size < tokenizer_->vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(m.path, ": the tokenizer has ", tokenizer_->vocab_size(),
                     " tokens but the model only ", module->config().vocab_size));
  }
  module->train();
  optimizer_ = std::make_unique<FlatAdamW>(model_->shard_data(), model_->shard_grad(),
                                           AdamWOptions(config_.trainer, config_.trainer.lr));
  RETURN_IF_ERROR(NextEpoch());

  WorkReply reply;
  auto& metrics = *reply.result.mutable_metrics();
  int64_t params = 0;
  for (const ShardUnit& u : model_->units()) params += u.numel;
  metrics["parameters"] = static_cast<double>(params);
  metrics["vocab_size"] = static_cast<double>(tokenizer_->vocab_size());
  metrics["train_rows"] = static_cast<double>(rows_.size());
  metrics["heldout_examples"] = static_cast<double>(heldout_.size());
  return reply;
}

absl::Status SftTrainerRole::NextEpoch() {
  ++epoch_;
  ASSIGN_OR_RETURN(auto examples, TrainExamples(epoch_));
  std::vector<TokenizedExample> tokenized;
  tokenized.reserve(examples.size());
  for (const auto& e : examples) {
    tokenized.push_back(TokenizeExample(*tokenizer_, *template_, config_.data.system_prompt, e));
  }
  PackStats stats;
  rows_ = PackExamples(tokenized, config_.sft.seq_len, tokenizer_->pad_id(), &stats);
  truncated_ += stats.truncated;
  next_row_ = 0;
  if (rows_.empty()) return absl::InvalidArgumentError("the training data packs into no rows");
  return absl::OkStatus();
}

const PackedRow& SftTrainerRole::NextRow() {
  if (next_row_ >= rows_.size()) {
    auto s = NextEpoch();  // cannot fail after the first epoch packed
    (void)s;
  }
  return rows_[next_row_++];
}

absl::StatusOr<WorkReply> SftTrainerRole::Train(const proto::SftTrain& task) {
  if (!model_) return absl::FailedPreconditionError("sft_train before sft_init");
  if (task.first_step() != steps_done_) {
    return absl::FailedPreconditionError(absl::StrCat("sft_train from step ", task.first_step(),
                                                      " but the trainer is at step ", steps_done_));
  }
  const Stopwatch timer;
  const SftOptions& s = config_.sft;
  const int64_t R = s.batch_rows, T = s.seq_len;
  double loss_sum = 0, tokens = 0, norm_sum = 0, lr = 0;
  for (int64_t k = 0; k < task.num_steps(); ++k) {
    // Gather the step's micro-batches first: the loss is a mean over all their tokens.
    // Copies: a new epoch repacks rows_. Every rank reads every row, in the same order.
    std::vector<std::vector<PackedRow>> micro(static_cast<size_t>(s.grad_accum));
    int64_t loss_tokens = 0;
    for (auto& mb : micro) {
      for (int64_t r = 0; r < R; ++r) {
        mb.push_back(NextRow());
        loss_tokens += mb.back().loss_tokens;
      }
    }
    optimizer_->ZeroGrad();
    double step_loss = 0;
    for (const auto& mb : micro) {
      std::vector<int64_t> costs;
      for (size_t r = 0; r < mb.size(); ++r) costs.push_back(T);  // rows are T wide
      const Share share = ShareOf(costs, comm_->rank(), comm_->size());
      ASSIGN_OR_RETURN(const double part, MicroBatch(mb, share, loss_tokens));
      step_loss += part;
    }
    ASSIGN_OR_RETURN(const std::vector<double> global_loss, SumOverRanks(*comm_, {step_loss}));
    step_loss = global_loss[0];
    // Clipping at infinity measures the global norm and leaves the gradient as it is.
    const double norm = optimizer_->ClipGradNorm(config_.trainer.max_grad_norm > 0
                                                     ? config_.trainer.max_grad_norm
                                                     : std::numeric_limits<double>::infinity(),
                                                 comm_.get());
    lr = ScheduledLearningRate(config_.trainer, steps_done_, task.total_steps());
    optimizer_->set_lr(lr);
    optimizer_->Step();
    ++steps_done_;
    loss_sum += step_loss;
    norm_sum += norm;
    tokens += static_cast<double>(loss_tokens);
  }
  double n = static_cast<double>(std::max<int64_t>(1, task.num_steps()));
  WorkReply reply;
  auto& metrics = *reply.result.mutable_metrics();
  metrics["loss"] = loss_sum / n;
  metrics["grad_norm"] = norm_sum / n;
  metrics["lr"] = lr;
  metrics["response_tokens"] = tokens;
  metrics["epoch"] = static_cast<double>(epoch_);
  metrics["truncated_examples"] = static_cast<double>(truncated_);
  double secs = timer.Seconds();
  metrics["train_s"] = secs;
  metrics["rows_per_s"] = n * static_cast<double>(R * s.grad_accum) / secs;
  return reply;
}

absl::StatusOr<double> SftTrainerRole::MicroBatch(const std::vector<PackedRow>& mb,
                                                  const Share& share, int64_t loss_tokens) {
  const int64_t T = config_.sft.seq_len;
  const int64_t R = static_cast<int64_t>(share.end - share.begin);
  auto tok = torch::empty({R, T}, torch::kInt64), pos = torch::empty({R, T}, torch::kInt64),
       seg = torch::empty({R, T}, torch::kInt64), tgt = torch::empty({R, T}, torch::kInt64);
  for (int64_t r = 0; r < R; ++r) {
    const PackedRow& row = mb[share.begin + static_cast<size_t>(r)];
    std::copy(row.tokens.begin(), row.tokens.end(), tok.data_ptr<int64_t>() + r * T);
    std::copy(row.positions.begin(), row.positions.end(), pos.data_ptr<int64_t>() + r * T);
    std::copy(row.segments.begin(), row.segments.end(), seg.data_ptr<int64_t>() + r * T);
    std::copy(row.targets.begin(), row.targets.end(), tgt.data_ptr<int64_t>() + r * T);
  }
  // Built on the CPU; on the model's device once (no copy when that is the CPU).
  const torch::Device device = model_->device();
  for (torch::Tensor* t : {&tok, &pos, &seg, &tgt}) *t = t->to(device);
  models::Transformer& model = model_->module();
  model_->BeginForward();
  auto logits = model->Logits(model->Hidden(tok, pos, seg));
  auto loss = torch::nn::functional::cross_entropy(logits.view({R * T, -1}), tgt.view({-1}),
                                                   torch::nn::functional::CrossEntropyFuncOptions()
                                                       .ignore_index(kIgnoreTarget)
                                                       .reduction(torch::kSum));
  // This rank's part of the mean over the step's response tokens on every rank.
  // (Divided, then weighted: one rank's arithmetic stays exactly the unsharded trainer's.)
  const double weight = share.weight_zero ? 0.0 : 1.0;
  auto scaled = loss / static_cast<double>(std::max<int64_t>(1, loss_tokens)) * weight;
  scaled.backward();
  RETURN_IF_ERROR(model_->FinishBackward());
  return scaled.item<double>();
}

absl::StatusOr<WorkReply> SftTrainerRole::Evaluate(const proto::LmEvaluate& task) {
  if (!model_) return absl::FailedPreconditionError("lm_evaluate before sft_init");
  const Stopwatch timer;
  // Rank 0 generates with a gathered copy; the others only take part in the gathers.
  ASSIGN_OR_RETURN(std::optional<models::Transformer> gathered, GatherFullModel(*model_));
  WorkReply reply;
  if (!gathered) return reply;
  auto& model = *gathered;
  model->eval();
  size_t n = heldout_.size();
  if (task.max_examples() > 0) n = std::min(n, static_cast<size_t>(task.max_examples()));
  models::GreedyOptions o;
  o.max_new_tokens = config_.sft.max_new_tokens;
  o.stop_tokens = {tokenizer_->eos_id()};
  int64_t correct = 0;
  const size_t chunk = 128;
  for (size_t begin = 0; begin < n; begin += chunk) {
    size_t end = std::min(n, begin + chunk);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = begin; i < end; ++i) {
      prompts.push_back(models::EncodePrompt(*tokenizer_, *template_, config_.data.system_prompt,
                                             heldout_[i].prompt));
    }
    auto outs = models::GreedyGenerate(model, prompts, o);
    for (size_t i = begin; i < end; ++i) {
      const std::string text = models::DecodeResponse(*tokenizer_, *template_, outs[i - begin]);
      if (Trim(text) == Trim(heldout_[i].response)) ++correct;
    }
  }
  auto& metrics = *reply.result.mutable_metrics();
  metrics["heldout_accuracy"] = n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
  metrics["heldout_examples"] = static_cast<double>(n);
  metrics["eval_s"] = timer.Seconds();
  return reply;
}

absl::StatusOr<WorkReply> SftTrainerRole::Save(const proto::LmSave& task) {
  if (!model_) return absl::FailedPreconditionError("lm_save before sft_init");
  const Stopwatch timer;
  // Gathered unit by unit; rank 0 streams each into the file.
  RETURN_IF_ERROR(SavePolicy(config_, *model_, task.dir()));
  WorkReply reply;
  if (comm_->rank() != 0) return reply;
  RETURN_IF_ERROR(models::SaveTokenizer(*tokenizer_, task.dir()));
  (*reply.result.mutable_metrics())["save_s"] = timer.Seconds();
  return reply;
}

absl::StatusOr<WorkReply> SftTrainerRole::SaveState(const std::string& dir) {
  if (!model_) return absl::FailedPreconditionError("save_state before sft_init");
  RETURN_IF_ERROR(SaveShardedState(dir, *model_, *optimizer_));
  if (comm_->rank() != 0) return WorkReply();
  const nlohmann::json j{{"steps_done", steps_done_},
                         {"epoch", epoch_},
                         {"next_row", next_row_},
                         {"truncated_examples", truncated_}};
  RETURN_IF_ERROR(WriteFileAtomic(dir + "/sft.json", j.dump() + "\n"));
  return WorkReply();
}

absl::StatusOr<WorkReply> SftTrainerRole::LoadState(const std::string& dir) {
  if (!model_) return absl::FailedPreconditionError("load_state before sft_init");
  RETURN_IF_ERROR(LoadShardedState(dir, *model_, *optimizer_));
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(dir + "/sft.json"));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  for (const char* key : {"steps_done", "epoch", "next_row", "truncated_examples"}) {
    if (j.is_discarded() || !j.contains(key) || !j[key].is_number_integer() ||
        j[key].get<int64_t>() < 0) {
      return absl::DataLossError(
          absl::StrCat(dir, "/sft.json: no non-negative integer '", key, "'"));
    }
  }
  // The data order is a pure function of (job.seed, epoch): repack the saved epoch and
  // continue at its row.
  epoch_ = j["epoch"].get<int64_t>() - 1;
  RETURN_IF_ERROR(NextEpoch());
  const size_t next_row = j["next_row"].get<size_t>();
  if (next_row > rows_.size()) {
    return absl::DataLossError(absl::StrCat(dir, "/sft.json: next_row ", next_row, " but epoch ",
                                            epoch_, " packs into ", rows_.size(),
                                            " rows (was the data changed?)"));
  }
  next_row_ = next_row;
  truncated_ = j["truncated_examples"].get<int64_t>();
  steps_done_ = j["steps_done"].get<int64_t>();
  WorkReply reply;
  (*reply.result.mutable_metrics())["optimizer_step"] = static_cast<double>(steps_done_);
  return reply;
}

}  // namespace rlforge
