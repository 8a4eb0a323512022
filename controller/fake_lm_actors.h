// Scripts that play the actors of language-model jobs for FakeActors (test-only).
//
// LmGenerate prompts (token ids) -> FakeLmRollout: the engine's queue -> Responder(prompt
//   text) -> response tokens (as SFT writes them) -> chunks of >= min_groups finished groups
// One FakeLmRollout plays every rollout actor of a job (an engine fleet): each actor has a
// queue and a version of its own.
// ScoreTask samples -> ScoreScript: one scripted reward -> ScoreResult
//
// A fake works in text: it decodes the prompts it receives and encodes the responses a test
// scripts, with the job's own tokenizer and template, so what the loop decodes back is the
// scripted text.
#pragma once

#include <deque>
#include <functional>
#include <map>
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
  // engine that gets it serve that version (and ack it); every token it samples carries it.
  FakeScript Generate();
  FakeScript LoadWeights();

  // Groups finish in the reverse of their queueing order (the engine's finishing order need
  // not be the request order).
  void set_reverse_order(bool reverse) { reverse_ = reverse; }
  // Partial rollouts (rollout.partial): a group counts as started when queued, so one answered
  // after a load spans both versions: the first half of each sample's tokens carries the
  // version its engine served when the group was queued, the rest the version answering.
  void set_partial(bool partial) { partial_ = partial; }
  // Edits every chunk before it is sent (e.g. to repeat a request id).
  void set_chunk_filter(std::function<void(std::vector<LmGroup>&)> f) { filter_ = std::move(f); }
  // Engine `actor_id` ignores loads past `version`: it stays there and acks it (a lagging
  // engine).
  void Freeze(const std::string& actor_id, int64_t version) { frozen_[actor_id] = version; }
  // Engine `actor_id`'s process is gone: its queue with it. A replacement under the same id
  // starts empty, serving version 0 (the starting checkpoint).
  void Forget(const std::string& actor_id) { engines_.erase(actor_id); }

  // Inside a Responder: the version of the engine answering. Otherwise the lowest version any
  // engine serves.
  int64_t version() const;
  int64_t version(const std::string& actor_id) const;
  // Inside a Responder: the sampling seed of the group being answered, RequestSeed of the
  // LmGenerate's seed and the group's request id, as an engine derives it.
  uint64_t group_seed() const { return group_seed_; }
  // Every prompt text queued, in order (all engines).
  const std::vector<std::string>& prompts() const { return prompts_; }
  // Every group queued, in order (all engines).
  struct Queued {
    std::string actor_id;
    int64_t request_id = 0;
    std::string prompt;
    uint64_t request_seed = 0;  // LmGenerate.seed
    uint64_t group_seed = 0;
  };
  const std::vector<Queued>& queued() const { return queued_; }
  // The LmGenerate calls answered so far (all engines).
  int64_t calls() const { return calls_; }

 private:
  struct Started {
    LmGroup group;
    uint64_t seed = 0;
    int64_t version = 0;  // the engine's when queued
  };
  struct Engine {
    std::deque<Started> queue;
    int64_t version = 0;
  };
  FakeReply Answer(const FakeWork& w);

  const models::Tokenizer& tok_;
  const models::PromptTemplate& tmpl_;
  Responder respond_;
  std::map<std::string, Engine> engines_;  // by actor id
  const Engine* answering_ = nullptr;
  std::map<std::string, int64_t> frozen_;
  std::vector<std::string> prompts_;
  std::vector<Queued> queued_;
  uint64_t group_seed_ = 0;
  bool reverse_ = false;
  bool partial_ = false;
  std::function<void(std::vector<LmGroup>&)> filter_;
  int64_t calls_ = 0;
};

// A trainer rank's answer to PublishWeights over the shm ring: PublishReply, but a publication
// number not above every earlier one is refused, as the ring refuses it.
FakeScript RingPublishReply();

// The shm ring's contract, over every request `actors` received: each PublishWeights has a
// publication number above the earlier ones and a pid per reader, and is read by at most its
// `readers` LoadWeights (a load sent to a dead engine is not recorded), each with a reader
// index below `readers`, all sent between it and the next PublishWeights, no engine twice.
void ExpectEveryStreamReadByItsReaders(const FakeActors& actors);

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
