// Recursive descent over the lexer's tokens, with jinja2's precedence: conditional, or,
// and, not, comparisons, + -, ~, * / // %, **, unary - +, then postfix (. [] ()) and
// filters / tests.
#include <set>

#include "absl/strings/str_cat.h"
#include "templating/ast.h"
#include "templating/lexer.h"

namespace rlforge::templating::internal {
namespace {

using TK = Token::Kind;

// Words that only continue or close a block someone opened.
const std::set<std::string> kClosers = {"elif",   "else",     "endif",        "endfor",
                                        "endset", "endmacro", "endgeneration"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body Template() {
    Body body = Statements({});
    if (Peek().kind != TK::kEnd) {
      Fail(Peek(), absl::StrCat("unexpected '", Peek().text, "'"));
    }
    return body;
  }

 private:
  // Parses nodes until a block tag whose keyword is in `stop` (left unconsumed: the caller
  // reads it) or the end.
  Body Statements(const std::set<std::string>& stop) {
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == TK::kEnd) {
        if (!stop.empty()) Fail(t, "unexpected end of template" + Expected(stop));
        return body;
      }
      if (t.kind == TK::kText) {
        body.push_back(MakeNode(Node::Kind::kText, t));
        body.back()->text = Next().text;
      } else if (t.kind == TK::kVarBegin) {
        auto n = MakeNode(Node::Kind::kOutput, Next());
        n->expr = Expression();
        Expect(TK::kVarEnd, "'}}'");
        body.push_back(std::move(n));
      } else {
        const Token& kw = t_[pos_ + 1];
        if (kw.kind == TK::kName && stop.count(kw.text)) return body;
        if (kw.kind == TK::kName && kClosers.count(kw.text)) {
          Fail(kw, absl::StrCat("unexpected '", kw.text, "'", Expected(stop)));
        }
        Next();
        body.push_back(Statement());
      }
    }
  }

  // ", expected 'a', 'b' or 'c'" (empty when nothing is open).
  static std::string Expected(const std::set<std::string>& stop) {
    std::string out;
    size_t i = 0;
    for (const std::string& s : stop) {
      out += i == 0 ? ", expected '" : (i + 1 == stop.size() ? " or '" : ", '");
      absl::StrAppend(&out, s, "'");
      ++i;
    }
    return out;
  }

  std::unique_ptr<Node> Statement() {
    const Token& kw = Peek();
    if (kw.kind != TK::kName) Fail(kw, "expected a statement keyword");
    const std::string word = Next().text;
    if (word == "if") return If(kw);
    if (word == "for") return For(kw);
    if (word == "set") return Set(kw);
    if (word == "macro") return Macro(kw);
    if (word == "generation") return Generation(kw);
    if (word == "break" || word == "continue") {
      if (loop_depth_ == 0) Fail(kw, absl::StrCat("'", word, "' outside a for loop"));
      EndTag();
      return MakeNode(word == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, kw);
    }
    Fail(kw, absl::StrCat("unknown tag '", word, "'"));
  }

