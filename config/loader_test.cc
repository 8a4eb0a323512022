#include "config/loader.h"

#include <gtest/gtest.h>

namespace rlforge::config {
namespace {

struct Item {
  std::string name = "x";
  double weight = 1.0;
};
struct Inner {
  int64_t workers = 1;
  double lr = 3e-4;
  bool flag = false;
  std::string mode = "a";
  std::vector<double> betas = {0.9, 0.999};
};
struct Top {
  Inner inner;
  std::string required_name;
  std::vector<Item> items;
};

std::shared_ptr<const Schema> TestSchema() {
  SchemaBuilder<Item> item("An item.");
  item.String("name", &Item::name, "Name.");
  item.Double("weight", &Item::weight, "Weight.").Min(0);
  SchemaBuilder<Inner> in("Inner section.");
  in.Int("workers", &Inner::workers, "Workers.").Min(1).Max(64);
  in.Double("lr", &Inner::lr, "Learning rate.").Min(0, false);
  in.Bool("flag", &Inner::flag, "A flag.");
  in.Choice("mode", &Inner::mode, {"a", "bee", "sea"}, "Mode.");
  in.DoubleList("betas", &Inner::betas, "Betas.");
  in.Check([](const Inner& i, CheckContext& ctx) {
    if (i.mode == "sea" && i.workers > 2) ctx.Error("workers", "mode sea allows at most 2 workers");
  });
  SchemaBuilder<Top> top("Top.");
  top.Section("inner", &Top::inner, in.Build());
  top.String("required_name", &Top::required_name, "Must be given.").Required();
  top.SectionList("items", &Top::items, item.Build(), "Items.");
  return top.Build();
}

std::vector<ConfigError> Load(const std::string& text, Top* out,
                              std::vector<std::string> overrides = {}) {
  static auto schema = TestSchema();
  return LoadInto(*schema, out, LoadInput{text, "job.yaml", std::move(overrides), {}});
}

std::string One(const std::vector<ConfigError>& errors) {
  EXPECT_EQ(errors.size(), 1u) << FormatErrors(errors);
  return errors.empty() ? "" : errors[0].ToString();
}

TEST(LoaderTest, ParsesTypedValuesAndKeepsDefaults) {
  Top t;
  auto errors = Load(
      "required_name: r\ninner:\n  workers: 4\n  flag: true\n  betas: [0.8, 0.9]\n"
      "items:\n  - name: a\n  - weight: 2.5\n",
      &t);
  ASSERT_TRUE(errors.empty()) << FormatErrors(errors);
  EXPECT_EQ(t.inner.workers, 4);
  EXPECT_TRUE(t.inner.flag);
  EXPECT_DOUBLE_EQ(t.inner.lr, 3e-4);
  EXPECT_EQ(t.inner.betas, (std::vector<double>{0.8, 0.9}));
  ASSERT_EQ(t.items.size(), 2u);
  EXPECT_EQ(t.items[0].name, "a");
  EXPECT_EQ(t.items[1].name, "x");
  EXPECT_DOUBLE_EQ(t.items[1].weight, 2.5);
}

TEST(LoaderTest, UnknownKeySuggestsNearestWithLine) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\ninner:\n  wrokers: 4\n", &t)),
            "job.yaml:3:3: inner.wrokers: unknown key (did you mean inner.workers?)");
}

TEST(LoaderTest, MisplacedKeySuggestsItsSection) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\nlr: 0.1\n", &t)),
            "job.yaml:2:1: lr: unknown key (did you mean inner.lr?)");
}

TEST(LoaderTest, ReportsEveryProblemAtOnceInFileOrder) {
  Top t;
  auto errors = Load("inner:\n  workers: -3\n  lr: fast\n  flag: yes\n  mode: bea\n", &t);
  ASSERT_EQ(errors.size(), 5u) << FormatErrors(errors);
  EXPECT_EQ(errors[0].ToString(),
            "job.yaml:1:1: required_name: missing required key (a string): Must be given.");
  EXPECT_EQ(errors[1].ToString(),
            "job.yaml:2:3: inner.workers: expected an integer in [1, 64], got -3");
  EXPECT_EQ(errors[2].ToString(), "job.yaml:3:3: inner.lr: expected a number, got 'fast'");
  EXPECT_EQ(errors[3].ToString(), "job.yaml:4:3: inner.flag: expected true or false, got 'yes'");
  EXPECT_EQ(errors[4].ToString(),
            "job.yaml:5:3: inner.mode: expected one of a, bee, sea; got 'bea' (did you mean bee?)");
}

