#include "models/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/unicode_text.h"
#include "nlohmann/json.hpp"
#include "rlforge_paths.h"

namespace rlforge::models {
namespace {

namespace fs = std::filesystem;

std::string DataDir() { return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/tokenizer"; }

nlohmann::json Reference() {
  std::ifstream in(DataDir() + "/reference.json");
  return nlohmann::json::parse(in);
}

std::string TempDir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("rlforge_tok_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d.string();
}

void WriteFile(const std::string& path, const std::string& body) {
  std::ofstream out(path);
  out << body;
}

// Token ids from tools/make_tokenizer_fixtures.py (Hugging Face tokenizers) must match exactly,
// and decoding gives back what Hugging Face decodes (the text itself unless NFC changed it).
class HfReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfReferenceTest, IdsMatchAndDecodeRoundTrips) {
  const std::string flavour = GetParam();
  auto tok = LoadTokenizer(DataDir() + "/" + flavour);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto ref = Reference()[flavour];
  EXPECT_EQ((*tok)->vocab_size(), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ((*tok)->kind(), "bpe");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = (*tok)->Encode(text);
    EXPECT_EQ(got, want) << flavour << " text: '" << text << "'";
    EXPECT_EQ((*tok)->Decode(got), c["decoded"].get<std::string>()) << text;
    // Byte-level and plain byte-fallback BPE give the text back whenever NFC leaves it alone
    // (SentencePiece-style flavours add or drop a space around special tokens, as HF does).
    if (Normalize(text, NormalForm::kNFC) == text && flavour != "llama" && flavour != "metaspace") {
      EXPECT_EQ((*tok)->Decode(got), text);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(Flavours, HfReferenceTest,
                         ::testing::Values("qwen2", "gpt2", "fallback", "llama", "metaspace"));

TEST(BpeTokenizerTest, SpecialIdsFromTokenizerConfig) {
  auto qwen = LoadTokenizer(DataDir() + "/qwen2");
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ((*qwen)->eos_id(), *(*qwen)->TokenId("<|im_end|>"));
  EXPECT_EQ((*qwen)->pad_id(), *(*qwen)->TokenId("<|endoftext|>"));
  EXPECT_EQ((*qwen)->bos_id(), -1);
  auto fb = LoadTokenizer(DataDir() + "/fallback");
  ASSERT_TRUE(fb.ok()) << fb.status();
  EXPECT_EQ((*fb)->bos_id(), *(*fb)->TokenId("<s>"));
  EXPECT_EQ((*fb)->eos_id(), *(*fb)->TokenId("</s>"));
}

TEST(BpeTokenizerTest, SpecialTokenInTextIsOneId) {
  auto tok = LoadTokenizer(DataDir() + "/qwen2");
  ASSERT_TRUE(tok.ok());
  const auto ids = (*tok)->Encode("hi<|im_end|>");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), (*tok)->eos_id());
}

TEST(BpeTokenizerTest, InvalidUtf8RoundTripsThroughByteLevel) {
  auto tok = LoadTokenizer(DataDir() + "/gpt2");
  ASSERT_TRUE(tok.ok());
  const std::string bad = "ok \xff\xfe bytes \xc3";
  EXPECT_EQ((*tok)->Decode((*tok)->Encode(bad)), bad);
}

TEST(BpeTokenizerTest, SaveWritesBackTheSameTokenizer) {
  auto tok = LoadTokenizer(DataDir() + "/qwen2");
  ASSERT_TRUE(tok.ok());
  const std::string dir = TempDir("bpe_save");
  ASSERT_TRUE(SaveTokenizer(**tok, dir).ok());
  auto again = LoadTokenizer(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  const std::string text = "Save <|im_start|>and load 123 caf\u00e9";
  EXPECT_EQ((*again)->Encode(text), (*tok)->Encode(text));
  EXPECT_EQ((*again)->eos_id(), (*tok)->eos_id());
  EXPECT_EQ((*again)->pad_id(), (*tok)->pad_id());
  fs::remove_all(dir);
}

TEST(BpeTokenizerTest, ErrorsNameTheFileAndKey) {
  const std::string dir = TempDir("bpe_errors");
  fs::create_directories(dir);
  EXPECT_NE(LoadTokenizer(dir).status().message().find("tokenizer.json"), std::string::npos);
  WriteFile(dir + "/tokenizer.json", "{\"model\": ");
  EXPECT_NE(LoadTokenizer(dir).status().message().find("not valid JSON"), std::string::npos);
  fs::copy_file(DataDir() + "/qwen2/tokenizer.json", dir + "/tokenizer.json",
                fs::copy_options::overwrite_existing);
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  auto s = LoadTokenizer(dir).status();
  EXPECT_NE(s.message().find("tokenizer_config.json: eos_token: token '<|nope|>'"),
            std::string::npos)
      << s;
  fs::remove(dir + "/tokenizer_config.json");
  s = LoadTokenizer(dir).status();
  EXPECT_NE(s.message().find("eos"), std::string::npos) << s;
  fs::remove_all(dir);
}

TEST(BpeTokenizerTest, UnsupportedPartsAreNamed) {
  const std::string dir = TempDir("bpe_unsupported");
  fs::create_directories(dir);
  std::ifstream in(DataDir() + "/qwen2/tokenizer.json");
  auto spec = nlohmann::json::parse(in);
  spec["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  WriteFile(dir + "/tokenizer.json", spec.dump());
  WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
  auto s = LoadTokenizer(dir).status();
  EXPECT_NE(s.message().find("pre_tokenizer type 'BertPreTokenizer'"), std::string::npos) << s;
  fs::remove_all(dir);
}

TEST(CharTokenizerTest, EncodeDecodeAndSpecials) {
  auto tok = MakeCharTokenizer("0123456789+-*= \u00e9");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "char");
  EXPECT_EQ((*tok)->vocab_size(), 4 + 16);
  EXPECT_EQ((*tok)->pad_id(), 0);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  const std::string text = "<bos>12+30=42<eos>\u00e9";
  const auto ids = (*tok)->Encode(text);
  EXPECT_EQ(ids.size(), 1u + 8u + 1u + 1u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids[ids.size() - 2], 2);
  EXPECT_EQ((*tok)->Decode(ids), text);
  // Outside the alphabet: <unk>.
  EXPECT_EQ((*tok)->Encode("7x"), (std::vector<int32_t>{*(*tok)->TokenId("7"), 3}));
}

TEST(CharTokenizerTest, SaveLoadRoundTrip) {
  CharTokenizerOptions opts;
  opts.special_tokens = {"<pad>", "<eos>", "<unk>", "<|sep|>"};
  opts.bos_token = "";
  opts.eos_token = "<eos>";
  auto tok = MakeCharTokenizer("abc xyz", opts);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string dir = TempDir("char_save");
  ASSERT_TRUE(SaveTokenizer(**tok, dir).ok());
  auto again = LoadTokenizer(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->kind(), "char");
  EXPECT_EQ((*again)->bos_id(), -1);
  EXPECT_EQ((*again)->eos_id(), 1);
  EXPECT_EQ((*again)->vocab_size(), (*tok)->vocab_size());
  const std::string text = "abc<|sep|>zyx <eos>";
  EXPECT_EQ((*again)->Encode(text), (*tok)->Encode(text));
  EXPECT_EQ((*again)->Decode((*again)->Encode(text)), text);
  fs::remove_all(dir);
}

TEST(CharTokenizerTest, BadAlphabetsAndSpecialsAreErrors) {
  EXPECT_NE(MakeCharTokenizer("abca").status().message().find("'a' appears twice"),
            std::string::npos);
  CharTokenizerOptions opts;
  opts.eos_token = "</s>";
  EXPECT_NE(MakeCharTokenizer("ab", opts).status().message().find("eos_token '</s>'"),
            std::string::npos);
  opts = {};
  opts.unk_token = "";
  EXPECT_FALSE(MakeCharTokenizer("ab", opts).ok());
}

TEST(UnicodeRegexTest, WhitespaceIsOnigurumaStyle) {
  auto re = UnicodeRegex::Compile(R"(\s+)");
  ASSERT_TRUE(re.ok());
  // \v and U+0085 count as whitespace, as in Oniguruma (ICU's own \s leaves them out).
  const std::string text =
      "a\v\xC2\x85"
      "b";
  auto m = re->FindAll(text);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<size_t, size_t>{1, 4}));
  EXPECT_FALSE(UnicodeRegex::Compile("(").ok());
}

}  // namespace
}  // namespace rlforge::models

