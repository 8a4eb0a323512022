#include "templating/builtins.h"

#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rlforge::templating::internal {

void Throw(std::string message) { throw TemplateError{std::move(message)}; }

void CheckDefined(const Value& v) {
  if (v.is_undefined()) Throw(v.as_string());
}

Value Arg(const CallArgs& args, size_t index, const char* name, Value fallback) {
  if (index < args.positional.size()) return args.positional[index];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return v;
  }
  return fallback;
}

std::string Upper(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toUpper(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

std::string Lower(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toLower(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

namespace {

constexpr const char* kSpaces = " \t\n\r\v\f";

std::string StripChars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = chars.is_string() ? chars.as_string() : kSpaces;
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  }
  if (right) {
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  }
  return s.substr(b, e - b);
}

Value Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (true) {
      i = s.find_first_not_of(kSpaces, i);
      if (i == std::string::npos) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Value(StripChars(s.substr(i), Value(), false, true)));
        break;
      }
      const size_t j = std::min(s.find_first_of(kSpaces, i), s.size());
      out.push_back(Value(s.substr(i, j - i)));
      i = j;
    }
    return Value(std::move(out));
  }
  const std::string& d = sep.as_string();
  if (d.empty()) Throw("empty separator");
  size_t i = 0;
  while (true) {
    const size_t j = s.find(d, i);
    if (j == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.push_back(Value(s.substr(i)));
      break;
    }
    out.push_back(Value(s.substr(i, j - i)));
    i = j + d.size();
  }
  return Value(std::move(out));
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) return s;  // Python inserts between characters; no template does this
  std::string out;
  size_t i = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    absl::StrAppend(&out, s.substr(i, j - i), to);
    i = j + from.size();
  }
  return out + s.substr(i);
}

// Python's str.title(): a cased letter after an uncased one goes upper, the rest lower.
std::string PyTitle(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (const std::string& c : CodePoints(s)) {
    const std::string up = Upper(c), low = Lower(c);
    const bool cased = up != low;
    out += cased ? (prev_cased ? low : up) : c;
    prev_cased = cased;
  }
  return out;
}

bool StartsOrEnds(const std::string& s, const Value& affix, bool start) {
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(),
                       [&](const Value& a) { return StartsOrEnds(s, a, start); });
  }
  if (!affix.is_string()) Throw("startswith/endswith take a str or a tuple of str");
  return start ? absl::StartsWith(s, affix.as_string()) : absl::EndsWith(s, affix.as_string());
}

Value StringMethod(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "strip") return Value(StripChars(s, Arg(a, 0, "chars"), true, true));
  if (name == "lstrip") return Value(StripChars(s, Arg(a, 0, "chars"), true, false));
  if (name == "rstrip") return Value(StripChars(s, Arg(a, 0, "chars"), false, true));
  if (name == "upper") return Value(Upper(s));
  if (name == "lower") return Value(Lower(s));
  if (name == "title") return Value(PyTitle(s));
  if (name == "capitalize") {
    const std::vector<std::string> cps = CodePoints(s);
    if (cps.empty()) return Value(s);
    return Value(Upper(cps[0]) + Lower(s.substr(cps[0].size())));
  }
  if (name == "split") {
    const Value max = Arg(a, 1, "maxsplit", Value(-1));
    return Split(s, Arg(a, 0, "sep"), max.is_number() ? max.as_int() : -1);
  }
  if (name == "startswith") return Value(StartsOrEnds(s, Arg(a, 0, "prefix"), true));
  if (name == "endswith") return Value(StartsOrEnds(s, Arg(a, 0, "suffix"), false));
  if (name == "replace") {
    const Value from = Arg(a, 0, "old"), to = Arg(a, 1, "new"), count = Arg(a, 2, "count", -1);
    if (!from.is_string() || !to.is_string()) Throw("replace() takes two strings");
    return Value(Replace(s, from.as_string(), to.as_string(), count.as_int()));
  }
  if (name == "find" || name == "count") {
    const Value sub = Arg(a, 0, "sub");
    if (!sub.is_string()) Throw(absl::StrCat(name, "() takes a string"));
    if (name == "find") {
      const size_t at = s.find(sub.as_string());
      return Value(at == std::string::npos
                       ? int64_t{-1}
                       : static_cast<int64_t>(CodePoints(s.substr(0, at)).size()));
    }
    int64_t n = 0;
    for (size_t i = s.find(sub.as_string()); i != std::string::npos && !sub.as_string().empty();
         i = s.find(sub.as_string(), i + sub.as_string().size())) {
      ++n;
    }
    return Value(n);
  }
  if (name == "join") {
    std::vector<std::string> parts;
    for (const Value& v : Iterate(Arg(a, 0, "iterable"))) parts.push_back(v.Str());
    return Value(absl::StrJoin(parts, s));
  }
  Throw(absl::StrCat("'str' object has no attribute '", name, "'"));
}

Value DictMethod(const Value& d, const std::string& name, CallArgs& a) {
  if (name == "get") {
    const Value key = Arg(a, 0, "key");
    const Value* found = key.is_string() ? d.Find(key.as_string()) : nullptr;
    return found ? *found : Arg(a, 1, "default", Value::None());
  }
  List out;
  for (const auto& [k, v] : d.as_dict()) {
    if (name == "items") out.push_back(Value::Tuple({Value(k), v}));
    if (name == "keys") out.push_back(Value(k));
    if (name == "values") out.push_back(v);
  }
  return Value(std::move(out));
}

