#include "models/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/tokenizer.h"
#include "nlohmann/json.hpp"
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

namespace fs = std::filesystem;

std::string Source(const std::string& rel) { return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + rel; }
const std::string kCheckpoint = Source("/tests/data/chat_templates/checkpoint");

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Scratch(const std::string& name) {
  const std::string dir = (fs::temp_directory_path() / ("rlforge_chat_" + name)).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// checkpoint/expected.json holds the ids transformers' apply_chat_template(tokenize=True)
// gives for this checkpoint's template (tools/make_chat_template_fixtures.py).
TEST(ModelPromptTemplateTest, PromptIdsEqualTransformers) {
  auto tok = LoadTokenizer(kCheckpoint);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->chat_template_origin(), kCheckpoint + "/tokenizer_config.json: chat_template");
  auto tmpl = PromptTemplate::Create("model", tok->get());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const auto expected = nlohmann::json::parse(ReadText(kCheckpoint + "/expected.json"));
  ASSERT_EQ(expected["cases"].size(), 2u);
  for (const auto& c : expected["cases"]) {
    const std::string system = c["system"], user = c["user"];
    EXPECT_EQ(tmpl->Apply(system, user), c["prompt_text"].get<std::string>());
    EXPECT_EQ(EncodePrompt(**tok, *tmpl, system, user), c["prompt_ids"].get<std::vector<int32_t>>())
        << "system '" << system << "'";
  }
}

// Qwen3-style: the assistant turn after the last user message opens with an empty think block
// and closes with <|im_end|>, which is also eos: trained once, not twice.
TEST(ModelPromptTemplateTest, ResponseTokensAreWhatTheTemplateAppends) {
  auto tok = LoadTokenizer(kCheckpoint);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto tmpl = PromptTemplate::Create("model", tok->get());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->response_prefix(), "<think>\n\n</think>\n\n");
  EXPECT_EQ(tmpl->end_of_turn(), "<|im_end|>");
  const std::vector<int32_t> ids = EncodeResponse(**tok, *tmpl, "42");
  EXPECT_EQ(ids, (*tok)->Encode("<think>\n\n</think>\n\n42<|im_end|>"));
  EXPECT_EQ(ids.back(), (*tok)->eos_id());
  EXPECT_EQ(tmpl->ResponseText((*tok)->Decode({ids.begin(), ids.end() - 1})), "42");
}

// docs/tokenizers.md shows this checkpoint's prompt; the block must stay what Apply renders.
TEST(ModelPromptTemplateTest, DocsExample) {
  const std::string page = ReadText(Source("/docs/tokenizers.md"));
  const size_t marker = page.find("<!-- model template example -->\n```\n");
  ASSERT_NE(marker, std::string::npos);
  const size_t begin = page.find("```\n", marker) + 4;
  const std::string block = page.substr(begin, page.find("```", begin) - begin);
  auto tok = LoadTokenizer(kCheckpoint);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto tmpl = PromptTemplate::Create("model", tok->get());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  EXPECT_EQ(tmpl->Apply("You add numbers.", "12+30="), block);
  EXPECT_NE(page.find("`<think>\\n\\n</think>\\n\\n42<|im_end|>`"), std::string::npos);
}

TEST(ModelPromptTemplateTest, JinjaFileWinsAndSaveKeepsTheTemplate) {
  const std::string dir = Scratch("jinja");
  fs::copy(kCheckpoint + "/tokenizer.json", dir + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  std::ofstream(dir + "/chat_template.jinja")
      << "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}\n";
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->chat_template_origin(), dir + "/chat_template.jinja");
  const std::string saved = Scratch("saved");
  ASSERT_TRUE(SaveTokenizer(**tok, saved).ok());
  auto again = LoadTokenizer(saved);
  ASSERT_TRUE(again.ok()) << again.status();
  auto tmpl = PromptTemplate::Create("model", again->get());
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  // Same text as the built-in chatml (the trailing newline of the file is dropped, as jinja2
  // does), so the same tokens.
  EXPECT_EQ(tmpl->Apply("S", "U"), ApplyPromptTemplate("chatml", "S", "U"));
  EXPECT_EQ(tmpl->end_of_turn(), "<|im_end|>");
  EXPECT_EQ(tmpl->response_prefix(), "");
}

TEST(ModelPromptTemplateTest, ErrorsNameTheTemplateFileAndPlace) {
  EXPECT_NE(PromptTemplate::Create("model").status().message().find("needs a checkpoint"),
            std::string::npos);
  auto plain = LoadTokenizer(Source("/tests/data/tokenizer/qwen2"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(PromptTemplate::Create("model", plain->get()).ok());

  const std::string dir = Scratch("bad");
  fs::copy(kCheckpoint + "/tokenizer.json", dir + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  std::ofstream(dir + "/chat_template.jinja") << "{% for m in messages %}\n{{ m.content }\n";
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(PromptTemplate::Create("model", tok->get()).status().message(),
            dir + "/chat_template.jinja:2:1: unterminated '{{'");

  std::ofstream(dir + "/chat_template.jinja")
      << "{{ raise_exception('only user turns') if messages|length > 1 }}{{ messages[0].content }}";
  tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(PromptTemplate::Create("model", tok->get()).status().message(),
            dir + "/chat_template.jinja:1:4: the template raised an exception: only user turns");
}

}  // namespace
}  // namespace rlforge::models
