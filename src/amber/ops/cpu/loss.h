// CPU implementations behind ops/loss.h (shapes validated by the entry points).
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/loss.h"

namespace amber::cpu {

void linear_cross_entropy_forward(const Tensor& x, const Tensor& w, const Tensor& targets,
                                  const CrossEntropyOptions& options, Tensor& losses, Tensor& lse);
void linear_cross_entropy_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                   const Tensor& targets, const Tensor& lse,
                                   const CrossEntropyOptions& options, Tensor& dx, Tensor& dw,
                                   bool accumulate_dw);
void linear_cross_entropy_forward_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                           const Tensor& targets, const CrossEntropyOptions& options,
                                           Tensor& losses, Tensor& lse, Tensor& dx, Tensor& dw, bool accumulate_dw);
void linear_cross_entropy_sums(const Tensor& losses, const Tensor& lse, const Tensor& targets,
                               const CrossEntropyOptions& options, Tensor& sums);

}  // namespace amber::cpu
