#include "trainer/sft_data.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

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
