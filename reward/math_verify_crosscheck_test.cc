// The math verifier against PyPI's math-verify on a recorded corpus (tests/data/math_verify/,
// written by tools/make_math_verify_fixtures.py). Every pair must agree with math-verify's
// verdict except the pairs the corpus marks `rlforge_differs` (each with the reason), which
// must really differ, so a stale justification fails too.
#include <gtest/gtest.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "reward/math_answer.h"
#include "rlforge_paths.h"

namespace rlforge::reward {
namespace {

TEST(MathVerifyCrossCheckTest, AgreesWithMathVerifyOnTheCorpus) {
  const std::string path =
      std::string(RLFORGE_SOURCE_DIR_DEFAULT) + "/tests/data/math_verify/corpus.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json doc = nlohmann::json::parse(in);
  const auto& pairs = doc.at("pairs");
  ASSERT_GE(pairs.size(), 500u);
  int agree = 0, listed = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& p = pairs[i];
    const std::string gold = p.at("gold"), response = p.at("response");
    const bool theirs = p.at("math_verify");
    const bool ours = MathVerify(gold, response, Extract::kAuto);
    agree += ours == theirs;
    const std::string where = absl::StrCat("pair ", i, " (", p.at("category").get<std::string>(),
                                           "): gold '", gold, "', response '", response, "'");
    if (p.contains("rlforge_differs")) {
      ++listed;
      EXPECT_NE(ours, theirs) << where << ": listed as a disagreement but both say " << ours;
    } else {
      EXPECT_EQ(ours, theirs) << where << ": math-verify says " << theirs;
    }
  }
  std::printf("agreement with math-verify %s: %d of %zu pairs (%.1f%%); %d listed disagreements\n",
              doc.at("math_verify_version").get<std::string>().c_str(), agree, pairs.size(),
              100.0 * agree / pairs.size(), listed);
}

}  // namespace
}  // namespace rlforge::reward
