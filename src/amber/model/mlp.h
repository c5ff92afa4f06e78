// Feed-forward components behind the `mlp` registry: swiglu (default) and geglu
// read one fused gate_up projection [2H, D] (gate first); gelu is the plain
// two-layer MLP without a gate; moe (model/moe.h) is the Mixture-of-Experts layer that
// Block builds for the sparse layers of a config with model.moe_experts.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amber/core/arena.h"
#include "amber/model/config.h"
#include "amber/model/param_store.h"
#include "amber/model/registry.h"
#include "amber/ops/norm.h"

namespace amber {

struct MlpSpec {
  std::string name;  // e.g. "layers.3.mlp"
  int dim = 0;
  int hidden = 0;
  bool bias = false;
  const ModelConfig* config = nullptr;  // init stds (ModelConfig::projection_init_std)
  ParamStore* store = nullptr;          // where the parameters are declared
};

// How an MoE layer's experts were used over an optimizer step (moe_end_step's values).
struct RoutingStats {
  std::string layer;           // e.g. "layers.3.mlp"
  double max_over_mean = 0;    // the busiest expert's rows over the mean
  int dead_experts = 0;        // experts that got no row
  double bias_spread = 0;      // max - min of the balance bias (0 without one)
};
inline constexpr int kRoutingStatValues = 3;  // max_over_mean, dead_experts, bias_spread

// A model's MoE layers' RoutingStats in one line's worth: the worst layer's busiest
// expert over the mean (and that layer), the mean of that ratio over the layers, the
// dead experts of every layer and the widest bias spread. All zero for no layers.
struct RoutingSummary {
  double worst_max_over_mean = 0;
  std::string worst_layer;
  double mean_max_over_mean = 0;
  int dead_experts = 0;
  double bias_spread = 0;
};
RoutingSummary summarize_routing(const std::vector<RoutingStats>& layers);

// Where an MoE layer's router adds its auxiliary losses in a training micro-batch: the
// batch's document bounds (cu_seqlens i32 on the device), the objective's loss scale and
// the step's router-loss sum (f64 [1] each, step slots).
struct RouterObjective {
  Tensor cu_seqlens, loss_scale, sum;
};

class Mlp {
 public:
  // What a forward keeps for its backward. Each implementation defines its own (an MoE
  // layer keeps its routing) and makes it with new_saved(); the caller owns it, so
  // several micro-batches may be in flight.
  struct Saved {
    virtual ~Saved() = default;
  };
  virtual ~Mlp() = default;
  virtual std::unique_ptr<Saved> new_saved() const = 0;
  // The output, or with `into` (residual r, scale s, sum): *into.sum = r + s * output,
  // added by the down projection as it writes (and returned). `saved` is new_saved()'s.
  virtual Tensor forward(const Tensor& h, Saved& saved, Arena& arena, const ResidualAdd& into = {}) const = 0;
  virtual Tensor backward(const Tensor& dout, const Saved& saved, Arena& arena) const = 0;
  // Model state that is not trained (an MoE router's balance bias), appended as named
  // tensors sharing its storage: checkpoints keep it beside the parameters.
  virtual void buffers(std::vector<std::pair<std::string, Tensor>>& out) const {}
  // Runs after every optimizer step with the step's apply flag (f64 [1] on the device:
  // 1 where the update was applied).
  virtual void after_optimizer_step(const Tensor& apply) {}
  // The training micro-batch the next forward and backward belong to (MoE layers only).
  virtual void set_router_objective(const RouterObjective& objective) {}
  // MoE layers: the layer's name, and where it writes its routing statistics after each
  // optimizer step (f64 [kRoutingStatValues] on the device), so that a step's are read
  // with its other statistics. Empty for a dense MLP.
  virtual std::string routing_layer() const { return {}; }
  virtual void set_routing_stats(const Tensor& values) {}
  // MoE layers: the rows each expert received in the step so far (f64 [experts] on the
  // device), which data parallel sums across ranks before after_optimizer_step reads it.
  virtual Tensor routing_load() const { return {}; }
};

const Registry<Mlp, const MlpSpec&>& mlp_registry();

}  // namespace amber
