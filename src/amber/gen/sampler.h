// Token sampling from one row of logits: temperature, then top-k, top-p (nucleus)
// and min-p filters, then one draw from the Philox stream, so a seed reproduces a
// generation exactly on any machine.
#pragma once

#include <cstdint>
#include <vector>

namespace amber {

struct SamplingConfig {
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1 = off
  double min_p = 0.0;        // keep tokens with p >= min_p * p_max; 0 = off
  uint64_t seed = 0;
};

void validate_sampling(const SamplingConfig& config);

// `draw` selects the uniform number used (the stream index under config.seed).
int32_t sample_token(const std::vector<double>& logits, const SamplingConfig& config, uint64_t draw);

}  // namespace amber
