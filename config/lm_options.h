// Job-file sections for language-model jobs: model (what to train), data (prompts and
// targets), sft (the supervised fine-tuning loop). Schemas in lm_config.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"

namespace rlforge {

// A Llama/Qwen2-family model: loaded from a Hugging Face directory (path), or built from
// scratch with the sizes below and a char-level tokenizer over the data's characters.
struct ModelOptions {
  std::string path;  // HF checkpoint dir (config.json, safetensors, tokenizer.json); "" = scratch
  std::string init_job;       // job file run first when `path` does not exist yet (it writes path)
  std::string chat_template;  // from scratch: a Jinja chat template file the tokenizer carries
  ModelArchitecture architecture = ModelArchitecture::kLlama;
  int64_t hidden_size = 128;
  int64_t intermediate_size = 352;
  int64_t num_hidden_layers = 4;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t max_position_embeddings = 256;
  double rope_theta = 10000;
  bool tie_word_embeddings = true;
  FloatDtype dtype = FloatDtype::kFloat32;
};

// Where prompts and targets come from.
struct DataOptions {
  DataSource source = DataSource::kArithmetic;
  std::string train_path;             // jsonl: {"prompt", "response"} lines
  std::string heldout_path;           // jsonl: held-out set for exact-match evaluation
  int64_t train_examples = 20000;     // arithmetic: examples per epoch of the train split
  int64_t heldout_examples = 200;     // examples scored at each evaluation
  int64_t min_digits = 1;             // arithmetic operands
  int64_t max_digits = 3;
  std::vector<std::string> ops = {"+", "-"};
  ArithmeticStyle style = ArithmeticStyle::kPlain;  // arithmetic
  double demo_carry_errors = 0;  // arithmetic: share of train responses with carries dropped
  std::string prompt_template = "none";
  std::string system_prompt;
};

struct SftOptions {
  int64_t steps = 1000;              // optimiser steps
  int64_t seq_len = 128;             // packed row length in tokens
  int64_t batch_rows = 16;           // rows per micro-batch
  int64_t grad_accum = 1;            // micro-batches per optimiser step
  int64_t steps_per_iteration = 50;  // optimiser steps per metrics record
  int64_t eval_every = 200;          // optimiser steps between held-out evaluations; 0: end only
  int64_t max_new_tokens = 16;       // greedy generation budget at evaluation
  int64_t save_every = 0;            // optimiser steps between checkpoints; 0: end only
};

}  // namespace rlforge
