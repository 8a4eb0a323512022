#include "config/loader.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"

namespace rlforge::config {

namespace {

// Walk state shared by every level.
struct WalkContext {
  const Schema* root = nullptr;
  std::string file;
  std::map<std::string, SourceLoc> overrides;  // dotted path -> the argument that set it
  std::map<std::string, SourceLoc> locs;       // dotted path -> where it was written
  std::vector<ConfigError> errors;
  std::vector<ConfigError> warnings;
  SourceLoc file_loc;

  SourceLoc LocOf(const std::string& path, const YAML::Node& n) const {
    for (std::string p = path;;) {
      auto it = overrides.find(p);
      if (it != overrides.end()) return it->second;
      size_t cut = p.find_last_of(".[");
      if (cut == std::string::npos) break;
      p = p.substr(0, cut);
    }
    SourceLoc loc;
    loc.file = file;
    bool marked = n.IsDefined() && n.Mark().line >= 0;
    if (!marked) {
      // No mark: the node was made by an override of a key below it.
      for (const auto& [key, oloc] : overrides) {
        if (absl::StartsWith(key, path + ".") || absl::StartsWith(key, path + "[")) return oloc;
      }
    }
    if (marked) {
      loc.line = n.Mark().line + 1;
      loc.column = n.Mark().column + 1;
    }
    return loc;
  }
  void Error(const SourceLoc& loc, const std::string& key, const std::string& msg) {
    errors.push_back(ConfigError{loc, key, msg});
  }
};

// Full dotted keys elsewhere in the schema that end in `key` or come close.
std::string SuggestElsewhere(const WalkContext& ctx, const std::string& key) {
  std::vector<std::string> all;
  ctx.root->CollectKeys("", &all);
  std::vector<std::string> leaves;
  for (const auto& k : all) {
    size_t dot = k.rfind('.');
    std::string leaf = dot == std::string::npos ? k : k.substr(dot + 1);
    if (leaf == key) return k;
    leaves.push_back(leaf);
  }
  std::string near = NearestWord(key, leaves);
  if (near.empty()) return "";
  for (const auto& k : all) {
    if (k == near || absl::EndsWith(k, "." + near)) return k;
  }
  return "";
}

void Walk(const Schema& schema, void* obj, const YAML::Node& node, const std::string& prefix,
          const SourceLoc& section_loc, WalkContext& ctx);

// `key`'s current name at this level (itself unless it is a renamed section's old name).
std::string NewName(const Schema& schema, const std::string& key) {
  auto it = schema.renamed.find(key);
  return it == schema.renamed.end() ? key : it->second;
}

std::string RenamedMessage(const std::string& prefix, const std::string& old_name,
                           const std::string& name) {
  return absl::StrCat("deprecated: ", prefix, old_name, " is now ", prefix, name,
                      " (read as such); rename it");
}

// The name a renamed root section has in the file's tree: the old one when the file writes
// only that, so an override under either name lands in the section the file wrote.
std::string TreeName(const Schema& schema, const YAML::Node& root, const std::string& name) {
  for (const auto& [old_name, new_name] : schema.renamed) {
    if (new_name == name && root[old_name].IsDefined() && !root[name].IsDefined()) return old_name;
  }
  return name;
}

void WalkField(const Field& f, void* obj, const YAML::Node& value, const std::string& path,
               const SourceLoc& loc, WalkContext& ctx) {
  switch (f.kind) {
    case Field::Kind::kScalar: {
      if (value.IsNull()) {
        ctx.Error(loc, path, absl::StrCat("missing value (expected ", f.TypeText(), ")"));
        return;
      }
      std::string why;
      if (!f.set(obj, value, &why)) {
        ctx.Error(loc, path, why);
      } else if ((f.has_lo || f.has_hi) && !f.InRange(f.get(obj).as<double>())) {
        ctx.Error(loc, path, absl::StrCat("expected ", f.TypeText(), ", got ", value.Scalar()));
      }
      return;
    }
    case Field::Kind::kSection:
      Walk(*f.section, f.member(obj), value, path + ".", loc, ctx);
      return;
    case Field::Kind::kSectionList: {
      if (value.IsNull()) {
        f.resize(obj, 0);
        return;
      }
      if (!value.IsSequence()) {
        ctx.Error(loc, path, "expected a list of sections (each item '- key: value')");
        return;
      }
      f.resize(obj, value.size());
      for (size_t i = 0; i < value.size(); ++i) {
        std::string item = absl::StrCat(path, "[", i, "]");
        SourceLoc item_loc = ctx.LocOf(item, value[i]);
        ctx.locs[item] = item_loc;
        Walk(*f.section, f.element(obj, i), value[i], item + ".", item_loc, ctx);
      }
      return;
    }
  }
}

void Walk(const Schema& schema, void* obj, const YAML::Node& node, const std::string& prefix,
          const SourceLoc& section_loc, WalkContext& ctx) {
  std::string here = prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1);
  std::map<std::string, int> seen;  // key (its new name when renamed) -> line first written
  std::set<std::string> old_names;  // keys of `seen` written under their old name
  if (node.IsDefined() && !node.IsNull()) {
    if (!node.IsMap()) {
      ctx.Error(section_loc, here,
                absl::StrCat("expected a section of 'key: value' lines, got ",
                             node.IsSequence() ? "a list" : absl::StrCat("'", node.Scalar(), "'")));
      return;
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node& key_node = it->first;
      if (!key_node.IsScalar()) {
        ctx.Error(ctx.LocOf(here, key_node), here, "keys must be plain names");
        continue;
      }
      const std::string written = key_node.Scalar();
      const std::string key = NewName(schema, written);
      std::string path = prefix + key;
      SourceLoc loc = ctx.LocOf(path, key_node);
      if (auto s = seen.find(key); s != seen.end()) {
        ctx.Error(loc, path,
                  key == written && !old_names.count(key)
                      ? absl::StrCat("duplicate key (first written at line ", s->second, ")")
                      : absl::StrCat("given twice (at line ", s->second,
                                     " and here), once under its old name; keep ", path, " only"));
        continue;
      }
      if (key != written) {
        old_names.insert(key);
        ctx.warnings.push_back(
            ConfigError{loc, prefix + written, RenamedMessage(prefix, written, key)});
      }
      seen[key] = loc.line;
      ctx.locs[path] = loc;
      const Field* f = schema.Find(key);
      if (f == nullptr) {
        std::string msg = "unknown key";
        std::string near = NearestWord(key, schema.FieldNames());
        if (!near.empty()) {
          absl::StrAppend(&msg, " (did you mean ", prefix, near, "?)");
        } else if (std::string other = SuggestElsewhere(ctx, key); !other.empty()) {
          absl::StrAppend(&msg, " (did you mean ", other, "?)");
        } else {
          absl::StrAppend(&msg, "; valid keys", here.empty() ? "" : " here", ": ",
                          JoinOr(schema.FieldNames()));
        }
        ctx.Error(loc, path, msg);
        continue;
      }
      WalkField(*f, obj, it->second, path, loc, ctx);
    }
  }
  for (const auto& f : schema.fields) {
    if (seen.count(f.name)) continue;
    if (f.required) {
      // A section that only overrides created points nowhere in the file: use its top.
      SourceLoc at = section_loc;
      if (at.line == 0) at = SourceLoc{ctx.file, 1, 1, ""};
      ctx.Error(at, prefix + f.name,
                absl::StrCat("missing required key (", f.TypeText(), "): ", f.doc));
    } else if (f.kind == Field::Kind::kSection) {
      // Absent sections still get their required keys and rules checked.
      Walk(*f.section, f.member(obj), YAML::Node(), prefix + f.name + ".", section_loc, ctx);
    }
  }
  CheckContext check_ctx(&ctx.locs, &section_loc, &ctx.errors, prefix);
  for (const auto& check : schema.checks) check(obj, check_ctx);
}

// One step of an override's key: a section key, or a list index (`[2]`, or `.2` as before).
struct KeyStep {
  std::string name;   // empty for an index
  std::string index;  // the digits, for an index
};

// "a.b[2].c" (or "a.b.2.c") -> steps; false when the key is not of that form.
bool ParseKey(const std::string& key, std::vector<KeyStep>& steps) {
  static const std::regex re(
      R"([A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+)|\[[0-9]+\])*)");
  if (!std::regex_match(key, re)) return false;
  static const std::regex step(R"(([A-Za-z_][A-Za-z0-9_]*)|([0-9]+))");
  for (auto it = std::sregex_iterator(key.begin(), key.end(), step); it != std::sregex_iterator();
       ++it) {
    if ((*it)[1].matched) {
      steps.push_back({(*it)[1].str(), ""});
    } else {
      steps.push_back({"", (*it)[2].str()});
    }
  }
  return true;
}

// Applies "a.b.c=value" or "a.b[2].c=value" to the tree.
void ApplyOverride(YAML::Node& root, const std::string& arg, WalkContext& ctx) {
  SourceLoc loc;
  loc.override = arg;
  size_t eq = arg.find('=');
  if (eq == std::string::npos) {
    ctx.Error(loc, "", "expected key=value (e.g. trainer.lr=3e-4)");
    return;
  }
  std::string key = arg.substr(0, eq);
  std::string text = arg.substr(eq + 1);
  std::vector<KeyStep> steps;
  if (!ParseKey(key, steps)) {
    ctx.Error(loc, key,
              "not a valid dotted key (letters, digits, '_' and '.'; list items as "
              "key[index])");
    return;
  }
  if (text.empty()) {
    ctx.Error(loc, key, "no value after '='");
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    ctx.Error(loc, key, absl::StrCat("value is not valid YAML: ", e.msg));
    return;
  }
  YAML::Node cur = root;
  std::string walked;               // the key so far, in the walker's notation: items[2].name
  const Schema* schema = ctx.root;  // the schema at `walked`; null past an unknown key
  for (size_t i = 0; i < steps.size(); ++i) {
    const KeyStep& step = steps[i];
    const bool last = i + 1 == steps.size();
    if (!step.name.empty()) {
      if (cur.IsSequence()) {
        ctx.Error(loc, key,
                  absl::StrCat(walked, " is a list: name an item, as ", walked, "[0].", step.name));
        return;
      }
      if (!cur.IsMap() && !cur.IsNull()) {
        ctx.Error(loc, key, absl::StrCat(walked, " is a value, not a section"));
        return;
      }
      std::string name = step.name;  // in the tree; `walked` has the schema's names
      if (i == 0) {
        name = NewName(*ctx.root, step.name);
        if (name != step.name) {
          ctx.warnings.push_back(ConfigError{loc, key, RenamedMessage("", step.name, name)});
        }
        absl::StrAppend(&walked, name);
        name = TreeName(*ctx.root, root, name);
      } else {
        absl::StrAppend(&walked, ".", name);
      }
      const Field* field = schema == nullptr ? nullptr : schema->Find(i == 0 ? walked : name);
      schema = field == nullptr ? nullptr : field->section.get();
      const bool present = cur[name].IsDefined() && !cur[name].IsNull();
      if (!last && !present && steps[i + 1].name.empty()) {
        // Nothing in the file to index: say what the key is.
        const bool list = field == nullptr || field->kind == Field::Kind::kSectionList ||
                          absl::StartsWith(field->type, "a list");
        ctx.Error(
            loc, key,
            list ? absl::StrCat(walked, " is not a list in the file: no item [", steps[i + 1].index,
                                "] to set (set the whole list: ", walked, "=[...])")
                 : absl::StrCat(walked, " is ",
                                field->kind == Field::Kind::kSection ? "a section" : "a value",
                                ", not a list: no item [", steps[i + 1].index, "]"));
        return;
      }
      if (last) {
        cur[name] = value;
      } else {
        if (!present) cur[name] = YAML::Node(YAML::NodeType::Map);
        YAML::Node next = cur[name];
        cur.reset(next);
      }
      continue;
    }
    // An index: only into a list the file (or an earlier override) wrote.
    if (!cur.IsSequence()) {
      ctx.Error(loc, key,
                absl::StrCat(walked, " is ", cur.IsMap() ? "a section" : "a value",
                             ", not a list: no item [", step.index, "]"));
      return;
    }
    const size_t size = cur.size();
    size_t idx = 0;
    if (!absl::SimpleAtoi(step.index, &idx) || idx >= size) {
      ctx.Error(loc, key,
                absl::StrCat("index ", step.index, " is out of range: ", walked, " has ", size,
                             size == 1 ? " item" : " items",
                             size == 0 ? "" : absl::StrCat(" ([0] to [", size - 1, "])")));
      return;
    }
    if (last) {
      cur[idx] = value;
    } else {
      YAML::Node next = cur[idx];
      cur.reset(next);
    }
    absl::StrAppend(&walked, "[", idx, "]");
  }
  ctx.overrides[walked] = loc;
}

}  // namespace

