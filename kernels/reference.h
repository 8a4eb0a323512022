// CPU references of the CUDA kernels (kernels/cuda_kernels.h): the same arguments
// (kernels/kernel_args.h), host pointers, computed plainly (sums in double) and rounded to the
// dtype exactly where the kernel's contract says. The GPU tests compare each kernel with its
// reference; rollout/kernel_reference_test.cc checks the references against the engine's own
// CPU code and the transformers formulas the model uses. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_args.h"

namespace rlforge::kernels {

void ReferenceKvWrite(const KvWriteArgs& a);
void ReferencePagedAttention(const PagedAttentionArgs& a);
void ReferenceRmsNorm(const RmsNormArgs& a);
void ReferenceRope(const RopeArgs& a);
void ReferenceSiluMul(const SiluMulArgs& a);
void ReferenceLogprob(const LogprobArgs& a);
void ReferenceSample(const SampleArgs& a);

// The tokens a row may draw (SampleArgs' candidate rule), best logit first (ties by id), and
// each one's probability within them: softmax(logit / T) renormalised over the candidates.
struct Candidates {
  std::vector<int32_t> tokens;
  std::vector<double> probs;
};
Candidates SampleCandidates(const float* logits, int32_t vocab, float temperature, int32_t top_k,
                            float top_p);

// Pearson's chi-square of drawn tokens against the candidates' probabilities (how a sampler's
// draws are checked); infinite when a drawn token is not a candidate.
double CandidatesChiSquare(const std::vector<int32_t>& drawn, const Candidates& c);

// Element i of a dtype buffer, as a float; and storing a float rounded to the dtype.
float LoadElement(const void* p, int64_t i, DType d);
void StoreElement(void* p, int64_t i, DType d, float v);

}  // namespace rlforge::kernels
