// Trainer: drives a LanguageModel through a run: token-exact gradient accumulation,
// global-norm clipping, non-finite step skipping, schedules, validation against a
// unigram baseline, sample previews, metrics (JSONL and a console line) and
// checkpoints that resume bit for bit.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "amber/data/batch.h"
#include "amber/model/language_model.h"
#include "amber/train/run_config.h"

namespace amber {

struct AccumulatedStep {
  double loss_sum = 0;  // summed per-token objective over the step's micro-batches
  double z_loss_sum = 0;
  int64_t trained_tokens = 0;
};

// Forward and backward of every micro-batch with each loss divided once by the
// step's total trained tokens (never a mean of means); gradients are zeroed first.
AccumulatedStep accumulate_gradients(LanguageModel& model, std::span<const data::Batch> micro_batches);

// sqrt of the sum of squared gradient entries of every parameter, in double.
double global_grad_norm(const LanguageModel& model);

struct TrainOptions {
  bool resume = false;      // continue from <out_dir>/checkpoints/latest when present
  std::string resume_from;  // or from this checkpoint directory
  bool progress = true;     // console progress line
};

class Trainer {
 public:
  Trainer(RunConfig config, TrainOptions options);
  ~Trainer();
  // Trains until train.steps; returns the last validation loss.
  double run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace amber
