// Internal: splits a Jinja template into text and tag tokens, applying whitespace control
// the way transformers configures jinja2 (trim_blocks, lstrip_blocks, keep_trailing_newline
// off, "\r\n" read as "\n").
//
// source -> [text | {{ expr-tokens }} | {% expr-tokens %}]   (comments dropped)
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace rlforge::templating::internal {

// Every error inside the renderer; the public API turns it into an absl::Status naming the
// template, line and column. line == 0 until the nearest node that knows its place sets it.
struct TemplateError {
  std::string message;
  int line = 0;
  int col = 0;
};

struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd
  };
  Kind kind = Kind::kEnd;
  std::string text;  // text, name, string value, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int col = 1;
};

// Throws TemplateError (with line and column) on an unterminated tag, comment or string and
// on a character no expression can hold.
std::vector<Token> Tokenize(const std::string& source);

}  // namespace rlforge::templating::internal
