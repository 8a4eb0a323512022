// Hand-checked semantics and errors; chat_template_fixtures_test.cc holds the cross-check
// against transformers' own rendering.
#include "templating/template.h"

#include <gtest/gtest.h>

namespace rlforge::templating {
namespace {

std::string Render(const std::string& source, const std::string& context_json = "{}") {
  auto t = Template::Parse(source, "t.jinja");
  if (!t.ok()) return "PARSE ERROR " + std::string(t.status().message());
  const Value ctx = FromJson(nlohmann::ordered_json::parse(context_json));
  auto out = t->Render(ctx.as_dict());
  if (!out.ok()) return "RENDER ERROR " + std::string(out.status().message());
  return *out;
}

TEST(TemplateTest, TextAndOutput) {
  EXPECT_EQ(Render("a{{ x }}b", R"({"x": 3})"), "a3b");
  EXPECT_EQ(Render("{{ [1, 2.5, 'a', none, true, {'k': [1]}] }}"),
            "[1, 2.5, 'a', None, True, {'k': [1]}]");
  EXPECT_EQ(Render("{{ (1, 2) }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 3/2 }}|{{ 7//2 }}|{{ -7 % 3 }}"),
            "(1, 2)|1e+16|1e-05|1.5|3|2");
  EXPECT_EQ(Render("{{ 2 ** 10 }} {{ 1 == 1.0 }} {{ 'a' in 'abc' }} {{ 'x' ~ 1 ~ none }}"),
            "1024 True True x1None");
  EXPECT_EQ(Render("{{ '%s-%d' % ('a', 3) }}"), "a-3");
}

TEST(TemplateTest, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before one.
  EXPECT_EQ(Render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  EXPECT_EQ(Render("x  {{- ' y ' -}}  z"), "x y z");
  EXPECT_EQ(Render("a\n  {%- if true %}b{% endif %}"), "ab");
  EXPECT_EQ(Render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(Render("{# note #}\nx{#- c -#}  y\n"), "xy");
  EXPECT_EQ(Render("{% if true +%}\nA{% endif %}"), "\nA");
}

TEST(TemplateTest, LoopsAndScopes) {
  EXPECT_EQ(Render("{% for i in [1,2] %}{% if loop.first %}{% set x = 5 %}{% endif %}[{{ x }}]"
                   "{% endfor %}{{ x }}",
                   R"({"x": 0})"),
            "[5][0]0");
  EXPECT_EQ(Render("{% for m in ms if m.r != 's' %}{{ loop.index }}/{{ loop.length }}"
                   "{{ loop.last }};{% else %}empty{% endfor %}",
                   R"({"ms": [{"r": "s"}, {"r": "u"}, {"r": "a"}]})"),
            "1/2False;2/2True;");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% if i == 2 %}"
                   "{% continue %}{% endif %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "4");
  EXPECT_EQ(
      Render("{% for i in range(9) %}{% if i > 1 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
      "01");
  EXPECT_EQ(Render("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}"
                   "{% endfor %}",
                   R"({"d": {"x": 1, "y": 2}})"),
            "x=1;y=2;xy");
  EXPECT_EQ(Render("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(Render("{% set t %}in{{ 1 }}{% endset %}[{{ t }}]"), "[in1]");
}

TEST(TemplateTest, MacrosSeeTheTopLevelAtCallTime) {
  EXPECT_EQ(Render("{% macro m(a, b=2) %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}{% set c = 9 %}"
                   "{{ m(1) }}{{ m(1, b=3) }}"),
            "<129><139>");
}

TEST(TemplateTest, UndefinedIsJinjasDefault) {
  EXPECT_EQ(Render("[{{ nope }}]{{ nope is defined }}{{ nope|length }}{{ nope ~ 'a' }}"
                   "{% if nope %}x{% endif %}{{ nope|default('d') }}"),
            "[]False0ad");
  EXPECT_EQ(Render("{{ m.missing is defined }} {{ none|default('d') }} {{ ''|default('d', true) }}",
                   R"({"m": {}})"),
            "False None d");
  EXPECT_EQ(Render("{{ nope.attr }}"), "RENDER ERROR t.jinja:1:4: 'nope' is undefined");
  EXPECT_EQ(Render("{{ nope + 1 }}"), "RENDER ERROR t.jinja:1:9: 'nope' is undefined");
}

TEST(TemplateTest, FiltersAndMethods) {
  EXPECT_EQ(
      Render("{{ ms|selectattr('r', 'equalto', 'u')|list }} {{ ms|map(attribute='r')|join(',') }}"
             " {{ ms|rejectattr('q', 'defined')|list|length }}",
             R"({"ms": [{"r": "s"}, {"r": "u", "q": 1}]})"),
      "[{'r': 'u', 'q': 1}] s,u 1");
  EXPECT_EQ(Render("{{ '3'|int + 1 }} {{ 'x'|int }} {{ 2.7|int }} {{ '  a  '|trim }}|"
                   "{{ 'aXbX'|replace('X', 'y') }}|{{ 'ab'.upper() }}{{ 'ab'.startswith('a') }}"),
            "4 0 2 a|ayby|ABTrue");
  EXPECT_EQ(Render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb\n\nc'|indent(2, true, true) }}"),
            "a\n  b\n\n  c|  a\n  b\n  \n  c");
  EXPECT_EQ(Render("{{ 'héllo wOrld-x'|title }} {{ 'hÉllo'|capitalize }} {{ 'é'|upper }}"),
            "Héllo World-X Héllo É");
  EXPECT_EQ(
      Render("{{ [3, 1, 2]|sort }} {{ 'abc'[::-1] }} {{ [1, 2, 3][1:] }} {{ 'a,b'.split(',') }}"
             " {{ ' x '.strip() }} {{ [1, 2, 3][-1] }} {{ 'héllo'[1:3] }}"),
      "[1, 2, 3] cba [2, 3] ['a', 'b'] x 3 él");
  EXPECT_EQ(
      Render("{{ d|tojson }}", R"({"d": {"b": 1, "a": "é\"<\n", "c": [1, 2.0, null, true]}})"),
      R"({"b": 1, "a": "é\"<\n", "c": [1, 2.0, null, true]})");
  EXPECT_EQ(
      Render("{{ d|tojson(indent=2) }}",
             R"({"d": {"b": 1, "a": [], "c": {}, "d": [1, {"x": 2}]}})"),
      "{\n  \"b\": 1,\n  \"a\": [],\n  \"c\": {},\n  \"d\": [\n    1,\n    {\n      \"x\": 2\n"
      "    }\n  ]\n}");
  EXPECT_EQ(
      Render("{{ d|tojson(sort_keys=true, ensure_ascii=true) }}", R"({"d": {"b": "é😀", "a": 1}})"),
      R"({"a": 1, "b": "\u00e9\ud83d\ude00"})");
}

TEST(TemplateTest, StrftimeNowReadsTheInjectedClock) {
  auto t = Template::Parse("{{ strftime_now('%Y') }}", "t");
  ASSERT_TRUE(t.ok());
  RenderOptions o;
  o.now = [] { return std::chrono::system_clock::from_time_t(86400 * 365 * 30 + 86400 * 8); };
  EXPECT_EQ(*t->Render({}, o), "2000");
}

TEST(TemplateTest, RaiseExceptionNamesTheLine) {
  EXPECT_EQ(
      Render("ok\n{% if true %}\n  {{ raise_exception('roles must alternate') }}\n{% endif %}"),
      "RENDER ERROR t.jinja:3:6: the template raised an exception: roles must alternate");
}

TEST(TemplateTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(
      Render("a\n{% if x %}b"),
      "PARSE ERROR t.jinja:2:12: unexpected end of template, expected 'elif', 'else' or 'endif'");
  EXPECT_EQ(Render("{{ x | nofilter }}"), "PARSE ERROR t.jinja:1:8: no filter named 'nofilter'");
  EXPECT_EQ(Render("x\n\n  {% frobnicate %}"), "PARSE ERROR t.jinja:3:6: unknown tag 'frobnicate'");
  EXPECT_EQ(Render("{{ 'abc }}"), "PARSE ERROR t.jinja:1:4: unterminated string");
  EXPECT_EQ(Render("{{ (1 + }}"), "PARSE ERROR t.jinja:1:9: unexpected '}}'");
  EXPECT_EQ(Render("{% for x in y %}{% endif %}"),
            "PARSE ERROR t.jinja:1:20: unexpected 'endif', expected 'else' or 'endfor'");
  EXPECT_EQ(Render("{% break %}"), "PARSE ERROR t.jinja:1:4: 'break' outside a for loop");
  EXPECT_EQ(Render("{# open"), "PARSE ERROR t.jinja:1:1: unterminated comment (no '#}')");
}

}  // namespace
}  // namespace rlforge::templating