std::vector<ConfigError> LoadInto(const Schema& schema, void* obj, const LoadInput& input) {
  WalkContext ctx;
  ctx.root = &schema;
  ctx.file = input.file.empty() ? "<config>" : input.file;
  ctx.file_loc.file = ctx.file;
  YAML::Node root;
  try {
    root = YAML::Load(input.yaml_text);
  } catch (const YAML::ParserException& e) {
    SourceLoc loc{ctx.file, e.mark.line + 1, e.mark.column + 1, ""};
    ctx.Error(loc, "", absl::StrCat("YAML syntax error: ", e.msg));
    return ctx.errors;
  } catch (const YAML::Exception& e) {
    ctx.Error(ctx.file_loc, "", absl::StrCat("cannot read YAML: ", e.msg));
    return ctx.errors;
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) {
    ctx.Error(ctx.file_loc, "", "the job file must be a mapping of sections (job:, trainer:, ...)");
    return ctx.errors;
  }
  for (const auto& o : input.overrides) ApplyOverride(root, o, ctx);
  SourceLoc top = ctx.file_loc;
  top.line = 1;
  top.column = 1;
  Walk(schema, obj, root, "", top, ctx);
  CheckContext check_ctx(&ctx.locs, &top, &ctx.errors, "");
  for (const auto& check : input.checks) check(obj, check_ctx);
  std::stable_sort(ctx.errors.begin(), ctx.errors.end(),
                   [](const ConfigError& a, const ConfigError& b) {
                     bool ao = !a.loc.override.empty(), bo = !b.loc.override.empty();
                     if (ao != bo) return bo;
                     return a.loc.line < b.loc.line;
                   });
  if (input.warnings != nullptr) {
    input.warnings->insert(input.warnings->end(), ctx.warnings.begin(), ctx.warnings.end());
  }
  return ctx.errors;
}

