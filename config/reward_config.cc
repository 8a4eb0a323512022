// Schema of the `reward` section (see reward_options.h).
#include "config/reward_config.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace rlforge {

using config::CheckContext;
using config::Schema;
using config::SchemaBuilder;

namespace {

constexpr char kTagChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";

std::shared_ptr<const Schema> ParamsSection() {
  SchemaBuilder<RewardParams> b("Parameters of one reward; each kind reads only its own.");
  b.Enum("extract", &RewardParams::extract,
         "exact_answer, numeric, math: where the answer is in the response. auto: \\boxed{X}, "
         "else 'answer is X', else the whole response (numeric: else the last number; math: "
         "see docs/math_verifier.md).");
  b.Bool("case_sensitive", &RewardParams::case_sensitive,
         "exact_answer: compare case-sensitively (whitespace and trailing punctuation are always "
         "normalised).");
  b.Double("abs_tol", &RewardParams::abs_tol, "numeric: absolute tolerance.").Min(0);
  b.Double("rel_tol", &RewardParams::rel_tol, "numeric: relative tolerance (of the reference).")
      .Min(0);
  b.String("pattern", &RewardParams::pattern,
           "regex_format: the regex (ICU syntax) the response must contain; scores 1 or 0.");
  b.Bool("full_match", &RewardParams::full_match,
         "regex_format: the whole response must match, not just contain a match.");
  b.String("tag", &RewardParams::tag,
           "format: the response must open with <tag>reasoning</tag> (one block, non-blank "
           "reasoning) and an answer after it.");
  b.Enum("answer_form", &RewardParams::answer_form,
         "format: what must follow the reasoning block: any non-blank text, a \\boxed{...}, or "
         "an answer the math verifier reads as a number.");
  b.Int("max_length", &RewardParams::max_length,
        "length_penalty: the hard limit; longer responses score -1.")
      .Min(0);
  b.Int("buffer", &RewardParams::buffer,
        "length_penalty: the penalty ramps linearly from 0 at max_length - buffer to -1 at "
        "max_length (DAPO's soft overlong punishment); 0: a step at max_length.")
      .Min(0);
  b.Enum("unit", &RewardParams::unit,
         "length_penalty: measure responses in tokens (when the sample carries its token "
         "count, else chars) or in Unicode characters.");
  b.String("path", &RewardParams::path,
           "plugin: shared library implementing reward/plugin_abi.h; python: the .py file "
           "(relative to the working directory).");
  b.StringList("args", &RewardParams::args, "plugin: \"key=value\" strings for its create().");
  b.String("function", &RewardParams::function,
           "python: the function in `path`, with verl's signature (data_source, solution_str, "
           "ground_truth, extra_info) or TRL's (prompts, completions, **kwargs).");
  b.String("interpreter", &RewardParams::interpreter,
           "python, code: the Python that runs the function or the program (e.g. a venv's "
           "bin/python).");
  b.Int("processes", &RewardParams::processes,
        "python: Python processes in each reward worker's pool; a batch's samples are scored "
        "on them in parallel.")
      .Min(1)
      .Max(256);
  b.Int("memory_mb", &RewardParams::memory_mb, "code: each test's address-space limit, MiB.")
      .Min(16);
  b.Int("cpu_s", &RewardParams::cpu_s, "code: each test's CPU-time limit, seconds.").Min(1);
  b.Double("test_timeout_s", &RewardParams::test_timeout_s,
           "code: each test's wall-time limit, seconds (then its sandbox is killed).")
      .Min(0, false);
  b.Int("max_processes", &RewardParams::max_processes,
        "code: processes (and threads) a test may run at once.")
      .Min(1);
  return b.Build();
}

std::shared_ptr<const Schema> RewardItem() {
  SchemaBuilder<RewardSpec> b("One reward.");
  b.String("name", &RewardSpec::name,
           "Reported in metrics.jsonl as reward/<name>; not `total` (reward/total is the weighted "
           "sum).")
      .Required();
  b.Enum("kind", &RewardSpec::kind, "The verifier; see docs/rewards.md.").Required();
  b.Double("weight", &RewardSpec::weight, "Weight in the total reward (sum of weight x score).");
  b.Double("timeout_s", &RewardSpec::timeout_s,
           "Per-sample time limit; 0 uses reward.timeout_s. A sample that runs over is marked "
           "failed, never scored 0.")
      .Min(0);
  b.Section("params", &RewardSpec::params, ParamsSection());
  b.Check([](const RewardSpec& r, CheckContext& ctx) {
    const RewardParams d;
    const RewardParams& p = r.params;
    using K = RewardKind;
    auto only = [&](bool differs, const char* key, std::set<RewardKind> kinds) {
      if (differs && !kinds.count(r.kind)) {
        ctx.Error(absl::StrCat("params.", key),
                  absl::StrCat("does not apply to kind ", ChoiceName(r.kind)));
      }
    };
    only(p.extract != d.extract, "extract", {K::kExactAnswer, K::kNumeric, K::kMath});
    only(p.case_sensitive != d.case_sensitive, "case_sensitive", {K::kExactAnswer});
    only(p.abs_tol != d.abs_tol, "abs_tol", {K::kNumeric});
    only(p.rel_tol != d.rel_tol, "rel_tol", {K::kNumeric});
    only(p.pattern != d.pattern, "pattern", {K::kRegexFormat});
    only(p.full_match != d.full_match, "full_match", {K::kRegexFormat});
    only(p.tag != d.tag, "tag", {K::kFormat});
    only(p.answer_form != d.answer_form, "answer_form", {K::kFormat});
    only(p.max_length != d.max_length, "max_length", {K::kLengthPenalty});
    only(p.buffer != d.buffer, "buffer", {K::kLengthPenalty});
    only(p.unit != d.unit, "unit", {K::kLengthPenalty});
    only(p.path != d.path, "path", {K::kPlugin, K::kPython});
    only(p.args != d.args, "args", {K::kPlugin});
    only(p.function != d.function, "function", {K::kPython});
    only(p.interpreter != d.interpreter, "interpreter", {K::kPython, K::kCode});
    only(p.processes != d.processes, "processes", {K::kPython});
    only(p.memory_mb != d.memory_mb, "memory_mb", {K::kCode});
    only(p.cpu_s != d.cpu_s, "cpu_s", {K::kCode});
    only(p.test_timeout_s != d.test_timeout_s, "test_timeout_s", {K::kCode});
    only(p.max_processes != d.max_processes, "max_processes", {K::kCode});
    if (r.kind == K::kPython && p.path.empty()) {
      ctx.Error("params.path", "kind python needs the path of its .py file");
    }
    if (r.kind == K::kPython && p.function.empty()) {
      ctx.Error("params.function", "kind python needs the name of its function");
    }
    if (r.kind == K::kRegexFormat && p.pattern.empty()) {
      ctx.Error("params.pattern", "kind regex_format needs a pattern");
    }
    if (r.kind == K::kFormat &&
        (p.tag.empty() || p.tag.find_first_not_of(kTagChars) != std::string::npos)) {
      ctx.Error("params.tag",
                absl::StrCat("'", p.tag, "' is not a tag name (letters, digits, _ and -)"));
    }
    if (r.kind == K::kLengthPenalty && p.max_length < 1) {
      ctx.Error("params.max_length", "kind length_penalty needs max_length >= 1");
    }
    if (r.kind == K::kLengthPenalty && p.buffer > p.max_length) {
      ctx.Error("params.buffer", absl::StrCat("must not exceed max_length (", p.max_length, ")"));
    }
    if (r.kind == K::kPlugin && p.path.empty()) {
      ctx.Error("params.path", "kind plugin needs the path of its shared library");
    }
    for (const auto& a : p.args) {
      if (a.find('=') == std::string::npos || a.front() == '=') {
        ctx.Error("params.args", absl::StrCat("'", a, "' is not key=value"));
      }
    }
  });
  return b.Build();
}

std::shared_ptr<const Schema> RewardSection() {
  SchemaBuilder<RewardOptions> b(
      "Reward workers score finished responses; the total is the weighted sum of the rewards, "
      "each also reported under its own name.");
  b.Int("workers", &RewardOptions::workers,
        "Reward worker processes; each generation's streamed chunks are dealt to them "
        "round-robin.")
      .Min(1)
      .Max(1024);
  b.Bool("external", &RewardOptions::external,
         "Do not start the workers; wait for them to join with `rlforge actor --role reward`.");
  b.Int("max_workers", &RewardOptions::max_workers,
        "Language-model jobs: reward workers in all, counting those that join the "
        "running job by hand (`rlforge actor --role reward --connect ADDR`, no --rank); 0: "
        "reward.workers, so none can join.")
      .Min(0)
      .Max(1024);
  b.Int("min_workers", &RewardOptions::min_workers,
        "Language-model jobs: the fewest live reward workers an iteration's scoring starts "
        "with; below it the job waits (status waiting) up to controller.register_timeout_s "
        "plus the largest restart backoff, then fails.")
      .Min(1)
      .Max(1024);
  b.Double("timeout_s", &RewardOptions::timeout_s,
           "Per-sample time limit of every reward that does not set its own.")
      .Min(0, false);
  b.SectionList("rewards", &RewardOptions::rewards, RewardItem(),
                "The rewards, computed for every sample.");
  b.Check([](const RewardOptions& o, CheckContext& ctx) {
    std::set<std::string> names;
    for (size_t i = 0; i < o.rewards.size(); ++i) {
      const std::string& n = o.rewards[i].name;
      if (!names.insert(n).second) {
        ctx.Error(absl::StrCat("rewards[", i, "].name"), absl::StrCat("'", n, "' is used twice"));
      }
      if (n.find_first_of(" /\t\n") != std::string::npos) {
        ctx.Error(absl::StrCat("rewards[", i, "].name"),
                  absl::StrCat("'", n, "' must not contain spaces or '/'"));
      }
      if (n == "total") {  // reward/total/... is the weighted sum's
        ctx.Error(absl::StrCat("rewards[", i, "].name"),
                  "'total' is taken: reward/total/mean and /std report the weighted sum of "
                  "every reward");
      }
    }
  });
  return b.Build();
}

}  // namespace

void AddRewardSections(SchemaBuilder<JobConfig>& b) {
  b.Section("reward", &JobConfig::reward, RewardSection());
}

}  // namespace rlforge
