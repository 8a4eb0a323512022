#include "trainer/fast_ppo_grad.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/fast_math.h"

// Fortran BLAS (libblas.so.3: OpenBLAS through Debian's alternatives, the same
// library libtorch calls).
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace rlforge {

namespace {

// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] + beta C; ta: A holds A^T ([K,M]),
// tb: B holds B^T ([N,K]). Column-major BLAS sees row-major X as X^T, so it
// computes C^T = op(B)^T op(A)^T.
void Gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
          float beta, float* C) {
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int lda = static_cast<int>(tb ? K : N), ldb = static_cast<int>(ta ? M : K);
  const int ldc = static_cast<int>(N);
  const char opa = tb ? 'T' : 'N', opb = ta ? 'T' : 'N';
  const float one = 1.0f;
  sgemm_(&opa, &opb, &m, &n, &k, &one, B, &lda, A, &ldb, &beta, C, &ldc);
}

// Gradient shares of torch::max(a, b) (maximum): the larger side takes it
// all, a tie splits it in half.
inline void MaxShares(double a, double b, double* wa, double* wb) {
  if (a > b) {
    *wa = 1, *wb = 0;
  } else if (b > a) {
    *wa = 0, *wb = 1;
  } else {
    *wa = 0.5, *wb = 0.5;
  }
}

}  // namespace

absl::StatusOr<FastPpoGrad> FastPpoGrad::Create(ActorCritic& model) {
  const ActorCriticOptions& o = model->options();
  FastPpoGrad f;
  f.relu_ = o.activation == Activation::kRelu;
  f.discrete_ = o.discrete;
  f.obs_size_ = o.obs_size;
  f.action_size_ = o.action_size;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : model->named_parameters(/*recurse=*/true)) {
    params.emplace_back(p.key(), p.value());
  }
  auto read = [&](const std::string& prefix, Net* net) -> absl::Status {
    std::vector<torch::Tensor> ws, bs;
    for (auto& [name, t] : params) {
      if (name.rfind(prefix, 0) != 0) continue;
      if (!t.grad().defined() || t.scalar_type() != torch::kFloat32 || !t.is_contiguous()) {
        return absl::FailedPreconditionError(
            absl::StrCat(name, ": needs a contiguous float32 parameter with a gradient buffer"));
      }
      if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0) {
        ws.push_back(t);
      } else {
        bs.push_back(t);
      }
    }
    if (ws.empty() || ws.size() != bs.size()) {
      return absl::FailedPreconditionError(absl::StrCat(prefix, ": expected weight/bias pairs"));
    }
    int64_t width = o.obs_size;
    for (size_t i = 0; i < ws.size(); ++i) {
      Layer l;
      l.out = ws[i].size(0);
      l.in = ws[i].size(1);
      if (l.in != width || bs[i].numel() != l.out) {
        return absl::FailedPreconditionError(
            absl::StrCat(prefix, " layer ", i, ": shapes do not chain"));
      }
      l.w = ws[i].data_ptr<float>();
      l.b = bs[i].data_ptr<float>();
      l.dw = ws[i].mutable_grad().data_ptr<float>();
      l.db = bs[i].mutable_grad().data_ptr<float>();
      net->layers.push_back(l);
      width = l.out;
    }
    net->h.resize(net->layers.size() + 1);
    return absl::OkStatus();
  };
  if (absl::Status s = read("actor.", &f.actor_); !s.ok()) return s;
  if (absl::Status s = read("critic.", &f.critic_); !s.ok()) return s;
  if (f.actor_.layers.back().out != o.action_size || f.critic_.layers.back().out != 1) {
    return absl::FailedPreconditionError("actor/critic heads do not match the action space");
  }
  if (!o.discrete) {
    torch::Tensor ls = model->log_std();
    if (!ls.grad().defined()) {
      return absl::FailedPreconditionError("log_std has no gradient buffer");
    }
    f.log_std_ = ls.data_ptr<float>();
    f.dlog_std_ = ls.mutable_grad().data_ptr<float>();
  }
  return f;
}

