#include "models/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "models/bpe_tokenizer.h"
#include "models/unicode_text.h"
#include "nlohmann/json.hpp"

namespace rlforge::models {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr char kCharFormat[] = "rlforge-char";

// One token per code point of a fixed alphabet; special tokens first. Format in
// docs/tokenizers.md.
class CharTokenizer final : public Tokenizer {
 public:
  CharTokenizer(std::vector<std::string> specials, std::vector<std::string> chars, int32_t unk_id)
      : specials_(std::move(specials)), chars_(std::move(chars)), unk_id_(unk_id) {
    for (size_t i = 0; i < specials_.size(); ++i) ids_[specials_[i]] = static_cast<int32_t>(i);
    for (size_t i = 0; i < chars_.size(); ++i) {
      ids_[chars_[i]] = static_cast<int32_t>(specials_.size() + i);
    }
    by_length_ = specials_;
    std::stable_sort(
        by_length_.begin(), by_length_.end(),
        [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  }
  void SetSpecialIds(int32_t eos, int32_t bos, int32_t pad) {
    eos_id_ = eos, bos_id_ = bos, pad_id_ = pad;
  }
  void SetChatTemplate(std::string text, std::string origin) {
    chat_template_ = std::move(text);
    chat_template_origin_ = std::move(origin);
  }

  std::vector<int32_t> Encode(std::string_view text) const override {
    std::vector<int32_t> out;
    for (size_t i = 0; i < text.size();) {
      const std::string* special = nullptr;
      for (const std::string& s : by_length_) {
        if (text.compare(i, s.size(), s) == 0) {
          special = &s;
          break;
        }
      }
      if (special != nullptr) {
        out.push_back(ids_.at(*special));
        i += special->size();
        continue;
      }
      const size_t len = Utf8CharLen(text, i);
      auto it = ids_.find(std::string(text.substr(i, len)));
      out.push_back(it != ids_.end() && it->second >= static_cast<int32_t>(specials_.size())
                        ? it->second
                        : unk_id_);
      i += len;
    }
    return out;
  }
  std::string Decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += TokenText(id);
    return out;
  }
  int64_t vocab_size() const override {
    return static_cast<int64_t>(specials_.size() + chars_.size());
  }
  std::optional<int32_t> TokenId(std::string_view token) const override {
    auto it = ids_.find(std::string(token));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::string TokenText(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const size_t i = static_cast<size_t>(id);
    return i < specials_.size() ? specials_[i] : chars_[i - specials_.size()];
  }
  std::string kind() const override { return "char"; }

  Json ToJson() const {
    auto name = [&](int32_t id) { return id < 0 ? Json(nullptr) : Json(TokenText(id)); };
    return Json{{"format", kCharFormat},       {"version", 1},
                {"special_tokens", specials_}, {"chars", chars_},
                {"eos_token", name(eos_id_)},  {"bos_token", name(bos_id_)},
                {"pad_token", name(pad_id_)},  {"unk_token", name(unk_id_)}};
  }

 private:
  std::vector<std::string> specials_;
  std::vector<std::string> chars_;
  std::vector<std::string> by_length_;  // specials, longest first
  std::map<std::string, int32_t> ids_;
  int32_t unk_id_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<Json> ParseJson(const std::string& text, const std::string& path) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
}

// A token entry of tokenizer_config.json: "text", {"content": "text"} or null/absent -> "".
absl::StatusOr<std::string> ConfigToken(const Json& config, const std::string& key,
                                        const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return std::string();
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": ", key, ": expected a string, {\"content\": ...} or null"));
}

absl::StatusOr<int32_t> ResolveToken(const Tokenizer& t, const std::string& token,
                                     const std::string& key, const std::string& path) {
  auto id = t.TokenId(token);
  if (!id) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", key, ": token '", token, "' is not in the vocabulary"));
  }
  return *id;
}

absl::StatusOr<std::unique_ptr<CharTokenizer>> BuildChar(std::vector<std::string> specials,
                                                         std::vector<std::string> chars,
                                                         const std::string& unk,
                                                         const std::string& where) {
  std::map<std::string, int> seen;
  for (const auto& s : specials) {
    if (s.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty special token"));
    if (seen[s]++) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": special token '", s, "' appears twice"));
    }
  }
  for (const auto& c : chars) {
    if (c.empty() || Utf8CharLen(c, 0) != c.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": '", c, "' is not a single UTF-8 character"));
    }
    if (seen[c]++) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": character '", c, "' appears twice"));
    }
  }
  auto it = std::find(specials.begin(), specials.end(), unk);
  if (it == specials.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unk_token '", unk, "' must be one of the special tokens"));
  }
  const auto unk_id = static_cast<int32_t>(it - specials.begin());
  return std::make_unique<CharTokenizer>(std::move(specials), std::move(chars), unk_id);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> CharFromJson(const Json& spec, const std::string& path) {
  try {
    if (spec.value("version", 0) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": version: expected 1"));
    }
    return BuildChar(spec.at("special_tokens").get<std::vector<std::string>>(),
                     spec.at("chars").get<std::vector<std::string>>(),
                     spec.at("unk_token").get<std::string>(), path);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
}

