// CUDA implementations behind ops/optim.h: the AdamW update on f32 master weights and
// deterministic reductions (fixed per-block partials summed in order).
#pragma once

#include <span>

#include "amber/ops/optim.h"

namespace amber::cuda {

void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2);
void finite_flag(const Tensor& values, Tensor& flag);
void adamw_steps(std::span<const AdamWOperands> params, const Tensor& schedule);
void momentum_step(Tensor& momentum, const Tensor& grad, double mu, const Tensor& schedule);
void apply_update(Tensor& value, const Tensor& update, double decay_rate, double update_rate,
                  const Tensor& schedule);
void squared_norms_into(std::span<const Tensor> tensors, Tensor& squares);
void norm_from_squares(const Tensor& squares, Tensor& out);
void clip_scale(Tensor& scale, const Tensor& norm, double max_norm);
void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin);
bool all_finite(const Tensor& t);

}  // namespace amber::cuda
