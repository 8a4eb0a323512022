// Every closed choice of the job file (a key whose value is one word of a fixed list) as an
// enum, with the one table of its words.
//
// YAML word -> SchemaBuilder::Enum (parsed once, at load; an unknown word is a config error
// naming file, line and key) -> the enum every module switches on -> ChoiceName for the
// resolved config, the generated reference and messages.
//
// Outside config/, no code compares a choice's word: tools/check_config_strings.py fails the
// build's tests if it does. weights.transport is the weight plane's own (weights/).
// Everything here is constexpr data; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rlforge {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };  // job.log_level
enum class Security { kAuto, kCurve, kNone };                  // controller.security
enum class LaunchBackend { kLocal, kSlurm, kKubernetes };      // launch.backend
enum class LrSchedule { kConstant, kLinear, kCosine };         // trainer.lr_schedule
enum class MixedPrecision { kNone, kBf16 };                    // trainer.mixed_precision
enum class SimBackend { kInprocess, kServer, kExternal };      // sim.backend
enum class SimTransport { kAuto, kShm, kIpc };                 // sim.transport
enum class SimPipeline { kAuto, kOn, kOff };                   // sim.pipeline: auto, true, false
enum class CpuAffinity { kAuto, kNone };                       // sim.cpu_affinity
enum class Activation { kTanh, kRelu };                        // policy.activation
enum class FloatDtype { kFloat32, kBfloat16 };                 // weights.dtype, model.dtype
enum class WeightApply { kInPlace, kStaged, kMapped };         // weights.apply
enum class ModelArchitecture { kLlama, kQwen2 };               // model.architecture
enum class DataSource { kArithmetic, kJsonl };                 // data.source
enum class ArithmeticStyle { kPlain, kQuestion };              // data.style
enum class DpoLossType {                                       // dpo.loss_type
  kSigmoid,  // -(1 - ls) log sigmoid(beta h) - ls log sigmoid(-beta h)  (Rafailov et al. 2023;
             // label smoothing ls is conservative DPO, Mitchell 2023)
  kIpo,      // (h - 1 / (2 beta))^2  (Azar et al. 2023)
};
enum class DpoRejected { kCarryless, kRandom };  // dpo.rejected
enum class KlEstimator { kK1, kK2, kK3 };        // lm_rl.kl_estimator
// lm_rl.off_policy: how tokens sampled by another policy are corrected (trainer/lm_losses.h).
enum class OffPolicyCorrection {
  kNone,         // clip around the rollout's logprobs; no weight (the synchronous default)
  kDecoupled,    // AReaL's decoupled PPO: pg * w, and weight 0 where w > cap
  kTruncatedIs,  // truncated IS: pg * min(w, cap)
  kMask,         // pg, and weight 0 where w is outside [1/cap, cap]
};               // A token of weight 0 stays in the aggregation's token count (AReaL's normaliser).
// lm_rl.loss_aggregation: how per-token losses become one number.
enum class LossAggregation {
  kTokenMean,           // sum(l * m) / sum(m): every token weighs the same (DAPO)
  kSeqMeanTokenSum,     // mean_i sum_t(l * m): long answers weigh more
  kSeqMeanTokenMean,    // mean_i (sum_t(l * m) / sum_t m): original GRPO
  kSeqMeanTokenSumNorm  // sum(l * m) / (B * norm_length): Dr.GRPO's constant normaliser
};
// reward.rewards[].kind: the verifier (docs/rewards.md).
enum class RewardKind {
  kExactAnswer,
  kNumeric,
  kMath,
  kRegexFormat,
  kFormat,
  kLengthPenalty,
  kPlugin,
  kPython,  // a function in the user's Python file (reward/python_reward.h)
  kCode,    // the response's program against the sample's tests, sandboxed (reward/code_reward.h)
};
// reward.rewards[].params.extract: how the answer is found in a response.
enum class AnswerExtract {
  kAuto,      // \boxed{X}, else "answer is X", else (exact) the whole text / (numeric) last number
  kAnswerIs,  // the text after the last "answer is" / "answer:" (case-insensitive)
  kBoxed,     // the content of the last \boxed{...} (nested braces allowed)
  kLastNumber,  // the last number in the text
  kFull,        // the whole response
};
// reward.rewards[].params.answer_form: what follows a format reward's reasoning block.
enum class AnswerForm {
  kText,   // any non-blank text
  kBoxed,  // a \boxed{...}
  kMath,   // an answer FindFinalAnswer finds and that parses as a number
};
enum class LengthUnit { kTokens, kChars };  // reward.rewards[].params.unit

