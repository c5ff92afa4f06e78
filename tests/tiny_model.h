// The tiny model the test suites build: two layers of width 32, four query heads over
// two key-value heads, a 64-token vocabulary. It trains for a few CPU steps in well
// under a second; a suite that needs another shape starts from it and overrides the
// fields it changes, so what differs from the common model is visible where it is used.
#pragma once

#include "amber/model/config.h"

namespace amber::testing {

inline ModelConfig tiny_model() {
  // window_pattern named: it is the one field without a default initializer, which g++
  // would otherwise warn about.
  return {.vocab_size = 64, .dim = 32, .depth = 2, .heads = 4, .kv_heads = 2, .mlp_hidden = 64, .window_pattern = {}};
}

// `base` with its layers after the first sparse: 8 experts of width 64, top-2, one
// shared expert, the sigmoid router.
inline ModelConfig with_small_moe(ModelConfig c) {
  c.moe_experts = 8;
  c.moe_top_k = 2;
  c.moe_hidden = 64;
  c.moe_shared_experts = 1;
  c.moe_first_dense = 1;
  c.moe_router = "sigmoid";
  return c;
}

}  // namespace amber::testing
