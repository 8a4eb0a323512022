#include "config/schema.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/strings.h"

namespace rlforge::config {

std::string SourceLoc::ToString() const {
  if (!override.empty()) return absl::StrCat("command-line override '", override, "'");
  if (line > 0) return absl::StrCat(file, ":", line, ":", column);
  return file.empty() ? "<config>" : file;
}

std::string ConfigError::ToString() const {
  if (key.empty()) return absl::StrCat(loc.ToString(), ": ", message);
  return absl::StrCat(loc.ToString(), ": ", key, ": ", message);
}

bool CheckContext::Written(const std::string& key) const {
  const std::string path = prefix_ + key;
  for (auto it = locs_->lower_bound(path); it != locs_->end(); ++it) {
    const std::string& k = it->first;
    if (k.compare(0, path.size(), path) != 0) return false;  // past every key it prefixes
    if (k.size() == path.size() || k[path.size()] == '.' || k[path.size()] == '[') return true;
  }
  return false;
}

void CheckContext::Error(const std::string& key, const std::string& message) {
  std::string path = prefix_ + key;
  SourceLoc loc = *file_loc_;
  // The nearest enclosing key that was written down tells the line.
  for (std::string p = path;;) {
    auto it = locs_->find(p);
    if (it != locs_->end()) {
      loc = it->second;
      break;
    }
    size_t dot = p.rfind('.');
    if (dot == std::string::npos) break;
    p = p.substr(0, dot);
  }
  errors_->push_back(ConfigError{loc, path, message});
}

namespace {
std::string FormatBound(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return FormatDouble(v);
}
}  // namespace

std::string Field::TypeText() const {
  if (has_lo && has_hi) {
    return absl::StrCat(type, " in ", lo_inclusive ? "[" : "(", FormatBound(lo), ", ",
                        FormatBound(hi), hi_inclusive ? "]" : ")");
  }
  if (has_lo) return absl::StrCat(type, lo_inclusive ? " >= " : " > ", FormatBound(lo));
  if (has_hi) return absl::StrCat(type, hi_inclusive ? " <= " : " < ", FormatBound(hi));
  return type;
}

bool Field::InRange(double v) const {
  if (has_lo && (lo_inclusive ? v < lo : v <= lo)) return false;
  if (has_hi && (hi_inclusive ? v > hi : v >= hi)) return false;
  return true;
}

const Field* Schema::Find(const std::string& name) const {
  for (const auto& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> Schema::FieldNames() const {
  std::vector<std::string> names;
  for (const auto& f : fields) names.push_back(f.name);
  return names;
}

void Schema::CollectKeys(const std::string& prefix, std::vector<std::string>* out) const {
  for (const auto& f : fields) {
    std::string path = prefix + f.name;
    switch (f.kind) {
      case Field::Kind::kScalar:
        out->push_back(path);
        break;
      case Field::Kind::kSection:
        f.section->CollectKeys(path + ".", out);
        break;
      case Field::Kind::kSectionList:
        f.section->CollectKeys(path + "[].", out);
        break;
    }
  }
}

namespace {

std::string Describe(const YAML::Node& n) {
  if (n.IsMap()) return "a section";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return absl::StrCat("'", n.Scalar(), "'");
}

bool RequireScalar(const YAML::Node& n, const char* expected, std::string* why) {
  if (n.IsScalar()) return true;
  *why = absl::StrCat("expected ", expected, ", got ", Describe(n));
  return false;
}

}  // namespace

bool ParseBool(const YAML::Node& n, bool* out, std::string* why) {
  if (!RequireScalar(n, "true or false", why)) return false;
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") {
    *out = true;
    return true;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    *out = false;
    return true;
  }
  *why = absl::StrCat("expected true or false, got '", s, "'");
  return false;
}

bool ParseDouble(const YAML::Node& n, double* out, std::string* why) {
  if (!RequireScalar(n, "a number", why)) return false;
  const std::string& s = n.Scalar();
  double v = 0;
  const char* begin = s.data();
  if (!s.empty() && s[0] == '+') ++begin;
  auto [p, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    *why = absl::StrCat("expected a number, got '", s, "'");
    return false;
  }
  *out = v;
  return true;
}

bool ParseInt(const YAML::Node& n, int64_t* out, std::string* why) {
  if (!RequireScalar(n, "an integer", why)) return false;
  const std::string& s = n.Scalar();
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (!s.empty() && ec == std::errc() && p == s.data() + s.size()) {
    *out = v;
    return true;
  }
  // ML configs write step counts as 1e6; accept a float only if it is integral.
  double d = 0;
  std::string ignored;
  if (ParseDouble(n, &d, &ignored) && std::floor(d) == d && std::fabs(d) < 9e15) {
    *out = static_cast<int64_t>(d);
    return true;
  }
  *why = absl::StrCat("expected an integer, got '", s, "'");
  return false;
}

bool ParseString(const YAML::Node& n, std::string* out, std::string* why) {
  if (!RequireScalar(n, "a string", why)) return false;
  *out = n.Scalar();
  return true;
}

std::string FormatDouble(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  // Keep it a YAML float, not an int, when read back by other tools.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string ChoiceType(const std::vector<std::string>& choices) {
  return absl::StrCat("one of ", absl::StrJoin(choices, ", "));
}

std::function<bool(const YAML::Node&, std::string*, std::string*)> MakeChoiceParser(
    std::vector<std::string> choices) {
  return [choices](const YAML::Node& n, std::string* out, std::string* why) {
    if (!RequireScalar(n, "a string", why)) return false;
    for (const auto& c : choices) {
      if (n.Scalar() == c) {
        *out = c;
        return true;
      }
    }
    *why = absl::StrCat("expected ", ChoiceType(choices), "; got '", n.Scalar(), "'");
    std::string near = NearestWord(n.Scalar(), choices);
    if (!near.empty()) absl::StrAppend(why, " (did you mean ", near, "?)");
    return false;
  };
}

std::function<bool(const YAML::Node&, std::vector<double>*, std::string*)> MakeDoubleListParser() {
  return [](const YAML::Node& n, std::vector<double>* out, std::string* why) {
    if (!n.IsSequence()) {
      *why = absl::StrCat("expected a list of numbers, got ", Describe(n));
      return false;
    }
    std::vector<double> v;
    for (size_t i = 0; i < n.size(); ++i) {
      double d;
      if (!ParseDouble(n[i], &d, why)) {
        *why = absl::StrCat("item ", i, ": ", *why);
        return false;
      }
      v.push_back(d);
    }
    *out = std::move(v);
    return true;
  };
}

std::function<bool(const YAML::Node&, std::vector<std::string>*, std::string*)>
MakeStringListParser() {
  return [](const YAML::Node& n, std::vector<std::string>* out, std::string* why) {
    if (!n.IsSequence()) {
      *why = absl::StrCat("expected a list of strings, got ", Describe(n));
      return false;
    }
    std::vector<std::string> v;
    for (size_t i = 0; i < n.size(); ++i) {
      std::string s;
      if (!ParseString(n[i], &s, why)) {
        *why = absl::StrCat("item ", i, ": ", *why);
        return false;
      }
      v.push_back(s);
    }
    *out = std::move(v);
    return true;
  };
}

std::function<bool(const YAML::Node&, std::vector<int64_t>*, std::string*)> MakeIntListParser() {
  return [](const YAML::Node& n, std::vector<int64_t>* out, std::string* why) {
    if (!n.IsSequence()) {
      *why = absl::StrCat("expected a list of integers, got ", Describe(n));
      return false;
    }
    std::vector<int64_t> v;
    for (size_t i = 0; i < n.size(); ++i) {
      int64_t x;
      if (!ParseInt(n[i], &x, why)) {
        *why = absl::StrCat("item ", i, ": ", *why);
        return false;
      }
      v.push_back(x);
    }
    *out = std::move(v);
    return true;
  };
}

YAML::Node ShowIntList(const std::vector<int64_t>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (int64_t x : v) n.push_back(x);
  return n;
}

YAML::Node ShowDoubleList(const std::vector<double>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (double d : v) n.push_back(FormatDouble(d));
  return n;
}

YAML::Node ShowStringList(const std::vector<std::string>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& s : v) n.push_back(s);
  return n;
}

}  // namespace rlforge::config
