// CUDA MoE routing behind ops/moe.h: a warp per token for the router (scores, top-k,
// weights and their backward), a chunked counting sort that keeps the CPU's stable
// order, row gathers and slot-ordered sums. No host read: every launch is sized by the
// shapes, so the step stays one CUDA graph with routing that changes every step.
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/moe.h"

namespace amber::cuda {

void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights);
void moe_route_backward(const RouterSpec& spec, const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                        Tensor& dlogits);
void moe_router_loss(const RouterSpec& spec, const RouterLossSpec& loss, const Tensor& logits, const Tensor& scores,
                     const Tensor& experts, const Tensor& cu_seqlens, const Tensor& loss_scale, Tensor& dlogits,
                     Tensor& sum);
void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows, Tensor& row_tokens);
void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs);
// moe_gather with the rows' FP8 row codes from the same pass, where it takes these
// tensors (16-bit, width a multiple of 128, aligned to 16 bytes, values to 8); returns
// whether it ran.
bool moe_gather_fp8_rows(const Tensor& x, const Tensor& row_tokens, Tensor& xs, Tensor& values, Tensor& scales);
void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate);
void moe_weights_to_rows(const Tensor& weights, const Tensor& slot_rows, Tensor& row_weights);
void moe_router_grad_pair(const Tensor& dlogits, Tensor& pair);
void moe_add_load(const Tensor& offsets, Tensor& load);
void moe_end_step(Tensor& bias, Tensor& load, double rate, const Tensor& apply, Tensor& stats);
void moe_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                         Tensor& dgate_up, Tensor& act_w, Tensor& dweights);
// The same pass also writing dgate_up's FP8 row codes, where it takes these tensors
// (16-bit, H a multiple of 128, aligned to 16 bytes, values to 8); returns whether it ran.
bool moe_swiglu_backward_fp8_rows(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights,
                                  const Tensor& slot_rows, Tensor& dgate_up, Tensor& act_w, Tensor& dweights,
                                  Tensor& values, Tensor& scales);

}  // namespace amber::cuda
