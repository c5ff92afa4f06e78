// Backbone: tokens and their packed layout to final hidden states. It is pure: it
// knows nothing of targets or the loss (the LM head owns the objective).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "amber/model/block.h"
#include "amber/model/recompute.h"

namespace amber {

class Backbone {
 public:
  struct Saved {
    Tensor tokens;
    std::vector<Block::Saved> blocks;
    Norm::Saved final_norm;
  };

  // Declares the embedding, the blocks' parameters and the final norm in `store`.
  Backbone(const ModelConfig& config, ParamStore& store);

  const std::shared_ptr<Param>& embedding() const { return embed_; }
  int depth() const { return static_cast<int>(blocks_.size()); }
  const RecomputePolicy& recompute() const { return *recompute_; }

  // tokens int32 [T] -> hidden [T, D] (from `activations`).
  Tensor forward(const Tensor& tokens, const SeqInfo& seq, Saved& saved, Arena& activations,
                 Arena& scratch) const;
  // Called by the backward each time a part of the backbone has finished its parameter
  // gradients (the final norm, each block from the last, the embedding), with the index
  // in ParamStore::params() of that part's first parameter.
  using PartFinished = std::function<void(size_t first)>;
  // Accumulates every parameter gradient from d(loss)/d(hidden).
  void backward(const Tensor& dhidden, const SeqInfo& seq, Saved& saved, Arena& activations, Arena& scratch,
                const PartFinished& finished = {}) const;
  // Generation: hidden states of the new tokens, extending one cache per layer.
  Tensor infer(const Tensor& tokens, const CachedStep& step, std::vector<LayerCache>& caches, Arena& arena) const;
  // Every block's untrained state, in layer order, and its per-step update.
  void buffers(std::vector<std::pair<std::string, Tensor>>& out) const {
    for (const auto& b : blocks_) b->buffers(out);
  }
  void after_optimizer_step(const Tensor& apply) {
    for (auto& b : blocks_) b->after_optimizer_step(apply);
  }
  void set_router_objective(const RouterObjective& objective) {
    for (auto& b : blocks_) b->set_router_objective(objective);
  }
  // The MoE layers' names in order, and their statistics' slots: kRoutingStatValues
  // consecutive values of `values` each, in that order.
  std::vector<std::string> routing_layers() const {
    std::vector<std::string> names;
    for (const auto& b : blocks_)
      if (std::string name = b->routing_layer(); !name.empty()) names.push_back(std::move(name));
    return names;
  }
  // The MoE layers' expert loads in layer order (Mlp::routing_load).
  std::vector<Tensor> routing_loads() const {
    std::vector<Tensor> loads;
    for (const auto& b : blocks_)
      if (Tensor load = b->routing_load(); load.defined()) loads.push_back(std::move(load));
    return loads;
  }
  void set_routing_stats(const Tensor& values) {
    int64_t next = 0;
    for (auto& b : blocks_)
      if (!b->routing_layer().empty()) {
        b->set_routing_stats(values.slice(0, next, next + kRoutingStatValues));
        next += kRoutingStatValues;
      }
  }

 private:
  double embedding_scale_;
  std::shared_ptr<Param> embed_;
  std::shared_ptr<const PositionEncoding> position_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<RecomputePolicy> recompute_;
  // Where each part's parameters begin in the store's declaration order.
  size_t embed_first_ = 0, final_norm_first_ = 0;
  std::vector<size_t> block_first_;
};

}  // namespace amber
