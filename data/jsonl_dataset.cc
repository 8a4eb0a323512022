#include "data/jsonl_dataset.h"

#include <fstream>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace rlforge {

namespace {

using Json = nlohmann::json;

// Calls `fn(object, where)` for each non-blank line; `where` is "file:line".
absl::Status ForEachObject(const std::string& path,
                           const std::function<absl::Status(const Json&, const std::string&)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::string line;
  int64_t number = 0;
  int64_t objects = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = absl::StrCat(path, ":", number);
    Json obj;
    try {
      obj = Json::parse(line);
    } catch (const Json::parse_error& e) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not valid JSON: ", e.what()));
    }
    if (!obj.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected a JSON object, got ", obj.type_name()));
    }
    RETURN_IF_ERROR(fn(obj, where));
    ++objects;
  }
  if (objects == 0) return absl::InvalidArgumentError(absl::StrCat(path, ": no examples"));
  return absl::OkStatus();
}

absl::Status GetString(const Json& obj, const std::string& key, bool required,
                       const std::string& where, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(where, ": key '", key, "': missing"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": key '", key, "': expected a string, got ", it->type_name()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// A GSM8K line: the question is the prompt, the whole worked answer the response, and the
// text after its last "####" the answer.
absl::Status ReadGsm8k(const Json& obj, const std::string& where, PromptExample* ex) {
  RETURN_IF_ERROR(GetString(obj, "question", true, where, &ex->prompt));
  RETURN_IF_ERROR(GetString(obj, "answer", true, where, &ex->response));
  const size_t at = ex->response.rfind("####");
  const std::string final_answer =
      at == std::string::npos
          ? ""
          : std::string(absl::StripAsciiWhitespace(ex->response.substr(at + 4)));
  if (final_answer.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": key 'answer': no final '#### <answer>' (GSM8K format)"));
  }
  ex->answer = final_answer;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PromptExample>> ReadPromptJsonl(const std::string& path,
                                                           JsonlFormat format) {
  std::vector<PromptExample> out;
  const bool sft = format == JsonlFormat::kSft;
  RETURN_IF_ERROR(ForEachObject(path, [&](const Json& obj, const std::string& where) {
    PromptExample ex;
    if (!obj.contains("prompt") && obj.contains("question")) {
      RETURN_IF_ERROR(ReadGsm8k(obj, where, &ex));
      out.push_back(std::move(ex));
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(GetString(obj, "prompt", true, where, &ex.prompt));
    RETURN_IF_ERROR(GetString(obj, "response", sft, where, &ex.response));
    RETURN_IF_ERROR(GetString(obj, "answer", !sft, where, &ex.answer));
    out.push_back(std::move(ex));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<PreferenceExample>> ReadPreferenceJsonl(const std::string& path) {
  std::vector<PreferenceExample> out;
  RETURN_IF_ERROR(ForEachObject(path, [&](const Json& obj, const std::string& where) {
    PreferenceExample ex;
    RETURN_IF_ERROR(GetString(obj, "prompt", true, where, &ex.prompt));
    RETURN_IF_ERROR(GetString(obj, "chosen", true, where, &ex.chosen));
    RETURN_IF_ERROR(GetString(obj, "rejected", true, where, &ex.rejected));
    out.push_back(std::move(ex));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadPromptLines(std::istream& in,
                                                         const std::string& name) {
  std::vector<std::string> prompts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    if (line[start] != '{') {
      prompts.push_back(line);
      continue;
    }
    const std::string where = absl::StrCat(name, ":", number);
    Json obj = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded() || !obj.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": a line that starts with '{' must be a JSON object with \"prompt\""));
    }
    const std::string key =
        obj.contains("prompt") || !obj.contains("question") ? "prompt" : "question";
    std::string prompt;
    RETURN_IF_ERROR(GetString(obj, key, true, where, &prompt));
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": no prompts"));
  return prompts;
}

absl::Status WritePromptJsonl(const std::string& path, const std::vector<PromptExample>& examples) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  for (const auto& ex : examples) {
    Json obj = {{"prompt", ex.prompt}, {"response", ex.response}};
    if (!ex.answer.empty()) obj["answer"] = ex.answer;
    out << obj.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  return absl::OkStatus();
}

}  // namespace rlforge
