#include "cli/lm_commands.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/checkpoint_sampler.h"
#include "common/status.h"
#include "data/heldout_set.h"
#include "data/jsonl_dataset.h"
#include "models/lora.h"
#include "models/tokenizer.h"
#include "nlohmann/json.hpp"
#include "reward/answer_check.h"

namespace rlforge {

namespace {

using Json = nlohmann::json;

int Report(const absl::Status& s, int code) {
  std::fprintf(stderr, "error: %s\n", Msg(s).c_str());
  return code;
}

absl::StatusOr<std::vector<std::string>> ReadPrompts(const std::string& path) {
  if (path == "-") return ReadPromptLines(std::cin, "stdin");
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--prompts ", path, ": cannot open"));
  return ReadPromptLines(in, path);
}

// Where JSONL goes: the file `path`, or stdout when it is "".
class JsonlOut {
 public:
  absl::Status Open(const std::string& path) {
    if (path.empty()) return absl::OkStatus();
    file_.open(path, std::ios::binary | std::ios::trunc);
    if (!file_) return absl::InvalidArgumentError(absl::StrCat("--out ", path, ": cannot write"));
    return absl::OkStatus();
  }
  void Write(const Json& line) {
    std::ostream& os = file_.is_open() ? static_cast<std::ostream&>(file_) : std::cout;
    os << line.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  bool ok() const { return !file_.is_open() || file_.good(); }

 private:
  std::ofstream file_;
};

Json OptionalText(const std::optional<std::string>& s) { return s ? Json(*s) : Json(nullptr); }

}  // namespace

int RunGenerate(const JobConfig& config, const GenerateOptions& o) {
  auto prompts = ReadPrompts(o.prompts);
  if (!prompts.ok()) return Report(prompts.status(), 2);
  auto sampler = CheckpointSampler::Open(config);
  if (!sampler.ok()) return Report(sampler.status(), 2);
  SamplingParams sampling = o.sampling;
  std::string note;
  auto max_tokens =
      (*sampler)->MaxTokensFor(*prompts, sampling.max_tokens, o.max_tokens_given, &note);
  if (!max_tokens.ok()) return Report(max_tokens.status(), 2);
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  sampling.max_tokens = *max_tokens;
  JsonlOut out;
  if (absl::Status s = out.Open(o.out); !s.ok()) return Report(s, 2);
  auto groups = (*sampler)->Sample(*prompts, sampling);
  if (!groups.ok()) return Report(groups.status(), 1);
  for (size_t i = 0; i < groups->size(); ++i) {
    Json samples = Json::array();
    for (const LmSample& s : (*groups)[i].samples) {
      samples.push_back({{"text", (*sampler)->text().Response(s)},
                         {"tokens", s.tokens},
                         {"finish_reason", s.stopped ? "stop" : "length"}});
    }
    out.Write({{"prompt", (*prompts)[i]}, {"samples", samples}});
  }
  if (!out.ok()) return Report(absl::InternalError("--out " + o.out + ": write failed"), 1);
  std::fprintf(stderr, "generated %zu x %lld samples\n", prompts->size(),
               static_cast<long long>(o.sampling.n));
  return 0;
}

namespace {

struct EvalTotals {
  int64_t correct = 0;
  double pass1 = 0, passk = 0, majk = 0;
};

// The sampled part of one example's row: each sample's text, answer and verdict, pass@k and
// the majority vote over its first k answers.
void ScoreSamples(const reward::AnswerJudge& judge, const TaskText& text, const LmGroup& group,
                  const PromptExample& ex, const EvalOptions& o, Json& row, EvalTotals& t) {
  Json samples = Json::array();
  std::vector<std::optional<std::string>> answers;
  int64_t c = 0;
  for (const LmSample& s : group.samples) {
    const std::string response = text.Response(s);
    const bool ok = judge.Correct(response, ex.answer);
    c += ok ? 1 : 0;
    answers.push_back(judge.FinalAnswer(response));
    samples.push_back(
        {{"text", response}, {"answer", OptionalText(answers.back())}, {"correct", ok}});
  }
  const int64_t n = static_cast<int64_t>(group.samples.size());
  answers.resize(static_cast<size_t>(o.k));
  const reward::MajorityVote vote = reward::Majority(judge, answers);
  const bool maj_ok = vote.answer && judge.SameAnswer(ex.answer, *vote.answer);
  const double passk = reward::PassAtK(n, c, o.k);
  row["samples"] = samples;
  row["sample_correct"] = c;
  row["pass_at_k"] = passk;
  row["majority_answer"] = OptionalText(vote.answer);
  row["majority_correct"] = maj_ok;
  t.pass1 += static_cast<double>(c) / static_cast<double>(n);
  t.passk += passk;
  t.majk += maj_ok ? 1 : 0;
}

Json Summary(const EvalOptions& o, const std::string& data, const EvalTotals& t, size_t count) {
  const double m = static_cast<double>(count);
  Json s = {{"data", data},
            {"examples", count},
            {"verifier", AnswerCheckName(o.check)},
            {"correct", t.correct},
            {"accuracy", static_cast<double>(t.correct) / m}};
  if (o.k > 1) {
    s["k"] = o.k;
    s["n"] = o.n;
    s["temperature"] = o.temperature;
    s["pass@1"] = t.pass1 / m;
    s[absl::StrCat("pass@", o.k)] = t.passk / m;
    s[absl::StrCat("maj@", o.k)] = t.majk / m;
  }
  return s;
}

void PrintSummary(const EvalOptions& o, const Json& s) {
  std::string line = absl::StrFormat("eval: %s: accuracy %.4f (%d/%d greedy, verifier %s)",
                                     s["data"].get<std::string>(), s["accuracy"].get<double>(),
                                     s["correct"].get<int64_t>(), s["examples"].get<int64_t>(),
                                     AnswerCheckName(o.check));
  if (o.k > 1) {
    const std::string pk = absl::StrCat("pass@", o.k), mk = absl::StrCat("maj@", o.k);
    absl::StrAppendFormat(&line, "  pass@1 %.4f  %s %.4f  %s %.4f (n %d, temperature %g)",
                          s["pass@1"].get<double>(), pk, s[pk].get<double>(), mk,
                          s[mk].get<double>(), o.n, o.temperature);
  }
  std::printf("%s\n%s\n", line.c_str(), s.dump().c_str());
}

}  // namespace

int RunEval(const JobConfig& config, const EvalOptions& o) {
  auto examples = o.data.empty() && o.job ? JobHeldoutSet(config, *o.job, o.limit)
                                          : ReadPromptJsonl(o.data, JsonlFormat::kRl);
  if (!examples.ok()) return Report(examples.status(), 2);
  if (o.limit > 0 && static_cast<int64_t>(examples->size()) > o.limit) {
    examples->resize(static_cast<size_t>(o.limit));
  }
  const std::string data =
      o.data.empty() ? HeldoutSource(config.data, static_cast<uint64_t>(config.job.seed)) : o.data;
  if (examples->empty()) return Report(absl::InvalidArgumentError(data + ": no examples"), 2);
  auto sampler = CheckpointSampler::Open(config);
  if (!sampler.ok()) return Report(sampler.status(), 2);
  JsonlOut out;
  if (absl::Status s = out.Open(o.out); !s.ok()) return Report(s, 2);
  std::vector<std::string> prompts;
  for (const PromptExample& ex : *examples) prompts.push_back(ex.prompt);
  std::string note;
  auto max_tokens = (*sampler)->MaxTokensFor(prompts, o.max_tokens, o.max_tokens_given, &note);
  if (!max_tokens.ok()) return Report(max_tokens.status(), 2);
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  auto greedy = (*sampler)->Sample(prompts, SamplingParams::Greedy(*max_tokens, o.seed));
  if (!greedy.ok()) return Report(greedy.status(), 1);
  std::vector<LmGroup> sampled;
  if (o.k > 1) {
    SamplingParams p;
    p.n = o.n;
    p.temperature = o.temperature;
    p.max_tokens = *max_tokens;
    p.seed = o.seed;
    auto s = (*sampler)->Sample(prompts, p);
    if (!s.ok()) return Report(s.status(), 1);
    sampled = std::move(*s);
  }
  const reward::AnswerJudge judge(o.check);
  const TaskText& text = (*sampler)->text();
  EvalTotals totals;
  for (size_t i = 0; i < examples->size(); ++i) {
    const PromptExample& ex = (*examples)[i];
    const std::string response = text.Response((*greedy)[i].samples[0]);
    const bool ok = judge.Correct(response, ex.answer);
    totals.correct += ok ? 1 : 0;
    Json row = {{"index", i},
                {"prompt", ex.prompt},
                {"reference", ex.answer},
                {"response", response},
                {"answer", OptionalText(judge.FinalAnswer(response))},
                {"correct", ok}};
    if (o.k > 1) ScoreSamples(judge, text, sampled[i], ex, o, row, totals);
    if (!o.out.empty()) out.Write(row);
  }
  if (!out.ok()) return Report(absl::InternalError("--out " + o.out + ": write failed"), 1);
  PrintSummary(o, Summary(o, data, totals, examples->size()));
  return 0;
}

// rlforge merge-lora: the merged weights and config, then the base's tokenizer beside them.
int RunMergeLora(const std::string& adapter_dir, const std::string& base_dir,
                 const std::string& out_dir) {
  absl::StatusOr<std::string> base = models::MergeLoraCheckpoint(adapter_dir, base_dir, out_dir);
  absl::Status s = base.status();
  if (s.ok()) {
    absl::StatusOr<std::unique_ptr<models::Tokenizer>> tok = models::LoadTokenizer(*base);
    s = tok.ok() ? models::SaveTokenizer(**tok, out_dir) : tok.status();
  }
  if (!s.ok()) {
    std::fprintf(stderr, "error: merge-lora: %s\n", std::string(s.message()).c_str());
    return s.code() == absl::StatusCode::kInternal ? 1 : 2;
  }
  std::printf("%s\n", out_dir.c_str());
  return 0;
}


}  // namespace rlforge
