// Arithmetic with Python's semantics, and jinja2's tests.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "templating/ast.h"
#include "templating/builtins.h"

namespace rlforge::templating::internal {
namespace {

bool IntLike(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}
int64_t IntOf(const Value& v) {
  return v.kind() == Value::Kind::kBool ? (v.as_bool() ? 1 : 0) : v.as_int();
}
double NumOf(const Value& v) { return IntLike(v) ? static_cast<double>(IntOf(v)) : v.as_number(); }

[[noreturn]] void Unsupported(const std::string& op, const Value& a, const Value& b) {
  Throw(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '",
                     b.TypeName(), "'"));
}

// "text %s" % args, for %s, %r, %d, %i and %%.
std::string PercentFormat(const std::string& f, const Value& args) {
  const List items = args.is_tuple() ? args.as_list() : List{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    const char c = i + 1 < f.size() ? f[++i] : '\0';
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) Throw("not enough arguments for format string");
    const Value& v = items[next++];
    if (c == 's')
      out += v.Str();
    else if (c == 'r')
      out += v.Repr();
    else if ((c == 'd' || c == 'i') && (IntLike(v) || v.is_number()))
      out += absl::StrCat(v.is_number() && !IntLike(v) ? static_cast<int64_t>(v.as_number())
                                                       : IntOf(v));
    else
      Throw(absl::StrCat("unsupported format '%", std::string(1, c), "' for ", v.TypeName()));
  }
  if (next < items.size()) Throw("not all arguments converted during string formatting");
  return out;
}

Value Repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value(std::move(out));
}

Value IntArithmetic(const std::string& op, int64_t x, int64_t y) {
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (y == 0) Throw("integer division or modulo by zero");
  int64_t q = x / y, r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) {
    --q;
    r += y;
  }
  return op == "//" ? Value(q) : Value(r);
}

}  // namespace

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.Str() + b.Str());
  CheckDefined(a);
  CheckDefined(b);
  if (op == "+" && a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
  if (op == "+" && a.is_list() && b.is_list()) {
    List out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && IntLike(b)) return Repeat(a, IntOf(b));
  if (op == "*" && (b.is_string() || b.is_list()) && IntLike(a)) return Repeat(b, IntOf(a));
  if (op == "%" && a.is_string()) return Value(PercentFormat(a.as_string(), b));
  const bool numbers = (IntLike(a) || a.is_number()) && (IntLike(b) || b.is_number());
  if (!numbers) Unsupported(op, a, b);
  if (IntLike(a) && IntLike(b) && op != "/" && op != "**") {
    return IntArithmetic(op, IntOf(a), IntOf(b));
  }
  if (op == "**" && IntLike(a) && IntLike(b) && IntOf(b) >= 0) {
    int64_t r = 1;
    for (int64_t i = 0; i < IntOf(b); ++i) r *= IntOf(a);
    return Value(r);
  }
  const double x = NumOf(a), y = NumOf(b);
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0) Throw("float division by zero");
  if (op == "/") return Value(x / y);
  if (op == "//") return Value(std::floor(x / y));
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value(r);
}

namespace {

bool CompareTest(const std::string& name, const Value& a, const Value& b) {
  if (name == "eq" || name == "equalto" || name == "==") return Equal(a, b);
  if (name == "ne" || name == "!=") return !Equal(a, b);
  bool ok = false;
  const int c = Compare(a, b, &ok);
  if (!ok) Throw(absl::StrCat("cannot compare '", a.TypeName(), "' with '", b.TypeName(), "'"));
  if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
  return c >= 0;  // ge, >=
}

bool SameAs(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.kind() == Value::Kind::kNone || a.kind() == Value::Kind::kBool) return Equal(a, b);
  return false;  // identity of containers is not observable here
}

}  // namespace

bool ApplyTest(const std::string& name, CallArgs& args) {
  const Value v = args.positional.at(0);
  const Value other = Arg(args, 1, "other");
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number() || v.kind() == K::kBool;
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "lower") return v.is_string() && Lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && Upper(v.as_string()) == v.as_string();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != K::kInt) Throw(absl::StrCat("'", name, "' needs an integer"));
    if (name == "divisibleby") {
      if (other.kind() != K::kInt || other.as_int() == 0) Throw("divisibleby needs a non-zero int");
      return v.as_int() % other.as_int() == 0;
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "in") return Contains(other, v);
  if (name == "sameas") return SameAs(v, other);
  return CompareTest(name, v, other);
}

bool IsTest(const std::string& name) {
  static const char* kTests[] = {"defined", "undefined", "none",        "boolean",     "true",
                                 "false",   "integer",   "float",       "number",      "string",
                                 "mapping", "iterable",  "sequence",    "callable",    "lower",
                                 "upper",   "odd",       "even",        "divisibleby", "in",
                                 "sameas",  "eq",        "equalto",     "==",          "ne",
                                 "!=",      "lt",        "lessthan",    "<",           "le",
                                 "<=",      "gt",        "greaterthan", ">",           "ge",
                                 ">="};
  for (const char* t : kTests) {
    if (name == t) return true;
  }
  return false;
}

}  // namespace rlforge::templating::internal
