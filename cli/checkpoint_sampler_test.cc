#include "cli/checkpoint_sampler.h"

#include <gtest/gtest.h>

namespace rlforge {
namespace {

// Issue 42: `rlforge generate` on configs/sft_arith_flawed.yaml's checkpoint (64 positions)
// failed with its own default --max-tokens 256.
TEST(FitMaxTokensTest, ADefaultThatOverflowsTheContextIsClippedAndSaysSo) {
  std::string note;
  auto got = FitMaxTokens(256, /*from_flag=*/false, /*longest_prompt=*/12, /*which=*/3,
                          /*context=*/64, &note);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 52);
  EXPECT_EQ(note,
            "max tokens 52 instead of the default 256: prompt 3 (12 tokens) + 52 fills the "
            "model's max_position_embeddings 64 (--max-tokens sets it)");
}

TEST(FitMaxTokensTest, AGivenMaxTokensThatOverflowsIsAnErrorNamingTheFlagAndBothNumbers) {
  std::string note;
  auto got = FitMaxTokens(256, /*from_flag=*/true, 12, 3, 64, &note);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(),
            "--max-tokens 256: prompt 3 (12 tokens) + 256 = 268 exceeds the model's "
            "max_position_embeddings 64 (at most 52 fit)");
  EXPECT_TRUE(note.empty());
}

TEST(FitMaxTokensTest, WhatFitsIsKeptAndAPromptWithNoRoomIsAnError) {
  std::string note;
  for (bool from_flag : {false, true}) {
    auto got = FitMaxTokens(52, from_flag, 12, 1, 64, &note);  // exactly fills the context
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, 52);
    EXPECT_TRUE(note.empty());
    auto unknown = FitMaxTokens(4096, from_flag, 12, 1, /*context=*/0, &note);
    ASSERT_TRUE(unknown.ok());
    EXPECT_EQ(*unknown, 4096);
    auto full = FitMaxTokens(8, from_flag, 64, 2, 64, &note);
    ASSERT_FALSE(full.ok());
    EXPECT_EQ(full.status().message(),
              "prompt 2 (64 tokens) leaves no room to generate in the model's "
              "max_position_embeddings 64");
  }
}

}  // namespace
}  // namespace rlforge
