#include "models/chat_template.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/check.h"

namespace rlforge::models {

std::vector<std::string> KnownPromptTemplates() { return {"none", "chatml"}; }

absl::StatusOr<PromptTemplate> PromptTemplate::Create(const std::string& name_or_text) {
  PromptTemplate t;
  t.name_ = name_or_text;
  if (name_or_text == "chatml") {
    t.end_of_turn_ = "<|im_end|>";
  } else if (name_or_text != "none") {
    if (name_or_text.find("{user}") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt template '", name_or_text,
                       "' is neither none, chatml nor a custom template containing {user}"));
    }
    t.name_ = "custom";
    t.text_ = name_or_text;
  }
  return t;
}

std::string PromptTemplate::Apply(const std::string& system, const std::string& user) const {
  if (name_ == "chatml") {
    std::string out;
    if (!system.empty()) absl::StrAppend(&out, "<|im_start|>system\n", system, "<|im_end|>\n");
    absl::StrAppend(&out, "<|im_start|>user\n", user, "<|im_end|>\n<|im_start|>assistant\n");
    return out;
  }
  if (name_ == "custom") {
    // One pass, so a "{user}" inside the system text is not replaced again.
    return absl::StrReplaceAll(text_, {{"{system}", system}, {"{user}", user}});
  }
  if (system.empty()) return user;
  return absl::StrCat(system, "\n\n", user);
}

std::string ApplyPromptTemplate(const std::string& template_name, const std::string& system,
                                const std::string& user) {
  auto t = PromptTemplate::Create(template_name);
  RF_CHECK(t.ok()) << t.status().message();
  return t->Apply(system, user);
}

std::vector<int32_t> EncodePrompt(const Tokenizer& tok, const PromptTemplate& tmpl,
                                  const std::string& system, const std::string& prompt) {
  std::vector<int32_t> ids;
  if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  auto body = tok.Encode(tmpl.Apply(system, prompt));
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> EncodeResponse(const Tokenizer& tok, const PromptTemplate& tmpl,
                                    const std::string& response) {
  std::vector<int32_t> ids = tok.Encode(response + tmpl.end_of_turn());
  ids.push_back(tok.eos_id());
  return ids;
}

}  // namespace rlforge::models
