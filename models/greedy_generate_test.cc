#include "models/greedy_generate.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace rlforge::models {
namespace {

// Greedy decoding by recomputing the full forward for every new token.
std::vector<int32_t> NaiveGreedy(Transformer& m, std::vector<int32_t> seq, int64_t n) {
  torch::NoGradGuard g;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = static_cast<int64_t>(seq.size());
    auto tokens = torch::tensor(std::vector<int64_t>(seq.begin(), seq.end())).view({1, T});
    auto logits = m->Logits(m->Hidden(tokens, torch::arange(T, torch::kInt64).view({1, T}),
                                      torch::zeros({1, T}, torch::kInt64)));
    int32_t next = static_cast<int32_t>(logits[0][T - 1].argmax().item<int64_t>());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

TEST(GreedyGenerateTest, BatchedCacheMatchesNaiveDecodingForRaggedPrompts) {
  torch::manual_seed(5);
  TransformerConfig c;
  c.vocab_size = 23;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  Transformer m(c);
  {
    torch::NoGradGuard g;
    for (auto& p : m->parameters()) p.normal_(0.0, 0.3);
  }
  std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {7}, {9, 9, 3}};
  GreedyOptions o;
  o.max_new_tokens = 6;
  auto got = GreedyGenerate(m, prompts, o);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], NaiveGreedy(m, prompts[i], 6)) << "prompt " << i;
  }
  // A stop token ends its row (and is kept).
  o.stop_tokens = {got[1][2]};
  auto first = std::find(got[1].begin(), got[1].end(), got[1][2]);
  auto stopped = GreedyGenerate(m, prompts, o);
  EXPECT_EQ(stopped[1], std::vector<int32_t>(got[1].begin(), first + 1));
}

}  // namespace
}  // namespace rlforge::models
