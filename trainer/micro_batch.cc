#include "trainer/micro_batch.h"

#include <vector>

#include "common/status.h"
#include "trainer/lm_metrics.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

GroupBatch SliceGroups(const GroupBatch& b, int64_t g0, int64_t g1) {
  const int64_t L = b.tokens.size(1), n = g1 - g0;
  // Each row is used from its start (segment >= 0) and padded after: the slice's longest row.
  const int64_t Lk =
      std::max<int64_t>(1, (b.segments.narrow(0, g0, n) >= 0).any(0).sum().item<int64_t>());
  const torch::Tensor group_of = b.source.select(1, 0).div(L, "floor");
  const int64_t row0 = (group_of < g0).sum().item<int64_t>();
  const int64_t rows = (group_of < g1).sum().item<int64_t>() - row0;
  GroupBatch out;
  out.tokens = b.tokens.narrow(0, g0, n).narrow(1, 0, Lk);
  out.positions = b.positions.narrow(0, g0, n).narrow(1, 0, Lk);
  out.segments = b.segments.narrow(0, g0, n).narrow(1, 0, Lk);
  out.shared = b.shared.narrow(0, g0, n).narrow(1, 0, Lk);
  out.targets = b.targets.narrow(0, row0, rows);
  out.mask = b.mask.narrow(0, row0, rows);
  out.old_logp = b.old_logp.narrow(0, row0, rows);
  const torch::Tensor src = b.source.narrow(0, row0, rows);
  const torch::Tensor moved = (src.div(L, "floor") - g0) * Lk + src.remainder(L);
  out.source = torch::where(out.mask > 0, moved, torch::zeros_like(moved));  // padding: state 0
  return out;
}

absl::StatusOr<int64_t> MicroBatchCount(dist::Communicator& comm, const GroupBatch& b,
                                        int64_t micro_batch_size) {
  const int64_t G = b.tokens.size(0), S = b.source.size(0);
  int64_t count = 1;
  if (micro_batch_size > 0) {
    count = std::clamp<int64_t>((S + micro_batch_size - 1) / micro_batch_size, 1, G);
  }
  ASSIGN_OR_RETURN(const double most, MaxOverRanks(comm, static_cast<double>(count)));
  return static_cast<int64_t>(most);
}

namespace {

// Groups of micro-batch k of `count`; a rank with fewer groups than micro-batches gets group 0
// again for the extra ones, flagged `spare` (its result is thrown away).
struct MicroRange {
  int64_t g0 = 0, g1 = 1;
  bool spare = false;
};
MicroRange RangeOf(int64_t groups, int64_t k, int64_t count) {
  MicroRange r{k * groups / count, (k + 1) * groups / count, false};
  if (r.g1 <= r.g0) r = {0, 1, true};
  return r;
}

struct Scored {
  torch::Tensor logp, entropy;
};

// One forward of `b`: logprobs (in the current grad mode) and, if asked, entropy (no graph).
absl::StatusOr<Scored> Forward(ShardedModel& model, const GroupBatch& b, bool entropy) {
  torch::Tensor logits;
  Scored out;
  ASSIGN_OR_RETURN(out.logp, GroupTokenLogprobs(model.module(), b, &logits));
  if (entropy) {
    torch::NoGradGuard ng;
    ASSIGN_OR_RETURN(out.entropy, TokenEntropy(logits.detach()));
  }
  return out;
}

absl::StatusOr<LogprobPass> SinglePass(ShardedModel& model, const GroupBatch& b, bool backward,
                                       bool entropy, const LogprobLoss& loss) {
  model.BeginForward();
  ASSIGN_OR_RETURN(const Scored s, Forward(model, b, entropy));
  torch::Tensor l;
  if (loss) {
    ASSIGN_OR_RETURN(l, loss(s.logp));
  }
  if (!backward) {
    RETURN_IF_ERROR(model.EndForward());
    return LogprobPass{s.logp, s.entropy};
  }
  l.backward();
  RETURN_IF_ERROR(model.FinishBackward());
  return LogprobPass{s.logp, s.entropy};
}

}  // namespace

absl::StatusOr<LogprobPass> MicroBatchedLogprobs(ShardedModel& model, const GroupBatch& b,
                                                 int64_t micro_batches, bool backward, bool entropy,
                                                 const LogprobLoss& loss) {
  if (backward && !loss) return absl::InvalidArgumentError("a backward pass needs a loss");
  if (micro_batches <= 1) return SinglePass(model, b, backward, entropy, loss);
  const int64_t G = b.tokens.size(0);
  std::vector<torch::Tensor> logps, entropies;
  {
    torch::NoGradGuard ng;
    for (int64_t k = 0; k < micro_batches; ++k) {
      const MicroRange r = RangeOf(G, k, micro_batches);
      model.BeginForward();
      ASSIGN_OR_RETURN(Scored s, Forward(model, SliceGroups(b, r.g0, r.g1), entropy));
      RETURN_IF_ERROR(model.EndForward());
      if (r.spare) continue;
      logps.push_back(s.logp);
      if (entropy) entropies.push_back(s.entropy);
    }
  }
  LogprobPass out;
  out.logp = torch::cat(logps, 0);
  if (entropy) out.entropy = torch::cat(entropies, 0);
  if (!backward) {
    if (loss) RETURN_IF_ERROR(loss(out.logp).status());
    return out;
  }
  out.logp = out.logp.detach().requires_grad_(true);
  ASSIGN_OR_RETURN(const torch::Tensor l, loss(out.logp));
  l.backward();
  const torch::Tensor grad =
      out.logp.grad().defined() ? out.logp.grad() : torch::zeros_like(out.logp);
  int64_t row = 0;
  for (int64_t k = 0; k < micro_batches; ++k) {
    const MicroRange r = RangeOf(G, k, micro_batches);
    const GroupBatch part = SliceGroups(b, r.g0, r.g1);
    const int64_t rows = part.targets.size(0);
    model.BeginForward();
    ASSIGN_OR_RETURN(torch::Tensor logp, GroupTokenLogprobs(model.module(), part));
    const torch::Tensor g = r.spare ? torch::zeros_like(logp) : grad.narrow(0, row, rows);
    (logp * g).sum().backward();
    RETURN_IF_ERROR(model.FinishBackward());
    if (!r.spare) row += rows;
  }
  return out;
}

}  // namespace rlforge
