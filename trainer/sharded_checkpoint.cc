#include "trainer/sharded_checkpoint.h"

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/exceptions.h"
#include "common/status.h"
#include "models/hf_checkpoint.h"
#include "models/safetensors.h"
#include "nlohmann/json.hpp"

namespace rlforge {
namespace {

constexpr char kFormat[] = "rlforge-sharded-v1";
const char* const kKinds[] = {"param", "exp_avg", "exp_avg_sq"};

std::string RankFile(int rank, int size) {
  return absl::StrCat("rank-", rank, "-of-", size, ".safetensors");
}

// Every rank learns whether any failed. Returns `mine` where it failed; elsewhere an error
// pointing at the ranks that did. Agreement is what lets no rank go on alone into the next
// collective (or report a checkpoint complete that is not).
absl::Status Agree(dist::Communicator& comm, const absl::Status& mine, const std::string& what) {
  torch::Tensor failed = torch::full({1}, mine.ok() ? 0.0f : 1.0f, torch::device(comm.device()));
  const absl::Status s = comm.AllReduceSum(failed)->Wait();
  if (!mine.ok()) return mine;
  if (!s.ok()) return Annotate(s, what);
  const int others = static_cast<int>(failed.item<float>());
  if (others == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(what, ": failed on ", others, " other rank(s) (rank ",
                                         comm.rank(), " of ", comm.size(), " was fine)"));
}

absl::Status CheckAdopted(const ShardedModel& m, const FlatAdamW& opt, const std::string& dir) {
  if (opt.flat_data().data_ptr() == m.shard_data().data_ptr() &&
      opt.exp_avg().numel() == m.shard_data().numel()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat(dir, ": the optimizer does not own this model's shard buffers"));
}

// ---- Sharded state: saving.

absl::Status WriteRankFile(FileSystem& fs, const std::string& dir, ShardedModel& m,
                           const FlatAdamW& opt) {
  const int rank = m.comm().rank(), size = m.comm().size();
  const torch::Tensor* sources[] = {&m.shard_data(), &opt.exp_avg(), &opt.exp_avg_sq()};
  std::vector<models::SafetensorSpec> specs;
  for (const ShardUnit& unit : m.units()) {
    for (const char* kind : kKinds) {
      specs.push_back({absl::StrCat(unit.name, "/", kind), torch::kFloat32, {unit.padded / size}});
    }
  }
  const std::map<std::string, std::string> meta = {{"format", kFormat},
                                                   {"rank", std::to_string(rank)},
                                                   {"world_size", std::to_string(size)},
                                                   {"steps", std::to_string(opt.steps())}};
  ASSIGN_OR_RETURN(auto writer, models::SafetensorsWriter::Create(dir + "/" + RankFile(rank, size),
                                                                  specs, meta, fs));
  for (size_t u = 0; u < m.units().size(); ++u) {
    const ShardUnit& unit = m.units()[u];
    for (int i = 0; i < 3; ++i) {
      RETURN_IF_ERROR(writer->Write(absl::StrCat(unit.name, "/", kKinds[i]), 0,
                                    sources[i]->narrow(0, m.shard_offset(u), unit.padded / size)));
    }
  }
  return writer->Finish();
}

nlohmann::json UnitsJson(const std::vector<ShardUnit>& units) {
  nlohmann::json out = nlohmann::json::array();
  for (const ShardUnit& unit : units) {
    nlohmann::json params = nlohmann::json::array();
    for (const ShardedParam& p : unit.params) {
      params.push_back(
          {{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}, {"numel", p.numel}});
    }
    out.push_back(
        {{"name", unit.name}, {"numel", unit.numel}, {"padded", unit.padded}, {"params", params}});
  }
  return out;
}

absl::Status WriteManifest(FileSystem& fs, const std::string& dir, ShardedModel& m, int64_t steps) {
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < m.comm().size(); ++r) files.push_back(RankFile(r, m.comm().size()));
  const nlohmann::json manifest = {
      {"format", kFormat},
      {"world_size", m.comm().size()},
      {"steps", steps},
      {"files", files},
      {"units", UnitsJson(m.units())},
      {"config_json", models::WriteHfConfig(m.module()->config(), "float32")}};
  return WriteFileAtomic(fs, dir + "/manifest.json", manifest.dump(2) + "\n");
}

// Creates the directory and removes an old manifest, so that the directory reads as
// incomplete until this save's manifest lands.
absl::Status PrepareDirectory(FileSystem& fs, const std::string& dir) {
  RETURN_IF_ERROR(fs.CreateDirectories(dir));
  const absl::Status s = fs.Remove(dir + "/manifest.json");
  if (!s.ok() && !absl::IsNotFound(s)) return s;
  return fs.SyncDirectory(dir);
}

// ---- Sharded state: loading.

struct Manifest {
  int world_size = 0;
  int64_t steps = 0;
  std::vector<std::string> files;
  std::vector<ShardUnit> units;
};

absl::StatusOr<Manifest> ParseManifest(const std::string& path, const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kFormat) {
    return absl::DataLossError(absl::StrCat(path, ": not a JSON object with format ", kFormat));
  }
  try {
    Manifest m;
    m.world_size = j.at("world_size").get<int>();
    m.steps = j.at("steps").get<int64_t>();
    m.files = j.at("files").get<std::vector<std::string>>();
    for (const auto& u : j.at("units")) {
      ShardUnit unit{u.at("name").get<std::string>(),
                     {},
                     u.at("numel").get<int64_t>(),
                     u.at("padded").get<int64_t>()};
      for (const auto& p : u.at("params")) {
        unit.params.push_back({p.at("name").get<std::string>(),
                               p.at("shape").get<std::vector<int64_t>>(),
                               p.at("offset").get<int64_t>(), p.at("numel").get<int64_t>()});
      }
      m.units.push_back(std::move(unit));
    }
    if (m.world_size < 1 || m.files.size() != static_cast<size_t>(m.world_size)) {
      return absl::DataLossError(absl::StrCat(path, ": world_size ", m.world_size, " with ",
                                              m.files.size(), " rank files"));
    }
    for (int r = 0; r < m.world_size; ++r) {
      if (m.files[r] != RankFile(r, m.world_size)) {  // never a path out of the directory
        return absl::DataLossError(absl::StrCat(path, ": files[", r, "] is '", m.files[r],
                                                "', expected ", RankFile(r, m.world_size)));
      }
    }
    return m;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": malformed: ", e.what()));
  }
}

