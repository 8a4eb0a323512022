#include "models/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/check.h"
#include "common/status.h"

namespace rlforge::models {

std::vector<std::string> KnownPromptTemplates() { return {"none", "chatml", "model"}; }

namespace {

// The assistant content the response split looks for; plain words no template rewrites.
constexpr char kProbe[] = "RLFORGE ASSISTANT PROBE";

templating::Value Message(const std::string& role, const std::string& content) {
  return templating::Value(
      templating::Dict{{"role", templating::Value(role)}, {"content", templating::Value(content)}});
}

}  // namespace

absl::StatusOr<std::string> PromptTemplate::RenderModel(const std::string& system,
                                                        const std::string& user,
                                                        const std::string* assistant) const {
  templating::List messages;
  if (!system.empty()) messages.push_back(Message("system", system));
  messages.push_back(Message("user", user));
  if (assistant != nullptr) messages.push_back(Message("assistant", *assistant));
  // The variables transformers' apply_chat_template passes.
  templating::Dict context = special_tokens_;
  context.emplace_back("messages", templating::Value(std::move(messages)));
  context.emplace_back("tools", templating::Value::None());
  context.emplace_back("documents", templating::Value::None());
  context.emplace_back("add_generation_prompt", templating::Value(assistant == nullptr));
  return model_->Render(context);
}

absl::Status PromptTemplate::DeriveAssistantTurn() {
  const std::string probe = kProbe;
  for (const std::string system : {"", "You are helpful."}) {
    ASSIGN_OR_RETURN(const std::string prompt, RenderModel(system, "What is 1+1?", nullptr));
    ASSIGN_OR_RETURN(const std::string full, RenderModel(system, "What is 1+1?", &probe));
    const std::string where =
        absl::StrCat(model_->name(), ": with ", system.empty() ? "no" : "a", " system message, ");
    if (full.compare(0, prompt.size(), prompt) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       "the conversation with the assistant's reply does not start with the prompt "
                       "(add_generation_prompt=true), so the response tokens cannot be derived"));
    }
    const std::string turn = full.substr(prompt.size());
    const size_t at = turn.find(probe);
    if (at == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the assistant's content does not appear in its rendered turn"));
    }
    std::string eot = turn.substr(at + probe.size());
    eot.erase(eot.find_last_not_of(" \t\r\n") + 1);
    if (!system.empty() && (turn.substr(0, at) != response_prefix_ || eot != end_of_turn_)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the assistant's turn is written differently than without one"));
    }
    response_prefix_ = turn.substr(0, at);
    end_of_turn_ = eot;
  }
  return absl::OkStatus();
}

absl::StatusOr<PromptTemplate> PromptTemplate::Create(const std::string& name_or_text,
                                                      const Tokenizer* tokenizer) {
  PromptTemplate t;
  t.name_ = name_or_text;
  if (name_or_text == "chatml") {
    t.end_of_turn_ = "<|im_end|>";
  } else if (name_or_text == "model") {
    if (tokenizer == nullptr || tokenizer->chat_template().empty()) {
      return absl::InvalidArgumentError(
          "prompt template 'model' needs a checkpoint with a chat template (chat_template in "
          "tokenizer_config.json, or chat_template.jinja)");
    }
    ASSIGN_OR_RETURN(t.model_, templating::Template::Parse(tokenizer->chat_template(),
                                                           tokenizer->chat_template_origin()));
    for (const auto& [key, id] : {std::pair<const char*, int32_t>{"bos_token", tokenizer->bos_id()},
                                  {"eos_token", tokenizer->eos_id()},
                                  {"pad_token", tokenizer->pad_id()}}) {
      if (id >= 0) t.special_tokens_.emplace_back(key, templating::Value(tokenizer->TokenText(id)));
    }
    RETURN_IF_ERROR(t.DeriveAssistantTurn());
  } else if (name_or_text != "none") {
    if (name_or_text.find("{user}") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt template '", name_or_text,
                       "' is neither none, chatml, model nor a custom template containing {user}"));
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
  if (name_ == "model") {
    auto text = RenderModel(system, user, nullptr);
    RF_CHECK(text.ok()) << text.status().message();
    return *text;
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

std::string PromptTemplate::ResponseText(std::string decoded) const {
  if (!response_prefix_.empty() && absl::StartsWith(decoded, response_prefix_)) {
    decoded.erase(0, response_prefix_.size());
  }
  if (!end_of_turn_.empty() && absl::EndsWith(decoded, end_of_turn_)) {
    decoded.resize(decoded.size() - end_of_turn_.size());
  }
  return decoded;
}

std::vector<int32_t> EncodePrompt(const Tokenizer& tok, const PromptTemplate& tmpl,
                                  const std::string& system, const std::string& prompt) {
  std::vector<int32_t> ids;
  if (tmpl.adds_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  auto body = tok.Encode(tmpl.Apply(system, prompt));
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::vector<int32_t> EncodeResponse(const Tokenizer& tok, const PromptTemplate& tmpl,
                                    const std::string& response) {
  std::vector<int32_t> ids = tok.Encode(tmpl.response_prefix() + response + tmpl.end_of_turn());
  if (tmpl.name() != "model" || ids.empty() || ids.back() != tok.eos_id()) {
    ids.push_back(tok.eos_id());
  }
  return ids;
}

std::string DecodeResponse(const Tokenizer& tok, const PromptTemplate& tmpl,
                           std::vector<int32_t> tokens) {
  if (!tokens.empty() && tokens.back() == tok.eos_id()) tokens.pop_back();
  return tmpl.ResponseText(tok.Decode(tokens));
}

}  // namespace rlforge::models
