// The fp8_block Linear recipe (DeepSeek-V3's): every product of a projection in
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
#pragma once

#include <memory>

#include "amber/model/linear.h"

namespace amber {

std::unique_ptr<LinearRecipe> make_fp8_block_recipe();

}  // namespace amber
