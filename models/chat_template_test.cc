#include "models/chat_template.h"

#include <gtest/gtest.h>

#include "models/tokenizer.h"
#include "rlforge_paths.h"

namespace rlforge::models {
namespace {

TEST(PromptTemplateTest, None) {
  EXPECT_EQ(ApplyPromptTemplate("none", "", "12+3="), "12+3=");
  EXPECT_EQ(ApplyPromptTemplate("none", "Be brief.", "12+3="), "Be brief.\n\n12+3=");
}

TEST(PromptTemplateTest, ChatMl) {
  EXPECT_EQ(ApplyPromptTemplate("chatml", "You add numbers.", "12+3="),
            "<|im_start|>system\nYou add numbers.<|im_end|>\n"
            "<|im_start|>user\n12+3=<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ApplyPromptTemplate("chatml", "", "hi"),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  auto t = PromptTemplate::Create("chatml");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->end_of_turn(), "<|im_end|>");
}

TEST(PromptTemplateTest, ChatMlTurnMarkersAreSingleTokens) {
  auto tok = LoadTokenizer(std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/tokenizer/qwen2");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto ids = (*tok)->Encode(ApplyPromptTemplate("chatml", "", "7+8="));
  const int32_t start = *(*tok)->TokenId("<|im_start|>");
  const int32_t end = *(*tok)->TokenId("<|im_end|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), start), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), end), 1);
  EXPECT_EQ(ids.front(), start);
}

TEST(PromptTemplateTest, CustomAndUnknown) {
  EXPECT_EQ(ApplyPromptTemplate("Q: {user}\nA:", "ignored", "2+2"), "Q: 2+2\nA:");
  EXPECT_EQ(ApplyPromptTemplate("[{system}] {user}", "{user}", "x"), "[{user}] x");
  auto bad = PromptTemplate::Create("chatmel");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'chatmel'"), std::string::npos);
}

}  // namespace
}  // namespace rlforge::models
