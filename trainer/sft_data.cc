#include "trainer/sft_data.h"

#include <set>

namespace rlforge {

TokenizedExample TokenizeExample(const models::Tokenizer& tok, const models::PromptTemplate& tmpl,
                                 const std::string& system, const PromptExample& example) {
  TokenizedExample out;
  out.tokens = models::EncodePrompt(tok, tmpl, system, example.prompt);
  out.prompt_len = static_cast<int64_t>(out.tokens.size());
  auto resp = models::EncodeResponse(tok, tmpl, example.response);
  out.tokens.insert(out.tokens.end(), resp.begin(), resp.end());
  return out;
}

std::vector<PackedRow> PackExamples(const std::vector<TokenizedExample>& examples, int64_t seq_len,
                                    int32_t pad_id, PackStats* stats) {
  std::vector<PackedRow> rows;
  PackedRow row;
  int64_t segment = 0;
  auto flush = [&] {
    if (row.tokens.empty()) return;
    while (static_cast<int64_t>(row.tokens.size()) < seq_len) {
      row.tokens.push_back(pad_id);
      row.positions.push_back(0);
      row.segments.push_back(-1);
      row.targets.push_back(kIgnoreTarget);
    }
    rows.push_back(std::move(row));
    row = PackedRow();
    segment = 0;
  };
  for (const auto& ex : examples) {
    int64_t n = static_cast<int64_t>(ex.tokens.size());
    if (n > seq_len) {
      if (stats) ++stats->truncated;
      n = seq_len;
    }
    if (static_cast<int64_t>(row.tokens.size()) + n > seq_len) flush();
    for (int64_t i = 0; i < n; ++i) {
      row.tokens.push_back(ex.tokens[i]);
      row.positions.push_back(i);
      row.segments.push_back(segment);
      bool trained = i + 1 < n && i + 1 >= ex.prompt_len;
      row.targets.push_back(trained ? ex.tokens[i + 1] : kIgnoreTarget);
      if (trained) ++row.loss_tokens;
    }
    ++segment;
  }
  flush();
  return rows;
}

std::string CollectAlphabet(const std::vector<std::string>& texts) {
  std::set<std::string> seen;
  for (const auto& t : texts) {
    for (size_t i = 0; i < t.size();) {
      size_t len = 1;
      unsigned char c = static_cast<unsigned char>(t[i]);
      if (c >= 0xF0) {
        len = 4;
      } else if (c >= 0xE0) {
        len = 3;
      } else if (c >= 0xC0) {
        len = 2;
      }
      seen.insert(t.substr(i, len));
      i += len;
    }
  }
  std::string out;
  for (const auto& ch : seen) out += ch;
  return out;
}

}  // namespace rlforge
