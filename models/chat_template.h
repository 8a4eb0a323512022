// Prompt templates: how a (system, user) pair becomes the text the policy continues.
//
// (system, user) -> template -> prompt text (ends where the assistant's reply starts)
//
// Built in: "none" (the user text as is, after the system text and a blank line when there is
// one) and "chatml" (<|im_start|>role\n...<|im_end|>\n turns, as Qwen2 uses). Any other value
// that contains "{user}" is a custom template: "{system}" and "{user}" are replaced, nothing
// else is touched. A job names its template in YAML; validate it with PromptTemplate::Create
// at config load so a typo is an error there, not mid-run.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizer.h"

namespace rlforge::models {

class PromptTemplate {
 public:
  // "none", "chatml" or a custom template text; anything else is an error naming the value.
  static absl::StatusOr<PromptTemplate> Create(const std::string& name_or_text);

  std::string Apply(const std::string& system, const std::string& user) const;
  // What closes the assistant's turn ("<|im_end|>" for chatml, "" otherwise): SFT appends it
  // to the response target, and generation may stop on it.
  const std::string& end_of_turn() const { return end_of_turn_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string text_;  // custom templates
  std::string end_of_turn_;
};

std::vector<std::string> KnownPromptTemplates();  // the built-in names

// The contract's shorthand. `template_name` must be valid (checked at config load); an invalid
// one is an internal error that aborts with its name.
std::string ApplyPromptTemplate(const std::string& template_name, const std::string& system,
                                const std::string& user);

// Token ids as a policy sees and writes them, shared by SFT and the RL jobs so both agree:
// the prompt (template applied, bos first when the tokenizer has one), and the response
// (its text, the template's end of turn, then eos).
std::vector<int32_t> EncodePrompt(const Tokenizer& tok, const PromptTemplate& tmpl,
                                  const std::string& system, const std::string& prompt);
std::vector<int32_t> EncodeResponse(const Tokenizer& tok, const PromptTemplate& tmpl,
                                    const std::string& response);

}  // namespace rlforge::models
