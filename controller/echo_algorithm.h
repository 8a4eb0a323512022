// EchoAlgorithm: the transport self-test job (`job.algorithm: echo`).
//
// random tensors -> every echo actor -> same tensors + actor checksums ->
// byte-for-byte comparison -> round-trip latency and throughput per iteration
//
// Useful on its own to check that actors on other hosts can reach the
// controller, and at what bandwidth.
#pragma once

#include "controller/algorithm.h"

namespace rlforge {

class EchoAlgorithm final : public Algorithm {
 public:
  explicit EchoAlgorithm(const JobConfig& config)
      : options_(config.echo), seed_(config.job.seed), iterations_(config.job.iterations) {}
  std::vector<RoleRequirement> Roles() const override;
  absl::Status Run(JobContext& ctx) override;

 private:
  EchoOptions options_;
  int64_t seed_;
  int64_t iterations_;
};

}  // namespace rlforge
