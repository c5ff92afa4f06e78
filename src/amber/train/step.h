// The device work of one optimizer step before its update: token-exact gradient
// accumulation over micro-batches, the global gradient norm and clipping. Losses and
// norms stay on the model's device; StepStats::read is the step's one host
// synchronisation, so the GPU never idles waiting for a per-micro-batch number.
#pragma once

#include <cmath>
#include <span>

#include "amber/data/batch.h"
#include "amber/model/language_model.h"

namespace amber {

// The host copy of a step's statistics.
struct AccumulatedStep {
  double loss_sum = 0;  // summed per-token objective over the step's micro-batches
  double z_loss_sum = 0;
  int64_t trained_tokens = 0;
  double grad_norm = NAN;  // global gradient norm before clipping; NaN until measured
};

// Device buffers of one step, allocated once per model: f64 {loss sum, z-loss sum,
// trained tokens, global gradient norm} and one squared-norm slot per parameter.
class StepStats {
 public:
  explicit StepStats(const LanguageModel& model);
  Tensor loss_sums() const { return values_.slice(0, 0, 3); }  // what LMHead accumulates into
  Tensor grad_norm() const { return values_.slice(0, 3, 4); }
  Tensor squares() const { return squares_; }  // [params], one squared gradient norm each
  void zero();
  // The four values on the host: one device-to-host copy, the step's only synchronisation.
  AccumulatedStep read() const;

 private:
  Tensor values_, squares_;
};

// Forward and backward of every micro-batch with each loss divided once by the
// step's total trained tokens (never a mean of means); gradients and `stats` are
// zeroed first, and the loss sums accumulate into `stats` on the device.
void accumulate_gradients(LanguageModel& model, std::span<const data::Batch> micro_batches, StepStats& stats);

// stats' grad norm = sqrt of the sum of squared gradient entries of every parameter,
// in double: each parameter's sum goes to its own slot, then one in-order sum.
void global_grad_norm(const LanguageModel& model, StepStats& stats);

// Scales every gradient by max_norm / norm when the measured norm exceeds max_norm;
// the factor is computed on the device from stats' grad norm.
void clip_gradients(const LanguageModel& model, const StepStats& stats, double max_norm);

}  // namespace amber