absl::StatusOr<Manifest> ReadManifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  if (absl::IsNotFound(FileSystem::Default().Stat(path).status())) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no manifest.json: an incomplete checkpoint (a save did not finish) or none"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseManifest(path, text);
}

absl::Status CheckUnit(const ShardUnit& want, const ShardUnit& got, const std::string& where) {
  if (got.name != want.name || got.numel != want.numel || got.params.size() != want.params.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": unit '", got.name, "' (", got.numel, " values, ", got.params.size(),
                     " parameters) where the model has '", want.name, "' (", want.numel,
                     " values, ", want.params.size(), " parameters)"));
  }
  for (size_t i = 0; i < want.params.size(); ++i) {
    const ShardedParam &a = want.params[i], &b = got.params[i];
    if (a.name != b.name || a.shape != b.shape || a.offset != b.offset || a.numel != b.numel) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": unit '", want.name, "' parameter ", i, " is '", b.name, "' ",
                       c10::str(c10::IntArrayRef(b.shape)), " at ", b.offset, "; the model has '",
                       a.name, "' ", c10::str(c10::IntArrayRef(a.shape)), " at ", a.offset));
    }
  }
  return absl::OkStatus();
}

// "embed, layer 0 .. layer 2, head"
std::string UnitNames(const std::vector<ShardUnit>& units) {
  std::string out;
  for (size_t i = 0; i < units.size(); ++i) {
    const bool inner_layer = i > 0 && i + 1 < units.size() &&
                             absl::StartsWith(units[i].name, "layer ") &&
                             absl::StartsWith(units[i - 1].name, "layer ") &&
                             absl::StartsWith(units[i + 1].name, "layer ");
    if (inner_layer) {
      if (!absl::EndsWith(out, " ..")) absl::StrAppend(&out, " ..");
      continue;
    }
    absl::StrAppend(&out,
                    out.empty() || absl::EndsWith(out, " ..") ? (out.empty() ? "" : " ") : ", ",
                    units[i].name);
  }
  return out;
}

