#include "trainer/sft_data.h"

#include <gtest/gtest.h>

#include <fstream>

#include "nlohmann/json.hpp"
#include "rlforge_paths.h"

namespace rlforge {
namespace {

// data.prompt_template: model: the prompt is the checkpoint's chat template (the ids
// transformers' apply_chat_template gives, in checkpoint/expected.json), the target what the
// template appends for the assistant turn.
TEST(SftDataTest, ModelTemplatePromptIsTheCheckpointsChatTemplate) {
  const std::string dir =
      std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/chat_templates/checkpoint";
  auto tok = models::LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto tmpl = models::PromptTemplate::Create("model", tok->get());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  std::ifstream in(dir + "/expected.json");
  const auto expected = nlohmann::json::parse(in)["cases"][1];
  ASSERT_EQ(expected["system"], "You add numbers.");
  const auto ex = TokenizeExample(**tok, *tmpl, "You add numbers.", {"12+30=", "42", "42"});
  const auto prompt = expected["prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ex.prompt_len, static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(std::vector<int32_t>(ex.tokens.begin(), ex.tokens.begin() + ex.prompt_len), prompt);
  EXPECT_EQ(std::vector<int32_t>(ex.tokens.begin() + ex.prompt_len, ex.tokens.end()),
            (*tok)->Encode("<think>\n\n</think>\n\n42<|im_end|>"));
}

TEST(SftDataTest, LossOnlyOnResponseTokensAndPositionsRestartPerExample) {
  auto tok = models::MakeCharTokenizer("0123456789+-=");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto tmpl = models::PromptTemplate::Create("none");
  ASSERT_TRUE(tmpl.ok());
  auto a = TokenizeExample(**tok, *tmpl, "", {"1+2=", "3", "3"});
  auto b = TokenizeExample(**tok, *tmpl, "", {"10-5=", "5", "5"});
  // <bos> 1 + 2 = | 3 <eos>
  ASSERT_EQ(a.tokens.size(), 7u);
  EXPECT_EQ(a.prompt_len, 5);
  EXPECT_EQ(a.tokens.front(), (*tok)->bos_id());
  EXPECT_EQ(a.tokens.back(), (*tok)->eos_id());

  PackStats stats;
  auto rows = PackExamples({a, b, a}, 16, (*tok)->pad_id(), &stats);
  ASSERT_EQ(rows.size(), 2u);  // a + b = 15 tokens fill row 0; a goes to row 1
  const PackedRow& r = rows[0];
  ASSERT_EQ(r.tokens.size(), 16u);
  EXPECT_EQ(r.positions[0], 0);
  EXPECT_EQ(r.positions[7], 0);  // b starts
  EXPECT_EQ(r.segments[6], 0);
  EXPECT_EQ(r.segments[7], 1);
  EXPECT_EQ(r.segments[15], -1);  // padding
  // a: targets at positions 4 (predicts "3") and 5 (predicts eos) only.
  for (int i = 0; i < 7; ++i) {
    if (i == 4 || i == 5) {
      EXPECT_EQ(r.targets[i], a.tokens[i + 1]) << i;
    } else {
      EXPECT_EQ(r.targets[i], kIgnoreTarget) << i;
    }
  }
  EXPECT_EQ(r.loss_tokens, 4);
  EXPECT_EQ(stats.truncated, 0);

  auto cut = PackExamples({b}, 4, (*tok)->pad_id(), &stats);
  EXPECT_EQ(stats.truncated, 1);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].loss_tokens, 0);  // the response was cut off
}

TEST(SftDataTest, AlphabetIsSortedAndDistinct) {
  EXPECT_EQ(CollectAlphabet({"b+a", "ab=", "é"}), "+=abé");
}

}  // namespace
}  // namespace rlforge