std::vector<ConfigError> LoadFileInto(
    const Schema& schema, void* obj, const std::string& path,
    const std::vector<std::string>& overrides,
    std::vector<std::function<void(const void* obj, CheckContext& ctx)>> checks,
    std::vector<ConfigError>* warnings) {
  std::ifstream in(path);
  if (!in) {
    return {ConfigError{SourceLoc{path, 0, 0, ""}, "",
                        absl::StrCat("cannot open job file: ", std::strerror(errno))}};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return LoadInto(schema, obj, LoadInput{ss.str(), path, overrides, std::move(checks), warnings});
}

YAML::Node Dump(const Schema& schema, const void* obj) {
  YAML::Node out(YAML::NodeType::Map);
  for (const auto& f : schema.fields) {
    switch (f.kind) {
      case Field::Kind::kScalar:
        out[f.name] = f.get(obj);
        break;
      case Field::Kind::kSection:
        out[f.name] = Dump(*f.section, f.const_member(obj));
        break;
      case Field::Kind::kSectionList: {
        YAML::Node list(YAML::NodeType::Sequence);
        for (size_t i = 0; i < f.size(obj); ++i)
          list.push_back(Dump(*f.section, f.const_element(obj, i)));
        out[f.name] = list;
        break;
      }
    }
  }
  return out;
}

std::string DumpYaml(const Schema& schema, const void* obj) {
  YAML::Emitter e;
  e << Dump(schema, obj);
  return std::string(e.c_str()) + "\n";
}

namespace {

std::string Inline(const YAML::Node& n) {
  YAML::Emitter e;
  e << YAML::Flow << n;
  std::string s = e.c_str();
  return s.empty() ? "\"\"" : s;
}

void Reference(const Schema& schema, const void* defaults, const std::string& prefix,
               std::string* out) {
  bool has_scalars = std::any_of(schema.fields.begin(), schema.fields.end(),
                                 [](const Field& f) { return f.kind == Field::Kind::kScalar; });
  if (has_scalars) {
    absl::StrAppend(out, "| key | type | default | meaning |\n|---|---|---|---|\n");
    for (const auto& f : schema.fields) {
      if (f.kind != Field::Kind::kScalar) continue;
      std::string def =
          f.required ? "**required**" : absl::StrCat("`", Inline(f.get(defaults)), "`");
      absl::StrAppend(out, "| `", prefix, f.name, "` | ", f.TypeText(), " | ", def, " | ", f.doc,
                      " |\n");
    }
    absl::StrAppend(out, "\n");
  }
  for (const auto& f : schema.fields) {
    if (f.kind == Field::Kind::kSection) {
      absl::StrAppend(out, "### `", prefix, f.name, "`\n\n", f.section->doc, "\n\n");
      Reference(*f.section, f.const_member(defaults), prefix + f.name + ".", out);
    } else if (f.kind == Field::Kind::kSectionList) {
      absl::StrAppend(out, "### `", prefix, f.name, "[]`\n\n", f.doc, " Each item:\n\n");
      // Items start from the element type's defaults.
      Reference(*f.section, f.element_defaults(), prefix + f.name + "[].", out);
    }
  }
}

}  // namespace

std::string MarkdownReference(const Schema& schema, const void* defaults) {
  std::string out;
  Reference(schema, defaults, "", &out);
  return out;
}

std::string FormatErrors(const std::vector<ConfigError>& errors) {
  std::string out;
  for (const auto& e : errors) absl::StrAppend(&out, "error: ", e.ToString(), "\n");
  return out;
}

std::string FormatWarnings(const std::vector<ConfigError>& warnings) {
  std::string out;
  for (const auto& w : warnings) absl::StrAppend(&out, "warning: ", w.ToString(), "\n");
  return out;
}

}  // namespace rlforge::config