const float* FastPpoGrad::Forward(Net& net, const float* x, int64_t batch) {
  const float* in = x;
  const size_t last = net.layers.size() - 1;
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const Layer& L = net.layers[l];
    std::vector<float>& y = net.h[l + 1];
    y.resize(static_cast<size_t>(batch * L.out));
    for (int64_t i = 0; i < batch; ++i) std::memcpy(&y[i * L.out], L.b, L.out * sizeof(float));
    Gemm(false, true, batch, L.out, L.in, in, L.w, 1.0f, y.data());
    if (l != last) {
      if (relu_) {
        for (float& v : y) v = v > 0 ? v : 0;
      } else {
        // Not std::tanh: scalar, ~20 ns a value, more than all the rest here.
        TanhInPlace(y.data(), static_cast<int64_t>(y.size()));
      }
    }
    in = y.data();
  }
  return in;
}

void FastPpoGrad::Backward(Net& net, const float* x, int64_t batch, const float* dout) {
  const float* d = dout;  // gradient w.r.t. layer l's output (pre-activation)
  for (size_t l = net.layers.size(); l-- > 0;) {
    const Layer& L = net.layers[l];
    const float* in = l == 0 ? x : net.h[l].data();
    // dW = d^T in, db = column sums of d.
    Gemm(true, false, L.out, L.in, batch, d, in, 0.0f, L.dw);
    std::fill(L.db, L.db + L.out, 0.0f);
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t j = 0; j < L.out; ++j) L.db[j] += d[i * L.out + j];
    }
    if (l == 0) break;
    // d(input) = d W, then back through the previous layer's activation; into
    // whichever scratch buffer d does not point at.
    std::vector<float>& next = d == net.dh.data() ? net.dpre : net.dh;
    next.resize(static_cast<size_t>(batch * L.in));
    Gemm(false, false, batch, L.in, L.out, d, L.w, 0.0f, next.data());
    const std::vector<float>& h = net.h[l];
    for (size_t k = 0; k < next.size(); ++k) {
      next[k] = relu_ ? (h[k] > 0 ? next[k] : 0.0f) : next[k] * (1.0f - h[k] * h[k]);
    }
    d = next.data();
  }
}

namespace {

// One sample's action head: the taken action's log-prob and the distribution's entropy (in
// float as torch computes them), then d/dz of (dlogp * log-prob + dent * entropy).
class CategoricalHead {
 public:
  explicit CategoricalHead(int64_t actions) : A_(actions), logp_(actions), p_(actions) {}

  float Logp(const float* z, int64_t a, float* entropy) {
    float mx = *std::max_element(z, z + A_);
    float sum = 0;
    for (int64_t j = 0; j < A_; ++j) sum += std::exp(z[j] - mx);
    float lse = mx + std::log(sum);
    *entropy = 0;
    for (int64_t j = 0; j < A_; ++j) {
      logp_[j] = z[j] - lse;
      p_[j] = std::exp(static_cast<float>(logp_[j]));
      *entropy -= static_cast<float>(p_[j] * logp_[j]);
    }
    return static_cast<float>(logp_[a]);
  }

  void Grad(int64_t a, double dlogp, double dent, float entropy, float* dz) const {
    for (int64_t j = 0; j < A_; ++j) {
      double g = dlogp * ((j == a ? 1.0 : 0.0) - p_[j]);
      g += dent * (-p_[j] * (logp_[j] + entropy));  // dH/dz_j = -p_j (log p_j + H)
      dz[j] = static_cast<float>(g);
    }
  }

 private:
  int64_t A_;
  std::vector<double> logp_, p_;
};

// A diagonal Gaussian of mean z and a state-independent log_std: as CategoricalHead, plus
// d/dlog_std summed over the batch into dls.
class GaussianHead {
 public:
  GaussianHead(int64_t actions, const float* log_std) : A_(actions), log_std_(log_std) {}

  float Logp(const float* z, const float* x, float* entropy) const {
    float logp = 0;
    *entropy = 0;
    for (int64_t k = 0; k < A_; ++k) {
      float var = std::exp(2 * log_std_[k]);
      float diff = x[k] - z[k];
      logp +=
          -diff * diff / (2 * var) - log_std_[k] - 0.5f * std::log(2 * static_cast<float>(M_PI));
      *entropy += 0.5f + 0.5f * std::log(2 * static_cast<float>(M_PI)) + log_std_[k];
    }
    return logp;
  }

  void Grad(const float* z, const float* x, double dlogp, double dent, float* dz,
            std::vector<double>& dls) const {
    for (int64_t k = 0; k < A_; ++k) {
      double var = std::exp(2.0 * log_std_[k]);
      double diff = static_cast<double>(x[k]) - z[k];
      dz[k] = static_cast<float>(dlogp * diff / var);
      dls[k] += dlogp * (diff * diff / var - 1.0) + dent;
    }
  }