// The words of enum E, in the order the docs list them; specialised below for each choice.
template <typename E>
struct ChoiceWords;

#define RLFORGE_CHOICE_WORDS(E, ...)                                   \
  template <>                                                          \
  struct ChoiceWords<E> {                                              \
    static constexpr std::pair<E, const char*> kWords[] = __VA_ARGS__; \
  }

RLFORGE_CHOICE_WORDS(LogLevel, {{LogLevel::kTrace, "trace"},
                                {LogLevel::kDebug, "debug"},
                                {LogLevel::kInfo, "info"},
                                {LogLevel::kWarn, "warn"},
                                {LogLevel::kError, "error"}});
RLFORGE_CHOICE_WORDS(Security, {{Security::kAuto, "auto"},
                                {Security::kCurve, "curve"},
                                {Security::kNone, "none"}});
RLFORGE_CHOICE_WORDS(LaunchBackend, {{LaunchBackend::kLocal, "local"},
                                     {LaunchBackend::kSlurm, "slurm"},
                                     {LaunchBackend::kKubernetes, "kubernetes"}});
RLFORGE_CHOICE_WORDS(LrSchedule, {{LrSchedule::kConstant, "constant"},
                                  {LrSchedule::kLinear, "linear"},
                                  {LrSchedule::kCosine, "cosine"}});
RLFORGE_CHOICE_WORDS(MixedPrecision,
                     {{MixedPrecision::kNone, "none"}, {MixedPrecision::kBf16, "bf16"}});
RLFORGE_CHOICE_WORDS(SimBackend, {{SimBackend::kInprocess, "inprocess"},
                                  {SimBackend::kServer, "server"},
                                  {SimBackend::kExternal, "external"}});
RLFORGE_CHOICE_WORDS(SimTransport, {{SimTransport::kAuto, "auto"},
                                    {SimTransport::kShm, "shm"},
                                    {SimTransport::kIpc, "ipc"}});
RLFORGE_CHOICE_WORDS(SimPipeline, {{SimPipeline::kAuto, "auto"},
                                   {SimPipeline::kOn, "true"},
                                   {SimPipeline::kOff, "false"}});
RLFORGE_CHOICE_WORDS(CpuAffinity, {{CpuAffinity::kAuto, "auto"}, {CpuAffinity::kNone, "none"}});
RLFORGE_CHOICE_WORDS(Activation, {{Activation::kTanh, "tanh"}, {Activation::kRelu, "relu"}});
RLFORGE_CHOICE_WORDS(FloatDtype,
                     {{FloatDtype::kFloat32, "float32"}, {FloatDtype::kBfloat16, "bfloat16"}});
RLFORGE_CHOICE_WORDS(WeightApply, {{WeightApply::kInPlace, "in_place"},
                                   {WeightApply::kStaged, "staged"},
                                   {WeightApply::kMapped, "mapped"}});
RLFORGE_CHOICE_WORDS(ModelArchitecture, {{ModelArchitecture::kLlama, "LlamaForCausalLM"},
                                         {ModelArchitecture::kQwen2, "Qwen2ForCausalLM"}});
RLFORGE_CHOICE_WORDS(DataSource,
                     {{DataSource::kArithmetic, "arithmetic"}, {DataSource::kJsonl, "jsonl"}});
