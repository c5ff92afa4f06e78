// Gradient accumulation, global norm and clipping over StepStats' device buffers.
#include "amber/train/step.h"

#include <vector>

#include "amber/ops/optim.h"

namespace amber {

StepStats::StepStats(const LanguageModel& model)
    : values_(Tensor::zeros({4}, DType::f64, model.device())),
      squares_(Tensor::zeros({static_cast<int64_t>(model.params().size())}, DType::f64, model.device())) {}

void StepStats::zero() { values_.zero(); }

AccumulatedStep StepStats::read() const {
  const std::vector<double> v = values_.to_doubles();
  return {v[0], v[1], static_cast<int64_t>(v[2]), v[3]};
}

void accumulate_gradients(LanguageModel& model, std::span<const data::Batch> micro_batches, StepStats& stats) {
  // The token count comes from the batches' host metadata, so the scale is known
  // before any kernel runs.
  int64_t trained_tokens = 0;
  for (const data::Batch& b : micro_batches) trained_tokens += b.trained_tokens;
  model.zero_grad();
  stats.zero();
  if (trained_tokens == 0) return;
  const double scale = 1.0 / static_cast<double>(trained_tokens);
  Tensor sums = stats.loss_sums();
  for (const data::Batch& b : micro_batches) model.forward_backward(b.tokens, b.targets, b.seq, scale, sums);
}

void global_grad_norm(const LanguageModel& model, StepStats& stats) {
  Tensor squares = stats.squares(), norm = stats.grad_norm();
  const auto& params = model.params();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor slot = squares.slice(0, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);
    squared_norm_into(params[i]->grad, slot);
  }
  norm_from_squares(squares, norm);
}

void clip_gradients(const LanguageModel& model, const StepStats& stats, double max_norm) {
  const Tensor norm = stats.grad_norm();
  for (const auto& p : model.params()) clip_by_norm_(p->grad, norm, max_norm);
}

}  // namespace amber