 private:
  int64_t A_;
  const float* log_std_;
};

// Clipped surrogate of one sample, loss_i = max(-adv r, -adv clamp(r, 1 - clip, 1 + clip)):
// its terms into r (sums), and d(loss / B)/d new_logp.
double SurrogateGrad(const PpoGradInputs& in, int64_t i, float new_logp, double inv_b,
                     PpoGradResult& r) {
  const double lo = 1.0 - in.clip, hi = 1.0 + in.clip;
  const double adv = in.advantages[i];
  const double log_ratio = static_cast<double>(new_logp) - in.old_logprobs[i];
  const double ratio = std::exp(static_cast<float>(log_ratio));
  const double clamped = std::clamp(ratio, lo, hi);
  const double unclipped = -adv * ratio, clipped = -adv * clamped;
  double wu, wc;
  MaxShares(unclipped, clipped, &wu, &wc);
  r.policy_loss += std::max(unclipped, clipped);
  r.approx_kl += (ratio - 1) - log_ratio;
  r.clipfrac += std::abs(ratio - 1.0) > in.clip ? 1 : 0;
  const double in_range = (ratio >= lo && ratio <= hi) ? 1 : 0;
  const double dratio = inv_b * (wu * -adv + wc * -adv * in_range);
  return dratio * ratio;
}

// Value loss of one sample, 0.5 (v - R)^2 or 0.5 max of it and the clipped one's: into r, and
// its derivative by v.
double ValueGrad(const PpoGradInputs& in, int64_t i, double v, PpoGradResult& r) {
  const double ret = in.returns[i];
  if (in.clip_value <= 0) {
    r.value_loss += 0.5 * (v - ret) * (v - ret);
    return v - ret;
  }
  const double old = in.old_values[i];
  const double delta = v - old;
  const double vc = old + std::clamp(delta, -in.clip_value, in.clip_value);
  const double u = (v - ret) * (v - ret), c = (vc - ret) * (vc - ret);
  double au, ac;
  MaxShares(u, c, &au, &ac);
  r.value_loss += 0.5 * std::max(u, c);
  const double inside = (delta >= -in.clip_value && delta <= in.clip_value) ? 1 : 0;
  return au * (v - ret) + ac * (vc - ret) * inside;
}

}  // namespace

PpoGradResult FastPpoGrad::LossAndGrad(const PpoGradInputs& in) {
  const int64_t B = in.batch, A = action_size_;
  const double inv_b = 1.0 / static_cast<double>(B);
  const float* head = Forward(actor_, in.obs, B);
  const float* value = Forward(critic_, in.obs, B);
  dhead_.assign(static_cast<size_t>(B * A), 0.0f);
  dvalue_.assign(static_cast<size_t>(B), 0.0f);
  PpoGradResult r;
  std::vector<double> dls(discrete_ ? 0 : A, 0.0);
  CategoricalHead categorical(discrete_ ? A : 0);
  const GaussianHead gaussian(A, log_std_);
  const double dent = -in.ent_coef * inv_b;  // loss has -ent_coef * mean(entropy)
  for (int64_t i = 0; i < B; ++i) {
    const float* z = head + i * A;
    float* dz = dhead_.data() + i * A;
    const float* x = discrete_ ? nullptr : in.continuous + i * A;
    float entropy = 0;
    const float new_logp =
        discrete_ ? categorical.Logp(z, in.discrete[i], &entropy) : gaussian.Logp(z, x, &entropy);
    const double dlogp = SurrogateGrad(in, i, new_logp, inv_b, r);
    r.entropy += entropy;
    if (discrete_) {
      categorical.Grad(in.discrete[i], dlogp, dent, entropy, dz);
    } else {
      gaussian.Grad(z, x, dlogp, dent, dz, dls);
    }
    dvalue_[i] = static_cast<float>(in.vf_coef * inv_b * ValueGrad(in, i, value[i], r));
  }
  r.policy_loss *= inv_b;
  r.value_loss *= inv_b;
  r.entropy *= inv_b;
  r.approx_kl *= inv_b;
  r.clipfrac *= inv_b;
  Backward(actor_, in.obs, B, dhead_.data());
  Backward(critic_, in.obs, B, dvalue_.data());
  if (!discrete_) {
    for (int64_t k = 0; k < A; ++k) dlog_std_[k] = static_cast<float>(dls[k]);
  }
  return r;
}

}  // namespace rlforge
