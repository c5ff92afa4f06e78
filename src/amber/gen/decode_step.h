// One decode step of batched generation: the model's forward over one new token per
// sequence at given positions, extending the KV cache, and the logits of those tokens
// read back to the host. On a GPU the step is captured once as a CUDA graph (inputs
// through pinned memory, the logits copied out inside it) and replayed; on the CPU, and
// before the capture, it runs as plain calls.
#pragma once

#include <vector>

#include "amber/model/language_model.h"

namespace amber {

// A step's logits [sequences x vocab] in host memory, in the dtype the model computes
// in; read row by row, only as far as the sampled ids go.
class HostLogits {
 public:
  HostLogits(const void* data, DType dtype, int64_t vocab) : data_(data), dtype_(dtype), vocab_(vocab) {}
  // The first n logits of row s, widened.
  void row(int64_t s, int64_t n, std::vector<double>& out) const;

 private:
  const void* data_;
  DType dtype_;
  int64_t vocab_;
};

class DecodeStep {
 public:
  DecodeStep(LanguageModel& model, std::vector<LayerCache>& caches, int sequences, bool cuda_graph);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;

  // Runs token tokens[s] at position positions[s] of sequence s; the logits stay valid
  // until the next run.
  HostLogits run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions);
  // Whether the last run replayed the captured graph.
  bool replaying() const { return graph_ != nullptr; }

 private:
  // The step's device work: inputs uploaded (on a GPU), the forward, the logits out.
  void issue();

  LanguageModel& model_;
  std::vector<LayerCache>& caches_;
  int sequences_;
  bool on_gpu_, use_graph_;
  Tensor inputs_;  // int32 [2S] on the model's device: tokens, then positions
  CachedStep step_;
  Tensor cpu_logits_;  // the CPU path's logits of the last run
  int32_t* staged_inputs_ = nullptr;  // pinned int32 [2S]
  void* staged_logits_ = nullptr;     // pinned [S, V] in the compute dtype
  size_t logits_bytes_ = 0;
  void* graph_ = nullptr;
  int eager_runs_ = 0;
};

}  // namespace amber