RLFORGE_CHOICE_WORDS(ArithmeticStyle, {{ArithmeticStyle::kPlain, "plain"},
                                       {ArithmeticStyle::kQuestion, "question"}});
RLFORGE_CHOICE_WORDS(DpoLossType, {{DpoLossType::kSigmoid, "sigmoid"}, {DpoLossType::kIpo, "ipo"}});
RLFORGE_CHOICE_WORDS(DpoRejected,
                     {{DpoRejected::kCarryless, "carryless"}, {DpoRejected::kRandom, "random"}});
RLFORGE_CHOICE_WORDS(KlEstimator, {{KlEstimator::kK1, "k1"},
                                   {KlEstimator::kK2, "k2"},
                                   {KlEstimator::kK3, "k3"}});
RLFORGE_CHOICE_WORDS(OffPolicyCorrection, {{OffPolicyCorrection::kNone, "none"},
                                           {OffPolicyCorrection::kDecoupled, "decoupled"},
                                           {OffPolicyCorrection::kTruncatedIs, "tis"},
                                           {OffPolicyCorrection::kMask, "mask"}});
RLFORGE_CHOICE_WORDS(LossAggregation,
                     {{LossAggregation::kTokenMean, "token-mean"},
                      {LossAggregation::kSeqMeanTokenSum, "seq-mean-token-sum"},
                      {LossAggregation::kSeqMeanTokenMean, "seq-mean-token-mean"},
                      {LossAggregation::kSeqMeanTokenSumNorm, "seq-mean-token-sum-norm"}});
RLFORGE_CHOICE_WORDS(RewardKind, {{RewardKind::kExactAnswer, "exact_answer"},
                                  {RewardKind::kNumeric, "numeric"},
                                  {RewardKind::kMath, "math"},
                                  {RewardKind::kRegexFormat, "regex_format"},
                                  {RewardKind::kFormat, "format"},
                                  {RewardKind::kLengthPenalty, "length_penalty"},
                                  {RewardKind::kPlugin, "plugin"},
                                  {RewardKind::kPython, "python"},
                                  {RewardKind::kCode, "code"}});
RLFORGE_CHOICE_WORDS(AnswerExtract, {{AnswerExtract::kAuto, "auto"},
                                     {AnswerExtract::kAnswerIs, "answer_is"},
                                     {AnswerExtract::kBoxed, "boxed"},
                                     {AnswerExtract::kLastNumber, "last_number"},
                                     {AnswerExtract::kFull, "full"}});
RLFORGE_CHOICE_WORDS(AnswerForm, {{AnswerForm::kText, "text"},
                                  {AnswerForm::kBoxed, "boxed"},
                                  {AnswerForm::kMath, "math"}});
RLFORGE_CHOICE_WORDS(LengthUnit, {{LengthUnit::kTokens, "tokens"}, {LengthUnit::kChars, "chars"}});

#undef RLFORGE_CHOICE_WORDS

// The word of `v` (every enumerator has one: ChoicesTest checks each table).
template <typename E>
constexpr const char* ChoiceName(E v) {
  for (const auto& [e, word] : ChoiceWords<E>::kWords) {
    if (e == v) return word;
  }
  return "?";
}

// Every word of E, in table order.
template <typename E>
std::vector<std::string> ChoiceWordList() {
  std::vector<std::string> out;
  for (const auto& [e, word] : ChoiceWords<E>::kWords) out.emplace_back(word);
  return out;
}

// The enumerator whose word is `word`, or an error listing the words.
template <typename E>
absl::StatusOr<E> ParseChoice(std::string_view word) {
  for (const auto& [e, w] : ChoiceWords<E>::kWords) {
    if (std::string_view(w) == word) return e;
  }
  return absl::InvalidArgumentError(absl::StrCat("expected one of ",
                                                 absl::StrJoin(ChoiceWordList<E>(), ", "),
                                                 ", got '", std::string(word), "'"));
}

}  // namespace rlforge
