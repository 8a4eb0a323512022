#include "controller/echo_algorithm.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status.h"

namespace rlforge {

std::vector<RoleRequirement> EchoAlgorithm::Roles() const {
  return {{kEchoRole, static_cast<int>(options_.workers), options_.external}};
}

namespace {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

absl::Status Verify(const WorkOutcome& o, const std::vector<std::string>& sent) {
  if (o.tensors.size() != sent.size()) {
    return absl::DataLossError(absl::StrCat(o.actor_id, " returned ", o.tensors.size(),
                                            " tensors for ", sent.size(), " sent"));
  }
  if (o.result.echo().checksums_size() != static_cast<int>(sent.size())) {
    return absl::DataLossError(
        absl::StrCat(o.actor_id, " returned ", o.result.echo().checksums_size(), " checksums"));
  }
  for (size_t k = 0; k < sent.size(); ++k) {
    const TensorFrame& t = o.tensors[k];
    const std::string& want = sent[k];
    uint64_t expected = Fnv1a64(want.data(), want.size());
    if (t.nbytes() != want.size() || std::memcmp(t.data(), want.data(), want.size()) != 0) {
      size_t at = 0;
      const auto* p = static_cast<const char*>(t.data());
      while (at < std::min(t.nbytes(), want.size()) && p[at] == want[at]) ++at;
      return absl::DataLossError(absl::StrCat(o.actor_id, " returned different bytes for tensor ",
                                              t.name(), " of work ", o.result.work_id(),
                                              " (first difference at byte ", at, ")"));
    }
    if (o.result.echo().checksums(static_cast<int>(k)) != expected) {
      return absl::DataLossError(absl::StrCat(o.actor_id, " received corrupted bytes for tensor ",
                                              t.name(), " of work ", o.result.work_id(),
                                              " (its checksum differs from the sender's)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EchoAlgorithm::Run(JobContext& ctx) {
  Controller& c = ctx.controller();
  std::vector<std::string> actors = c.actors().IdsOfRole(kEchoRole);
  std::mt19937_64 rng(static_cast<uint64_t>(seed_));
  const Clock* clock = RealClock::Get();
  ctx.SetTotalIterations(iterations_);
  for (int64_t step = 1; step <= iterations_; ++step) {
    int64_t t0 = clock->NowMicros();
    std::map<uint64_t, std::vector<std::string>> sent;
    std::vector<uint64_t> ids;
    uint64_t checksum = 0;
    for (int64_t r = 0; r < options_.requests_per_iteration; ++r) {
      for (const std::string& id : actors) {
        proto::WorkRequest req;
        req.mutable_echo()->set_work_micros(static_cast<uint32_t>(options_.work_micros));
        std::vector<TensorFrame> tensors;
        std::vector<std::string> copies;
        for (int64_t k = 0; k < options_.tensors; ++k) {
          std::string bytes(static_cast<size_t>(options_.payload_bytes), '\0');
          for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
            uint64_t w = rng();
            std::memcpy(&bytes[i], &w, 8);
          }
          for (size_t i = bytes.size() & ~size_t{7}; i < bytes.size(); ++i)
            bytes[i] = static_cast<char>(rng());
          checksum ^= Fnv1a64(bytes.data(), bytes.size());
          tensors.push_back(TensorFrame::Copy(absl::StrCat("t", k), proto::U8,
                                              {options_.payload_bytes}, bytes.data()));
          copies.push_back(std::move(bytes));
        }
        ASSIGN_OR_RETURN(uint64_t wid, c.Submit(id, std::move(req), std::move(tensors)));
        ids.push_back(wid);
        sent[wid] = std::move(copies);
      }
    }
    ASSIGN_OR_RETURN(std::vector<WorkOutcome> outcomes, c.AwaitAll(ids));
    std::vector<double> rtts;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      RETURN_IF_ERROR(Verify(outcomes[i], sent[ids[i]]));
      rtts.push_back(outcomes[i].seconds * 1e3);
    }
    double seconds = static_cast<double>(clock->NowMicros() - t0) * 1e-6;
    double bytes = 2.0 * static_cast<double>(outcomes.size()) *
                   static_cast<double>(options_.payload_bytes * options_.tensors);
    IterationRecord rec;
    rec.step = step;
    rec.metrics["round_trips"] = static_cast<double>(outcomes.size());
    rec.metrics["bytes_verified"] = bytes / 2;
    // Seed-determined: equal across reruns with the same seed.
    rec.metrics["payload_checksum"] = static_cast<double>(checksum >> 11);
    rec.timings["echo_s"] = seconds;
    rec.timings["rtt_p50_ms"] = Percentile(rtts, 0.5);
    rec.timings["rtt_p99_ms"] = Percentile(rtts, 0.99);
    rec.timings["throughput_mb_s"] = seconds > 0 ? bytes / seconds / 1e6 : 0;
    RETURN_IF_ERROR(ctx.EndIteration(rec));
  }
  return absl::OkStatus();
}

}  // namespace rlforge
