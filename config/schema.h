// Typed configuration schemas: YAML -> validated C++ structs.
//
// YAML text + overrides -> node tree -> schema walk -> struct + every error at once
//
// A Schema lists the keys of one struct type: each key's type, default (the
// struct's own initial value), range, documentation and member. Sections nest
// and lists of sections are supported. The same schema drives loading,
// validation, the resolved-config dump and the generated key reference
// (docs/config.md), so they cannot drift apart.
//
// Schemas are built once and are immutable afterwards; concurrent reads are safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/choices.h"
#include "yaml-cpp/yaml.h"

namespace rlforge::config {

// Where a value came from.
struct SourceLoc {
  std::string file;      // "configs/ppo.yaml" or "" for a command-line override
  int line = 0;          // 1-based; 0 when unknown
  int column = 0;        // 1-based
  std::string override;  // the "key=value" argument when it came from the command line
  std::string ToString() const;
};

struct ConfigError {
  SourceLoc loc;
  std::string key;  // dotted path, "" for file-level problems
  std::string message;
  std::string ToString() const;  // "file:line:col: key: message"
};

// Cross-field checks report through this; it knows where each key was written.
class CheckContext {
 public:
  CheckContext(const std::map<std::string, SourceLoc>* locs, const SourceLoc* file_loc,
               std::vector<ConfigError>* errors, std::string prefix)
      : locs_(locs), file_loc_(file_loc), errors_(errors), prefix_(std::move(prefix)) {}
  // `key` is relative to the struct being checked ("workers" in section "rollout").
  void Error(const std::string& key, const std::string& message);
  // Whether the job file or an override wrote `key` (relative, like Error's) or a key below it.
  bool Written(const std::string& key) const;

 private:
  const std::map<std::string, SourceLoc>* locs_;
  const SourceLoc* file_loc_;
  std::vector<ConfigError>* errors_;
  std::string prefix_;
};

class Schema;

struct Field {
  enum class Kind { kScalar, kSection, kSectionList };
  Kind kind = Kind::kScalar;
  std::string name;
  std::string doc;
  std::string type;  // base type for messages and docs: "an integer", "one of a, b"
  bool required = false;
  bool has_lo = false, has_hi = false;
  bool lo_inclusive = true, hi_inclusive = true;
  double lo = 0, hi = 0;
  // The type with its bounds: "an integer >= 1", "a number in (0, 1]".
  std::string TypeText() const;
  // Whether a parsed value is within the bounds.
  bool InRange(double v) const;
  // Scalars (and lists of scalars): parse into obj, or return why not.
  std::function<bool(void* obj, const YAML::Node& node, std::string* why)> set;
  std::function<YAML::Node(const void* obj)> get;
  // Sections: the nested struct inside obj.
  std::shared_ptr<const Schema> section;
  std::function<void*(void* obj)> member;
  std::function<const void*(const void* obj)> const_member;
  // Section lists: resize to n, element i.
  std::function<void(void* obj, size_t n)> resize;
  std::function<size_t(const void* obj)> size;
  std::function<void*(void* obj, size_t i)> element;
  std::function<const void*(const void* obj, size_t i)> const_element;
  std::function<const void*()> element_defaults;  // a default item, for docs
};

class Schema {
 public:
  std::string doc;
  std::vector<Field> fields;
  std::vector<std::function<void(const void* obj, CheckContext& ctx)>> checks;
  // Sections renamed at this level: old name -> new. The old name still loads (in the file and
  // in overrides) with a warning naming the new one; both in one job is an error.
  std::map<std::string, std::string> renamed;

  const Field* Find(const std::string& name) const;
  std::vector<std::string> FieldNames() const;
  // Every dotted scalar key below this schema ("trainer.lr", "rewards[].weight").
  void CollectKeys(const std::string& prefix, std::vector<std::string>* out) const;
};

// Fluent builder for Schema over struct T. Example:
//   SchemaBuilder<Trainer> b("The learner.");
//   b.Double("lr", &Trainer::lr, "Adam learning rate.").Min(0, /*inclusive=*/false);
template <typename T>
class SchemaBuilder {
 public:
  explicit SchemaBuilder(std::string doc) : schema_(std::make_shared<Schema>()) {
    schema_->doc = std::move(doc);
  }

