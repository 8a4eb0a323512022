// Schemas of the language-model sections (see lm_options.h).
#include "config/lm_config.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace rlforge {

using config::CheckContext;
using config::Schema;
using config::SchemaBuilder;

namespace {

std::shared_ptr<const Schema> ModelSection() {
  SchemaBuilder<ModelOptions> b(
      "The language model: a Hugging Face checkpoint directory, or a Llama/Qwen2-family model "
      "built from scratch with a char-level tokenizer over the data's characters.");
  b.String("path", &ModelOptions::path,
           "Checkpoint directory (config.json, model.safetensors or shards + index, "
           "tokenizer.json); empty: build from scratch with the sizes below.");
  b.String("init_job", &ModelOptions::init_job,
           "A job file (e.g. an SFT stage) that `rlforge run` runs first when model.path does "
           "not exist yet; it must write model.path. Relative to the working directory, as "
           "model.path is. Empty: model.path must exist.");
  b.String("chat_template", &ModelOptions::chat_template,
           "From scratch: a Jinja chat template file (relative to the working directory) that "
           "the char-level tokenizer carries, its special markers (ChatML's im_start and "
           "im_end) one token each; the "
           "checkpoint saves it as chat_template.jinja, so this stage and later ones can use "
           "data.prompt_template: model. A checkpoint (model.path) brings its own.");
  b.Enum("architecture", &ModelOptions::architecture,
         "From scratch: the family (Qwen2 adds qkv bias).");
  b.Int("hidden_size", &ModelOptions::hidden_size, "From scratch: model width.").Min(8).Max(16384);
  b.Int("intermediate_size", &ModelOptions::intermediate_size, "From scratch: SwiGLU width.")
      .Min(1)
      .Max(65536);
  b.Int("num_hidden_layers", &ModelOptions::num_hidden_layers, "From scratch: layers.")
      .Min(1)
      .Max(256);
  b.Int("num_attention_heads", &ModelOptions::num_attention_heads, "From scratch: query heads.")
      .Min(1)
      .Max(256);
  b.Int("num_key_value_heads", &ModelOptions::num_key_value_heads,
        "From scratch: key/value heads (grouped-query attention); divides the query heads.")
      .Min(1)
      .Max(256);
  b.Int("max_position_embeddings", &ModelOptions::max_position_embeddings,
        "From scratch: longest sequence.")
      .Min(1);
  b.Double("rope_theta", &ModelOptions::rope_theta, "From scratch: RoPE base.").Min(1);
  b.Bool("tie_word_embeddings", &ModelOptions::tie_word_embeddings,
         "From scratch: share the input embedding and the output head.");
  b.Enum("dtype", &ModelOptions::dtype, "Parameter dtype while training and in saved checkpoints.");
  b.Check([](const ModelOptions& m, CheckContext& ctx) {
    if (!m.path.empty() && !m.chat_template.empty()) {
      ctx.Error("chat_template", "only for a model built from scratch: model.path " + m.path +
                                     " brings its own chat template");
    }
    if (!m.path.empty()) return;
    if (m.hidden_size % m.num_attention_heads != 0) {
      ctx.Error("hidden_size", absl::StrCat(m.hidden_size,
                                            " is not a multiple of "
                                            "num_attention_heads (",
                                            m.num_attention_heads, ")"));
    } else if ((m.hidden_size / m.num_attention_heads) % 2 != 0) {
      ctx.Error("hidden_size", "hidden_size / num_attention_heads must be even (RoPE)");
    }
    if (m.num_attention_heads % m.num_key_value_heads != 0) {
      ctx.Error("num_key_value_heads",
                absl::StrCat(m.num_key_value_heads, " does not divide num_attention_heads (",
                             m.num_attention_heads, ")"));
    }
  });
  return b.Build();
}

std::shared_ptr<const Schema> DataSection() {
  SchemaBuilder<DataOptions> b(
      "Prompts and targets of language-model jobs: the built-in arithmetic task (disjoint train "
      "and held-out splits) or JSONL files.");
  b.Enum("source", &DataOptions::source,
         "arithmetic: generated problems (prompt \"12+345=\", response \"357\"); jsonl: "
         "train_path / heldout_path.");
  b.String("train_path", &DataOptions::train_path,
           "source jsonl: training lines, {\"prompt\", \"response\"} for sft, {\"prompt\", "
           "\"answer\"} for grpo and lm_ppo, {\"prompt\", \"chosen\", \"rejected\"} for dpo.");
  b.String("heldout_path", &DataOptions::heldout_path,
           "source jsonl: held-out lines, scored by exact match of the greedy response.");
  b.Int("train_examples", &DataOptions::train_examples,
        "source arithmetic: training examples generated per epoch (reshuffled each epoch).")
      .Min(1);
  b.Int("heldout_examples", &DataOptions::heldout_examples,
        "Held-out examples scored at each evaluation (at most the file's size for jsonl).")
      .Min(1);
  b.Int("min_digits", &DataOptions::min_digits, "source arithmetic: fewest digits per operand.")
      .Min(1)
      .Max(18);
  b.Int("max_digits", &DataOptions::max_digits, "source arithmetic: most digits per operand.")
      .Min(1)
      .Max(18);
  b.StringList("ops", &DataOptions::ops, "source arithmetic: operators, any of +, -, *.");
  b.Enum("style", &DataOptions::style,
         "source arithmetic: \"12+345=\" -> \"357\", or \"What is 12 + 345?\" -> "
         "\"The answer is 357.\"");
  b.Double("demo_carry_errors", &DataOptions::demo_carry_errors,
           "source arithmetic: share of training responses written with every carry and "
           "borrow dropped (\"78+5=\" -> \"73\"): flawed demonstrations for an SFT stage. "
           "Answers used by rewards and evaluation stay exact.")
      .Min(0)
      .Max(1);
  b.String("prompt_template", &DataOptions::prompt_template,
           "How a prompt is wrapped: none, chatml, model (the checkpoint's own Jinja "
           "chat_template, see docs/tokenizers.md), or a custom text with {system} and {user}.");
  b.String("system_prompt", &DataOptions::system_prompt, "System text for the prompt template.");
  b.Check([](const DataOptions& d, CheckContext& ctx) {
    if (d.min_digits > d.max_digits) {
      ctx.Error("min_digits", absl::StrCat(d.min_digits, " exceeds max_digits ", d.max_digits));
    }
    if (d.source == DataSource::kJsonl && (d.train_path.empty() || d.heldout_path.empty())) {
      ctx.Error("source", "jsonl needs data.train_path and data.heldout_path");
    }
    if (d.source != DataSource::kJsonl && (!d.train_path.empty() || !d.heldout_path.empty())) {
      ctx.Error("train_path", "only used with data.source: jsonl");
    }
    for (const auto& op : d.ops) {
      if (op != "+" && op != "-" && op != "*") {
        ctx.Error("ops", absl::StrCat("unknown operator '", op, "' (use +, - or *)"));
      }
    }
    if (d.ops.empty()) ctx.Error("ops", "needs at least one operator");
  });
  return b.Build();
}

std::shared_ptr<const Schema> SftSection() {
  SchemaBuilder<SftOptions> b(
      "Supervised fine-tuning (`job.algorithm: sft`): packed prompt+response rows, loss on "
      "response tokens only, AdamW with the trainer section's schedule.");
  b.Int("steps", &SftOptions::steps, "Optimiser steps to train for.").Min(1);
  b.Int("seq_len", &SftOptions::seq_len,
        "Packed row length in tokens; examples are packed whole, positions restart per example.")
      .Min(2);
  b.Int("batch_rows", &SftOptions::batch_rows, "Packed rows per micro-batch.").Min(1);
  b.Int("grad_accum", &SftOptions::grad_accum,
        "Micro-batches per optimiser step (the loss is the mean over all their response tokens).")
      .Min(1);
  b.Int("steps_per_iteration", &SftOptions::steps_per_iteration,
        "Optimiser steps per metrics.jsonl record.")
      .Min(1);
  b.Int("eval_every", &SftOptions::eval_every,
        "Optimiser steps between held-out exact-match evaluations; 0: only at the end.")
      .Min(0);
  b.Int("max_new_tokens", &SftOptions::max_new_tokens, "Greedy generation budget per answer.")
      .Min(1);
  b.Int("save_every", &SftOptions::save_every,
        "Optimiser steps between Hugging Face exports of the model (checkpoints/step_<optimiser "
        "step>/, for later stages and `rlforge eval`); 0: only at the end. Independent of "
        "checkpoint.every, whose whole-job checkpoints are what `rlforge run --resume` "
        "continues from.")
      .Min(0);
  return b.Build();
}

// Why model.path's checkpoint cannot serve data.prompt_template: model ("" when it can, or
// when the directory does not exist yet because model.init_job writes it).
std::string MissingChatTemplate(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir) || fs::exists(fs::path(dir) / "chat_template.jinja")) return "";
  const fs::path config = fs::path(dir) / "tokenizer_config.json";
  std::ifstream in(config);
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("chat_template")) return "";
  return absl::StrCat("model: model.path '", dir, "' has no chat template (no chat_template in ",
                      config.string(), " and no ", (fs::path(dir) / "chat_template.jinja").string(),
                      ")");
}

}  // namespace