absl::Status CheckUnits(const Manifest& man, const std::vector<ShardUnit>& units,
                        const std::string& dir) {
  const std::string where = dir + "/manifest.json";
  if (man.units.size() != units.size()) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": ", man.units.size(), " units (",
                                                      UnitNames(man.units), "); the model has ",
                                                      units.size(), " (", UnitNames(units), ")"));
  }
  for (size_t u = 0; u < units.size(); ++u) {
    RETURN_IF_ERROR(CheckUnit(units[u], man.units[u], where));
    const int64_t padded = man.units[u].padded;
    if (padded < man.units[u].numel || padded % man.world_size != 0) {
      return absl::DataLossError(absl::StrCat(where, ": unit '", units[u].name, "' padded ", padded,
                                              " does not fit ", man.world_size, " ranks"));
    }
  }
  return absl::OkStatus();
}

// The old rank files, opened when first needed.
class OldRankFiles {
 public:
  OldRankFiles(std::string dir, const Manifest& man) : dir_(std::move(dir)), man_(man) {}

  absl::StatusOr<const models::SafetensorsFile*> Get(int rank) {
    auto& slot = open_[rank];
    if (slot == nullptr) {
      ASSIGN_OR_RETURN(slot, models::SafetensorsFile::Open(dir_ + "/" + man_.files[rank]));
      const auto& meta = slot->metadata();
      auto field = [&](const char* key) { return meta.count(key) ? meta.at(key) : "?"; };
      if (field("rank") != std::to_string(rank) ||
          field("world_size") != std::to_string(man_.world_size)) {
        return absl::DataLossError(absl::StrCat(slot->path(), ": holds rank ", field("rank"),
                                                " of ", field("world_size"), ", manifest expects ",
                                                rank, " of ", man_.world_size));
      }
    }
    return slot.get();
  }

 private:
  std::string dir_;
  const Manifest& man_;
  std::map<int, std::unique_ptr<models::SafetensorsFile>> open_;
};

// dest: this rank's new shard of unit `old` ([first, first + dest.numel()) of its flat
// layout); copied from the old ranks' files where their ranges overlap it, zero elsewhere.
absl::Status CopyOverlap(OldRankFiles& files, const Manifest& man, const ShardUnit& old,
                         const char* kind, int64_t first, torch::Tensor dest,
                         ShardReadStats* stats) {
  dest.zero_();
  const int64_t k_old = old.padded / man.world_size;
  const int64_t end = std::min(first + dest.numel(), old.numel);
  const std::string name = absl::StrCat(old.name, "/", kind);
  for (int q = 0; q < man.world_size; ++q) {
    const int64_t lo = std::max(first, q * k_old), hi = std::min(end, (q + 1) * k_old);
    if (lo >= hi) continue;
    ASSIGN_OR_RETURN(const models::SafetensorsFile* f, files.Get(q));
    ASSIGN_OR_RETURN(torch::Tensor part, f->ReadRange(name, lo - q * k_old, hi - lo));
    dest.narrow(0, lo - first, hi - lo).copy_(part);
    if (stats != nullptr) stats->bytes_read += part.numel() * part.element_size();
  }
  return absl::OkStatus();
}

