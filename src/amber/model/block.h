// Block: one pre-norm transformer layer,
//   x1 = x  + rs * [post_norm](attn(norm(x)))
//   x2 = x1 + rs * [post_norm](mlp(norm(x1)))
// with components resolved from the registries once, at construction.
#pragma once

#include <memory>
#include <vector>

#include "amber/core/arena.h"
#include "amber/core/seq_info.h"
#include "amber/model/attention_layer.h"
#include "amber/model/config.h"
#include "amber/model/mlp.h"
#include "amber/model/norm_layer.h"

namespace amber {

// The residual stream between blocks: x + scale * branch with the add not yet done
// (branch undefined: x alone, as a block whose output projections do its adds returns
// it). Whatever normalises the stream next does the add in the same pass (pending():
// the norm writes the sum into `sum`), so the stream is not read and written once more
// by an add of its own.
struct ResidualStream {
  Tensor x, branch;
  mutable Tensor sum;  // written by the norm that does the add (through pending())
  double scale = 1.0;

  ResidualStream(Tensor x_) : x(std::move(x_)) {}  // implicit: a tensor is a stream with nothing pending
  ResidualStream(Tensor x_, Tensor branch_, Tensor sum_, double scale_)
      : x(std::move(x_)), branch(std::move(branch_)), sum(std::move(sum_)), scale(scale_) {}

  // The norm's residual add ({} when nothing is pending).
  ResidualAdd pending() const;
  // The stream's value once the pending add is done.
  const Tensor& value() const { return branch.defined() ? sum : x; }
  // The stream with the add done by itself (for a consumer that does not normalise it).
  ResidualStream materialised() const;
};

class Block {
 public:
  struct Saved {
    Tensor input;  // kept under every recompute policy
    Tensor mid;    // x1
    Norm::Saved attn_norm, mlp_norm, post_attn_norm, post_mlp_norm;
    std::unique_ptr<AttentionLayer::Saved> attn;  // the components' own (made by forward)
    std::unique_ptr<Mlp::Saved> mlp;
  };

  // Declares the layer's parameters in `store` in the model's order: attention norm,
  // attention, its post-norm, MLP norm, MLP, its post-norm.
  Block(const ModelConfig& config, int index, ParamStore& store, std::shared_ptr<const PositionEncoding> position);
  // Intermediate tensors come from `saves`; the output's sum buffer from `outputs`. The
  // output's add is done by the MLP's down projection, or (post-norms, or a bias with
  // a residual scale) left pending with the MLP branch in `saves`.
  ResidualStream forward(const ResidualStream& in, const SeqInfo& seq, Saved& saved, Arena& saves,
                         Arena& outputs) const;
  // dx holds d(loss)/d(output) on entry and d(loss)/d(input) on return (updated in
  // place, since the residual stream passes it through). Temporaries come from `arena`.
  void backward(Tensor& dx, const SeqInfo& seq, const Saved& saved, Arena& arena) const;
  // Generation: the forward over new tokens with the layer's KV cache.
  Tensor infer(const Tensor& x, const CachedStep& step, LayerCache& cache, Arena& arena) const;
  // The MLP's untrained state and its per-step update (Mlp::buffers, after_optimizer_step).
  void buffers(std::vector<std::pair<std::string, Tensor>>& out) const { mlp_->buffers(out); }
  void after_optimizer_step(const Tensor& apply) { mlp_->after_optimizer_step(apply); }
  std::string routing_layer() const { return mlp_->routing_layer(); }
  void set_routing_stats(const Tensor& values) { mlp_->set_routing_stats(values); }
  Tensor routing_load() const { return mlp_->routing_load(); }
  void set_router_objective(const RouterObjective& objective) { mlp_->set_router_objective(objective); }

 private:
  Tensor branch_gradient(const Tensor& dx, Arena& arena) const;

  double residual_scale_;
  bool adds_in_projections_;  // the residual adds done by the branches' output projections
  std::unique_ptr<Norm> attn_norm_, mlp_norm_, post_attn_norm_, post_mlp_norm_;
  std::unique_ptr<AttentionLayer> attn_;
  std::unique_ptr<Mlp> mlp_;
};

}  // namespace amber