  std::unique_ptr<Node> If(const Token& at) {
    auto n = MakeNode(Node::Kind::kIf, at);
    ExprPtr cond = Expression();
    EndTag();
    while (true) {
      Body body = Statements({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      const std::string word = OpenTag();
      if (word == "elif") {
        cond = Expression();
        EndTag();
        continue;
      }
      EndTag();
      if (word == "else") {
        n->else_body = Statements({"endif"});
        OpenTag();
        EndTag();
      }
      return n;
    }
  }

  std::unique_ptr<Node> For(const Token& at) {
    auto n = MakeNode(Node::Kind::kFor, at);
    do {
      n->targets.push_back(Name("a loop variable"));
    } while (AcceptOp(","));
    if (!AcceptName("in")) Fail(Peek(), "expected 'in' in the for tag");
    n->expr = Or(/*allow_condition=*/false);
    if (AcceptName("if")) n->condition = Expression();
    if (AcceptName("recursive")) Fail(t_[pos_ - 1], "recursive loops are not supported");
    EndTag();
    ++loop_depth_;
    n->body = Statements({"else", "endfor"});
    --loop_depth_;
    if (OpenTag() == "else") {
      EndTag();
      n->else_body = Statements({"endfor"});
      OpenTag();
    }
    EndTag();
    return n;
  }

  std::unique_ptr<Node> Set(const Token& at) {
    auto n = MakeNode(Node::Kind::kSet, at);
    n->targets.push_back(Name("a variable name"));
    if (AcceptOp(".")) {
      n->attribute = Name("an attribute name");
    } else {
      while (AcceptOp(",")) n->targets.push_back(Name("a variable name"));
    }
    if (AcceptOp("=")) {
      n->expr = Expression();
      if (Peek().kind == TK::kOp && Peek().text == ",") n->expr = TupleRest(std::move(n->expr));
      EndTag();
      return n;
    }
    if (n->targets.size() != 1 || !n->attribute.empty()) Fail(Peek(), "expected '='");
    EndTag();
    n->kind = Node::Kind::kSetBlock;
    n->body = Statements({"endset"});
    OpenTag();
    EndTag();
    return n;
  }

  std::unique_ptr<Node> Macro(const Token& at) {
    auto n = MakeNode(Node::Kind::kMacro, at);
    n->targets.push_back(Name("a macro name"));
    ExpectOp("(");
    while (!AcceptOp(")")) {
      if (!n->params.empty()) ExpectOp(",");
      std::string param = Name("a parameter name");
      ExprPtr def = AcceptOp("=") ? Expression() : nullptr;
      n->params.emplace_back(std::move(param), std::move(def));
    }
    EndTag();
    n->body = Statements({"endmacro"});
    OpenTag();
    EndTag();
    return n;
  }

  // transformers' {% generation %} marks assistant text for masks; it renders its body as is.
  std::unique_ptr<Node> Generation(const Token& at) {
    EndTag();
    auto n = MakeNode(Node::Kind::kIf, at);
    auto yes = std::make_unique<Expr>();
    yes->value = Value(true);
    n->branches.emplace_back(std::move(yes), Statements({"endgeneration"}));
    OpenTag();
    EndTag();
    return n;
  }

  // ---- expressions ----

  ExprPtr Expression() { return Or(/*allow_condition=*/true); }

  ExprPtr Or(bool allow_condition) {
    ExprPtr e = Binary("or", &Parser::And);
    if (!allow_condition || !(Peek().kind == TK::kName && Peek().text == "if")) return e;
    const Token& at = Next();
    auto c = MakeExpr(Expr::Kind::kCondition, at);
    c->args.push_back(std::move(e));
    c->args.push_back(Or(false));
    c->args.push_back(AcceptName("else") ? Or(true) : nullptr);
    return c;
  }

  ExprPtr And() { return Binary("and", &Parser::Not); }

  ExprPtr Binary(const char* word, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (Peek().kind == TK::kName && Peek().text == word) {
      auto b = MakeExpr(Expr::Kind::kBinary, Next());
      b->name = word;
      b->args.push_back(std::move(left));
      b->args.push_back((this->*operand)());
      left = std::move(b);
    }
    return left;
  }

  ExprPtr Not() {
    if (Peek().kind == TK::kName && Peek().text == "not") {
      auto u = MakeExpr(Expr::Kind::kUnary, Next());
      u->name = "not";
      u->args.push_back(Not());
      return u;
    }
    return Compare();
  }

  ExprPtr Compare() {
    ExprPtr first = Math1();
    ExprPtr cmp;
    while (true) {
      const Token& t = Peek();
      std::string op;
      if (t.kind == TK::kOp &&
          std::set<std::string>{"==", "!=", "<", ">", "<=", ">="}.count(t.text)) {
        op = t.text;
        Next();
      } else if (t.kind == TK::kName && t.text == "in") {
        op = "in";
        Next();
      } else if (t.kind == TK::kName && t.text == "not" && t_[pos_ + 1].kind == TK::kName &&
                 t_[pos_ + 1].text == "in") {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = MakeExpr(Expr::Kind::kCompare, t);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(Math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr Arith(const std::set<std::string>& ops, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (Peek().kind == TK::kOp && ops.count(Peek().text)) {
      auto b = MakeExpr(Expr::Kind::kBinary, Peek());
      b->name = Next().text;
      b->args.push_back(std::move(left));
      b->args.push_back((this->*operand)());
      left = std::move(b);
    }
    return left;
  }
  ExprPtr Math1() { return Arith({"+", "-"}, &Parser::Concat); }
  ExprPtr Concat() { return Arith({"~"}, &Parser::Math2); }
  ExprPtr Math2() { return Arith({"*", "/", "//", "%"}, &Parser::Pow); }
  ExprPtr Pow() { return Arith({"**"}, &Parser::UnaryWithFilters); }
  ExprPtr UnaryWithFilters() { return Unary(true); }

  ExprPtr Unary(bool with_filters) {
    ExprPtr e;
    if (Peek().kind == TK::kOp && (Peek().text == "-" || Peek().text == "+")) {
      e = MakeExpr(Expr::Kind::kUnary, Peek());
      e->name = Next().text;
      e->args.push_back(Unary(false));
    } else {
      e = Primary();
    }
    e = Postfix(std::move(e));
    return with_filters ? FiltersAndTests(std::move(e)) : std::move(e);
  }

  ExprPtr Postfix(ExprPtr e);
  ExprPtr FiltersAndTests(ExprPtr e);
  ExprPtr Primary();
  ExprPtr Subscript(ExprPtr target, const Token& at);
  void CallArguments(Expr& call);
  ExprPtr TupleRest(ExprPtr first);
  ExprPtr ListOrDict(const Token& open);

  // ---- tokens ----

  const Token& Peek() const { return t_[pos_]; }
  const Token& Next() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }
  bool AcceptOp(const char* op) {
    if (Peek().kind != TK::kOp || Peek().text != op) return false;
    Next();
    return true;
  }
  bool AcceptName(const char* word) {
    if (Peek().kind != TK::kName || Peek().text != word) return false;
    Next();
    return true;
  }
  void ExpectOp(const char* op) {
    if (!AcceptOp(op)) Fail(Peek(), absl::StrCat("expected '", op, "', got ", Describe(Peek())));
  }
  void Expect(TK kind, const char* what) {
    if (Peek().kind != kind)
      Fail(Peek(), absl::StrCat("expected ", what, ", got ", Describe(Peek())));
    Next();
  }
  void EndTag() { Expect(TK::kBlockEnd, "'%}'"); }
  // Consumes "{% word" and returns the word (the caller's Statements stopped on it).
  std::string OpenTag() {
    Expect(TK::kBlockBegin, "'{%'");
    return Next().text;
  }
  std::string Name(const char* what) {
    if (Peek().kind != TK::kName)
      Fail(Peek(), absl::StrCat("expected ", what, ", got ", Describe(Peek())));
    return Next().text;
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TK::kEnd:
        return "the end of the template";
      case TK::kBlockEnd:
        return "'%}'";
      case TK::kVarEnd:
        return "'}}'";
      case TK::kString:
        return absl::StrCat("string '", t.text, "'");
      case TK::kText:
        return "text";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }

  template <typename T, typename K>
  static std::unique_ptr<T> Make(K kind, const Token& at) {
    auto n = std::make_unique<T>();
    n->kind = kind;
    n->line = at.line;
    n->col = at.col;
    return n;
  }
  static std::unique_ptr<Node> MakeNode(Node::Kind k, const Token& at) { return Make<Node>(k, at); }
  static ExprPtr MakeExpr(Expr::Kind k, const Token& at) { return Make<Expr>(k, at); }

  [[noreturn]] static void Fail(const Token& at, std::string message) {
    throw TemplateError{std::move(message), at.line, at.col};
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
};

ExprPtr Parser::Postfix(ExprPtr e) {
  while (true) {
    // Errors in a.b[c](d) point at where `a` starts.
    Token t = Peek();
    t.line = e->line;
    t.col = e->col;
    if (t.kind != TK::kOp) return e;
    if (t.text == ".") {
      Next();
      auto a = MakeExpr(Expr::Kind::kAttr, t);
      if (Peek().kind == TK::kInt) {  // foo.0 is foo[0]
        a->kind = Expr::Kind::kItem;
        a->args.push_back(std::move(e));
        auto idx = MakeExpr(Expr::Kind::kLiteral, Peek());
        idx->value = Value(Next().int_value);
        a->args.push_back(std::move(idx));
      } else {
        a->name = Name("an attribute name");
        a->args.push_back(std::move(e));
      }
      e = std::move(a);
    } else if (t.text == "[") {
      Next();
      e = Subscript(std::move(e), t);
    } else if (t.text == "(") {
      Next();
      auto c = MakeExpr(Expr::Kind::kCall, t);
      c->args.push_back(std::move(e));
      CallArguments(*c);
      e = std::move(c);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::Subscript(ExprPtr target, const Token& at) {
  ExprPtr parts[3];
  int colons = 0;
  while (!AcceptOp("]")) {
    if (AcceptOp(":")) {
      if (++colons > 2) Fail(at, "a slice takes at most two ':'");
      continue;
    }
    if (parts[colons]) Fail(Peek(), "expected ':' or ']'");
    parts[colons] = Expression();
  }
  if (colons == 0) {
    if (!parts[0]) Fail(at, "empty subscript");
    auto item = MakeExpr(Expr::Kind::kItem, at);
    item->args.push_back(std::move(target));
    item->args.push_back(std::move(parts[0]));
    return item;
  }
  auto slice = MakeExpr(Expr::Kind::kSlice, at);
  slice->args.push_back(std::move(target));
  for (auto& p : parts) slice->args.push_back(std::move(p));
  return slice;
}

// After "(": positional and keyword arguments up to ")".
void Parser::CallArguments(Expr& call) {
  while (!AcceptOp(")")) {
    if (call.args.size() > 1 || !call.kwargs.empty()) ExpectOp(",");
    if (AcceptOp(")")) return;  // trailing comma
    if (Peek().kind == TK::kName && t_[pos_ + 1].kind == TK::kOp && t_[pos_ + 1].text == "=") {
      std::string key = Next().text;
      Next();
      call.kwargs.emplace_back(std::move(key), Expression());
    } else {
      if (!call.kwargs.empty()) Fail(Peek(), "positional argument after a keyword argument");
      call.args.push_back(Expression());
    }
  }
}

ExprPtr Parser::FiltersAndTests(ExprPtr e) {
  while (true) {
    const Token& t = Peek();
    if (t.kind == TK::kOp && t.text == "|") {
      Next();
      const Token name_at = Peek();
      auto f = MakeExpr(Expr::Kind::kFilter, name_at);
      f->name = Name("a filter name");
      if (!IsFilter(f->name)) Fail(name_at, absl::StrCat("no filter named '", f->name, "'"));
      f->args.push_back(std::move(e));
      if (AcceptOp("(")) CallArguments(*f);
      e = std::move(f);
    } else if (t.kind == TK::kName && t.text == "is") {
      Next();
      auto test = MakeExpr(Expr::Kind::kTest, Peek());
      test->negated = AcceptName("not");
      const Token name_at = Peek();
      test->name = Name("a test name");
      if (!IsTest(test->name)) Fail(name_at, absl::StrCat("no test named '", test->name, "'"));
      test->args.push_back(std::move(e));
      const Token& n = Peek();
      const bool bare_arg =
          n.kind == TK::kString || n.kind == TK::kInt || n.kind == TK::kFloat ||
          (n.kind == TK::kOp && (n.text == "[" || n.text == "{")) ||
          (n.kind == TK::kName &&
           !std::set<std::string>{"else", "or", "and", "if", "is", "in", "not"}.count(n.text));
      if (AcceptOp("(")) {
        CallArguments(*test);
      } else if (bare_arg) {
        test->args.push_back(Unary(false));
      }
      e = std::move(test);
    } else {
      return e;
    }
  }
}

ExprPtr Parser::Primary() {
  const Token& t = Peek();
  auto lit = MakeExpr(Expr::Kind::kLiteral, t);
  switch (t.kind) {
    case TK::kString: {
      std::string s;
      while (Peek().kind == TK::kString) s += Next().text;  // adjacent literals join
      lit->value = Value(std::move(s));
      return lit;
    }
    case TK::kInt:
      lit->value = Value(Next().int_value);
      return lit;
    case TK::kFloat:
      lit->value = Value(Next().float_value);
      return lit;
    case TK::kName: {
      const std::string& w = t.text;
      if (w == "true" || w == "True")
        lit->value = Value(true);
      else if (w == "false" || w == "False")
        lit->value = Value(false);
      else if (w == "none" || w == "None")
        lit->value = Value::None();
      else {
        auto n = MakeExpr(Expr::Kind::kName, t);
        n->name = Next().text;
        return n;
      }
      Next();
      return lit;
    }
    case TK::kOp:
      if (t.text == "(") {
        Next();
        if (AcceptOp(")")) return MakeExpr(Expr::Kind::kTuple, t);
        ExprPtr e = Expression();
        if (Peek().kind == TK::kOp && Peek().text == ",") e = TupleRest(std::move(e));
        ExpectOp(")");
        return e;
      }
      if (t.text == "[" || t.text == "{") return ListOrDict(Next());
      break;
    default:
      break;
  }
  Fail(t, absl::StrCat("unexpected ", Describe(t)));
}

// After the first element and at a ",": the rest of a tuple.
ExprPtr Parser::TupleRest(ExprPtr first) {
  auto tuple = MakeExpr(Expr::Kind::kTuple, Peek());
  tuple->line = first->line;
  tuple->col = first->col;
  tuple->args.push_back(std::move(first));
  while (AcceptOp(",")) {
    const Token& n = Peek();
    if ((n.kind == TK::kOp && (n.text == ")" || n.text == "]")) || n.kind == TK::kBlockEnd) break;
    tuple->args.push_back(Expression());
  }
  return tuple;
}

ExprPtr Parser::ListOrDict(const Token& open) {
  const bool dict = open.text == "{";
  auto e = MakeExpr(dict ? Expr::Kind::kDict : Expr::Kind::kList, open);
  const char* close = dict ? "}" : "]";
  while (!AcceptOp(close)) {
    if (!e->args.empty()) {
      ExpectOp(",");
      if (AcceptOp(close)) break;
    }
    e->args.push_back(Expression());
    if (dict) {
      ExpectOp(":");
      e->args.push_back(Expression());
    }
  }
  return e;
}

}  // namespace

Body Parse(const std::string& source) { return Parser(Tokenize(source)).Template(); }

}  // namespace rlforge::templating::internal
