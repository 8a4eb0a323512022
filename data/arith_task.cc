#include "data/arith_task.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "config/lm_options.h"
#include "data/sample_stream.h"

namespace rlforge {

namespace {

int64_t Pow10(int64_t d) {
  int64_t p = 1;
  for (int64_t i = 0; i < d; ++i) p *= 10;
  return p;
}

struct Problem {
  int64_t a = 0, b = 0;
  std::string op;
  std::string Canonical() const { return absl::StrCat(a, op, b); }
  int64_t Value() const { return op == "+" ? a + b : op == "-" ? a - b : a * b; }
};

Problem Draw(const ArithmeticOptions& o, SampleStream& s) {
  auto operand = [&] {
    const int64_t d = s.Uniform(o.min_digits, o.max_digits);
    return s.Uniform(d == 1 ? 0 : Pow10(d - 1), Pow10(d) - 1);
  };
  Problem p;
  p.a = operand();
  p.b = operand();
  p.op = o.ops[s.Next() % o.ops.size()];
  if (p.op == "-" && !o.allow_negative && p.a < p.b) std::swap(p.a, p.b);
  return p;
}

}  // namespace

const char* SplitName(Split split) { return split == Split::kTrain ? "train" : "heldout"; }

absl::StatusOr<ArithmeticTask> ArithmeticTask::Create(const ArithmeticOptions& o) {
  if (o.min_digits < 1 || o.max_digits > 9 || o.min_digits > o.max_digits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "arithmetic task: digits must satisfy 1 <= min_digits <= max_digits <= 9, got ",
        o.min_digits, " and ", o.max_digits));
  }
  if (o.ops.empty()) return absl::InvalidArgumentError("arithmetic task: ops is empty");
  for (const auto& op : o.ops) {
    if (op != "+" && op != "-" && op != "*") {
      return absl::InvalidArgumentError(
          absl::StrCat("arithmetic task: op '", op, "' is not one of +, - or *"));
    }
  }
  if (!(o.heldout_fraction > 0 && o.heldout_fraction < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "arithmetic task: heldout_fraction must be in (0, 1), got ", o.heldout_fraction));
  }
  if (!(o.demo_carry_errors >= 0 && o.demo_carry_errors <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "arithmetic task: demo_carry_errors must be in [0, 1], got ", o.demo_carry_errors));
  }
  ArithmeticTask task(o);
  // Small problem spaces: make sure both splits have problems, so Example always terminates.
  const int64_t values = Pow10(o.max_digits);
  if (values <= 1000) {
    int64_t heldout = 0, total = 0;
    for (const auto& op : o.ops) {
      for (int64_t a = 0; a < values; ++a) {
        for (int64_t b = 0; b < values; ++b) {
          ++total;
          heldout += task.IsHeldout(absl::StrCat(a, op, b));
        }
      }
    }
    if (heldout == 0 || heldout == total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "arithmetic task: with max_digits ", o.max_digits, " and heldout_fraction ",
          o.heldout_fraction, " one split is empty (", heldout, " of ", total, " held out)"));
    }
  }
  return task;
}

bool ArithmeticTask::IsHeldout(const std::string& problem) const {
  const uint64_t h = SplitMix64(Fnv1a(problem));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < options_.heldout_fraction;
}

std::string ArithmeticTask::ResponseFor(const std::string& answer) const {
  if (options_.style == ArithmeticStyle::kQuestion)
    return absl::StrCat("The answer is ", answer, ".");
  return answer;
}

std::string ArithmeticTask::Alphabet() const {
  std::string chars = "0123456789";
  for (const auto& op : options_.ops) chars += op;
  chars += "-=";  // negative answers (a - b, or a * b with allow_negative) and the plain prompt
  if (options_.style == ArithmeticStyle::kQuestion) chars += " ?.WhatisTheanswer";
  std::string out;
  for (char c : chars) {
    if (out.find(c) == std::string::npos) out.push_back(c);
  }
  return out;
}

