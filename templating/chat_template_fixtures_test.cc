// Every case in tests/data/chat_templates/*.json (written by
// tools/make_chat_template_fixtures.py from transformers' own rendering) must render to the
// same bytes here, or fail with the same raise_exception message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlforge_paths.h"
#include "templating/template.h"

namespace rlforge::templating {
namespace {

namespace fs = std::filesystem;

std::string FixtureDir() {
  return std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/chat_templates";
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateFixturesTest, EveryCaseMatchesTransformersByteForByte) {
  int cases = 0, templates = 0;
  for (const auto& entry : fs::directory_iterator(FixtureDir())) {
    if (entry.path().extension() != ".json") continue;
    const auto fixture = nlohmann::ordered_json::parse(ReadAll(entry.path()));
    const fs::path source_path = fs::path(FixtureDir()) / fixture.at("template").get<std::string>();
    auto t = Template::Parse(ReadAll(source_path), source_path.filename().string());
    ASSERT_TRUE(t.ok()) << t.status();
    ++templates;
    for (const auto& c : fixture.at("cases")) {
      SCOPED_TRACE(source_path.filename().string() + " / " + c.at("name").get<std::string>());
      const Value context = FromJson(c.at("context"));
      auto out = t->Render(context.as_dict());
      if (c.contains("error")) {
        ASSERT_FALSE(out.ok()) << "rendered instead of failing:\n" << *out;
        EXPECT_NE(out.status().message().find(c.at("error").get<std::string>()), std::string::npos)
            << out.status();
      } else {
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_EQ(*out, c.at("expected").get<std::string>());
      }
      ++cases;
    }
  }
  // The corpus: Qwen2.5, Qwen3, Llama 3, Mistral, Gemma structures and a constructs template.
  EXPECT_GE(templates, 6);
  EXPECT_GE(cases, 40);
}

}  // namespace
}  // namespace rlforge::templating
