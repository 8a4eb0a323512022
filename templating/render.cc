// Walks the AST with a chain of scopes: the globals and the caller's context, the template's
// top level, then one scope per for-loop iteration and per macro call (jinja2's rules: a `set`
// inside a loop is gone after that iteration; namespace() carries state out of it).
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "templating/ast.h"
#include "templating/builtins.h"
#include "templating/template.h"

namespace rlforge::templating {
namespace internal {
namespace {

struct Frame {
  std::unordered_map<std::string, Value> vars;
  const Frame* parent = nullptr;

  const Value* Find(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      const auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxMacroDepth = 64;

class Renderer {
 public:
  Renderer(const Dict& context, const Clock& now) {
    for (auto& [k, v] : Globals(now)) globals_.vars[k] = v;
    for (const auto& [k, v] : context) globals_.vars[k] = v;
    root_.parent = &globals_;
  }

  std::string Run(const Body& body) {
    std::string out;
    Exec(body, root_, out);
    return out;
  }

 private:
  Flow Exec(const Body& body, Frame& f, std::string& out) {
    for (const auto& n : body) {
      try {
        const Flow flow = ExecNode(*n, f, out);
        if (flow != Flow::kNormal) return flow;
      } catch (TemplateError& e) {
        if (e.line == 0) {
          e.line = n->line;
          e.col = n->col;
        }
        throw;
      }
    }
    return Flow::kNormal;
  }

  Flow ExecNode(const Node& n, Frame& f, std::string& out) {
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out += Eval(*n.expr, f).Str();
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (Eval(*cond, f).Truthy()) return Exec(body, f, out);
        }
        return Exec(n.else_body, f, out);
      case Node::Kind::kFor:
        ExecFor(n, f, out);
        return Flow::kNormal;
      case Node::Kind::kSet:
        Assign(n, Eval(*n.expr, f), f);
        return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string text;
        Exec(n.body, f, text);
        Assign(n, Value(std::move(text)), f);
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        f.vars[n.targets[0]] = MakeMacro(n, f);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  static void Bind(const std::vector<std::string>& targets, const Value& v, Frame& f) {
    if (targets.size() == 1) {
      f.vars[targets[0]] = v;
      return;
    }
    if (!v.is_list() || v.as_list().size() != targets.size()) {
      Throw(absl::StrCat("cannot unpack ", v.TypeName(), " ", v.Repr(), " into ", targets.size(),
                         " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) f.vars[targets[i]] = v.as_list()[i];
  }

  void Assign(const Node& n, Value v, Frame& f) {
    if (n.attribute.empty()) {
      Bind(n.targets, v, f);
      return;
    }
    const Value* ns = f.Find(n.targets[0]);
    if (ns == nullptr || !ns->is_namespace()) {
      Throw(absl::StrCat("cannot set '", n.targets[0], ".", n.attribute, "': '", n.targets[0],
                         "' is not a namespace()"));
    }
    ns->SetAttribute(n.attribute, std::move(v));
  }

  static Value LoopInfo(size_t i, const std::vector<Value>& items) {
    const auto n = static_cast<int64_t>(items.size());
    const auto k = static_cast<int64_t>(i);
    Dict loop = {
        {"index0", Value(k)},       {"index", Value(k + 1)},  {"revindex0", Value(n - k - 1)},
        {"revindex", Value(n - k)}, {"first", Value(k == 0)}, {"last", Value(k == n - 1)},
        {"length", Value(n)}};
    if (i > 0) loop.emplace_back("previtem", items[i - 1]);
    if (i + 1 < items.size()) loop.emplace_back("nextitem", items[i + 1]);
    return Value(std::move(loop));
  }

  void ExecFor(const Node& n, Frame& f, std::string& out) {
    std::vector<Value> items = Iterate(Eval(*n.expr, f));
    if (n.condition) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        Frame scope{{}, &f};
        Bind(n.targets, item, scope);
        if (Eval(*n.condition, scope).Truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Exec(n.else_body, f, out);
      return;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Frame scope{{}, &f};
      Bind(n.targets, items[i], scope);
      scope.vars["loop"] = LoopInfo(i, items);
      if (Exec(n.body, scope, out) == Flow::kBreak) break;
    }
  }

  Value MakeMacro(const Node& n, const Frame& defined_in) {
    return Value::FromFunction([this, &n, &defined_in](CallArgs& a) {
      if (a.positional.size() > n.params.size()) {
        Throw(absl::StrCat("macro '", n.targets[0], "' takes ", n.params.size(), " arguments, got ",
                           a.positional.size()));
      }
      if (++macro_depth_ > kMaxMacroDepth) Throw("macros nested too deeply");
      Frame scope{{}, &defined_in};
      for (size_t i = 0; i < n.params.size(); ++i) {
        const auto& [name, def] = n.params[i];
        Value v =
            Arg(a, i, name.c_str(), Value::Undefined(absl::StrCat("'", name, "' is undefined")));
        if (v.is_undefined() && def) v = Eval(*def, scope);
        scope.vars[name] = v;
      }
      std::string text;
      Exec(n.body, scope, text);
      --macro_depth_;
      return Value(std::move(text));
    });
  }

  Value Eval(const Expr& e, Frame& f) {
    try {
      return EvalInner(e, f);
    } catch (TemplateError& err) {
      if (err.line == 0) {
        err.line = e.line;
        err.col = e.col;
      }
      throw;
    }
  }

  CallArgs EvalArgs(const Expr& e, Frame& f) {
    CallArgs a;
    for (size_t i = 1; i < e.args.size(); ++i) a.positional.push_back(Eval(*e.args[i], f));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, Eval(*v, f));
    return a;
  }

  Value EvalInner(const Expr& e, Frame& f);
  Value EvalCompare(const Expr& e, Frame& f);

  Frame globals_, root_;
  int macro_depth_ = 0;
};

Value Renderer::EvalInner(const Expr& e, Frame& f) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::kLiteral:
      return e.value;
    case K::kName: {
      const Value* v = f.Find(e.name);
      return v ? *v : Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
    }
    case K::kList:
    case K::kTuple: {
      List items;
      for (const auto& a : e.args) items.push_back(Eval(*a, f));
      return e.kind == K::kTuple ? Value::Tuple(std::move(items)) : Value(std::move(items));
    }
    case K::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = Eval(*e.args[i], f);
        if (!key.is_string()) Throw("dict keys must be strings");
        d.emplace_back(key.as_string(), Eval(*e.args[i + 1], f));
      }
      return Value(std::move(d));
    }
    case K::kAttr:
      return GetAttr(Eval(*e.args[0], f), e.name);
    case K::kItem:
      return GetItem(Eval(*e.args[0], f), Eval(*e.args[1], f));
    case K::kSlice: {
      Value parts[3];
      for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<size_t>(i) + 1])
          parts[i] = Eval(*e.args[static_cast<size_t>(i) + 1], f);
      }
      return Slice(Eval(*e.args[0], f), parts[0], parts[1], parts[2]);
    }
    case K::kCall: {
      const Value fn = Eval(*e.args[0], f);
      CheckDefined(fn);
      if (fn.kind() != Value::Kind::kFunction) {
        Throw(absl::StrCat("'", fn.TypeName(), "' object is not callable"));
      }
      CallArgs a = EvalArgs(e, f);
      return fn.as_function()(a);
    }
    case K::kFilter: {
      CallArgs a = EvalArgs(e, f);
      a.positional.insert(a.positional.begin(), Eval(*e.args[0], f));
      return ApplyFilter(e.name, a);
    }
    case K::kTest: {
      CallArgs a = EvalArgs(e, f);
      a.positional.insert(a.positional.begin(), Eval(*e.args[0], f));
      return Value(ApplyTest(e.name, a) != e.negated);
    }
    case K::kUnary: {
      const Value v = Eval(*e.args[0], f);
      if (e.name == "not") return Value(!v.Truthy());
      CheckDefined(v);
      if (v.kind() == Value::Kind::kInt) return Value(e.name == "-" ? -v.as_int() : v.as_int());
      if (v.is_number()) return Value(e.name == "-" ? -v.as_number() : v.as_number());
      Throw(absl::StrCat("bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
    }
    case K::kBinary: {
      const Value a = Eval(*e.args[0], f);
      if (e.name == "and") return a.Truthy() ? Eval(*e.args[1], f) : a;
      if (e.name == "or") return a.Truthy() ? a : Eval(*e.args[1], f);
      return BinaryOp(e.name, a, Eval(*e.args[1], f));
    }
    case K::kCompare:
      return EvalCompare(e, f);
    case K::kCondition:
      if (Eval(*e.args[1], f).Truthy()) return Eval(*e.args[0], f);
      return e.args[2] ? Eval(*e.args[2], f) : Value::Undefined("the condition was false");
  }
  return Value();
}

Value Renderer::EvalCompare(const Expr& e, Frame& f) {
  Value left = Eval(*e.args[0], f);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = Eval(*e.args[i + 1], f);
    const std::string& op = e.ops[i];
    bool result = false;
    if (op == "==") {
      result = Equal(left, right);
    } else if (op == "!=") {
      result = !Equal(left, right);
    } else if (op == "in" || op == "not in") {
      result = Contains(right, left) == (op == "in");
    } else {
      CheckDefined(left);
      CheckDefined(right);
      bool ok = false;
      const int c = Compare(left, right, &ok);
      if (!ok) {
        Throw(absl::StrCat("'", op, "' not supported between '", left.TypeName(), "' and '",
                           right.TypeName(), "'"));
      }
      result = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!result) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

absl::Status ErrorStatus(const std::string& name, const TemplateError& e) {
  return absl::InvalidArgumentError(absl::StrCat(name, ":", e.line, ":", e.col, ": ", e.message));
}

}  // namespace
}  // namespace internal

absl::StatusOr<Template> Template::Parse(const std::string& source, std::string name) {
  Template t;
  t.name_ = std::move(name);
  try {
    t.body_ = std::make_shared<const internal::Body>(internal::Parse(source));
  } catch (const internal::TemplateError& e) {
    return internal::ErrorStatus(t.name_, e);
  }
  return t;
}

absl::StatusOr<std::string> Template::Render(const Dict& context,
                                             const RenderOptions& options) const {
  const internal::Clock now =
      options.now ? options.now : [] { return std::chrono::system_clock::now(); };
  try {
    internal::Renderer r(context, now);
    return r.Run(*body_);
  } catch (const internal::TemplateError& e) {
    return internal::ErrorStatus(name_, e);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(name_, ": ", e.what()));
  }
}

}  // namespace rlforge::templating
