#include "data/jsonl_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rlforge {
namespace {

std::string WriteTemp(const std::string& name, const std::string& body) {
  const auto path =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()) + ".jsonl");
  std::ofstream(path) << body;
  return path.string();
}

TEST(JsonlDatasetTest, ReadsGsm8kLines) {
  const std::string path = WriteTemp(
      "gsm8k",
      "{\"question\": \"Tom has 3 bags of 4 pens. How many pens?\", \"answer\": \"3 * 4 = "
      "12\\n#### 12\"}\n{\"question\": \"q\", \"answer\": \"a\\n####  1,250 \"}\n");
  for (JsonlFormat f : {JsonlFormat::kSft, JsonlFormat::kRl}) {
    auto a = ReadPromptJsonl(path, f);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->size(), 2u);
    EXPECT_EQ((*a)[0].prompt, "Tom has 3 bags of 4 pens. How many pens?");
    EXPECT_EQ((*a)[0].response, "3 * 4 = 12\n#### 12");
    EXPECT_EQ((*a)[0].answer, "12");
    EXPECT_EQ((*a)[1].answer, "1,250");
  }
  const std::string bad = WriteTemp("gsm8k_bad", "{\"question\": \"q\", \"answer\": \"12\"}\n");
  auto b = ReadPromptJsonl(bad, JsonlFormat::kRl);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(std::string(b.status().message()),
            bad + ":1: key 'answer': no final '#### <answer>' (GSM8K format)");
  for (const auto& p : {path, bad}) std::filesystem::remove(p);
}

TEST(JsonlDatasetTest, ReadsSftRlAndDpo) {
  const std::string sft =
      WriteTemp("sft",
                "{\"prompt\": \"1+1=\", \"response\": \"2\"}\n\n"
                "{\"prompt\": \"caf\\u00e9\", \"response\": \"ok\", \"meta\": 3}\r\n");
  auto a = ReadPromptJsonl(sft, JsonlFormat::kSft);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[1].prompt, "caf\u00e9");
  EXPECT_EQ((*a)[0].response, "2");

  const std::string rl = WriteTemp("rl", "{\"prompt\": \"2+3=\", \"answer\": \"5\"}\n");
  auto b = ReadPromptJsonl(rl, JsonlFormat::kRl);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)[0].answer, "5");

  const std::string dpo =
      WriteTemp("dpo", "{\"prompt\": \"2+3=\", \"chosen\": \"5\", \"rejected\": \"6\"}\n");
  auto c = ReadPreferenceJsonl(dpo);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)[0].rejected, "6");
  for (const auto& p : {sft, rl, dpo}) std::filesystem::remove(p);
}

TEST(JsonlDatasetTest, ErrorsNameFileLineAndKey) {
  const std::string path = WriteTemp(
      "bad", "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"a\", \"response\": 3}\n");
  auto s = ReadPromptJsonl(path, JsonlFormat::kSft).status();
  EXPECT_NE(s.message().find(path + ":2: key 'response': expected a string, got number"),
            std::string::npos)
      << s;
  s = ReadPromptJsonl(path, JsonlFormat::kRl).status();
  EXPECT_NE(s.message().find(path + ":1: key 'answer': missing"), std::string::npos) << s;

  const std::string broken = WriteTemp("broken", "{\"prompt\": \"a\", \"chosen\": \"b\",\n");
  s = ReadPreferenceJsonl(broken).status();
  EXPECT_NE(s.message().find(broken + ":1: not valid JSON"), std::string::npos) << s;

  const std::string empty = WriteTemp("empty", "\n\n");
  EXPECT_NE(ReadPreferenceJsonl(empty).status().message().find("no examples"), std::string::npos);
  EXPECT_NE(ReadPreferenceJsonl("/nonexistent.jsonl").status().message().find("cannot open"),
            std::string::npos);
  for (const auto& p : {path, broken, empty}) std::filesystem::remove(p);
}

TEST(JsonlDatasetTest, PromptLinesArePlainTextOrJsonObjects) {
  std::istringstream in(
      "What is 2+2?\n\n{\"prompt\": \"two\\nlines\"}\n{\"question\": \"Q?\", \"answer\": \"#### "
      "1\"}\n");
  auto prompts = ReadPromptLines(in, "p.txt");
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  EXPECT_EQ(*prompts, (std::vector<std::string>{"What is 2+2?", "two\nlines", "Q?"}));

  std::istringstream bad("ok\n{\"prompt\": 3}\n");
  EXPECT_EQ(ReadPromptLines(bad, "p.txt").status().message(),
            "p.txt:2: key 'prompt': expected a string, got number");
  std::istringstream broken("{\"prompt\": \n");
  EXPECT_EQ(ReadPromptLines(broken, "stdin").status().message(),
            "stdin:1: a line that starts with '{' must be a JSON object with \"prompt\"");
  std::istringstream empty("\n \n");
  EXPECT_EQ(ReadPromptLines(empty, "stdin").status().message(), "stdin: no prompts");
}

TEST(JsonlDatasetTest, WriteThenRead) {
  const std::string path = WriteTemp("roundtrip", "");
  std::vector<PromptExample> in = {{"1+2=", "3", "3"}, {"line\nbreak \"q\"", "", "r"}};
  ASSERT_TRUE(WritePromptJsonl(path, in).ok());
  auto out = ReadPromptJsonl(path, JsonlFormat::kSft);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[1].prompt, in[1].prompt);
  EXPECT_EQ((*out)[0].answer, "3");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace rlforge