  class FieldRef {
   public:
    FieldRef(Schema* s, size_t i) : s_(s), i_(i) {}
    FieldRef& Required() {
      f().required = true;
      return *this;
    }
    // Numeric bounds, checked after parsing.
    FieldRef& Min(double lo, bool inclusive = true) {
      f().has_lo = true;
      f().lo = lo;
      f().lo_inclusive = inclusive;
      return *this;
    }
    FieldRef& Max(double hi, bool inclusive = true) {
      f().has_hi = true;
      f().hi = hi;
      f().hi_inclusive = inclusive;
      return *this;
    }

   private:
    Field& f() { return s_->fields[i_]; }
    Schema* s_;
    size_t i_;
  };

  FieldRef Bool(const std::string& name, bool T::*m, const std::string& doc);
  FieldRef Int(const std::string& name, int64_t T::*m, const std::string& doc);
  FieldRef Double(const std::string& name, double T::*m, const std::string& doc);
  FieldRef String(const std::string& name, std::string T::*m, const std::string& doc);
  FieldRef Choice(const std::string& name, std::string T::*m, std::vector<std::string> choices,
                  const std::string& doc);
  // A closed choice: one word of ChoiceWords<E> (config/choices.h), stored as the enum.
  template <typename E>
  FieldRef Enum(const std::string& name, E T::*m, const std::string& doc);
  FieldRef DoubleList(const std::string& name, std::vector<double> T::*m, const std::string& doc);
  FieldRef IntList(const std::string& name, std::vector<int64_t> T::*m, const std::string& doc);
  FieldRef StringList(const std::string& name, std::vector<std::string> T::*m,
                      const std::string& doc);

  // A scalar of a type of the caller's (an enum, a registry entry) with its own parser and
  // printer; `type` names the accepted values for messages and docs.
  template <typename V>
  FieldRef Typed(const std::string& name, V T::*m, const std::string& doc, std::string type,
                 std::function<bool(const YAML::Node&, V*, std::string*)> parse,
                 std::function<YAML::Node(const V&)> show) {
    return Scalar<V>(name, m, doc, std::move(type), std::move(parse), std::move(show));
  }

  template <typename S>
  FieldRef Section(const std::string& name, S T::*m, std::shared_ptr<const Schema> schema) {
    Field f;
    f.kind = Field::Kind::kSection;
    f.name = name;
    f.doc = schema->doc;
    f.type = "section";
    f.section = std::move(schema);
    f.member = [m](void* o) -> void* { return &(static_cast<T*>(o)->*m); };
    f.const_member = [m](const void* o) -> const void* { return &(static_cast<const T*>(o)->*m); };
    return Add(std::move(f));
  }

  template <typename S>
  FieldRef SectionList(const std::string& name, std::vector<S> T::*m,
                       std::shared_ptr<const Schema> schema, const std::string& doc) {
    Field f;
    f.kind = Field::Kind::kSectionList;
    f.name = name;
    f.doc = doc;
    f.type = "list of sections";
    f.section = std::move(schema);
    f.resize = [m](void* o, size_t n) { (static_cast<T*>(o)->*m).resize(n); };
    f.size = [m](const void* o) { return (static_cast<const T*>(o)->*m).size(); };
    f.element = [m](void* o, size_t i) -> void* { return &(static_cast<T*>(o)->*m)[i]; };
    f.const_element = [m](const void* o, size_t i) -> const void* {
      return &(static_cast<const T*>(o)->*m)[i];
    };
    f.element_defaults = []() -> const void* {
      static const S item{};
      return &item;
    };
    return Add(std::move(f));
  }

  // A cross-field rule; report problems with ctx.Error(key, message).
  void Check(std::function<void(const T&, CheckContext&)> fn) {
    schema_->checks.push_back([fn = std::move(fn)](const void* o, CheckContext& ctx) {
      fn(*static_cast<const T*>(o), ctx);
    });
  }

  // `old_name` is what section `name` was called before: still accepted, with a warning.
  void Renamed(const std::string& old_name, const std::string& name) {
    schema_->renamed[old_name] = name;
  }

  std::shared_ptr<const Schema> Build() { return schema_; }