TEST(LoaderTest, IntegersAreStrictButAcceptIntegralExponents) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\ninner: {workers: 2.5}\n", &t)),
            "job.yaml:2:9: inner.workers: expected an integer, got '2.5'");
  Top u;
  EXPECT_TRUE(Load("required_name: r\ninner: {workers: 3e1}\n", &u).empty());
  EXPECT_EQ(u.inner.workers, 30);
}

TEST(LoaderTest, WrongShapes) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\ninner: 5\n", &t)),
            "job.yaml:2:1: inner: expected a section of 'key: value' lines, got '5'");
  EXPECT_EQ(One(Load("required_name: [a, b]\n", &t)),
            "job.yaml:1:1: required_name: expected a string, got a list");
  EXPECT_EQ(One(Load("required_name:\n", &t)),
            "job.yaml:1:1: required_name: missing value (expected a string)");
}

TEST(LoaderTest, DuplicateKeyIsAnError) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\nrequired_name: s\n", &t)),
            "job.yaml:2:1: required_name: duplicate key (first written at line 1)");
}

TEST(LoaderTest, SyntaxErrorHasLine) {
  Top t;
  std::string e = One(Load("required_name: r\ninner:\n  workers: [1, 2\n", &t));
  EXPECT_NE(e.find("job.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
}

TEST(LoaderTest, CrossFieldCheckNamesKeyAndLine) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\ninner:\n  mode: sea\n  workers: 3\n", &t)),
            "job.yaml:4:3: inner.workers: mode sea allows at most 2 workers");
}

TEST(LoaderTest, ListItemsReportTheirIndex) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\nitems:\n  - name: a\n  - weight: -1\n", &t)),
            "job.yaml:4:5: items[1].weight: expected a number >= 0, got -1");
}

TEST(OverrideTest, OverridesWinAndAreValidated) {
  Top t;
  EXPECT_TRUE(
      Load("required_name: r\ninner:\n  workers: 4\n", &t, {"inner.workers=8", "inner.lr=1e-3"})
          .empty());
  EXPECT_EQ(t.inner.workers, 8);
  EXPECT_DOUBLE_EQ(t.inner.lr, 1e-3);
  EXPECT_EQ(
      One(Load("required_name: r\n", &t, {"inner.workers=many"})),
      "command-line override 'inner.workers=many': inner.workers: expected an integer, got 'many'");
}

TEST(OverrideTest, BadSyntaxIsNamed) {
  Top t;
  EXPECT_EQ(One(Load("required_name: r\n", &t, {"inner.workers"})),
            "command-line override 'inner.workers': expected key=value (e.g. trainer.lr=3e-4)");
  EXPECT_EQ(One(Load("required_name: r\n", &t, {"inner..x=1"})),
            "command-line override 'inner..x=1': inner..x: not a valid dotted key (letters, "
            "digits, '_' and '.'; list items as key[index])");
  EXPECT_EQ(One(Load("required_name: r\n", &t, {"inner.workers="})),
            "command-line override 'inner.workers=': inner.workers: no value after '='");
  EXPECT_EQ(One(Load("required_name: r\n", &t, {"inner.wrkers=2"})),
            "command-line override 'inner.wrkers=2': inner.wrkers: unknown key (did you mean "
            "inner.workers?)");
  EXPECT_EQ(One(Load("required_name: r\n", &t, {"required_name.x=2"})),
            "command-line override 'required_name.x=2': required_name.x: required_name is a value, "
            "not a section");
}

TEST(OverrideTest, IndexesIntoLists) {
  Top t;
  EXPECT_TRUE(Load("required_name: r\nitems:\n  - name: a\n", &t, {"items.0.weight=4"}).empty());
  EXPECT_DOUBLE_EQ(t.items[0].weight, 4);
  EXPECT_EQ(
      One(Load("required_name: r\nitems:\n  - name: a\n", &t, {"items.3.weight=4"})),
      "command-line override 'items.3.weight=4': items.3.weight: index 3 is out of range: items "
      "has 1 item ([0] to [0])");
}

