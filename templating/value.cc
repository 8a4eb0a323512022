#include "templating/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rlforge::templating {

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s)
    : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}
Value::Value(List l) : kind_(Kind::kList), list_(std::make_shared<const List>(std::move(l))) {}
Value::Value(Dict d) : kind_(Kind::kDict), dict_(std::make_shared<Dict>(std::move(d))) {}

Value Value::Tuple(List l) {
  Value v(std::move(l));
  v.tuple_ = true;
  return v;
}

Value Value::FromFunction(Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<const Function>(std::move(f));
  return v;
}

Value Value::Namespace(Dict d) {
  Value v(std::move(d));
  v.mutable_ = true;
  return v;
}

const Value* Value::Find(const std::string& key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::SetAttribute(const std::string& key, Value v) const {
  for (auto& [k, old] : *dict_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict_->emplace_back(key, std::move(v));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return mutable_ || !dict_->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  if (exp < -4 || exp >= 16) return sci;
  std::string mant = sci.substr(0, e);
  const bool negative = mant[0] == '-';
  if (negative) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= 0) {
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() < int_len) digits.append(int_len - digits.size(), '0');
    const std::string frac = digits.substr(int_len);
    out = absl::StrCat(digits.substr(0, int_len), ".", frac.empty() ? "0" : frac);
  } else {
    out = absl::StrCat("0.", std::string(static_cast<size_t>(-exp - 1), '0'), digits);
  }
  return negative ? "-" + out : out;
}

namespace {

std::string StringRepr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += absl::StrFormat("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(i_);
    case Kind::kFloat:
      return FloatRepr(d_);
    case Kind::kString:
      return StringRepr(*s_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", (*list_)[i].Repr());
      }
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = mutable_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", StringRepr((*dict_)[i].first), ": ",
                        (*dict_)[i].second.Repr());
      }
      return out + (mutable_ ? "}>" : "}");
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return mutable_ ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "";
}

namespace {

bool Numeric(const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; }

double NumberOf(const Value& v) {
  return v.kind() == Value::Kind::kBool ? (v.as_bool() ? 1 : 0) : v.as_number();
}

}  // namespace

bool Equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (Numeric(a) && Numeric(b)) {
    if (a.kind() == K::kInt && b.kind() == K::kInt) return a.as_int() == b.as_int();
    return NumberOf(a) == NumberOf(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList:
      return std::equal(a.as_list().begin(), a.as_list().end(), b.as_list().begin(),
                        b.as_list().end(), Equal);
    case K::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [k, v] : a.as_dict()) {
        const Value* other = b.Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

int Compare(const Value& a, const Value& b, bool* ok) {
  *ok = true;
  if (Numeric(a) && Numeric(b)) {
    const double x = NumberOf(a), y = NumberOf(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Compare(x[i], y[i], ok);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  *ok = false;
  return 0;
}

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    len = std::min(len, s.size() - i);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(FromJson(e));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.emplace_back(k, FromJson(e));
      return Value(std::move(d));
    }
    default:
      return Value::None();
  }
}

}  // namespace rlforge::templating
