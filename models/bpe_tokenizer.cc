#include "models/bpe_tokenizer.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace rlforge::models {

namespace {

using Json = nlohmann::json;

// GPT-2's pre-tokenizer regex, used by a ByteLevel pre-tokenizer with use_regex.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards.
struct ByteMap {
  char32_t byte_to_cp[256];
  std::unordered_map<char32_t, uint8_t> cp_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      byte_to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap* m = new ByteMap();
  return *m;
}

std::string ToByteLevel(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) AppendUtf8(Bytes().byte_to_cp[c], &out);
  return out;
}

std::string FromByteLevel(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto [cp, len] = Utf8Decode(s, i);
    auto it = Bytes().cp_to_byte.find(cp);
    if (it != Bytes().cp_to_byte.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsWordByte(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

// "<0x41>" -> 0x41; -1 when `t` is not a byte token.
int ByteTokenValue(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v *= 16;
    if (c >= '0' && c <= '9') {
      v += c - '0';
    } else if (c >= 'A' && c <= 'F') {
      v += c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      v += c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return v;
}

absl::StatusOr<NormalForm> ParseNormalForm(const std::string& type, const std::string& where) {
  if (type == "NFC") return NormalForm::kNFC;
  if (type == "NFD") return NormalForm::kNFD;
  if (type == "NFKC") return NormalForm::kNFKC;
  if (type == "NFKD") return NormalForm::kNFKD;
  return absl::UnimplementedError(
      absl::StrCat(where, ": normalizer type '", type,
                   "' is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)"));
}

// The steps of a pipeline part: the items of {"type": "Sequence", list_key: [...]}, else the
// part itself; none when absent or null.
std::vector<const Json*> Steps(const Json& spec, const char* part, const char* list_key) {
  std::vector<const Json*> steps;
  if (!spec.contains(part) || spec[part].is_null()) return steps;
  const Json& p = spec[part];
  if (p.at("type") == "Sequence") {
    for (const Json& s : p.at(list_key)) steps.push_back(&s);
  } else {
    steps.push_back(&p);
  }
  return steps;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromJson(const Json& spec,
                                                                     const std::string& origin,
                                                                     std::string raw) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->raw_ = std::move(raw);
  try {
    const Json& model = spec.at("model");
    if (model.value("type", std::string("BPE")) != "BPE") {
      return absl::UnimplementedError(absl::StrCat(origin, ": model.type '",
                                                   model.value("type", std::string()),
                                                   "' is not supported (only BPE)"));
    }
    if (model.contains("dropout") && !model["dropout"].is_null()) {
      return absl::UnimplementedError(absl::StrCat(origin, ": model.dropout must be null"));
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && model[key] != "") {
        return absl::UnimplementedError(absl::StrCat(origin, ": model.", key, " is not supported"));
      }
    }
    // Vocabulary, then added tokens (which may extend it).
    int32_t max_id = -1;
    for (const auto& [token, id] : model.at("vocab").items()) {
      const int32_t i = id.get<int32_t>();
      if (i < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(origin, ": model.vocab['", token, "']: negative id ", i));
      t->token_to_id_[token] = i;
      max_id = std::max(max_id, i);
    }
    std::vector<AddedToken> added;
    if (spec.contains("added_tokens") && spec["added_tokens"].is_array()) {
      for (const Json& a : spec["added_tokens"]) {
        AddedToken tok;
        tok.id = a.at("id").get<int32_t>();
        tok.content = a.at("content").get<std::string>();
        tok.special = a.value("special", false);
        tok.lstrip = a.value("lstrip", false);
        tok.rstrip = a.value("rstrip", false);
        tok.single_word = a.value("single_word", false);
        if (tok.content.empty() || tok.id < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(origin, ": added_tokens: empty content or negative id ", tok.id));
        }
        max_id = std::max(max_id, tok.id);
        added.push_back(std::move(tok));
      }
    }
    t->id_to_token_.assign(static_cast<size_t>(max_id + 1), "");
    t->is_added_.assign(static_cast<size_t>(max_id + 1), 0);
    for (const auto& [token, id] : t->token_to_id_) t->id_to_token_[id] = token;
    for (const AddedToken& a : added) {
      t->id_to_token_[a.id] = a.content;
      t->is_added_[a.id] = 1;
      t->token_to_id_[a.content] = a.id;
    }
    std::stable_sort(added.begin(), added.end(), [](const AddedToken& a, const AddedToken& b) {
      return a.content.size() > b.content.size();
    });
    t->added_ = std::move(added);

    // Merges: "a b" (older files) or ["a", "b"] (newer).
    int32_t rank = 0;
    for (const Json& m : model.at("merges")) {
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat(origin, ": model.merges[", rank, "]: '", s, "' is not 'a b'"));
        }
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else {
        left = m.at(0).get<std::string>();
        right = m.at(1).get<std::string>();
      }
      auto l = t->token_to_id_.find(left), r = t->token_to_id_.find(right),
           lr = t->token_to_id_.find(left + right);
      if (l == t->token_to_id_.end() || r == t->token_to_id_.end() || lr == t->token_to_id_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ": model.merges[", rank, "]: '",
                                                       left, "' + '", right,
                                                       "' has a part or result not in the vocab"));
      }
      const uint64_t key = (static_cast<uint64_t>(l->second) << 32) | uint32_t(r->second);
      t->merges_.emplace(key, std::make_pair(rank, lr->second));
      ++rank;
    }
    t->byte_fallback_ = model.value("byte_fallback", false);
    if (t->byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        auto it = t->token_to_id_.find(absl::StrFormat("<0x%02X>", b));
        if (it == t->token_to_id_.end()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: model.byte_fallback is true but token <0x%02X> is not in the vocab", origin, b));
        }
        t->byte_ids_[b] = it->second;
      }
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto it = t->token_to_id_.find(model["unk_token"].get<std::string>());
      if (it == t->token_to_id_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(origin, ": model.unk_token '",
                                                       model["unk_token"].get<std::string>(),
                                                       "' is not in the vocab"));
      }
      t->unk_id_ = it->second;
    }
    t->fuse_unk_ = model.value("fuse_unk", false);
    t->ignore_merges_ = model.value("ignore_merges", false);

    // Normalizer.
    {
      const std::vector<const Json*> steps = Steps(spec, "normalizer", "normalizers");
      for (const Json* s : steps) {
        ASSIGN_OR_RETURN(NormalForm f, ParseNormalForm(s->at("type"), origin));
        t->normalizers_.push_back(f);
      }
    }

    // Pre-tokenizer.
    {
      const std::vector<const Json*> steps = Steps(spec, "pre_tokenizer", "pretokenizers");
      for (const Json* s : steps) {
        const std::string type = s->at("type");
        PreStep step;
        std::string pattern;
        if (type == "ByteLevel") {
          step.kind = PreStep::Kind::kByteLevel;
          step.add_prefix_space = s->value("add_prefix_space", false);
          if (s->value("use_regex", true)) pattern = kGpt2Pattern;
          t->byte_level_ = true;
        } else if (type == "Split") {
          const std::string behavior = s->value("behavior", std::string("Isolated"));
          if (s->value("invert", false) || (behavior != "Isolated" && behavior != "Removed")) {
            return absl::UnimplementedError(
                absl::StrCat(origin, ": pre_tokenizer Split with behavior '", behavior,
                             "' or invert=true is not supported (supported: Isolated, Removed)"));
          }
          step.kind =
              behavior == "Isolated" ? PreStep::Kind::kSplitIsolated : PreStep::Kind::kSplitRemoved;
          const Json& pat = s->at("pattern");
          if (pat.contains("Regex")) {
            pattern = pat["Regex"].get<std::string>();
          } else {
            pattern = absl::StrCat("\\Q", pat.at("String").get<std::string>(), "\\E");
          }
        } else if (type == "Digits") {
          step.kind = PreStep::Kind::kDigits;
          pattern = s->value("individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        } else {
          return absl::UnimplementedError(
              absl::StrCat(origin, ": pre_tokenizer type '", type,
                           "' is not supported (supported: ByteLevel, Split, Digits, Sequence)"));
        }
        if (!pattern.empty()) {
          auto re = UnicodeRegex::Compile(pattern);
          if (!re.ok()) return Annotate(re.status(), absl::StrCat(origin, ": pre_tokenizer"));
          step.regex = std::make_shared<UnicodeRegex>(*std::move(re));
        }
        t->pre_.push_back(std::move(step));
      }
    }

    // Decoder.
    {
      const std::vector<const Json*> steps = Steps(spec, "decoder", "decoders");
      for (const Json* s : steps) {
        const std::string type = s->at("type");
        if (type == "ByteLevel") {
          t->decoders_.push_back(DecodeStep::kByteLevel);
        } else if (type == "ByteFallback") {
          t->decoders_.push_back(DecodeStep::kByteFallback);
        } else if (type == "Fuse") {
          t->decoders_.push_back(DecodeStep::kFuse);
        } else {
          return absl::UnimplementedError(absl::StrCat(
              origin, ": decoder type '", type,
              "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Sequence)"));
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", e.what()));
  }
  return t;
}

std::optional<int32_t> BpeTokenizer::TokenId(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

std::string BpeTokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_token_[id];
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  size_t seg_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : added_) {
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word) {
        const size_t e = i + a.content.size();
        if ((i > 0 && IsWordByte(text[i - 1])) || (e < text.size() && IsWordByte(text[e]))) {
          continue;
        }
      }
      hit = &a;
      break;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t begin = i, end = i + hit->content.size();
    if (hit->lstrip) {
      while (begin > seg_start && IsSpace(text[begin - 1])) --begin;
    }
    if (hit->rstrip) {
      while (end < text.size() && IsSpace(text[end])) ++end;
    }
    EncodeSegment(text.substr(seg_start, begin - seg_start), &out);
    out.push_back(hit->id);
    i = seg_start = end;
  }
  EncodeSegment(text.substr(seg_start), &out);
  return out;
}