bool IsStringMethod(const std::string& n) {
  static const char* kNames[] = {"strip",   "lstrip",     "rstrip", "upper",      "lower",
                                 "title",   "capitalize", "split",  "startswith", "endswith",
                                 "replace", "find",       "count",  "join"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* k) { return n == k; });
}

}  // namespace

Value GetAttr(const Value& obj, const std::string& name) {
  CheckDefined(obj);
  if (obj.is_string() && IsStringMethod(name)) {
    const std::string s = obj.as_string();
    return Value::FromFunction([s, name](CallArgs& a) { return StringMethod(s, name, a); });
  }
  if (obj.is_dict() && !obj.is_namespace() &&
      (name == "items" || name == "keys" || name == "values" || name == "get")) {
    return Value::FromFunction([obj, name](CallArgs& a) { return DictMethod(obj, name, a); });
  }
  if (const Value* v = obj.Find(name)) return *v;
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no attribute '", name, "'"));
}

Value GetItem(const Value& obj, const Value& key) {
  CheckDefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.Find(key.as_string())) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && key.kind() == Value::Kind::kInt) {
    const std::vector<std::string> cps =
        obj.is_string() ? CodePoints(obj.as_string()) : std::vector<std::string>();
    const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : cps.size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      return obj.is_list() ? obj.as_list()[static_cast<size_t>(i)]
                           : Value(cps[static_cast<size_t>(i)]);
    }
  }
  if (key.is_string() && !obj.is_dict()) return GetAttr(obj, key.as_string());
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no element ", key.Repr()));
}

Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  CheckDefined(obj);
  if (!obj.is_list() && !obj.is_string()) Throw(absl::StrCat("cannot slice a ", obj.TypeName()));
  const std::vector<std::string> cps =
      obj.is_string() ? CodePoints(obj.as_string()) : std::vector<std::string>();
  const int64_t n = static_cast<int64_t>(obj.is_list() ? obj.as_list().size() : cps.size());
  auto index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.kind() != Value::Kind::kInt) Throw("slice indices must be integers or none");
    return v.as_int();
  };
  const int64_t s = index(step).value_or(1);
  if (s == 0) Throw("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (x < 0) return s < 0 ? int64_t{-1} : int64_t{0};
    if (x >= n) return s < 0 ? n - 1 : n;
    return x;
  };
  const int64_t b = clamp(index(start), s < 0 ? n - 1 : 0);
  const int64_t e = clamp(index(stop), s < 0 ? -1 : n);
  List items;
  std::string text;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s) {
    if (obj.is_list()) {
      items.push_back(obj.as_list()[static_cast<size_t>(i)]);
    } else {
      text += cps[static_cast<size_t>(i)];
    }
  }
  return obj.is_list() ? Value(std::move(items)) : Value(std::move(text));
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.as_dict()) keys.push_back(Value(k));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (auto& c : CodePoints(v.as_string())) chars.push_back(Value(std::move(c)));
      return chars;
    }
    default:
      Throw(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

bool Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) Throw("'in <string>' requires a string on the left");
    return absl::StrContains(container.as_string(), item.as_string());
  }
  if (container.is_dict()) return item.is_string() && container.Find(item.as_string());
  if (container.is_undefined()) return false;
  const std::vector<Value> items = Iterate(container);
  return std::any_of(items.begin(), items.end(), [&](const Value& v) { return Equal(v, item); });
}

Dict Globals(const Clock& now) {
  Dict g;
  g.emplace_back("range", Value::FromFunction([](CallArgs& a) {
                   std::vector<int64_t> p;
                   for (const Value& v : a.positional) {
                     if (v.kind() != Value::Kind::kInt) Throw("range() takes integers");
                     p.push_back(v.as_int());
                   }
                   if (p.empty() || p.size() > 3) Throw("range() takes 1 to 3 integers");
                   const int64_t start = p.size() == 1 ? 0 : p[0],
                                 stop = p.size() == 1 ? p[0] : p[1];
                   const int64_t step = p.size() == 3 ? p[2] : 1;
                   if (step == 0) Throw("range() step must not be zero");
                   List out;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
                     out.push_back(Value(i));
                   return Value(std::move(out));
                 }));
  auto kwargs_dict = [](CallArgs& a) {
    Dict d;
    if (!a.positional.empty() && a.positional[0].is_dict()) d = a.positional[0].as_dict();
    for (auto& [k, v] : a.keyword) d.emplace_back(k, v);
    return d;
  };
  g.emplace_back("dict",
                 Value::FromFunction([kwargs_dict](CallArgs& a) { return Value(kwargs_dict(a)); }));
  g.emplace_back("namespace", Value::FromFunction([kwargs_dict](CallArgs& a) {
                   return Value::Namespace(kwargs_dict(a));
                 }));
  g.emplace_back(
      "raise_exception", Value::FromFunction([](CallArgs& a) -> Value {
        Throw(absl::StrCat("the template raised an exception: ", Arg(a, 0, "message").Str()));
      }));
  g.emplace_back("strftime_now", Value::FromFunction([now](CallArgs& a) {
                   const std::string format = Arg(a, 0, "format").Str();
                   const std::time_t t = std::chrono::system_clock::to_time_t(now());
                   std::tm local{};
                   localtime_r(&t, &local);
                   char buf[256];
                   const size_t len = std::strftime(buf, sizeof(buf), format.c_str(), &local);
                   return Value(std::string(buf, len));
                 }));
  return g;
}

}  // namespace rlforge::templating::internal