// The chat template of a checkpoint directory: chat_template.jinja first (transformers 5
// writes it and prefers it), then tokenizer_config.json's chat_template. {"", ""} if none.
absl::StatusOr<std::pair<std::string, std::string>> FindChatTemplate(
    const std::string& dir, const Json& config, const std::string& config_path) {
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (fs::exists(jinja_path)) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(jinja_path));
    return std::make_pair(std::move(text), jinja_path);
  }
  if (!config.is_object() || !config.contains("chat_template")) {
    return std::make_pair(std::string(), std::string());
  }
  const std::string origin = config_path + ": chat_template";
  const Json& t = config["chat_template"];
  if (t.is_string()) return std::make_pair(t.get<std::string>(), origin);
  if (t.is_array()) {  // named templates: [{"name": "default", "template": "..."}, ...]
    for (const Json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return std::make_pair(named["template"].get<std::string>(), origin + "[default]");
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(origin,
                   ": expected a string or a list with a {\"name\": \"default\", "
                   "\"template\": ...} entry"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir) {
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(Json spec, ParseJson(text, path));
  if (!spec.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not an object"));

  std::unique_ptr<Tokenizer> t;
  Json names;  // where eos/bos/pad are named
  std::string names_path;
  const bool is_char = spec.value("format", std::string()) == kCharFormat;
  if (is_char) {
    ASSIGN_OR_RETURN(t, CharFromJson(spec, path));
    names = spec;
    names_path = path;
  } else if (spec.contains("model")) {
    ASSIGN_OR_RETURN(t, BpeTokenizer::FromJson(spec, path, std::move(text)));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": neither a Hugging Face tokenizer (no 'model') nor format '", kCharFormat, "'"));
  }
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(config_path)) {
    ASSIGN_OR_RETURN(std::string config_text, ReadFile(config_path));
    ASSIGN_OR_RETURN(names, ParseJson(config_text, config_path));
    names_path = config_path;
  }
  if (names_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": no tokenizer_config.json, so the eos token is unknown (add one with eos_token)"));
  }
  ASSIGN_OR_RETURN(std::string eos, ConfigToken(names, "eos_token", names_path));
  ASSIGN_OR_RETURN(std::string bos, ConfigToken(names, "bos_token", names_path));
  ASSIGN_OR_RETURN(std::string pad, ConfigToken(names, "pad_token", names_path));
  if (eos.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(names_path, ": eos_token: missing"));
  }
  ASSIGN_OR_RETURN(t->eos_id_, ResolveToken(*t, eos, "eos_token", names_path));
  if (!bos.empty()) {
    ASSIGN_OR_RETURN(t->bos_id_, ResolveToken(*t, bos, "bos_token", names_path));
  }
  if (pad.empty()) {
    t->pad_id_ = t->eos_id_;
  } else {
    ASSIGN_OR_RETURN(t->pad_id_, ResolveToken(*t, pad, "pad_token", names_path));
  }
  ASSIGN_OR_RETURN(std::tie(t->chat_template_, t->chat_template_origin_),
                   FindChatTemplate(dir, names, names_path));
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeCharTokenizer(const std::string& alphabet,
                                                             const CharTokenizerOptions& options) {
  std::vector<std::string> chars;
  for (size_t i = 0; i < alphabet.size();) {
    const size_t len = Utf8CharLen(alphabet, i);
    chars.push_back(alphabet.substr(i, len));
    i += len;
  }
  ASSIGN_OR_RETURN(auto t, BuildChar(options.special_tokens, std::move(chars), options.unk_token,
                                     "char tokenizer"));
  auto id = [&](const std::string& token, const char* key) -> absl::StatusOr<int32_t> {
    auto found = t->TokenId(token);
    if (!found || *found >= static_cast<int32_t>(options.special_tokens.size())) {
      return absl::InvalidArgumentError(absl::StrCat("char tokenizer: ", key, " '", token,
                                                     "' must be one of the special tokens"));
    }
    return *found;
  };
  ASSIGN_OR_RETURN(int32_t eos, id(options.eos_token, "eos_token"));
  ASSIGN_OR_RETURN(int32_t pad, id(options.pad_token, "pad_token"));
  int32_t bos = -1;
  if (!options.bos_token.empty()) {
    ASSIGN_OR_RETURN(bos, id(options.bos_token, "bos_token"));
  }
  t->SetSpecialIds(eos, bos, pad);
  t->SetChatTemplate(options.chat_template, options.chat_template_origin);
  return std::unique_ptr<Tokenizer>(std::move(t));
}

absl::Status SaveTokenizer(const Tokenizer& tokenizer, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot create: ", ec.message()));
  std::string tokenizer_json;
  if (const auto* c = dynamic_cast<const CharTokenizer*>(&tokenizer)) {
    tokenizer_json = c->ToJson().dump(1) + "\n";
  } else if (const auto* b = dynamic_cast<const BpeTokenizer*>(&tokenizer)) {
    tokenizer_json = b->raw_json();
  } else {
    return absl::InvalidArgumentError("SaveTokenizer: unknown tokenizer implementation");
  }
  auto name = [&](int32_t id) { return id < 0 ? Json(nullptr) : Json(tokenizer.TokenText(id)); };
  const Json config = {{"eos_token", name(tokenizer.eos_id())},
                       {"bos_token", name(tokenizer.bos_id())},
                       {"pad_token", name(tokenizer.pad_id())}};
  std::vector<std::pair<std::string, std::string>> files = {
      {"tokenizer.json", tokenizer_json}, {"tokenizer_config.json", config.dump(1) + "\n"}};
  if (!tokenizer.chat_template().empty()) {
    files.emplace_back("chat_template.jinja", tokenizer.chat_template());
  }
  for (const auto& [file, body] : files) {
    const std::string path = (fs::path(dir) / file).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << body;
    if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  }
  return absl::OkStatus();
}

}  // namespace rlforge::models
