// SFT data: prompt/response examples -> token ids with a loss mask -> packed rows.
//
// example -> [bos] prompt-text tokens | response-text tokens [eos] -> targets on the
// response part only -> greedy packing into rows of seq_len (positions restart and
// attention stays inside each example via segment ids; the tail is padding)
//
// Torch-free; the learner turns a batch of rows into tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/prompt_example.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"

namespace rlforge {

// Targets equal to this carry no loss (cross-entropy's ignore_index).
constexpr int64_t kIgnoreTarget = -100;

struct TokenizedExample {
  std::vector<int32_t> tokens;  // prompt then response (with eos)
  int64_t prompt_len = 0;       // tokens[prompt_len:] are trained on
};

// Prompt and response ids: models::EncodePrompt and models::EncodeResponse.
TokenizedExample TokenizeExample(const models::Tokenizer& tok, const models::PromptTemplate& tmpl,
                                 const std::string& system, const PromptExample& example);

struct PackedRow {
  std::vector<int64_t> tokens, positions, segments, targets;  // each seq_len long
  int64_t loss_tokens = 0;                                    // targets that are not kIgnoreTarget
};

struct PackStats {
  int64_t truncated = 0;  // examples longer than seq_len, cut to fit
};

// Packs examples in the given order: each goes whole into the current row when it fits,
// else starts a new row. target[i] = token[i+1] when token i+1 belongs to the same
// example's response; padding has segment -1 and pad_id tokens.
std::vector<PackedRow> PackExamples(const std::vector<TokenizedExample>& examples, int64_t seq_len,
                                    int32_t pad_id, PackStats* stats);

// The distinct characters (UTF-8 code points, sorted by bytes) of the texts: the alphabet of a
// char-level tokenizer trained from scratch.
std::string CollectAlphabet(const std::vector<std::string>& texts);

}  // namespace rlforge
