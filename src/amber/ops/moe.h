// Mixture-of-Experts routing: the router's scores, top-k choice and gate weights (with
// their backward), the counting sort that groups token copies by expert, and the
// gather/combine between token order and expert order. Every op is deterministic: top-k
// ties go to the lower expert, a token's copies keep their slot order within an expert,
// and sums over a token's copies run in slot order. The grouped products between gather
// and combine are ops/grouped_gemm.h's.
//
// Shapes: T tokens, E experts, k = top_k slots per token, R = T k copies, D model width.
#pragma once

#include "amber/core/tensor.h"

namespace amber {

enum class RouterScore {
  softmax,        // softmax over the experts (Qwen3, OLMoE)
  sigmoid,        // DeepSeek-V3
  sqrt_softplus,  // sqrt(softplus(logit)) (DeepSeek-V4)
};

struct RouterSpec {
  RouterScore score = RouterScore::softmax;
  int top_k = 1;
  bool normalize = true;  // the chosen scores divided by their sum
  double scaling = 1.0;   // the routed scaling factor, after normalization
};

// logits [T, E] f32 (the router product, in fp32) -> scores [T, E] f32, experts [T, k]
// i32 and weights [T, k] f32. Experts are the k largest scores + bias (bias [E] f32,
// the auxiliary-loss-free balance bias; may be undefined), in descending order, ties to
// the lower expert; weights come from the scores alone (the bias only chooses).
void moe_route_forward(const RouterSpec& spec, const Tensor& logits, const Tensor& bias, Tensor& scores,
                       Tensor& experts, Tensor& weights);

// dlogits [T, E] f32 = d(loss)/d(logits) from dweights [T, k] f32, through the weights'
// normalization and the score function (the choice itself has no gradient).
void moe_route_backward(const RouterSpec& spec, const Tensor& dweights, const Tensor& scores, const Tensor& experts,
                        Tensor& dlogits);

// The routers' auxiliary losses (training only), added to the objective as the head's
// loss is: `sum` (f64 [1]) += their value summed over tokens, and dlogits [T, E] +=
// loss_scale (f64 [1]) times their gradient. Documents d (cu_seqlens i32 [D + 1], empty
// ones allowed) of T_d tokens; p_te = s_te / sum_j s_tj the normalised scores; c_de the
// copies of d's tokens routed to e:
//   balance (DeepSeek-V3's sequence-wise loss, each document's weighted by its tokens):
//     T_d * balance_weight * sum_e f_de P_de, f_de = E c_de / (k T_d), P_de = mean over
//     d's tokens of p_te; the choice (c_de) carries no gradient.
//   z-loss (ST-MoE): z_weight * logsumexp_e(logit_te)^2 for each token.
struct RouterLossSpec {
  double balance_weight = 0;
  double z_weight = 0;
};
void moe_router_loss(const RouterSpec& spec, const RouterLossSpec& loss, const Tensor& logits, const Tensor& scores,
                     const Tensor& experts, const Tensor& cu_seqlens, const Tensor& loss_scale, Tensor& dlogits,
                     Tensor& sum);

// The expert order of the copies: offsets [E + 1] i32 (expert e owns rows offsets[e] ..
// offsets[e + 1] - 1), slot_rows [T, k] i32 (the row of each (token, slot) copy),
// row_tokens [R] i32 (the token of each row). Within an expert, rows follow token order
// (then slot order): a counting sort, stable.
void moe_permute(const Tensor& experts, int64_t num_experts, Tensor& offsets, Tensor& slot_rows,
                 Tensor& row_tokens);

// xs [R, D] = x [T, D] at row_tokens (the copies in expert order); also the combine's
// backward (the output gradient copied to each row of its token).
void moe_gather(const Tensor& x, const Tensor& row_tokens, Tensor& xs);
// The same with xs also quantized to FP8 rows (values, scales) as quantize_fp8_rows(xs,
// ...) writes them, the bits of quantizing x's rows before the permutation (FP8 experts'
// operand, as DeepSeek-V3 quantizes once per token). On a GPU, for 16-bit rows whose
// width is a multiple of 128, in the one pass; elsewhere the two ops.
void moe_gather_fp8_rows(const Tensor& x, const Tensor& row_tokens, Tensor& xs, Tensor& values, Tensor& scales);

// out [T, D] = sum over a token's slots, in slot order, of ys [R, D] at slot_rows (ys
// already scaled by the gate weights); also the gather's backward. With accumulate
// out += the sum.
void moe_combine(const Tensor& ys, const Tensor& slot_rows, Tensor& out, bool accumulate = false);

// The gate weights in row order: row_weights [R] f32 = weights [T, k] at slot_rows.
void moe_weights_to_rows(const Tensor& weights, const Tensor& slot_rows, Tensor& row_weights);

// The router's logit gradient dlogits [T, E] f32 as two 16-bit terms, transposed for the
// router's weight gradient: pair [2E, T] (bf16 or f16), pair[e, t] = dlogits[t, e]
// rounded to nearest even and pair[E + e, t] = what that rounding left, rounded again.
// Their sum holds 16 bits of each value's mantissa, so two 16-bit products with fp32
// sums give the weight gradient about as precisely as an fp32 product (a sum of small,
// cancelling terms: from one 16-bit term it was 7% off the CPU's), and the first term is
// the input gradient's operand.
void moe_router_grad_pair(const Tensor& dlogits, Tensor& pair);

// The experts' load and the auxiliary-loss-free balance (DeepSeek-V3). moe_add_load:
// load [E] f64 += each expert's rows this micro-batch (from offsets [E + 1]).
// moe_end_step, after each optimizer step: stats (f64 [3]) = {the busiest expert's load
// over the mean (0 without load), the experts without load, the bias's max - min after
// the step (0 without a bias)}; where apply (f64 [1]) is 1, bias [E] f32 += rate *
// sign(mean load - load) (an overloaded expert is chosen less, an idle one more; bias
// may be undefined); the load restarts from zero either way.
void moe_add_load(const Tensor& offsets, Tensor& load);
void moe_end_step(Tensor& bias, Tensor& load, double rate, const Tensor& apply, Tensor& stats);

// The expert SwiGLU's backward with the gate weights folded in, from the saved gate/up
// product gate_up [R, 2H] (gate half first). For each copy i = (token, slot) at row
// r = slot_rows[i], with act = silu(gate) * up recomputed and w = row_weights[r]:
//   dweights [T, k] f32 at i = da[r] . act  (the gate weight's gradient: da [R, H] =
//                                            dout W_down is the unweighted gradient of act)
//   act_w [R, H] at r = w act               (the down product's input as weighted, for
//                                            its weight gradient)
//   dgate_up [R, 2H] at r = the SwiGLU backward of w da[r].
void moe_swiglu_backward(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                         Tensor& dgate_up, Tensor& act_w, Tensor& dweights);
// moe_swiglu_backward of da = douts w_down (grouped_gemm_backward_input's product, for
// the rows `offsets` gives each expert), the SwiGLU's backward in the product's
// epilogue where the GPU kernel takes it (Hopper, 16-bit, H a multiple of 128): da is
// then never written and `scratch` holds the gate weights' partial gradients instead,
// one f32 per 128 columns of a row. Elsewhere the two ops, da in scratch ([R, H] in
// douts' dtype). The two forms agree to rounding: the epilogue starts from the fp32
// product where the pass reads its 16-bit copy.
void moe_down_backward_swiglu(const Tensor& douts, const Tensor& w_down, const Tensor& offsets,
                              const Tensor& gate_up, const Tensor& row_weights, const Tensor& slot_rows,
                              Tensor& scratch, Tensor& dgate_up, Tensor& act_w, Tensor& dweights);
// The same, with dgate_up also quantized to FP8 rows (values, scales) as
// quantize_fp8_rows(dgate_up, ...) writes them: the FP8 experts' input-gradient operand
// beside the weight gradient's 16-bit one. On a GPU, for 16-bit tensors with H a
// multiple of 128, in the one pass (dgate_up is not read back); elsewhere the two ops.
void moe_swiglu_backward_fp8_rows(const Tensor& da, const Tensor& gate_up, const Tensor& row_weights,
                                  const Tensor& slot_rows, Tensor& dgate_up, Tensor& act_w, Tensor& dweights,
                                  Tensor& values, Tensor& scales);

}  // namespace amber
