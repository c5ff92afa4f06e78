// LanguageModel: backbone plus LM head, the unit the trainer drives. Owns the
// parameter store (every parameter, in a fixed order), the parameters'
// initialisation, and the activation arenas.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amber/model/backbone.h"
#include "amber/model/gradient_ready.h"
#include "amber/model/lm_head.h"

namespace amber {

class LanguageModel {
 public:
  // Master weights in `dtype` on `device`; activations in `compute` (default: dtype).
  explicit LanguageModel(const ModelConfig& config, DType dtype = DType::f32, Device device = Device::cpu(),
                         std::optional<DType> compute = std::nullopt);

  const ModelConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  DType compute_dtype() const { return compute_; }
  // Re-derives every working copy from the master weights (after they were written).
  void refresh_working_copies();
  const std::vector<std::shared_ptr<Param>>& params() const { return store_.params(); }
  const ParamStore& store() const { return store_; }
  ParamStore& store() { return store_; }
  Param& param(const std::string& name) const;  // error names the nearest valid name
  int64_t parameter_count() const;

  // Deterministic initialisation from one seed, as each parameter's ParamInit says
  // (Philox; each parameter takes the stream segment after the previous one, whatever
  // its init, so CPU and GPU agree).
  void init_weights(uint64_t seed);
  void zero_grad();
  // A step's gradients without a zeroing pass over the linear weights: restart_grads
  // before its micro-batches (their first product overwrites those gradients, the
  // others are zeroed), settle_grads after them (a gradient nothing wrote is zeroed).
  // Between the two the gradients equal zero_grad's plus the micro-batches'.
  void restart_grads();
  void settle_grads();
  // Model state that is not trained (MoE routers' balance biases) under whole-model
  // names, kept by checkpoints beside the parameters; and its update after each
  // optimizer step (apply: f64 [1] on the device, 1 where the step was applied).
  std::vector<std::pair<std::string, Tensor>> buffers() const {
    std::vector<std::pair<std::string, Tensor>> out;
    backbone_.buffers(out);
    return out;
  }
  void after_optimizer_step(const Tensor& apply) { backbone_.after_optimizer_step(apply); }
  // The MoE layers' routing statistics of the last optimizer step: f64 [MoE layers x
  // kRoutingStatValues] on the device, written inside the step (undefined for a dense
  // model); and those values, read back, as each layer's RoutingStats in layer order.
  const Tensor& routing_values() const { return routing_values_; }
  std::vector<RoutingStats> routing_stats(const std::vector<double>& values) const;
  // The MoE layers' per-expert row counts of the step so far, which after_optimizer_step
  // turns into the balance bias's move and the routing statistics.
  std::vector<Tensor> routing_loads() const { return backbone_.routing_loads(); }

  // One micro-batch: forward, then accumulate d(loss_scale * (loss.sum + router
  // loss))/d(params). `loss_sums` is f64 [4] on this device: the head's sums
  // (LMHead::Loss) and the MoE routers' auxiliary loss sum, each added to, so a step of
  // several micro-batches reads its loss from the device once. loss_scale is one f64
  // element on this device. A step's last micro-batch may pass `ready`: its backward
  // then tells it as the head, the final norm, each block and the embedding finish their
  // gradients (GradientReady), each part settled first (settle_grads, for its parameters).
  void forward_backward(const Tensor& tokens, const Tensor& targets, const SeqInfo& seq, const Tensor& loss_scale,
                        Tensor& loss_sums, GradientReady* ready = nullptr);
  // Loss without gradients (validation), read back to the host.
  LMHead::Loss evaluate(const Tensor& tokens, const Tensor& targets, const SeqInfo& seq);
  // Materialised logits [T, V] (sampling, tests).
  Tensor logits(const Tensor& tokens, const SeqInfo& seq);

  // Generation: one empty KV cache layer per block for `sequences` sequences of at
  // most `capacity` tokens, and the logits [S, V] of each sequence's last new token.
  std::vector<LayerCache> make_kv_cache(int sequences, int capacity) const;
  Tensor infer_last_logits(const Tensor& tokens, const CachedStep& step, std::vector<LayerCache>& caches);

  size_t activation_bytes_high_water() const { return activations_.high_water_bytes(); }
  // Changes whenever the activation or scratch arena moves its memory (Arena::layout_version).
  uint64_t arena_version() const { return activations_.layout_version() + scratch_.layout_version(); }

 private:
  ModelConfig config_;
  DType dtype_;
  Device device_;
  DType compute_;
  // settle_grads for the parameters [first, end) of the declaration order.
  void settle_grads(size_t first, size_t end);

  ParamStore store_;  // declared into by backbone_ and head_, allocated once they are built
  Backbone backbone_;
  size_t head_first_;  // the head's first parameter (params().size() when it has none: tied)
  LMHead head_;
  Arena activations_, scratch_;
  std::vector<std::string> routing_layers_;
  Tensor routing_values_;
};

}  // namespace amber