absl::Status LoadMyShards(const std::string& dir, ShardedModel& m, FlatAdamW& opt,
                          ShardReadStats* stats) {
  ASSIGN_OR_RETURN(Manifest man, ReadManifest(dir));
  RETURN_IF_ERROR(CheckUnits(man, m.units(), dir));
  RETURN_IF_ERROR(CheckAdopted(m, opt, dir));
  torch::NoGradGuard ng;
  OldRankFiles files(dir, man);
  const torch::Tensor* dests[] = {&m.shard_data(), &opt.exp_avg(), &opt.exp_avg_sq()};
  const int64_t n = m.comm().size(), rank = m.comm().rank();
  for (size_t u = 0; u < m.units().size(); ++u) {
    const int64_t k = m.units()[u].padded / n;
    for (int i = 0; i < 3; ++i) {
      RETURN_IF_ERROR(CopyOverlap(files, man, man.units[u], kKinds[i], rank * k,
                                  dests[i]->narrow(0, m.shard_offset(u), k), stats));
    }
  }
  opt.set_steps(man.steps);
  return absl::OkStatus();
}

// ---- Hugging Face checkpoints.

std::vector<models::SafetensorSpec> HfSpecs(const std::vector<ShardUnit>& units,
                                            torch::Dtype dtype) {
  std::vector<models::SafetensorSpec> specs;
  for (const ShardUnit& unit : units) {
    for (const ShardedParam& p : unit.params) specs.push_back({p.name, dtype, p.shape});
  }
  return specs;
}

// Rank 0's part: the writer is created before the gather and fed by it.
absl::StatusOr<std::unique_ptr<models::SafetensorsWriter>> StartHfWrite(const std::string& dir,
                                                                        ShardedModel& m,
                                                                        torch::Dtype dtype) {
  RETURN_IF_ERROR(FileSystem::Default().CreateDirectories(dir));
  RETURN_IF_ERROR(models::RemoveHfWeights(dir));
  return models::SafetensorsWriter::Create(dir + "/model.safetensors", HfSpecs(m.units(), dtype),
                                           {{"format", "pt"}});
}

absl::Status CheckHfTensor(const models::HfTensorFiles& files, const ShardedParam& p,
                           const std::string& dir) {
  const models::SafetensorsFile* file = files.Locate(p.name);
  if (file == nullptr || !file->contains(p.name)) {
    return absl::NotFoundError(absl::StrCat(dir, ": tensor '", p.name, "' missing from ",
                                            file ? file->path() : "the weight map"));
  }
  ASSIGN_OR_RETURN(models::SafetensorInfo info, file->Info(p.name));
  ASSIGN_OR_RETURN(torch::Dtype dtype, models::SafetensorDtype(info.dtype));
  if (info.shape != p.shape || !c10::isFloatingType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file->path(), ": tensor '", p.name, "' is ", info.dtype, " ",
                     c10::str(c10::IntArrayRef(info.shape)), "; the model has float ",
                     c10::str(c10::IntArrayRef(p.shape))));
  }
  return absl::OkStatus();
}

