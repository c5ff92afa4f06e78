// CPU implementations behind ops/optim.h (inputs validated by the entry points).
#pragma once

#include "amber/ops/optim.h"

namespace amber::cpu {

void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h);
double squared_norm(const Tensor& t);
void norm_from_squares(const Tensor& squares, Tensor& out);
void clip_by_norm_(Tensor& t, const Tensor& norm, double max_norm);
void divide_by_norm_(Tensor& t, const Tensor& squares, double floor, double margin);
bool all_finite(const Tensor& t);

}  // namespace amber::cpu
