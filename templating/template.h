// A Jinja template renderer for the subset Hugging Face chat templates use, rendering as
// transformers' apply_chat_template does (jinja2 with trim_blocks and lstrip_blocks, the
// loopcontrols extension, tojson as json.dumps(ensure_ascii=False), raise_exception,
// strftime_now, namespace, {% generation %}).
//
// template text -> lexer (whitespace control) -> parser (AST) -> renderer(context) -> text
//
// Supported: {{ }}, {% %}, {# #} and their "-"/"+" markers; if/elif/else; for (with tuple
// targets, `if` filters, else, loop.index/index0/revindex/revindex0/first/last/length/
// previtem/nextitem, break/continue); set (also of a namespace attribute, and block set);
// macro with defaults; literals (str, int, float, list, tuple, dict, true/false/none);
// attribute, item and slice access; not/and/or (Python's values), comparisons, in / not in,
// + - * / // % **, ~, `x if c else y`; the filters and tests in builtins.h; str methods strip
// lstrip rstrip split startswith endswith replace upper lower title capitalize find count
// join, dict methods items keys values get. Undefined names are jinja2's default Undefined:
// empty when printed, false, empty when iterated; using one otherwise is an error.
//
// A parsed Template is immutable: Render may run on several threads at once.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "templating/value.h"

namespace rlforge::templating {

namespace internal {
struct Node;
}

struct RenderOptions {
  // strftime_now's clock (read as local time); empty: the system clock.
  std::function<std::chrono::system_clock::time_point()> now;
};

class Template {
 public:
  // Errors read "NAME:LINE:COLUMN: what is wrong", LINE and COLUMN counted in `source`.
  static absl::StatusOr<Template> Parse(const std::string& source, std::string name);

  // `context` holds the template's variables (messages, add_generation_prompt, bos_token, ...).
  // Errors (raise_exception included) name the line and column of the expression that failed.
  absl::StatusOr<std::string> Render(const Dict& context, const RenderOptions& options = {}) const;

  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::unique_ptr<internal::Node>>> body_;
};

}  // namespace rlforge::templating
