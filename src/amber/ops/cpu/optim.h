// CPU implementations behind ops/optim.h (inputs validated by the entry points).
#pragma once

#include "amber/ops/optim.h"

namespace amber::cpu {

void advance_schedule(Tensor& schedule, const Tensor& gate, double beta1, double beta2);
void finite_flag(const Tensor& values, Tensor& flag);
void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h,
                const Tensor& schedule, Tensor& work);
void momentum_step(Tensor& momentum, const Tensor& grad, double mu, const Tensor& schedule);
void apply_update(Tensor& value, const Tensor& update, double decay_rate, double update_rate,
                  const Tensor& schedule);
double squared_norm(const Tensor& t);
void norm_from_squares(const Tensor& squares, Tensor& out);
void clip_scale(Tensor& scale, const Tensor& norm, double max_norm);
void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin);
bool all_finite(const Tensor& t);

}  // namespace amber::cpu
