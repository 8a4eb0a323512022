#include "data/word_problems.h"

#include <fstream>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "data/sample_stream.h"
#include "nlohmann/json.hpp"

namespace rlforge {

namespace {

struct Person {
  const char* name;
  const char* subject;  // he / she
  const char* possessive;
};
constexpr Person kPeople[] = {{"Tom", "he", "his"},  {"Anna", "she", "her"}, {"Ben", "he", "his"},
                              {"Mia", "she", "her"}, {"Sam", "he", "his"},   {"Lily", "she", "her"},
                              {"Omar", "he", "his"}, {"Zoe", "she", "her"}};
constexpr const char* kItems[] = {"pencil", "apple", "notebook", "toy car", "cookie", "sticker"};
constexpr const char* kThings[] = {"marble", "sweet", "card", "shell", "stamp", "button"};
constexpr const char* kVehicles[] = {"car", "bus", "train", "bike"};

template <typename T, size_t N>
const T& Pick(SampleStream& s, const T (&options)[N]) {
  return options[s.Uniform(0, N - 1)];
}

std::string Cap(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

int64_t Apply(int64_t a, char op, int64_t b) {
  return op == '+' ? a + b : op == '-' ? a - b : op == '*' ? a * b : a / b;
}

struct Worked {
  std::string text;  // the steps, one a line, then "#### value"
  int64_t value = 0;
};

// `steps` worked out as written (Slip::kNone), or as a careless annotator writes them; nullopt
// when the slip has nowhere to happen: no + or - step with a carry or borrow that matters
// (kDroppedCarry), or a single step (kStoppedEarly). A dropped carry or borrow carries into the
// later steps; a division it leaves inexact also means nullopt.
std::optional<Worked> Work(const std::vector<WorkedStep>& steps, Slip slip) {
  if (slip == Slip::kStoppedEarly && steps.size() < 2) return std::nullopt;
  std::vector<int64_t> results;
  std::string text;
  bool slipped = slip == Slip::kNone;
  for (const WorkedStep& st : steps) {
    const int64_t a = st.a_from >= 0 ? results[st.a_from] : st.a;
    const int64_t b = st.b_from >= 0 ? results[st.b_from] : st.b;
    if (st.op == '/' && (b == 0 || a % b != 0)) return std::nullopt;
    int64_t c = Apply(a, st.op, b);
    if (slip == Slip::kDroppedCarry && !slipped && (st.op == '+' || st.op == '-')) {
      const int64_t careless = ArithmeticTask::CarrylessValue(a, b, std::string(1, st.op));
      slipped = careless != c;
      c = careless;
    }
    results.push_back(c);
    absl::StrAppend(&text, st.before, a, " ", std::string(1, st.op), " ", b, " = ", c, st.after,
                    "\n");
    if (slip == Slip::kStoppedEarly) {
      slipped = true;
      break;
    }
  }
  if (!slipped) return std::nullopt;
  return Worked{absl::StrCat(text, "#### ", results.back()), results.back()};
}

// A step whose operand is the result of an earlier step names it by index.
WorkedStep Step(std::string before, int64_t a, char op, int64_t b, std::string after,
                int a_from = -1, int b_from = -1) {
  return {std::move(before), a, op, b, std::move(after), a_from, b_from};
}

WordProblem Done(std::string kind, std::string question, std::vector<WorkedStep> steps) {
  WordProblem p{std::move(kind), std::move(question), std::move(steps), "", 0};
  std::optional<Worked> w = Work(p.steps, Slip::kNone);
  p.solution = std::move(w->text);
  p.value = w->value;
  return p;
}

WordProblem Shopping(SampleStream& s, const Person& p) {
  const std::string item = Pick(s, kItems);
  const int64_t n = s.Uniform(2, 9), price = s.Uniform(1, 9), cost = n * price;
  const std::string buy = absl::StrCat(p.name, " buys ", n, " ", item, "s for $", price, " each.");
  if (s.Uniform(0, 1) == 0) {
    return Done("shop_total", absl::StrCat(buy, " How many dollars does ", p.subject, " spend?"),
                {Step(absl::StrCat(p.name, " spends "), n, '*', price, " dollars.")});
  }
  const int64_t bill = cost < 10 ? 10 : cost < 20 ? 20 : cost < 50 ? 50 : 100;
  return Done("shop_change",
              absl::StrCat(buy, " ", Cap(p.subject), " pays with a $", bill,
                           " bill. How many dollars of change does ", p.subject, " get?"),
              {Step("The items cost ", n, '*', price, " dollars."),
               Step("The change is ", bill, '-', 0, " dollars.", -1, 0)});
}

WordProblem Sharing(SampleStream& s, const Person& p) {
  const std::string thing = Pick(s, kThings);
  const int64_t friends = s.Uniform(2, 6), each = s.Uniform(2, 9), shared = friends * each;
  const std::string ask = absl::StrCat(" equally among ", friends, " friends. How many ", thing,
                                       "s does each friend get?");
  const std::string things = absl::StrCat(" ", thing, "s.");
  if (s.Uniform(0, 1) == 0) {
    return Done("share",
                absl::StrCat(p.name, " has ", shared, " ", thing, "s and shares them", ask),
                {Step("Each friend gets ", shared, '/', friends, things)});
  }
  const int64_t kept = s.Uniform(1, 9), total = shared + kept;
  return Done("share_rest",
              absl::StrCat(p.name, " has ", total, " ", thing, "s. ", Cap(p.subject), " keeps ",
                           kept, " and shares the rest", ask),
              {Step(absl::StrCat(Cap(p.subject), " shares "), total, '-', kept, things),
               Step("Each friend gets ", 0, '/', friends, things, 0)});
}

WordProblem Ages(SampleStream& s, const Person& p, const Person& q) {
  const int64_t age = s.Uniform(3, 15), later = s.Uniform(2, 9);
  if (s.Uniform(0, 1) == 0) {
    const int64_t gap = s.Uniform(1, 9);
    return Done("age_older",
                absl::StrCat(p.name, " is ", age, " years old. ", q.name, " is ", gap,
                             " years older than ", p.name, ". How old is ", q.name, "?"),
                {Step(absl::StrCat(q.name, " is "), age, '+', gap, " years old.")});
  }
  return Done(
      "age_future",
      absl::StrCat(p.name, " is ", age, " years old. ", q.name, " is twice as old as ", p.name,
                   ". How old will ", q.name, " be in ", later, " years?"),
      {Step(absl::StrCat(q.name, " is "), age, '*', 2, " years old now."),
       Step(absl::StrCat("In ", later, " years ", q.subject, " will be "), 0, '+', later, ".", 0)});
}

WordProblem Rates(SampleStream& s, const Person& p) {
  if (s.Uniform(0, 1) == 0) {
    const std::string vehicle = Pick(s, kVehicles);
    const int64_t speed = s.Uniform(2, 9) * 10, hours = s.Uniform(2, 5);
    return Done(
        "rate_distance",
        absl::StrCat("A ", vehicle, " travels ", speed,
                     " miles per hour. How many miles does it travel in ", hours, " hours?"),
        {Step("It travels ", speed, '*', hours, " miles.")});
  }
  // Single-digit wages and hours: one times-table fact, which the small model can learn.
  const int64_t wage = s.Uniform(2, 9), monday = s.Uniform(1, 4), tuesday = s.Uniform(1, 4);
  return Done("rate_wage",
              absl::StrCat(p.name, " earns $", wage, " per hour. ", Cap(p.subject), " works ",
                           monday, " hours on Monday and ", tuesday,
                           " hours on Tuesday. How many dollars does ", p.subject, " earn?"),
              {Step(absl::StrCat(Cap(p.subject), " works "), monday, '+', tuesday, " hours."),
               Step(absl::StrCat(Cap(p.subject), " earns "), 0, '*', wage, " dollars.", 0)});
}

WordProblem Collection(SampleStream& s, const Person& p) {
  const std::string thing = Pick(s, kThings);
  const int64_t start = s.Uniform(10, 40), lost = s.Uniform(1, 9), found = s.Uniform(1, 20);
  return Done(
      "collect",
      absl::StrCat(p.name, " has ", start, " ", thing, "s. ", Cap(p.subject), " gives away ", lost,
                   " and then buys ", found, " more. How many ", thing, "s does ", p.subject,
                   " have now?"),
      {Step("After giving some away ", start, '-', lost, absl::StrCat(" ", thing, "s are left.")),
       Step(absl::StrCat("Then ", p.subject, " has "), 0, '+', found,
            absl::StrCat(" ", thing, "s."), 0)});
}

WordProblem Draw(SampleStream& s) {
  const Person& p = Pick(s, kPeople);
  const Person* q = &Pick(s, kPeople);
  while (q == &p) q = &Pick(s, kPeople);
  switch (s.Uniform(0, 4)) {
    case 0:
      return Shopping(s, p);
    case 1:
      return Sharing(s, p);
    case 2:
      return Ages(s, p, *q);
    case 3:
      return Rates(s, p);
    default:
      return Collection(s, p);
  }
}

}  // namespace

bool IsHeldoutQuestion(const std::string& question) {
  return SplitMix64(Fnv1a(question)) % 10 == 0;
}

WordProblem MakeWordProblem(uint64_t seed, Split split, uint64_t index) {
  const uint64_t base =
      SplitMix64(SplitMix64(seed) ^ (split == Split::kTrain ? 0x776f7264ull : 0x68656c64ull)) ^
      SplitMix64(index);
  for (uint64_t attempt = 0;; ++attempt) {
    SampleStream s(SplitMix64(base + attempt));
    WordProblem p = Draw(s);
    if (IsHeldoutQuestion(p.question) == (split == Split::kHeldout)) return p;
  }
}

std::vector<WordProblem> DistinctWordProblems(uint64_t seed, Split split, size_t count) {
  std::vector<WordProblem> out;
  std::set<std::string> seen;
  for (uint64_t i = 0; out.size() < count; ++i) {
    WordProblem p = MakeWordProblem(seed, split, i);
    if (seen.insert(p.question).second) out.push_back(std::move(p));
  }
  return out;
}

std::optional<WordProblem> SlipWordProblem(const WordProblem& p, Slip slip) {
  std::optional<Worked> w = Work(p.steps, slip);
  if (!w || (slip != Slip::kNone && w->value == p.value)) return std::nullopt;
  WordProblem out = p;
  out.solution = std::move(w->text);
  out.value = w->value;
  return out;
}

WordProblem Demonstration(const WordProblem& p, double careless_share) {
  // Its own draw from the question, so the questions are the same whatever the share.
  const uint64_t u = SplitMix64(Fnv1a(p.question) ^ 0x736c6970ull);
  if (static_cast<double>(u >> 11) * 0x1.0p-53 >= careless_share) return p;
  for (Slip slip : {Slip::kDroppedCarry, Slip::kStoppedEarly}) {
    if (std::optional<WordProblem> careless = SlipWordProblem(p, slip)) return *careless;
  }
  return p;
}

std::string WordProblemJsonl(const WordProblem& p) {
  return nlohmann::ordered_json{{"question", p.question}, {"answer", p.solution}}.dump();
}

absl::Status WriteWordProblems(const std::string& dir, uint64_t seed, size_t train, size_t heldout,
                               double careless_share) {
  const std::vector<WordProblem> train_set = DistinctWordProblems(seed, Split::kTrain, train);
  std::vector<WordProblem> demos;
  for (const WordProblem& p : train_set) demos.push_back(Demonstration(p, careless_share));
  const std::pair<std::string, std::vector<WordProblem>> files[] = {
      {"train", train_set},
      {"heldout", DistinctWordProblems(seed, Split::kHeldout, heldout)},
      {"train_careless", std::move(demos)}};
  for (const auto& [name, problems] : files) {
    const std::string path = absl::StrCat(dir, "/", name, ".jsonl");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (const WordProblem& p : problems) out << WordProblemJsonl(p) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
