// tokenizer.json -> BpeTokenizer: the parsing half of bpe_tokenizer.h (encode/decode are in
// bpe_tokenizer.cc).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "models/bpe_tokenizer.h"

namespace rlforge::models {

namespace {

using Json = nlohmann::json;

constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards.

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

    RETURN_IF_ERROR(t->ParseNormalizers(spec, origin));

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
        } else if (type == "Metaspace") {
          step.kind = PreStep::Kind::kMetaspace;
          step.replacement = s->value("replacement", std::string("\u2581"));
          step.prepend_scheme = s->value("prepend_scheme", std::string());
          if (step.prepend_scheme.empty()) {  // older files: add_prefix_space
            step.prepend_scheme = s->value("add_prefix_space", true) ? "always" : "never";
          }
          step.split = s->value("split", true);
          if (Utf8CharLen(step.replacement, 0) != step.replacement.size() ||
              (step.prepend_scheme != "always" && step.prepend_scheme != "first" &&
               step.prepend_scheme != "never")) {
            return absl::InvalidArgumentError(
                absl::StrCat(origin,
                             ": pre_tokenizer Metaspace: replacement must be one character and "
                             "prepend_scheme always, first or never"));
          }
        } else if (type == "Digits") {
          step.kind = PreStep::Kind::kDigits;
          pattern = s->value("individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        } else {
          return absl::UnimplementedError(absl::StrCat(
              origin, ": pre_tokenizer type '", type,
              "' is not supported (supported: ByteLevel, Split, Digits, Metaspace, Sequence)"));
        }
        if (!pattern.empty()) {
          auto re = UnicodeRegex::Compile(pattern);
          if (!re.ok()) return Annotate(re.status(), absl::StrCat(origin, ": pre_tokenizer"));
          step.regex = std::make_shared<UnicodeRegex>(*std::move(re));
        }
        t->pre_.push_back(std::move(step));
      }
    }

    RETURN_IF_ERROR(t->ParseDecoders(spec, origin));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": ", e.what()));
  }
  return t;
}

absl::Status BpeTokenizer::ParseNormalizers(const Json& spec, const std::string& origin) {
  for (const Json* s : Steps(spec, "normalizer", "normalizers")) {
    const std::string type = s->at("type");
    NormStep step;
    if (type == "Prepend") {
      step.kind = NormStep::Kind::kPrepend;
      step.content = s->at("prepend").get<std::string>();
    } else if (type == "Replace") {
      step.kind = NormStep::Kind::kReplace;
      step.content = s->at("content").get<std::string>();
      const Json& pat = s->at("pattern");
      if (pat.contains("Regex")) {
        auto re = UnicodeRegex::Compile(pat["Regex"].get<std::string>());
        if (!re.ok()) return Annotate(re.status(), absl::StrCat(origin, ": normalizer Replace"));
        step.regex = std::make_shared<UnicodeRegex>(*std::move(re));
      } else {
        step.pattern = pat.at("String").get<std::string>();
        if (step.pattern.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(origin, ": normalizer Replace: empty pattern"));
        }
      }
    } else {
      step.kind = NormStep::Kind::kForm;
      ASSIGN_OR_RETURN(step.form, ParseNormalForm(type, origin));
    }
    normalizers_.push_back(std::move(step));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ParseDecoders(const Json& spec, const std::string& origin) {
  for (const Json* s : Steps(spec, "decoder", "decoders")) {
    const std::string type = s->at("type");
    DecodeStep step;
    if (type == "ByteLevel") {
      step.kind = DecodeStep::Kind::kByteLevel;
    } else if (type == "ByteFallback") {
      step.kind = DecodeStep::Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = DecodeStep::Kind::kFuse;
    } else if (type == "Replace") {
      step.kind = DecodeStep::Kind::kReplace;
      const Json& pat = s->at("pattern");
      if (!pat.contains("String") || pat["String"].get<std::string>().empty()) {
        return absl::UnimplementedError(
            absl::StrCat(origin, ": decoder Replace: only non-empty String patterns"));
      }
      step.from = pat["String"].get<std::string>();
      step.to = s->at("content").get<std::string>();
    } else if (type == "Strip") {
      step.kind = DecodeStep::Kind::kStrip;
      step.strip = s->at("content").get<std::string>();
      step.start = s->value("start", 0);
      step.stop = s->value("stop", 0);
    } else if (type == "Metaspace") {
      step.kind = DecodeStep::Kind::kMetaspace;
      step.from = s->value("replacement", std::string("\u2581"));
      std::string scheme = s->value("prepend_scheme", std::string());
      if (scheme.empty()) scheme = s->value("add_prefix_space", true) ? "always" : "never";
      step.prepend = scheme != "never";
    } else {
      return absl::UnimplementedError(absl::StrCat(
          origin, ": decoder type '", type,
          "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Replace, Strip, "
          "Metaspace, Sequence)"));
    }
    decoders_.push_back(std::move(step));
  }
  return absl::OkStatus();
}

}  // namespace rlforge::models
