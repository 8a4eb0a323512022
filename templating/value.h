// The values a Jinja template computes with, with Python's semantics where chat templates
// can observe them: truthiness, ==, ordering, str() and repr() text, and json.dumps text.
//
// JSON-like data (nlohmann::ordered_json, key order kept) -> Value -> filters, tests, output
//
// A Value is cheap to copy: strings, lists and dicts are shared and never changed after they
// are built (the sandbox transformers renders in forbids mutating them too); a namespace()
// is the one mutable kind, shared by every copy. Undefined carries the name that was looked
// up so errors can say which. Not thread-safe to mutate a namespace from two threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace rlforge::templating {

class Value;
using List = std::vector<Value>;
// A dict keeps insertion order (Python 3.7+): tojson and `items` follow it.
using Dict = std::vector<std::pair<std::string, Value>>;

// Positional and keyword arguments of a call (a filter's first argument is its input).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value Undefined(std::string name);
  static Value None();
  Value(bool b);  // NOLINT: implicit on purpose, as Python literals
  Value(int64_t i);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(List l);
  Value(Dict d);
  static Value Tuple(List l);
  static Value FromFunction(Function f);
  // A namespace(): a dict whose entries `{% set ns.x = ... %}` may change.
  static Value Namespace(Dict d);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_namespace() const { return kind_ == Kind::kDict && mutable_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::kInt ? static_cast<double>(i_) : d_; }
  const std::string& as_string() const { return *s_; }  // also the undefined name
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }
  const Function& as_function() const { return *fn_; }

  // Dict entry by key, or nullptr.
  const Value* Find(const std::string& key) const;
  // Namespace entries only: sets or adds `key`.
  void SetAttribute(const std::string& key, Value v) const;

  bool Truthy() const;
  // Python's str(): strings as is, None -> "None", True -> "True", lists as their repr.
  std::string Str() const;
  // Python's repr(): strings quoted.
  std::string Repr() const;
  // Python type name for errors ("str", "list", "dict", "NoneType", "undefined").
  std::string TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool tuple_ = false;
  bool mutable_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_ = std::make_shared<const std::string>();
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

// Python ==, and <, <=, ... (numbers with numbers, strings with strings, lists pairwise);
// Compare returns false in `ok` for types Python cannot order.
bool Equal(const Value& a, const Value& b);
int Compare(const Value& a, const Value& b, bool* ok);

// Python's repr of a float: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string FloatRepr(double d);

// json.dumps as transformers' tojson filter calls it. indent < 0: one line with ", " and ": "
// (or `separators`); otherwise newline + indent spaces per level, items joined with ",".
struct JsonOptions {
  int indent = -1;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: the default for the indent mode
  std::string key_separator = ": ";
};
// False in `ok` (and the offending type in the text) for undefined and functions.
std::string ToJson(const Value& v, const JsonOptions& options, bool* ok);

Value FromJson(const nlohmann::ordered_json& j);

// UTF-8 helpers: Python indexes and measures strings in code points.
std::vector<std::string> CodePoints(const std::string& s);

}  // namespace rlforge::templating
