// Internal: the parsed form of a template. The parser builds it once; rendering only reads it,
// so one parsed template may render on several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "templating/value.h"

namespace rlforge::templating::internal {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // args: elements
    kTuple,      // args: elements
    kDict,       // args: key, value, key, value, ...
    kAttr,       // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]] (null where left out)
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs)
    kTest,       // args[0] is [not] name(args[1:])
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: arithmetic, "~", "and", "or", "in", "not in"
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int col = 0;
  Value value;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body); else_body
    kFor,       // for targets in expr [if condition]: body [else: else_body]
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(params = defaults) body
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  int col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;  // kFor's loop filter
  std::vector<std::string> targets;
  std::string attribute;  // kSet on a namespace
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null)
};

// Throws TemplateError naming the line and column of what is wrong.
Body Parse(const std::string& source);

// Known filter and test names (checked at parse time, as jinja2 does).
bool IsFilter(const std::string& name);
bool IsTest(const std::string& name);

}  // namespace rlforge::templating::internal
