// jinja2's filters as chat templates use them, tojson with transformers' override
// (json.dumps with ensure_ascii=False, keys in the data's order unless sort_keys).
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "templating/ast.h"
#include "templating/builtins.h"

namespace rlforge::templating::internal {
namespace {

using Filter = Value (*)(CallArgs&);
constexpr size_t kKeywordOnly = ~size_t{0};  // an Arg index no positional argument has

const Value& Input(CallArgs& a) { return a.positional.at(0); }

std::string Text(const Value& v) {
  return v.Str();  // undefined prints as ""
}

// `item.a.b` as selectattr / map(attribute=) read it: item first, then attribute.
Value AttributePath(const Value& item, const std::string& path) {
  Value v = item;
  for (const auto part : absl::StrSplit(path, '.')) {
    if (v.is_undefined()) return v;
    int64_t index = 0;
    v = (v.is_list() && absl::SimpleAtoi(part, &index)) ? GetItem(v, Value(index))
                                                        : GetItem(v, Value(std::string(part)));
  }
  return v;
}

Value Tojson(CallArgs& a) {
  JsonOptions o;
  const Value indent = Arg(a, 1, "indent", Value::None());
  if (indent.kind() == Value::Kind::kInt) o.indent = static_cast<int>(indent.as_int());
  o.ensure_ascii = Arg(a, 2, "ensure_ascii", false).Truthy();
  const Value separators = Arg(a, 3, "separators", Value::None());
  if (separators.is_list() && separators.as_list().size() == 2) {
    o.item_separator = separators.as_list()[0].Str();
    o.key_separator = separators.as_list()[1].Str();
  }
  o.sort_keys = Arg(a, 4, "sort_keys", false).Truthy();
  bool ok = false;
  std::string text = ToJson(Input(a), o, &ok);
  if (!ok) Throw(absl::StrCat("tojson: object of type '", text, "' is not JSON serializable"));
  return Value(std::move(text));
}

Value Length(CallArgs& a) {
  const Value& v = Input(a);
  if (v.is_string()) return Value(static_cast<int64_t>(CodePoints(v.as_string()).size()));
  if (v.is_list()) return Value(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value(static_cast<int64_t>(v.as_dict().size()));
  if (v.is_undefined()) return Value(0);
  Throw(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

Value Default(CallArgs& a) {
  const Value& v = Input(a);
  const bool boolean = Arg(a, 2, "boolean", false).Truthy();
  if (v.is_undefined() || (boolean && !v.Truthy())) return Arg(a, 1, "default_value", "");
  return v;
}

Value Join(CallArgs& a) {
  const Value attr = Arg(a, 2, "attribute");
  std::vector<std::string> parts;
  for (const Value& v : Iterate(Input(a))) {
    parts.push_back(Text(attr.is_string() ? AttributePath(v, attr.as_string()) : v));
  }
  return Value(absl::StrJoin(parts, Text(Arg(a, 1, "d", ""))));
}

Value FirstOrLast(CallArgs& a, bool first) {
  const std::vector<Value> items = Iterate(Input(a));
  if (items.empty()) return Value::Undefined("no first/last item of an empty sequence");
  return first ? items.front() : items.back();
}

Value Items(CallArgs& a) {
  const Value& v = Input(a);
  if (v.is_undefined()) return Value(List{});
  if (!v.is_dict()) Throw(absl::StrCat("items: expected a mapping, got ", v.TypeName()));
  List out;
  for (const auto& [k, e] : v.as_dict()) out.push_back(Value::Tuple({Value(k), e}));
  return Value(std::move(out));
}

// select / reject (attr empty) and selectattr / rejectattr.
Value SelectBy(CallArgs& a, bool by_attribute, bool keep) {
  const size_t first_test_arg = by_attribute ? 2 : 1;
  const std::string attr = by_attribute ? Text(Arg(a, 1, "attribute")) : "";
  const Value test = Arg(a, first_test_arg, "test");
  List out;
  for (const Value& item : Iterate(Input(a))) {
    const Value v = by_attribute ? AttributePath(item, attr) : item;
    bool pass = v.Truthy();
    if (test.is_string()) {
      CallArgs t;
      t.positional.push_back(v);
      for (size_t i = first_test_arg + 1; i < a.positional.size(); ++i) {
        t.positional.push_back(a.positional[i]);
      }
      if (!IsTest(test.as_string())) Throw(absl::StrCat("no test named '", test.as_string(), "'"));
      pass = ApplyTest(test.as_string(), t);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value Map(CallArgs& a) {
  const Value attr = Arg(a, kKeywordOnly, "attribute");
  List out;
  for (const Value& item : Iterate(Input(a))) {
    if (attr.is_string()) {
      Value v = AttributePath(item, attr.as_string());
      if (v.is_undefined()) v = Arg(a, kKeywordOnly, "default", v);
      out.push_back(v);
      continue;
    }
    if (a.positional.size() < 2 || !a.positional[1].is_string()) {
      Throw("map: give a filter name or attribute=");
    }
    CallArgs f;
    f.positional.push_back(item);
    f.positional.insert(f.positional.end(), a.positional.begin() + 2, a.positional.end());
    f.keyword = a.keyword;
    out.push_back(ApplyFilter(a.positional[1].as_string(), f));
  }
  return Value(std::move(out));
}

Value Int(CallArgs& a) {
  const Value& v = Input(a);
  const Value fallback = Arg(a, 1, "default", 0);
  if (v.kind() == Value::Kind::kInt) return v;
  if (v.kind() == Value::Kind::kBool) return Value(int64_t{v.as_bool()});
  if (v.kind() == Value::Kind::kFloat) return Value(static_cast<int64_t>(v.as_number()));
  if (!v.is_string()) return fallback;
  int64_t i = 0;
  double d = 0;
  const std::string s = v.as_string();
  if (absl::SimpleAtoi(s, &i)) return Value(i);
  if (absl::SimpleAtod(s, &d) && std::isfinite(d)) return Value(static_cast<int64_t>(d));
  return fallback;
}

Value Float(CallArgs& a) {
  const Value& v = Input(a);
  if (v.is_number() || v.kind() == Value::Kind::kBool) {
    return Value(v.kind() == Value::Kind::kBool ? (v.as_bool() ? 1.0 : 0.0) : v.as_number());
  }
  double d = 0;
  if (v.is_string() && absl::SimpleAtod(v.as_string(), &d)) return Value(d);
  return Arg(a, 1, "default", 0.0);
}

Value Indent(CallArgs& a) {
  const Value width = Arg(a, 1, "width", 4);
  const std::string pad =
      width.is_string() ? width.as_string() : std::string(static_cast<size_t>(width.as_int()), ' ');
  const bool first = Arg(a, 2, "first", false).Truthy();
  const bool blank = Arg(a, 3, "blank", false).Truthy();
  std::vector<std::string> lines = absl::StrSplit(Text(Input(a)), '\n');
  std::string out = lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  return Value(first ? pad + out : out);
}

Value Title(CallArgs& a) {
  std::string out;
  bool word_start = true;
  for (const std::string& c : CodePoints(Text(Input(a)))) {
    const bool delimiter =
        c.size() == 1 && std::string(" \t\n\r\v\f-({[<").find(c[0]) != std::string::npos;
    out += delimiter ? c : (word_start ? Upper(c) : Lower(c));
    word_start = delimiter;
  }
  return Value(std::move(out));
}

Value Capitalize(CallArgs& a) {
  const std::string s = Text(Input(a));
  const std::vector<std::string> cps = CodePoints(s);
  if (cps.empty()) return Value(s);
  return Value(Upper(cps[0]) + Lower(s.substr(cps[0].size())));
}

Value Replace(CallArgs& a) {
  const Value method = GetAttr(Value(Text(Input(a))), "replace");
  CallArgs r;
  r.positional.assign(a.positional.begin() + 1, a.positional.end());
  r.keyword = a.keyword;
  return method.as_function()(r);
}

Value Trim(CallArgs& a) {
  const Value method = GetAttr(Value(Text(Input(a))), "strip");
  CallArgs r;
  r.positional.push_back(Arg(a, 1, "chars", Value::None()));
  return method.as_function()(r);
}

// Sorting key: strings compare case-insensitively unless case_sensitive.
Value SortKey(const Value& v, const Value& attr, bool case_sensitive) {
  Value k = attr.is_string() ? AttributePath(v, attr.as_string()) : v;
  return (!case_sensitive && k.is_string()) ? Value(Lower(k.as_string())) : k;
}

Value Sort(CallArgs& a) {
  const bool reverse = Arg(a, 1, "reverse", false).Truthy();
  const bool case_sensitive = Arg(a, 2, "case_sensitive", false).Truthy();
  const Value attr = Arg(a, 3, "attribute");
  List items = Iterate(Input(a));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    bool ok = false;
    const int c = Compare(SortKey(x, attr, case_sensitive), SortKey(y, attr, case_sensitive), &ok);
    if (!ok) Throw(absl::StrCat("sort: cannot compare ", x.TypeName(), " and ", y.TypeName()));
    return reverse ? c > 0 : c < 0;
  });
  return Value(std::move(items));
}

Value Reverse(CallArgs& a) {
  const Value& v = Input(a);
  List items = Iterate(v);
  std::reverse(items.begin(), items.end());
  if (!v.is_string()) return Value(std::move(items));
  std::string out;
  for (const Value& c : items) out += c.as_string();
  return Value(std::move(out));
}

Value Abs(CallArgs& a) {
  const Value& v = Input(a);
  if (v.kind() == Value::Kind::kInt) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_number()) return Value(std::fabs(v.as_number()));
  Throw(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
}

Value Format(CallArgs& a) {
  List rest(a.positional.begin() + 1, a.positional.end());
  return BinaryOp("%", Value(Text(Input(a))), Value::Tuple(std::move(rest)));
}

const std::map<std::string, Filter>& Filters() {
  static const auto* filters = new std::map<std::string, Filter>{
      {"tojson", Tojson},
      {"length", Length},
      {"count", Length},
      {"default", Default},
      {"d", Default},
      {"join", Join},
      {"first", [](CallArgs& a) { return FirstOrLast(a, true); }},
      {"last", [](CallArgs& a) { return FirstOrLast(a, false); }},
      {"items", Items},
      {"select", [](CallArgs& a) { return SelectBy(a, false, true); }},
      {"reject", [](CallArgs& a) { return SelectBy(a, false, false); }},
      {"selectattr", [](CallArgs& a) { return SelectBy(a, true, true); }},
      {"rejectattr", [](CallArgs& a) { return SelectBy(a, true, false); }},
      {"map", Map},
      {"int", Int},
      {"float", Float},
      {"string", [](CallArgs& a) { return Value(Text(Input(a))); }},
      {"list", [](CallArgs& a) { return Value(Iterate(Input(a))); }},
      {"safe", [](CallArgs& a) { return Input(a); }},
      {"upper", [](CallArgs& a) { return Value(Upper(Text(Input(a)))); }},
      {"lower", [](CallArgs& a) { return Value(Lower(Text(Input(a)))); }},
      {"trim", Trim},
      {"replace", Replace},
      {"indent", Indent},
      {"capitalize", Capitalize},
      {"title", Title},
      {"sort", Sort},
      {"reverse", Reverse},
      {"abs", Abs},
      {"format", Format},
  };
  return *filters;
}

}  // namespace

Value ApplyFilter(const std::string& name, CallArgs& args) {
  const auto it = Filters().find(name);
  if (it == Filters().end()) Throw(absl::StrCat("no filter named '", name, "'"));
  if (name != "default" && name != "d" && name != "tojson") {
    // Filters that read a value need it defined, except the ones jinja2 lets see it as "".
    const Value& v = Input(args);
    const bool soft = name == "string" || name == "length" || name == "count" || name == "list" ||
                      name == "items" || name == "join" || name == "first" || name == "last" ||
                      name == "trim" || name == "upper" || name == "lower" || name == "safe";
    if (!soft) CheckDefined(v);
  }
  return it->second(args);
}

bool IsFilter(const std::string& name) { return Filters().count(name) > 0; }

}  // namespace rlforge::templating::internal
