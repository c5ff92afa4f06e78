// CUDA implementations behind ops/optim.h: the AdamW update on f32 master weights and
// deterministic reductions (fixed per-block partials summed in order).
#pragma once

#include "amber/ops/optim.h"

namespace amber::cuda {

void adamw_step(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h);
double squared_norm(const Tensor& t);
bool all_finite(const Tensor& t);

}  // namespace amber::cuda
