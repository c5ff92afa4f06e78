// CPU implementations behind ops/moe.h (inputs validated by the entry points).
#pragma once

#include "amber/core/tensor.h"
#include "amber/ops/moe.h"

namespace amber::cpu {

void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights);
void moe_route_backward(const RouterSpec& spec, const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                        Tensor& dlogits);
void moe_router_loss(const RouterSpec& spec, const RouterLossSpec& loss, const Tensor& logits, const Tensor& scores,
                     const Tensor& experts, const Tensor& cu_seqlens, const Tensor& loss_scale, Tensor& dlogits,
                     Tensor& sum);
void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows, Tensor& row_tokens);
void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs);
void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate);
void moe_weights_to_rows(const Tensor& weights, const Tensor& slot_rows, Tensor& row_weights);
void moe_router_grad_pair(const Tensor& dlogits, Tensor& pair);
void moe_add_load(const Tensor& offsets, Tensor& load);
void moe_end_step(Tensor& bias, Tensor& load, double rate, const Tensor& apply, Tensor& stats);
void moe_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                         Tensor& dgate_up, Tensor& act_w, Tensor& dweights);

}  // namespace amber::cpu
