// Scripts that play the actors of language-model jobs for FakeActors (test-only).
//
// LmGenerate prompts (token ids) -> FakeLmRollout: queue -> Responder(prompt text) ->
//   response tokens (as SFT writes them) -> chunks of >= min_groups finished groups
// ScoreTask samples -> ScoreScript: one scripted reward -> ScoreResult
//
// A fake works in text: it decodes the prompts it receives and encodes the responses a test
// scripts, with the job's own tokenizer and template, so what the loop decodes back is the
// scripted text.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "controller/fake_actors.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "proto/lm_groups.h"
#include "reward/reward.h"

namespace rlforge::testing {

class FakeLmRollout {
 public:
  // The response text of sample `sample` to `prompt` (the prompt text without bos).
  using Responder = std::function<std::string(const std::string& prompt,
                                              const proto::LmGenerate& params, int64_t sample)>;
  // `tokenizer` and `tmpl` must outlive the fake.
  FakeLmRollout(const models::Tokenizer& tokenizer, const models::PromptTemplate& tmpl,
                Responder respond);

  // Scripts for FakeActors::On(role, kLmGenerate / kLoadWeights, ...). LoadWeights makes the
  // fake serve that version; every sampled token carries it.
  FakeScript Generate();
  FakeScript LoadWeights();

  // Groups finish in the reverse of their queueing order (the engine's finishing order need
  // not be the request order).
  void set_reverse_order(bool reverse) { reverse_ = reverse; }
  // Edits every chunk before it is sent (e.g. to repeat a request id).
  void set_chunk_filter(std::function<void(std::vector<LmGroup>&)> f) { filter_ = std::move(f); }

  int64_t version() const { return version_; }
  // Every prompt text queued, in order.
  const std::vector<std::string>& prompts() const { return prompts_; }
  // The LmGenerate calls answered so far.
  int64_t calls() const { return calls_; }

 private:
  FakeReply Answer(const FakeWork& w);

  const models::Tokenizer& tok_;
  const models::PromptTemplate& tmpl_;
  Responder respond_;
  std::deque<LmGroup> queue_;
  std::vector<std::string> prompts_;
  bool reverse_ = false;
  std::function<void(std::vector<LmGroup>&)> filter_;
  int64_t version_ = 0;
  int64_t calls_ = 0;
};

// The prompt text of `ids` (bos dropped).
std::string PromptText(const models::Tokenizer& tok, const std::vector<int32_t>& ids);

// The true answer to a plain-style arithmetic prompt ("12+3=" -> "15"; + and - only).
std::string PlainAnswer(const std::string& prompt);

// A reward worker with one reward, `name`, of weight 1: `score` per sample.
FakeScript ScoreScript(std::function<reward::SampleScore(const reward::Sample&)> score,
                       const std::string& name = "exact");

// A char-level tokenizer over printable ASCII, saved in a fresh `dir` with a config.json:
// enough of a checkpoint for the controller, which never loads weights.
void WriteTokenizerCheckpoint(const std::string& dir);

}  // namespace rlforge::testing
