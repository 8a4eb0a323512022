#include "proto/lm_groups.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace rlforge {

const TensorFrame* FindFrame(const std::vector<TensorFrame>& frames, const std::string& name) {
  for (const auto& f : frames) {
    if (f.name() == name) return &f;
  }
  return nullptr;
}

std::vector<TensorFrame> GroupsToFrames(const std::vector<LmGroup>& groups, bool with_samples) {
  std::vector<int64_t> ids, prompt_lengths, sample_lengths, versions, stopped;
  std::vector<int32_t> prompt_tokens, tokens;
  std::vector<float> logprobs;
  for (const auto& g : groups) {
    ids.push_back(g.request_id);
    prompt_lengths.push_back(static_cast<int64_t>(g.prompt.size()));
    prompt_tokens.insert(prompt_tokens.end(), g.prompt.begin(), g.prompt.end());
    if (!with_samples) continue;
    for (const auto& s : g.samples) {
      sample_lengths.push_back(static_cast<int64_t>(s.tokens.size()));
      tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
      logprobs.insert(logprobs.end(), s.logprobs.begin(), s.logprobs.end());
      versions.insert(versions.end(), s.versions.begin(), s.versions.end());
      stopped.push_back(s.stopped ? 1 : 0);
    }
  }
  std::vector<TensorFrame> out;
  out.push_back(TensorFrame::FromVector("request_ids", ids));
  out.push_back(TensorFrame::FromVector("prompt_lengths", prompt_lengths));
  out.push_back(TensorFrame::FromVector("prompt_tokens", prompt_tokens));
  if (with_samples) {
    out.push_back(TensorFrame::FromVector("sample_lengths", sample_lengths));
    out.push_back(TensorFrame::FromVector("tokens", tokens));
    out.push_back(TensorFrame::FromVector("logprobs", logprobs));
    out.push_back(TensorFrame::FromVector("versions", versions));
    out.push_back(TensorFrame::FromVector("stopped", stopped));
  }
  return out;
}

namespace {

template <typename T>
absl::StatusOr<std::vector<T>> Read(const std::vector<TensorFrame>& frames, const std::string& name,
                                    int64_t expected) {
  const TensorFrame* f = FindFrame(frames, name);
  if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat("batch has no tensor ", name));
  if (f->dtype() != DTypeOf<T>() || f->shape().size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch tensor ", name, " must be 1-d ", DTypeName(DTypeOf<T>())));
  }
  if (expected >= 0 && f->numel() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("batch tensor ", name, " has ", f->numel(),
                                                   " entries where ", expected, " were expected"));
  }
  return f->ToVector<T>();
}

int64_t Sum(const std::vector<int64_t>& v, const std::string& name, absl::Status& status) {
  int64_t s = 0;
  for (int64_t x : v) {
    if (x < 0) status = absl::InvalidArgumentError(absl::StrCat(name, " holds a negative length"));
    s += x;
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<LmGroup>> GroupsFromFrames(const std::vector<TensorFrame>& frames,
                                                      bool with_samples, int64_t n) {
  absl::Status status;
  ASSIGN_OR_RETURN(auto ids, Read<int64_t>(frames, "request_ids", -1));
  const int64_t g = static_cast<int64_t>(ids.size());
  ASSIGN_OR_RETURN(auto prompt_lengths, Read<int64_t>(frames, "prompt_lengths", g));
  ASSIGN_OR_RETURN(auto prompt_tokens,
                   Read<int32_t>(frames, "prompt_tokens", Sum(prompt_lengths, "prompt_lengths",
                                                              status)));
  if (!status.ok()) return status;
  std::vector<LmGroup> groups(g);
  size_t pt = 0;
  for (int64_t i = 0; i < g; ++i) {
    groups[i].request_id = ids[i];
    groups[i].prompt.assign(prompt_tokens.begin() + pt,
                            prompt_tokens.begin() + pt + prompt_lengths[i]);
    pt += prompt_lengths[i];
  }
  if (!with_samples) return groups;
  ASSIGN_OR_RETURN(auto lengths, Read<int64_t>(frames, "sample_lengths", g * n));
  const int64_t total = Sum(lengths, "sample_lengths", status);
  if (!status.ok()) return status;
  ASSIGN_OR_RETURN(auto tokens, Read<int32_t>(frames, "tokens", total));
  ASSIGN_OR_RETURN(auto logprobs, Read<float>(frames, "logprobs", total));
  ASSIGN_OR_RETURN(auto versions, Read<int64_t>(frames, "versions", total));
  ASSIGN_OR_RETURN(auto stopped, Read<int64_t>(frames, "stopped", g * n));
  size_t t = 0;
  for (int64_t i = 0; i < g; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = i * n + j, len = lengths[k];
      LmSample s;
      s.tokens.assign(tokens.begin() + t, tokens.begin() + t + len);
      s.logprobs.assign(logprobs.begin() + t, logprobs.begin() + t + len);
      s.versions.assign(versions.begin() + t, versions.begin() + t + len);
      s.stopped = stopped[k] != 0;
      t += len;
      groups[i].samples.push_back(std::move(s));
    }
  }
  return groups;
}

}  // namespace rlforge