void BpeTokenizer::EncodeSegment(std::string_view segment, std::vector<int32_t>* out) const {
  if (segment.empty()) return;
  std::string normalized(segment);
  for (NormalForm f : normalizers_) normalized = Normalize(normalized, f);
  std::vector<std::string> pieces = {normalized};
  for (const PreStep& step : pre_) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      if (step.kind == PreStep::Kind::kByteLevel && step.add_prefix_space &&
          (piece.empty() || piece[0] != ' ')) {
        piece.insert(piece.begin(), ' ');
      }
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      size_t pos = 0;
      for (const auto& [b, e] : step.regex->FindAll(piece)) {
        if (b > pos) next.push_back(piece.substr(pos, b - pos));
        if (step.kind != PreStep::Kind::kSplitRemoved) next.push_back(piece.substr(b, e - b));
        pos = e;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pieces = std::move(next);
  }
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    EncodeWord(byte_level_ ? ToByteLevel(piece) : piece, out);
  }
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = token_to_id_.find(std::string(word));
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = Utf8CharLen(word, i);
    auto it = token_to_id_.find(std::string(word.substr(i, len)));
    if (it != token_to_id_.end()) {
      symbols.push_back(it->second);
      last_unk = false;
    } else if (byte_fallback_) {
      for (size_t k = 0; k < len; ++k) {
        symbols.push_back(byte_ids_[static_cast<unsigned char>(word[i + k])]);
      }
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_unk)) symbols.push_back(unk_id_);
      last_unk = true;
    }  // else: no way to represent it; Hugging Face drops it too.
    i += len;
  }
  // Merge the lowest-ranked adjacent pair (leftmost on ties) until none is left.
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    int32_t merged = -1;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      const uint64_t key = (static_cast<uint64_t>(symbols[k]) << 32) | uint32_t(symbols[k + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best = k;
        merged = it->second.second;
      }
    }
    if (merged < 0) break;
    symbols[best] = merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
}

