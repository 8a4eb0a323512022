// Prompt templates: how a (system, user) pair becomes the text the policy continues.
//
// (system, user) -> template -> prompt text (ends where the assistant's reply starts)
//
// Built in: "none" (the user text as is, after the system text and a blank line when there is
// one) and "chatml" (<|im_start|>role\n...<|im_end|>\n turns, as Qwen2 uses). "model" renders
// the checkpoint's own Jinja chat template (templating/) over [system?, user] with
// add_generation_prompt=true, as transformers' apply_chat_template does (no bos is added: the
// template writes bos_token where it wants one). Any other value that contains "{user}" is a
// custom template: "{system}" and "{user}" are replaced, nothing else is touched. A job names
// its template in YAML; Create checks it when the job loads its tokenizer.
//
// What the assistant writes, for a "model" template, is read off the template itself: render
// [system?, user, assistant: PROBE] without a generation prompt, check that the prompt above
// is a prefix of it, and split what follows into response_prefix (markup before the content,
// e.g. Qwen3's empty "<think>\n\n</think>\n\n"), PROBE, and end_of_turn (what follows the
// content, its trailing whitespace dropped: "<|im_end|>\n" -> "<|im_end|>", since generation
// stops there and the next turn's render writes the glue again).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizer.h"
#include "templating/template.h"

namespace rlforge::models {

class PromptTemplate {
 public:
  // "none", "chatml", "model" or a custom template text; anything else is an error naming
  // the value. "model" needs `tokenizer` (the checkpoint's), with a chat template that parses
  // and renders both prompt shapes; errors name the template's file, line and column.
  static absl::StatusOr<PromptTemplate> Create(const std::string& name_or_text,
                                               const Tokenizer* tokenizer = nullptr);

  // A "model" template that raises for this particular text aborts naming the error (Create
  // has rendered both prompt shapes, so only a template that inspects the text can).
  std::string Apply(const std::string& system, const std::string& user) const;
  // What closes the assistant's turn ("<|im_end|>" for chatml, derived for model, "" otherwise):
  // SFT appends it to the response target, and generation may stop on it.
  const std::string& end_of_turn() const { return end_of_turn_; }
  // What the assistant's turn starts with before its content ("" except for model templates
  // that write one): SFT trains it as part of the response.
  const std::string& response_prefix() const { return response_prefix_; }
  const std::string& name() const { return name_; }
  // Whether EncodePrompt adds the tokenizer's bos (false for model templates).
  bool adds_bos() const { return name_ != "model"; }

  // Decoded response text (eos already dropped) without response_prefix and end_of_turn.
  std::string ResponseText(std::string decoded) const;

 private:
  absl::StatusOr<std::string> RenderModel(const std::string& system, const std::string& user,
                                          const std::string* assistant) const;
  absl::Status DeriveAssistantTurn();

  std::string name_;
  std::string text_;  // custom templates
  std::string end_of_turn_;
  std::string response_prefix_;
  std::optional<templating::Template> model_;  // "model"
  templating::Dict special_tokens_;            // bos_token, eos_token, pad_token for "model"
};

std::vector<std::string> KnownPromptTemplates();  // the built-in names

// The contract's shorthand. `template_name` must be valid (checked at config load); an invalid
// one is an internal error that aborts with its name.
std::string ApplyPromptTemplate(const std::string& template_name, const std::string& system,
                                const std::string& user);

// Token ids as a policy sees and writes them, shared by SFT and the RL jobs so both agree:
// the prompt (template applied, bos first when the tokenizer has one and the template is not
// the model's), and the response (response_prefix, its text, the template's end of turn, then
// eos; for model templates no second eos when the end of turn already ends with it).
std::vector<int32_t> EncodePrompt(const Tokenizer& tok, const PromptTemplate& tmpl,
                                  const std::string& system, const std::string& prompt);
std::vector<int32_t> EncodeResponse(const Tokenizer& tok, const PromptTemplate& tmpl,
                                    const std::string& response);
// The text of a generated response: `tokens` decoded without a final eos, then
// ResponseText. What rewards, held-out evaluation and `rlforge generate` read.
std::string DecodeResponse(const Tokenizer& tok, const PromptTemplate& tmpl,
                           std::vector<int32_t> tokens);

}  // namespace rlforge::models
