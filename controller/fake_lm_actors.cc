#include "controller/fake_lm_actors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "reward/reward_role.h"
#include "reward/reward_set.h"

namespace rlforge::testing {

std::string PromptText(const models::Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<int32_t> body = ids;
  if (!body.empty() && body.front() == tok.bos_id()) body.erase(body.begin());
  return tok.Decode(body);
}

FakeLmRollout::FakeLmRollout(const models::Tokenizer& tokenizer, const models::PromptTemplate& tmpl,
                             Responder respond)
    : tok_(tokenizer), tmpl_(tmpl), respond_(std::move(respond)) {}

FakeScript FakeLmRollout::Generate() {
  return [this](const FakeWork& w) { return Answer(w); };
}

FakeScript FakeLmRollout::LoadWeights() {
  return [this](const FakeWork& w) {
    Engine& e = engines_[w.actor_id];
    const int64_t v = w.request.load_weights().weights().version();
    auto frozen = frozen_.find(w.actor_id);
    e.version = frozen == frozen_.end() ? v : std::min(v, frozen->second);
    FakeReply r = WeightsReply(e.version, w.request.load_weights().weights().location());
    r.tensors.clear();
    return r;
  };
}

int64_t FakeLmRollout::version() const {
  if (answering_ != nullptr) return answering_->version;
  int64_t lowest = 0;
  bool any = false;
  for (const auto& [id, e] : engines_) {
    lowest = any ? std::min(lowest, e.version) : e.version;
    any = true;
  }
  return lowest;
}

int64_t FakeLmRollout::version(const std::string& actor_id) const {
  auto it = engines_.find(actor_id);
  return it == engines_.end() ? 0 : it->second.version;
}

FakeReply FakeLmRollout::Answer(const FakeWork& w) {
  ++calls_;
  Engine& e = engines_[w.actor_id];
  const proto::LmGenerate& p = w.request.lm_generate();
  auto queued = GroupsFromFrames(w.tensors, false, 0);
  if (!queued.ok())
    return FakeReply::Fail(absl::StrCat("bad prompts: ", queued.status().message()));
  for (LmGroup& g : *queued) {
    const std::string text = PromptText(tok_, g.prompt);
    const uint64_t seed = RequestSeed(p.seed(), g.request_id);
    prompts_.push_back(text);
    queued_.push_back({w.actor_id, g.request_id, text, p.seed(), seed});
    e.queue.push_back({std::move(g), seed, e.version});
  }
  const size_t take =
      std::min<size_t>(e.queue.size(), static_cast<size_t>(std::max<int64_t>(1, p.min_groups())));
  std::vector<LmGroup> chunk;
  double tokens = 0;
  answering_ = &e;
  for (size_t k = 0; k < take; ++k) {
    Started q;
    if (reverse_) {
      q = std::move(e.queue.back());
      e.queue.pop_back();
    } else {
      q = std::move(e.queue.front());
      e.queue.pop_front();
    }
    LmGroup g = std::move(q.group);
    group_seed_ = q.seed;
    const std::string prompt = PromptText(tok_, g.prompt);
    for (int64_t j = 0; j < p.n(); ++j) {
      LmSample s;
      s.tokens = models::EncodeResponse(tok_, tmpl_, respond_(prompt, p, j));
      if (static_cast<int64_t>(s.tokens.size()) > p.max_tokens()) {
        s.tokens.resize(p.max_tokens());  // cut at the length limit, as an engine does
      } else {
        s.stopped = true;
      }
      s.logprobs.assign(s.tokens.size(), -0.5f);
      s.versions.assign(s.tokens.size(), e.version);
      if (partial_) std::fill_n(s.versions.begin(), s.tokens.size() / 2, q.version);
      tokens += static_cast<double>(s.tokens.size());
      g.samples.push_back(std::move(s));
    }
    chunk.push_back(std::move(g));
  }
  answering_ = nullptr;
  if (filter_) filter_(chunk);
  FakeReply r = FakeReply::Ok();
  r.result.set_policy_version(e.version);
  (*r.result.mutable_metrics())["generated_tokens"] = tokens;
  (*r.result.mutable_metrics())["generate_s"] = 0.25;
  (*r.result.mutable_metrics())["preemptions"] = 1;
  r.tensors = GroupsToFrames(chunk, true);
  return r;
}

std::string PlainAnswer(const std::string& prompt) {
  int a = 0, b = 0;
  char op = 0;
  EXPECT_EQ(std::sscanf(prompt.c_str(), "%d%c%d=", &a, &op, &b), 3) << prompt;
  return std::to_string(op == '-' ? a - b : a + b);
}

FakeScript RingPublishReply() {
  auto last = std::make_shared<int64_t>(0);
  return [last](const FakeWork& w) {
    const int64_t p = w.request.publish_weights().publication();
    if (p <= *last) {
      return FakeReply::Fail(absl::StrCat("weight publication ", p, " after publication ", *last));
    }
    *last = p;
    return PublishReply(w);
  };
}

void ExpectEveryStreamReadByItsReaders(const FakeActors& actors) {
  int64_t publication = 0;  // the stream open now
  int readers = 0;          // its readers
  std::set<std::string> read;
  for (const FakeWork& w : actors.received()) {
    if (w.request.has_publish_weights()) {
      if (w.rank != 0) continue;  // every rank gets it; rank 0 streams
      EXPECT_GT(w.request.publish_weights().publication(), publication);
      publication = w.request.publish_weights().publication();
      readers = w.request.publish_weights().readers();
      EXPECT_EQ(w.request.publish_weights().reader_pids_size(), readers);
      read.clear();
    } else if (w.request.has_load_weights()) {
      const proto::LoadWeights& l = w.request.load_weights();
      EXPECT_EQ(l.publication(), publication) << w.actor_id;
      EXPECT_TRUE(read.insert(w.actor_id).second) << w.actor_id << " read it twice";
      EXPECT_GE(l.reader(), 0);
      EXPECT_LT(l.reader(), readers) << w.actor_id;
      // (A load sent to an engine already dead is not recorded: at most `readers` are.)
      EXPECT_LE(static_cast<int>(read.size()), readers) << "publication " << publication;
    }
  }
  EXPECT_GT(publication, 0) << "nothing was streamed";
}

FakeScript ScoreScript(std::function<reward::SampleScore(const reward::Sample&)> score,
                       const std::string& name) {
  return [score, name](const FakeWork& w) {
    std::vector<reward::Sample> samples = reward::SamplesFromProto(w.request.score());
    reward::BatchScores b;
    b.rewards.push_back({name, 1.0, {}});
    for (const reward::Sample& s : samples) {
      reward::SampleScore sc = score(s);
      b.rewards[0].scores.push_back(sc);
      b.ok.push_back(sc.ok());
      b.total.push_back(sc.ok() ? sc.value : std::nan(""));
      b.error.push_back(sc.ok() ? "" : absl::StrCat(name, ": ", sc.error));
    }
    FakeReply r = FakeReply::Ok();
    reward::ScoresToProto(b, r.result.mutable_score());
    for (const auto& [k, v] : b.Metrics()) (*r.result.mutable_metrics())[k] = v;
    // As the reward worker reports its busy time (reward/reward_role.cc).
    (*r.result.mutable_metrics())["reward/time_s"] = 0.125;
    return r;
  };
}

void WriteTokenizerCheckpoint(const std::string& dir) {
  std::string alphabet;
  for (char c = ' '; c <= '~'; ++c) alphabet.push_back(c);
  auto tok = models::MakeCharTokenizer(alphabet);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_TRUE(models::SaveTokenizer(**tok, dir).ok());
  std::ofstream(dir + "/config.json") << "{\"architectures\": [\"LlamaForCausalLM\"]}\n";
}

}  // namespace rlforge::testing
