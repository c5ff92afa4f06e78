// Batched generation with a static-shape KV cache: all prompts are prefilled as one
// packed batch, then every step decodes one token per sequence.
#pragma once

#include <functional>
#include <vector>

#include "amber/gen/sampler.h"
#include "amber/model/language_model.h"

namespace amber {

struct GenerationConfig {
  int max_new_tokens = 64;
  int32_t eos_id = -1;  // stop a sequence when it samples this token; -1 = never
  // Sample only ids below this: a tokenizer's size, where the model's vocabulary is
  // padded past it (ids the tokenizer cannot decode). 0 = every id.
  int32_t vocab_limit = 0;
  SamplingConfig sampling;
};

// Returns the new tokens of each prompt (eos included when sampled). Every prompt
// needs at least one token (e.g. bos).
std::vector<std::vector<int32_t>> generate(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerationConfig& config);

}  // namespace amber
