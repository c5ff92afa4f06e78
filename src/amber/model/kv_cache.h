// Generation state: one layer's KV cache and the packed new tokens of one cached step.
#pragma once

#include <cstdint>
#include <vector>

#include "amber/core/tensor.h"

namespace amber {

// One layer's slice of a generation KV cache: k and v [sequences, capacity, Hkv, Dh].
struct LayerCache {
  Tensor k, v;
};

// The packed new tokens of a generation step, as int32 tensors on the model's device so
// that a captured decode step replays with the values they hold: sequence s owns tokens
// [cu_q[s], cu_q[s + 1]) that follow its starts[s] cached positions; positions[t] is
// token t's position and last[s] = cu_q[s + 1] - 1 the sequence's last new token.
struct CachedStep {
  Tensor cu_q, starts, positions, last;

  // counts[s] new tokens (at least one) after starts[s] cached ones, for each sequence.
  static CachedStep packed(const std::vector<int32_t>& counts, const std::vector<int32_t>& starts, Device device);
};

}  // namespace amber
