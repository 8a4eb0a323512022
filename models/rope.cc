#include "models/rope.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace rlforge::models {

namespace {

constexpr double kPi = 3.14159265358979323846;

// theta ^ (2i / dim) for i < dim / 2, fp32 as transformers (integer exponents made float).
torch::Tensor PositionFrequencies(double theta, int64_t dim) {
  auto exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / dim;
  return torch::pow(torch::tensor(theta, torch::kFloat32), exponents);
}

// YaRN's attention factor for a context stretched by `scale` (its paper, eq. 21).
double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// The dimension (of `dim`) whose wavelength fits `rotations` times in `context` positions.
double YarnCorrectionDim(double rotations, int64_t dim, double theta, int64_t context) {
  return dim * std::log(context / (rotations * 2 * kPi)) / (2 * std::log(theta));
}

RopeFrequencies Yarn(const RopeScaling& s, double theta, int64_t dim) {
  auto pos_freqs = PositionFrequencies(theta, dim);
  auto extrapolation = 1.0 / pos_freqs;
  auto interpolation = 1.0 / (s.factor * pos_freqs);
  // transformers reads these with `or`: 0 counts as unset.
  const double beta_fast = s.beta_fast.value_or(0) != 0 ? *s.beta_fast : 32;
  const double beta_slow = s.beta_slow.value_or(0) != 0 ? *s.beta_slow : 1;
  const int64_t context = s.original_max_position_embeddings;
  double low = YarnCorrectionDim(beta_fast, dim, theta, context);
  double high = YarnCorrectionDim(beta_slow, dim, theta, context);
  if (s.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // no division by zero
  auto ramp = ((torch::arange(dim / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  auto extrapolation_share = 1 - ramp;
  RopeFrequencies out;
  out.inv_freq = interpolation * (1 - extrapolation_share) + extrapolation * extrapolation_share;
  if (s.attention_factor) {
    out.attention_factor = *s.attention_factor;
  } else if (s.mscale.value_or(0) != 0 && s.mscale_all_dim.value_or(0) != 0) {
    out.attention_factor =
        YarnMscale(s.factor, *s.mscale) / YarnMscale(s.factor, *s.mscale_all_dim);
  } else {
    out.attention_factor = YarnMscale(s.factor, 1);
  }
  return out;
}

torch::Tensor Llama3(const RopeScaling& s, double theta, int64_t dim) {
  auto inv_freq = 1.0 / PositionFrequencies(theta, dim);
  const double context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = context / s.low_freq_factor;
  const double high_freq_wavelen = context / s.high_freq_factor;
  auto wavelen = 2 * kPi / inv_freq;
  // Long wavelengths are divided by factor, short ones kept, the band between blended.
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  auto smooth = (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

absl::Status RopeError(const std::string& origin, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", key, ": ", what));
}

}  // namespace

const char* RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

absl::Status ValidateRopeScaling(const RopeScaling& s, const std::string& origin,
                                 const std::string& key) {
  if (s.type == RopeType::kDefault) return absl::OkStatus();
  if (!(s.factor > 0) || !std::isfinite(s.factor)) {
    return RopeError(origin, key + ".factor",
                     absl::StrCat("expected a positive number, got ", s.factor));
  }
  const bool needs_context = s.type == RopeType::kYarn || s.type == RopeType::kLlama3;
  if (needs_context && s.original_max_position_embeddings <= 0) {
    return RopeError(
        origin, key + ".original_max_position_embeddings",
        absl::StrCat("expected a positive integer, got ", s.original_max_position_embeddings));
  }
  if (s.type == RopeType::kLlama3 &&
      !(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor)) {
    return RopeError(origin, key + ".high_freq_factor",
                     absl::StrCat("expected high_freq_factor > low_freq_factor > 0, got ",
                                  s.high_freq_factor, " and ", s.low_freq_factor));
  }
  if (s.type == RopeType::kYarn && s.attention_factor && !(*s.attention_factor > 0)) {
    return RopeError(origin, key + ".attention_factor",
                     absl::StrCat("expected a positive number, got ", *s.attention_factor));
  }
  return absl::OkStatus();
}

RopeFrequencies RopeInverseFrequencies(const RopeScaling& s, double theta, int64_t dim) {
  switch (s.type) {
    case RopeType::kDefault:
    case RopeType::kDynamic:
      return {1.0 / PositionFrequencies(theta, dim), 1.0};
    case RopeType::kLinear:
      return {1.0 / PositionFrequencies(theta, dim) / s.factor, 1.0};
    case RopeType::kYarn:
      return Yarn(s, theta, dim);
    case RopeType::kLlama3:
      return {Llama3(s, theta, dim), 1.0};
  }
  return {1.0 / PositionFrequencies(theta, dim), 1.0};
}

torch::Tensor DynamicNtkInverseFrequencies(const RopeScaling& s, double theta, int64_t dim,
                                           int64_t max_position_embeddings,
                                           const torch::Tensor& lengths) {
  const double max_pos = static_cast<double>(max_position_embeddings);
  auto length = lengths.to(torch::kFloat64).clamp_min(max_pos).unsqueeze(-1);
  auto base = theta * torch::pow(s.factor * length / max_pos - (s.factor - 1),
                                 static_cast<double>(dim) / static_cast<double>(dim - 2));
  auto exponents = torch::arange(0, dim, 2, torch::dtype(torch::kInt64).device(lengths.device()))
                       .to(torch::kFloat32) /
                   dim;
  return 1.0 / torch::pow(base.to(torch::kFloat32), exponents);
}

}  // namespace rlforge::models