absl::Status LoadMyHfShards(const std::string& dir, ShardedModel& m, ShardReadStats* stats,
                            const SetupProgress& progress, const std::string& what) {
  ASSIGN_OR_RETURN(models::TransformerConfig config, models::LoadHfConfig(dir));
  const int64_t layers = m.module()->config().num_hidden_layers;
  if (config.num_hidden_layers != layers) {
    return absl::FailedPreconditionError(absl::StrCat(dir, "/config.json: num_hidden_layers ",
                                                      config.num_hidden_layers, "; the model has ",
                                                      layers));
  }
  ASSIGN_OR_RETURN(models::HfTensorFiles files, models::OpenHfTensors(dir));
  // A value head the checkpoint lacks starts at zero: a critic made from a policy checkpoint
  // predicts V = 0 at first, so its first advantages are the plain returns, not noise.
  auto absent_head = [&](const ShardedParam& p) {
    const models::SafetensorsFile* f = files.Locate(p.name);
    return p.name.rfind("value_head.", 0) == 0 && (f == nullptr || !f->contains(p.name));
  };
  for (const ShardUnit& unit : m.units()) {
    for (const ShardedParam& p : unit.params) {
      if (!absent_head(p)) RETURN_IF_ERROR(CheckHfTensor(files, p, dir));
    }
  }
  torch::NoGradGuard ng;
  const int64_t n = m.comm().size(), rank = m.comm().rank();
  int64_t mine = 0, done = 0;
  for (size_t u = 0; u < m.units().size(); ++u) mine += m.units()[u].padded / n;
  int percent = -1;
  ReportPercent(progress, what, 0, mine, &percent);
  for (size_t u = 0; u < m.units().size(); ++u) {
    const int64_t k = m.units()[u].padded / n, first = rank * k;
    torch::Tensor dest = m.shard_data().narrow(0, m.shard_offset(u), k);
    dest.zero_();
    for (const ShardedParam& p : m.units()[u].params) {
      const int64_t lo = std::max(first, p.offset), hi = std::min(first + k, p.offset + p.numel);
      if (lo >= hi || absent_head(p)) continue;
      ASSIGN_OR_RETURN(torch::Tensor part,
                       files.Locate(p.name)->ReadRange(p.name, lo - p.offset, hi - lo));
      dest.narrow(0, lo - first, hi - lo).copy_(part);
      if (stats != nullptr) stats->bytes_read += part.numel() * part.element_size();
      done += hi - lo;
      ReportPercent(progress, what, done, mine, &percent);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveShardedState(const std::string& dir, ShardedModel& m, const FlatAdamW& opt,
                              FileSystem& fs) {
  dist::Communicator& comm = m.comm();
  const std::string what = absl::StrCat("saving sharded checkpoint ", dir);
  RETURN_IF_ERROR(
      Agree(comm, comm.rank() == 0 ? PrepareDirectory(fs, dir) : absl::OkStatus(), what));
  absl::Status mine = CheckAdopted(m, opt, dir);
  if (mine.ok()) mine = CallCatching([&] { return WriteRankFile(fs, dir, m, opt); });
  RETURN_IF_ERROR(Agree(comm, mine, what));
  return Agree(comm, comm.rank() == 0 ? WriteManifest(fs, dir, m, opt.steps()) : absl::OkStatus(),
               what);
}

absl::Status LoadShardedState(const std::string& dir, ShardedModel& m, FlatAdamW& opt,
                              ShardReadStats* stats) {
  const absl::Status mine = CallCatching([&] { return LoadMyShards(dir, m, opt, stats); });
  return Agree(m.comm(), mine, absl::StrCat("loading sharded checkpoint ", dir));
}

absl::Status SaveHfConsolidated(const std::string& dir, ShardedModel& m, torch::Dtype dtype) {
  const bool writes = m.comm().rank() == 0;
  std::unique_ptr<models::SafetensorsWriter> writer;
  absl::Status mine = dtype == torch::kFloat32 || dtype == torch::kBFloat16
                          ? absl::OkStatus()
                          : absl::InvalidArgumentError("checkpoints are float32 or bfloat16");
  if (writes && mine.ok()) {
    auto w = StartHfWrite(dir, m, dtype);
    if (w.ok()) writer = std::move(*w);
    mine = w.status();
  }
  // A failed write must not stop the gather: the other ranks are in it.
  RETURN_IF_ERROR(m.GatherUnits([&](const ShardUnit& unit, const torch::Tensor& flat) {
    for (const ShardedParam& p : unit.params) {
      if (writer != nullptr && mine.ok()) {
        mine = writer->Write(p.name, 0, flat.narrow(0, p.offset, p.numel).to(dtype));
      }
    }
    return absl::OkStatus();
  }));
  if (writes && mine.ok()) mine = writer->Finish();
  if (writes && mine.ok()) {
    mine =
        WriteFileAtomic(dir + "/config.json",
                        models::WriteHfConfig(m.module()->config(),
                                              dtype == torch::kBFloat16 ? "bfloat16" : "float32"));
  }
  return Agree(m.comm(), mine, absl::StrCat("saving Hugging Face checkpoint ", dir));
}

absl::Status LoadHfShards(const std::string& model_dir, ShardedModel& m, ShardReadStats* stats,
                          const SetupProgress& progress, const std::string& what) {
  const absl::Status mine =
      CallCatching([&] { return LoadMyHfShards(model_dir, m, stats, progress, what); });
  return Agree(m.comm(), mine, absl::StrCat("loading Hugging Face checkpoint ", model_dir));
}

}  // namespace rlforge
