// The trainer actor for supervised fine-tuning of a language model.
//
// SftInit -> tokenizer + model (HF dir or from scratch) sharded over the trainer ranks +
//   AdamW on this rank's shard + data
// SftTrain(first, n) -> n optimiser steps over packed micro-batches (grad accumulation,
//   warm-up + decay schedule, clipping); each rank trains on its share of every
//   micro-batch's rows, the loss normalised by the global step's response tokens
//   -> loss per response token, lr, grad norm
// LmEvaluate -> model gathered on rank 0 -> greedy generation on held-out prompts ->
//   exact-match accuracy (rank 0's reply)
// LmSave(dir) -> gathered unit by unit, rank 0 streams each into the Hugging Face
//   checkpoint (never a whole model on one rank) + tokenizer files
// SaveState(dir) / LoadState(dir) (after SftInit) -> whole-job checkpoints: every rank's
//   shards + sft.json; the LR schedule follows from the step count
//
// Training runs in fp32 (master weights); model.dtype sets the saved checkpoint's dtype.
// Data order is a pure function of (job.seed, epoch): each epoch reshuffles (arithmetic:
// draws fresh problems) and repacks.
#pragma once

#include <memory>
#include <optional>

#include "actors/role.h"
#include "data/arith_task.h"
#include "data/prompt_example.h"
#include "dist/communicator.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "models/transformer.h"
#include "trainer/flat_adamw.h"
#include "trainer/sft_data.h"
#include "trainer/sharded_model.h"
#include "trainer/trainer_ranks.h"

namespace rlforge {

class SftTrainerRole final : public Role {
 public:
  SftTrainerRole(const JobConfig& config, const proto::Assignment& assignment);
  absl::StatusOr<WorkReply> Handle(const proto::WorkRequest& request,
                                   std::vector<TensorFrame> tensors) override;
  int64_t policy_version() const override { return steps_done_; }

 private:
  absl::StatusOr<WorkReply> Init();
  // The held-out set and, for jsonl, the training file.
  absl::Status LoadData();
  // From scratch: a char-level tokenizer over the data (and model.chat_template, which it
  // carries), and the model's sizes.
  absl::StatusOr<std::unique_ptr<models::Tokenizer>> ScratchTokenizer() const;
  absl::StatusOr<models::TransformerConfig> ScratchModelConfig() const;
  absl::StatusOr<WorkReply> Train(const proto::SftTrain& task);
  // This rank's share of one micro-batch: forward, loss (sum over its response tokens /
  // the step's `loss_tokens` on every rank), backward; returns that loss.
  absl::StatusOr<double> MicroBatch(const std::vector<PackedRow>& mb, const Share& share,
                                    int64_t loss_tokens);
  absl::StatusOr<WorkReply> Evaluate(const proto::LmEvaluate& task);
  absl::StatusOr<WorkReply> Save(const proto::LmSave& task);
  // Whole-job checkpoints: the sharded model and AdamW moments (trainer/sharded_checkpoint.h)
  // and, from rank 0, sft.json with the step count and the data position (epoch, row, the
  // truncation counter). LoadState's reply: metric optimizer_step, the restored count.
  absl::StatusOr<WorkReply> SaveState(const std::string& dir);
  absl::StatusOr<WorkReply> LoadState(const std::string& dir);
  absl::StatusOr<std::vector<PromptExample>> TrainExamples(int64_t epoch) const;
  absl::Status NextEpoch();
  const PackedRow& NextRow();

  JobConfig config_;
  proto::Assignment assignment_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  std::optional<models::PromptTemplate> template_;
  std::unique_ptr<dist::Communicator> comm_;  // the trainer ranks; outlives model_
  std::unique_ptr<ShardedModel> model_;
  std::unique_ptr<FlatAdamW> optimizer_;
  std::vector<PromptExample> file_train_, heldout_;
  std::optional<ArithmeticTask> task_;  // data.source arithmetic
  std::vector<PackedRow> rows_;
  size_t next_row_ = 0;
  int64_t epoch_ = -1;
  int64_t steps_done_ = 0;
  int64_t truncated_ = 0;
};

}  // namespace rlforge