PromptExample ArithmeticTask::Example(uint64_t seed, Split split, uint64_t index) const {
  const uint64_t base =
      SplitMix64(SplitMix64(seed) ^ (split == Split::kTrain ? 0x7261696eull : 0x68656c64ull)) ^
      SplitMix64(index);
  for (uint64_t attempt = 0;; ++attempt) {
    SampleStream s(SplitMix64(base + attempt));
    const Problem p = Draw(options_, s);
    if (IsHeldout(p.Canonical()) != (split == Split::kHeldout)) continue;
    PromptExample ex;
    ex.answer = absl::StrCat(p.Value());
    if (options_.style == ArithmeticStyle::kQuestion) {
      ex.prompt = absl::StrCat("What is ", p.a, " ", p.op, " ", p.b, "?");
    } else {
      ex.prompt = absl::StrCat(p.a, p.op, p.b, "=");
    }
    ex.response = ResponseFor(ex.answer);
    if (split == Split::kTrain && options_.demo_carry_errors > 0) {
      // Its own draw, so the problem stream is the same with or without flaws.
      const uint64_t u = SplitMix64(base ^ 0x666c6177ull);
      if (static_cast<double>(u >> 11) * 0x1.0p-53 < options_.demo_carry_errors) {
        ex.response = ResponseFor(absl::StrCat(CarrylessValue(p.a, p.b, p.op)));
      }
    }
    return ex;
  }
}

std::vector<PromptExample> ArithmeticTask::Examples(uint64_t seed, Split split, uint64_t index,
                                                    size_t n) const {
  std::vector<PromptExample> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(Example(seed, split, index + i));
  return out;
}

int64_t ArithmeticTask::CarrylessValue(int64_t a, int64_t b, const std::string& op) {
  if ((op != "+" && op != "-") || a < 0 || b < 0 || (op == "-" && a < b)) {
    return op == "+" ? a + b : op == "-" ? a - b : a * b;
  }
  int64_t out = 0, place = 1;
  while (a > 0 || b > 0) {
    const int64_t x = a % 10, y = b % 10;
    out += place * (op == "+" ? (x + y) % 10 : (x - y + 10) % 10);
    place *= 10;
    a /= 10;
    b /= 10;
  }
  return out;
}

std::string ArithmeticTask::WrongAnswer(const PromptExample& example, uint64_t seed) const {
  SampleStream s(SplitMix64(seed ^ Fnv1a(example.prompt)));
  int64_t value = 0;
  try {
    value = std::stoll(example.answer);
  } catch (...) {
    return example.answer + "0";
  }
  // Near misses are the informative negatives: off by 1..10, or one digit changed.
  int64_t wrong = value;
  if (s.Next() % 2 == 0) {
    const int64_t delta = s.Uniform(1, 10);
    wrong = (s.Next() % 2 == 0 || value - delta < 0) ? value + delta : value - delta;
  } else {
    const std::string digits = absl::StrCat(std::llabs(value));
    std::string changed = digits;
    const size_t pos = s.Next() % digits.size();
    changed[pos] = static_cast<char>('0' + (changed[pos] - '0' + s.Uniform(1, 9)) % 10);
    if (changed.size() > 1 && changed[0] == '0') changed[0] = '1';
    wrong = std::stoll(changed) * (value < 0 ? -1 : 1);
    if (wrong == value) wrong = value + 1;
  }
  return absl::StrCat(wrong);
}

absl::StatusOr<ArithmeticTask> ArithmeticTaskFor(const DataOptions& data) {
  ArithmeticOptions o;
  o.min_digits = data.min_digits;
  o.max_digits = data.max_digits;
  o.ops = data.ops;
  o.style = data.style;
  o.demo_carry_errors = data.demo_carry_errors;
  return ArithmeticTask::Create(o);
}

}  // namespace rlforge