 private:
  FieldRef Add(Field f) {
    schema_->fields.push_back(std::move(f));
    return FieldRef(schema_.get(), schema_->fields.size() - 1);
  }
  template <typename V>
  FieldRef Scalar(const std::string& name, V T::*m, const std::string& doc, std::string type,
                  std::function<bool(const YAML::Node&, V*, std::string*)> parse,
                  std::function<YAML::Node(const V&)> show);
  std::shared_ptr<Schema> schema_;
};

// Scalar parsers, strict: "3.5" is not an integer, "yes" is not a bool.
bool ParseBool(const YAML::Node& n, bool* out, std::string* why);
bool ParseInt(const YAML::Node& n, int64_t* out, std::string* why);
bool ParseDouble(const YAML::Node& n, double* out, std::string* why);
bool ParseString(const YAML::Node& n, std::string* out, std::string* why);
// Shortest text that reads back to the same double.
std::string FormatDouble(double v);

// ---- template definitions ----

template <typename T>
template <typename V>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::Scalar(
    const std::string& name, V T::*m, const std::string& doc, std::string type,
    std::function<bool(const YAML::Node&, V*, std::string*)> parse,
    std::function<YAML::Node(const V&)> show) {
  Field f;
  f.name = name;
  f.doc = doc;
  f.type = std::move(type);
  f.set = [m, parse](void* o, const YAML::Node& n, std::string* why) {
    return parse(n, &(static_cast<T*>(o)->*m), why);
  };
  f.get = [m, show](const void* o) { return show(static_cast<const T*>(o)->*m); };
  return Add(std::move(f));
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::Bool(const std::string& name, bool T::*m,
                                                           const std::string& doc) {
  return Scalar<bool>(name, m, doc, "true or false", ParseBool,
                      [](const bool& v) { return YAML::Node(v); });
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::Int(const std::string& name, int64_t T::*m,
                                                          const std::string& doc) {
  return Scalar<int64_t>(name, m, doc, "an integer", ParseInt,
                         [](const int64_t& v) { return YAML::Node(v); });
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::Double(const std::string& name, double T::*m,
                                                             const std::string& doc) {
  return Scalar<double>(name, m, doc, "a number", ParseDouble,
                        [](const double& v) { return YAML::Node(FormatDouble(v)); });
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::String(const std::string& name,
                                                             std::string T::*m,
                                                             const std::string& doc) {
  return Scalar<std::string>(name, m, doc, "a string", ParseString,
                             [](const std::string& v) { return YAML::Node(v); });
}

std::function<bool(const YAML::Node&, std::string*, std::string*)> MakeChoiceParser(
    std::vector<std::string> choices);
std::function<bool(const YAML::Node&, std::vector<double>*, std::string*)> MakeDoubleListParser();
std::function<bool(const YAML::Node&, std::vector<std::string>*, std::string*)>
MakeStringListParser();
std::function<bool(const YAML::Node&, std::vector<int64_t>*, std::string*)> MakeIntListParser();
YAML::Node ShowIntList(const std::vector<int64_t>& v);
YAML::Node ShowDoubleList(const std::vector<double>& v);
YAML::Node ShowStringList(const std::vector<std::string>& v);
std::string ChoiceType(const std::vector<std::string>& choices);

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::Choice(const std::string& name,
                                                             std::string T::*m,
                                                             std::vector<std::string> choices,
                                                             const std::string& doc) {
  std::string type = ChoiceType(choices);
  return Scalar<std::string>(name, m, doc, type, MakeChoiceParser(std::move(choices)),
                             [](const std::string& v) { return YAML::Node(v); });
}

template <typename T>
template <typename E>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::Enum(const std::string& name, E T::*m,
                                                           const std::string& doc) {
  std::vector<std::string> words = ChoiceWordList<E>();
  std::string type = ChoiceType(words);
  auto word = MakeChoiceParser(std::move(words));
  return Scalar<E>(
      name, m, doc, type,
      [word](const YAML::Node& n, E* out, std::string* why) {
        std::string w;
        if (!word(n, &w, why)) return false;
        *out = *ParseChoice<E>(w);
        return true;
      },
      [](const E& v) { return YAML::Node(std::string(ChoiceName(v))); });
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::DoubleList(const std::string& name,
                                                                 std::vector<double> T::*m,
                                                                 const std::string& doc) {
  return Scalar<std::vector<double>>(name, m, doc, "a list of numbers", MakeDoubleListParser(),
                                     ShowDoubleList);
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::IntList(const std::string& name,
                                                              std::vector<int64_t> T::*m,
                                                              const std::string& doc) {
  return Scalar<std::vector<int64_t>>(name, m, doc, "a list of integers", MakeIntListParser(),
                                      ShowIntList);
}

template <typename T>
typename SchemaBuilder<T>::FieldRef SchemaBuilder<T>::StringList(const std::string& name,
                                                                 std::vector<std::string> T::*m,
                                                                 const std::string& doc) {
  return Scalar<std::vector<std::string>>(name, m, doc, "a list of strings", MakeStringListParser(),
                                          ShowStringList);
}

}  // namespace rlforge::config
