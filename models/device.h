// The torch device a `device` key (trainer.device, engine.device; config/device.h) names for one
// trainer rank or engine, checked against the GPUs this process can see.
#pragma once

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"

namespace rlforge::models {

// cpu -> the CPU; cuda -> GPU (rank modulo the visible GPUs), so ranks packed on a host take one
// GPU each and a rank that sees one GPU (Slurm's --gpus-per-task) takes it; cuda:N -> GPU N.
// An error names the key, the value, the rank and what is missing.
absl::StatusOr<torch::Device> TorchDevice(const std::string& key, const std::string& value,
                                          int rank);

}  // namespace rlforge::models