namespace rlforge::models {
namespace {

// The examples of docs/tokenizers.md.
std::string DocsPage() {
  std::ifstream in(std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/docs/tokenizers.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TokenizerDocsTest, LoadExample) {
  auto tok = LoadTokenizer(DataDir() + "/qwen2");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = "<|im_start|>user\n12+30=<|im_end|>";
  std::vector<int32_t> ids = (*tok)->Encode(text);
  EXPECT_EQ((*tok)->Decode(ids), text);
  EXPECT_EQ((*tok)->eos_id(), *(*tok)->TokenId("<|im_end|>"));
  EXPECT_EQ(ids.front(), *(*tok)->TokenId("<|im_start|>"));
  EXPECT_NE(DocsPage().find("(*tok)->Encode(\"<|im_start|>user\\n12+30=<|im_end|>\")"),
            std::string::npos)
      << "docs/tokenizers.md no longer shows this example";
}

TEST(TokenizerDocsTest, CharFormatExample) {
  const std::string page = DocsPage();
  const size_t a = page.find("```json\n");
  ASSERT_NE(a, std::string::npos);
  const size_t b = page.find("```", a + 8);
  const std::string dir = TempDir("docs_char");
  fs::create_directories(dir);
  WriteFile(dir + "/tokenizer.json", page.substr(a + 8, b - a - 8));
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 16);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("12+30=42<eos>")), "12+30=42<eos>");
  EXPECT_EQ((*tok)->Encode("x"), std::vector<int32_t>{3});
  auto made = MakeCharTokenizer("0123456789+-*= ");
  ASSERT_TRUE(made.ok());
  EXPECT_EQ((*made)->vocab_size(), 4 + 15);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rlforge::models
