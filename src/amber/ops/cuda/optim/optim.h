// CUDA implementations behind ops/optim.h: the AdamW update on f32 master weights and
// deterministic reductions (fixed per-block partials summed in order).
#pragma once

#include <span>

#include "amber/ops/optim.h"

namespace amber::cuda {

void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2);
void finite_flag(const Tensor& values, Tensor& flag);
void adamw_steps(std::span<const AdamWOperands> params, const Tensor& schedule);
void muon_momentum_steps(std::span<const MuonOperands> params, double mu, bool nesterov, const Tensor& schedule);
void muon_apply_steps(std::span<const MuonOperands> params, const Tensor& schedule);
void squared_norms_into(std::span<const Tensor> tensors, Tensor& squares);
void sums_into(std::span<const Tensor> tensors, Tensor& sums);
void norm_from_squares(const Tensor& squares, Tensor& out);
void clip_scale(Tensor& scale, const Tensor& norm, double max_norm);
void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin);
bool all_finite(const Tensor& t);

}  // namespace amber::cuda
