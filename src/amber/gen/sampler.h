// Token sampling from one row of logits: an optional repetition penalty, temperature,
// then top-k, top-p (nucleus) and min-p filters, then one draw from the Philox stream,
// so a seed reproduces a generation exactly on any machine.
#pragma once

#include <cstdint>
#include <vector>

namespace amber {

struct SamplingConfig {
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1 = off
  double min_p = 0.0;        // keep tokens with p >= min_p * p_max; 0 = off
  double repetition_penalty = 1.0;  // > 0; 1 = off (SeenTokens::penalise)
  uint64_t seed = 0;
};

void validate_sampling(const SamplingConfig& config);

// `draw` selects the uniform number used (the stream index under config.seed); the
// draw walks the kept tokens in id order.
int32_t sample_token(const std::vector<double>& logits, const SamplingConfig& config, uint64_t draw);

// The distinct tokens a sequence holds so far (its prompt and what it generated).
class SeenTokens {
 public:
  SeenTokens(const std::vector<int32_t>& prompt, int64_t vocab);
  void add(int32_t token);
  // The CTRL penalty as Hugging Face applies it: each seen token's logit is divided by
  // `penalty` where positive and multiplied by it where negative, so penalty > 1 makes
  // repeats less likely. Ids past the end of `logits` are skipped.
  void penalise(std::vector<double>& logits, double penalty) const;

 private:
  std::vector<bool> seen_;    // by id
  std::vector<int32_t> ids_;  // in order of first sight
};

}  // namespace amber
