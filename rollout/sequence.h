// Sequence and SequenceGroup: one sample in flight and the request it belongs to, as the
// scheduler (rollout/scheduler.h) keeps them and the model runner (rollout/model_runner.h)
// reads them. No libtorch here.
//
// A group's sequences are owned by the group; the scheduler owns the groups.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "rollout/generation.h"

namespace rlforge {

struct Sequence;

struct SequenceGroup {
  GenerationRequest request;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<GeneratedSample> done;
  int64_t remaining = 0;
  bool started = false;  // a sequence of it has been admitted (it holds KV)
};

struct Sequence {
  SequenceGroup* group = nullptr;
  int64_t index = 0;            // -1: the leader that prefills a shared prompt once
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_len = 0;
  int64_t computed = 0;  // leading tokens whose KV is in the pool (or is written this step)
  std::vector<int32_t> table;
  // Slot of token position p: p, or p + skip from position skip_from on. A
  // sample forked from a shared prompt starts its own tokens at the next block
  // boundary, so the prompt's last partial block stays shared, never copied.
  int64_t skip_from = INT64_MAX, skip = 0;
  // Slot index of position p, and the slots the first n tokens take (a fork's
  // gap counts as taken, so the shared block is never written or copied).
  int64_t SlotIndex(int64_t p) const { return p < skip_from ? p : p + skip; }
  int64_t Slots(int64_t n) const { return n < skip_from ? n : n + skip; }
  std::mt19937_64 rng;
  GeneratedSample out;
  bool finished = false;
};

}  // namespace rlforge
