// ToJson: Python's json.dumps text for template values (transformers' tojson filter).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "templating/value.h"

namespace rlforge::templating {
namespace {

// Decodes the code point at s[i] (advancing i); a malformed byte stands for itself.
uint32_t NextCodePoint(const std::string& s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 0;
  if (extra > 0 && i + static_cast<size_t>(extra) >= s.size()) extra = 0;
  uint32_t cp = extra == 0 ? c : (c & (0x3f >> extra));
  ++i;
  for (int k = 0; k < extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i++]) & 0x3f);
  return cp;
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodePoint(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        absl::StrAppendFormat(&out, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
      } else {
        absl::StrAppendFormat(&out, "\\u%04x", cp);
      }
    } else {
      out.append(s, start, i - start);
    }
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& o) : o_(o) {
    item_sep_ = !o.item_separator.empty() ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  }

  // False when `v` (or something inside it) has no JSON form; `bad_type` names it.
  bool Write(const Value& v, int level, std::string& out) {
    using K = Value::Kind;
    switch (v.kind()) {
      case K::kNone:
        out += "null";
        return true;
      case K::kBool:
        out += v.as_bool() ? "true" : "false";
        return true;
      case K::kInt:
        absl::StrAppend(&out, v.as_int());
        return true;
      case K::kFloat:
        out += FloatText(v.as_number());
        return true;
      case K::kString:
        AppendJsonString(v.as_string(), o_.ensure_ascii, out);
        return true;
      case K::kList:
        return WriteList(v.as_list(), level, out);
      case K::kDict:
        if (!v.is_namespace()) return WriteDict(v.as_dict(), level, out);
        [[fallthrough]];
      default:
        bad_type = v.TypeName();
        return false;
    }
  }

  std::string bad_type;

 private:
  static std::string FloatText(double d) {
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
    return FloatRepr(d);
  }

  void Break(int level, std::string& out) const {
    if (o_.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(o_.indent * level), ' ');
  }

  bool WriteList(const List& l, int level, std::string& out) {
    if (l.empty()) {
      out += "[]";
      return true;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) out += item_sep_;
      Break(level + 1, out);
      if (!Write(l[i], level + 1, out)) return false;
    }
    Break(level, out);
    out += ']';
    return true;
  }

  bool WriteDict(const Dict& d, int level, std::string& out) {
    if (d.empty()) {
      out += "{}";
      return true;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : d) entries.push_back(&e);
    if (o_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out += item_sep_;
      Break(level + 1, out);
      AppendJsonString(entries[i]->first, o_.ensure_ascii, out);
      out += o_.key_separator;
      if (!Write(entries[i]->second, level + 1, out)) return false;
    }
    Break(level, out);
    out += '}';
    return true;
  }

  const JsonOptions& o_;
  std::string item_sep_;
};

}  // namespace

std::string ToJson(const Value& v, const JsonOptions& options, bool* ok) {
  JsonWriter w(options);
  std::string out;
  *ok = w.Write(v, 0, out);
  return *ok ? out : w.bad_type;
}

}  // namespace rlforge::templating
