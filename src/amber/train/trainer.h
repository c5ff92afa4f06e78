// Trainer: drives a LanguageModel through a run: token-exact gradient accumulation,
// global-norm clipping, non-finite step skipping, schedules, validation against a
// unigram baseline, sample previews, metrics (JSONL and a console line) and
// checkpoints that resume bit for bit.
#pragma once

#include <memory>
#include <string>

#include "amber/model/language_model.h"
#include "amber/train/run_config.h"
#include "amber/train/step.h"

namespace amber {

struct TrainOptions {
  bool resume = false;      // continue from <out_dir>/checkpoints/latest when present
  std::string resume_from;  // or from this checkpoint directory
  bool progress = true;     // console progress line
  std::string init_from = "";  // a fresh run's weights from this Hugging Face folder (docs/interop.md)
};

class Trainer {
 public:
  // Owns train.out_dir from here until run() returns (RunLock): a second trainer into
  // the same folder, in this process or another, is refused meanwhile.
  Trainer(RunConfig config, TrainOptions options);
  ~Trainer();
  // Trains until train.steps, or until SIGINT or SIGTERM arrives: then it ends the step
  // in flight, writes a checkpoint and returns early. Returns the last validation loss.
  double run();
  // The signal that stopped the last run() early, or 0.
  int stopped_by() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace amber
