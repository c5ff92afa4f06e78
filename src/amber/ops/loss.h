// The LM objective: linear projection to the vocabulary fused with cross-entropy
// and optional z-loss, processed in chunks of tokens so the full [T, V] logits never
// exist. Per-token losses are fp32 (fp64 for f64 inputs); callers reduce them in
// fp32 or wider.
#pragma once

#include <cstdint>

#include "amber/core/targets.h"
#include "amber/core/tensor.h"
#include "amber/ops/step_slots.h"

namespace amber {

struct CrossEntropyOptions {
  double z_loss_weight = 0.0;  // adds z * logsumexp(logits)^2 per token
  int32_t ignore_index = kNoTarget;
  int64_t chunk_tokens = 2048;  // rows of logits alive at once: chunk_tokens x V
};

// x [T, D], w [V, D], targets int32 [T]. losses[t] = lse_t - logit_t[target] +
// z * lse_t^2, and 0 where the target is ignore_index. lse [T] is saved for the
// backward. Both outputs are f32 (f64 for f64 inputs).
void linear_cross_entropy_forward(const Tensor& x, const Tensor& w, const Tensor& targets,
                                  const CrossEntropyOptions& options, Tensor& losses, Tensor& lse);

// dlosses [T]: gradient of the caller's objective with respect to each loss.
// dx overwritten; dw += (dw = with accumulate_dw false: its old values are never
// read, so they may be anything).
void linear_cross_entropy_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                   const Tensor& targets, const Tensor& lse,
                                   const CrossEntropyOptions& options, Tensor& dx, Tensor& dw,
                                   bool accumulate_dw = true);

// Training's forward and backward in one call, for callers that know dlosses before the
// forward (a fixed loss scale): the same losses, lse, dx and dw += as the two calls
// above (with the same accumulate_dw), bit for bit, but on the GPU each chunk of logits is produced and read once.
void linear_cross_entropy_forward_backward(const Tensor& dlosses, const Tensor& x, const Tensor& w,
                                           const Tensor& targets, const CrossEntropyOptions& options,
                                           Tensor& losses, Tensor& lse, Tensor& dx, Tensor& dw,
                                           bool accumulate_dw = true);

// The loss sums' size: the step statistics' slots loss_sum, z_loss_sum, trained_tokens.
inline constexpr int kLossSums = step_slot::loss_sums_end - step_slot::loss_sums_begin;

// sums (f64 [kLossSums], contiguous, on the device of `losses`) += {sum of losses[t],
// sum of z_loss_weight * lse[t]^2, number of tokens t}, at their step_slot indices,
// over the tokens whose target is not ignore_index; losses and lse [T] as linear_cross_entropy_forward wrote them. It never
// waits for the host, and gives the same bits on every run: on the CPU one running
// double sum per call in token order, on the GPU fixed chunks of tokens whose sums
// are added in chunk order.
void linear_cross_entropy_sums(const Tensor& losses, const Tensor& lse, const Tensor& targets,
                               const CrossEntropyOptions& options, Tensor& sums);

}  // namespace amber