// Issue 42: `reward.rewards[4].params.path=...` was "not a valid dotted key"; only `rewards.4.`
// was accepted, and a name where a list is (`items.name=x`) ended in std::stoul's exception.
TEST(OverrideTest, BracketedListIndexWasNotAValidDottedKey) {
  const std::string two = "required_name: r\nitems:\n  - name: a\n  - name: b\n";
  Top t;
  EXPECT_TRUE(Load(two, &t, {"items[1].weight=4", "items[0].name=z"}).empty());
  EXPECT_EQ(t.items[0].name, "z");
  EXPECT_DOUBLE_EQ(t.items[1].weight, 4);
  EXPECT_EQ(One(Load(two, &t, {"items[2].weight=4"})),
            "command-line override 'items[2].weight=4': items[2].weight: index 2 is out of "
            "range: items has 2 items ([0] to [1])");
  EXPECT_EQ(One(Load(two, &t, {"items[99999999999999999999999].weight=4"})),
            "command-line override 'items[99999999999999999999999].weight=4': "
            "items[99999999999999999999999].weight: index 99999999999999999999999 is out of "
            "range: items has 2 items ([0] to [1])");
  // Validated as the file's values are, named by the override.
  EXPECT_EQ(One(Load(two, &t, {"items[1].weight=-1"})),
            "command-line override 'items[1].weight=-1': items[1].weight: expected a number >= 0, "
            "got -1");
  EXPECT_EQ(One(Load(two, &t, {"items[0].wieght=1"})),
            "command-line override 'items[0].wieght=1': items[0].wieght: unknown key (did you "
            "mean items[0].weight?)");
  EXPECT_EQ(One(Load(two, &t, {"inner[0].workers=2"})),
            "command-line override 'inner[0].workers=2': inner[0].workers: inner is a section, "
            "not a list: no item [0]");
  EXPECT_EQ(One(Load(two, &t, {"required_name[0]=x"})),
            "command-line override 'required_name[0]=x': required_name[0]: required_name is a "
            "value, not a list: no item [0]");
  EXPECT_EQ(One(Load(two, &t, {"items.name=x"})),
            "command-line override 'items.name=x': items.name: items is a list: name an item, as "
            "items[0].name");
  EXPECT_EQ(One(Load("required_name: r\n", &t, {"items[0].weight=1"})),
            "command-line override 'items[0].weight=1': items[0].weight: items is not a list in "
            "the file: no item [0] to set (set the whole list: items=[...])");
  EXPECT_EQ(One(Load(two, &t, {"items[x].weight=1"})),
            "command-line override 'items[x].weight=1': items[x].weight: not a valid dotted key "
            "(letters, digits, '_' and '.'; list items as key[index])");
}

TEST(DumpTest, ResolvedYamlReadsBackToTheSameValues) {
  static auto schema = TestSchema();
  Top t;
  ASSERT_TRUE(
      Load("required_name: r\ninner: {lr: 0.1, mode: bee}\nitems: [{name: q}]\n", &t).empty());
  std::string text = DumpYaml(*schema, &t);
  Top u;
  auto errors = LoadInto(*schema, &u, LoadInput{text, "resolved", {}, {}});
  ASSERT_TRUE(errors.empty()) << FormatErrors(errors) << text;
  EXPECT_EQ(DumpYaml(*schema, &u), text);
  EXPECT_DOUBLE_EQ(u.inner.lr, 0.1);
  EXPECT_EQ(u.items[0].name, "q");
}

TEST(ReferenceTest, ListsEveryKeyWithDefault) {
  static auto schema = TestSchema();
  Top d;
  std::string md = MarkdownReference(*schema, &d);
  EXPECT_NE(md.find("| `inner.workers` | an integer in [1, 64] | `1` | Workers. |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("`items[].weight`"), std::string::npos) << md;
  EXPECT_NE(md.find("**required**"), std::string::npos);
}

}  // namespace
}  // namespace rlforge::config
