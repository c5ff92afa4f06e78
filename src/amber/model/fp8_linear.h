// The fp8_block Linear recipes. fp8_block (DeepSeek-V3's): every product of a projection in
// block-scaled e4m3 with fp32 accumulation (ops/fp8_gemm.h). Forward: x in 1x128
// blocks along `in`, W in 128x128 tiles; input gradient: dy in 1x128 blocks along
// `out`, W^T's tiles (written by the weight's quantizer in the same pass); weight
// gradient: dy^T and x^T in 1x128 blocks along the tokens (quantized from dy and x in
// one pass each; a gated MLP's dgate_up straight from the GLU's backward, never written
// whole on a GPU). Outputs (y, dx, the GLU's input) in the compute dtype, the weight
// gradient in fp32. Weights are quantized from their working copies at every call.
// On a GPU, token counts that are not a multiple of 16 (an evaluation batch, a decode
// step) are padded with zero rows in the arena, which changes no result; a weight whose
// sides are not multiples of 16 runs in the compute dtype, as cuBLASLt's FP8 products
// do not take it.
// fp8_block_hp_wgrad: the forward and input-gradient products as above, the weight
// gradient dy^T x in the compute dtype from the same operands the compute_dtype recipe
// reads ("hp" for high precision, torchao's rowwise_with_gw_hp): no operand is quantized
// along the tokens, so the column quantizers' passes are gone, and the gradient the
// optimizer reads carries no FP8 rounding.
#pragma once

#include <memory>

#include "amber/model/linear.h"

namespace amber {

// Where a projection's weight gradient runs.
enum class WeightGradient { fp8, compute_dtype };

std::unique_ptr<LinearRecipe> make_fp8_block_recipe(WeightGradient weight_gradient);

}  // namespace amber
