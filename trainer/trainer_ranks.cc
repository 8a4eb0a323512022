#include "trainer/trainer_ranks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/exceptions.h"
#include "common/role_names.h"
#include "common/status.h"
#include "models/device.h"
#include "models/hf_checkpoint.h"
#include "trainer/sharded_checkpoint.h"

namespace rlforge {

absl::StatusOr<std::unique_ptr<dist::Communicator>> ConnectTrainerRanks(
    const proto::Assignment& a, const TrainerOptions& trainer) {
  dist::GroupOptions o;
  // The group's tensors live where the rank trains: gloo on the CPU, NCCL on its GPU.
  ASSIGN_OR_RETURN(const torch::Device device,
                   models::TorchDevice("trainer.device", trainer.device, a.rank()));
  o.device = device.str();
  o.store_address = a.store_address();
  o.name = kTrainerRole;
  o.rank = a.rank();
  o.size = std::max(1, a.world_size());
  if (a.collective_timeout_s() > 0) o.timeout_s = a.collective_timeout_s();
  if (o.size > 1 && o.store_address.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("trainer rank ", a.rank(), " of ", o.size,
                                                   ": the assignment has no store address"));
  }
  return dist::ConnectGroup(o);
}

absl::StatusOr<ShardedModel::Options> ShardingOptions(const TrainerOptions& t, int rank,
                                                      bool trainable) {
  ShardedModel::Options o;
  o.reshard_after_forward = t.reshard_after_forward;
  o.trainable = trainable;
  o.compute_dtype = t.mixed_precision == MixedPrecision::kBf16 ? torch::kBFloat16 : torch::kFloat32;
  ASSIGN_OR_RETURN(o.device, models::TorchDevice("trainer.device", t.device, rank));
  return o;
}

absl::StatusOr<std::unique_ptr<ShardedModel>> LoadShardedModel(
    const std::string& path, dist::Communicator* comm, ShardedModel::Options options,
    bool value_head, const SetupProgress& progress, const std::string& what) {
  return CallCatching([&]() -> absl::StatusOr<std::unique_ptr<ShardedModel>> {
    ASSIGN_OR_RETURN(models::TransformerConfig config, models::LoadHfConfig(path));
    if (progress) progress(what + ": building the model");
    // Built full, then each rank keeps its shard and reads only that slice of the files.
    ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> m,
                     ShardedModel::Create(models::Transformer(config, value_head), comm, options));
    RETURN_IF_ERROR(LoadHfShards(path, *m, /*stats=*/nullptr, progress, what));
    return m;
  });
}

Share ShareOf(const std::vector<int64_t>& costs, int rank, int size) {
  // Item i goes to the rank whose slice of the cumulative cost holds the item's midpoint.
  double total = 0;
  for (int64_t c : costs) total += static_cast<double>(std::max<int64_t>(c, 1));
  Share s;
  bool found = false;
  double before = 0;
  for (size_t i = 0; i < costs.size(); ++i) {
    const double c = static_cast<double>(std::max<int64_t>(costs[i], 1));
    const int owner =
        std::min(size - 1, static_cast<int>((before + c / 2) / total * static_cast<double>(size)));
    before += c;
    if (owner == rank) {
      if (!found) s.begin = i;
      s.end = i + 1;
      found = true;
    }
  }
  if (!found) return Share{0, std::min<size_t>(1, costs.size()), true};
  return s;
}

std::vector<int64_t> GroupCosts(const std::vector<LmGroup>& groups) {
  std::vector<int64_t> costs;
  for (const LmGroup& g : groups) {
    int64_t n = static_cast<int64_t>(g.prompt.size());
    for (const auto& s : g.samples) n += static_cast<int64_t>(s.tokens.size());
    costs.push_back(n);
  }
  return costs;
}

absl::StatusOr<torch::Tensor> AssembleRows(dist::Communicator& comm, const torch::Tensor& part,
                                           const Share& share, int64_t group_size, int64_t rows,
                                           int64_t width) {
  if (comm.size() == 1 && part.size(0) == rows && part.size(1) == width) return part;
  torch::Tensor whole = torch::zeros({rows, width}, part.options().device(comm.device()));
  if (!share.weight_zero) {
    whole.narrow(0, static_cast<int64_t>(share.begin) * group_size, part.size(0))
        .narrow(1, 0, part.size(1))
        .copy_(part);
  }
  RETURN_IF_ERROR(comm.AllReduceSum(whole)->Wait());
  return whole.to(part.device());
}

absl::StatusOr<std::vector<double>> SumOverRanks(dist::Communicator& comm,
                                                 const std::vector<double>& values) {
  if (comm.size() == 1 || values.empty()) return values;
  torch::Tensor t = torch::tensor(values, torch::kDouble).to(comm.device());
  RETURN_IF_ERROR(comm.AllReduceSum(t)->Wait());
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

double ShareCounts::Weight(LossAggregation agg) const {
  const bool by_tokens = agg == LossAggregation::kTokenMean;
  const double local = by_tokens ? tokens : rows;
  const double global = by_tokens ? global_tokens + left_out_tokens : global_rows + left_out_rows;
  return global > 0 ? local / global : 0;
}

absl::StatusOr<ShareCounts> CountShare(dist::Communicator& comm, const torch::Tensor& mask,
                                       bool weight_zero, double left_out_tokens,
                                       double left_out_rows) {
  ShareCounts c;
  c.left_out_tokens = left_out_tokens;
  c.left_out_rows = left_out_rows;
  if (!weight_zero) {
    c.tokens = mask.sum().item<double>();
    c.rows = static_cast<double>(mask.size(0));
  }
  ASSIGN_OR_RETURN(std::vector<double> global, SumOverRanks(comm, {c.tokens, c.rows}));
  c.global_tokens = global[0];
  c.global_rows = global[1];
  return c;
}

absl::StatusOr<double> MaxOverRanks(dist::Communicator& comm, double value) {
  std::vector<double> each(static_cast<size_t>(comm.size()), 0.0);
  each[static_cast<size_t>(comm.rank())] = value;
  ASSIGN_OR_RETURN(each, SumOverRanks(comm, each));
  return *std::max_element(each.begin(), each.end());
}

absl::StatusOr<std::optional<models::Transformer>> GatherFullModel(ShardedModel& m) {
  return CallCatching([&]() -> absl::StatusOr<std::optional<models::Transformer>> {
    std::optional<models::Transformer> full;
    if (m.comm().rank() == 0) full.emplace(m.module()->config(), m.module()->has_value_head());
    std::map<std::string, torch::Tensor> dst;
    if (full) {
      for (auto& p : (*full)->named_parameters()) dst[p.key()] = p.value();
    }
    torch::NoGradGuard ng;
    RETURN_IF_ERROR(m.GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
      if (!full) return absl::OkStatus();
      for (const ShardedParam& p : unit.params) {
        dst.at(p.name).copy_(flat.narrow(0, p.offset, p.numel).view(p.shape));
      }
      return absl::OkStatus();
    }));
    return full;
  });
}

}  // namespace rlforge
