// The tiny model the test suites build: two layers of width 32, four query heads over
// two key-value heads, a 64-token vocabulary. It trains for a few CPU steps in well
// under a second; a suite that needs another shape starts from it and overrides the
// fields it changes, so what differs from the common model is visible where it is used.
#pragma once

#include "amber/model/config.h"

namespace amber::testing {

inline ModelConfig tiny_model() {
  ModelConfig c;
  c.vocab_size = 64;
  c.dim = 32;
  c.depth = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.mlp_hidden = 64;
  return c;
}

}  // namespace amber::testing
