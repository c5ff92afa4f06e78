// Evaluator: what a run measures of its model between steps: the held-out loss on the
// fixed evaluation set beside the unigram baseline's loss on the same tokens, and
// sample previews that continue the configured prompts.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amber/model/language_model.h"
#include "amber/train/run_config.h"
#include "amber/train/run_data.h"

namespace amber {

struct EvalResult {
  double loss = NAN;     // cross-entropy alone (no z-loss) per held-out token
  double unigram = NAN;  // the unigram baseline's, on the same tokens
  int64_t tokens = 0;
};

class Evaluator {
 public:
  Evaluator(const RunConfig& config, const RunData& data);
  ~Evaluator();

  bool has_eval_set() const { return !data_.eval_batches.empty(); }
  EvalResult evaluate(LanguageModel& model) const;
  // One decoded continuation per sample prompt, from the weights at `step` (which
  // seeds the sampler). Generation runs on the CPU (its cached attention has no CUDA
  // kernel yet): a GPU run samples from a CPU copy of the current weights.
  std::vector<std::string> samples(LanguageModel& model, int64_t step);

 private:
  const RunConfig& config_;
  const RunData& data_;
  std::unique_ptr<LanguageModel> preview_model_;  // the CPU copy, made at the first preview
};

}  // namespace amber
