// Batched generation with a static-shape KV cache: all prompts are prefilled as one
// packed batch, then every step decodes one token per sequence (on a GPU as a captured
// CUDA graph, gen/decode_step.h) and samples on the host.
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
  // Called in sequence order with each token a sequence emits (eos included), as it is
  // chosen; returning false ends that sequence there (stop strings, a streamed print).
  std::function<bool(int sequence, int32_t token)> on_token;
  // On a GPU, replay the decode step as a CUDA graph (off: every step launched anew).
  bool cuda_graph = true;
};

struct Generation {
  std::vector<std::vector<int32_t>> tokens;  // each prompt's new tokens (eos included when sampled)
  int decode_steps = 0;                      // forward passes after the prefill
  int graph_replays = 0;                     // of those, replays of the captured CUDA graph
  double prefill_seconds = 0, decode_seconds = 0;  // forward passes and sampling, wall clock
};

// Every prompt needs at least one token (e.g. bos).
Generation generate(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                    const GenerationConfig& config);

}  // namespace amber
