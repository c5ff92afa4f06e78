// The Mixture-of-Experts MLP (DeepSeekMoE layout), the `mlp` registry's "moe" entry that
// Block picks for the layers ModelConfig::layer_is_sparse names: out = shared(x) +
// sum over the top-k experts of w_k expert_k(x), SwiGLU experts, dropless routing (every
// token copy is computed; no capacity), the router in fp32.
#pragma once

#include <memory>

#include "amber/model/mlp.h"

namespace amber {

std::unique_ptr<Mlp> make_moe_mlp(const MlpSpec& spec);

}  // namespace amber