void AddLmSections(SchemaBuilder<JobConfig>& b) {
  b.Section("model", &JobConfig::model, ModelSection());
  b.Section("data", &JobConfig::data, DataSection());
  b.Section("sft", &JobConfig::sft, SftSection());
  b.Check([](const JobConfig& c, CheckContext& ctx) {
    const std::string& init = c.model.init_job;
    if (init.empty()) return;
    if (c.model.path.empty()) {
      ctx.Error("model.init_job", "needs model.path: the checkpoint the first stage writes");
    } else if (!std::filesystem::is_directory(c.model.path) &&
               !std::filesystem::is_regular_file(init)) {
      // Only when it would run: an actor on another host loads the existing checkpoint and
      // need not have the first stage's file.
      ctx.Error("model.init_job",
                absl::StrCat("no job file '", init, "' (relative to the working directory ",
                             std::filesystem::current_path().string(), ")"));
    }
  });
  b.Check([](const JobConfig& c, CheckContext& ctx) {
    const std::string& tmpl = c.model.chat_template;
    if (!tmpl.empty() && !std::filesystem::is_regular_file(tmpl)) {
      ctx.Error("model.chat_template",
                absl::StrCat("no file '", tmpl, "' (relative to the working directory ",
                             std::filesystem::current_path().string(), ")"));
    }
    if (c.data.prompt_template != "model") return;
    if (c.model.path.empty()) {
      if (tmpl.empty()) {
        ctx.Error("data.prompt_template",
                  "model needs a chat template: model.path's (a checkpoint), or from scratch "
                  "the file model.chat_template names");
      }
      return;
    }
    const std::string missing = MissingChatTemplate(c.model.path);
    if (!missing.empty()) ctx.Error("data.prompt_template", missing);
  });
  b.Check([](const JobConfig& c, CheckContext& ctx) {
    if (c.job.algorithm == nullptr || !c.job.algorithm->Reads("sft")) return;
    if (c.model.path.empty() && c.sft.seq_len > c.model.max_position_embeddings) {
      ctx.Error("sft.seq_len",
                absl::StrCat(c.sft.seq_len, " exceeds model.max_position_embeddings ",
                             c.model.max_position_embeddings));
    }
    if (c.sft.eval_every > 0 && c.sft.eval_every % c.sft.steps_per_iteration != 0) {
      ctx.Error("sft.eval_every", absl::StrCat("must be a multiple of sft.steps_per_iteration (",
                                               c.sft.steps_per_iteration, ")"));
    }
    if (c.sft.save_every > 0 && c.sft.save_every % c.sft.steps_per_iteration != 0) {
      ctx.Error("sft.save_every", absl::StrCat("must be a multiple of sft.steps_per_iteration (",
                                               c.sft.steps_per_iteration, ")"));
    }
  });
}

}  // namespace rlforge