std::string BpeTokenizer::DecodeTokens(const std::vector<std::string>& tokens) const {
  std::vector<std::string> cur = tokens;
  for (DecodeStep step : decoders_) {
    std::vector<std::string> next;
    switch (step) {
      case DecodeStep::kByteLevel: {
        std::string joined;
        for (const std::string& t : cur) joined += t;
        next.push_back(FromByteLevel(joined));
        break;
      }
      case DecodeStep::kByteFallback: {
        std::string bytes;
        auto flush = [&] {
          if (bytes.empty()) return;
          if (IsValidUtf8(bytes)) {
            next.push_back(bytes);
          } else {
            for (size_t k = 0; k < bytes.size(); ++k) next.push_back("\xEF\xBF\xBD");
          }
          bytes.clear();
        };
        for (const std::string& t : cur) {
          const int v = ByteTokenValue(t);
          if (v >= 0) {
            bytes.push_back(static_cast<char>(v));
          } else {
            flush();
            next.push_back(t);
          }
        }
        flush();
        break;
      }
      case DecodeStep::kFuse: {
        std::string joined;
        for (const std::string& t : cur) joined += t;
        next.push_back(std::move(joined));
        break;
      }
    }
    cur = std::move(next);
  }
  // Without a decoder Hugging Face joins tokens with spaces.
  std::string out;
  for (size_t k = 0; k < cur.size(); ++k) {
    if (k > 0 && decoders_.empty()) out += ' ';
    out += cur[k];
  }
  return out;
}

std::string BpeTokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  std::vector<std::string> pending;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (is_added_[id]) {
      if (!pending.empty()) out += DecodeTokens(pending);
      pending.clear();
      out += id_to_token_[id];
    } else {
      pending.push_back(id_to_token_[id]);
    }
  }
  if (!pending.empty()) out += DecodeTokens(pending);
  return out;
}

}  // namespace rlforge::models
